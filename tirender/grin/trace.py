"""Rays through a GRIN volume: the eikonal ODE integrated by fixed-step RK4, Snell's law at the box
faces, and the hand-written adjoint of all of it, integrated backwards by replay.

State and ODE (Mitsuba 2 §4.3, Eq. 3, written in arc length s)
    x: position (scene units), v: the optical direction, |v| = n(x) (v = n·dx/ds).
        dx/ds = v / n(x),      dv/ds = ∇n(x)
    which is Eq. 3's d²x/dt² = n∇n with dt = ds/n. A homogeneous medium gives straight lines.
    One step of length τ is classical RK4 (four stages).

Steps (event location)
    The trilinear ∇n jumps across the planes through the cell centres (field.py). An integrator that
    steps over those planes is a discontinuous function of the grid (a stage point that moves across
    a plane changes ∇n by a finite amount), and the derivative of its smooth pieces misses the jump
    ("saltation") terms of the exact ODE's sensitivity: measured, such a piecewise adjoint is
    14–22 % off finite differences of the expected loss. So the state carries its interpolation cell
    c, every stage of a step evaluates that cell's polynomial, and a step is
        τ = min(h, t_plane, t_box)
    with t_plane / t_box the first s > 0 at which the path predicted to second order,
    x + s·d + ½s²·a (d = v/|v|, a = dd/ds its curvature), reaches one of the six planes of cell c /
    a box face. The path is not exactly that parabola, so such a step lands near, not on, its plane
    (O(τ³) away): c moves to the next
    cell only once the ray has reached the plane (t_plane ≤ eps) or lies beyond it (``settle``) —
    otherwise the next, shorter step continues in the same cell (a few shrinking steps τ ≈ h, ~h²,
    ~h⁴ … reach the plane). Moving c earlier, on the straight-line prediction, puts rays that graze
    a plane on its far side with the wrong polynomial for a whole step (measured: ~2 % of rays
    jumped by 1e-3 under 1e-4 changes of n); a straight-line prediction misses paths that touch a
    plane and curve back over it within a step (they ran a whole step with the wrong polynomial: a
    jump where the touch appears). Stepping stops once the straight-line distance to the box
    exit is ≤ eps. Every τ is a continuous function of
    the state, so the exit state is a continuous, piecewise-smooth function of the grid values,
    and the adjoint of τ's dependence on (x, v) and on the grid (through a, by the implicit function
    theorem) supplies the saltation terms. ``h`` (scene units)
    is thus the longest step; cells shorten it (about one step per cell crossed when h exceeds the
    cell size).

Box faces (refraction)
    Outside the box rays travel straight in a medium of index n_out. At a face with unit normal N
    (pointing into the medium being entered) the tangential part of v is continuous (Snell's law in
    optical-direction form): v' = v_t + √(n₂² − |v_t|²)·N, v_t = v − (v·N)N. Entering, n₂ is the
    grid's n at the entry point (so the entry depends on the grid: its adjoint is included); leaving,
    n₂ = n_out. Total internal reflection (n₂² < |v_t|²) drops the ray (status DROPPED; it carries no
    light — the gradient of that discontinuity is not modelled). A field with n = n_out at the faces
    (the Luneburg lens in its bounding box) has no refraction there.

Adjoint by replay (constant memory)
    The backward pass needs each step's input state in reverse order. Nothing is stored per step:
    the forward pass keeps C_CKPT checkpoints in a local array, every K-th state, K the smallest
    power of two with N ≤ C_CKPT·K (K starts at 1 and doubles, dropping every other checkpoint,
    whenever the array fills up: the ray's own step count N sets the spacing); the backward pass
    walks the segments last to first, re-integrates each one from its checkpoint while keeping
    B_SUB sub-checkpoints (every K₂ = ⌈K / B_SUB⌉ steps), and for each step re-integrates from the
    nearest sub-checkpoint (< K₂ steps) to recover its input state, then
    runs the hand-written RK4 step adjoint (reverse mode through the four stages: ∂/∂x, ∂/∂v, ∂/∂τ
    and ∂/∂(grid values), the latter ``atomic_add``ed into the grid's fixed-point accumulator; a
    float one on software Vulkan, where integer atomics in these loops lose additions: field.py).
    Per ray that is (C_CKPT + B_SUB)·9 floats whatever the number of steps N; the cost is the forward
    N steps, N more to refill the sub-checkpoints, ≤ N·(K₂ − 1)/2 replayed steps (0 while
    N ≤ C_CKPT·B_SUB = 1024; K₂ ≤ 2N/1024 beyond) and N step adjoints (≈ 2 steps each). Recomputed states equal the
    forward ones (same code, same inputs).

Status codes: MISSED (the line does not meet the box: the ray goes on straight from its origin),
INSIDE_OK (entered, integrated, left), DROPPED (total internal reflection, or max_steps reached).
"""
import math

import numpy as np
import taichi as ti

