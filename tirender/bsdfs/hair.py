"""Hair, Mitsuba 3's ``hair`` (src/bsdfs/hair.cpp): Chiang, Bitterli, Tappan and Burley 2016, "A Practical and
Controllable Hair and Fur Model for Production Path Tracing" — a near-field fibre model: one interaction stands for
the whole walk inside the fibre (enter, p − 1 internal reflections, leave) at the same point of the surface.

Frame (Mitsuba's): the local y axis is the fibre's tangent, z the surface normal, x = y × z across the fibre. For a
direction w: sin θ = w_y (θ: the longitudinal angle, from the normal plane), φ = atan2(w_z, w_x) (the azimuth in the
normal plane), γ = the angle between the normal and w projected into the normal plane (signed as Mitsuba's gamma:
h = sin γ_i = −w_x / |(w_x, w_z)| is the offset across the fibre). The shading frame is the shape's: s = dp/du
projected onto the normal, t = n × s (core/interaction.py, as Mitsuba's sh_frame), so on a mesh the fibre runs along
t, the direction of increasing v where uv is orthogonal. Mitsuba's curves (bsplinecurve, linearcurve) have u around
the fibre and v along it; tirender has no curve shapes yet: a curve shape will need that frame, its normal pointing
out of the fibre at the hit, and back faces culled (as Mitsuba's curves: Embree and OptiX ignore a curve's inside),
so that a ray leaving through the fibre (wo·n < 0, the TT lobe) passes it instead of hitting its far side. On
meshes (here: a tessellated cylinder with u around it, v along it, is Mitsuba's curve frame) rays leaving below the
surface cross it and meet the mesh's far side, in Mitsuba and here alike.

With η the relative IOR, σ_a the absorption coefficient (per unit of fibre radius: the pigments' σ_a = eumelanin ·
(0.419, 0.697, 1.37) + pheomelanin · (0.187, 0.4, 1.05) (d'Eon et al. 2011; in the spectral variants each RGB upsampled
as a reflectance, Mitsuba's srgb_model_eval), or ``scale`` · ``sigma_a`` (an unbounded colour)):

    η' = sqrt(η² − sin² θi) / cos θi, sin γt = h / η', sin θt = sin θi / η, T = exp(−σ_a 2 cos γt / cos θt)
    f = F(cos θi cos γi, η):  A_0 = f, A_1 = (1 − f)² T, A_2 = A_1 T f, A_3 = A_2 f T / (1 − T f)
    eval = Σ_{p<3} M_p(wi_p, wo) 2π A_p N_p(φo − φi) + M_3(wi, wo) A_3        (no cosine factor: Mitsuba's)
    M_p = square_to_rough_fiber_pdf with κ = 1 / v_p (d'Eon et al. 2011 with Mitsuba's series for I_0), v_0 =
          (0.726 β_m + 0.812 β_m² + 3.7 β_m²⁰)², v_1 = v_0 / 4, v_2 = v_3 = 4 v_0 (β_m = longitudinal_roughness);
          wi_p: θi tilted by the scales, −2α (p = 0), +α (p = 1), +4α (p = 2) (α = scale_tilt, reframe_with_scales)
    N_p = the logistic distribution of scale s = sqrt(π/8) (0.265 β_n + 1.194 β_n² + 5.372 β_n²²) trimmed to
          [−π, π], centred on 2p γt − 2 γi + p π (β_n = azimuthal_roughness)
A value that is not finite is 0 (Mitsuba's). pdf: the same sum with A_p replaced by A_p's luminance share
(Mitsuba's attenuation_pdf: luminance(c, λ) of the variant). sample (Mitsuba's, number for number): p by those
shares, θo from M_p's warp about wi_p, Δφ from N_p's trimmed logistic (p < 3) or uniform (p = 3); pdf = the sum above
at the sampled direction, weight = eval / pdf. As in Mitsuba, the p = 3 lobe samples about a zero vector (its θo is
always 0: ``sin_theta_ip`` is only set for p < 3), so sampling matches the pdf only where A_3 is small (the
chi-square tests are run there); the sample's weight is eval / pdf all the same.

Two-sided, transmits (wo on either side of the surface), no cosine factor, not reciprocal (Mitsuba's NonSymmetric);
depolarizes in spectral_polarized (Mitsuba's depolarizer). In the mono variants the pigments are refused (Mitsuba's
hair throws there: srgb_model_eval needs wavelengths); give sigma_a. Differentiable (Mitsuba's traverse): the
scalar textures longitudinal_roughness, azimuthal_roughness, scale_tilt (degrees), eta, eumelanin, pheomelanin and
the colour sigma_a, by a hand-written reverse pass of eval (through v_p, s, the tilted angles, η', γt, θt, T and f),
with analytic direction derivatives. ``eta`` is int_ior / ext_ior (amber / air) unless given (a tirender extension:
Mitsuba's hair reads int_ior and ext_ior only; ``eta`` is its traverse name); the pool parameter ``<id>.eta`` exists
either way.
"""
import math

