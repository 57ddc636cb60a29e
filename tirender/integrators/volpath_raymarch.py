"""Ray-marching variant of volpath (fixed step, as Mitsuba 2 rendered and differentiated
heterogeneous media), for comparison with unbiased delta tracking.

Grid media are treated as piecewise constant along the ray: the bbox-clipped segment is cut into
n = ceil(length / step) equal steps, each with sigma_t and albedo looked up at a jittered point
(one jitter per segment). Default step: half the smallest voxel extent (``integrator.step_size``
overrides it, in world units). Homogeneous media are exact (as in volpath).
  * free flight: march until the path's hero channel's optical depth tau_h exceeds -log(1 - u);
    the collision is placed inside the step by linear inversion. Weights and pdf ratios as in
    media/homogeneous.py (spectral MIS over the path): w_c = sigma_s,c e^{-tau_c} / (sigma_h
    e^{-tau_h}) at a collision, e^{-tau_c} / e^{-tau_h} when the segment is crossed.
  * transmittance (NEE): exp(-sum sigma_t dt).
Biased (the step quantises the medium) but smooth in the parameters. The gradient (``prbvolpath``
machinery with ``march``) is the detached derivative of this estimator: with the collision
positions fixed, d w_c / w_c = -dt d sigma_c(x_j) for the steps before the collision,
(1 / sigma_c - dtt) d sigma_c + d albedo_c / albedo_c at the colliding step (dtt: the distance
into it); transmittance: d T_c = -dt T_c d sigma_c(x_j).
"""
import taichi as ti

from ..core.math import safe_div, vec3
from ..media import homogeneous as hom
from ..media import medium as med

PRIMAL, ADJOINT = 0, 1


@ti.func
def _steps(st: ti.template(), m, t0, t1, step):
    h = step
    if h <= 0.0:
        h = med.default_step(st, m)
    n = ti.max(1, ti.cast(ti.ceil((t1 - t0) / h), ti.i32))
    return n, (t1 - t0) / n


@ti.func
def march_free_flight(st: ti.template(), mode: ti.template(), m, o, d, tmax, hero, sampler: ti.template(), L, dL,
                      step):
    """Free-flight sampling by ray marching in grid medium m (hero channel `hero`).
    Returns (scattered, t, w, q) like volpath.free_flight."""
    scattered = 0
    ts = tmax
    w = vec3(1.0)
    q = vec3(1.0)
    tau_target = -ti.log(1.0 - sampler.next_1d())
    jitter = sampler.next_1d()
    t0, t1 = med.clip_bbox(st, m, o, d, tmax)
    if t1 > t0:
        k = hero
        n, dt = _steps(st, m, t0, t1, step)
        tau = vec3(0.0)
        i = 0
        dtt = 0.0
        sig_hit = vec3(0.0)
        alb_hit = vec3(0.0)
        while i < n and scattered == 0:
            sig, alb = med.coefficients(st, m, o + (t0 + (i + jitter) * dt) * d)
            sk = hom.channel(sig, k)
            tk = hom.channel(tau, k)
            if sk > 0.0 and tk + sk * dt >= tau_target:
                dtt = ti.min(ti.max((tau_target - tk) / sk, 0.0), dt)
                ts = t0 + i * dt + dtt
                w, q = hom.collision_tau(sig, alb, tau + sig * dtt, k)
                sig_hit = sig
                alb_hit = alb
                scattered = 1
            else:
                tau += sig * dt
                i += 1
        if scattered == 0:
            w = hom.escape_tau(tau, k)
            q = w
        if ti.static(mode == ADJOINT):
            g = dL * L
            for j in range(i):   # steps crossed before the collision (all of them on escape)
                med.coefficients_adjoint(st, m, o + (t0 + (j + jitter) * dt) * d, -dt * g, vec3(0.0))
            if scattered == 1:
                med.coefficients_adjoint(
                    st, m, o + (t0 + (i + jitter) * dt) * d,
                    vec3(safe_div(g[0], sig_hit[0]), safe_div(g[1], sig_hit[1]), safe_div(g[2], sig_hit[2])) - dtt * g,
                    vec3(safe_div(g[0], alb_hit[0]), safe_div(g[1], alb_hit[1]), safe_div(g[2], alb_hit[2])))
    return scattered, ts, w, q


@ti.func
def march_transmittance(st: ti.template(), mode: ti.template(), m, o, d, s, sampler: ti.template(), T_total, dT,
                        step):
    """exp(-sum_j sigma_t(x_j) dt) over the bbox-clipped segment [0, s) of grid medium m."""
    T = vec3(1.0)
    t0, t1 = med.clip_bbox(st, m, o, d, s)
    if t1 > t0:
        jitter = sampler.next_1d()
        n, dt = _steps(st, m, t0, t1, step)
        tau = vec3(0.0)
        for j in range(n):
            x = o + (t0 + (j + jitter) * dt) * d
            sig, _ = med.coefficients(st, m, x)
            tau += sig * dt
            if ti.static(mode == ADJOINT):
                med.coefficients_adjoint(st, m, x, -dt * dT * T_total, vec3(0.0))
        T = ti.exp(-ti.min(tau, 80.0))
    return T


def render(scene, spp=64, seed=0, sensor=0, progress=True):
    """Primal render with the ray-marching variant (tirender.render with integrator
    'volpath_raymarch' lands here too)."""
    from . import volpath
    return volpath.render(scene, spp=spp, seed=seed, sensor=sensor, integrator="volpath_raymarch",
                          progress=progress)