from ..core import fixed_point as fxp
from ..core.math import vec3
from .field import (GridDesc, cell_of, flush_corners, index_eval, index_eval_adjoint, index_eval_adjoint_local,
                    index_eval_in, ivec3)

C_CKPT = 64      # checkpoints of the outer level (a local array per ray)
B_SUB = 64       # sub-checkpoints of the inner level
N_FLOOR = 1e-3   # n is clamped below by this in dx/ds = v/n (guards the division)
C2_MIN = 1e-12   # √(n₂² − |v_t|²) below this counts as total internal reflection / grazing
BIG = 1e30
MISSED, OK, DROPPED = 0, 1, 2
STATE = ti.types.matrix(C_CKPT, 9, float)   # rows (x, v, cell)
SUB = ti.types.matrix(B_SUB, 9, float)


# ----------------------------------------------------------------------------- small pieces
@ti.func
def unit(v):
    """(v/|v|, |v|); 0-safe."""
    ln = v.norm()
    return v / ti.max(ln, 1e-30), ln


@ti.func
def unit_adjoint(v, dbar):
    """v̄ of d = v/|v| for d̄."""
    d, ln = unit(v)
    return (dbar - dbar.dot(d) * d) / ti.max(ln, 1e-30)


@ti.func
def exit_distance(G, x, d):
    """(t, axis): distance along the straight line x + t·d (d unit) to the face where it leaves the
    box, and that face's axis. t ≤ 0 when x is on or beyond that face."""
    t = BIG
    ax = 0
    for k in ti.static(range(3)):
        if ti.abs(d[k]) > 1e-20:
            b = ti.select(d[k] > 0.0, G.bmax[k], G.bmin[k])
            tk = (b - x[k]) / d[k]
            if tk < t:
                t = tk
                ax = k
    return t, ax


@ti.func
def exit_distance_adjoint(G, x, d, t, ax, tbar):
    """(x̄, d̄) of t = (b − x[ax]) / d[ax] for t̄."""
    xb = vec3(0.0)
    db = vec3(0.0)
    for k in ti.static(range(3)):
        if k == ax and ti.abs(d[k]) > 1e-20:
            xb[k] = -tbar / d[k]
            db[k] = -tbar * t / d[k]
    return xb, db


@ti.func
def axis_normal(ax, d):
    """sign(d[ax])·e_ax: the normal of the face on axis ax that a ray along d crosses, pointing the
    way it travels."""
    N = vec3(0.0)
    for k in ti.static(range(3)):
        if k == ax:
            N[k] = ti.select(d[k] >= 0.0, 1.0, -1.0)
    return N


@ti.func
def clip_box(G, o, d):
    """(t0, t1, axis of t0) of the line o + t·d inside the box (t1 < t0: it misses)."""
    t0 = -BIG
    t1 = BIG
    ax = 0
    for k in ti.static(range(3)):
        if ti.abs(d[k]) > 1e-20:
            inv = 1.0 / d[k]
            ta = (G.bmin[k] - o[k]) * inv
            tb = (G.bmax[k] - o[k]) * inv
            tn = ti.min(ta, tb)
            if tn > t0:
                t0 = tn
                ax = k
            t1 = ti.min(t1, ti.max(ta, tb))
        elif o[k] < G.bmin[k] or o[k] > G.bmax[k]:
            t1 = -BIG
    return t0, t1, ax


@ti.func
def refract_optical(v, N, n2):
    """(v', ok): Snell's law for the optical direction v across a face with unit normal N (pointing
    into the new medium of index n2): v' = v_t + √(n₂² − |v_t|²)·N; ok False on total internal
    reflection."""
    vt = v - v.dot(N) * N
    c2 = n2 * n2 - vt.dot(vt)
    ok = c2 > C2_MIN
    return vt + ti.sqrt(ti.max(c2, C2_MIN)) * N, ok


@ti.func
def refract_optical_adjoint(v, N, n2, vob):
    """(v̄, n̄₂) of :func:`refract_optical` for the output adjoint v̄'."""
    vt = v - v.dot(N) * N
    c = ti.sqrt(ti.max(n2 * n2 - vt.dot(vt), C2_MIN))
    cb = vob.dot(N)
    vtb = vob - (cb / c) * vt
    return vtb - vtb.dot(N) * N, cb * n2 / c


# ----------------------------------------------------------------------------- RK4
@ti.func
def _deriv(vals: ti.template(), G, x, v, c):
    """(dx/ds, dv/ds, n) = (v / n(x), ∇n(x), n(x)) from the polynomial of cell c."""
    n, g = index_eval_in(vals, G, x, c)
    return v / ti.max(n, N_FLOOR), g, n


@ti.func
def _deriv_adjoint(vals: ti.template(), G, x, v, c, n, kxb, kvb):
    """(x̄, v̄, corner gradients) of (kx, kv) = (v / n(x), ∇n(x)) for (k̄x, k̄v)."""
    nn = ti.max(n, N_FLOOR)
    nb = 0.0
    if n > N_FLOOR:
        nb = -kxb.dot(v) / (nn * nn)
    xb, cg = index_eval_adjoint_local(vals, G, x, c, nb, kvb)
    return xb, kxb / nn, cg