import taichi as ti

from .. import variants
from ..core.math import PI, safe_sqrt, vec3
from ..errors import ConfigError
from ..schema import Ior, Number, Texture
from ..variants import SPECTRUM, spec, struct
from .base import (BOTH_SIDES, SMOOTH, TRANSMISSION, BsdfSample, const, invalid_sample, leaf, slot_float,
                   slot_float_adjoint, slot_unbounded, slot_unbounded_adjoint)
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_dielectric_deta
from .pplastic import Defaulted, eta_from_iors

_EU, _PH, _SIGMA, _LR, _AR, _TILT, _ETA = range(7)      # texture slots
DEN_MIN = 1e-12                                         # the guard on 1 − f T (grazing h, no absorption)
PIG, SCALE = 0, 1                                       # constants: pigments (1) or sigma_a (0), sigma_a's scale
EUMELANIN = (0.419, 0.697, 1.37)                        # σ_a per unit concentration (d'Eon et al. 2011), RGB
PHEOMELANIN = (0.187, 0.4, 1.05)
TWO_PI = 2.0 * PI
SQRT_PI_8 = math.sqrt(math.pi / 8.0)
RAD = math.pi / 180.0
LN2 = 0.6931                                            # Mitsuba's constant in the κ > 10 branch
INV_TWO_PI = 1.0 / TWO_PI


def _pigment(name, doc, default):
    return Texture(name, 1, default=Defaulted(default), lo=0.0, hi=1e4, raw=True, doc=doc)


def _roughness(name, doc):
    return Texture(name, 1, default=0.3, lo=0.0, hi=1.0, raw=True, doc=doc)


@ti.func
def _finite(x):
    return x - x == 0.0


# ---- the model's scalar functions (Mitsuba's hair.cpp and warp.h), with their derivatives ------------------------
@ti.func
def _variance(lr):
    """(v_0, dv_0/dβ_m): the longitudinal variance of the R lobe."""
    g = 0.726 * lr + 0.812 * lr * lr + 3.7 * lr ** 20
    dg = 0.726 + 1.624 * lr + 74.0 * lr ** 19
    return g * g, 2.0 * g * dg


@ti.func
def _logistic_scale(ar):
    """(s, ds/dβ_n): the azimuthal logistic scale."""
    return (SQRT_PI_8 * (0.265 * ar + 1.194 * ar * ar + 5.372 * ar ** 22),
            SQRT_PI_8 * (0.265 + 2.388 * ar + 118.184 * ar ** 21))


@ti.func
def _tilts(alpha_deg):
    """(sin 2^k α, cos 2^k α) for k = 0, 1, 2 by Mitsuba's recurrences (sin, cos of α from its sine)."""
    s0 = ti.sin(alpha_deg * RAD)
    c0 = safe_sqrt(1.0 - s0 * s0)
    s1 = 2.0 * c0 * s0
    c1 = c0 * c0 - s0 * s0
    s2 = 2.0 * c1 * s1
    c2 = c1 * c1 - s1 * s1
    return s0, c0, s1, c1, s2, c2


