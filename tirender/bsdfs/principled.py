"""Principled BSDF, Mitsuba 3's ``principled`` (src/bsdfs/principled.cpp, principledhelpers.h;
Burley 2012/2015), term by term. Shading frame, z = normal; c = base_color, r = roughness,
m = metallic, s = spec_trans, η = eta (or from specular: η = 2 / (1 - sqrt(0.08 specular)) - 1).

    brdf = (1 - m)(1 - s),  bsdf = (1 - m) s,  α_x = max(1e-3, r² / a), α_y = max(1e-3, r² a),
    a = sqrt(1 - 0.9 anisotropic);  h the half vector (reflection wi + wo, refraction wi + η_path wo,
    turned to h_z > 0); D, G the anisotropic GGX (microfacet.ggx_aniso_*); F the dielectric Fresnel
    F(wi·h, η); w(x) = (1 - x)^5 Schlick's weight; lum = luminance(c), c_tint = c / lum.
    main reflection   F_p D G / (4 |cos θi|), F_p = (1-m)(1-t) F + m S(c) + (1-m) t S(c_tint R0(η))
                      on the front side (S(R0) = w + (1 - w) R0 with Mitsuba's calc_schlick), bsdf F
                      on the back side
    transmission      sqrt(c) bsdf |(1-F) D G (wi·h)(wo·h) / (cos θi (wi·h + η_path wo·h)²)|  (radiance)
    clearcoat         0.25 clearcoat S_0.04 D_GTR1(h; lerp(0.1, 0.001, clearcoat_gloss))
                      G_0.25(wi) G_0.25(wo) |cos θo|                     (Mitsuba's form, front only)
    diffuse + retro   brdf |cos θo| c / π ((1 - Fi/2)(1 - Fo/2) + Rr (Fo + Fi + Fo Fi (Rr - 1))),
                      Rr = 2 r (h·wo)², Fi = w(|cos θi|), Fo = w(|cos θo|)          (front only)
    sheen             sheen (1 - m) w(|h·wo|) lerp(1, c_tint, sheen_tint) |cos θo|  (front, with diffuse:
                      as Mitsuba's scalar variants, 0 where brdf = 0, i.e. spec_trans = 1)
Sampling: Mitsuba's lobe probabilities (diffuse brdf·rate, clearcoat clearcoat/4·rate, main
reflection rate (1 - bsdf (1 - F)), transmission rate bsdf (1 - F), F at the sampled visible normal;
back side: F and 1 - F), visible-normal sampling identical to Mitsuba's (same normal for the
same u2), GTR1 normal sampling for the clearcoat, cosine-weighted diffuse; pdf = Mitsuba's pdf(),
weight = eval / pdf (on the front side the
normalisation of the lobe probabilities does not depend on F, so the pdf is the sampling density).
Keys: every Mitsuba texture parameter is a texture here; eta / specular (mutually exclusive) and
the three sampling rates are constants. Not supported: flatness (fake subsurface; refused by the
key check), importance/adjoint transport mode (radiance only). Differentiable (hand-written
adjoints): base_color (RGB), roughness, anisotropic, metallic, spec_trans, spec_tint, sheen,
sheen_tint, clearcoat, clearcoat_gloss; analytic direction derivatives (grad_dirs, for normal
maps), term by term through h, wi·h, wo·h, cos θi and cos θo.
"""
import taichi as ti

from .. import variants
from ..core.math import INV_PI, PI, vec3
from ..core.warp import square_to_cosine_hemisphere
from ..errors import ConfigError
from ..schema import Number
from ..variants import SPECTRUM, spec, struct
from .base import (BOTH_SIDES, SMOOTH, TRANSMISSION, const, invalid_sample, leaf, sample_of, slot_adjoints,
                   slot_float, slot_rgb)
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, reflect_m, refract_m
from .microfacet import (ggx_aniso_D, ggx_aniso_D_grad, ggx_aniso_g1, ggx_aniso_g1_grad, ggx_aniso_G,
                         ggx_aniso_pdf_visible, ggx_aniso_sample_visible)
from .principledhelpers import (calc_schlick_w, calc_schlick_w_dcos, diffuse_retro, dist_params, from_core,
                                schlick_weight, schlick_weight_d, tint, tint_vjp, unit_texture)

