"""Rough plastic (Mitsuba 3 ``roughplastic``, ``nonlinear=False``, GGX, isotropic α,
visible normal sampling). One-sided: 0 unless cos θi > 0 and cos θo > 0.

    eval = specular * F(wi·h) D G / (4 cos θi)                                (coat)
         + reflectance / (1 - Fdr_int) * (1/π) (1/η²) cos θo (1 - F(cos θi)) (1 - F(cos θo))
with h = normalize(wi + wo), F = fresnel_dielectric(., η) and the diffuse internal
reflectance Fdr_int = fresnel_diffuse_reflectance(1/η) (Mitsuba's fitted polynomial).

Difference to Mitsuba 3: Mitsuba's roughplastic tabulates the *rough* interface's
transmittance t(cos θ) (64 entries) and its internal reflectance per (α, η) at load time;
here (as in Mitsuba's smooth ``plastic``) the smooth-interface values 1 - F(cos θ) and
Fdr_int are used, so that everything stays a closed-form function of the per-point
BsdfParams (α can be textured / optimised). Both agree as α → 0; at large α and grazing
angles the diffuse lobe differs by a few percent.

Sampling (as Mitsuba): the coat is chosen with probability
    P_s = F_i w / (F_i w + (1 - F_i)(1 - w)),  F_i = F(cos θi),
    w = mean(specular) / (mean(reflectance) + mean(specular))  (m_specular_sampling_weight,
        here from the point's values instead of the texture means),
otherwise a cosine-weighted direction; pdf = P_s D(h) G1(wi, h) / (4 cos θi) + (1 - P_s) cos θo / π,
weight = eval / pdf. The model is reciprocal: eval(wi, wo)/cos θo = eval(wo, wi)/cos θi.
Differentiable: diffuse_reflectance, specular_reflectance (RGB), roughness α; analytic direction
derivatives.
"""
import taichi as ti

from ..core.math import INV_PI, vec3
from ..core.warp import square_to_cosine_hemisphere
from ..errors import ConfigError
from ..schema import Bool, Ior, Texture
from .base import (SMOOTH, BsdfSample, const, invalid_sample, one_sided, slot_float, slot_float_adjoint, slot_rgb,
                   slot_rgb_adjoint)
from .dielectric import ior_constants
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_diffuse_reflectance, reflect_m
from .microfacet import (half_vector, reflection_grad_dirs, reflection_lobe, reflection_pdf,
                         sample_visible_normal)
from .roughconductor import DISTRIBUTION, ROUGHNESS

_RHO, _SPEC, _ALPHA = 0, 1, 2   # texture slots
ETA = 0                         # constant: relative IOR


@ti.func
def diffuse_fresnel(eta):
    """(fdr_int, fdr_ext) = (Fdr(1/η), Fdr(η)) as Mitsuba's plastic precomputes them."""
    return fresnel_diffuse_reflectance(1.0 / eta), fresnel_diffuse_reflectance(eta)


@ti.func
def _diffuse_scale(eta):
    """(1/π)(1/η²) / (1 - Fdr_int): the diffuse lobe is reflectance * this * cos θo (1 - F_i)(1 - F_o)."""
    den = 1.0 - fresnel_diffuse_reflectance(1.0 / eta)
    den = ti.select(den > 0.0, den, 1.0)
    return INV_PI / (eta * eta) / den


@ti.func
def _diffuse_factor(p, wi, wo):
    f_i, ct_i, ei_i, et_i = fresnel_dielectric(wi[2], p.eta)
    f_o, ct_o, ei_o, et_o = fresnel_dielectric(wo[2], p.eta)
    return _diffuse_scale(p.eta) * wo[2] * (1.0 - f_i) * (1.0 - f_o)


