"""Smooth conductor (Mitsuba 3 ``conductor``): a Dirac mirror, one-sided.

eval / pdf are 0 (Dirac lobe); sample returns wo = reflect(wi), pdf = 1, delta = 1 and
weight = specular * F, where F = fresnel_conductor(cos θi, cond_eta, cond_k), or 1 when
``p.cond_none == 1`` (Mitsuba's material "none"). eval_adjoint is 0 (eval is 0).
"""
import taichi as ti

from ..core.math import vec3
from .common import BsdfParams, BsdfSample
from .fresnel import fresnel_conductor, reflect


@ti.func
def fresnel_term(p: BsdfParams, cos_theta_i):
    F = vec3(1.0)
    if p.cond_none == 0:
        F = fresnel_conductor(cos_theta_i, p.cond_eta, p.cond_k)
    return F


@ti.func
def eval(p: BsdfParams, wi, wo):
    return vec3(0.0)


@ti.func
def pdf(p: BsdfParams, wi, wo):
    return 0.0


@ti.func
def sample(p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=1, valid=0)
    if wi[2] > 0.0:
        s.wo = reflect(wi)
        s.pdf = 1.0
        s.weight = p.specular * fresnel_term(p, wi[2])
        s.valid = 1
    return s


@ti.func
def eval_adjoint(p: BsdfParams, wi, wo, d_out):
    return BsdfParams()
