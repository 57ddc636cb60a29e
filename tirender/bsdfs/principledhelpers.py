"""Maths (and the [0, 1] texture key ``unit_texture``, f and its adjoint from one code path ``from_core``) shared by Mitsuba 3's two principled BSDFs, ``principled`` and ``principledthin``
(src/bsdfs/principledhelpers.h and the diffuse / retro-reflection / fake-subsurface terms both plugins
write out; Burley 2012, 2015). Scalar ``@ti.func``s, each with the partial derivatives its models'
hand-written adjoints (parameters) and ``grad_dirs`` (directions) need.

    schlick_weight(x) = clip(1 - x, 0, 1)^5                           (+ schlick_weight_d)
    calc_schlick_w(c, η) -> (w, η_it)    calc_schlick's weight: S(R0) = lerp(w, 1, R0) = w + (1 - w) R0, with
                                         w = schlick_weight(|c|) if η_it > 1, else schlick_weight(cos θt)
                                         (+ calc_schlick_w_dcos, calc_schlick_w_deta)
    schlick_r0(η) = ((η - 1) / (η + 1))²                              (+ schlick_r0_deta)
    dist_params(r, a) -> (α_x, α_y, ∂α_x/∂r, ∂α_y/∂r, ∂α_x/∂a, ∂α_y/∂a)   calc_dist_params:
                                         α_x = max(1e-3, r² / s), α_y = max(1e-3, r² s), s = sqrt(1 - 0.9 a)
    tint(c, w_lum) -> (c_tint, lum)      c_tint = c / lum (1 where lum <= 0), lum = <w_lum, c> (Mitsuba's
                                         luminance(c, wavelengths); w_lum = variants.luminance_weights(λ))
                                         (+ tint_vjp)
    diffuse_retro(r, F_i, F_o, cos θd)   f_diff + f_retro = (1 - F_i/2)(1 - F_o/2) + R_r (F_o + F_i + F_o F_i (R_r - 1)),
                                         R_r = 2 r cos²θd, F_{i,o} = schlick_weight(|cos θ_{i,o}|), and its partials
    fake_subsurface(r, F_i, F_o, cos θd, |cos θi| + |cos θo|)
                                         Hanrahan-Krueger's flattened f_ss = 1.25 (F_ss (1 / (|cos θi| + |cos θo|)
                                         - 0.5) + 0.5), F_ss = lerp(1, F_ss90, F_o) lerp(1, F_ss90, F_i),
                                         F_ss90 = R_r / 2, and its partials
"""
import taichi as ti

from ..schema import Texture
from ..variants import spec


def unit_texture(name, doc, default=0.0, channels=1):
    """A texture key in [0, 1] (most of the principled parameters)."""
    return Texture(name, channels, default=default, lo=0.0, hi=1.0, doc=doc)


def from_core(core):
    """(f, f_adjoint) as staticmethods of a model whose value and parameter adjoint are one code path,
    core(p, wi, wo, d) -> (f(wi, wo), ∂<d, f>/∂p): f is its value (d = 1), f_adjoint its ∂<d_out, f>/∂(every
    texture parameter). In the class body after core: ``f, f_adjoint = from_core(core)``."""
    fn = core.__func__ if isinstance(core, staticmethod) else core

    @ti.func
    def f(p, wi, wo):
        val, _ = fn(p, wi, wo, spec(1.0))
        return val

    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        _, g = fn(p, wi, wo, d_out)
        return g

    return staticmethod(f), staticmethod(f_adjoint)


@ti.func
def schlick_weight(x):
    m = ti.min(ti.max(1.0 - x, 0.0), 1.0)
    return m * m * m * m * m


@ti.func
def schlick_weight_d(x):
    """d/dx of schlick_weight (0 outside (0, 1))."""
    res = 0.0
    if 0.0 < x < 1.0:
        res = -5.0 * (1.0 - x) ** 4
    return res


@ti.func
def calc_schlick_w(c, eta):
    """Mitsuba's calc_schlick weight at cos θ = c for relative IOR η: S(R0) = w + (1 - w) R0. Returns (w, η_it)."""
    eta_it = ti.select(c >= 0.0, eta, 1.0 / eta)
    eta_ti = 1.0 / eta_it
    ct = ti.sqrt(ti.max(1.0 - (1.0 - c * c) * eta_ti * eta_ti, 0.0))
    return ti.select(eta_it > 1.0, schlick_weight(ti.abs(c)), schlick_weight(ct)), eta_it


