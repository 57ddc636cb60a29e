"""Rough dielectric (Mitsuba 3 ``roughdielectric``; Walter et al. 2007, GGX, isotropic α,
visible normal sampling; radiance transport mode).

Two-sided by nature: cos θi < 0 means the ray arrives from inside (η is inverted).
Reflection (cos θi cos θo > 0), h = normalize(wi + wo) flipped to +z:
    eval = specular * F D G / (4 |cos θi|)
Transmission, η' = η (cos θi > 0) or 1/η, h = normalize(wi + η' wo) flipped to +z:
    eval = transmittance * |(1/η'²) (1 - F) D G η'² (wi·h)(wo·h) / (cos θi (wi·h + η' wo·h)²)|
         (the 1/η'² is the radiance-mode solid angle compression, as Mitsuba)
F = fresnel_dielectric(wi·h, η). Sampling: h ~ D_wi' (wi' = wi flipped to +z), reflect with
probability F, refract otherwise; pdf = D_wi'(h) * (F | 1-F) * |∂h/∂wo|;
weight = (specular | transmittance η_ti²) * G1(wo, h); eta = 1 (reflection) or η_it.
Differentiable: specular, transmittance (RGB), alpha.
"""
import taichi as ti

from ..core.math import vec3
from .common import BsdfParams, BsdfSample
from .fresnel import fresnel_dielectric, reflect_m, refract_m
from .microfacet import D, DG_and_dalpha, G, pdf_visible_normal, sample_visible_normal, smith_g1


@ti.func
def _half(p: BsdfParams, wi, wo):
    """(m, reflect, eta', ok): generalized half vector in the upper hemisphere."""
    cos_i = wi[2]
    refl = cos_i * wo[2] > 0.0
    eta = p.eta if cos_i > 0.0 else 1.0 / p.eta
    hv = wi + wo * (1.0 if refl else eta)
    hl = hv.norm()
    ok = hl > 0.0 and cos_i != 0.0
    m = hv / ti.select(hl > 0.0, hl, 1.0)
    if m[2] < 0.0:
        m = -m
    return m, refl, eta, ok


@ti.func
def _transmission_factor(F, eta, wi, wo, m):
    """|(1/η'²)(1 - F) η'² (wi·m)(wo·m) / (cos θi (wi·m + η' wo·m)²)| (without D G)."""
    dim = wi.dot(m)
    dom = wo.dot(m)
    den = dim + eta * dom
    den2 = den * den * wi[2]
    inv_eta = 1.0 / eta
    res = 0.0
    if den2 != 0.0:
        res = ti.abs((inv_eta * inv_eta) * (1.0 - F) * eta * eta * dim * dom / den2)
    return res


@ti.func
def eval(p: BsdfParams, wi, wo):
    res = vec3(0.0)
    m, refl, eta, ok = _half(p, wi, wo)
    if ok:
        dg = D(m, p.alpha) * G(wi, wo, m, p.alpha)
        F, cos_t, eta_it, eta_ti = fresnel_dielectric(wi.dot(m), p.eta)
        if refl:
            res = p.specular * (F * dg / (4.0 * ti.abs(wi[2])))
        else:
            res = p.transmittance * (_transmission_factor(F, eta, wi, wo, m) * dg)
    return res


@ti.func
def pdf(p: BsdfParams, wi, wo):
    res = 0.0
    m, refl, eta, ok = _half(p, wi, wo)
    dim = wi.dot(m)
    dom = wo.dot(m)
    if ok and dim * wi[2] > 0.0 and dom * wo[2] > 0.0:
        dwh = 0.0
        if refl:
            dwh = 1.0 / (4.0 * dom)
        else:
            den = dim + eta * dom
            if den != 0.0:
                dwh = eta * eta * dom / (den * den)
        sgn = 1.0 if wi[2] > 0.0 else -1.0
        prob = pdf_visible_normal(wi * sgn, m, p.alpha)
        F, cos_t, eta_it, eta_ti = fresnel_dielectric(dim, p.eta)
        prob *= F if refl else 1.0 - F
        res = prob * ti.abs(dwh)
    return res


@ti.func
def sample(p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=0, valid=0)
    cos_i = wi[2]
    if cos_i != 0.0:
        sgn = 1.0 if cos_i > 0.0 else -1.0
        m, pm = sample_visible_normal(wi * sgn, p.alpha, u2)
        if pm > 0.0:
            dim = wi.dot(m)
            F, cos_t, eta_it, eta_ti = fresnel_dielectric(dim, p.eta)
            wo = vec3(0.0)
            weight = vec3(0.0)
            pd = 0.0
            dwh = 0.0
            side_ok = 0
            if u1 <= F:
                wo = reflect_m(wi, m)
                pd = pm * F
                dwh = 1.0 / (4.0 * wo.dot(m))
                weight = p.specular
                s.eta = 1.0
                if cos_i * wo[2] > 0.0:
                    side_ok = 1
            else:
                wo = refract_m(wi, m, cos_t, eta_ti)
                pd = pm * (1.0 - F)
                dom = wo.dot(m)
                den = dim + eta_it * dom
                if den != 0.0:
                    dwh = eta_it * eta_it * dom / (den * den)
                weight = p.transmittance * (eta_ti * eta_ti)
                s.eta = eta_it
                if cos_i * wo[2] < 0.0:
                    side_ok = 1
            g1 = smith_g1(wo, m, p.alpha)
            pd *= ti.abs(dwh)
            if side_ok == 1 and g1 > 0.0 and pd > 0.0:
                s.wo = wo
                s.pdf = pd
                s.weight = weight * g1
                s.valid = 1
    return s


@ti.func
def eval_adjoint(p: BsdfParams, wi, wo, d_out):
    """Gradient of <d_out, eval> w.r.t. specular, transmittance and alpha."""
    g = BsdfParams()
    m, refl, eta, ok = _half(p, wi, wo)
    if ok:
        dg, ddg = DG_and_dalpha(wi, wo, m, p.alpha)
        F, cos_t, eta_it, eta_ti = fresnel_dielectric(wi.dot(m), p.eta)
        if refl:
            k = F / (4.0 * ti.abs(wi[2]))
            g.specular = d_out * (k * dg)
            g.alpha = (d_out * p.specular).sum() * (k * ddg)
        else:
            k = _transmission_factor(F, eta, wi, wo, m)
            g.transmittance = d_out * (k * dg)
            g.alpha = (d_out * p.transmittance).sum() * (k * ddg)
    return g
