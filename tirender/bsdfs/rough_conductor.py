"""Rough conductor (Mitsuba 3 ``roughconductor``, GGX, isotropic α, visible normal sampling).

One-sided: 0 unless cos θi > 0 and cos θo > 0.
    eval  = specular * F(wi·h) * D(h) G(wi, wo, h) / (4 cos θi),   h = normalize(wi + wo)
    pdf   = D(h) G1(wi, h) / (4 cos θi)     (visible normal density times the Jacobian 1/(4 wo·h))
    sample: h ~ D_wi, wo = reflect(wi, h), weight = specular * F(wi·h) * G1(wo, h)
F = fresnel_conductor(wi·h, cond_eta, cond_k), or 1 when ``p.cond_none == 1``.
Differentiable: specular (RGB), alpha.
"""
import taichi as ti

from ..core.math import vec3
from .common import BsdfParams, BsdfSample
from .fresnel import fresnel_conductor, reflect_m
from .microfacet import D, DG_and_dalpha, G, sample_visible_normal, smith_g1


@ti.func
def _fresnel(p: BsdfParams, cos_theta):
    F = vec3(1.0)
    if p.cond_none == 0:
        F = fresnel_conductor(cos_theta, p.cond_eta, p.cond_k)
    return F


@ti.func
def _half(wi, wo):
    h = wi + wo
    hl = h.norm()
    ok = hl > 0.0
    return h / ti.select(ok, hl, 1.0), ok


@ti.func
def eval(p: BsdfParams, wi, wo):
    res = vec3(0.0)
    if wi[2] > 0.0 and wo[2] > 0.0:
        h, ok = _half(wi, wo)
        if ok:
            dg = D(h, p.alpha) * G(wi, wo, h, p.alpha)
            res = p.specular * _fresnel(p, wi.dot(h)) * (dg / (4.0 * wi[2]))
    return res


@ti.func
def pdf(p: BsdfParams, wi, wo):
    res = 0.0
    if wi[2] > 0.0 and wo[2] > 0.0:
        h, ok = _half(wi, wo)
        if ok and wi.dot(h) > 0.0 and wo.dot(h) > 0.0:
            res = D(h, p.alpha) * smith_g1(wi, h, p.alpha) / (4.0 * wi[2])
    return res


@ti.func
def sample(p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=0, valid=0)
    if wi[2] > 0.0:
        m, pm = sample_visible_normal(wi, p.alpha, u2)
        wo = reflect_m(wi, m)
        dot_wo_m = wo.dot(m)
        if pm > 0.0 and wo[2] > 0.0 and dot_wo_m > 0.0:
            s.wo = wo
            s.pdf = pm / (4.0 * dot_wo_m)
            s.weight = p.specular * _fresnel(p, wi.dot(m)) * smith_g1(wo, m, p.alpha)
            s.valid = 1
    return s


@ti.func
def eval_adjoint(p: BsdfParams, wi, wo, d_out):
    """Gradient of <d_out, eval> w.r.t. specular and alpha."""
    g = BsdfParams()
    if wi[2] > 0.0 and wo[2] > 0.0:
        h, ok = _half(wi, wo)
        if ok:
            dg, ddg = DG_and_dalpha(wi, wo, h, p.alpha)
            F = _fresnel(p, wi.dot(h))
            inv = 1.0 / (4.0 * wi[2])
            g.specular = d_out * F * (dg * inv)
            g.alpha = (d_out * p.specular * F).sum() * (ddg * inv)
    return g
