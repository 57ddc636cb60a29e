"""Microfacet distributions of Mitsuba 3 (``microfacet.h``): GGX (Trowbridge-Reitz) and Beckmann,
anisotropic (α_u along the shading frame's s = x axis, α_v along t = y), Smith masking with the
projected roughness, visible normal sampling, plus the roughness and direction derivatives used
by the adjoints.

The distribution travels with the roughness: every function takes a *signed* roughness
``alpha = vec2(α_u, α_v)`` (both components of one sign), GGX when positive, Beckmann when
negative (``signed_alpha``; models build it from their ``distribution`` key; an isotropic model
passes its α twice). Derivatives are with respect to (α_u, α_v) = |alpha| (vec2; the isotropic
∂/∂α is their sum). All ``@ti.func``s in the local frame (z = macro normal), Taichi's default
float type. α is clamped to ``ALPHA_MIN`` internally (no Inf/NaN as α → 0); derivatives w.r.t. α
are 0 below the clamp.

    D(m, alpha)                      normal distribution (0 where D cos θm <= 1e-20, as Mitsuba)
        GGX      1 / (π α_u α_v (m_x²/α_u² + m_y²/α_v² + m_z²)²)
        Beckmann exp(-(m_x²/α_u² + m_y²/α_v²) / m_z²) / (π α_u α_v m_z⁴)
    dD_dalpha(m, alpha)              (∂D/∂α_u, ∂D/∂α_v)
    smith_g1(v, m, alpha)            Smith G1 (0 when v sees the back of m), with the projected
                                     roughness tan²θ_α = (α_u² v_x² + α_v² v_y²) / v_z² = P / v_z²
        GGX      2 / (1 + sqrt(1 + tan²θ_α))
        Beckmann Mitsuba's rational fit: a = 1 / tan θ_α, 1 for a >= 1.6, else
                 (3.535 a + 2.181 a²) / (1 + 2.276 a + 2.577 a²)   (< 0.35 % from the exact G1)
    dsmith_g1_dalpha(v, m, alpha)    (∂G1/∂α_u, ∂G1/∂α_v)
    G(wi, wo, m, alpha)              separable Smith G = G1(wi, m) G1(wo, m)
    dG_dalpha(wi, wo, m, alpha)      ∂G/∂(α_u, α_v)
    DG_and_dalpha(wi, wo, m, alpha)  (D G, ∂(D G)/∂(α_u, α_v))
    sample_visible_normal(wi, alpha, u2) -> (m, pdf)   wi.z > 0 required; wi is stretched by
                                     (α_u, α_v) to the α = 1 configuration and the normal
                                     unstretched (GGX: Heitz 2018; Beckmann: Mitsuba's
                                     sample_visible_11, numerical inversion)
    pdf_visible_normal(wi, m, alpha) = G1(wi, m) max(0, wi·m) D(m) / cos θi
As Mitsuba, Beckmann's visible-normal density uses the fitted G1, so its pdf is normalised to
within the fit's 0.35 %. The host-side numpy tables at the end (roughplastic) are isotropic.
"""
import functools

import taichi as ti

from ..core.math import INV_PI, PI, safe_sqrt, vec2, vec3
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos

ALPHA_MIN = 1e-4
GGX, BECKMANN = "ggx", "beckmann"
INV_SQRT_PI = 0.56418958354775628695


def signed_alpha_sign(distribution):
    """+1 for GGX, -1 for Beckmann: a model multiplies its α by this (host side constant)."""
    return -1.0 if distribution == BECKMANN else 1.0


@ti.func
def signed_alpha(alpha_u, alpha_v, sign):
    """The signed roughness (α_u, α_v) the functions below take (sign: the row's
    ``signed_alpha_sign``); an isotropic model passes its α twice."""
    return vec2(ti.max(alpha_u, ALPHA_MIN) * sign, ti.max(alpha_v, ALPHA_MIN) * sign)


@ti.func
def clamp_alpha(alpha):
    return vec2(ti.max(ti.abs(alpha[0]), ALPHA_MIN), ti.max(ti.abs(alpha[1]), ALPHA_MIN))


@ti.func
def _live(alpha):
    """1 per component where α is above the clamp (derivatives are 0 below it)."""
    return vec2(ti.select(ti.abs(alpha[0]) >= ALPHA_MIN, 1.0, 0.0), ti.select(ti.abs(alpha[1]) >= ALPHA_MIN, 1.0, 0.0))


@ti.func
def _slopes2(m, a):
    """m_x² / α_u² + m_y² / α_v²."""
    return m[0] * m[0] / (a[0] * a[0]) + m[1] * m[1] / (a[1] * a[1])


