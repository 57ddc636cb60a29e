"""Media steps of the walk: which medium a ray enters, free-flight sampling and shadow-ray
transmittance through participating media — delta / ratio tracking in grid media, analytic in
homogeneous ones, or fixed-step ray marching (``march = MARCH``, Mitsuba 2's biased estimator) —
each with its adjoint (detached PRB for volumes, Vicini et al. 2021 §4.4).

Delta tracking with piecewise-constant majorants mu (``st.med_majgrid``: a MAJORANT_GRID^3 grid of
cells over the medium's bbox, walked by MajorantWalk; empty cells are skipped) on the bbox-clipped
segment: at a tentative collision x (mu: its cell's majorant), with P_s = sigma_t,h(x) / mu (h: the
path's hero channel; detached), real scattering with probability P_s, weight sigma_s(x) / (mu P_s); null scattering otherwise, weight
(mu - sigma_t(x)) / (mu (1 - P_s)). Every event also yields the pdf ratios q_c = p_c / p_h of the
other channels' strategies (spectral MIS, see media/homogeneous.py). Adjoint (given L, the radiance
the weight multiplies, and its adjoint dL; G = dL L): the *marginal* weights are differentiated
(exp(-tau(t)) sigma_s(t) at a collision, exp(-tau) for an escape or a shadow segment), see _track:
    attenuation:    d sigma_t += -G dt at stratified points of the flight before the collision
    in-scattering:  a quadrature along the whole flight (inscatter_adjoint, called by the walk); or
                    G / sigma_t at the collision (SPLIT = 0)
    albedo:         d albedo += G / albedo at the collision
Ratio tracking T = prod_k (1 - sigma_t(x_k) / mu) (shadow rays) is differentiated by a nested replay
of the shadow ray's geometry with a copy of the sampler: d sigma_t += -dT T_total dt at stratified
points of each segment in a grid medium.
Ray marching (step: ``st.info_f[INFO_MARCH_STEP]`` world units, or half the smallest voxel): grid
media are piecewise constant along the ray at jittered points; with the collision positions fixed,
d w_c / w_c = -dt d sigma_c(x_j) before the collision and (1/sigma_c - dtt) d sigma_c +
d albedo_c / albedo_c at the colliding step; transmittance d T_c = -dt T_c d sigma_c.
"""
import taichi as ti

from .. import variants
from ..bsdfs.base import NULL, PASS, surface_ctx
from ..core.interaction import geometric_normal, make_interaction
from ..core import mueller
from ..core.intersect import intersect
from ..core.math import BIG, max_component, safe_div, to_local, vec3
from ..core.rng import PCG32
from ..emitters import registry as emitters
from ..media import MAJORANT_GRID
from ..media import homogeneous as hom
from ..media import medium as med
from ..media.phase import phase_eval
from ..scene.storage import INFO_MARCH_STEP
from ..variants import spec
from .state import PRIMAL, REPLAY, s0_weight

DELTA, MARCH = 0, 1          # free-flight / transmittance estimators in grid media
INSCATTER_RR = 0.1           # inscatter_adjoint's default roulette threshold on T(t_j) (integrator.inscatter_rr)
QUADRATURE_VOXELS = 4.0  # spacing of the optical-depth adjoint's points, in voxels
MAX_CROSSINGS = 256          # null interfaces crossed by one path segment chain (guard)


@ti.func
def _steps(st: ti.template(), m, t0, t1):
    h = st.info_f[INFO_MARCH_STEP]
    if h <= 0.0:
        h = med.default_step(st, m)
    n = ti.max(1, ti.cast(ti.ceil((t1 - t0) / h), ti.i32))
    return n, (t1 - t0) / n


