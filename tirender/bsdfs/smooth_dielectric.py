"""Smooth dielectric (Mitsuba 3 ``dielectric``): Dirac reflection + refraction.

Two-sided by nature (wi may lie below the surface: the ray is inside, η is inverted).
eval / pdf are 0 (Dirac lobes). sample picks reflection with probability F = Fresnel(cos θi)
and refraction otherwise:
    reflection: wo = reflect(wi), pdf = F,     weight = specular,                  eta = 1
    refraction: wo = refract(...), pdf = 1-F,  weight = transmittance * eta_ti²,   eta = eta_it
(radiance mode: the 1/η² solid-angle compression of radiance is in the weight).
delta = 1. eval_adjoint is 0 (eval is 0).
"""
import taichi as ti

from ..core.math import vec3
from .common import BsdfParams, BsdfSample
from .fresnel import fresnel_dielectric, reflect, refract


@ti.func
def eval(p: BsdfParams, wi, wo):
    return vec3(0.0)


@ti.func
def pdf(p: BsdfParams, wi, wo):
    return 0.0


@ti.func
def sample(p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=1, valid=0)
    cos_i = wi[2]
    if cos_i != 0.0:
        r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(cos_i, p.eta)
        if u1 <= r_i:
            s.wo = reflect(wi)
            s.pdf = r_i
            s.weight = p.specular
            s.eta = 1.0
        else:
            s.wo = refract(wi, cos_t, eta_ti)
            s.pdf = 1.0 - r_i
            s.weight = p.transmittance * (eta_ti * eta_ti)
            s.eta = eta_it
        s.valid = 1 if s.pdf > 0.0 else 0
    return s


@ti.func
def eval_adjoint(p: BsdfParams, wi, wo, d_out):
    return BsdfParams()
