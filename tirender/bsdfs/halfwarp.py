"""The half-vector warp: attached sampling of microfacet lobes (near-specular attached PRB,
Vicini et al. 2021 §4.2; integrators/prb_attached.py).

A rough lobe samples wo by reflecting or refracting wi about a microfacet normal m. Detached PRB
holds wo fixed while the parameters π change; for small α that estimator's derivative ∂f/∂π / p is
as peaky as the lobe. The attached estimator moves the sample with π instead: the sample at π0 is
the microfacet normal m0 (recovered from (wi, wo) as the half vector), and at π

    s     = (s0x r_u, s0y r_v),  r = 1 + (α/α0 - 1) φ(ρ)      (the slopes s0 = m0xy / m0z scale with α
    m(α)  = normalize(s_x, s_y, 1)                             near the lobe's centre: φ = exp(-ρ²/c²),
                                                               ρ = |s0 / α0|, c = FADE = 2)
    wo    = W(wi, m) = reflect(wi, m)  or  refract(wi, m, η)   (wi moves with the frame)
    J     = |dω_o/dω_m| · |dω_m/dω_m0|
          = 4 |wi·m|  or  (wi·m + η' wo·m)² / (η'² |wo·m|),   times  |ds/ds0| · (m_z/m0_z)³

a bijection of the sample space, so E(π) = f(wi, wo) J / p0(wo0) is an unbiased estimator at every
π (change of variables; p0 = the sampler's density at π0, J = 1 there). Its derivative needs no
derivative of the sampling routine (GGX's or Beckmann's visible-normal warp), only of W and J.
Why the fade φ: samples that move cross the discontinuities of what they see (an emitter's edge, an
occluder's silhouette), which this estimator does not account for (the paper's "moving
discontinuities"). GGX's heavy tails put a lobe's far slopes across such edges: scaling every slope
with α biased a rough GGX mirror's ∂/∂α under a finite area light (tirender measured +14 against a
finite-difference -427); holding slopes beyond ~2α0 in place (there the estimator is detached PRB's)
removes that (-423 ± 31), keeping the low variance of the lobe's core.
η' = η for wi·m > 0 (arriving from outside), 1/η below, as the models' own refraction.

    HalfWarp(m, alpha, reflect)                       the sample at π0 (leaf-local m, signed α0)
    warp_record(wi, wo, alpha, eta) -> HalfWarp
    half_warp(wi, hw, alpha, eta) -> (wo, ln J)       the sample moved to α, wi (primal)
    half_warp_adjoint(wi, hw, eta, gwi_f, gwo_f, k, g_wo) -> (g_wi, g_alpha)
        at π0: ∂/∂wi and ∂/∂(α_u, α_v) (|α|, as microfacet.py) of
        <d_out, f(wi, W)> + k ln J + <g_wo, W>, given gwi_f, gwo_f = ∂<d_out, f>/∂(wi, wo) (the
        model's f_grad_dirs); f's own ∂/∂α at fixed directions is the model's f_adjoint (not here).
"""
import taichi as ti

from ..core.math import vec2, vec3
from ..core.optics import refract, refract_adjoint
from .microfacet import ALPHA_MIN, clamp_alpha

FADE = 2.0   # c: slopes beyond about c α from the lobe's centre stay put as α changes (module doc)


@ti.dataclass
class HalfWarp:
    """A microfacet sample at π0: m (leaf-local, m_z > 0), the signed roughness α0 it was sampled
    with, reflect (1) or refract (0)."""
    m: vec3
    alpha: vec2
    reflect: ti.i32


@ti.func
def warp_record(wi, wo, alpha, eta):
    """The half vector of (wi, wo): reflection (same side) normalize(wi + wo), refraction the
    generalized normalize(wi + η' wo) (η' = η for wi_z > 0, else 1/η), flipped to m_z > 0."""
    refl = wi[2] * wo[2] > 0.0
    ep = eta if wi[2] > 0.0 else 1.0 / eta
    h = wi + wo * (1.0 if refl else ep)
    hl = h.norm()
    m = h / ti.select(hl > 0.0, hl, 1.0)
    if m[2] < 0.0:
        m = -m
    return HalfWarp(m=m, alpha=alpha, reflect=ti.select(refl, 1, 0))