@ti.func
def march_free_flight(st: ti.template(), mode: ti.template(), m, o, d, tmax, hero, lam, sampler: ti.template(), L,
                      dL, adj):
    """Free-flight sampling by ray marching in grid medium m (hero channel `hero`).
    Returns (scattered, t, w, q) like volpath.free_flight."""
    scattered = 0
    ts = tmax
    w = spec(1.0)
    q = spec(1.0)
    tau_target = -ti.log(1.0 - sampler.next_1d())
    jitter = sampler.next_1d()
    t0, t1 = med.clip_bbox(st, m, o, d, tmax)
    if t1 > t0:
        k = hero
        n, dt = _steps(st, m, t0, t1)
        tau = spec(0.0)
        i = 0
        dtt = 0.0
        sig_hit = spec(0.0)
        alb_hit = spec(0.0)
        while i < n and scattered == 0:
            sig, alb = med.coefficients(st, m, o + (t0 + (i + jitter) * dt) * d, lam)
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
        if ti.static(mode != PRIMAL):
            if adj:
                g = dL * L
                for j in range(i):   # steps crossed before the collision (all of them on escape)
                    med.coefficients_adjoint(st, m, o + (t0 + (j + jitter) * dt) * d, lam, -dt * g, spec(0.0))
                if scattered == 1:
                    med.coefficients_adjoint(
                        st, m, o + (t0 + (i + jitter) * dt) * d, lam,
                        safe_div(g, sig_hit) - dtt * g,
                        safe_div(g, alb_hit))
    return scattered, ts, w, q


@ti.func
def march_transmittance(st: ti.template(), mode: ti.template(), m, o, d, s, lam, sampler: ti.template(), T_total,
                        dT):
    """exp(-sum_j sigma_t(x_j) dt) over the bbox-clipped segment [0, s) of grid medium m."""
    T = spec(1.0)
    t0, t1 = med.clip_bbox(st, m, o, d, s)
    if t1 > t0:
        jitter = sampler.next_1d()
        n, dt = _steps(st, m, t0, t1)
        tau = spec(0.0)
        for j in range(n):
            x = o + (t0 + (j + jitter) * dt) * d
            sig, _ = med.coefficients(st, m, x, lam)
            tau += sig * dt
            if ti.static(mode == REPLAY):
                med.coefficients_adjoint(st, m, x, lam, -dt * dT * T_total, spec(0.0))
        T = ti.exp(-ti.min(tau, 80.0))
    return T


@ti.func
def target_medium(st: ti.template(), shape, d, ng, current):
    """Medium on the side of `shape`'s surface that direction d points into (Mitsuba's
    target_medium: interior against the geometric normal). Shapes without media keep `current`."""
    res = current
    mi = st.shape_med_int[shape]
    me = st.shape_med_ext[shape]
    if mi >= 0 or me >= 0:
        res = mi if d.dot(ng) < 0.0 else me
    return res


@ti.func
def _optical_depth_adjoint(st: ti.template(), m, o, d, ta, tb, jitter, g, lam):
    """Adjoint of the optical depth tau = int_ta^tb sigma_t(o + t d) dt of grid medium m: scatters
    d sigma_t(x) += g dt at stratified points x_j = o + (ta + (j + jitter) dt) d, QUADRATURE_VOXELS
    voxels apart (an unbiased estimate of the line integral of the trilinear weights for a uniform
    jitter; measured on the volume task: spacing 1 -> 4 voxels keeps the gradient's correlation
    between independent estimates at 0.62 and cuts its CPU time by a third)."""
    if tb > ta:
        n = ti.max(1, ti.cast(ti.ceil((tb - ta) / (QUADRATURE_VOXELS * 2.0 * med.default_step(st, m))), ti.i32))
        dt = (tb - ta) / n
        for j in range(n):
            med.sigma_t_adjoint(st, m, o + (ta + (j + jitter) * dt) * d, lam, g * dt)


@ti.func
def _side_stream(sampler: ti.template()):
    """Random numbers for the adjoint's quadratures that leave `sampler` untouched (so PRIMAL and
    REPLAY walks stay aligned): a copy on another PCG stream, advanced once (PCG's first output is
    a function of the shared state alone)."""
    side = PCG32(state=sampler.state, inc=sampler.inc ^ ti.u64(0x5851F42D4C957F2C))
    side.next_u32()
    return side


ivec3 = ti.types.vector(3, ti.i32)