@ti.func
def _reframe(st, ct, p: ti.template(), s0, c0, s1, c1, s2, c2):
    """(sin θi_p, ∂/∂sin θi, ∂/∂cos θi, ∂/∂α (radians)) of reframe_with_scales (only its sine reaches M_p)."""
    s = st
    a = 1.0
    b = 0.0
    dal = 0.0
    if ti.static(p == 0):
        s = st * c1 - ct * s1
        a, b = c1, -s1
        dal = -2.0 * (st * s1 + ct * c1)
    elif ti.static(p == 1):
        s = st * c0 + ct * s0
        a, b = c0, s0
        dal = -st * s0 + ct * c0
    elif ti.static(p == 2):
        s = st * c2 + ct * s2
        a, b = c2, s2
        dal = 4.0 * (-st * s2 + ct * c2)
    return s, a, b, dal


@ti.func
def _reframe_cos(st, ct, p: ti.template(), s0, c0, s1, c1, s2, c2):
    """cos θi_p of reframe_with_scales (before its absolute value)."""
    c = ct
    if ti.static(p == 0):
        c = ct * c1 + st * s1
    elif ti.static(p == 1):
        c = ct * c0 - st * s0
    elif ti.static(p == 2):
        c = ct * c2 - st * s2
    return c


@ti.func
def _i0(x):
    """(I_0(x), I_0'(x)) by Mitsuba's 10-term series."""
    r = 1.0
    dr = 0.0
    x2 = x * x
    xi = x2
    xd = x                                               # x^(2i - 1)
    denom = 4.0
    for i in ti.static(range(1, 11)):
        r += xi / denom
        dr += 2.0 * i * xd / denom
        xi *= x2
        xd *= x2
        denom *= 4.0 * (i + 1.0) * (i + 1.0)
    return r, dr


@ti.func
def _log_i0(x):
    """(log I_0(x), its derivative): Mitsuba's asymptotic form above 12."""
    res = 0.0
    d = 0.0
    if x > 12.0:
        res = x + 0.5 * (ti.log(1.0 / (TWO_PI * x)) + 1.0 / (8.0 * x))
        d = 1.0 + 0.5 * (-1.0 / x - 1.0 / (8.0 * x * x))
    else:
        i0, di0 = _i0(x)
        res = ti.log(i0)
        d = di0 / i0
    return res, d


@ti.func
def _sinh_cosh(x):
    """(sinh x, cosh x), x > 0 (a series below 0.1, where e^x − e^−x cancels)."""
    e = ti.exp(x)
    sh = 0.5 * (e - 1.0 / e)
    if x < 0.1:
        x2 = x * x
        sh = x * (1.0 + x2 / 6.0 * (1.0 + x2 / 20.0 * (1.0 + x2 / 42.0)))
    return sh, 0.5 * (e + 1.0 / e)


@ti.func
def _mp(a, b, kappa):
    """Mitsuba's square_to_rough_fiber_pdf for sin θi = a, sin θo = b, κ: (M, ∂ln M/∂a, ∂ln M/∂b, ∂ln M/∂κ)."""
    ci = safe_sqrt(1.0 - a * a)
    co = safe_sqrt(1.0 - b * b)
    c = ci * co * kappa
    s = a * b * kappa
    m = 0.0
    dk = 0.0
    dc = 0.0
    if kappa > 10.0:
        li, dc = _log_i0(c)
        m = ti.exp(-s + li - kappa + LN2 + ti.log(0.5 * kappa)) * INV_TWO_PI
        dk = -1.0 + 1.0 / kappa
    else:
        i0, di0 = _i0(c)
        sh, ch = _sinh_cosh(kappa)
        m = ti.exp(-s) * i0 * kappa / (2.0 * sh) * INV_TWO_PI
        dc = di0 / i0
        dk = 1.0 / kappa - ch / sh
    dci = -a / ci if ci > 0.0 else 0.0
    dco = -b / co if co > 0.0 else 0.0
    return (m, -b * kappa + dc * co * kappa * dci, -a * kappa + dc * ci * kappa * dco,
            -a * b + dc * ci * co + dk)


@ti.func
def _logistic_cdf(x, s):
    return 1.0 / (1.0 + ti.exp(-x / s))