@ti.func
def _scaled_normal(hw, alpha):
    """(m(α), the slope map's Jacobian determinant |ds/ds0|): slopes s0 = (m0x, m0y) / m0z scaled
    per axis by r = 1 + (α/α0 - 1) φ(ρ), φ = exp(-ρ²/c²) with ρ = |s0 / α0|, c = FADE."""
    a = clamp_alpha(alpha)
    a0 = clamp_alpha(hw.alpha)
    m0 = hw.m
    tx = m0[0] / (m0[2] * a0[0])
    ty = m0[1] / (m0[2] * a0[1])
    phi = ti.exp(-(tx * tx + ty * ty) / (FADE * FADE))
    du = (a[0] / a0[0] - 1.0) * phi
    dv = (a[1] / a0[1] - 1.0) * phi
    mt = vec3(m0[0] / m0[2] * (1.0 + du), m0[1] / m0[2] * (1.0 + dv), 1.0)
    c2 = 2.0 / (FADE * FADE)
    j11 = 1.0 + du * (1.0 - c2 * tx * tx)
    j22 = 1.0 + dv * (1.0 - c2 * ty * ty)
    j12 = -c2 * du * tx * ty * a0[0] / a0[1]
    j21 = -c2 * dv * tx * ty * a0[1] / a0[0]
    return mt.normalized(), j11 * j22 - j12 * j21


@ti.func
def _refraction(wi, m, eta):
    """(sign of wi·m, η' (module doc), the relative IOR 1/η' of core.optics.refract)."""
    sg = 1.0 if wi.dot(m) >= 0.0 else -1.0
    ep = eta if sg > 0.0 else 1.0 / eta
    return sg, ep, 1.0 / ep


@ti.func
def half_warp(wi, hw, alpha, eta):
    """(wo, ln J) of the sample hw moved to incident wi and roughness alpha (module doc); wo = 0
    under total internal reflection."""
    m, ratio = _scaled_normal(hw, alpha)
    m0z = hw.m[2]
    lnj = ti.log(ratio) + 3.0 * ti.log(m[2] / m0z)
    wo = vec3(0.0)
    dim = wi.dot(m)
    if hw.reflect == 1:
        wo = 2.0 * dim * m - wi
        lnj += ti.log(4.0 * ti.abs(dim))
    else:
        sg, ep, rel = _refraction(wi, m, eta)
        wt, ok = refract(-wi, m * sg, rel)
        if ok == 1:
            wo = wt
            dom = wo.dot(m)
            den = dim + ep * dom
            lnj += ti.log(den * den / (ep * ep * ti.abs(dom)))
    return wo, lnj


@ti.func
def half_warp_adjoint(wi, hw, eta, gwi_f, gwo_f, k, g_wo):
    """(∂/∂wi, ∂/∂(α_u, α_v)) at π0 of <d_out, f(wi, W)> + k ln J + <g_wo, W> (module doc)."""
    m = hw.m
    dim = wi.dot(m)
    g_wi = gwi_f
    g_m = vec3(0.0)
    g = g_wo + gwo_f
    if hw.reflect == 1:
        # ln J = ln 4|wi·m|;  W = 2 (wi·m) m - wi
        g_wi += (k / dim) * m
        g_m += (k / dim) * wi
        gm = g.dot(m)
        g_wi += 2.0 * gm * m - g
        g_m += 2.0 * (gm * wi + dim * g)
    else:
        sg, ep, rel = _refraction(wi, m, eta)
        wo, ok = refract(-wi, m * sg, rel)
        if ok == 1:
            # ln J = 2 ln|wi·m + η' wo·m| - 2 ln η' - ln|wo·m|
            dom = wo.dot(m)
            den = dim + ep * dom
            g_wi += (2.0 * k / den) * m
            g += (2.0 * k * ep / den - k / dom) * m
            g_m += (2.0 * k / den) * (wi + ep * wo) - (k / dom) * wo
            gd, gn, _ge = refract_adjoint(-wi, m * sg, rel, g)
            g_wi -= gd
            g_m += sg * gn
    # m(α): ∂m/∂α_u = φ (m_x / α_u)(e_x - m_x m);
    # ln J_α = ln|ds/ds0| + 3 ln m_z: ∂/∂α_u = φ (1 - 2 t_x²/c²) / α_u - 3 φ m_x² / α_u
    a = clamp_alpha(hw.alpha)
    tx = m[0] / (m[2] * a[0])
    ty = m[1] / (m[2] * a[1])
    phi = ti.exp(-(tx * tx + ty * ty) / (FADE * FADE))
    c2 = 2.0 / (FADE * FADE)
    gmm = g_m.dot(m)
    live = vec2(ti.select(ti.abs(hw.alpha[0]) >= ALPHA_MIN, 1.0, 0.0),
                ti.select(ti.abs(hw.alpha[1]) >= ALPHA_MIN, 1.0, 0.0))
    g_a = phi * vec2((m[0] * (g_m[0] - m[0] * gmm) + k * (1.0 - c2 * tx * tx - 3.0 * m[0] * m[0])) / a[0],
                     (m[1] * (g_m[1] - m[1] * gmm) + k * (1.0 - c2 * ty * ty - 3.0 * m[1] * m[1])) / a[1]) * live
    return g_wi, g_a