@ti.func
def rk4_step(vals: ti.template(), G, x, v, c, tau):
    """One classical RK4 step of length τ (scene units) of dx/ds = v/n, dv/ds = ∇n in the
    polynomial of cell c → (x', v')."""
    n1, g1 = index_eval_in(vals, G, x, c)
    return rk4_step_from(vals, G, x, v, c, tau, n1, g1)


@ti.func
def rk4_step_from(vals: ti.template(), G, x, v, c, tau, n1, g1):
    """:func:`rk4_step` given (n, ∇n) at x."""
    h2 = 0.5 * tau
    k1x = v / ti.max(n1, N_FLOOR)
    k1v = g1
    k2x, k2v, _n2 = _deriv(vals, G, x + h2 * k1x, v + h2 * k1v, c)
    k3x, k3v, _n3 = _deriv(vals, G, x + h2 * k2x, v + h2 * k2v, c)
    k4x, k4v, _n4 = _deriv(vals, G, x + tau * k3x, v + tau * k3v, c)
    w = tau / 6.0
    return x + w * (k1x + 2.0 * k2x + 2.0 * k3x + k4x), v + w * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)


@ti.func
def rk4_step_adjoint(vals: ti.template(), G, x, v, c, tau, xb1, vb1):
    """Reverse mode through one RK4 step: the output adjoints (x̄', v̄') → (x̄, v̄, τ̄, cg), cg (vec8)
    the gradient of the eight corner values of cell c (the four stages' n and ∇n lookups; scatter
    it with field.flush_corners). The stages are recomputed from (x, v) (no storage)."""
    n1, g1 = index_eval_in(vals, G, x, c)
    xb, vb, taub, cg, nb1, gb1 = rk4_step_adjoint_from(vals, G, x, v, c, tau, n1, g1, xb1, vb1)
    xs, cgs = index_eval_adjoint_local(vals, G, x, c, nb1, gb1)
    return xb + xs, vb, taub, cg + cgs


@ti.func
def rk4_step_adjoint_from(vals: ti.template(), G, x, v, c, tau, n1, g1, xb1, vb1):
    """:func:`rk4_step_adjoint` given (n, ∇n) at x, leaving out stage 1's lookup adjoint: returns
    (x̄, v̄, τ̄, cg, n̄₁, ḡ₁) where (n̄₁, ḡ₁) are the adjoints of n(x), ∇n(x) still to be scattered
    (so the caller can merge other lookups at x into one)."""
    h2 = 0.5 * tau
    w = tau / 6.0
    k1x = v / ti.max(n1, N_FLOOR)
    k1v = g1
    x2, v2 = x + h2 * k1x, v + h2 * k1v
    k2x, k2v, n2 = _deriv(vals, G, x2, v2, c)
    x3, v3 = x + h2 * k2x, v + h2 * k2v
    k3x, k3v, n3 = _deriv(vals, G, x3, v3, c)
    x4, v4 = x + tau * k3x, v + tau * k3v
    k4x, k4v, n4 = _deriv(vals, G, x4, v4, c)
    taub = (xb1.dot(k1x + 2.0 * k2x + 2.0 * k3x + k4x) + vb1.dot(k1v + 2.0 * k2v + 2.0 * k3v + k4v)) / 6.0
    # stage 4: (x4, v4) = (x, v) + τ·k3
    x4b, v4b, cg = _deriv_adjoint(vals, G, x4, v4, c, n4, w * xb1, w * vb1)
    k3xb = 2.0 * w * xb1 + tau * x4b
    k3vb = 2.0 * w * vb1 + tau * v4b
    taub += x4b.dot(k3x) + v4b.dot(k3v)
    # stage 3: (x3, v3) = (x, v) + τ/2·k2
    x3b, v3b, cg3 = _deriv_adjoint(vals, G, x3, v3, c, n3, k3xb, k3vb)
    k2xb = 2.0 * w * xb1 + h2 * x3b
    k2vb = 2.0 * w * vb1 + h2 * v3b
    taub += 0.5 * (x3b.dot(k2x) + v3b.dot(k2v))
    # stage 2: (x2, v2) = (x, v) + τ/2·k1
    x2b, v2b, cg2 = _deriv_adjoint(vals, G, x2, v2, c, n2, k2xb, k2vb)
    k1xb = w * xb1 + h2 * x2b
    k1vb = w * vb1 + h2 * v2b
    taub += 0.5 * (x2b.dot(k1x) + v2b.dot(k1v))
    # stage 1 at (x, v): kx = v/n(x), kv = ∇n(x); the lookup's adjoint is left to the caller
    nn = ti.max(n1, N_FLOOR)
    nb1 = 0.0
    if n1 > N_FLOOR:
        nb1 = -k1xb.dot(v) / (nn * nn)
    return xb1 + x4b + x3b + x2b, vb1 + v4b + v3b + v2b + k1xb / nn, taub, cg + cg3 + cg2, nb1, k1vb