@ti.func
def _np(dphi, p: ti.template(), s, gamma_i, gamma_t):
    """Mitsuba's azimuthal_scattering: (N_p, ∂N/∂(Δφ − perfect Δφ), ∂N/∂s)."""
    phi = dphi - (2.0 * p * gamma_t - 2.0 * gamma_i + p * PI)
    phi = phi - ti.cast(phi / TWO_PI, ti.i32) * TWO_PI      # fmod (the sign of the dividend)
    if phi < PI:
        phi += TWO_PI
    if phi > PI:
        phi -= TWO_PI
    x = ti.abs(phi)
    e = ti.exp(-x / s)
    l = e / (s * (1.0 + e) * (1.0 + e))
    cp = _logistic_cdf(PI, s)
    k = cp - _logistic_cdf(-PI, s)
    dlnl_du = (e - 1.0) / (1.0 + e)                      # u = |x| / s
    sg = 1.0 if phi > 0.0 else (-1.0 if phi < 0.0 else 0.0)
    n = l / k
    dn_dphi = n * dlnl_du * sg / s
    dk_ds = -2.0 * PI / (s * s) * cp * (1.0 - cp)
    dn_ds = n * (-1.0 / s - dlnl_du * x / (s * s) - dk_ds / k)
    return n, dn_dphi, dn_ds


@ti.func
def _trimmed_logistic_sample(u, s):
    k = _logistic_cdf(PI, s) - _logistic_cdf(-PI, s)
    x = -s * ti.log(1.0 / (u * k + _logistic_cdf(-PI, s)) - 1.0)
    return ti.math.clamp(x, -PI, PI)


@ti.func
def _gamma(w):
    """Mitsuba's gamma(w): the angle between the normal and w in the normal plane (0 along the fibre)."""
    proj = safe_sqrt(w[0] * w[0] + w[2] * w[2])
    g = 0.0
    if proj != 0.0:
        g = ti.acos(ti.math.clamp(w[2] / proj, -1.0, 1.0))
    return g if w[0] < 0.0 else -g


@ti.func
def _dangle(w):
    """∂/∂(w_x, w_z) of φ = atan2(w_z, w_x) (γ has the same: γ ≡ φ − π/2)."""
    p2 = w[0] * w[0] + w[2] * w[2]
    res = vec3(0.0)
    if p2 > 0.0:
        res = vec3(-w[2] / p2, 0.0, w[0] / p2)
    return res


@ti.func
def _attenuation(f, T):
    """A_0..A_3 (Spectrum each) of Fresnel f and the internal transmittance T (Spectrum)."""
    a0 = spec(f)
    a1 = (1.0 - f) * (1.0 - f) * T
    a2 = a1 * T * f
    a3 = a2 * f * T / ti.max(1.0 - T * f, DEN_MIN)       # f T → 1 only where A_1 = A_2 = 0 (h = ±1, σa = 0)
    return a0, a1, a2, a3


@ti.func
def _setup(p, wi):
    """What eval, pdf and sample share for an incident wi: (sin θi, cos θi, φi, γi, h, η', sin γt, cos γt, γt, sin θt,
    cos θt, T, f, c = cos θi cos γi)."""
    st = wi[1]
    ct = safe_sqrt(1.0 - st * st)
    phi_i = ti.atan2(wi[2], wi[0])
    gamma_i = _gamma(wi)
    h = ti.sin(gamma_i)
    sin_t = st / p.eta
    cos_t = safe_sqrt(1.0 - sin_t * sin_t)
    eta_p = safe_sqrt(p.eta * p.eta - st * st) / ct
    sgt = h / eta_p
    cgt = safe_sqrt(1.0 - sgt * sgt)
    gamma_t = ti.asin(ti.math.clamp(sgt, -1.0, 1.0))
    T = ti.exp(-p.sigma * (2.0 * cgt / cos_t))
    c = ct * safe_sqrt(1.0 - h * h)
    f, _, _, _ = fresnel_dielectric(c, p.eta)
    return st, ct, phi_i, gamma_i, h, eta_p, sgt, cgt, gamma_t, sin_t, cos_t, T, f, c


