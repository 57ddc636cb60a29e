"""Homogeneous media: analytic free-flight sampling and transmittance, with their adjoints.

RGB sigma_t, hero-channel spectral MIS over whole paths: the path picks one channel h at its start
and samples every distance with sigma_h (t ~ sigma_h exp(-sigma_h t)). Each event returns
    w_c  the throughput factor  f_c / p_h   and   q_c = p_c / p_h  the pdf ratio,
where p_c is the density of the same event had channel c been the hero:
    collision at t < s:  p_c = sigma_c exp(-sigma_c t),  f_c = albedo_c sigma_c exp(-sigma_c t)
    no collision:        p_c = f_c = exp(-sigma_c s)
The integrator keeps r = prod q (path pdf ratios) and divides the throughput by mean(r)
(renormalising r), i.e. the balance heuristic between the single-channel path-sampling
strategies: every channel is estimated exactly, not only the hero's (Wilkie 2014; PBRT-v4's
r_u). For a grey sigma_t, w = albedo or 1 and q = 1.

Adjoints (PRB, detached sampling: t, the pdfs and mean(r) are constants, the weights are
differentiated):
    collision:    d w_c / w_c = (1 / sigma_c - t) d sigma_c + d albedo_c / albedo_c
    no collision: d w_c / w_c = -s d sigma_c
    transmittance exp(-sigma_c s): d T_c = -s T_c d sigma_c
Given L (the path radiance that the weight multiplies) and dL (its adjoint), the gradient is
dL * L * (d w / w).
"""
import taichi as ti

from ..core.math import BIG, safe_div
from ..schema import Child, Number, Volume
from ..variants import lanes, spec
from . import HOMOGENEOUS, SPECTRAL_EXTINCTION


@ti.func
def channel(v, h):
    """v[h] for a runtime channel (lane) index h."""
    res = v[0]
    for c in ti.static(range(1, lanes())):
        if h == c:
            res = v[c]
    return res


@ti.func
def sample_distance(sigma, h, u):
    sh = channel(sigma, h)
    t = BIG
    if sh > 0.0:
        t = -ti.log(1.0 - u) / sh
    return t


@ti.func
def collision_tau(sigma, albedo, tau, h):
    """(w, q) of a collision with coefficients sigma/albedo after optical depths tau (RGB),
    sampled with hero channel h: q_c = sigma_c e^{-tau_c} / (sigma_h e^{-tau_h}), w = albedo q."""
    sh = channel(sigma, h)
    th = channel(tau, h)
    q = spec(0.0)
    for c in ti.static(range(lanes())):
        q[c] = safe_div(sigma[c], sh) * ti.exp(ti.min(ti.max(th - tau[c], -80.0), 80.0))
    return albedo * q, q


@ti.func
def escape_tau(tau, h):
    """w = q of crossing a segment of optical depths tau: q_c = e^{-tau_c} / e^{-tau_h}."""
    th = channel(tau, h)
    q = spec(0.0)
    for c in ti.static(range(lanes())):
        q[c] = ti.exp(ti.min(ti.max(th - tau[c], -80.0), 80.0))
    return q


@ti.func
def collision(sigma, albedo, t, h):
    return collision_tau(sigma, albedo, sigma * t, h)


@ti.func
def escape(sigma, s, h):
    return escape_tau(sigma * ti.min(s, 1e20), h)


@ti.func
def collision_grads(sigma, albedo, t, L, dL):
    """(d sigma_t, d albedo) of a sampled collision: dL * L * d w / w."""
    g = dL * L
    return (safe_div(g, sigma) - g * t,
            safe_div(g, albedo))


@ti.func
def escape_grads(s, L, dL):
    res = spec(0.0)
    if s < 0.5 * BIG:   # an unbounded homogeneous medium has no meaningful derivative
        res = -s * dL * L
    return res


@ti.func
def transmittance(sigma, s):
    res = spec(1.0)
    for c in ti.static(range(lanes())):
        if sigma[c] > 0.0:
            res[c] = ti.exp(-ti.min(sigma[c] * s, 80.0))
    return res


class Homogeneous:
    """Mitsuba 3 ``homogeneous``: constant sigma_t = scale * sigma_t and albedo (RGB)."""
    NAME = "homogeneous"
    ALIASES = ()
    KEYS = (Volume("sigma_t", 3, default=1.0, lo=0.0, grid=False, doc="extinction σt (m⁻¹), RGB"),
            Volume("albedo", 3, default=0.75, lo=0.0, hi=1.0, grid=False, doc="single-scattering albedo"),
            Number("scale", default=1.0, lo=0.0, doc="multiplies σt"),
            Child("phase", default="isotropic", kind="phase function", doc="`isotropic` or {type: hg, g: ...}"),
            SPECTRAL_EXTINCTION)
    FLAGS = HOMOGENEOUS
    SIGMA = "sigma_t"
