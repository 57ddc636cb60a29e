"""Thin principled BSDF, Mitsuba 3's ``principledthin`` (src/bsdfs/principledthin.cpp, principledhelpers.h;
Burley 2012/2015): a sheet of negligible thickness, term by term. Two-sided and symmetric: Mitsuba mirrors wi
and wo to wi's side (mulsign by cos θi), so f(wi, wo) = f(-wi, -wo); below, wi is on the front side (cos θi > 0).
c = base_color, r = roughness, a = anisotropic, s = spec_trans, t = spec_tint, η = eta, δ = diff_trans / 2.

    h = normalize(wi + wo_r), wo_r = (wo_x, wo_y, |wo_z|) (the reflection half vector, also for transmission:
    the sheet transmits as a mirrored reflection); D, G the anisotropic GGX with calc_dist_params(a, r), D_s, G_s
    with the roughness (0.65 η - 0.35) r (Burley 2015, fig. 15); F the dielectric Fresnel F(wi·h, η);
    w(x) = (1 - x)^5; lum = luminance(c, λ), c_tint = c / lum.
    specular reflection   s F_thin D G / (4 cos θi), F_thin = lerp(F, S(c_tint R0(η)), t)    (Mitsuba's
                          thin_fresnel; S(R0) = w + (1 - w) R0 its calc_schlick)        (wi·h > 0, wo·h > 0)
    specular transmission s c (1 - F) D_s G_s / (4 cos θi)                          (wi·h > 0, wo·h < 0)
    diffuse (+ retro, fake subsurface)
                          (1 - s)(1 - δ) cos θo c / π lerp(f_diff + f_retro, f_ss, flatness)  (reflection;
                          principledhelpers.diffuse_retro / fake_subsurface, cos θd = h·wo)
    sheen                 sheen (1 - s)(1 - δ) w(|cos θd|) lerp(1, c_tint, sheen_tint) |cos θo|   (reflection)
    diffuse transmission  (1 - s) δ c / π |cos θo|                                 (transmission, δ > 0)
Sampling: Mitsuba's lobe probabilities, s rate_sr / 2 (specular reflection), s rate_st / 2 (specular
transmission: a visible normal of D_s, wi reflected about it and mirrored through the sheet),
rate_dr (1 - s)(1 - δ) (cosine hemisphere), rate_dt (1 - s) δ (cosine hemisphere, mirrored), normalised;
visible-normal sampling identical to Mitsuba's (same normal for the same u2), a sample whose normal does not
agree with the surface is discarded as Mitsuba does; pdf = Mitsuba's pdf() (the density of the valid
samples), weight = eval / pdf, η = 1 (no bending).
Variants: every one; luminance(c, λ) is Mitsuba's (rgb: the sRGB weights, mono: the value, spectral: the
lanes' mean of ȳ(λ) c); spectral_polarized: a depolarizer, as Mitsuba's. Transport: Mitsuba ignores the mode and
so does this (the specular transmission is not reciprocal where the masks of the two orders differ: Mitsuba's).
Mitsuba's m_has_* switches (a parameter given as the float 0 turns its lobe's code off) change no value: they
compute what the value 0 computes; here the derivative of such a parameter is its true one (Mitsuba's once
parameters_changed() turned the switch on), except where Mitsuba's masks turn a lobe off (s = 0: the specular
lobes, δ = 0: the diffuse transmission; their derivative is 0 there, as Mitsuba's). Differentiable (hand-written
adjoints; Mitsuba's traverse): base_color (RGB), roughness, anisotropic, spec_trans, eta, spec_tint, sheen,
sheen_tint, flatness, diff_trans; analytic direction derivatives (grad_dirs, for normal maps) through h, wi·h,
wo·h, cos θi and cos θo.
"""
import math

import taichi as ti