(_C, _R, _AN, _M, _ST, _T, _SH, _SHT, _CC, _CCG) = range(10)     # texture slots
ETA, HAS_TRANS, SR_SPEC, SR_CC, SR_DIFF = range(5)                 # constants


def principled_constants(values, file, key):
    """[η, has spec_trans, main specular / clearcoat / diffuse sampling rates] (Mitsuba's constructor)."""
    st = values.get("spec_trans", 0.0)
    has_trans = not (isinstance(st, (int, float)) and float(st) == 0.0)
    if "eta" in values and "specular" in values:
        raise ConfigError("give either eta or specular, not both", file, f"{key}.specular")
    if "eta" in values:
        eta = float(values["eta"])
        if has_trans and eta == 1.0:
            eta = 1.001
    else:
        spec = float(values.get("specular", 0.5))
        if has_trans and spec == 0.0:
            spec = 1e-3
        eta = 2.0 / (1.0 - (0.08 * spec) ** 0.5) - 1.0
    return [eta, 1.0 if has_trans else 0.0, float(values["main_specular_sampling_rate"]),
            float(values["clearcoat_sampling_rate"]), float(values["diffuse_reflectance_sampling_rate"])]


@ti.func
def _gtr1(m, alpha):
    """(D_GTR1(m), ∂D/∂α)."""
    a2 = alpha * alpha
    c2 = m[2] * m[2]
    N = a2 - 1.0
    L = ti.log(a2)
    Q = 1.0 + N * c2
    d = N / (PI * L * Q)
    dd = (1.0 / (L * Q) - N / (L * L * a2 * Q) - N * c2 / (L * Q * Q)) / PI * 2.0 * alpha
    if d * m[2] <= 1e-20:
        d = 0.0
        dd = 0.0
    return d, dd


@ti.func
def _gtr1_dz(m, alpha, d):
    """∂D_GTR1/∂m_z (d: its value)."""
    a2 = alpha * alpha
    N = a2 - 1.0
    Q = 1.0 + N * m[2] * m[2]
    return ti.select(d > 0.0, -d * 2.0 * N * m[2] / Q, 0.0)


@ti.func
def _smith_ggx1_dz(v, alpha, g):
    """∂/∂v_z of _smith_ggx1 (a function of |v_z| only; g: its value)."""
    res = 0.0
    c = ti.abs(v[2])
    if g > 0.0 and v[2] != 1.0 and c > 0.0:
        t = alpha * alpha * (1.0 / (c * c) - 1.0)
        s = ti.sqrt(1.0 + t)
        res = -1.0 / (s * (1.0 + s) * (1.0 + s)) * (-2.0 * alpha * alpha / (c * c * c)) * ti.select(v[2] >= 0.0, 1.0, -1.0)
    return res


@ti.func
def _smith_ggx1(v, wh, alpha):
    c = ti.abs(v[2])
    c2 = ti.max(c * c, 1e-30)
    res = 2.0 / (1.0 + ti.sqrt(1.0 + alpha * alpha * (1.0 - c2) / c2))
    if v[2] == 1.0:
        res = 1.0
    if v.dot(wh) * v[2] <= 0.0:
        res = 0.0
    return res


@ti.func
def _geometry(p, wi, wo):
    """(h, front, reflect, refract, η_path, F, mac-mic reflection, mac-mic refraction)."""
    ci = wi[2]
    co = wo[2]
    front = ci > 0.0
    refl = ci * co > 0.0
    refr = ci * co < 0.0
    eta_path = ti.select(front, p.eta, 1.0 / p.eta)
    u = wi + wo * ti.select(refl, 1.0, eta_path)
    ul = u.norm()
    wh = u / ti.select(ul > 0.0, ul, 1.0)
    if wh[2] < 0.0:
        wh = -wh
    F, _, _, _ = fresnel_dielectric(wi.dot(wh), p.eta)
    sg = ti.select(ci >= 0.0, 1.0, -1.0)
    mm = wh * sg
    mr = wi.dot(mm) > 0.0 and wo.dot(mm) > 0.0
    mt = wi.dot(mm) > 0.0 and wo.dot(-mm) > 0.0
    return wh, front, refl, refr, eta_path, F, mr and ul > 0.0, mt and ul > 0.0