# ----------------------------------------------------------------------------- events and steps
@ti.func
def first_root(delta, dk, ak, out):
    """First s > 0 at which the path x_k(s) − b = delta + s·dk + ½s²·ak crosses the plane going out
    of the cell or box (its velocity dk + s·ak has the sign ``out``: +1 through an upper plane,
    −1 through a lower one); BIG when there is none. Crossings inwards are ignored (a ray within
    eps of a plane it has just crossed, or re-entering). Stable for ak → 0."""
    r = BIG
    A = 0.5 * ak
    D = dk * dk - 4.0 * A * delta
    if D >= 0.0:
        sq = ti.sqrt(D)
        q = -0.5 * (dk + ti.select(dk >= 0.0, sq, -sq))
        if q != 0.0:
            r1 = delta / q
            if r1 > 0.0 and (dk + r1 * ak) * out > 0.0:
                r = r1
            if A != 0.0:
                r2 = q / A
                if r2 > 0.0 and r2 < r and (dk + r2 * ak) * out > 0.0:
                    r = r2
    return r


@ti.func
def curvature(g, v):
    """a = d(v/|v|)/ds = (∇n − (∇n·d)d)/|v| (1/scene unit) for g = ∇n at the point: the same
    expression as the adjoint of normalisation, unit_adjoint(v, g)."""
    return unit_adjoint(v, g)


@ti.func
def curvature_adjoint(g, v, ab):
    """(ḡ, v̄) of :func:`curvature` for ā."""
    d, ln = unit(v)
    L = ti.max(ln, 1e-30)
    gd = g.dot(d)
    a = (g - gd * d) / L
    gb = (ab - ab.dot(d) * d) / L                  # ∂a/∂g
    db = -(ab.dot(d) * g + gd * ab) / L            # ∂a/∂d
    lb = -ab.dot(a) / L                            # ∂a/∂|v|
    return gb, unit_adjoint(v, db) + lb * d


FACE, BOX, REGULAR = 0, 1, 2


@ti.func
def settle(G, x, d, c, eps):
    """The cell a step from x along d (unit) starts in: on each axis, c moves across a plane of its
    cell that x has reached while moving towards it (straight-line distance ≤ eps) or that x lies
    beyond (by more than eps, whatever the direction). A cell changes only there, so a step that
    lands short of its plane stays in its cell and takes a shorter step next."""
    s = ti.cast(G.res, float) / (G.bmax - G.bmin)
    cc = c
    for k in ti.static(range(3)):
        up = G.bmin[k] + (ti.cast(c[k], float) + 1.5) / s[k]     # plane p_k = c_k + 1
        dn = G.bmin[k] + (ti.cast(c[k], float) + 0.5) / s[k]     # plane p_k = c_k
        if c[k] + 1 <= G.res[k] - 1 and (x[k] > up + eps or (d[k] > 0.0 and up - x[k] <= eps * d[k])):
            cc[k] = c[k] + 1
        elif c[k] >= 0 and (x[k] < dn - eps or (d[k] < 0.0 and x[k] - dn <= -eps * d[k])):
            cc[k] = c[k] - 1
    return cc


@ti.func
def next_step(G, x, d, a, c, h):
    """(τ, kind, axis, plane): the next step from x along d (unit) with path curvature a in cell c:
    τ = min(h, the first s > 0 at which the path x(s) ≈ x + s·d + ½s²·a reaches one of the cell's
    six planes or the box's faces going out) — the curvature term stops paths that curve back over
    a plane behind them; kind FACE / BOX (τ ends on ``plane`` of ``axis``) or REGULAR (τ = h)."""
    s = ti.cast(G.res, float) / (G.bmax - G.bmin)
    tau = h
    kind = REGULAR
    ax = 0
    pl = 0.0
    for k in ti.static(range(3)):
        for plane in ti.static((FACE, BOX)):
            for side in ti.static(range(2)):
                ok = True
                b = 0.0
                if ti.static(plane == FACE):
                    i = c[k] + side                  # the plane p_k = c_k (below) or c_k + 1 (above)
                    ok = 0 <= i and i <= G.res[k] - 1
                    b = G.bmin[k] + (ti.cast(i, float) + 0.5) / s[k]
                else:
                    b = G.bmin[k] if side == 0 else G.bmax[k]
                if ok:
                    t = first_root(x[k] - b, d[k], a[k], ti.select(side == 1, 1.0, -1.0))
                    if t < tau:
                        tau = t
                        kind = plane
                        ax = k
                        pl = b
    return tau, kind, ax, pl


@ti.func
def advance(vals: ti.template(), G, x, v, c, h, eps):
    """One step of the march from state (x, v, c) → (x', v', c'): c' is the cell the step was
    taken in (see :func:`settle`)."""
    d, _ln = unit(v)
    cc = settle(G, x, d, c, eps)
    n0, g0 = index_eval_in(vals, G, x, cc)
    tau, _kind, _ax, _pl = next_step(G, x, d, curvature(g0, v), cc, h)
    y, u = rk4_step_from(vals, G, x, v, cc, tau, n0, g0)
    return y, u, cc


