"""Thin dielectric sheet (Mitsuba 3 ``thindielectric``): a window pane of negligible thickness.
Light is reflected specularly or passes straight through (wo = -wi, no refraction offset); the
internal reflections inside the sheet are summed in closed form:
    R = r + t r t + t r³ t + ... = 2 r / (1 + r),   T = 1 - R,   r = F(|cos θi|, η)
sample picks reflection with probability R (weight = specular_reflectance) and transmission
otherwise (weight = specular_transmittance); both are Dirac lobes, eval and pdf are 0.
Two-sided. η = int_ior / ext_ior; ``int_ior`` is a pool parameter (a number, an IOR name or a one-channel
bitmap, as dielectric's; no dispersion: wo does not depend on η).

The transmission is Mitsuba's null component (flag PASS, sampled type ``passthrough``): volume integrators do not
count it as a bounce, and their shadow rays cross the sheet weighted by its null transmission (1 − R)·
specular_transmittance (R at the shadow ray's |cos θ|), differentiable in specular_transmittance and int_ior.

Derivatives: detached PRB does not differentiate Dirac lobes (as Mitsuba's prb), so int_ior gets 0 there.
Attached PRB (``prb_attached``) differentiates the sampled lobe's probability P = R or 1 − R (the weights are
constants): through cos θi (``dlog``: ∂ ln P/∂cos θi) and through η (``dirac_ior_adjoint_at``: ∂ ln P/∂η into
int_ior); the directions do not depend on η.
"""
import taichi as ti

from ..schema import IorTexture
from ..variants import spec
from .base import (BOTH_SIDES, DELTA, PASS, TRANSMISSION, BsdfSample, const, dirac, invalid_sample, slot_float,
                   slot_float_adjoint, slot_rgb, slot_rgb_adjoint)
from .dielectric import DIELECTRIC_KEYS, SmoothInterface, dlog_lobe, ior_constants
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_dielectric_deta, reflect

_SPEC, _TRANS, _IOR = 0, 1, 2   # texture slots
EXT_IOR = 1                     # constant: ext_ior (0: η at a constant int_ior, for ior_constants' range check)


@dirac
class ThinDielectric(SmoothInterface):
    NAME = "thindielectric"
    KEYS = DIELECTRIC_KEYS[:2] + (
        IorTexture("int_ior", default=1.5046, doc="IOR of the sheet (BK7 glass); a differentiable parameter "
                                                  "(attached PRB: the lobes' probabilities)"),
        DIELECTRIC_KEYS[3])
    N_CONST = EXT_IOR + 1
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION | PASS

    @staticmethod
    def constants(values, file, key):
        """[η at a constant int_ior (range-checked; a bitmap: checked per texel, 1 here), ext_ior]."""
        ior = values["int_ior"] if not isinstance(values["int_ior"], dict) else values["ext_ior"]
        return ior_constants(dict(values, int_ior=ior), file, key) + [values["ext_ior"]]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return SmoothInterface.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                      eta=slot_float(st, ctx, _IOR) / const(st, ctx, EXT_IOR))

    @staticmethod
    @ti.func
    def reflectance(p, cos_theta_i):
        """R = 2r / (1 + r) with r = F(|cos θi|, η): the sheet's total reflectance."""
        r, ct, ei, et = fresnel_dielectric(ti.abs(cos_theta_i), p.eta)
        return 2.0 * r / (1.0 + r)

    @staticmethod
    @ti.func
    def _dlog_p(eta, cos_theta_i, dr, reflected):
        """∂ ln P of the sampled lobe (P = R or 1 − R) for a change dr of r = F(|cos θi|, η)."""
        r, ct, ei, et = fresnel_dielectric(ti.abs(cos_theta_i), eta)
        return dlog_lobe(2.0 * r / (1.0 + r), 2.0 * dr / ((1.0 + r) * (1.0 + r)), reflected)

    @staticmethod
    @ti.func
    def dlog(p, wi, reflected):
        """∂ ln P/∂cos θi of the sampled lobe's probability P = R (reflection) or 1 − R (per channel)."""
        c = wi[2]
        dr = fresnel_dielectric_dcos(ti.abs(c), p.eta) * (1.0 if c >= 0.0 else -1.0)
        return spec(ThinDielectric._dlog_p(p.eta, c, dr, reflected))

    @staticmethod
    @ti.func
    def dirac_ior_adjoint_at(st: ti.template(), ctx, wi, reflected, k, g_r, inner: ti.template()):
        """Attached PRB: scatter into int_ior the derivative of k ln P of the sampled lobe (k: δL times the radiance
        still to come, summed over lanes). g_r (∂loss/∂η_ti of a refracted direction) does not apply: the
        transmitted direction is −wi whatever η."""
        ext = const(st, ctx, EXT_IOR)
        eta = slot_float(st, ctx, _IOR) / ext
        dr = fresnel_dielectric_deta(ti.abs(wi[2]), eta)
        slot_float_adjoint(st, ctx, _IOR, k * ThinDielectric._dlog_p(eta, wi[2], dr, reflected) / ext)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        if wi[2] != 0.0:
            R = ThinDielectric.reflectance(p, wi[2])
            if u1 <= R:
                s = BsdfSample(wo=reflect(wi), weight=p.specular, pdf=R, eta=1.0, delta=1, valid=1)
            else:
                s = BsdfSample(wo=-wi, weight=p.transmittance, pdf=1.0 - R, eta=1.0, delta=1, valid=1, passthrough=1)
            if s.pdf <= 0.0:
                s.valid = 0
        return s

    @staticmethod
    @ti.func
    def null_transmission_at(st: ti.template(), ctx, wi, inner: ti.template()):
        """(1 − R(|cos θi|, η)) · specular_transmittance (Mitsuba's eval_null_transmission)."""
        p = ThinDielectric.fetch(st, ctx)
        return (1.0 - ThinDielectric.reflectance(p, wi[2])) * p.transmittance

    @staticmethod
    @ti.func
    def null_transmission_adjoint_at(st: ti.template(), ctx, wi, d, inner: ti.template()):
        """∂<d, (1 − R) T_s>/∂π: into specular_transmittance ((1 − R) d) and int_ior (−<d, T_s> ∂R/∂η / ext_ior,
        R = 2r / (1 + r), ∂R/∂r = 2 / (1 + r)²)."""
        p = ThinDielectric.fetch(st, ctx)
        c = ti.abs(wi[2])
        r, ct, ei, et = fresnel_dielectric(c, p.eta)
        slot_rgb_adjoint(st, ctx, _TRANS, d * (1.0 - 2.0 * r / (1.0 + r)))
        dR = 2.0 / ((1.0 + r) * (1.0 + r)) * fresnel_dielectric_deta(c, p.eta)
        slot_float_adjoint(st, ctx, _IOR, -(d * p.transmittance).sum() * dR / const(st, ctx, EXT_IOR))