@ti.func
def calc_schlick_w_dcos(c, eta):
    """∂/∂c of calc_schlick_w's weight."""
    eta_it = ti.select(c >= 0.0, eta, 1.0 / eta)
    eta_ti = 1.0 / eta_it
    res = 0.0
    if eta_it > 1.0:
        res = schlick_weight_d(ti.abs(c)) * ti.select(c >= 0.0, 1.0, -1.0)
    else:
        ct2 = 1.0 - (1.0 - c * c) * eta_ti * eta_ti
        if ct2 > 0.0:
            ct = ti.sqrt(ct2)
            res = schlick_weight_d(ct) * c * eta_ti * eta_ti / ct
    return res


@ti.func
def calc_schlick_w_deta(c, eta):
    """∂/∂η of calc_schlick_w's weight (0 for η_it > 1, where it does not depend on η)."""
    eta_it = ti.select(c >= 0.0, eta, 1.0 / eta)
    res = 0.0
    if eta_it <= 1.0:
        ct2 = 1.0 - (1.0 - c * c) / (eta_it * eta_it)
        if ct2 > 0.0:
            ct = ti.sqrt(ct2)
            dct = (1.0 - c * c) / (eta_it * eta_it * eta_it * ct)          # ∂cos θt/∂η_it
            res = schlick_weight_d(ct) * dct * ti.select(c >= 0.0, 1.0, -1.0 / (eta * eta))
    return res


@ti.func
def schlick_r0(eta):
    """Incident specular R0 = ((η - 1) / (η + 1))² (Mitsuba's schlick_R0_eta)."""
    return ((eta - 1.0) / (eta + 1.0)) ** 2


@ti.func
def schlick_r0_deta(eta):
    return 4.0 * (eta - 1.0) / (eta + 1.0) ** 3


@ti.func
def dist_params(roughness, anisotropic):
    """(α_x, α_y, ∂α_x/∂r, ∂α_y/∂r, ∂α_x/∂a, ∂α_y/∂a) of Mitsuba's calc_dist_params (isotropic when a = 0;
    the 1e-3 floor has no derivative)."""
    asp = ti.sqrt(ti.max(1.0 - 0.9 * anisotropic, 1e-8))
    r2 = roughness * roughness
    ax = r2 / asp
    ay = r2 * asp
    dax_r = 2.0 * roughness / asp
    day_r = 2.0 * roughness * asp
    dax_a = r2 * 0.45 / (asp * asp * asp)
    day_a = -r2 * 0.45 / asp
    if ax < 1e-3:
        ax = 1e-3
        dax_r = 0.0
        dax_a = 0.0
    if ay < 1e-3:
        ay = 1e-3
        day_r = 0.0
        day_a = 0.0
    return ax, ay, dax_r, day_r, dax_a, day_a


@ti.func
def tint(c, w_lum):
    """(c_tint = c / lum (1 if lum <= 0), lum = <w_lum, c>)."""
    lum = w_lum.dot(c)
    ct = spec(1.0)
    if lum > 0.0:
        ct = c / lum
    return ct, lum


@ti.func
def tint_vjp(c, w_lum, lum, d):
    """(∂c_tint/∂c)^T d."""
    g = spec(0.0)
    if lum > 0.0:
        g = d / lum - w_lum * (d.dot(c) / (lum * lum))
    return g


@ti.func
def diffuse_retro(r, fi, fo, cd):
    """(f, ∂f/∂F_i, ∂f/∂F_o, ∂f/∂cos θd, ∂f/∂r) of f = f_diff + f_retro (module doc)."""
    rr = 2.0 * r * cd * cd
    f = (1.0 - 0.5 * fi) * (1.0 - 0.5 * fo) + rr * (fo + fi + fo * fi * (rr - 1.0))
    d_rr = fo + fi + fo * fi * (2.0 * rr - 1.0)
    d_fi = -0.5 * (1.0 - 0.5 * fo) + rr * (1.0 + fo * (rr - 1.0))
    d_fo = -0.5 * (1.0 - 0.5 * fi) + rr * (1.0 + fi * (rr - 1.0))
    return f, d_fi, d_fo, d_rr * 4.0 * r * cd, d_rr * 2.0 * cd * cd


@ti.func
def fake_subsurface(r, fi, fo, cd, csum):
    """(f_ss, ∂/∂F_i, ∂/∂F_o, ∂/∂cos θd, ∂/∂r, ∂/∂csum) of the fake subsurface term (module doc;
    csum = |cos θi| + |cos θo| > 0)."""
    f90 = r * cd * cd
    ao = 1.0 + (f90 - 1.0) * fo
    ai = 1.0 + (f90 - 1.0) * fi
    q = 1.0 / csum
    fss = ao * ai
    f = 1.25 * (fss * (q - 0.5) + 0.5)
    k = 1.25 * (q - 0.5)
    d_f90 = k * (fo * ai + fi * ao)
    return f, k * (f90 - 1.0) * ao, k * (f90 - 1.0) * ai, d_f90 * 2.0 * r * cd, d_f90 * cd * cd, -1.25 * fss * q * q