from .. import variants
from ..core.math import INV_PI, vec3
from ..core.warp import square_to_cosine_hemisphere
from ..schema import Number, Texture
from ..variants import SPECTRUM, spec, struct
from .base import (BOTH_SIDES, SMOOTH, TRANSMISSION, const, invalid_sample, leaf, sample_of, slot_adjoints,
                   slot_float, slot_rgb)
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_dielectric_deta, reflect_m
from .microfacet import (ggx_aniso_D, ggx_aniso_D_grad, ggx_aniso_g1, ggx_aniso_g1_grad, ggx_aniso_G,
                         ggx_aniso_pdf_visible, ggx_aniso_sample_visible)
from .principledhelpers import (calc_schlick_w, calc_schlick_w_dcos, calc_schlick_w_deta, diffuse_retro,
                                dist_params, fake_subsurface, from_core, schlick_r0, schlick_r0_deta, schlick_weight,
                                schlick_weight_d, tint, tint_vjp, unit_texture)

(_C, _R, _AN, _ST, _ETA, _T, _SH, _SHT, _FL, _DT) = range(10)      # texture slots
RATES = ("specular_reflectance_sampling_rate", "specular_transmittance_sampling_rate",
         "diffuse_reflectance_sampling_rate", "diffuse_transmittance_sampling_rate")   # constants 0..3


@ti.func
def _front(wi, wo):
    """(wi, wo, ±1) mirrored to wi's side (Mitsuba's mulsign by cos θi)."""
    sg = ti.select(wi[2] >= 0.0, 1.0, -1.0)
    return wi * sg, wo * sg, sg


@ti.func
def _mirror(wo):
    """wo_r = (wo_x, wo_y, |wo_z|): a transmitted direction mirrored back to the front side."""
    return vec3(wo[0], wo[1], ti.abs(wo[2]))


@ti.func
def _half(wi, wo):
    """(h, |wi + wo_r|): the reflection half vector of the front-side pair (|wi + wo_r| > 0 as wi_z > 0)."""
    u = wi + _mirror(wo)
    ul = u.norm()
    return u / ti.select(ul > 0.0, ul, 1.0), ul


@ti.func
def _geometry(wi, wo):
    """(wi', wo', ±1, h, |wi' + wo_r|, wi'·h, wo'·h): the pair mirrored to wi's side, its half vector and cosines."""
    a, b, sg = _front(wi, wo)
    wh, ul = _half(a, b)
    return a, b, sg, wh, ul, a.dot(wh), b.dot(wh)


@ti.func
def _diffuse(p, ci, co, cd):
    """L = lerp(f_diff + f_retro, f_ss, flatness) at cos θi = ci, cos θo = co > 0, cos θd = cd, and its partials
    (∂/∂F_i, ∂/∂F_o, ∂/∂cos θd, ∂/∂r, ∂/∂(ci + co), ∂/∂flatness)."""
    fi = schlick_weight(ci)
    fo = schlick_weight(co)
    fa, da_fi, da_fo, da_cd, da_r = diffuse_retro(p.roughness, fi, fo, cd)
    fss, ds_fi, ds_fo, ds_cd, ds_r, ds_cs = fake_subsurface(p.roughness, fi, fo, cd, co + ci)
    fl = p.flatness
    return (fa + fl * (fss - fa), da_fi + fl * (ds_fi - da_fi), da_fo + fl * (ds_fo - da_fo),
            da_cd + fl * (ds_cd - da_cd), da_r + fl * (ds_r - da_r), fl * ds_cs, fss - fa)


@ti.func
def _trans_rough(p):
    """The transmission's roughness (0.65 η - 0.35) r."""
    return (0.65 * p.eta - 0.35) * p.roughness


