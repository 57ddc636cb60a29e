"""Emission–absorption ray marching of a :class:`RadianceField` and its path-replay adjoint.

Forward (one thread per ray): intersect the field's box, march points tᵢ = t_near + (i + j)·δ
(j ∈ [0,1) the ray's jitter) while tᵢ < t_far, and accumulate

    L = Σᵢ Tᵢ αᵢ cᵢ + T_end · background,   αᵢ = 1 − exp(−σᵢ δ),   Tᵢ₊₁ = Tᵢ (1 − αᵢ),

stopping early once T < t_min. The number of points marched is recorded per ray (one int).

Backward (path replay, Vicini et al. 2021, as derived in the seed): march the *same* points
again with L ← L_forward (the *remaining* radiance) and T ← 1; at every point

    ∂ℒ/∂cᵢ += δL · Tᵢ αᵢ,       ∂ℒ/∂σᵢ += δL · δ · (Tᵢ cᵢ − L_remaining),

then L ← L − Tᵢ αᵢ cᵢ, T ← T (1 − αᵢ). Both are chained through the activations, the SH basis
and the trilinear weights and scattered with ``ti.atomic_add`` into ``field.grad``.
No per-sample storage: memory is O(1) per ray.
"""
import numpy as np
import taichi as ti

from .. import backend
from .field import (DENSITY_ACTIVATIONS, _corner, color_code, flush_voxel, np_float, query_adjoint, query_cell,
                    sh_basis, trilinear_setup)

LOSSES = {"l2": 0, "l1": 1}
EXPAND_MAX_BYTES = 1 << 30     # "auto": private gradient copies on CPUs only while they fit in this ...
EXPAND_POINTS_PER_PARAM = 20  # ... and once the batch marches ≥ n_params / 20 points


def thread_lanes():
    """True on Taichi's CPU backends, where the lane modes work: "expand" (private gradient copies
    indexed by ``ti.global_thread_idx()``, the CPU worker running the ray) and "ordered" (P = CPU
    workers, each replaying its own fixed share of the rays). Elsewhere Vulkan has no thread index, a
    CUDA thread index is no worker number, and P long serial loops would idle a GPU (and overrun
    lavapipe's 65535-iteration loop limit): the kernels scatter with atomic adds instead, chosen at
    compile time with ``ti.static``, so the CPU kernels are unchanged."""
    return ti.lang.impl.current_cfg().arch in (ti.x64, ti.arm64)


def _scatter_mode(mode):
    """The mode actually run: the lane modes ("expand", "ordered") on CPU backends only, else "atomic"."""
    return "atomic" if mode in ("expand", "ordered") and not thread_lanes() else mode


@ti.func
def ray_box(o, d, bmin, bmax):
    """Slab test: (t_near ≥ 0, t_far); t_near ≥ t_far when the ray misses (divisions guarded)."""
    t0 = 0.0
    t1 = 1e30
    for k in ti.static(range(3)):
        dk = d[k]
        if ti.abs(dk) < 1e-12:
            if o[k] < bmin[k] or o[k] > bmax[k]:
                t0 = 1e30
                t1 = -1e30
        else:
            inv = 1.0 / dk
            ta = (bmin[k] - o[k]) * inv
            tb = (bmax[k] - o[k]) * inv
            t0 = ti.max(t0, ti.min(ta, tb))
            t1 = ti.min(t1, ti.max(ta, tb))
    return t0, t1


@ti.func
def _vec3(a: ti.template(), i):
    return ti.Vector([a[i, 0], a[i, 1], a[i, 2]], dt=float)


@ti.func
def march_forward(x: ti.template(), o, d, j, bmin, bmax, R, delta, t_min, bg,
                  C: ti.template(), degree: ti.template(), dact: ti.template(), cact: ti.template()):
    """L (vec3) and number of points marched for one ray (o, unit d, jitter j ∈ [0,1))."""
    t_near, t_far = ray_box(o, d, bmin, bmax)
    Y = sh_basis(d, degree)
    L = ti.Vector([0.0, 0.0, 0.0], dt=float)
    T = 1.0
    n = 0
    if t_near < t_far:
        while True:
            t = t_near + (n + j) * delta
            if t >= t_far:
                break
            i0, f = trilinear_setup(o + t * d, bmin, bmax, R)
            sigma, c, dsig, dc = query_cell(x, i0, f, Y, R, degree, dact, cact)
            alpha = 1.0 - ti.exp(-sigma * delta)
            L += T * alpha * c
            T = T * (1.0 - alpha)
            n += 1
            if T < t_min:
                break
    L += T * bg
    return L, n