@ti.func
def _lobe_shares(p, a0, a1, a2, a3):
    """Mitsuba's attenuation_pdf: each A_p's luminance over their sum (luminance(c, λ) of the variant)."""
    l0 = a0.dot(p.lum_w)
    l1 = a1.dot(p.lum_w)
    l2 = a2.dot(p.lum_w)
    l3 = a3.dot(p.lum_w)
    tot = l0 + l1 + l2 + l3
    return ti.Vector([l0, l1, l2, l3]) / tot


@ti.func
def _hair(p, wi, wo, d_out, grad: ti.template()):
    """(eval, pdf, parameter gradient (Params: sigma, lr, ar, tilt, eta hold ∂<d_out, eval>/∂·), ∂/∂wi, ∂/∂wo)."""
    st, ct, phi_i, gamma_i, h, eta_p, sgt, cgt, gamma_t, sin_t, cos_t, T, f, c = _setup(p, wi)
    phi_o = ti.atan2(wo[2], wo[0])
    dphi = phi_o - phi_i
    v0, dv0 = _variance(p.lr)
    s, ds = _logistic_scale(p.ar)
    s0, c0, s1, c1, s2, c2 = _tilts(p.tilt)
    a0, a1, a2, a3 = _attenuation(f, T)
    shares = _lobe_shares(p, a0, a1, a2, a3)
    # the lobes' weights W_p = 2π M_p N_p (p < 3), W_3 = M_3, and what their derivatives need
    W = ti.Vector([0.0, 0.0, 0.0, 0.0])
    dlnM = ti.Matrix.zero(float, 4, 3)       # rows p: ∂ ln M_p/∂(sin θi_p, sin θo, κ_p)
    dN = ti.Matrix.zero(float, 3, 2)         # rows p: (∂N_p/∂offset, ∂N_p/∂s) / N_p · W_p
    dre = ti.Matrix.zero(float, 3, 3)        # rows p: ∂ sin θi_p/∂(sin θi, cos θi, α)
    Ns = ti.Vector([0.0, 0.0, 0.0])
    kap = ti.Vector([1.0 / v0, 4.0 / v0, 0.25 / v0, 0.25 / v0])
    for q in ti.static(range(3)):
        sq, da, db, dal = _reframe(st, ct, q, s0, c0, s1, c1, s2, c2)
        m, dma, dmb, dmk = _mp(sq, wo[1], kap[q])
        n, dnp, dns = _np(dphi, q, s, gamma_i, gamma_t)
        W[q] = m * TWO_PI * n
        Ns[q] = n
        dlnM[q, 0], dlnM[q, 1], dlnM[q, 2] = dma, dmb, dmk
        dN[q, 0], dN[q, 1] = TWO_PI * m * dnp, TWO_PI * m * dns
        dre[q, 0], dre[q, 1], dre[q, 2] = da, db, dal
    m3, dma3, dmb3, dmk3 = _mp(st, wo[1], kap[3])
    W[3] = m3
    dlnM[3, 0], dlnM[3, 1], dlnM[3, 2] = dma3, dmb3, dmk3
    value = W[0] * a0 + W[1] * a1 + W[2] * a2 + W[3] * a3
    pdf = W.dot(shares)
    if not _finite(pdf):
        pdf = 0.0
    ok = spec(1.0)
    for l in ti.static(range(variants.lanes())):
        if not _finite(value[l]):
            value[l] = 0.0
            ok[l] = 0.0
    g = p
    gwi = vec3(0.0)
    gwo = vec3(0.0)
    if ti.static(grad):
        D = d_out * ok
        # lobes: ∂/∂W_p = <D, A_p>; ∂/∂A_p = W_p D
        gW = ti.Vector([D.dot(a0), D.dot(a1), D.dot(a2), D.dot(a3)])
        ab0, ab1, ab2, ab3 = W[0] * D, W[1] * D, W[2] * D, W[3] * D
        gf = 0.0
        gT = spec(0.0)
        u = f * T
        den = ti.max(1.0 - u, DEN_MIN)
        ab2 += ab3 * u / den                              # A_3 = A_2 u / (1 − u), u = f T
        gu = ab3 * a2 / (den * den)
        gf += (gu * T).sum()
        gT += gu * f
        ab1 += ab2 * T * f                                # A_2 = A_1 T f
        gT += ab2 * a1 * f
        gf += (ab2 * a1 * T).sum()
        gf += (ab1 * (-2.0) * (1.0 - f) * T).sum()        # A_1 = (1 − f)² T
        gT += ab1 * (1.0 - f) * (1.0 - f)
        gf += ab0.sum()                                   # A_0 = f
        lt = 2.0 * cgt / cos_t                            # T = exp(−σ L)
        g.sigma = -gT * lt * T
        glt = (-gT * p.sigma * T).sum()
        g_st = 0.0
        g_ct = 0.0
        g_h = 0.0
        g_eta = gf * fresnel_dielectric_deta(c, p.eta)    # f = F(cos θi cos γi, η)
        gc = gf * fresnel_dielectric_dcos(c, p.eta)
        cgi = safe_sqrt(1.0 - h * h)
        g_ct += gc * cgi
        if cgi > 0.0:
            g_h += -gc * ct * h / cgi
        g_cgt = glt * 2.0 / cos_t                         # L = 2 cos γt / cos θt
        g_cost = -glt * lt / cos_t
        g_sint = -g_cost * sin_t / cos_t if cos_t > 0.0 else 0.0
        g_st += g_sint / p.eta
        g_eta += -g_sint * st / (p.eta * p.eta)
        # the azimuthal lobes: N_p(Δφ − 2p γt + 2 γi − pπ; s)
        g_gt = 0.0
        g_gi = 0.0
        g_dphi = 0.0
        g_s = 0.0
        g_kap = ti.Vector([0.0, 0.0, 0.0, 0.0])
        g_alpha = 0.0
        g_wo_y = 0.0
        for q in ti.static(range(3)):
            go = gW[q] * dN[q, 0]
            g_dphi += go
            g_gt += -2.0 * q * go
            g_gi += 2.0 * go
            g_s += gW[q] * dN[q, 1]
            gl = gW[q] * W[q]                             # ∂/∂ ln M_p
            gsq = gl * dlnM[q, 0]
            g_st += gsq * dre[q, 0]
            g_ct += gsq * dre[q, 1]
            g_alpha += gsq * dre[q, 2]
            g_wo_y += gl * dlnM[q, 1]
            g_kap[q] = gl * dlnM[q, 2]
        gl3 = gW[3] * W[3]
        g_st += gl3 * dlnM[3, 0]
        g_wo_y += gl3 * dlnM[3, 1]
        g_kap[3] = gl3 * dlnM[3, 2]
        g_sgt = g_cgt * (-sgt / cgt) if cgt > 0.0 else 0.0    # cos γt = sqrt(1 − sin² γt), γt = asin(sin γt)
        if cgt > 0.0:
            g_sgt += g_gt / cgt
        g_h += g_sgt / eta_p                              # sin γt = h / η'
        g_etap = -g_sgt * h / (eta_p * eta_p)
        qq = p.eta * p.eta - st * st                      # η' = sqrt(η² − sin² θi) / cos θi
        if qq > 0.0 and ct > 0.0:
            gq = g_etap / (2.0 * ti.sqrt(qq) * ct)
            g_eta += 2.0 * p.eta * gq
            g_st += -2.0 * st * gq
            g_ct += -g_etap * eta_p / ct
        g_gi += g_h * ti.cos(gamma_i)                     # h = sin γi
        # parameters: κ_p = 1 / v_p (v_1 = v_0 / 4, v_2 = v_3 = 4 v_0), s, α (degrees), η
        g_v0 = -(g_kap[0] * kap[0] * kap[0] + g_kap[1] * kap[1] * kap[1] * 0.25
                 + (g_kap[2] * kap[2] * kap[2] + g_kap[3] * kap[3] * kap[3]) * 4.0)
        g.lr = g_v0 * dv0
        g.ar = g_s * ds
        g.tilt = g_alpha * RAD
        g.eta = g_eta
        # directions: sin θi = wi_y, cos θi = sqrt(1 − wi_y²), φi and γi through (wi_x, wi_z); wo through wo_y, φo
        gwi = (g_gi - g_dphi) * _dangle(wi)
        gwi[1] += g_st
        if ct > 0.0:
            gwi[1] += -g_ct * st / ct
        gwo = g_dphi * _dangle(wo)
        gwo[1] += g_wo_y
    return value, pdf, g, gwi, gwo


