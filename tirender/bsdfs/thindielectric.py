"""Thin dielectric sheet (Mitsuba 3 ``thindielectric``): a window pane of negligible thickness.
Light is reflected specularly or passes straight through (wo = -wi, no refraction offset); the
internal reflections inside the sheet are summed in closed form:
    R = r + t r t + t r³ t + ... = 2 r / (1 + r),   T = 1 - R,   r = F(|cos θi|, η)
sample picks reflection with probability R (weight = specular_reflectance) and transmission
otherwise (weight = specular_transmittance); both are Dirac lobes, eval and pdf are 0.
Two-sided. Detached PRB does not differentiate Dirac lobes (as Mitsuba's prb).
"""
import taichi as ti

from .base import BsdfSample, dirac, invalid_sample
from .dielectric import SmoothInterface
from .fresnel import fresnel_dielectric, reflect


@dirac
class ThinDielectric(SmoothInterface):
    NAME = "thindielectric"

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
