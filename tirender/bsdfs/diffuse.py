"""Lambertian (one-sided) BSDF: f = ρ/π for wi, wo in the upper hemisphere.

Differentiable: reflectance ρ (RGB). Primal and adjoint side by side.
"""
import taichi as ti

from ..core.math import INV_PI, vec3
from ..core.warp import square_to_cosine_hemisphere, square_to_cosine_hemisphere_pdf
from .common import BsdfParams, BsdfSample


@ti.func
def eval(p: BsdfParams, wi, wo):
    """f(wi, wo) |cos θo| = ρ/π cos θo (0 below either hemisphere)."""
    res = vec3(0.0)
    if wi[2] > 0.0 and wo[2] > 0.0:
        res = p.reflectance * (INV_PI * wo[2])
    return res


@ti.func
def pdf(p: BsdfParams, wi, wo):
    res = 0.0
    if wi[2] > 0.0 and wo[2] > 0.0:
        res = square_to_cosine_hemisphere_pdf(wo)
    return res


@ti.func
def sample(p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=0, valid=0)
    if wi[2] > 0.0:
        wo = square_to_cosine_hemisphere(u2)
        pd = square_to_cosine_hemisphere_pdf(wo)
        if pd > 0.0 and wo[2] > 0.0:
            s.wo = wo
            s.pdf = pd
            s.weight = p.reflectance
            s.valid = 1
    return s


@ti.func
def eval_adjoint(p: BsdfParams, wi, wo, d_out):
    """Gradient of <d_out, eval(p, wi, wo)> w.r.t. p (only .reflectance is set)."""
    g = BsdfParams()
    if wi[2] > 0.0 and wo[2] > 0.0:
        g.reflectance = d_out * (INV_PI * wo[2])
    return g