@ti.func
def prob_specular(p, cos_theta_i):
    """Probability of sampling the coat (Mitsuba's m_specular_sampling_weight scheme)."""
    s_mean = p.specular.sum() / 3.0
    d_mean = p.reflectance.sum() / 3.0
    tot = s_mean + d_mean
    w = 0.5
    if tot > 0.0:
        w = s_mean / tot
    f_i, ct, ei, et = fresnel_dielectric(cos_theta_i, p.eta)
    ps = f_i * w
    pd = (1.0 - f_i) * (1.0 - w)
    res = w
    if ps + pd > 0.0:
        res = ps / (ps + pd)
    return res


@one_sided
class RoughPlastic:
    NAME = "roughplastic"
    KEYS = (Texture("diffuse_reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo of the diffuse base"),
            Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the coat"),
            ROUGHNESS, DISTRIBUTION,
            Ior("int_ior", default=1.49, doc="interior IOR (polypropylene)"),
            Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
            Bool("nonlinear", default=False, doc="Mitsuba's nonlinear color shift (only false is supported)"))
    FLAGS = SMOOTH
    Params = ti.types.struct(reflectance=vec3, specular=vec3, alpha=float, eta=float)

    @staticmethod
    def constants(values, file, key):
        if values.get("nonlinear"):
            raise ConfigError("nonlinear: true is not supported", file, f"{key}.nonlinear")
        return ior_constants(values, file, key)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return RoughPlastic.Params(reflectance=slot_rgb(st, ctx, _RHO), specular=slot_rgb(st, ctx, _SPEC),
                                   alpha=ti.max(slot_float(st, ctx, _ALPHA), 1e-4), eta=const(st, ctx, ETA))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _RHO, g.reflectance)
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        slot_float_adjoint(st, ctx, _ALPHA, g.alpha)

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        F, ct, ei, et = fresnel_dielectric(wi.dot(h), p.eta)
        return p.specular * (F * lobe) + p.reflectance * _diffuse_factor(p, wi, wo)

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        ps = prob_specular(p, wi[2])
        return ps * reflection_pdf(wi, wo, p.alpha) + (1.0 - ps) * (wo[2] * INV_PI)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        wo = vec3(0.0)
        if u1 < prob_specular(p, wi[2]):
            m, pm = sample_visible_normal(wi, p.alpha, u2)
            wo = reflect_m(wi, m)
        else:
            wo = square_to_cosine_hemisphere(u2)
        pd = RoughPlastic.pdf(p, wi, wo)
        if pd > 0.0 and wo[2] > 0.0:
            s = BsdfSample(wo=wo, weight=RoughPlastic.f(p, wi, wo) / pd, pdf=pd, eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂(diffuse_reflectance, specular_reflectance, α)."""
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        F, ct, ei, et = fresnel_dielectric(wi.dot(h), p.eta)
        return RoughPlastic.Params(reflectance=d_out * _diffuse_factor(p, wi, wo), specular=d_out * (F * lobe),
                                   alpha=(d_out * p.specular).sum() * (F * dlobe))

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """Coat: the reflection lobe with the dielectric F(wi·h); base: c wo_z (1 - F(wi_z))(1 - F(wo_z))."""
        h, hl, _ = half_vector(wi, wo)
        c = wi.dot(h)
        cs = d_out.dot(p.specular)
        F, ct, ei, et = fresnel_dielectric(c, p.eta)
        gwi, gwo = reflection_grad_dirs(wi, wo, h, hl, p.alpha, cs * F, cs * fresnel_dielectric_dcos(c, p.eta))
        cd = d_out.dot(p.reflectance) * _diffuse_scale(p.eta)
        f_i, ct_i, ei_i, et_i = fresnel_dielectric(wi[2], p.eta)
        f_o, ct_o, ei_o, et_o = fresnel_dielectric(wo[2], p.eta)
        gwi[2] += -cd * wo[2] * fresnel_dielectric_dcos(wi[2], p.eta) * (1.0 - f_o)
        gwo[2] += cd * (1.0 - f_i) * ((1.0 - f_o) - wo[2] * fresnel_dielectric_dcos(wo[2], p.eta))
        return gwi, gwo
