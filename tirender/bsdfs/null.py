"""Null BSDF (Mitsuba 3 ``null``): an index-matched interface that the path passes unchanged —
the boundary of a participating medium. sample gives wo = -wi, weight 1, pdf 1, delta; eval and
pdf are 0. Volume integrators cross it without counting a bounce (flag NULL); its null transmission is 1."""
import taichi as ti

from ..core import mueller as mu
from ..variants import spec, struct
from .base import BOTH_SIDES, DELTA, NULL, TRANSMISSION, BsdfSample, dirac


@dirac
class Null:
    NAME = "null"
    KEYS = ()
    FLAGS = DELTA | NULL | BOTH_SIDES | TRANSMISSION
    Params = struct(none=ti.i32)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Null.Params(none=0)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        return BsdfSample(wo=-wi, weight=spec(1.0), pdf=1.0, eta=1.0, delta=1, valid=1, passthrough=1)

    @staticmethod
    @ti.func
    def null_transmission_at(st: ti.template(), ctx, wi, inner: ti.template()):
        return spec(1.0)

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        """Light passes unchanged (spectral_polarized)."""
        return mu.identity_lanes()