@ti.func
def D(m, alpha):
    a = clamp_alpha(alpha)
    e = _slopes2(m, a)
    z2 = m[2] * m[2]
    res = 0.0
    if alpha[0] < 0.0:
        if z2 > 0.0:
            res = ti.exp(-e / z2) / (PI * a[0] * a[1] * z2 * z2)
    else:
        q = e + z2
        if q > 0.0:
            res = 1.0 / (PI * a[0] * a[1] * q * q)
    # Mitsuba: "prevent potential numerical issues in other stages of the model"
    if res * m[2] <= 1e-20:
        res = 0.0
    return res


@ti.func
def dD_dalpha(m, alpha):
    """(∂D/∂α_u, ∂D/∂α_v). GGX: D (-1/α_u + 4 m_x² / (α_u³ q)), q = m_x²/α_u² + m_y²/α_v² + m_z²;
    Beckmann: D (-1/α_u + 2 m_x² / (α_u³ m_z²)) (and likewise for v)."""
    a = clamp_alpha(alpha)
    d = D(m, alpha)
    res = vec2(0.0)
    if d > 0.0:
        k = 2.0 / (m[2] * m[2])
        if alpha[0] >= 0.0:
            k = 4.0 / (_slopes2(m, a) + m[2] * m[2])
        res = d * vec2(-1.0 / a[0] + k * m[0] * m[0] / (a[0] * a[0] * a[0]),
                       -1.0 / a[1] + k * m[1] * m[1] / (a[1] * a[1] * a[1])) * _live(alpha)
    return res


@ti.func
def _g1_terms(v, alpha):
    """(α clamped, P = α_u² v_x² + α_v² v_y², |v_z|, r = sqrt(v_z² + P)) of Smith's G1 with the
    projected roughness (Mitsuba: tan²θ_α = P / v_z²) and of its derivatives."""
    a = clamp_alpha(alpha)
    P = a[0] * a[0] * v[0] * v[0] + a[1] * a[1] * v[1] * v[1]
    z = ti.abs(v[2])
    return a, P, z, ti.sqrt(z * z + P)


@ti.func
def _beckmann_fit(b):
    """(G1, dG1/db) of Mitsuba's rational Beckmann fit in b = 1 / (α tan θ)."""
    g = 1.0
    dg = 0.0
    if b < 1.6:
        num = 3.535 * b + 2.181 * b * b
        den = 1.0 + 2.276 * b + 2.577 * b * b
        g = num / den
        dg = ((3.535 + 4.362 * b) * den - num * (2.276 + 5.154 * b)) / (den * den)
    return g, dg


@ti.func
def smith_g1(v, m, alpha):
    a, P, z, r = _g1_terms(v, alpha)
    res = 1.0
    if P > 0.0:
        if alpha[0] < 0.0:
            res, _ = _beckmann_fit(z / ti.sqrt(P))
        else:
            den = z + r
            res = ti.select(den > 0.0, 2.0 * z / ti.select(den > 0.0, den, 1.0), 0.0)
    if v.dot(m) * v[2] <= 0.0:
        res = 0.0
    return res


@ti.func
def _dg1(v, m, alpha):
    """(∂G1/∂P, ∂G1/∂|v_z|) of smith_g1 (0 where G1 is constant). GGX: G1 = 2 z / (z + r):
    -z / (r (z + r)²), 2 (r - z²/r) / (z + r)²; Beckmann: b = z / sqrt(P): G1'(b) (-b / (2P)), G1'(b) / sqrt(P)."""
    a, P, z, r = _g1_terms(v, alpha)
    dP = 0.0
    dz = 0.0
    if P > 0.0 and r > 0.0 and v.dot(m) * v[2] > 0.0:
        if alpha[0] < 0.0:
            sp = ti.sqrt(P)
            b = z / sp
            g, dg = _beckmann_fit(b)
            dP = -dg * b / (2.0 * P)
            dz = dg / sp
        else:
            inv2 = 1.0 / ((z + r) * (z + r))
            dP = -z / r * inv2
            dz = 2.0 * (r - z * z / r) * inv2
    return dP, dz


@ti.func
def dsmith_g1_dalpha(v, m, alpha):
    """(∂G1/∂α_u, ∂G1/∂α_v) = ∂G1/∂P (2 α_u v_x², 2 α_v v_y²)."""
    a = clamp_alpha(alpha)
    dP, dz = _dg1(v, m, alpha)
    return dP * vec2(2.0 * a[0] * v[0] * v[0], 2.0 * a[1] * v[1] * v[1]) * _live(alpha)


@ti.func
def G(wi, wo, m, alpha):
    return smith_g1(wi, m, alpha) * smith_g1(wo, m, alpha)


