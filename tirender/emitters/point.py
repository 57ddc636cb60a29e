"""Isotropic point light (Mitsuba 3 ``point``) of intensity I (W sr⁻¹): Le/pdf = I / dist² (the
sample's scale 1/dist²). Delta emitter (never hit). Differentiable: intensity (RGB)."""
import taichi as ti

from ..core.math import FOUR_PI, vec2, vec3
from ..core.warp import square_to_uniform_sphere
from ..schema import Texture, Vec3
from .base import AtPosition, DeltaEmitter, DirectionSample, slot

_INTENSITY = 0


class Point(AtPosition, DeltaEmitter):
    NAME = "point"
    KEYS = (Texture("intensity", 3, default=1.0, lo=0.0, doc="radiant intensity I (W sr⁻¹)"),
            Vec3("position", default=(0.0, 0.0, 0.0), doc="position"))

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds, dist2 = point_source(st, e, ref_p)
        if ds.dist > 0.0:
            ds.scale = 1.0 / dist2
            ds = lit(ds, slot(st, e, _INTENSITY, ds.uv) * ds.scale)
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A uniform direction (pdf 1/4π): weight 4π I."""
        return (st.em_pos[e], square_to_uniform_sphere(u_dir), vec3(0.0), vec2(0.5),
                slot(st, e, _INTENSITY, vec2(0.5)) * FOUR_PI, 0.0)


@ti.func
def lit(ds, le):
    """Sample ds of a light at a point carrying Le = le (pdf 1: Le/pdf = le as well); shared with spot lights and
    projectors."""
    ds.le_rgb = le
    ds.weight_rgb = le
    return ds


@ti.func
def point_source(st: ti.template(), e, ref_p):
    """(the direction sample of a point source at st.em_pos[e] seen from ref_p — p, d, n, dist, uv,
    delta, pdf 1, scale and radiance still 0 —, dist²); shared with spot lights."""
    ds = DirectionSample(delta=1, emitter=e, pdf=1.0, scale=0.0)
    p = st.em_pos[e]
    dv = p - ref_p
    dist2 = dv.dot(dv)
    dist = ti.sqrt(dist2)
    ds.p = p
    ds.d = dv / ti.max(dist, 1e-20)
    ds.n = -ds.d
    ds.dist = dist
    ds.uv = vec2(0.5)
    return ds, dist2
