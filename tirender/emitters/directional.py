"""Directional emitter: irradiance E arriving along direction ``em_dir`` (propagation direction).
Delta emitter; Le/pdf = E. Differentiable: irradiance."""
import taichi as ti

from ..core.math import BIG, vec2
from ..textures import tex_eval, tex_eval_adjoint
from .common import DirectionSample


@ti.func
def sample_direction(st: ti.template(), e, ref_p, u):
    ds = DirectionSample(delta=1, emitter=e, pdf=1.0, scale=1.0)
    ds.d = -st.em_dir[e]
    ds.n = st.em_dir[e]
    ds.dist = BIG
    ds.p = ref_p + ds.d * 1e6
    ds.uv = vec2(0.5)
    ds.le = tex_eval(st, st.em_tex[e], ds.uv)
    ds.weight = ds.le
    return ds


@ti.func
def eval_adjoint_sample(st: ti.template(), e, ds, d_le):
    tex_eval_adjoint(st, st.em_tex[e], ds.uv, d_le)