@ti.dataclass
class MajorantWalk:
    """Tentative collisions along o + t d, t in [t, t1), through the piecewise-constant majorants
    of a grid medium (st.med_majgrid: MAJORANT_GRID^3 cells over its bbox), visited with a 3D DDA.
    ``next(st, m, tau)`` moves to the point where the majorant's optical depth from the current t
    reaches tau (tau ~ Exp(1): the next tentative collision) and returns (t, mu of its cell), or
    t >= t1 at the end. Cells of majorant 0 (empty space) are crossed without a collision."""
    t: float
    t1: float
    cell: ivec3
    step: ivec3
    t_next: vec3
    t_delta: vec3

    @ti.func
    def next(self, st: ti.template(), m, tau):
        r = ti.static(MAJORANT_GRID)
        res_t = BIG
        res_mu = 0.0
        going = self.t < self.t1
        guard = 0
        while going:
            i = ti.min(ti.max(self.cell, 0), r - 1)
            mu = st.med_majgrid[m, (i[2] * r + i[1]) * r + i[0]]
            tb = ti.min(self.t_next.min(), self.t1)
            seg = ti.max(tb - self.t, 0.0)
            if mu > 0.0 and mu * seg >= tau:
                self.t += tau / mu
                res_t = self.t
                res_mu = mu
                going = False
            else:
                tau -= mu * seg
                self.t = tb
                a = 0
                if self.t_next[1] < self.t_next[a]:
                    a = 1
                if self.t_next[2] < self.t_next[a]:
                    a = 2
                self.cell[a] += self.step[a]
                self.t_next[a] += self.t_delta[a]
                guard += 1
                if tb >= self.t1 or self.cell[a] < 0 or self.cell[a] >= r or guard > 4 * r:
                    going = False
        if res_t >= self.t1:
            self.t = self.t1
        return res_t, res_mu


@ti.func
def majorant_walk(st: ti.template(), m, o, d, t0, t1):
    """A MajorantWalk of grid medium m along o + t d from t0 (inside its bbox) to t1."""
    r = ti.static(MAJORANT_GRID)
    ext = st.med_bmax[m] - st.med_bmin[m]
    dl = d / ext * r                                   # grid cells per unit of t
    p = (o + t0 * d - st.med_bmin[m]) / ext * r
    cell = ti.min(ti.max(ti.cast(ti.floor(p), ti.i32), 0), r - 1)
    step = ivec3(0)
    t_next = vec3(BIG)
    t_delta = vec3(BIG)
    for k in ti.static(range(3)):
        if dl[k] > 1e-12:
            step[k] = 1
            t_delta[k] = 1.0 / dl[k]
            t_next[k] = t0 + (cell[k] + 1 - p[k]) * t_delta[k]
        elif dl[k] < -1e-12:
            step[k] = -1
            t_delta[k] = -1.0 / dl[k]
            t_next[k] = t0 + (p[k] - cell[k]) * t_delta[k]
    return MajorantWalk(t=t0, t1=t1, cell=cell, step=step, t_next=t_next, t_delta=t_delta)