@ti.func
def _lobe_weights(p):
    """(base colour c, metallic m, specular transmission s, the BRDF lobes' weight (1 − m)(1 − s), the BSDF
    lobe's (1 − m) s)."""
    m = p.metallic
    s_ = p.spec_trans
    return p.base_color, m, s_, (1.0 - m) * (1.0 - s_), (1.0 - m) * s_


@ti.func
def _probs(p, front, F, bsdf, brdf):
    """Mitsuba's normalised lobe probabilities (main reflection, transmission, clearcoat, diffuse)."""
    psr = ti.select(front, p.sr_spec * (1.0 - bsdf * (1.0 - F)), F)
    pst = 0.0
    if p.has_trans > 0:
        pst = ti.select(front, p.sr_spec * bsdf * (1.0 - F), 1.0 - F)
    pcc = ti.select(front, 0.25 * p.clearcoat * p.sr_cc, 0.0)
    pd = ti.select(front, brdf * p.sr_diff, 0.0)
    tot = psr + pst + pcc + pd
    inv = ti.select(tot > 0.0, 1.0 / ti.select(tot > 0.0, tot, 1.0), 0.0)
    return psr * inv, pst * inv, pcc * inv, pd * inv


@leaf
class Principled:
    NAME = "principled"
    KEYS = (unit_texture("base_color", "base color", 0.5, 3),
            unit_texture("roughness", "roughness of the main specular lobes (α = roughness²)", 0.5),
            unit_texture("anisotropic", "degree of anisotropy (0: isotropic)"),
            unit_texture("metallic", "metallicness"),
            unit_texture("spec_trans", "blend of the BRDF (0) and the transmitting BSDF (1) main lobes"),
            unit_texture("spec_tint", "fraction of base_color tint on the dielectric reflection"),
            unit_texture("sheen", "sheen lobe rate"),
            unit_texture("sheen_tint", "fraction of base_color tint on the sheen"),
            unit_texture("clearcoat", "rate of the clearcoat lobe"),
            unit_texture("clearcoat_gloss", "clearcoat glossiness (GTR1 α = lerp(0.1, 0.001, gloss))"),
            Number("eta", default=None, lo=0.0, strict_lo=True, doc="interior / exterior IOR (excludes specular)"),
            Number("specular", default=None, lo=0.0, hi=1.0,
                   doc="Fresnel reflectance control, η = 2 / (1 - sqrt(0.08 specular)) - 1 (default 0.5)"),
            Number("main_specular_sampling_rate", default=1.0, lo=0.0, doc="sampling rate of the main specular"),
            Number("clearcoat_sampling_rate", default=1.0, lo=0.0, doc="sampling rate of the clearcoat"),
            Number("diffuse_reflectance_sampling_rate", default=1.0, lo=0.0, doc="sampling rate of the diffuse"))
    FLAGS = SMOOTH | BOTH_SIDES | TRANSMISSION
    Params = struct(base_color=SPECTRUM, roughness=float, anisotropic=float, metallic=float, spec_trans=float,
                             spec_tint=float, sheen=float, sheen_tint=float, clearcoat=float, clearcoat_gloss=float,
                             eta=float, has_trans=ti.i32, sr_spec=float, sr_cc=float, sr_diff=float,
                             lum_w=SPECTRUM)

    constants = staticmethod(principled_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Principled.Params(
            base_color=slot_rgb(st, ctx, _C), roughness=slot_float(st, ctx, _R),
            anisotropic=slot_float(st, ctx, _AN), metallic=slot_float(st, ctx, _M),
            spec_trans=slot_float(st, ctx, _ST), spec_tint=slot_float(st, ctx, _T), sheen=slot_float(st, ctx, _SH),
            sheen_tint=slot_float(st, ctx, _SHT), clearcoat=slot_float(st, ctx, _CC),
            clearcoat_gloss=slot_float(st, ctx, _CCG), eta=const(st, ctx, ETA),
            has_trans=ti.cast(const(st, ctx, HAS_TRANS), ti.i32), sr_spec=const(st, ctx, SR_SPEC),
            sr_cc=const(st, ctx, SR_CC), sr_diff=const(st, ctx, SR_DIFF), lum_w=variants.luminance_weights(ctx.lam))

    fetch_adjoint = staticmethod(slot_adjoints(KEYS))

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        res = 0.0
        ci = wi[2]
        if ci != 0.0:
            m = p.metallic
            brdf = (1.0 - m) * (1.0 - p.spec_trans)
            bsdf = (1.0 - m) * p.spec_trans
            wh, front, refl, refr, eta_path, F, mr, mt = _geometry(p, wi, wo)
            psr, pst, pcc, pd = _probs(p, front, F, bsdf, brdf)
            ax, ay, _, _, _, _ = dist_params(p.roughness, p.anisotropic)
            dih = wi.dot(wh)
            doh = wo.dot(wh)
            dwh = 0.0
            if refl:
                if doh != 0.0:
                    dwh = ti.abs(1.0 / (4.0 * doh))
            elif p.has_trans > 0:
                den = dih + eta_path * doh
                if den != 0.0:
                    dwh = ti.abs(eta_path * eta_path * doh / (den * den))
            wiu = wi * ti.select(ci >= 0.0, 1.0, -1.0)
            pv = ggx_aniso_pdf_visible(wiu, wh, ax, ay)
            if mr and refl:
                res += psr * pv * dwh
                if pcc > 0.0:
                    d, _ = _gtr1(wh, 0.1 + (0.001 - 0.1) * p.clearcoat_gloss)
                    res += pcc * ti.select(wh[2] < 0.0, 0.0, wh[2] * d) * dwh
            if refl:
                res += pd * INV_PI * wo[2]
            if p.has_trans > 0 and mt and refr:
                res += pst * pv * dwh
        return res

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        ci = wi[2]
        m = p.metallic
        brdf = (1.0 - m) * (1.0 - p.spec_trans)
        bsdf = (1.0 - m) * p.spec_trans
        front = ci > 0.0
        if ci != 0.0 and (front or bsdf > 0.0):
            ax, ay, _, _, _, _ = dist_params(p.roughness, p.anisotropic)
            sg = ti.select(ci >= 0.0, 1.0, -1.0)
            ms = ggx_aniso_sample_visible(wi * sg, ax, ay, u2)
            F, cos_t, eta_it, eta_ti = fresnel_dielectric(wi.dot(ms), p.eta)
            psr, pst, pcc, pd = _probs(p, front, F, bsdf, brdf)
            wo = vec3(0.0)
            ok = False
            eta = 1.0
            mm = ms * sg
            if u1 < pd:
                wo = square_to_cosine_hemisphere(u2)
                ok = ci * wo[2] > 0.0
            elif u1 < pd + pcc:
                a2 = (0.1 + (0.001 - 0.1) * p.clearcoat_gloss) ** 2
                c2 = (1.0 - ti.pow(a2, 1.0 - u2[1])) / (1.0 - a2)
                sth = ti.sqrt(ti.max(0.0, 1.0 - c2))
                cth = ti.sqrt(ti.max(0.0, c2))
                ph = 2.0 * PI * u2[0]
                mc = vec3(ti.cos(ph) * sth, ti.sin(ph) * sth, cth)
                wo = reflect_m(wi, mc)
                mcs = mc * sg
                ok = wi.dot(mcs) > 0.0 and wo.dot(mcs) > 0.0 and ci * wo[2] > 0.0
            elif u1 < pd + pcc + pst:
                wo = refract_m(wi, ms, cos_t, eta_ti)
                eta = eta_it
                ok = wi.dot(mm) > 0.0 and wo.dot(-mm) > 0.0 and ci * wo[2] < 0.0
            else:
                wo = reflect_m(wi, ms)
                ok = wi.dot(mm) > 0.0 and wo.dot(mm) > 0.0 and ci * wo[2] > 0.0
            if ok:
                s = sample_of(Principled, p, wi, wo, eta)
        return s

    @staticmethod
    @ti.func
    def core(p, wi, wo, d):
        """(f(wi, wo), ∂<d, f>/∂p): eval and adjoint share this one code path."""
        val = spec(0.0)
        g = Principled.Params(base_color=spec(0.0), roughness=0.0, anisotropic=0.0, metallic=0.0,
                              spec_trans=0.0, spec_tint=0.0, sheen=0.0, sheen_tint=0.0, clearcoat=0.0,
                              clearcoat_gloss=0.0, eta=0.0, has_trans=0, sr_spec=0.0, sr_cc=0.0, sr_diff=0.0)
        ci = wi[2]
        co = wo[2]
        if ci != 0.0:
            c, m, s_, brdf, bsdf = _lobe_weights(p)
            wh, front, refl, refr, eta_path, F, mr, mt = _geometry(p, wi, wo)
            ax, ay, dax_r, day_r, dax_a, day_a = dist_params(p.roughness, p.anisotropic)
            D, dDx, dDy = ggx_aniso_D(wh, ax, ay)
            G, dGx, dGy = ggx_aniso_G(wi, wo, wh, ax, ay)
            DG = D * G
            dDGx = dDx * G + D * dGx
            dDGy = dDy * G + D * dGy
            dih = wi.dot(wh)
            doh = wo.dot(wh)
            ctint, lum = tint(c, p.lum_w)
            gdg = 0.0   # ∂/∂(D G) of <d, f>
            # main specular reflection
            if refl and mr and F > 0.0:
                k = 1.0 / (4.0 * ti.abs(ci))
                if front:
                    t = p.spec_tint
                    w, eta_it = calc_schlick_w(dih, p.eta)
                    r0 = ((eta_it - 1.0) / (eta_it + 1.0)) ** 2
                    s_c = w + (1.0 - w) * c
                    s_t = w + (1.0 - w) * ctint * r0
                    Fp = (1.0 - m) * (1.0 - t) * F + m * s_c + (1.0 - m) * t * s_t
                    val += Fp * DG * k
                    gdg += d.dot(Fp) * k
                    g.metallic += DG * k * d.dot(-(1.0 - t) * F + s_c - t * s_t)
                    g.spec_tint += DG * k * (1.0 - m) * d.dot(s_t - F)
                    g.base_color += DG * k * (1.0 - w) * (m * d + (1.0 - m) * t * r0 * tint_vjp(c, p.lum_w, lum, d))
                else:
                    val += spec(bsdf * F * DG * k)
                    sd = d.sum()
                    gdg += bsdf * F * k * sd
                    g.metallic += -s_ * F * DG * k * sd
                    g.spec_trans += (1.0 - m) * F * DG * k * sd
            # main specular transmission (radiance: the η_path² of the Jacobian cancels Mitsuba's scale)
            if bsdf > 0.0 and refr and mt and F < 1.0:
                den = dih + eta_path * doh
                Y = 0.0
                if den != 0.0:
                    Y = ti.abs((1.0 - F) * dih * doh / (ci * den * den))
                sc = ti.sqrt(ti.max(c, 0.0))
                val += sc * bsdf * DG * Y
                dsc = d.dot(sc)
                gdg += bsdf * Y * dsc
                g.metallic += -s_ * DG * Y * dsc
                g.spec_trans += (1.0 - m) * DG * Y * dsc
                g.base_color += bsdf * DG * Y * d * ti.select(sc > 0.0, 0.5 / ti.select(sc > 0.0, sc, 1.0), 0.0)
            # clearcoat
            if p.clearcoat > 0.0 and refl and mr and front:
                w, _ = calc_schlick_w(dih, p.eta)
                fcc = w + (1.0 - w) * 0.04
                dcc, ddcc = _gtr1(wh, 0.1 + (0.001 - 0.1) * p.clearcoat_gloss)
                gcc = _smith_ggx1(wi, wh, 0.25) * _smith_ggx1(wo, wh, 0.25)
                q = 0.25 * fcc * gcc * ti.abs(co)
                val += spec(p.clearcoat * q * dcc)
                sd = d.sum()
                g.clearcoat += q * dcc * sd
                g.clearcoat_gloss += p.clearcoat * q * ddcc * (0.001 - 0.1) * sd
            # diffuse + retro-reflection, sheen
            if brdf > 0.0 and refl and front:
                fo = schlick_weight(ti.abs(co))
                fi = schlick_weight(ti.abs(ci))
                cd = wh.dot(wo)
                lobe, _, _, _, dlobe_r = diffuse_retro(p.roughness, fi, fo, cd)
                kd = ti.abs(co) * INV_PI
                val += brdf * kd * lobe * c
                dc = d.dot(c)
                g.base_color += brdf * kd * lobe * d
                g.metallic += -(1.0 - s_) * kd * lobe * dc
                g.spec_trans += -(1.0 - m) * kd * lobe * dc
                g.roughness += brdf * kd * dc * dlobe_r
                if p.sheen > 0.0 and 1.0 - m > 0.0:
                    fd = schlick_weight(ti.abs(cd))
                    csh = 1.0 + (ctint - 1.0) * p.sheen_tint
                    b = fd * ti.abs(co)
                    val += p.sheen * (1.0 - m) * b * csh
                    g.sheen += (1.0 - m) * b * d.dot(csh)
                    g.metallic += -p.sheen * b * d.dot(csh)
                    g.sheen_tint += p.sheen * (1.0 - m) * b * d.dot(ctint - 1.0)
                    g.base_color += p.sheen * (1.0 - m) * b * p.sheen_tint * tint_vjp(c, p.lum_w, lum, d)
            dax = gdg * dDGx
            day = gdg * dDGy
            g.roughness += dax * dax_r + day * day_r
            g.anisotropic += dax * dax_a + day * day_a
        return val, g

    f, f_adjoint = from_core(core)

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d):
        """(∂<d, f>/∂wi, ∂<d, f>/∂wo), term by term through h, wi·h, wo·h, cos θi, cos θo (the lobe
        masks and the side of h are piecewise constant)."""
        g_wi = vec3(0.0)
        g_wo = vec3(0.0)
        ci = wi[2]
        co = wo[2]
        if ci != 0.0:
            c, m, s_, brdf, bsdf = _lobe_weights(p)
            wh, front, refl, refr, eta_path, F, mr, mt = _geometry(p, wi, wo)
            u = wi + wo * ti.select(refl, 1.0, eta_path)
            ul = u.norm()
            ax, ay, _, _, _, _ = dist_params(p.roughness, p.anisotropic)
            D, _, _ = ggx_aniso_D(wh, ax, ay)
            gD = ggx_aniso_D_grad(wh, ax, ay, D)
            Gi, _, _ = ggx_aniso_g1(wi, wh, ax, ay)
            Go, _, _ = ggx_aniso_g1(wo, wh, ax, ay)
            gGi = ggx_aniso_g1_grad(wi, ax, ay, Gi)
            gGo = ggx_aniso_g1_grad(wo, ax, ay, Go)
            DG = D * Gi * Go
            dih = wi.dot(wh)
            doh = wo.dot(wh)
            dF = fresnel_dielectric_dcos(dih, p.eta)
            ctint, lum = tint(c, p.lum_w)
            sgi = ti.select(ci >= 0.0, 1.0, -1.0)
            sgo = ti.select(co >= 0.0, 1.0, -1.0)
            g_ci = 0.0
            g_co = 0.0
            g_dih = 0.0
            g_doh = 0.0
            g_wh = vec3(0.0)
            a_dg = 0.0   # ∂E/∂(D G) through the microfacet lobes
            if refl and mr and F > 0.0:
                k = 1.0 / (4.0 * ti.abs(ci))
                A = 0.0
                B = 0.0
                if front:
                    t = p.spec_tint
                    w, eta_it = calc_schlick_w(dih, p.eta)
                    dw = calc_schlick_w_dcos(dih, p.eta)
                    r0 = ((eta_it - 1.0) / (eta_it + 1.0)) ** 2
                    Fp = (1.0 - m) * (1.0 - t) * F + m * (w + (1.0 - w) * c) + (1.0 - m) * t * (w + (1.0 - w) * ctint * r0)
                    dFp = (1.0 - m) * (1.0 - t) * dF + dw * (m * (1.0 - c) + (1.0 - m) * t * (1.0 - ctint * r0))
                    A = d.dot(Fp)
                    B = d.dot(dFp)
                else:
                    A = bsdf * F * d.sum()
                    B = bsdf * dF * d.sum()
                g_dih += B * DG * k
                a_dg += A * k
                g_ci += -A * DG * sgi / (4.0 * ci * ci)
            if bsdf > 0.0 and refr and mt and F < 1.0:
                den = dih + eta_path * doh
                if den != 0.0:
                    Z = (1.0 - F) * dih * doh / (ci * den * den)
                    sz = ti.select(Z >= 0.0, 1.0, -1.0)
                    A = bsdf * d.dot(ti.sqrt(ti.max(c, 0.0)))
                    dZ_dih = (-dF * dih * doh + (1.0 - F) * doh) / (ci * den * den) - 2.0 * Z / den
                    dZ_doh = (1.0 - F) * dih / (ci * den * den) - 2.0 * Z * eta_path / den
                    g_dih += A * DG * sz * dZ_dih
                    g_doh += A * DG * sz * dZ_doh
                    g_ci += A * DG * sz * (-Z / ci)
                    a_dg += A * ti.abs(Z)
            if p.clearcoat > 0.0 and refl and mr and front:
                w, _ = calc_schlick_w(dih, p.eta)
                dw = calc_schlick_w_dcos(dih, p.eta)
                fcc = w + (1.0 - w) * 0.04
                al = 0.1 + (0.001 - 0.1) * p.clearcoat_gloss
                dcc, _ = _gtr1(wh, al)
                gi_ = _smith_ggx1(wi, wh, 0.25)
                go_ = _smith_ggx1(wo, wh, 0.25)
                q = 0.25 * p.clearcoat * d.sum()
                aco = ti.abs(co)
                g_dih += q * 0.96 * dw * dcc * gi_ * go_ * aco
                g_wh[2] += q * fcc * _gtr1_dz(wh, al, dcc) * gi_ * go_ * aco
                g_wi[2] += q * fcc * dcc * _smith_ggx1_dz(wi, 0.25, gi_) * go_ * aco
                g_wo[2] += q * fcc * dcc * gi_ * _smith_ggx1_dz(wo, 0.25, go_) * aco
                g_co += q * fcc * dcc * gi_ * go_ * sgo
            if brdf > 0.0 and refl and front:
                fo = schlick_weight(ti.abs(co))
                fi = schlick_weight(ti.abs(ci))
                dfo = schlick_weight_d(ti.abs(co)) * sgo
                dfi = schlick_weight_d(ti.abs(ci)) * sgi
                cd = doh
                lobe, dl_fi, dl_fo, dl_cd, _ = diffuse_retro(p.roughness, fi, fo, cd)
                S = brdf * d.dot(c) * INV_PI
                aco = ti.abs(co)
                g_co += S * (sgo * lobe + aco * dl_fo * dfo)
                g_ci += S * aco * dl_fi * dfi
                g_doh += S * aco * dl_cd
                if p.sheen > 0.0 and 1.0 - m > 0.0:
                    csh = 1.0 + (ctint - 1.0) * p.sheen_tint
                    sv = p.sheen * (1.0 - m) * d.dot(csh)
                    scd = ti.select(cd >= 0.0, 1.0, -1.0)
                    g_doh += sv * schlick_weight_d(ti.abs(cd)) * scd * aco
                    g_co += sv * schlick_weight(ti.abs(cd)) * sgo
            # the microfacet lobes' D(h) G1(wi) G1(wo)
            g_wh += a_dg * Gi * Go * gD
            g_wi += a_dg * D * Go * gGi
            g_wo += a_dg * D * Gi * gGo
            # h = ±normalize(u), u = wi + k wo
            g_wh += g_dih * wi + g_doh * wo
            g_wi += g_dih * wh
            g_wo += g_doh * wh
            g_wi[2] += g_ci
            g_wo[2] += g_co
            if ul > 0.0:
                sh_ = ti.select(u[2] >= 0.0, 1.0, -1.0)
                g_u = sh_ * (g_wh - wh * wh.dot(g_wh)) / ul
                g_wi += g_u
                g_wo += g_u * ti.select(refl, 1.0, eta_path)
        return g_wi, g_wo
