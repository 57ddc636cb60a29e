"""Thin dielectric sheet (Mitsuba 3 ``thindielectric``): a window pane of negligible thickness.
Light is reflected specularly or passes straight through (wo = -wi, no refraction offset); the
internal reflections inside the sheet are summed in closed form:
    R = r + t r t + t r³ t + ... = 2 r / (1 + r),   T = 1 - R,   r = F(|cos θi|, η)
sample picks reflection with probability R (weight = specular_reflectance) and transmission
otherwise (weight = specular_transmittance); both are Dirac lobes, eval and pdf are 0.
Two-sided. Detached PRB does not differentiate Dirac lobes (as Mitsuba's prb).
"""
import taichi as ti

from ..core.math import vec3
from .base import (BOTH_SIDES, DELTA, TRANSMISSION, BsdfSample, const, invalid_sample, leaf, no_dir_grads,
                   slot_rgb, slot_rgb_adjoint)
from .dielectric import DIELECTRIC_KEYS, ETA, relative_ior
from .fresnel import fresnel_dielectric, reflect

_SPEC, _TRANS = 0, 1   # texture slots


@leaf
class ThinDielectric:
    NAME = "thindielectric"
    KEYS = DIELECTRIC_KEYS
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    Params = ti.types.struct(specular=vec3, transmittance=vec3, eta=float)

    @staticmethod
    def build(b, row, values, key):
        row.floats = [relative_ior(values, b.file, key)]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return ThinDielectric.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                     eta=const(st, ctx, ETA))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        slot_rgb_adjoint(st, ctx, _TRANS, g.transmittance)

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        return vec3(0.0)

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return 0.0

    @staticmethod
    @ti.func
    def reflectance(p, cos_theta_i):
        """R = 2r / (1 + r) with r = F(|cos θi|, η): the sheet's total reflectance."""
        r, ct, ei, et = fresnel_dielectric(ti.abs(cos_theta_i), p.eta)
        return 2.0 * r / (1.0 + r)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        if wi[2] != 0.0:
            R = ThinDielectric.reflectance(p, wi[2])
            if u1 <= R:
                s = BsdfSample(wo=reflect(wi), weight=p.specular, pdf=R, eta=1.0, delta=1, valid=1)
            else:
                s = BsdfSample(wo=-wi, weight=p.transmittance, pdf=1.0 - R, eta=1.0, delta=1, valid=1)
            if s.pdf <= 0.0:
                s.valid = 0
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        return ThinDielectric.Params(specular=vec3(0.0), transmittance=vec3(0.0), eta=0.0)

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        return no_dir_grads()