@ti.func
def _corner_offset(k):
    return ti.Vector([k & 1, (k >> 1) & 1, (k >> 2) & 1])


@ti.func
def _move_cell(g: ti.template(), acc, cell, i0, Y, R, degree: ti.template(), expand: ti.template(), off):
    """The ray entered cell i0: flush the coalesced adjoints of cell's corners that are not corners of
    i0, carry over the shared ones. acc: 8×4 (per corner Σw·∂ℒ/∂s, Σw·∂ℒ/∂pre)."""
    new = ti.Matrix.zero(float, 8, 4)
    for k in range(8):
        v = cell + _corner_offset(k)           # old corner voxel
        r = v - i0                             # its offset in the new cell
        if (r >= 0).all() and (r <= 1).all():
            nk = r[0] + 2 * r[1] + 4 * r[2]
            for q in ti.static(range(4)):
                new[nk, q] = acc[k, q]
        elif cell[0] >= 0:
            a = ti.Vector([acc[k, 0], acc[k, 1], acc[k, 2], acc[k, 3]], dt=float)
            flush_voxel(g, (v[2] * R + v[1]) * R + v[0], a, Y, R, degree, expand, off)
    return new


@ti.func
def march_backward(x: ti.template(), g: ti.template(), o, d, j, L, dL, n, bmin, bmax, R, delta,
                   C: ti.template(), degree: ti.template(), dact: ti.template(), cact: ti.template(),
                   expand: ti.template(), off, coalesce: ti.template()):
    """Replay the n points of :func:`march_forward` and scatter ∂ℒ/∂x given L_forward and δL = ∂ℒ/∂L.

    coalesce=False scatters every point's adjoint at once (8 corners × (1 + 3K) adds); True sums
    a ray's adjoints per voxel while the ray stays near it (consecutive points share trilinear
    corners) and scatters when it moves on — the same sums, fewer atomic adds.
    """
    t_near, t_far = ray_box(o, d, bmin, bmax)
    Y = sh_basis(d, degree)
    T = 1.0
    Lr = L + 0.0                                   # remaining radiance
    acc = ti.Matrix.zero(float, 8, 4)
    cell = ti.Vector([-1, -1, -1])
    for i in range(n):
        t = t_near + (i + j) * delta
        i0, f = trilinear_setup(o + t * d, bmin, bmax, R)
        sigma, c, dsig, dc = query_cell(x, i0, f, Y, R, degree, dact, cact)
        alpha = 1.0 - ti.exp(-sigma * delta)
        # ∂ℒ/∂c = δL·T·α (per channel);  ∂ℒ/∂σ = δL·δ·(T·c − L_remaining)
        g_c = dL * (T * alpha)
        g_sigma = (dL * delta * (T * c - Lr)).sum()
        g_s = g_sigma * dsig
        g_pre = g_c * dc
        if g_s != 0.0 or alpha != 0.0:
            if ti.static(coalesce):
                if (i0 != cell).any():
                    acc = _move_cell(g, acc, cell, i0, Y, R, degree, expand, off)
                    cell = i0
                for k in range(8):
                    w, v = _corner(i0, f, R, k)
                    acc[k, 0] += w * g_s
                    for ch in ti.static(range(3)):
                        acc[k, 1 + ch] += w * g_pre[ch]
            else:
                query_adjoint(g, i0, f, Y, R, degree, g_s, g_pre, expand, off)
        Lr -= T * alpha * c
        T = T * (1.0 - alpha)
    if ti.static(coalesce):
        if cell[0] >= 0:
            for k in range(8):
                v = cell + _corner_offset(k)
                a = ti.Vector([acc[k, 0], acc[k, 1], acc[k, 2], acc[k, 3]], dt=float)
                flush_voxel(g, (v[2] * R + v[1]) * R + v[0], a, Y, R, degree, expand, off)


@ti.kernel
def _forward_kernel(x: ti.template(), C: ti.template(), degree: ti.template(), dact: ti.template(),
                    cact: ti.template(), o: ti.types.ndarray(), d: ti.types.ndarray(),
                    jit: ti.types.ndarray(), L_out: ti.types.ndarray(), n_out: ti.types.ndarray(),
                    n_rays: ti.i32, bmin: ti.math.vec3, bmax: ti.math.vec3, R: ti.i32, delta: float,
                    t_min: float, bg: ti.math.vec3):
    for i in range(n_rays):
        L, n = march_forward(x, _vec3(o, i), _vec3(d, i), jit[i], bmin, bmax, R, delta, t_min, bg,
                             C, degree, dact, cact)
        for k in ti.static(range(3)):
            L_out[i, k] = L[k]
        n_out[i] = n


