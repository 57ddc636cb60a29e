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
Differentiable: reflectance (diffuse_reflectance), specular (RGB), alpha.
"""
import taichi as ti

from ..core.math import INV_PI, vec3
from ..core.warp import square_to_cosine_hemisphere
from .common import BsdfParams, BsdfSample
from .fresnel import fresnel_dielectric, fresnel_diffuse_reflectance, reflect_m
from .microfacet import D, DG_and_dalpha, G, sample_visible_normal, smith_g1


@ti.func
def diffuse_fresnel(eta):
    """(fdr_int, fdr_ext) = (Fdr(1/η), Fdr(η)) as Mitsuba's plastic precomputes them."""
    return fresnel_diffuse_reflectance(1.0 / eta), fresnel_diffuse_reflectance(eta)


@ti.func
def _half(wi, wo):
    h = wi + wo
    hl = h.norm()
    ok = hl > 0.0
    return h / ti.select(ok, hl, 1.0), ok


@ti.func
def _diffuse_factor(p: BsdfParams, wi, wo):
    """(1/π)(1/η²) cos θo (1 - F_i)(1 - F_o) / (1 - Fdr_int); eval's diffuse part = reflectance * this."""
    f_i, ct_i, ei_i, et_i = fresnel_dielectric(wi[2], p.eta)
    f_o, ct_o, ei_o, et_o = fresnel_dielectric(wo[2], p.eta)
    fdr_int = fresnel_diffuse_reflectance(1.0 / p.eta)
    den = 1.0 - fdr_int
    den = ti.select(den > 0.0, den, 1.0)
    return INV_PI / (p.eta * p.eta) * wo[2] * (1.0 - f_i) * (1.0 - f_o) / den


@ti.func
def prob_specular(p: BsdfParams, cos_theta_i):
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


@ti.func
def eval(p: BsdfParams, wi, wo):
    res = vec3(0.0)
    if wi[2] > 0.0 and wo[2] > 0.0:
        h, ok = _half(wi, wo)
        if ok:
            dg = D(h, p.alpha) * G(wi, wo, h, p.alpha)
            F, ct, ei, et = fresnel_dielectric(wi.dot(h), p.eta)
            res = p.specular * (F * dg / (4.0 * wi[2]))
        res += p.reflectance * _diffuse_factor(p, wi, wo)
    return res


@ti.func
def pdf(p: BsdfParams, wi, wo):
    res = 0.0
    if wi[2] > 0.0 and wo[2] > 0.0:
        ps = prob_specular(p, wi[2])
        h, ok = _half(wi, wo)
        spec = 0.0
        if ok:
            spec = D(h, p.alpha) * smith_g1(wi, h, p.alpha) / (4.0 * wi[2])
        res = ps * spec + (1.0 - ps) * (wo[2] * INV_PI)
    return res


@ti.func
def sample(p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=0, valid=0)
    if wi[2] > 0.0:
        ps = prob_specular(p, wi[2])
        wo = vec3(0.0)
        if u1 < ps:
            m, pm = sample_visible_normal(wi, p.alpha, u2)
            wo = reflect_m(wi, m)
        else:
            wo = square_to_cosine_hemisphere(u2)
        pd = pdf(p, wi, wo)
        if pd > 0.0 and wo[2] > 0.0:
            s.wo = wo
            s.pdf = pd
            s.weight = eval(p, wi, wo) / pd
            s.valid = 1
    return s


@ti.func
def eval_adjoint(p: BsdfParams, wi, wo, d_out):
    """Gradient of <d_out, eval> w.r.t. reflectance, specular and alpha."""
    g = BsdfParams()
    if wi[2] > 0.0 and wo[2] > 0.0:
        h, ok = _half(wi, wo)
        if ok:
            dg, ddg = DG_and_dalpha(wi, wo, h, p.alpha)
            F, ct, ei, et = fresnel_dielectric(wi.dot(h), p.eta)
            k = F / (4.0 * wi[2])
            g.specular = d_out * (k * dg)
            g.alpha = (d_out * p.specular).sum() * (k * ddg)
        g.reflectance = d_out * _diffuse_factor(p, wi, wo)
    return g