@ti.func
def dG_dalpha(wi, wo, m, alpha):
    return (dsmith_g1_dalpha(wi, m, alpha) * smith_g1(wo, m, alpha)
            + smith_g1(wi, m, alpha) * dsmith_g1_dalpha(wo, m, alpha))


@ti.func
def DG_and_dalpha(wi, wo, m, alpha):
    """(D(m) G(wi, wo, m), ∂(D G)/∂α)."""
    d = D(m, alpha)
    g = G(wi, wo, m, alpha)
    dd = dD_dalpha(m, alpha)
    dg = dG_dalpha(wi, wo, m, alpha)
    return d * g, dd * g + d * dg


@ti.func
def pdf_visible_normal(wi, m, alpha):
    """Density of sample_visible_normal: G1(wi, m) max(0, wi·m) D(m) / cos θi (wi.z > 0)."""
    res = 0.0
    if wi[2] > 0.0:
        res = smith_g1(wi, m, alpha) * ti.max(wi.dot(m), 0.0) * D(m, alpha) / wi[2]
    return res


@ti.func
def erf(x):
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    s = ti.select(x < 0.0, -1.0, 1.0)
    ax = ti.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * ti.exp(-ax * ax)
    return s * y


@ti.func
def erfinv(x):
    """Giles' single-precision approximation (the one Dr.Jit uses), for x in (-1, 1)."""
    w = -ti.log(ti.max((1.0 - x) * (1.0 + x), 1e-30))
    p = 0.0
    if w < 5.0:
        w = w - 2.5
        p = 2.81022636e-08
        p = 3.43273939e-07 + p * w
        p = -3.5233877e-06 + p * w
        p = -4.39150654e-06 + p * w
        p = 0.00021858087 + p * w
        p = -0.00125372503 + p * w
        p = -0.00417768164 + p * w
        p = 0.246640727 + p * w
        p = 1.50140941 + p * w
    else:
        w = ti.sqrt(w) - 3.0
        p = -0.000200214257
        p = 0.000100950558 + p * w
        p = 0.00134934322 + p * w
        p = -0.00367342844 + p * w
        p = 0.00573950773 + p * w
        p = -0.0076224613 + p * w
        p = 0.00943887047 + p * w
        p = 1.00167406 + p * w
        p = 2.83297682 + p * w
    return p * x


@ti.func
def _beckmann_visible_11(cos_theta_i, u2):
    """Mitsuba's sample_visible_11 for Beckmann (α = 1): a slope (x, y)."""
    sin_theta_i = safe_sqrt(1.0 - cos_theta_i * cos_theta_i)
    tan_theta_i = sin_theta_i / ti.max(cos_theta_i, 1e-12)
    cot_theta_i = 1.0 / ti.max(tan_theta_i, 1e-12)
    maxval = erf(cot_theta_i)
    ux = ti.min(ti.max(u2[0], 1e-6), 1.0 - 1e-6)
    uy = ti.min(ti.max(u2[1], 1e-6), 1.0 - 1e-6)
    x = maxval - (maxval + 1.0) * erf(ti.sqrt(-ti.log(ux)))
    ux *= 1.0 + maxval + INV_SQRT_PI * tan_theta_i * ti.exp(-cot_theta_i * cot_theta_i)
    for _ in ti.static(range(3)):
        slope = erfinv(x)
        value = 1.0 + x + INV_SQRT_PI * tan_theta_i * ti.exp(-slope * slope) - ux
        deriv = 1.0 - slope * tan_theta_i
        x -= value / deriv
    x = ti.min(ti.max(x, -1.0 + 1e-7), 1.0 - 1e-7)
    return erfinv(x), erfinv(2.0 * uy - 1.0)