@ti.func
def advance_adjoint(vals: ti.template(), G, x, v, c, h, eps, xb1, vb1, acc: ti.template(), mx: ti.template(),
                    scale):
    """Adjoint of :func:`advance` → (x̄, v̄): the RK4 step's, plus τ's dependence on (x, v) and the
    grid when the step ends on a plane or a box face: τ solves F = x_k − b + τ·d_k + ½τ²·a_k = 0,
    so ∂τ = −(∂x_k + τ·∂d_k + ½τ²·∂a_k) / (d_k + τ·a_k)."""
    d, _ln = unit(v)
    cc = settle(G, x, d, c, eps)
    n0, g0 = index_eval_in(vals, G, x, cc)
    a = curvature(g0, v)
    tau, kind, ax, pl = next_step(G, x, d, a, cc, h)
    xb, vb, taub, cg, nb0, gb0 = rk4_step_adjoint_from(vals, G, x, v, cc, tau, n0, g0, xb1, vb1)
    if kind != REGULAR:
        ft = 0.0
        for k in ti.static(range(3)):
            if k == ax:
                ft = d[k] + tau * a[k]
        if ti.abs(ft) > 1e-12:
            w = -taub / ft          # τ̄·∂τ/∂F_inputs
            xa = vec3(0.0)
            da = vec3(0.0)
            ab = vec3(0.0)
            for k in ti.static(range(3)):
                if k == ax:
                    xa[k] = w
                    da[k] = w * tau
                    ab[k] = w * 0.5 * tau * tau
            gc, vc = curvature_adjoint(g0, v, ab)
            gb0 += gc
            xb += xa
            vb += unit_adjoint(v, da) + vc
    xs, cgs = index_eval_adjoint_local(vals, G, x, cc, nb0, gb0)   # every lookup at x, once
    flush_corners(G, cc, cg + cgs, acc, mx, scale)                 # one scatter of 8 values per step
    return xb + xs, vb


# ----------------------------------------------------------------------------- entering and leaving
@ti.func
def enter(vals: ti.template(), G, o, d):
    """Start a ray (origin o, unit direction d): (status, x0, v0, N). Outside the box it travels
    straight to the entry point and refracts (N: the entry face's normal into the box); from an
    origin inside, v0 = n(o)·d (N = 0). status MISSED when the line misses the box."""
    t0, t1, ax = clip_box(G, o, d)
    status = MISSED
    x0 = o
    v0 = d * G.n_out
    N = vec3(0.0)
    if t1 > ti.max(t0, 0.0):
        if t0 <= 0.0:
            n0, _g = index_eval(vals, G, o)
            v0 = ti.max(n0, N_FLOOR) * d
            status = OK
        else:
            x0 = o + t0 * d
            n0, _g = index_eval(vals, G, x0)
            N = axis_normal(ax, d)
            vr, ok = refract_optical(d * G.n_out, N, ti.max(n0, N_FLOOR))
            v0 = vr
            status = ti.select(ok, OK, DROPPED)
    return status, x0, v0, N


@ti.func
def enter_adjoint(vals: ti.template(), G, o, d, x0, N, v0b, acc: ti.template(), mx: ti.template(), scale):
    """Grid gradient of the start's n(x0) for v̄0 (the origin and direction are constants)."""
    n0, _g = index_eval(vals, G, x0)
    nb = 0.0
    if N.norm_sqr() == 0.0:
        nb = v0b.dot(d)
    else:
        _vb, nr = refract_optical_adjoint(d * G.n_out, N, ti.max(n0, N_FLOOR), v0b)
        nb = nr
    if n0 <= N_FLOOR:
        nb = 0.0
    index_eval_adjoint(vals, G, x0, nb, vec3(0.0), acc, mx, scale)


@ti.func
def leave(G, x, v):
    """(x_f, d_out, ok): the exit point on the face (x projected along v/|v| onto it) and the unit
    direction after refraction into n_out; ok False on total internal reflection."""
    d, _ln = unit(v)
    t, ax = exit_distance(G, x, d)
    vo, ok = refract_optical(v, axis_normal(ax, d), G.n_out)
    return x + t * d, vo / G.n_out, ok


@ti.func
def leave_adjoint(G, x, v, xfb, dob):
    """(x̄, v̄) of :func:`leave` for the adjoints of the exit point and the outgoing direction."""
    d, _ln = unit(v)
    t, ax = exit_distance(G, x, d)
    vb, _nb = refract_optical_adjoint(v, axis_normal(ax, d), G.n_out, dob / G.n_out)
    db = t * xfb
    xa, da = exit_distance_adjoint(G, x, d, t, ax, xfb.dot(d))
    return xfb + xa, vb + unit_adjoint(v, db + da)


