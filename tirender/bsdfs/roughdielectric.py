"""Rough dielectric (Mitsuba 3 ``roughdielectric``; Walter et al. 2007, Beckmann (default, as Mitsuba) or GGX, isotropic α
or anisotropic α_u / α_v (as ``roughconductor``: α_u along the shading frame's s = dp/du), visible
normal sampling; radiance transport mode). Two-sided by nature: cos θi < 0 means the ray arrives
from inside (η is inverted).

Reflection (cos θi cos θo > 0), h = normalize(wi + wo) flipped to +z:
    eval = specular * F D G / (4 |cos θi|)
Transmission, η' = η (cos θi > 0) or 1/η, h = normalize(wi + η' wo) flipped to +z:
    eval = transmittance * |(1/η'²) (1 - F) D G η'² (wi·h)(wo·h) / (cos θi (wi·h + η' wo·h)²)|
         (the 1/η'² is the radiance-mode solid angle compression, as Mitsuba)
F = fresnel_dielectric(wi·h, η). Sampling: h ~ D_wi' (wi' = wi flipped to +z), reflect with
probability F, refract otherwise; pdf = D_wi'(h) * (F | 1-F) * |∂h/∂wo|;
weight = (specular | transmittance η_ti²) * G1(wo, h); eta = 1 (reflection) or η_it.
Dispersion (``cauchy_b`` or ``sellmeier``, spectral variants) as ``dielectric``: η is the path's hero wavelength
λ0's, and eval and sample end the other lanes (× (n, 0, …, 0)): every lane would scatter its own way.
Differentiable: specular_reflectance, specular_transmittance (RGB), roughness α (or α_u, α_v), int_ior and cauchy_b
(through F, the generalized half vector and Q; the sampling's pdf is detached as every model's); analytic
direction derivatives; attached sampling (``warp``: bsdfs/halfwarp.py; the warp itself holds η fixed).
"""
import taichi as ti

from .. import variants
from ..core.math import vec2, vec3
from ..variants import SPECTRUM, spec, struct
from .base import (BOTH_SIDES, SMOOTH, TRANSMISSION, BsdfSample, const, invalid_sample, leaf,
                   slot_rgb, slot_rgb_adjoint)
from .dielectric import (DIELECTRIC_IOR_KEYS, DIELECTRIC_KEYS, EXT_IOR, hero_only, interface_constants, interface_eta,
                         interface_eta_adjoint, interface_mueller)
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_dielectric_deta, reflect_m, refract_m
from .microfacet import (D, D_grad, DG_and_dalpha, G, normalize_backprop, pdf_visible_normal,
                         sample_visible_normal, smith_g1, smith_g1_grad)
from .roughconductor import ANISO_KEYS, DISTRIBUTION, SAMPLE_VISIBLE, distribution_constant, fetch_alpha, fetch_alpha_adjoint

_SPEC, _TRANS, _ALPHA, _AU, _AV, _IOR, _CAUCHY = 0, 1, 2, 3, 4, 5, 6   # texture slots
DIST = EXT_IOR + 1      # constant: the distribution (after dielectric's dispersive constants)