@ti.func
def _track(st: ti.template(), mode: ti.template(), ratio: ti.template(), split: ti.template(), m, o, d, tmax, hero,
           lam, sampler: ti.template(), L, dL, adj, T_total, dT):
    """Null-collision tracking through grid medium m with its majorant mu on the bbox-clipped part of
    o + t d, t in [0, tmax): tentative collisions at exponential steps of rate mu, and at each x
      * delta tracking (ratio = False, free flights): real scattering with probability
        P_s = sigma_t,h(x) / mu (the path's hero channel h; detached), weight sigma_s / (mu P_s), and
        the walk stops there; otherwise null scattering, weight (mu - sigma_t) / (mu (1 - P_s)).
      * ratio tracking (ratio = True, shadow rays): T *= 1 - sigma_t(x) / mu to the end of the
        segment.
    Adjoint (adj; for shadow rays the nested replay, static REPLAY, which only runs the quadrature):
    the derivative of the *marginal* weights, exp(-tau_c(t)) sigma_s,c(t) for a collision at t and
    exp(-tau_c) for a flight or shadow segment, whose ratio-tracking estimates the walk carries
    (E[w_c | t] = exp(-tau_c) / exp(-tau_h); the sampled t is detached):
        d sigma_t(x) += -G over [t0, t) (optical depth, by _optical_depth_adjoint)
        at a collision: d sigma_t += G / sigma_t, d albedo += G / albedo
    with G = dL L (flights) or dT T_total (shadow rays). Differentiating the null-collision weights
    instead (-G / (mu - sigma_t) at every null collision) is unbiased too, but its variance grows
    without bound as the majorant tightens (mu -> sigma_t).
    Returns (scattered, t, w, q): w the throughput factor (delta) or the transmittance (ratio), q the
    pdf ratios p_c / p_h of spectral MIS (delta)."""
    scattered = 0
    ts = tmax
    w = spec(1.0)
    q = spec(1.0)
    t0, t1 = med.clip_bbox(st, m, o, d, tmax)
    sig_hit = spec(0.0)
    alb_hit = spec(0.0)
    if ti.static(ratio and mode == REPLAY):
        if t1 > t0:
            _optical_depth_adjoint(st, m, o, d, t0, t1, sampler.next_1d(), -dT * T_total, lam)
    elif t1 > t0:
        mw = majorant_walk(st, m, o, d, t0, t1)
        tracking = True
        while tracking:
            t, mu = mw.next(st, m, -ti.log(1.0 - sampler.next_1d()))
            if t >= t1:
                tracking = False
            else:
                x = o + t * d
                sig, alb = med.coefficients(st, m, x, lam)
                if ti.static(ratio):
                    w *= 1.0 - sig / mu
                    if max_component(w) <= 0.0:
                        tracking = False
                else:
                    p_s = ti.min(ti.max(hom.channel(sig, hero) / mu, 0.0), 1.0)   # hero's P_s (detached)
                    if sampler.next_1d() < p_s:
                        # real scattering: psi_s = sigma_s / mu, weighted by 1 / P_s
                        w *= alb * sig / (mu * p_s)
                        q *= sig / (mu * p_s)
                        sig_hit = sig
                        alb_hit = alb
                        scattered = 1
                        ts = t
                        tracking = False
                    else:
                        # null scattering: psi_n = (mu - sigma_t) / mu, weighted by 1 / (1 - P_s)
                        sn = mu - sig
                        w *= sn / (mu * (1.0 - p_s))
                        q *= sn / (mu * (1.0 - p_s))
    if ti.static(not ratio and mode != PRIMAL):
        if adj and t1 > t0:
            g = dL * L
            t_end = t1
            if scattered == 1:
                t_end = ts
                g_sig = safe_div(g, sig_hit)
                if ti.static(split):
                    g_sig = spec(0.0)    # the in-scattering term: inscatter_adjoint
                med.coefficients_adjoint(st, m, o + ts * d, lam, g_sig, safe_div(g, alb_hit))
            side = _side_stream(sampler)
            _optical_depth_adjoint(st, m, o, d, t0, t_end, side.next_1d(), -g, lam)
    return scattered, ts, w, q


@ti.func
def _homogeneous(st: ti.template(), est: ti.template(), m):
    """Whether medium m is homogeneous — a constant when the kernel compiles one kind of medium only."""
    res = 0
    if ti.static(est.HOMOGENEOUS and est.GRID):
        res = med.is_homogeneous(st, m)
    elif ti.static(est.HOMOGENEOUS):
        res = 1
    return res


@ti.func
def free_flight(st: ti.template(), mode: ti.template(), est: ti.template(), m, o, d, tmax, hero, lam,
                sampler: ti.template(), L, dL, adj):
    """Sample a real collision on o + t d, t in [0, tmax), in medium m, with hero channel `hero`.
    Returns (scattered, t, w, q): w the throughput factor, q the pdf ratios p_c / p_hero (RGB; see
    media/homogeneous.py). Where adj (replaying; the adjoint code is compiled for modes other than
    PRIMAL), also scatters dL * L * dw/w into the medium's parameters (L: the radiance the weight
    multiplies). est: the compiled estimators (MediumVisibility.of)."""
    scattered = 0
    ts = tmax
    w = spec(1.0)
    q = spec(1.0)
    if _homogeneous(st, est, m):
        sig, alb = med.homogeneous_coefficients(st, m, lam)
        t = hom.sample_distance(sig, hero, sampler.next_1d())
        g_s = spec(0.0)
        g_a = spec(0.0)
        if t < tmax:
            scattered = 1
            ts = t
            w, q = hom.collision(sig, alb, t, hero)
            if ti.static(mode != PRIMAL):
                if adj:
                    g_s, g_a = hom.collision_grads(sig, alb, t, L, dL)
        else:
            w = hom.escape(sig, tmax, hero)
            q = w
            if ti.static(mode != PRIMAL):
                if adj:
                    g_s = hom.escape_grads(tmax, L, dL)
        if ti.static(mode != PRIMAL):
            if adj:
                med.homogeneous_coefficients_adjoint(st, m, lam, g_s, g_a)
    elif ti.static(est.GRID and est.MARCH == MARCH):
        scattered, ts, w, q = march_free_flight(st, mode, m, o, d, tmax, hero, lam, sampler, L, dL, adj)
    elif ti.static(est.GRID):
        scattered, ts, w, q = _track(st, mode, False, est.SPLIT > 0, m, o, d, tmax, hero, lam, sampler, L, dL, adj,
                                     spec(0.0), spec(0.0))
    return scattered, ts, w, q