@ti.func
def sample_visible_normal(wi, alpha, u2):
    """Visible normal sampling. Needs wi.z > 0.

    Returns (m, pdf) with pdf = pdf_visible_normal(wi, m, alpha) (0 for a degenerate m).
    """
    a = clamp_alpha(alpha)
    # stretch the view direction to the hemisphere configuration (α = 1)
    vh = vec3(a[0] * wi[0], a[1] * wi[1], wi[2])
    vl = vh.norm()
    vh = vh / ti.select(vl > 0.0, vl, 1.0)
    m = vec3(0.0, 0.0, 1.0)
    if alpha[0] < 0.0:
        # Mitsuba: slope of the α = 1 configuration, rotated to wi's azimuth, unstretched
        st = safe_sqrt(1.0 - vh[2] * vh[2])
        cphi = 1.0
        sphi = 0.0
        if st > 0.0:
            cphi = ti.min(ti.max(vh[0] / st, -1.0), 1.0)
            sphi = ti.min(ti.max(vh[1] / st, -1.0), 1.0)
        sx, sy = _beckmann_visible_11(vh[2], u2)
        px = (cphi * sx - sphi * sy) * a[0]
        py = (sphi * sx + cphi * sy) * a[1]
        m = vec3(-px, -py, 1.0)
    else:
        # Heitz 2018, "Sampling the GGX Distribution of Visible Normals"
        lensq = vh[0] * vh[0] + vh[1] * vh[1]
        t1 = vec3(1.0, 0.0, 0.0)
        if lensq > 0.0:
            inv = 1.0 / ti.sqrt(lensq)
            t1 = vec3(-vh[1] * inv, vh[0] * inv, 0.0)
        t2 = vh.cross(t1)
        # uniform disk sample, warped onto the projected visible hemisphere
        r = ti.sqrt(u2[0])
        phi = 2.0 * PI * u2[1]
        p1 = r * ti.cos(phi)
        p2 = r * ti.sin(phi)
        s = 0.5 * (1.0 + vh[2])
        p2 = (1.0 - s) * safe_sqrt(1.0 - p1 * p1) + s * p2
        nh = p1 * t1 + p2 * t2 + safe_sqrt(1.0 - p1 * p1 - p2 * p2) * vh
        # unstretch
        m = vec3(a[0] * nh[0], a[1] * nh[1], ti.max(nh[2], 0.0))
    ml = m.norm()
    pdf = 0.0
    if ml > 0.0:
        m = m / ml
        pdf = pdf_visible_normal(wi, m, alpha)
    else:
        m = vec3(0.0, 0.0, 1.0)
    return m, pdf


# ---- derivatives with respect to directions (for normal-map / frame gradients) ---------------
@ti.func
def D_grad(m, alpha):
    """∂D/∂m (m's components as given). GGX: -2 D / q (2 m_x / α_u², 2 m_y / α_v², 2 m_z),
    q = m_x²/α_u² + m_y²/α_v² + m_z²; Beckmann: D (-2 m_x / (α_u² m_z²), -2 m_y / (α_v² m_z²),
    2 E / m_z - 4 / m_z), E = (m_x²/α_u² + m_y²/α_v²) / m_z²."""
    a = clamp_alpha(alpha)
    d = D(m, alpha)
    res = vec3(0.0)
    if d > 0.0:
        e = _slopes2(m, a)
        z2 = m[2] * m[2]
        if alpha[0] < 0.0:
            res = d * vec3(-2.0 * m[0] / (a[0] * a[0] * z2), -2.0 * m[1] / (a[1] * a[1] * z2),
                           2.0 * e / (z2 * m[2]) - 4.0 / m[2])
        else:
            res = (-4.0 * d / (e + z2)) * vec3(m[0] / (a[0] * a[0]), m[1] / (a[1] * a[1]), m[2])
    return res


@ti.func
def smith_g1_grad(v, m, alpha):
    """∂G1/∂v (the visibility test v·m v_z > 0 is piecewise constant: no derivative):
    ∂G1/∂P (2 α_u² v_x, 2 α_v² v_y, 0) + ∂G1/∂|v_z| (0, 0, sign v_z)."""
    a = clamp_alpha(alpha)
    dP, dz = _dg1(v, m, alpha)
    sz = ti.select(v[2] >= 0.0, 1.0, -1.0)
    return vec3(2.0 * dP * a[0] * a[0] * v[0], 2.0 * dP * a[1] * a[1] * v[1], dz * sz)


@ti.func
def half_vector(wi, wo):
    """(h, |wi + wo|, ok): the reflection half vector h = normalize(wi + wo)."""
    h = wi + wo
    hl = h.norm()
    ok = hl > 0.0
    return h / ti.select(ok, hl, 1.0), hl, ok


@ti.func
def reflection_lobe(wi, wo, alpha):
    """The GGX reflection lobe of wi, wo above the surface, without its Fresnel factor:
    (h, |wi + wo|, D(h) G(wi, wo, h) / (4 cos θi), its ∂/∂α)."""
    h, hl, _ = half_vector(wi, wo)
    dg, ddg = DG_and_dalpha(wi, wo, h, alpha)
    k = 1.0 / (4.0 * wi[2])
    return h, hl, dg * k, ddg * k


@ti.func
def reflection_pdf(wi, wo, alpha):
    """Density of sampling wo by reflecting wi about a visible normal: D(h) G1(wi, h) / (4 cos θi)."""
    res = 0.0
    h, hl, _ = half_vector(wi, wo)
    if wi.dot(h) > 0.0 and wo.dot(h) > 0.0:
        res = D(h, alpha) * smith_g1(wi, h, alpha) / (4.0 * wi[2])
    return res