# ----------------------------------------------------------------------------- whole rays
@ti.func
def _put(m: ti.template(), j, x, v, c):
    for k in ti.static(range(3)):
        m[j, k] = x[k]
        m[j, 3 + k] = v[k]
        m[j, 6 + k] = ti.cast(c[k], float)


@ti.func
def _get(m: ti.template(), j):
    return (vec3(m[j, 0], m[j, 1], m[j, 2]), vec3(m[j, 3], m[j, 4], m[j, 5]),
            ivec3(ti.cast(m[j, 6], ti.i32), ti.cast(m[j, 7], ti.i32), ti.cast(m[j, 8], ti.i32)))


@ti.func
def box_distance(G, x, v):
    """Straight-line distance from x along v/|v| to the box exit."""
    d, _ln = unit(v)
    t, _ax = exit_distance(G, x, d)
    return t


@ti.func
def march(vals: ti.template(), G, x, v, h, max_steps, eps, keep: ti.template()):
    """Integrate from (x, v) until the exit face → (x_N, v_N, N steps, reached the face, checkpoints,
    K). With ``keep`` (compile time; the backward pass's forward march), every K-th state (x, v,
    cell) goes into a C_CKPT × 9 local array, K the smallest power of two with steps ≤ C_CKPT·K: K
    starts at 1 and doubles (every other checkpoint dropped) whenever the array is full, so the
    spacing follows the ray's own step count; without, the checkpoints are a 1 × 9 placeholder."""
    ck = ti.Matrix.zero(float, ti.static(C_CKPT if keep else 1), 9)
    K = 1
    y = x
    u = v
    c = cell_of(G, x)
    k = 0
    done = False
    while k < max_steps:
        if box_distance(G, y, u) <= eps:
            done = True
            break
        if ti.static(keep):
            if k == C_CKPT * K:                  # full: keep the even checkpoints, double the spacing
                for j in range(C_CKPT // 2):
                    for q in ti.static(range(9)):
                        ck[j, q] = ck[2 * j, q]
                K *= 2
            if k % K == 0:
                _put(ck, k // K, y, u, c)
        y, u, c = advance(vals, G, y, u, c, h, eps)
        k += 1
    if not done:
        done = box_distance(G, y, u) <= eps
    return y, u, k, done, ck, K


@ti.func
def march_adjoint(vals: ti.template(), G, ck, K, n_steps, h, eps, xb, vb, acc: ti.template(), mx: ti.template(),
                  scale):
    """Backward pass over the n_steps steps of a march by replay from the checkpoints ck (every K-th
    state; see the module doc): the adjoint (x̄_N, v̄_N) of the end state → (x̄_0, v̄_0) of the start,
    the grid gradient of every step scattered into acc."""
    K2 = (K + B_SUB - 1) // B_SUB
    n_seg = (n_steps + K - 1) // K
    sub = SUB(0.0)
    xb_ = xb
    vb_ = vb
    for sj in range(n_seg):
        seg = n_seg - 1 - sj
        start = seg * K
        end = ti.min(start + K, n_steps)
        x, v, c = _get(ck, seg)
        for j in range(start, end):            # refill the sub-checkpoints of this segment
            if (j - start) % K2 == 0:
                _put(sub, (j - start) // K2, x, v, c)
            if j + 1 < end:
                x, v, c = advance(vals, G, x, v, c, h, eps)
        for jj in range(end - start):          # its steps, last to first
            j = end - 1 - jj
            b = (j - start) // K2
            y, u, cc = _get(sub, b)
            for _m in range(start + b * K2, j):  # < K2 replayed steps
                y, u, cc = advance(vals, G, y, u, cc, h, eps)
            xb_, vb_ = advance_adjoint(vals, G, y, u, cc, h, eps, xb_, vb_, acc, mx, scale)
    return xb_, vb_


@ti.func
def trace_ray(vals: ti.template(), G, o, d, h, max_steps, eps):
    """Forward transport of one ray (origin o, unit direction d): (status, x_f, d_out, steps).
    MISSED: (o, d) unchanged; OK: the exit point on the box face and the refracted unit direction."""
    status, x0, v0, _N = enter(vals, G, o, d)
    xf = o
    dout = d
    k = 0
    if status == OK:
        x, v, kk, done, _ck, _K = march(vals, G, x0, v0, h, max_steps, eps, False)
        k = kk
        xo, do, ok = leave(G, x, v)
        xf = xo
        dout = do
        status = ti.select(done and ok, OK, DROPPED)
    return status, xf, dout, k


@ti.dataclass
class RayRecord:
    """What the backward pass of one ray needs from its forward pass (besides the checkpoints)."""
    status: ti.i32
    steps: ti.i32
    K: ti.i32    # checkpoint spacing
    x0: vec3
    N: vec3
    x: vec3      # end of the march (before the face projection)
    v: vec3
    xf: vec3     # exit point on the face
    dout: vec3   # direction after the exit refraction


@ti.func
def trace_ray_ckpt(vals: ti.template(), G, o, d, h, max_steps, eps):
    """:func:`trace_ray` keeping what :func:`trace_ray_adjoint` needs → (RayRecord, checkpoints)."""
    status, x0, v0, N = enter(vals, G, o, d)
    rec = RayRecord(status=status, steps=0, K=1, x0=x0, N=N, x=o, v=d, xf=o, dout=d)
    ck = STATE(0.0)
    if status == OK:
        x, v, k, done, cks, K = march(vals, G, x0, v0, h, max_steps, eps, True)
        ck = cks
        rec.K = K
        xo, do, ok = leave(G, x, v)
        rec.steps = k
        rec.x = x
        rec.v = v
        rec.xf = xo
        rec.dout = do
        rec.status = ti.select(done and ok, OK, DROPPED)
    return rec, ck


@ti.func
def trace_ray_adjoint(vals: ti.template(), G, o, d, rec, ck, h, max_steps, eps, xfb, dob, acc: ti.template(),
                      mx: ti.template(), scale):
    """Backward pass of a ray traced by :func:`trace_ray_ckpt`, for the adjoints of its exit point
    and outgoing direction: grid gradients scattered into acc. Returns (x̄0, v̄0), the adjoint of
    the state where the march started (inside the box). Only OK rays have a gradient."""
    x0b = vec3(0.0)
    v0b = vec3(0.0)
    if rec.status == OK:
        xb, vb = leave_adjoint(G, rec.x, rec.v, xfb, dob)
        x0b, v0b = march_adjoint(vals, G, ck, rec.K, rec.steps, h, eps, xb, vb, acc, mx, scale)
        enter_adjoint(vals, G, o, d, rec.x0, rec.N, v0b, acc, mx, scale)
    return x0b, v0b


# ----------------------------------------------------------------------------- kernels (tests, tools)
@ti.kernel
def _k_step(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float, s: ti.types.ndarray(),
            h: ti.types.ndarray(), eps: float, out: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    for i in range(s.shape[0]):
        x0 = vec3(s[i, 0], s[i, 1], s[i, 2])
        x, v, _c = advance(vals, G, x0, vec3(s[i, 3], s[i, 4], s[i, 5]), cell_of(G, x0), h[i], eps)
        for c in ti.static(range(3)):
            out[i, c] = x[c]
            out[i, 3 + c] = v[c]


@ti.kernel
def _k_step_adjoint(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float,
                    s: ti.types.ndarray(), h: ti.types.ndarray(), eps: float, adj: ti.types.ndarray(),
                    acc: ti.types.ndarray(), mx: ti.types.ndarray(), scale: float, out: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    for i in range(s.shape[0]):
        x0 = vec3(s[i, 0], s[i, 1], s[i, 2])
        xb, vb = advance_adjoint(vals, G, x0, vec3(s[i, 3], s[i, 4], s[i, 5]), cell_of(G, x0), h[i], eps,
                                 vec3(adj[i, 0], adj[i, 1], adj[i, 2]), vec3(adj[i, 3], adj[i, 4], adj[i, 5]),
                                 acc, mx, scale)
        for c in ti.static(range(3)):
            out[i, c] = xb[c]
            out[i, 3 + c] = vb[c]


@ti.kernel
def _k_trace(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float, o: ti.types.ndarray(),
             d: ti.types.ndarray(), h: float, max_steps: ti.i32, eps: float, out: ti.types.ndarray(),
             info: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    for i in range(o.shape[0]):
        status, xf, dout, k = trace_ray(vals, G, vec3(o[i, 0], o[i, 1], o[i, 2]), vec3(d[i, 0], d[i, 1], d[i, 2]),
                                        h, max_steps, eps)
        for c in ti.static(range(3)):
            out[i, c] = xf[c]
            out[i, 3 + c] = dout[c]
        info[i, 0] = status
        info[i, 1] = k


@ti.kernel
def _k_trace_adjoint(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float,
                     o: ti.types.ndarray(), d: ti.types.ndarray(), h: float, max_steps: ti.i32, eps: float,
                     adj: ti.types.ndarray(), acc: ti.types.ndarray(), mx: ti.types.ndarray(), scale: float,
                     out: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    for i in range(o.shape[0]):
        oi = vec3(o[i, 0], o[i, 1], o[i, 2])
        di = vec3(d[i, 0], d[i, 1], d[i, 2])
        rec, ck = trace_ray_ckpt(vals, G, oi, di, h, max_steps, eps)
        x0b, v0b = trace_ray_adjoint(vals, G, oi, di, rec, ck, h, max_steps, eps, vec3(adj[i, 0], adj[i, 1], adj[i, 2]),
                                     vec3(adj[i, 3], adj[i, 4], adj[i, 5]), acc, mx, scale)
        for c in ti.static(range(3)):
            out[i, c] = x0b[c]
            out[i, 3 + c] = v0b[c]


# ----------------------------------------------------------------------------- host side
def default_max_steps(grid, step):
    """Enough steps for a path of 4 box diagonals (curved rays) with a step per h and per cell
    plane crossed, plus the tail."""
    diag = float(np.linalg.norm(grid.bmax - grid.bmin))
    planes = float(np.sum(np.array(grid.shape[::-1]) / (grid.bmax - grid.bmin)))
    return int(math.ceil(4.0 * diag * (1.0 / float(step) + planes))) + 16


def default_eps(grid):
    """Exit tolerance (scene units): the tail steps stop this close to the face."""
    from ..backend import np_float
    diag = float(np.linalg.norm(grid.bmax - grid.bmin))
    return diag * (1e-10 if np_float() == np.float64 else 1e-5)


def _rays(grid, o, d):
    o = np.ascontiguousarray(np.atleast_2d(o), grid.dtype)
    d = np.broadcast_to(np.atleast_2d(np.asarray(d, np.float64)), o.shape)
    return o, np.ascontiguousarray(d / np.linalg.norm(d, axis=1, keepdims=True), grid.dtype)


def trace(grid, o, d, step, max_steps=None, eps=None):
    """Trace rays (origins o (N, 3), directions d (N, 3) or (3,)) through the grid's box: a dict of
    ``x`` (N, 3) exit points on the box face, ``d`` (N, 3) outgoing unit directions, ``status`` (N,)
    (MISSED / OK / DROPPED) and ``steps`` (N,) RK4 steps taken."""
    o, d = _rays(grid, o, d)
    out = np.zeros((len(o), 6), grid.dtype)
    info = np.zeros((len(o), 2), np.int32)
    _k_trace(*grid.args(), o, d, float(step), int(max_steps or default_max_steps(grid, step)),
             float(default_eps(grid) if eps is None else eps), out, info)
    return {"x": out[:, :3].astype(np.float64), "d": out[:, 3:].astype(np.float64), "status": info[:, 0],
            "steps": info[:, 1]}


def accumulate(grid, launch, adds):
    """Run ``launch(scale)`` (a kernel adding fixed-point gradients into grid.acc) with the canonical
    scale of what it adds: launched with the last scale as a guess and again (from zero) when the
    recorded maximum asks for another one, so the result is a function of the launch's own values
    (tirender/core/fixed_point.py). ``adds``: a bound on the adds into one value. Where the grid
    accumulates in float (``grid.float_acc``: software Vulkan, see field.py) there is no scale: one
    launch, and 1.0 is returned."""
    if getattr(grid, "float_acc", False):
        grid.acc.fill(0)
        grid.slots.fill(0)
        launch(1.0)
        grid.grad_scale = 1.0
        return 1.0
    scale = getattr(grid, "_scale_guess", None) or fxp.scale_for(1.0, adds)
    for _ in range(4):
        grid.acc.fill(0)
        grid.slots.fill(0)
        launch(scale)
        want = fxp.scale_for(grid.recorded_max(), adds)
        if want == scale:
            break
        scale = want
    grid._scale_guess = scale
    grid.grad_scale = scale
    return scale


def trace_adjoint(grid, o, d, xbar, dbar, step, max_steps=None, eps=None):
    """Adjoint of :func:`trace`: grid.grad_numpy() becomes Σ_i x̄_i·∂x_i/∂grid + d̄_i·∂d_i/∂grid (OK rays).
    Returns (N, 6): the adjoint (x̄0, v̄0) of each ray's in-box start state."""
    o, d = _rays(grid, o, d)
    adj = np.ascontiguousarray(np.concatenate([np.atleast_2d(xbar), np.atleast_2d(dbar)], 1), grid.dtype)
    out = np.zeros((len(o), 6), grid.dtype)
    ms = int(max_steps or default_max_steps(grid, step))
    ep = float(default_eps(grid) if eps is None else eps)
    accumulate(grid, lambda s: _k_trace_adjoint(*grid.args(), o, d, float(step), ms, ep, adj, grid.acc, grid.slots,
                                                s, out), len(o) * (ms + 2) * 33)
    return out.astype(np.float64)


def step_states(grid, s, h):
    """One march step of states s (N, 6) = (x, v) (in the cell that holds x) → (N, 6)."""
    s = np.ascontiguousarray(np.atleast_2d(s), grid.dtype)
    out = np.zeros_like(s)
    _k_step(*grid.args(), s, np.ascontiguousarray(np.broadcast_to(h, len(s)), grid.dtype), default_eps(grid), out)
    return out.astype(np.float64)


def step_states_adjoint(grid, s, h, adj):
    """Adjoint of :func:`step_states` for output adjoints adj (N, 6): grid.grad_numpy() and (N, 6) input
    adjoints."""
    s = np.ascontiguousarray(np.atleast_2d(s), grid.dtype)
    adj = np.ascontiguousarray(np.atleast_2d(adj), grid.dtype)
    hh = np.ascontiguousarray(np.broadcast_to(h, len(s)), grid.dtype)
    out = np.zeros_like(s)
    accumulate(grid, lambda sc: _k_step_adjoint(*grid.args(), s, hh, default_eps(grid), adj, grid.acc, grid.slots, sc,
                                                out),
               len(s) * 33)
    return out.astype(np.float64)