@ti.func
def segment_transmittance(st: ti.template(), mode: ti.template(), est: ti.template(), m, o, d, s, lam,
                          sampler: ti.template(), T_total, dT):
    """Transmittance factor of medium m along o + t d, t in [0, s) (RGB). REPLAY: with the full
    shadow-ray transmittance T_total and its adjoint dT, scatter dT * dT_total/dsigma_t."""
    T = spec(1.0)
    if _homogeneous(st, est, m):
        sig, _ = med.homogeneous_coefficients(st, m, lam)
        T = hom.transmittance(sig, s)
        if ti.static(mode == REPLAY):
            med.homogeneous_coefficients_adjoint(st, m, lam, hom.escape_grads(s, T_total, dT), spec(0.0))
    elif ti.static(est.GRID and est.MARCH == MARCH):
        T = march_transmittance(st, mode, m, o, d, s, lam, sampler, T_total, dT)
    elif ti.static(est.GRID):
        hit, t_end, T, q = _track(st, mode, True, False, m, o, d, s, 0, lam, sampler, spec(0.0), spec(0.0), mode == REPLAY,
                                  T_total, dT)
    return T


@ti.func
def _null_factor(st: ti.template(), bsdf: ti.template(), mode: ti.template(), tri, t, b1, b2, inst, o, d, lam, T_total,
                 dT):
    """The null transmission w of the surface a shadow ray o + t d hits (triangle tri at barycentrics b1, b2);
    REPLAY: scatters ∂/∂π of <dT, T_total> through w, dT · T_total / w (per lane)."""
    si = make_interaction(st, tri, t, b1, b2, o, d, inst)
    b = st.shape_bsdf[si.shape]
    ctx = surface_ctx(b, si, lam)
    wi = to_local(si.ss, si.ts, si.n, -d)
    w = bsdf.null_transmission(st, ctx, wi)
    if ti.static(mode == REPLAY):
        g = spec(0.0)
        for i in ti.static(range(variants.lanes())):
            if w[i] > 0.0:
                g[i] = dT[i] * T_total[i] / w[i]
        bsdf.null_transmission_adjoint(st, ctx, wi, g)
    return w


@ti.func
def transmittance(st: ti.template(), bsdf: ti.template(), mode: ti.template(), est: ti.template(), o, d, dist,
                  medium, lam, sampler: ti.template(), T_total, dT):
    """Transmittance (RGB) of the shadow ray o + t d, t in [0, dist), that starts in `medium`:
    media are crossed (ratio tracking / analytic), null interfaces switch the medium, surfaces with a
    pass-through lobe (flag PASS: thindielectric, mask) attenuate it by their null transmission (Mitsuba's
    volpath: eval_null_transmission) and switch the medium, any other surface blocks (T = 0). REPLAY: the
    nested replay (call with a copy of the sampler state taken before the PRIMAL call, T_total its result
    and dT = d(objective)/dT), which also scatters dT T_total / w ∂w/∂π of each surface's factor w."""
    T = spec(1.0)
    ray_o = o
    remaining = dist
    m = medium
    crossings = 0
    going = True
    while going:
        tri, t, b1, b2, inst = intersect(st, ray_o, d, remaining)
        seg = remaining
        if tri >= 0:
            seg = t
        if m >= 0:
            T *= segment_transmittance(st, mode, est, m, ray_o, d, seg, lam, sampler, T_total, dT)
        if tri < 0:
            going = False
        else:
            shape = st.tri_shape[tri]
            flags = st.bsdf_flags[st.shape_bsdf[shape]]
            if (flags & (NULL | PASS)) == 0 or crossings >= MAX_CROSSINGS:
                T = spec(0.0)
                going = False
            else:
                if (flags & NULL) == 0:          # a pass-through lobe: its null transmission w
                    T *= _null_factor(st, bsdf, mode, tri, t, b1, b2, inst, ray_o, d, lam, T_total, dT)
                p = ray_o + t * d
                ng = geometric_normal(st, tri, inst, ray_o, d, t)
                m = target_medium(st, shape, d, ng, m)
                eps = st.info_f[0] * (1.0 + ti.abs(p).max())
                ray_o = p + ng * (eps if ng.dot(d) >= 0.0 else -eps)
                if remaining < BIG:
                    remaining -= t
                crossings += 1
        if max_component(T) <= 0.0:
            going = False
    return T


