"""Smooth dielectric (Mitsuba 3 ``dielectric``): Dirac reflection + refraction, two-sided by nature
(wi below the surface means the ray is inside; η is inverted).

eval / pdf are 0 (Dirac lobes). sample picks reflection with probability F = Fresnel(cos θi):
    reflection: wo = reflect(wi), pdf = F,     weight = specular,                  eta = 1
    refraction: wo = refract(...), pdf = 1-F,  weight = transmittance * eta_ti²,   eta = eta_it
(radiance mode: the 1/η² solid-angle compression of radiance is in the weight); delta = 1.
Attached PRB: the lobe's probability moves with cos θi (``dlog``: ∂ ln F/∂cos or ∂ ln(1 - F)/∂cos).

Dispersion (``cauchy_b`` > 0, spectral variant; docs/variants.md): η(λ) = (int_ior + B (1/λ² − 1/λ_D²)) / ext_ior
with λ in µm and λ_D = 0.5893 µm (``int_ior`` is the IOR at the sodium D line). Each lane of a path would
refract its own way, so the interface scatters the first (hero) wavelength with its η and ends the other two
lanes: weight × (3, 0, 0), which keeps the film's estimate Σ_i c(λ_i) L_i / 3 unbiased. In the rgb and mono
variants the IOR is η(λ_D).
"""
import taichi as ti

from .. import variants
from ..core.math import vec3
from ..errors import ConfigError
from ..schema import Ior, Number, Texture
from .base import BOTH_SIDES, DELTA, TRANSMISSION, BsdfSample, const, dirac, invalid_sample, slot_rgb
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, reflect, refract

_SPEC, _TRANS = 0, 1   # texture slots
ETA = 0                # constant: relative IOR int_ior / ext_ior
CAUCHY_B = 1           # constant (dielectric): Cauchy B / ext_ior, µm²
LAMBDA_D = 0.5893      # µm: the wavelength at which int_ior is given (sodium D line)

DIELECTRIC_KEYS = (
    Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the reflected part"),
    Texture("specular_transmittance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the transmitted part"),
    Ior("int_ior", default=1.5046, doc="interior IOR (BK7 glass)"),
    Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
)


def ior_constants(values, file, key):
    """[η = int_ior / ext_ior]: the constants of the models with an interface."""
    eta = values["int_ior"] / values["ext_ior"]
    if not 1e-3 < eta < 1e3:
        raise ConfigError(f"relative IOR int_ior / ext_ior = {eta:g} is out of range", file, f"{key}.int_ior")
    return [eta]


class SmoothInterface:
    """Keys, parameter record and fetch shared by the smooth dielectric models (dielectric,
    thindielectric): reflectance and transmittance scales, the relative IOR."""
    KEYS = DIELECTRIC_KEYS
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    Params = ti.types.struct(specular=vec3, transmittance=vec3, eta=float)
    constants = staticmethod(ior_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return SmoothInterface.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                      eta=const(st, ctx, ETA))


def dispersive_constants(values, file, key):
    """[η at λ_D, B / ext_ior] (dielectric)."""
    return ior_constants(values, file, key) + [values["cauchy_b"] / values["ext_ior"]]


@dirac
class Dielectric(SmoothInterface):
    NAME = "dielectric"
    KEYS = DIELECTRIC_KEYS + (
        Number("cauchy_b", default=0.0, lo=0.0, hi=1.0,
               doc="Cauchy dispersion B in µm²: η(λ) = int_ior + B (1/λ² − 1/0.5893²), λ in µm (spectral variant; "
                   "e.g. BK7 0.0042, dense flint 0.0135); 0: none"),)
    Params = ti.types.struct(specular=vec3, transmittance=vec3, eta=float, disperse=ti.i32)
    constants = staticmethod(dispersive_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        eta = const(st, ctx, ETA)
        disperse = 0
        if ti.static(variants.spectral()):
            b = const(st, ctx, CAUCHY_B)
            if b > 0.0:
                lam_um = ctx.lam[0] * 1e-3
                eta += b * (1.0 / (lam_um * lam_um) - 1.0 / (LAMBDA_D * LAMBDA_D))
                disperse = 1
        return Dielectric.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                 eta=eta, disperse=disperse)

    @staticmethod
    @ti.func
    def dlog(p, wi, reflected):
        """∂ ln P/∂cos θi of the sampled lobe's probability P = F (reflection) or 1 - F."""
        r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(wi[2], p.eta)
        dF = fresnel_dielectric_dcos(wi[2], p.eta)
        res = 0.0
        if reflected:
            if r_i > 0.0:
                res = dF / r_i
        elif r_i < 1.0:
            res = -dF / (1.0 - r_i)
        return vec3(res)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        cos_i = wi[2]
        if cos_i != 0.0:
            r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(cos_i, p.eta)
            if u1 <= r_i:
                s = BsdfSample(wo=reflect(wi), weight=p.specular, pdf=r_i, eta=1.0, delta=1, valid=1)
            else:
                s = BsdfSample(wo=refract(wi, cos_t, eta_ti), weight=p.transmittance * (eta_ti * eta_ti),
                               pdf=1.0 - r_i, eta=eta_it, delta=1, valid=1)
            if s.pdf <= 0.0:
                s.valid = 0
            if p.disperse:
                s.weight *= vec3(3.0, 0.0, 0.0)    # the hero wavelength goes on alone (module doc)
        return s