@ti.kernel
def _backward_kernel(x: ti.template(), g: ti.template(), C: ti.template(), degree: ti.template(),
                     dact: ti.template(), cact: ti.template(), o: ti.types.ndarray(),
                     d: ti.types.ndarray(), jit: ti.types.ndarray(), L_in: ti.types.ndarray(),
                     dL_in: ti.types.ndarray(), n_in: ti.types.ndarray(), n_rays: ti.i32,
                     bmin: ti.math.vec3, bmax: ti.math.vec3, R: ti.i32, delta: float,
                     coalesce: ti.template(), P: ti.i32, N: ti.i32, mode: ti.template()):
    """One thread per ray, its gradients scattered as ``mode`` says (compile-time, _scatter): "atomic", atomic adds
    into g; "expand" (CPU), into the private slice g[w·N:(w+1)·N] of the CPU thread w running the ray; "ordered",
    worker w replays rays w, w+P, … into its slice — reproducible bit for bit, but Taichi runs a P-iteration loop
    on one thread. Without a worker index (not a CPU backend) "expand" adds atomically into slice 0."""
    if ti.static(mode == "ordered"):
        for w in range(P):
            for k in range((n_rays - w + P - 1) // P):
                i = w + k * P
                march_backward(x, g, _vec3(o, i), _vec3(d, i), jit[i], _vec3(L_in, i), _vec3(dL_in, i),
                               n_in[i], bmin, bmax, R, delta, C, degree, dact, cact, True, w * N, coalesce)
    else:
        for i in range(n_rays):
            if ti.static(mode == "expand" and thread_lanes()):
                w = ti.min(ti.global_thread_idx(), P - 1)   # the CPU thread running this ray
                march_backward(x, g, _vec3(o, i), _vec3(d, i), jit[i], _vec3(L_in, i), _vec3(dL_in, i), n_in[i],
                               bmin, bmax, R, delta, C, degree, dact, cact, True, w * N, coalesce)
            else:
                march_backward(x, g, _vec3(o, i), _vec3(d, i), jit[i], _vec3(L_in, i), _vec3(dL_in, i), n_in[i],
                               bmin, bmax, R, delta, C, degree, dact, cact, False, 0, coalesce)


@ti.func
def _fused_ray(x: ti.template(), g: ti.template(), o: ti.template(), d: ti.template(), jit: ti.template(),
               ref: ti.template(), L_out: ti.template(), n_out: ti.template(), i, bmin, bmax, R, delta, t_min, bg, kind: ti.template(),
               scale, C: ti.template(), degree: ti.template(), dact: ti.template(), cact: ti.template(),
               expand: ti.template(), off, coalesce: ti.template()):
    """Forward march, δL of the per-pixel loss, replay — one ray, one thread, nothing stored but L."""
    oi, di = _vec3(o, i), _vec3(d, i)
    L, n = march_forward(x, oi, di, jit[i], bmin, bmax, R, delta, t_min, bg, C, degree, dact, cact)
    r = L - _vec3(ref, i)
    dL = 2.0 * scale * r
    if ti.static(kind == 1):
        dL = scale * ti.math.sign(r)
    for k in ti.static(range(3)):
        L_out[i, k] = L[k]
    n_out[i] = n
    march_backward(x, g, oi, di, jit[i], L, dL, n, bmin, bmax, R, delta, C, degree, dact, cact, expand, off,
                   coalesce)


@ti.kernel
def _fused_kernel(x: ti.template(), g: ti.template(), C: ti.template(), degree: ti.template(),
                  dact: ti.template(), cact: ti.template(), o: ti.types.ndarray(), d: ti.types.ndarray(),
                  jit: ti.types.ndarray(), ref: ti.types.ndarray(), L_out: ti.types.ndarray(),
                  n_out: ti.types.ndarray(), n_rays: ti.i32, bmin: ti.math.vec3, bmax: ti.math.vec3,
                  R: ti.i32, delta: float, t_min: float, bg: ti.math.vec3, kind: ti.template(),
                  scale: float, coalesce: ti.template(), P: ti.i32, N: ti.i32, mode: ti.template()):
    """Fused forward + replay, its gradients scattered as ``mode`` says (see _backward_kernel)."""
    if ti.static(mode == "ordered"):
        for w in range(P):
            for k in range((n_rays - w + P - 1) // P):
                _fused_ray(x, g, o, d, jit, ref, L_out, n_out, w + k * P, bmin, bmax, R, delta, t_min, bg, kind,
                           scale, C, degree, dact, cact, True, w * N, coalesce)
    else:
        for i in range(n_rays):
            if ti.static(mode == "expand" and thread_lanes()):
                w = ti.min(ti.global_thread_idx(), P - 1)   # the CPU thread running this ray
                _fused_ray(x, g, o, d, jit, ref, L_out, n_out, i, bmin, bmax, R, delta, t_min, bg, kind, scale, C,
                           degree, dact, cact, True, w * N, coalesce)
            else:
                _fused_ray(x, g, o, d, jit, ref, L_out, n_out, i, bmin, bmax, R, delta, t_min, bg, kind, scale, C,
                           degree, dact, cact, False, 0, coalesce)


@ti.kernel
def _reduce_lanes(g: ti.template(), G: ti.template(), P: ti.i32, N: ti.i32):
    """g += Σ_w G[w·N + i], and G ← 0."""
    for i in range(N):
        acc = 0.0
        for w in range(P):
            acc += G[w * N + i]
            G[w * N + i] = 0.0
        g[i] = g[i] + acc   # one thread per element: no atomic needed


@ti.kernel
def _loss_kernel(L: ti.types.ndarray(), ref: ti.types.ndarray(), dL: ti.types.ndarray(), n_rays: ti.i32,
                 kind: ti.template(), scale: float) -> float:
    """ℒ = scale·Σ ℓ(L − ref) (ℓ = x² or |x|); writes δL = ∂ℒ/∂L; returns ℒ."""
    loss = 0.0
    for i, k in ti.ndrange(n_rays, 3):
        r = L[i, k] - ref[i, k]
        if ti.static(kind == 0):
            loss += scale * r * r
            dL[i, k] = 2.0 * scale * r
        else:
            loss += scale * ti.abs(r)
            dL[i, k] = scale * (1.0 if r > 0.0 else (-1.0 if r < 0.0 else 0.0))
    return loss


def _static(field):
    return (field.C, field.sh_degree, DENSITY_ACTIVATIONS[field.density_activation],
            color_code(field.color_activation, getattr(field, "color_clip", False)))


def _rays(o, d, jitter):
    fp = np_float()
    o = np.ascontiguousarray(o, fp).reshape(-1, 3)
    d = np.asarray(d, np.float64).reshape(-1, 3)
    d = np.ascontiguousarray(d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-30), fp)
    if o.shape[0] == 1 and d.shape[0] > 1:
        o = np.ascontiguousarray(np.broadcast_to(o, d.shape))
    n = d.shape[0]
    if jitter is None:
        jitter = np.full(n, 0.5)
    jitter = np.ascontiguousarray(np.broadcast_to(np.asarray(jitter, fp), (n,)))
    return o, d, jitter, n


def render_rays(field, o, d, jitter=None):
    """Forward march. o, d: (n, 3) world origins / directions (normalised here); jitter: (n,) ∈ [0,1)
    (default 0.5). Returns (L (n, 3) radiance, n_steps (n,) int32 points marched)."""
    o, d, jitter, n = _rays(o, d, jitter)
    L = np.zeros((n, 3), np_float())
    ns = np.zeros(n, np.int32)
    if n:
        _forward_kernel(field.x, *_static(field), o, d, jitter, L, ns, n,
                        ti.math.vec3(*field.bbox_min), ti.math.vec3(*field.bbox_max), field.res,
                        field.delta, field.t_min, ti.math.vec3(*field.background))
        field._points_per_ray = float(ns.mean())
    return L, ns


def backward_rays(field, o, d, jitter, L, dL, n_steps, mode="auto", coalesce=True):
    """Path-replay backward: add ∂ℒ/∂x to ``field.grad`` given L (n, 3) and n_steps from
    :func:`render_rays` on the same rays and jitter, and δL = ∂ℒ/∂L (n, 3).

    mode: "atomic" (ti.atomic_add into field.grad, one thread per ray), "expand" (CPU: one
    private gradient copy per CPU thread, plain adds, summed after), "ordered" (expand with a fixed
    ray-to-copy assignment: bit-reproducible, single-threaded on Taichi's CPU backend) or "auto"
    (expand on CPU backends when the batch is large enough to amortise summing the copies).
    "expand" and "ordered" are CPU modes: other backends run "atomic" (see :func:`thread_lanes`).
    coalesce: sum a ray's adjoints per voxel before scattering (same result up to rounding, fewer
    adds); False scatters at every point.
    """
    o, d, jitter, n = _rays(o, d, jitter)
    fp = np_float()
    if not n:
        return
    args = (*_static(field), o, d, jitter,
            np.ascontiguousarray(L, fp).reshape(n, 3), np.ascontiguousarray(dL, fp).reshape(n, 3),
            np.ascontiguousarray(n_steps, np.int32).reshape(n), n,
            ti.math.vec3(*field.bbox_min), ti.math.vec3(*field.bbox_max), field.res, field.delta,
            bool(coalesce))
    _scatter(field, _choose_mode(field, mode, int(np.sum(n_steps))), _backward_kernel, args)


def _choose_mode(field, mode, points):
    """The scatter mode for a backward pass marching about ``points`` points: ``mode``, or for "auto" private
    copies ("expand") once the scatter work outweighs summing the copies (measured on a 2-core CPU: from about
    one marched point per 20 parameters), within a memory cap, else "atomic"."""
    if mode == "auto":
        fits = field.lanes_bytes() <= EXPAND_MAX_BYTES
        busy = points * EXPAND_POINTS_PER_PARAM >= field.n_params
        mode = "expand" if backend.current_arch() == "cpu" and fits and busy else "atomic"
    return _scatter_mode(mode)


def _scatter(field, mode, kernel, args):
    """Run a backward kernel in scatter mode ``mode``: private gradient copies summed after ("expand", "ordered")
    or atomics into ``field.grad`` ("atomic")."""
    if mode in ("expand", "ordered"):
        G, P = field.grad_lanes()
        kernel(field.x, G, *args, P, field.n_params, mode)
        _reduce_lanes(field.grad, G, P, field.n_params)
    elif mode == "atomic":
        kernel(field.x, field.grad, *args, 1, 0, mode)
    else:
        raise ValueError(f"unknown backward mode '{mode}' (auto, atomic, expand, ordered)")


def loss_and_adjoint(L, ref, kind="l2", scale=1.0):
    """ℒ = scale·Σ ℓ(L − ref) over rays and channels and δL = ∂ℒ/∂L (n, 3)."""
    fp = np_float()
    L = np.ascontiguousarray(L, fp).reshape(-1, 3)
    ref = np.ascontiguousarray(ref, fp).reshape(-1, 3)
    dL = np.zeros_like(L)
    loss = _loss_kernel(L, ref, dL, L.shape[0], LOSSES[kind], float(scale)) if L.shape[0] else 0.0
    return float(loss), dL


def render_and_backward(field, o, d, jitter, ref, kind="l2", scale=1.0, mode="auto", fused=True):
    """One gradient evaluation on rays (o, d, jitter) against reference radiance ref (n, 3):
    ℒ = scale·Σ ℓ(L − ref), δL, and the path-replay backward into ``field.grad``. Returns (ℒ, L).

    fused=True runs forward, δL and replay for each ray in one thread of one kernel (the replay
    finds the ray's voxels still in cache); False runs :func:`render_rays`,
    :func:`loss_and_adjoint` and :func:`backward_rays` one after the other. Same results.
    mode: scatter mode as in :func:`backward_rays` ("auto" decides on the forward's point count
    estimated from the previous call on this field).
    """
    if not fused:
        L, ns = render_rays(field, o, d, jitter)
        loss, dL = loss_and_adjoint(L, ref, kind, scale)
        backward_rays(field, o, d, jitter, L, dL, ns, mode=mode)
        return loss, L
    o, d, jitter, n = _rays(o, d, jitter)
    fp = np_float()
    ref = np.ascontiguousarray(ref, fp).reshape(-1, 3)
    L = np.zeros((n, 3), fp)
    ns = np.zeros(n, np.int32)
    if not n:
        return 0.0, L
    est = getattr(field, "_points_per_ray", None)
    mode = _choose_mode(field, mode, n * (est if est is not None else 2.0 * field.res))
    args = (*_static(field), o, d, jitter, ref, L, ns, n, ti.math.vec3(*field.bbox_min),
            ti.math.vec3(*field.bbox_max), field.res, field.delta, field.t_min, ti.math.vec3(*field.background),
            LOSSES[kind], float(scale), True)
    _scatter(field, mode, _fused_kernel, args)
    field._points_per_ray = float(ns.mean())
    r = L.astype(np.float64) - ref
    loss = float(scale * (np.sum(r * r) if kind == "l2" else np.sum(np.abs(r))))
    return loss, L