@ti.func
def tracked(st: ti.template(), est: ti.template(), m):
    """Whether free flights in medium m use null-collision tracking with the split in-scattering
    adjoint (a grid medium, DELTA tracking, est.SPLIT > 0) — the media inscatter_adjoint serves."""
    res = False
    if ti.static(est.GRID and est.MARCH == DELTA and est.SPLIT > 0):
        res = m >= 0 and not _homogeneous(st, est, m)
    return res


# IndirectPick: the one flight point per path at which the PRB replay estimates the indirect in-scattered
# light Ls,indirect (inscatter_adjoint), picked by weighted reservoir sampling over the path's
# candidates i with weights w_i = |c_i|_1: a candidate is kept with probability w_i / W (W: the
# running sum), so c / w * W * Ls,indirect(x) is an unbiased estimate of sum_i c_i Ls,indirect(x_i)
# (one indirect path per camera path, walked after the replay by the same inlined walk; see
# volpath.trace). x, d: the point and the flight direction; m: its medium; c: dL beta T alpha n dt
# (per channel, the quadrature weight of the point); depth_left, rr_left: max_depth and rr_depth
# of the indirect path (counted from the main path); state, inc: its random stream; P: the main path's
# Mueller product at the point (spectral_polarized: the indirect path starts from it, so that what it
# finds is the camera's S0).
IndirectPick = variants.struct(x=vec3, d=vec3, m=ti.i32, c=variants.SPECTRUM, w=float, W=float,
                               depth_left=ti.i32, rr_left=ti.i32, hero=ti.i32, lam=variants.SPECTRUM,
                               state=ti.u64, inc=ti.u64, P=mueller.MuellerLanes)


@ti.func
def no_pick():
    """An empty IndirectPick (W = 0: no candidate yet)."""
    return IndirectPick(m=-1, w=0.0, W=0.0, state=ti.u64(0), inc=ti.u64(1))


@ti.func
def indirect_stream(pick):
    """The random stream of the picked indirect path: a PCG stream of its own (not the side stream's)."""
    r = PCG32(state=pick.state, inc=pick.inc ^ ti.u64(0x2545F4914F6CDD1D))
    r.next_u32()
    return r


