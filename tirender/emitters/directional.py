"""Directional emitter (Mitsuba 3 ``directional``): irradiance E arriving along ``direction`` (the
direction of propagation). Delta emitter; Le/pdf = E. Differentiable: irradiance (RGB)."""
import numpy as np
import taichi as ti

from ..core.math import BIG, vec2
from ..errors import ConfigError
from ..schema import Texture, Vec3
from .base import DeltaEmitter, DirectionSample, infinite_ray, slot

_IRRADIANCE = 0


class Directional(DeltaEmitter):
    NAME = "directional"
    KEYS = (Texture("irradiance", 3, default=1.0, lo=0.0, doc="irradiance E (W m⁻²) on a surface facing the light"),
            Vec3("direction", default=(0.0, 0.0, -1.0), doc="direction of propagation"))
    MITSUBA_DEFAULTS = {"direction": [0.0, 0.0, 1.0]}   # Mitsuba 3's directional.cpp: +z (to_world's z axis)

    @staticmethod
    def build(b, row, values, key):
        d = np.asarray(values["direction"], float)
        if np.linalg.norm(d) == 0:
            raise ConfigError("direction has zero length", b.file, f"{key}.direction")
        row.direction = tuple(d / np.linalg.norm(d))

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds = DirectionSample(delta=1, emitter=e, pdf=1.0, scale=1.0)
        ds.d = -st.em_dir[e]
        ds.n = st.em_dir[e]
        ds.dist = BIG
        ds.p = ref_p + ds.d * 1e6
        ds.uv = vec2(0.5)
        ds.le_rgb = slot(st, e, _IRRADIANCE, ds.uv)
        ds.weight_rgb = ds.le_rgb
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """Along the direction, from a disk covering the scene's bounding sphere: weight E π r²."""
        return infinite_ray(Directional, st, e, u_pos, u_dir, center, radius)