@ti.func
def _half(p, wi, wo):
    """(m, |hv|, sign, reflect, eta', ok): generalized half vector m = sign hv / |hv| in the upper
    hemisphere, hv = wi + (1 | η') wo."""
    cos_i = wi[2]
    refl = cos_i * wo[2] > 0.0
    eta = p.eta if cos_i > 0.0 else 1.0 / p.eta
    hv = wi + wo * (1.0 if refl else eta)
    hl = hv.norm()
    ok = hl > 0.0 and cos_i != 0.0
    m = hv / ti.select(hl > 0.0, hl, 1.0)
    sgn = 1.0
    if m[2] < 0.0:
        m = -m
        sgn = -1.0
    return m, hl, sgn, refl, eta, ok


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
def _f_grads(p, wi, wo, d_out):
    """∂<d_out, f>/∂wi, ∂/∂wo and ∂/∂η (the relative IOR p.eta) through m = ±normalize(wi + (1|η') wo), F(wi·m, η),
    D(m), G1(wi, m) G1(wo, m) and the 1/|cos θi| (reflection) or the transmission factor Q (whose denominator
    (wi·m + η' wo·m)² also holds η'); d_out per lane (the dispersion's lane factors applied here)."""
    gwi = vec3(0.0)
    gwo = vec3(0.0)
    geta = 0.0
    m, hl, sgn, refl, eta, ok = _half(p, wi, wo)
    d_out = d_out * p.lanes
    if ok:
        dim = wi.dot(m)
        dom = wo.dot(m)
        F, cos_t, eta_it, eta_ti = fresnel_dielectric(dim, p.eta)
        dF = fresnel_dielectric_dcos(dim, p.eta)
        dFe = fresnel_dielectric_deta(dim, p.eta)
        d = D(m, p.alpha)
        gi = smith_g1(wi, m, p.alpha)
        go = smith_g1(wo, m, p.alpha)
        gg = gi * go
        g_m = vec3(0.0)
        scale_wo = 1.0
        geta_prime = 0.0             # ∂/∂η' at fixed m (the transmission factor's denominator)
        if refl:
            c0 = d_out.dot(p.specular)
            k = 1.0 / (4.0 * ti.abs(wi[2]))
            ac = c0 * dF * d * gg * k                      # ∂f/∂(wi·m)
            g_m = ac * wi + (c0 * F * gg * k) * D_grad(m, p.alpha)
            gwi = ac * m + (c0 * F * d * go * k) * smith_g1_grad(wi, m, p.alpha)
            gwi[2] += -c0 * F * d * gg * k / wi[2]
            gwo = (c0 * F * d * gi * k) * smith_g1_grad(wo, m, p.alpha)
            geta = c0 * dFe * d * gg * k
        else:
            scale_wo = eta
            c0 = d_out.dot(p.transmittance)
            den = dim + eta * dom
            den2 = den * den * wi[2]
            if den2 != 0.0:
                q = (1.0 - F) * dim * dom / den2
                aq = ti.abs(q)
                w = c0 * d * gg * ti.select(q >= 0.0, 1.0, -1.0)
                dq_dim = (-dF * dim * dom + (1.0 - F) * dom) / den2 - 2.0 * q / den
                dq_dom = (1.0 - F) * dim / den2 - 2.0 * q * eta / den
                g_m = (c0 * aq * gg) * D_grad(m, p.alpha) + w * (dq_dim * wi + dq_dom * wo)
                gwi = (w * dq_dim) * m + (c0 * aq * d * go) * smith_g1_grad(wi, m, p.alpha)
                gwi[2] += -w * q / wi[2]
                gwo = (w * dq_dom) * m + (c0 * aq * d * gi) * smith_g1_grad(wo, m, p.alpha)
                geta = -w * dim * dom / den2 * dFe         # through F(wi·m, η) at fixed m
                geta_prime = -2.0 * w * q * dom / den
        g_hv = sgn * normalize_backprop(g_m, m, hl)
        gwi += g_hv
        gwo += scale_wo * g_hv
        if not refl:
            # η' = η (arriving from outside) or 1/η; hv = wi + η' wo
            geta += (geta_prime + g_hv.dot(wo)) * (1.0 if wi[2] > 0.0 else -eta * eta)
    return gwi, gwo, geta


@ti.func
def _dispersed(lanes):
    """1 when the lane weights end the secondary wavelengths (hero_only: (n, 0, …, 0)); 0 with one lane (mono)."""
    res = 0
    if ti.static(variants.lanes() > 1):
        res = ti.select(lanes[1] == 0.0, 1, 0)
    return res