@ti.func
def _probs(p):
    """Mitsuba's normalised lobe probabilities (specular reflection, specular transmission, diffuse reflection,
    diffuse transmission)."""
    s = p.spec_trans
    dt = 0.5 * p.diff_trans
    psr = s * p.sr_sr * 0.5
    pst = s * p.sr_st * 0.5
    pdr = p.sr_dr * (1.0 - s) * (1.0 - dt)
    pdt = p.sr_dt * (1.0 - s) * dt
    tot = psr + pst + pdr + pdt
    inv = ti.select(tot > 0.0, 1.0 / ti.select(tot > 0.0, tot, 1.0), 0.0)
    return psr * inv, pst * inv, pdr * inv, pdt * inv


@ti.func
def _dg(wh, wi, wo, ax, ay):
    """(D G, ∂(D G)/∂α_x, ∂(D G)/∂α_y) of the anisotropic GGX."""
    D, dDx, dDy = ggx_aniso_D(wh, ax, ay)
    G, dGx, dGy = ggx_aniso_G(wi, wo, wh, ax, ay)
    return D * G, dDx * G + D * dGx, dDy * G + D * dGy


@leaf
class PrincipledThin:
    NAME = "principledthin"
    KEYS = (unit_texture("base_color", "base color", 0.5, 3),
            unit_texture("roughness", "roughness of the specular lobes (α = roughness²)", 0.5),
            unit_texture("anisotropic", "degree of anisotropy (0: isotropic)"),
            unit_texture("spec_trans", "blend of the diffuse (0) and the specular (1) responses"),
            Texture("eta", 1, default=1.5, lo=0.0, hi=math.inf, strict_lo=True,
                    doc="IOR of the sheet (interior / exterior); also scales the transmission's roughness"),
            unit_texture("spec_tint", "fraction of base_color tint on the specular reflection"),
            unit_texture("sheen", "sheen lobe rate"),
            unit_texture("sheen_tint", "fraction of base_color tint on the sheen"),
            unit_texture("flatness", "blend of the diffuse (0) and the fake subsurface (1) responses"),
            Texture("diff_trans", 1, default=0.0, lo=0.0, hi=2.0,
                    doc="share of the diffuse energy given to transmission (0: none, 2: all)"),
            *(Number(k, default=1.0, lo=0.0, doc=f"sampling rate of the {k[:-14].replace('_', ' ')}")
              for k in RATES))
    FLAGS = SMOOTH | BOTH_SIDES | TRANSMISSION
    Params = struct(base_color=SPECTRUM, roughness=float, anisotropic=float, spec_trans=float, eta=float,
                    spec_tint=float, sheen=float, sheen_tint=float, flatness=float, diff_trans=float,
                    sr_sr=float, sr_st=float, sr_dr=float, sr_dt=float, lum_w=SPECTRUM)

    @staticmethod
    def constants(values, file, key):
        """The four sampling rates (Mitsuba's order of RATES)."""
        return [float(values[k]) for k in RATES]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return PrincipledThin.Params(
            base_color=slot_rgb(st, ctx, _C), roughness=slot_float(st, ctx, _R), anisotropic=slot_float(st, ctx, _AN),
            spec_trans=slot_float(st, ctx, _ST), eta=slot_float(st, ctx, _ETA), spec_tint=slot_float(st, ctx, _T),
            sheen=slot_float(st, ctx, _SH), sheen_tint=slot_float(st, ctx, _SHT), flatness=slot_float(st, ctx, _FL),
            diff_trans=slot_float(st, ctx, _DT), sr_sr=const(st, ctx, 0), sr_st=const(st, ctx, 1),
            sr_dr=const(st, ctx, 2), sr_dt=const(st, ctx, 3), lum_w=variants.luminance_weights(ctx.lam))

    fetch_adjoint = staticmethod(slot_adjoints(KEYS))

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        res = 0.0
        if wi[2] != 0.0:
            a, b, _, wh, _, dih, doh = _geometry(wi, wo)
            co = b[2]
            psr, pst, pdr, pdt = _probs(p)
            if psr + pst > 0.0:
                dor = _mirror(b).dot(wh)
                dwh = ti.abs(1.0 / ti.select(dor != 0.0, 4.0 * dor, 1.0))
                if co > 0.0 and dih > 0.0 and doh > 0.0:
                    ax, ay, _, _, _, _ = dist_params(p.roughness, p.anisotropic)
                    res += psr * ggx_aniso_pdf_visible(a, wh, ax, ay) * dwh
                if co < 0.0 and dih > 0.0 and doh < 0.0:
                    ax, ay, _, _, _, _ = dist_params(_trans_rough(p), p.anisotropic)
                    res += pst * ggx_aniso_pdf_visible(a, wh, ax, ay) * dwh
            if co > 0.0:
                res += pdr * INV_PI * co
            if co < 0.0:
                res += pdt * INV_PI * -co
        return res

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        if wi[2] != 0.0:
            sg = ti.select(wi[2] >= 0.0, 1.0, -1.0)
            a = wi * sg
            psr, pst, pdr, pdt = _probs(p)
            wo = vec3(0.0)
            ok = False
            if u1 < psr:
                ax, ay, _, _, _, _ = dist_params(p.roughness, p.anisotropic)
                m = ggx_aniso_sample_visible(a, ax, ay, u2)
                wo = reflect_m(a, m)
                ok = a.dot(m) > 0.0 and wo.dot(m) > 0.0 and wo[2] > 0.0
            elif u1 < psr + pst:
                ax, ay, _, _, _, _ = dist_params(_trans_rough(p), p.anisotropic)
                m = ggx_aniso_sample_visible(a, ax, ay, u2)
                wo = reflect_m(a, m)
                wo[2] = -wo[2]
                ok = a.dot(m) > 0.0 and wo.dot(m) < 0.0 and wo[2] < 0.0
            elif u1 < psr + pst + pdr:
                wo = square_to_cosine_hemisphere(u2)
                ok = True
            else:
                wo = -square_to_cosine_hemisphere(u2)
                ok = True
            if ok:
                s = sample_of(PrincipledThin, p, wi, wo * sg, 1.0)
        return s

    @staticmethod
    @ti.func
    def core(p, wi, wo, d):
        """(f(wi, wo), ∂<d, f>/∂p): eval and adjoint share this one code path."""
        val = spec(0.0)
        g = PrincipledThin.Params(base_color=spec(0.0), roughness=0.0, anisotropic=0.0, spec_trans=0.0, eta=0.0,
                                  spec_tint=0.0, sheen=0.0, sheen_tint=0.0, flatness=0.0, diff_trans=0.0,
                                  sr_sr=0.0, sr_st=0.0, sr_dr=0.0, sr_dt=0.0, lum_w=spec(0.0))
        if wi[2] != 0.0:
            a, b, _, wh, _, dih, doh = _geometry(wi, wo)
            ci = a[2]
            co = b[2]
            c = p.base_color
            s_ = p.spec_trans
            dt = 0.5 * p.diff_trans
            eta = p.eta
            ctint, lum = tint(c, p.lum_w)
            dc = d.dot(c)
            k = 1.0 / (4.0 * ci)
            # specular reflection
            if s_ > 0.0 and co > 0.0 and dih > 0.0 and doh > 0.0:
                F, _, _, _ = fresnel_dielectric(dih, eta)
                ax, ay, dax_r, day_r, dax_a, day_a = dist_params(p.roughness, p.anisotropic)
                DG, dDGx, dDGy = _dg(wh, a, b, ax, ay)
                t = p.spec_tint
                w, _ = calc_schlick_w(dih, eta)
                r0 = schlick_r0(eta)
                S = w + (1.0 - w) * ctint * r0
                Ft = (1.0 - t) * F + t * S
                val += s_ * Ft * DG * k
                dFt = d.dot(Ft)
                g.spec_trans += dFt * DG * k
                g.spec_tint += s_ * DG * k * d.dot(S - F)
                g.base_color += s_ * DG * k * t * (1.0 - w) * r0 * tint_vjp(c, p.lum_w, lum, d)
                dS = calc_schlick_w_deta(dih, eta) * (1.0 - ctint * r0) + (1.0 - w) * ctint * schlick_r0_deta(eta)
                g.eta += s_ * DG * k * ((1.0 - t) * fresnel_dielectric_deta(dih, eta) * d.sum() + t * d.dot(dS))
                gdg = s_ * k * dFt
                g.roughness += gdg * (dDGx * dax_r + dDGy * day_r)
                g.anisotropic += gdg * (dDGx * dax_a + dDGy * day_a)
            # specular transmission
            if s_ > 0.0 and co < 0.0 and dih > 0.0 and doh < 0.0:
                F, _, _, _ = fresnel_dielectric(dih, eta)
                ks = 0.65 * eta - 0.35
                ax, ay, dax_r, day_r, dax_a, day_a = dist_params(ks * p.roughness, p.anisotropic)
                DG, dDGx, dDGy = _dg(wh, a, b, ax, ay)
                q = s_ * (1.0 - F) * k
                val += q * DG * c
                g.base_color += q * DG * d
                g.spec_trans += (1.0 - F) * k * DG * dc
                gx = q * dc * dDGx
                gy = q * dc * dDGy
                g_rs = gx * dax_r + gy * day_r        # ∂/∂ of the scaled roughness
                g.roughness += g_rs * ks
                g.anisotropic += gx * dax_a + gy * day_a
                g.eta += -s_ * fresnel_dielectric_deta(dih, eta) * k * DG * dc + g_rs * 0.65 * p.roughness
            # diffuse + retro-reflection + fake subsurface, sheen
            if co > 0.0 and s_ < 1.0 and dt < 1.0:
                L, _, _, _, dL_r, _, dL_fl = _diffuse(p, ci, co, doh)
                wd = (1.0 - s_) * (1.0 - dt)
                kd = co * INV_PI
                val += wd * kd * L * c
                g.base_color += wd * kd * L * d
                g.spec_trans += -(1.0 - dt) * kd * L * dc
                g.diff_trans += -0.5 * (1.0 - s_) * kd * L * dc
                g.flatness += wd * kd * dL_fl * dc
                g.roughness += wd * kd * dc * dL_r
                sh = p.sheen
                csh = 1.0 + (ctint - 1.0) * p.sheen_tint
                bs = schlick_weight(ti.abs(doh)) * co
                val += sh * wd * bs * csh
                dsh = d.dot(csh)
                g.sheen += wd * bs * dsh
                g.spec_trans += -sh * (1.0 - dt) * bs * dsh
                g.diff_trans += -0.5 * sh * (1.0 - s_) * bs * dsh
                g.sheen_tint += sh * wd * bs * d.dot(ctint - 1.0)
                g.base_color += sh * wd * bs * p.sheen_tint * tint_vjp(c, p.lum_w, lum, d)
            # diffuse transmission
            if co < 0.0 and s_ < 1.0 and dt > 0.0:
                kt = -co * INV_PI
                val += (1.0 - s_) * dt * kt * c
                g.base_color += (1.0 - s_) * dt * kt * d
                g.spec_trans += -dt * kt * dc
                g.diff_trans += 0.5 * (1.0 - s_) * kt * dc
        return val, g

    f, f_adjoint = from_core(core)

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d):
        """(∂<d, f>/∂wi, ∂<d, f>/∂wo), term by term through h, wi·h, wo·h, cos θi and cos θo on the front side
        (the lobe masks and the mirroring are piecewise constant)."""
        g_wi = vec3(0.0)
        g_wo = vec3(0.0)
        if wi[2] != 0.0:
            a, b, sg, wh, ul, dih, doh = _geometry(wi, wo)
            ci = a[2]
            co = b[2]
            s_ = p.spec_trans
            dt = 0.5 * p.diff_trans
            eta = p.eta
            ctint, _ = tint(p.base_color, p.lum_w)
            dc = d.dot(p.base_color)
            k = 1.0 / (4.0 * ci)
            g_a = vec3(0.0)
            g_b = vec3(0.0)
            g_wh = vec3(0.0)
            g_ci = 0.0
            g_co = 0.0
            g_dih = 0.0
            g_doh = 0.0
            refl = s_ > 0.0 and co > 0.0 and dih > 0.0 and doh > 0.0
            refr = s_ > 0.0 and co < 0.0 and dih > 0.0 and doh < 0.0
            if refl or refr:
                F, _, _, _ = fresnel_dielectric(dih, eta)
                dF = fresnel_dielectric_dcos(dih, eta)
                A = 0.0     # <d, the lobe> / (D G)
                B = 0.0     # its ∂/∂(wi·h)
                rough = p.roughness
                if refl:
                    t = p.spec_tint
                    w, _ = calc_schlick_w(dih, eta)
                    dw = calc_schlick_w_dcos(dih, eta)
                    r0 = schlick_r0(eta)
                    A = s_ * k * d.dot((1.0 - t) * F + t * (w + (1.0 - w) * ctint * r0))
                    B = s_ * k * d.dot((1.0 - t) * dF + t * dw * (1.0 - ctint * r0))
                else:
                    rough = _trans_rough(p)
                    A = s_ * k * (1.0 - F) * dc
                    B = -s_ * k * dF * dc
                ax, ay, _, _, _, _ = dist_params(rough, p.anisotropic)
                D, _, _ = ggx_aniso_D(wh, ax, ay)
                Gi, _, _ = ggx_aniso_g1(a, wh, ax, ay)
                Go, _, _ = ggx_aniso_g1(b, wh, ax, ay)
                DG = D * Gi * Go
                g_dih += B * DG
                g_ci += -A * DG / ci
                g_wh += A * Gi * Go * ggx_aniso_D_grad(wh, ax, ay, D)
                g_a += A * D * Go * ggx_aniso_g1_grad(a, ax, ay, Gi)
                g_b += A * D * Gi * ggx_aniso_g1_grad(b, ax, ay, Go)
            if co > 0.0 and s_ < 1.0 and dt < 1.0:
                L, dL_fi, dL_fo, dL_cd, _, dL_cs, _ = _diffuse(p, ci, co, doh)
                S = (1.0 - s_) * (1.0 - dt) * INV_PI * dc
                g_co += S * (L + co * (dL_fo * schlick_weight_d(co) + dL_cs))
                g_ci += S * co * (dL_fi * schlick_weight_d(ci) + dL_cs)
                g_doh += S * co * dL_cd
                sv = p.sheen * (1.0 - s_) * (1.0 - dt) * d.dot(1.0 + (ctint - 1.0) * p.sheen_tint)
                g_doh += sv * schlick_weight_d(ti.abs(doh)) * ti.select(doh >= 0.0, 1.0, -1.0) * co
                g_co += sv * schlick_weight(ti.abs(doh))
            if co < 0.0 and s_ < 1.0 and dt > 0.0:
                g_co += -(1.0 - s_) * dt * INV_PI * dc
            # h = normalize(wi + wo_r), wo_r = (wo_x, wo_y, |wo_z|)
            g_wh += g_dih * a + g_doh * b
            g_a += g_dih * wh
            g_b += g_doh * wh
            g_a[2] += g_ci
            g_b[2] += g_co
            g_u = (g_wh - wh * wh.dot(g_wh)) / ul
            g_a += g_u
            g_b += vec3(g_u[0], g_u[1], g_u[2] * ti.select(co >= 0.0, 1.0, -1.0))
            g_wi = g_a * sg
            g_wo = g_b * sg
        return g_wi, g_wo