@leaf
class Hair:
    NAME = "hair"
    KEYS = (_pigment("eumelanin", "eumelanin concentration (not with sigma_a)", 1.3),
            _pigment("pheomelanin", "pheomelanin concentration (not with sigma_a)", 0.2),
            Texture("sigma_a", 3, default=None, lo=0.0, hi=1e6,
                    doc="absorption coefficient per unit of fibre radius, instead of the pigments (an unbounded "
                        "colour)"),
            Number("scale", default=1.0, lo=0.0, doc="factor on sigma_a (not differentiable, as Mitsuba's)"),
            Ior("int_ior", default=Defaulted(1.55), doc="interior IOR (amber)"),
            Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
            _roughness("longitudinal_roughness", "β_m: the longitudinal roughness"),
            _roughness("azimuthal_roughness", "β_n: the azimuthal roughness"),
            Texture("scale_tilt", 1, default=2.0, lo=-90.0, hi=90.0, raw=True,
                    doc="α: the tilt of the cuticle scales, degrees"),
            Texture("eta", 1, default=None, lo=0.0, hi=100.0, strict_lo=True, raw=True,
                    doc="relative IOR (default int_ior / ext_ior: Mitsuba's traverse name; giving it is a tirender "
                        "extension)"))
    FLAGS = SMOOTH | BOTH_SIDES | TRANSMISSION
    N_CONST = 2
    Params = struct(sigma=SPECTRUM, lum_w=SPECTRUM, lr=float, ar=float, tilt=float, eta=float)

    @staticmethod
    def complete(values, file, key, variant):
        pig = values.get("sigma_a") is None
        if not pig:
            given = [k for k in ("eumelanin", "pheomelanin") if not isinstance(values[k], Defaulted)]
            if given:
                raise ConfigError("give either the pigments (eumelanin, pheomelanin) or sigma_a, not both (Mitsuba's "
                                  "rule)", file, f"{key}.{given[0]}")
        elif variant == "mono":
            raise ConfigError("hair's pigments have no meaning in the mono variant (Mitsuba's hair throws there: "
                              "srgb_model_eval needs wavelengths); give sigma_a", file, key)
        if values.get("eta") is not None and not isinstance(values["int_ior"], Defaulted):
            raise ConfigError("give either eta or int_ior / ext_ior, not both", file, f"{key}.int_ior")
        return eta_from_iors(values, file, key)

    @staticmethod
    def constants(values, file, key):
        return [1.0 if values.get("sigma_a") is None else 0.0, values["scale"]]

    @staticmethod
    @ti.func
    def pigments(lam):
        """(eumelanin's, pheomelanin's σ_a per unit concentration) as the walk's colour (Mitsuba: RGB, or each
        upsampled as a reflectance)."""
        return variants.reflectance(vec3(EUMELANIN), lam), variants.reflectance(vec3(PHEOMELANIN), lam)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        sigma = spec(0.0)
        if const(st, ctx, PIG) > 0.0:
            eu, ph = Hair.pigments(ctx.lam)
            sigma = slot_float(st, ctx, _EU) * eu + slot_float(st, ctx, _PH) * ph
        else:
            sigma = const(st, ctx, SCALE) * slot_unbounded(st, ctx, _SIGMA)
        return Hair.Params(sigma=sigma, lum_w=variants.luminance_weights(ctx.lam), lr=slot_float(st, ctx, _LR),
                           ar=slot_float(st, ctx, _AR), tilt=slot_float(st, ctx, _TILT), eta=slot_float(st, ctx, _ETA))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        if const(st, ctx, PIG) > 0.0:
            eu, ph = Hair.pigments(ctx.lam)
            slot_float_adjoint(st, ctx, _EU, g.sigma.dot(eu))
            slot_float_adjoint(st, ctx, _PH, g.sigma.dot(ph))
        else:
            slot_unbounded_adjoint(st, ctx, _SIGMA, const(st, ctx, SCALE) * g.sigma)
        slot_float_adjoint(st, ctx, _LR, g.lr)
        slot_float_adjoint(st, ctx, _AR, g.ar)
        slot_float_adjoint(st, ctx, _TILT, g.tilt)
        slot_float_adjoint(st, ctx, _ETA, g.eta)

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        value, pdf, g, gwi, gwo = _hair(p, wi, wo, spec(0.0), False)
        return value

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        value, pdf, g, gwi, gwo = _hair(p, wi, wo, spec(0.0), False)
        return pdf

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        value, pdf, g, gwi, gwo = _hair(p, wi, wo, d_out, True)
        return g

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        value, pdf, g, gwi, gwo = _hair(p, wi, wo, d_out, True)
        return gwi, gwo

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        """Mitsuba's sample(), number for number (module doc)."""
        st, ct, phi_i, gamma_i, h, eta_p, sgt, cgt, gamma_t, sin_t, cos_t, T, f, c = _setup(p, wi)
        a0, a1, a2, a3 = _attenuation(f, T)
        shares = _lobe_shares(p, a0, a1, a2, a3)
        v0, dv0 = _variance(p.lr)
        s, ds = _logistic_scale(p.ar)
        s0, c0, s1, c1, s2, c2 = _tilts(p.tilt)
        v = ti.Vector([v0, 0.25 * v0, 4.0 * v0, 4.0 * v0])
        # the lobe p, and u1 rescaled for the azimuth
        u00 = u1
        u01 = u1 / shares[0]
        lobe = 0
        for i in ti.static(range(3)):
            take = shares[i] < u00
            u00 -= shares[i]
            if take:
                lobe = i + 1
                u01 = u00 / shares[i + 1]
        u01 = ti.math.clamp(u01, 0.0, 1.0)
        s_ip = 0.0                                        # Mitsuba's: 0 for the p = 3 lobe
        c_ip = 0.0
        for j in ti.static(range(3)):
            if lobe == j:
                s_ip = _reframe(st, ct, j, s0, c0, s1, c1, s2, c2)[0]
                c_ip = ti.abs(_reframe_cos(st, ct, j, s0, c0, s1, c1, s2, c2))
        vp = v[3]
        for j in ti.static(range(3)):
            if lobe == j:
                vp = v[j]
        cos_theta = ti.math.clamp(1.0 + vp * ti.log(u2[0] + (1.0 - u2[0]) * ti.exp(-2.0 / vp)), -1.0, 1.0)
        sin_theta = safe_sqrt(1.0 - cos_theta * cos_theta)
        cos_phi = ti.cos(TWO_PI * u2[1])
        sin_theta_o = -cos_theta * s_ip + sin_theta * cos_phi * c_ip
        cos_theta_o = safe_sqrt(1.0 - sin_theta_o * sin_theta_o)
        dphi = TWO_PI * u01
        if lobe < 3:
            dphi = 2.0 * lobe * gamma_t - 2.0 * gamma_i + lobe * PI + _trimmed_logistic_sample(u01, s)
        phi_o = phi_i + dphi
        wo = vec3(cos_theta_o * ti.cos(phi_o), sin_theta_o, cos_theta_o * ti.sin(phi_o))
        kap = ti.Vector([1.0 / v0, 4.0 / v0, 0.25 / v0, 0.25 / v0])
        pdf = 0.0
        for q in ti.static(range(3)):
            sq, da, db, dal = _reframe(st, ct, q, s0, c0, s1, c1, s2, c2)
            m, dma, dmb, dmk = _mp(sq, wo[1], kap[q])
            n, dnp, dns = _np(dphi, q, s, gamma_i, gamma_t)
            pdf += m * TWO_PI * shares[q] * n
        m3, dma3, dmb3, dmk3 = _mp(st, wo[1], kap[3])
        pdf += m3 * shares[3]
        res = invalid_sample()
        if _finite(pdf) and pdf > 0.0:
            wo = wo.normalized()
            res = BsdfSample(wo=wo, weight=Hair.f(p, wi, wo) / pdf, pdf=pdf, eta=1.0, delta=0, valid=1)
        return res