@leaf
class RoughDielectric:
    NAME = "roughdielectric"
    KEYS = DIELECTRIC_KEYS[:2] + ANISO_KEYS + (DISTRIBUTION, SAMPLE_VISIBLE) + DIELECTRIC_IOR_KEYS
    FLAGS = SMOOTH | BOTH_SIDES | TRANSMISSION
    Params = struct(specular=SPECTRUM, transmittance=SPECTRUM, alpha=vec2, eta=float, lanes=SPECTRUM)
    MUELLER_COLOURLESS = True      # mueller reads the IOR only (bsdfs/base.py)
    N_CONST = DIST + 1

    @staticmethod
    def constants(values, file, key):
        return interface_constants(values, file, key) + [distribution_constant(values, file, key)]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        eta, disperse, db = interface_eta(st, ctx, _IOR, _CAUCHY)
        return RoughDielectric.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                      alpha=fetch_alpha(st, ctx, _ALPHA, _AU, _AV, const(st, ctx, DIST)),
                                      eta=eta, lanes=hero_only() if disperse else spec(1.0))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        slot_rgb_adjoint(st, ctx, _TRANS, g.transmittance)
        fetch_alpha_adjoint(st, ctx, _ALPHA, _AU, _AV, g.alpha)
        interface_eta_adjoint(st, ctx, _IOR, _CAUCHY, g.eta)

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        res = spec(0.0)
        m, hl, sgn, refl, eta, ok = _half(p, wi, wo)
        if ok:
            dg = D(m, p.alpha) * G(wi, wo, m, p.alpha)
            F, cos_t, eta_it, eta_ti = fresnel_dielectric(wi.dot(m), p.eta)
            if refl:
                res = p.specular * (F * dg / (4.0 * ti.abs(wi[2])))
            else:
                res = p.transmittance * (_transmission_factor(F, eta, wi, wo, m) * dg)
        return res * p.lanes

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        res = 0.0
        m, hl, sgn, refl, eta, ok = _half(p, wi, wo)
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
            s = 1.0 if wi[2] > 0.0 else -1.0
            prob = pdf_visible_normal(wi * s, m, p.alpha)
            F, cos_t, eta_it, eta_ti = fresnel_dielectric(dim, p.eta)
            prob *= F if refl else 1.0 - F
            res = prob * ti.abs(dwh)
        return res

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        cos_i = wi[2]
        if cos_i != 0.0:
            sg = 1.0 if cos_i > 0.0 else -1.0
            m, pm = sample_visible_normal(wi * sg, p.alpha, u2)
            if pm > 0.0:
                dim = wi.dot(m)
                F, cos_t, eta_it, eta_ti = fresnel_dielectric(dim, p.eta)
                wo = vec3(0.0)
                weight = spec(0.0)
                pd = 0.0
                dwh = 0.0
                side_ok = 0
                ev = 1.0
                if u1 <= F:
                    wo = reflect_m(wi, m)
                    pd = pm * F
                    dwh = 1.0 / (4.0 * wo.dot(m))
                    weight = p.specular
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
                    ev = eta_it
                    if cos_i * wo[2] < 0.0:
                        side_ok = 1
                g1 = smith_g1(wo, m, p.alpha)
                pd *= ti.abs(dwh)
                if side_ok == 1 and g1 > 0.0 and pd > 0.0:
                    s = BsdfSample(wo=wo, weight=weight * g1 * p.lanes, pdf=pd, eta=ev, delta=0, valid=1,
                                   disperse=_dispersed(p.lanes))
        return s

    @staticmethod
    @ti.func
    def warp(p):
        """(signed α, η) of the half-vector warp (attached sampling, base.py)."""
        return p.alpha, p.eta

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂(specular, transmittance, (α_u, α_v), η)."""
        g = RoughDielectric.Params(specular=spec(0.0), transmittance=spec(0.0), alpha=vec2(0.0), eta=0.0,
                                   lanes=spec(0.0))
        m, hl, sgn, refl, eta, ok = _half(p, wi, wo)
        gwi, gwo, geta = _f_grads(p, wi, wo, d_out)
        g.eta = geta
        d_out = d_out * p.lanes
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

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """∂<d_out, f>/∂wi, ∂/∂wo (``_f_grads``)."""
        gwi, gwo, geta = _f_grads(p, wi, wo, d_out)
        return gwi, gwo

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        """Reflection or refraction at the microfacet normal by the Fresnel amplitudes (spectral_polarized;
        Mitsuba 3's roughdielectric does not polarize)."""
        m, hl, sgn, refl, eta, ok = _half(p, wi, wo)
        return interface_mueller(p.eta, wi, wo, m)
