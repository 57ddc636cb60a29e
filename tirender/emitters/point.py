"""Isotropic point light of intensity I (W/sr per unit area-less): Le/pdf = I / dist². Delta emitter.
Differentiable: intensity (a 1x1 texture)."""
import taichi as ti

from ..core.math import vec2
from ..textures import tex_eval, tex_eval_adjoint
from .common import DirectionSample


@ti.func
def sample_direction(st: ti.template(), e, ref_p, u):
    ds = DirectionSample(delta=1, emitter=e, pdf=1.0)
    p = st.em_pos[e]
    dv = p - ref_p
    dist2 = dv.dot(dv)
    dist = ti.sqrt(dist2)
    ds.p = p
    ds.d = dv / ti.max(dist, 1e-20)
    ds.n = -ds.d
    ds.dist = dist
    ds.uv = vec2(0.5)
    if dist > 0.0:
        ds.scale = 1.0 / dist2
        ds.le = tex_eval(st, st.em_tex[e], ds.uv) * ds.scale
        ds.weight = ds.le
    return ds


@ti.func
def eval_adjoint_sample(st: ti.template(), e, ds, d_le):
    """Adjoint of the sampled Le = I / dist² w.r.t. the intensity texture."""
    tex_eval_adjoint(st, st.em_tex[e], ds.uv, d_le * ds.scale)