@ti.func
def coated_pdf(ps, wi, wo, alpha):
    """The plastics' (roughplastic, pplastic) mixture density: a visible-normal reflection with probability ps, a
    cosine-weighted diffuse lobe otherwise: ps reflection_pdf + (1 - ps) cos θo / π."""
    return ps * reflection_pdf(wi, wo, alpha) + (1.0 - ps) * (wo[2] * INV_PI)


@ti.func
def coat_grad_dirs(wi, wo, alpha, eta, cs):
    """∂/∂wi, ∂/∂wo of the plastics' specular coat cs F(wi·h, η) D G1 G1 / (4 cos θi) (cs = <δ, specular>; F the
    dielectric Fresnel reflectance): reflection_grad_dirs with Φ = cs F."""
    h, hl, _ = half_vector(wi, wo)
    c = wi.dot(h)
    F, ct, ei, et = fresnel_dielectric(c, eta)
    return reflection_grad_dirs(wi, wo, h, hl, alpha, cs * F, cs * fresnel_dielectric_dcos(c, eta))


@ti.func
def reflection_grad_dirs(wi, wo, h, hl, alpha, phi, dphi):
    """∂/∂wi, ∂/∂wo of a GGX reflection lobe Φ(c) D(h) G1(wi, h) G1(wo, h) / (4 cos θi), c = wi·h,
    h = normalize(wi + wo) (hl = |wi + wo|), given Φ(c) and dΦ/dc (the model's Fresnel term)."""
    d = D(h, alpha)
    gi = smith_g1(wi, h, alpha)
    go = smith_g1(wo, h, alpha)
    k = 1.0 / (4.0 * wi[2])
    ac = dphi * d * gi * go * k                       # ∂/∂c
    g_u = normalize_backprop(ac * wi + (phi * gi * go * k) * D_grad(h, alpha), h, hl)
    gwi = g_u + ac * h + (phi * d * go * k) * smith_g1_grad(wi, h, alpha)
    gwi[2] += -phi * d * gi * go * k / wi[2]
    gwo = g_u + (phi * d * gi * k) * smith_g1_grad(wo, h, alpha)
    return gwi, gwo


@ti.func
def normalize_backprop(g_n, n, length):
    """Gradient w.r.t. u of an objective with gradient g_n w.r.t. n = u / |u| (length = |u|)."""
    return (g_n - n * n.dot(g_n)) / length


# ---- host side (numpy, f64): Mitsuba's load-time tables of a rough dielectric interface ------
# Used by roughplastic (its diffuse lobe): microfacet.h eval_reflectance / eval_transmittance,
# the same Gauss-Legendre rule (32² nodes for η > 1, 128² otherwise) over the visible-normal
# sample space, the same visible-normal warps (Mitsuba's sample_visible_11) and Smith G1.
ROUGH_TRANSMITTANCE_RES = 64     # MI_ROUGH_TRANSMITTANCE_RES (roughplastic.cpp)


