"""Isotropic phase function (Mitsuba 3 ``isotropic``): p = 1/(4π); uniform sampling (weight 1)."""
import taichi as ti

from ..core.math import INV_FOUR_PI
from .hg import direction_about


class Isotropic:
    NAME = "isotropic"
    KEYS = ()

    @staticmethod
    @ti.func
    def eval(st: ti.template(), m, d_in, d_out):
        return INV_FOUR_PI

    @staticmethod
    @ti.func
    def sample(st: ti.template(), m, d_in, u):
        return direction_about(d_in, 2.0 * u[0] - 1.0, u[1]), INV_FOUR_PI

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), m, d_in, d_out, d_val):
        pass