@ti.func
def inscatter_adjoint(st: ti.template(), bsdf: ti.template(), em: ti.template(), est: ti.template(),
                      pick: ti.template(), m, o, d, tmax, beta, sampler: ti.template(), dL, depth_left, rr_left, hero, lam, P):
    """The in-scattering term of the density derivative of one flight segment o + t d, t in
    [0, tmax), in grid medium m, estimated along the whole segment (REPLAY).

    The flight's radiance L = int T(t) sigma_s(t) Ls(t) dt + T(t1) L_end has the density derivative
    A - B: B (attenuation, -int_0^u d sigma_t) is differentiated by _track; A = int T alpha Ls
    d sigma_t dt, which the collision alone samples at one point (G / sigma_t at x_s: few samples
    per voxel, and large ones where sigma_t is small). Here: est.SPLIT stratified points t_j
    (jittered, spacing dt), T(t_j) by ratio tracking along the segment, and Ls(t_j) = Ls,direct +
    Ls,indirect: one emitter sample with its shadow ray (phase * T_shadow * Le / pdf, no MIS:
    emitter sampling alone covers the direct light; where max T(t_j) < est.RR (0: never), Russian
    roulette ends the flight's points with probability 1 - max T / est.RR, survivors scaled to
    max T = est.RR: the shadow rays of dense media's late points, which add little, are mostly
    skipped; its random number is drawn at every point, so the stream never depends on T), applied
    at once:
        d sigma_t(x_j) += dL beta T(t_j) alpha(x_j) Ls,direct(t_j) dt;
    Ls,indirect at one of the n points chosen uniformly (weight n), offered to ``pick`` (one
    indirect path per camera path, walked after the replay: volpath.trace). All random numbers
    come from a side stream: the path's are untouched. Unbiased for any est.SPLIT >= 1 (the
    quadrature, the ratio-tracking product and the Ls estimates are independent unbiased
    estimates). P: the path's Mueller product (spectral_polarized: phase functions keep the Stokes vector, so
    the direct light's S0 factor is row 0 of P's first column; the indirect path starts from P)."""
    side = _side_stream(sampler)
    s0 = s0_weight(mueller.column0(P))
    t0, t1 = med.clip_bbox(st, m, o, d, tmax)
    if t1 > t0 and t1 < BIG:
        n = est.SPLIT
        dt = (t1 - t0) / n
        jitter = side.next_1d()
        j_ind = ti.min(ti.cast(side.next_1d() * n, ti.i32), n - 1)
        T = spec(1.0)
        mw = majorant_walk(st, m, o, d, t0, t1)
        tc, mu = mw.next(st, m, -ti.log(1.0 - side.next_1d()))
        j = 0
        while j < n:
            tj = t0 + (j + jitter) * dt
            while tc < tj:                      # ratio tracking of T(t0, t_j)
                sig_c, _ = med.coefficients(st, m, o + tc * d, lam)
                T *= ti.max(1.0 - sig_c / mu, 0.0)
                tc, mu = mw.next(st, m, -ti.log(1.0 - side.next_1d()))
            tm = max_component(T)
            u_rr = side.next_1d()               # drawn at every point: the stream never depends on T
            if ti.static(est.RR > 0.0):
                if 0.0 < tm < est.RR:           # roulette: the rest of the flight adds little
                    if u_rr * est.RR < tm:
                        T *= est.RR / tm
                    else:
                        T = spec(0.0)
            if max_component(T) <= 0.0:
                j = n
            else:
                x = o + tj * d
                _, alb = med.coefficients(st, m, x, lam)
                c = dL * beta * T * alb * dt
                Ls = spec(0.0)
                ds = emitters.sample_emitter(st, em, x, side.next_2d(), lam)
                if ds.emitter >= 0 and max_component(ds.weight) > 0.0:
                    ph = phase_eval(st, m, d, ds.d)
                    if ph > 0.0:
                        dist = ds.dist
                        if dist < BIG:
                            dist = (ds.p - x).norm() * (1.0 - 1e-4)
                        Tsh = transmittance(st, bsdf, PRIMAL, est, x, ds.d, dist, m, lam, side, spec(0.0),
                                            spec(0.0))
                        Ls += ph * Tsh * ds.weight
                if max_component(Ls) > 0.0:
                    med.sigma_t_adjoint(st, m, x, lam, c * Ls * s0)
                if j == j_ind and depth_left > 1:   # Ls,indirect (needs a vertex after x): a candidate
                    ci = c * n
                    wi = ti.abs(ci).sum()
                    if wi > 0.0:
                        pick.W += wi
                        if side.next_1d() * pick.W < wi:
                            pick.x = x
                            pick.d = d
                            pick.m = m
                            pick.c = ci
                            pick.w = wi
                            pick.depth_left = depth_left
                            pick.rr_left = rr_left
                            pick.hero = hero
                            pick.lam = lam
                            pick.state = side.state
                            pick.inc = side.inc
                            if ti.static(variants.polarized()):
                                pick.P = P
                j += 1


class MediumVisibility:
    """Shadow rays through media and null interfaces (``nee``'s ``vis`` for volume integrators).
    ``MediumVisibility.of(march, homogeneous, grid, split, rr)`` is the class that also names the compiled
    free-flight / transmittance estimators: MARCH (DELTA tracking or ray MARCHing in grids), which
    kinds of media the kernel handles (a kernel for homogeneous media only carries no tracking code)
    SPLIT, the points per flight of the in-scattering adjoint (inscatter_adjoint; 0: the
    collision alone samples the in-scattering term), and RR, its roulette threshold on T."""
    _cache = {}

    @classmethod
    def of(cls, march, homogeneous=True, grid=True, split=0, rr=INSCATTER_RR):
        key = (march, bool(homogeneous), bool(grid), int(split), float(rr))
        if key not in cls._cache:
            class Vis:
                MARCH, HOMOGENEOUS, GRID, SPLIT, RR = key

                @staticmethod
                @ti.func
                def transmittance(st: ti.template(), bsdf: ti.template(), mode: ti.template(), v, s, so, d, dist,
                                  sampler: ti.template(),
                                  T_total, dT):
                    m = s.medium
                    if v.medium_event == 0:
                        m = target_medium(st, v.shape, d, v.ng, s.medium)
                    return transmittance(st, bsdf, mode, Vis, so, d, dist, m, s.lam, sampler, T_total, dT)
            cls._cache[key] = Vis
        return cls._cache[key]
