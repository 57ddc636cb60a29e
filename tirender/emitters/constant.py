"""Constant environment emitter (Mitsuba 3 ``constant``): Le(ω) = radiance for every direction;
uniform sphere sampling. Differentiable: radiance (RGB)."""
import taichi as ti

from ..core.math import BIG, INV_FOUR_PI, vec2
from ..core.warp import square_to_uniform_sphere
from ..schema import Texture
from .base import INFINITE, DirectionSample, infinite_ray, slot, slot_adjoint

_RADIANCE = 0


class Constant:
    NAME = "constant"
    KEYS = (Texture("radiance", 3, default=1.0, lo=0.0, doc="radiance Le from every direction"),)
    FLAGS = INFINITE

    @staticmethod
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
        ds.le_rgb = slot(st, e, _RADIANCE, ds.uv)
        ds.weight_rgb = ds.le_rgb / ds.pdf
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A uniform direction, from a disk covering the scene's bounding sphere (base.infinite_ray)."""
        return infinite_ray(Constant, st, e, u_pos, u_dir, center, radius)

    @staticmethod
    @ti.func
    def pdf_direction(st: ti.template(), e, ref_p, q):
        return INV_FOUR_PI

    @staticmethod
    @ti.func
    def eval(st: ti.template(), e, q):
        return slot(st, e, _RADIANCE, vec2(0.5))

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        slot_adjoint(st, e, _RADIANCE, vec2(0.5), d_le)
