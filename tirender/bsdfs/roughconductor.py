"""Rough conductor (Mitsuba 3 ``roughconductor``; Beckmann (default, as Mitsuba) or GGX, isotropic α,
visible normal sampling; anisotropic α_u / α_v and sample_visible: false are not supported yet).
One-sided: 0 unless cos θi > 0 and cos θo > 0.

    eval = specular * F(wi·h) D(h) G(wi, wo, h) / (4 cos θi),   h = normalize(wi + wo)
F = fresnel_conductor(wi·h, η, k), or 1 for ``material: none``. Sampling: h ~ D_wi (visible
normals), wo = reflect(wi, h); pdf = D_wi(h) / (4 wo·h); weight = specular F G1(wo, h).
Differentiable: specular_reflectance (RGB), roughness α; analytic direction derivatives for
normal-map gradients.
"""
import taichi as ti

from ..core.math import vec3
from ..errors import ConfigError
from ..schema import Bool, Choice, Texture
from .base import (SMOOTH, BsdfSample, const, const_rgb, invalid_sample, one_sided, slot_float,
                   slot_float_adjoint, slot_rgb, slot_rgb_adjoint)
from .conductor import CONDUCTOR_KEYS, ETA, K, NONE, conductor_constants
from .fresnel import fresnel_conductor, fresnel_conductor_dcos, reflect_m
from .microfacet import (half_vector, signed_alpha, signed_alpha_sign, reflection_grad_dirs, reflection_lobe, reflection_pdf, sample_visible_normal,
                         smith_g1)

_SPEC, _ALPHA = 0, 1  # texture slots
DIST = NONE + 1       # constant: the distribution (after the conductor's)

ROUGHNESS = Texture("roughness", 1, default=0.1, lo=1e-3, hi=4.0, aliases=("alpha",),
                    doc="roughness α (parameter `<id>.roughness`)")
DISTRIBUTION = Choice("distribution", ("beckmann", "ggx"), default="beckmann",
                      doc="microfacet distribution (Mitsuba's default: beckmann)")
SAMPLE_VISIBLE = Bool("sample_visible", default=True,
                      doc="visible normal sampling (only true is supported)")


def distribution_constant(values, file, key):
    """The row's distribution constant: the sign of its signed roughness (microfacet.signed_alpha)."""
    if values.get("sample_visible") is False:
        raise ConfigError("sample_visible: false is not supported", file, f"{key}.sample_visible")
    return signed_alpha_sign(values.get("distribution", "beckmann"))


def rough_conductor_constants(values, file, key):
    return list(conductor_constants(values, file, key)) + [distribution_constant(values, file, key)]


@one_sided
class RoughConductor:
    NAME = "roughconductor"
    KEYS = CONDUCTOR_KEYS[:1] + (ROUGHNESS, DISTRIBUTION, SAMPLE_VISIBLE) + CONDUCTOR_KEYS[1:]
    FLAGS = SMOOTH
    Params = ti.types.struct(specular=vec3, alpha=float, eta=vec3, k=vec3, none=ti.i32)

    constants = staticmethod(rough_conductor_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return RoughConductor.Params(specular=slot_rgb(st, ctx, _SPEC), alpha=signed_alpha(slot_float(st, ctx, _ALPHA), const(st, ctx, DIST)),
                                     eta=const_rgb(st, ctx, ETA), k=const_rgb(st, ctx, K),
                                     none=ti.cast(const(st, ctx, NONE), ti.i32))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        slot_float_adjoint(st, ctx, _ALPHA, g.alpha)

    @staticmethod
    @ti.func
    def fresnel(p, c):
        F = vec3(1.0)
        if p.none == 0:
            F = fresnel_conductor(c, p.eta, p.k)
        return F

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        return p.specular * RoughConductor.fresnel(p, wi.dot(h)) * lobe

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return reflection_pdf(wi, wo, p.alpha)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        m, pm = sample_visible_normal(wi, p.alpha, u2)
        wo = reflect_m(wi, m)
        dot_wo_m = wo.dot(m)
        if pm > 0.0 and wo[2] > 0.0 and dot_wo_m > 0.0:
            s = BsdfSample(wo=wo, weight=p.specular * RoughConductor.fresnel(p, wi.dot(m)) * smith_g1(wo, m, p.alpha),
                           pdf=pm / (4.0 * dot_wo_m), eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂(specular, α)."""
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        F = RoughConductor.fresnel(p, wi.dot(h))
        return RoughConductor.Params(specular=d_out * F * lobe, alpha=(d_out * p.specular * F).sum() * dlobe)

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """∂<d_out, f>/∂wi, ∂/∂wo: the reflection lobe with Φ = <d_out, S F(c)>."""
        h, hl, _ = half_vector(wi, wo)
        c = wi.dot(h)
        dS = d_out * p.specular
        dphi = 0.0
        if p.none == 0:
            dphi = dS.dot(fresnel_conductor_dcos(c, p.eta, p.k))
        return reflection_grad_dirs(wi, wo, h, hl, p.alpha, dS.dot(RoughConductor.fresnel(p, c)), dphi)
