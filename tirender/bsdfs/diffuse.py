"""Lambertian BSDF (Mitsuba 3 ``diffuse``), one-sided: f = ρ/π for wi, wo in the upper hemisphere.

Differentiable: reflectance ρ (RGB texture). Primal and adjoint side by side.
"""
import taichi as ti

from ..core.math import INV_PI, vec3
from ..core.warp import square_to_cosine_hemisphere, square_to_cosine_hemisphere_pdf
from ..schema import Texture
from ..variants import SPECTRUM, struct
from .base import SMOOTH, BsdfSample, invalid_sample, one_sided, slot_adjoints, slot_rgb

_RHO = 0  # texture slot of the reflectance


@one_sided
class Diffuse:
    NAME = "diffuse"
    KEYS = (Texture("reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo ρ"),)
    FLAGS = SMOOTH
    Params = struct(reflectance=SPECTRUM)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Diffuse.Params(reflectance=slot_rgb(st, ctx, _RHO))

    fetch_adjoint = staticmethod(slot_adjoints(KEYS))

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        """f(wi, wo) |cos θo| = ρ/π cos θo."""
        return p.reflectance * (INV_PI * wo[2])

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return square_to_cosine_hemisphere_pdf(wo)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        wo = square_to_cosine_hemisphere(u2)
        pd = square_to_cosine_hemisphere_pdf(wo)
        if pd > 0.0 and wo[2] > 0.0:
            s = BsdfSample(wo=wo, weight=p.reflectance, pdf=pd, eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂ρ = d_out cos θo / π."""
        return Diffuse.Params(reflectance=d_out * (INV_PI * wo[2]))

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """f depends on the directions only through cos θo: ∂/∂wo = (0, 0, <d_out, ρ>/π)."""
        return vec3(0.0), vec3(0.0, 0.0, d_out.dot(p.reflectance) * INV_PI)
