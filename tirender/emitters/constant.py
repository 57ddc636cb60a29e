"""Constant environment emitter: Le(ω) = radiance for every direction; uniform sphere sampling.
Differentiable: radiance."""
import taichi as ti

from ..core.math import BIG, INV_FOUR_PI, vec2
from ..core.warp import square_to_uniform_sphere
from ..textures import tex_eval, tex_eval_adjoint
from .common import DirectionSample


@ti.func
def sample_direction(st: ti.template(), e, ref_p, u):
    ds = DirectionSample(delta=0, emitter=e, scale=1.0)
    d = square_to_uniform_sphere(u)
    ds.d = d
    ds.n = -d
    ds.dist = BIG
    ds.p = ref_p + d * 1e6
    ds.uv = vec2(0.5)
    ds.pdf = INV_FOUR_PI
    ds.le = tex_eval(st, st.em_tex[e], ds.uv)
    ds.weight = ds.le / ds.pdf
    return ds


@ti.func
def pdf_direction(st: ti.template(), e, d):
    return INV_FOUR_PI


@ti.func
def eval(st: ti.template(), e, d):
    """Radiance arriving from direction d (unit, pointing away from the scene)."""
    return tex_eval(st, st.em_tex[e], vec2(0.5))


@ti.func
def eval_uv(st: ti.template(), e, d):
    return vec2(0.5)


@ti.func
def eval_adjoint(st: ti.template(), e, d, d_le):
    tex_eval_adjoint(st, st.em_tex[e], vec2(0.5), d_le)