def _np_fresnel(cos_i, eta):
    """numpy fresnel_dielectric: (F, cos θt (signed), η_ti)."""
    import numpy as np
    outside = cos_i >= 0.0
    eta_it = np.where(outside, eta, 1.0 / eta)
    eta_ti = 1.0 / eta_it
    ct2 = 1.0 - (1.0 - cos_i * cos_i) * eta_ti * eta_ti
    ci = np.abs(cos_i)
    ct = np.sqrt(np.maximum(ct2, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        a_s = (ci - eta_it * ct) / (ci + eta_it * ct)
        a_p = (ct - eta_it * ci) / (ct + eta_it * ci)
    r = np.where(ct2 <= 0.0, 1.0, 0.5 * (a_s * a_s + a_p * a_p))
    r = np.where(ci == 0.0, 1.0, r)
    return r, np.where(outside, -ct, ct), eta_ti


def _np_smith_g1(v, m, alpha, beckmann):
    import numpy as np
    xy2 = alpha * alpha * (v[..., 0] ** 2 + v[..., 1] ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t2 = xy2 / v[..., 2] ** 2
        if beckmann:
            a = 1.0 / np.sqrt(t2)
            r = np.where(a >= 1.6, 1.0, (3.535 * a + 2.181 * a * a) / (1.0 + 2.276 * a + 2.577 * a * a))
        else:
            r = 2.0 / (1.0 + np.sqrt(1.0 + t2))
    r = np.where(xy2 == 0.0, 1.0, r)
    return np.where((v * m).sum(-1) * v[..., 2] <= 0.0, 0.0, r)


def _np_erf(x):
    """erf elementwise in float64 (math.erf: exact to rounding; mapped over a list, 2.5x faster than np.vectorize)."""
    import math

    import numpy as np
    x = np.asarray(x, np.float64)
    return np.fromiter(map(math.erf, x.ravel().tolist()), np.float64, x.size).reshape(x.shape)


def _np_erfinv(y):
    """erfinv elementwise in float64 for y in (-1, 1): Giles' single-precision approximation (2012, relative error
    below 4e-7) refined by one Newton step on math.erf (the error squared: ~1e-13); ±1 -> ±inf."""
    import numpy as np
    y = np.asarray(y, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log((1.0 - y) * (1.0 + y))
        a = w - 2.5
        x = np.full_like(a, 2.81022636e-08)
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                  0.246640727, 1.50140941):
            x *= a
            x += c
        tail = w >= 5.0                 # |y| > 0.9966: the second polynomial, only where it is used
        if tail.any():
            b = np.sqrt(w[tail]) - 3.0
            p2 = -0.000200214257
            for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                      1.00167406, 2.83297682):
                p2 = p2 * b + c
            x[tail] = p2
        x *= y
        x = x - (_np_erf(x) - y) / (2.0 / np.sqrt(np.pi) * np.exp(-x * x))
        return np.where(np.abs(y) >= 1.0, np.copysign(np.inf, y), x)


def _np_sample_visible(wi, alpha, u, beckmann):
    """Mitsuba's MicrofacetDistribution::sample (visible normals, isotropic α): wi (..., 3),
    u (..., 2) in [0, 1)² (broadcasting against each other) -> m (..., 3)."""
    import numpy as np
    erf, erfinv = _np_erf, _np_erfinv
    wp = np.stack([alpha * wi[..., 0], alpha * wi[..., 1], wi[..., 2]], -1)
    wp /= np.linalg.norm(wp, axis=-1, keepdims=True)
    ct = wp[..., 2]
    st = np.sqrt(np.maximum(1.0 - ct * ct, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        cphi = np.where(st > 0.0, wp[..., 0] / st, 1.0)
        sphi = np.where(st > 0.0, wp[..., 1] / st, 0.0)
    cphi, sphi = np.clip(cphi, -1.0, 1.0), np.clip(sphi, -1.0, 1.0)
    u = np.array(u, dtype=np.float64)
    if beckmann:
        with np.errstate(divide="ignore", invalid="ignore"):
            tan_i = st / ct
            cot_i = 1.0 / tan_i
        maxval = erf(cot_i)
        u = np.clip(u, 1e-6, 1.0 - 1e-6)
        x = maxval - (maxval + 1.0) * erf(np.sqrt(-np.log(u[..., 0])))
        ux = u[..., 0] * (1.0 + maxval + tan_i * np.exp(-cot_i * cot_i) / np.sqrt(np.pi))
        for _ in range(3):
            slope = erfinv(x)
            value = 1.0 + x + tan_i * np.exp(-slope * slope) / np.sqrt(np.pi) - ux
            x = x - value / (1.0 - slope * tan_i)
        sx, sy = erfinv(x), erfinv(2.0 * u[..., 1] - 1.0)
    else:
        # square_to_uniform_disk_concentric
        r1, r2 = 2.0 * u[..., 0] - 1.0, 2.0 * u[..., 1] - 1.0
        is_zero = (r1 == 0.0) & (r2 == 0.0)
        q1 = np.abs(r1) > np.abs(r2)
        with np.errstate(divide="ignore", invalid="ignore"):
            rr = np.where(q1, r1, r2)
            phi = np.where(q1, 0.25 * np.pi * r2 / r1, 0.5 * np.pi - 0.25 * np.pi * r1 / r2)
        phi = np.where(is_zero, 0.0, phi)
        px, py = rr * np.cos(phi), rr * np.sin(phi)
        px, py = np.where(is_zero, 0.0, px), np.where(is_zero, 0.0, py)
        s = 0.5 * (1.0 + ct)
        py = np.sqrt(np.maximum(1.0 - px * px, 0.0)) * (1.0 - s) + py * s
        z = np.sqrt(np.maximum(1.0 - px * px - py * py, 0.0))
        norm = 1.0 / (st * py + ct * z)
        sx, sy = (ct * py - st * z) * norm, px * norm
    mx = (cphi * sx - sphi * sy) * alpha
    my = (sphi * sx + cphi * sy) * alpha
    m = np.stack([-mx, -my, np.ones_like(mx)], -1)
    return m / np.linalg.norm(m, axis=-1, keepdims=True)


def _np_quadrature(eta):
    import numpy as np
    n = 32 if eta > 1.0 else 128
    x, w = np.polynomial.legendre.leggauss(n)
    nx, ny = np.meshgrid(x, x)
    wx, wy = np.meshgrid(w, w)
    return np.stack([nx.ravel(), ny.ravel()], -1) * 0.5 + 0.5, (wx * wy).ravel() * 0.25


def rough_dielectric_albedos(mu, alpha, eta, beckmann):
    """(R(μ), T(μ)): Mitsuba's eval_reflectance / eval_transmittance of a rough dielectric
    interface (relative IOR eta, isotropic α) for incident cosines mu (1-D array), f64."""
    import numpy as np
    mu = np.asarray(mu, dtype=np.float64)
    u, w = _np_quadrature(eta)
    # wi (M, 1, 3) and u (1, N, 2): what depends on one of them alone is computed once per cosine or per node,
    # the rest broadcasts to (M, N)
    wi = np.stack([np.sqrt(1.0 - mu * mu), np.zeros_like(mu), mu], -1)[:, None, :]
    m = _np_sample_visible(wi, alpha, u[None], beckmann)
    c = (wi * m).sum(-1)
    f, cos_t, eta_ti = _np_fresnel(c, eta)
    # reflection
    wo = 2.0 * c[..., None] * m - wi
    sr = _np_smith_g1(wo, m, alpha, beckmann) * f
    sr = np.where((wo[..., 2] <= 0.0) | (wi[..., 2] <= 0.0), 0.0, sr)
    # refraction (Mitsuba's refract(wi, m, cos_theta_t, eta_ti))
    wt = m * (c * eta_ti + cos_t)[..., None] - wi * eta_ti[..., None]
    stt = _np_smith_g1(wt, m, alpha, beckmann) * (1.0 - f)
    stt = np.where(wt[..., 2] * wi[..., 2] >= 0.0, 0.0, stt)
    return (sr * w).sum(-1), (stt * w).sum(-1)


def rough_plastic_tables(alpha, eta, beckmann):
    """Mitsuba roughplastic's parameters_changed(): (external transmittance t(cos θ) at
    ROUGH_TRANSMITTANCE_RES cosines linspace(0, 1) (first clamped to 1e-6), internal reflectance
    2 mean(R_{1/η}(μ) μ)) for the coat's α, relative IOR eta and distribution. Numpy at load time (this 2-core
    machine: 0.4-0.5 s GGX, 1.2-1.3 s Beckmann, Mitsuba's default): kept per (α, η, distribution) for the process
    (a scene loaded again, materials that share them)."""
    t, r_int = _rough_plastic_tables(float(alpha), float(eta), bool(beckmann))
    return t.copy(), r_int


@functools.lru_cache(maxsize=256)
def _rough_plastic_tables(alpha, eta, beckmann):
    import numpy as np
    mu = np.maximum(1e-6, np.linspace(0.0, 1.0, ROUGH_TRANSMITTANCE_RES))
    _, t = rough_dielectric_albedos(mu, alpha, eta, beckmann)
    r, _ = rough_dielectric_albedos(mu, alpha, 1.0 / eta, beckmann)
    return t, float(np.mean(r * mu) * 2.0)


# ---- anisotropic GGX (Mitsuba 3 ``MicrofacetDistribution(GGX, alpha_u, alpha_v)``) -----------
# Separate α_x, α_y (no sign convention: always GGX). Used by principled and principledthin; additive shared
# helpers (with their derivatives in α and in the directions).
#     D(m)  = 1 / (π α_x α_y (m_x²/α_x² + m_y²/α_y² + m_z²)²)    (0 where D m_z <= 1e-20)
#     G1(v) = 2 / (1 + sqrt(1 + (α_x² v_x² + α_y² v_y²) / v_z²))  (1 at normal incidence,
#             0 when v sees the back of m)
# Visible normal sampling exactly as Mitsuba (stretch, sample_visible_11 with the concentric disk,
# rotate, unstretch), so the same (u1, u2) give Mitsuba's microfacet normal.
@ti.func
def ggx_aniso_D(m, ax, ay):
    """(D, ∂D/∂α_x, ∂D/∂α_y)."""
    A = (m[0] / ax) ** 2 + (m[1] / ay) ** 2 + m[2] * m[2]
    d = 0.0
    dx = 0.0
    dy = 0.0
    if A > 0.0:
        d = 1.0 / (PI * ax * ay * A * A)
        if d * m[2] <= 1e-20:
            d = 0.0
        dx = d * (-1.0 / ax + 4.0 * m[0] * m[0] / (ax * ax * ax * A))
        dy = d * (-1.0 / ay + 4.0 * m[1] * m[1] / (ay * ay * ay * A))
    return d, dx, dy


@ti.func
def ggx_aniso_g1(v, m, ax, ay):
    """(G1, ∂G1/∂α_x, ∂G1/∂α_y) (Mitsuba's smith_g1)."""
    xy = (ax * v[0]) ** 2 + (ay * v[1]) ** 2
    z2 = v[2] * v[2]
    g = 1.0
    dx = 0.0
    dy = 0.0
    if xy > 0.0:
        t = xy / ti.max(z2, 1e-30)
        s = ti.sqrt(1.0 + t)
        g = 2.0 / (1.0 + s)
        dg = -1.0 / (s * (1.0 + s) * (1.0 + s))
        dx = dg * 2.0 * ax * v[0] * v[0] / ti.max(z2, 1e-30)
        dy = dg * 2.0 * ay * v[1] * v[1] / ti.max(z2, 1e-30)
    if v.dot(m) * v[2] <= 0.0:
        g = 0.0
        dx = 0.0
        dy = 0.0
    return g, dx, dy


@ti.func
def ggx_aniso_G(wi, wo, m, ax, ay):
    """(G1(wi) G1(wo), ∂/∂α_x, ∂/∂α_y)."""
    gi, gix, giy = ggx_aniso_g1(wi, m, ax, ay)
    go, gox, goy = ggx_aniso_g1(wo, m, ax, ay)
    return gi * go, gix * go + gi * gox, giy * go + gi * goy


@ti.func
def ggx_aniso_D_grad(m, ax, ay, d):
    """∂D/∂m of the anisotropic GGX D (d: its value)."""
    A = (m[0] / ax) ** 2 + (m[1] / ay) ** 2 + m[2] * m[2]
    res = vec3(0.0)
    if d > 0.0 and A > 0.0:
        res = (-4.0 * d / A) * vec3(m[0] / (ax * ax), m[1] / (ay * ay), m[2])
    return res


@ti.func
def ggx_aniso_g1_grad(v, ax, ay, g):
    """∂G1/∂v of the anisotropic GGX G1 (g: its value; the visibility mask is piecewise constant)."""
    res = vec3(0.0)
    xy = (ax * v[0]) ** 2 + (ay * v[1]) ** 2
    z2 = v[2] * v[2]
    if g > 0.0 and xy > 0.0 and z2 > 0.0:
        t = xy / z2
        s = ti.sqrt(1.0 + t)
        dg = -1.0 / (s * (1.0 + s) * (1.0 + s))
        res = dg * vec3(2.0 * ax * ax * v[0] / z2, 2.0 * ay * ay * v[1] / z2, -2.0 * t / v[2])
    return res


@ti.func
def ggx_aniso_pdf_visible(wi, m, ax, ay):
    """Mitsuba's pdf(wi, m): D(m) G1(wi, m) |wi·m| / cos θi (wi above the surface)."""
    d, _, _ = ggx_aniso_D(m, ax, ay)
    g, _, _ = ggx_aniso_g1(wi, m, ax, ay)
    return d * g * ti.abs(wi.dot(m)) / wi[2]


@ti.func
def ggx_aniso_sample_visible(wi, ax, ay, u2):
    """Mitsuba's MicrofacetDistribution::sample (GGX, visible normals); wi.z > 0. Returns m."""
    wp = vec3(ax * wi[0], ay * wi[1], wi[2]).normalized()
    s2 = wp[0] * wp[0] + wp[1] * wp[1]
    cphi = 1.0
    sphi = 0.0
    if s2 > 4.0 * 5.9604645e-08:     # Frame3f::sincos_phi: sin²θ <= 4 dr::Epsilon (2^-24) -> φ = 0
        inv = 1.0 / ti.sqrt(s2)
        cphi = ti.min(ti.max(wp[0] * inv, -1.0), 1.0)
        sphi = ti.min(ti.max(wp[1] * inv, -1.0), 1.0)
    ct = wp[2]
    # sample_visible_11 (GGX): concentric disk
    r1 = 2.0 * u2[0] - 1.0
    r2 = 2.0 * u2[1] - 1.0
    px = 0.0
    py = 0.0
    if r1 != 0.0 or r2 != 0.0:
        rr = 0.0
        phi = 0.0
        if ti.abs(r1) > ti.abs(r2):
            rr = r1
            phi = 0.25 * PI * r2 / r1
        else:
            rr = r2
            phi = 0.5 * PI - 0.25 * PI * r1 / r2
        px = rr * ti.cos(phi)
        py = rr * ti.sin(phi)
    s = 0.5 * (1.0 + ct)
    py = safe_sqrt(1.0 - px * px) * (1.0 - s) + py * s
    z = safe_sqrt(1.0 - px * px - py * py)
    st = safe_sqrt(1.0 - ct * ct)
    den = st * py + ct * z
    norm = 1.0 / ti.select(den != 0.0, den, 1e-30)
    sx = (ct * py - st * z) * norm
    sy = px * norm
    mx = (cphi * sx - sphi * sy) * ax
    my = (sphi * sx + cphi * sy) * ay
    return vec3(-mx, -my, 1.0).normalized()
