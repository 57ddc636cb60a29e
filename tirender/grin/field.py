"""The refractive-index field n(x) of a gradient-index (GRIN) volume: a trilinear grid over an axis-aligned
box, its analytic gradient ∇n, and the adjoints of both w.r.t. the grid values and the position.

Layout and units
    The box is [bmin, bmax] (scene units). The grid holds D·H·W values n[z, y, x] (dimensionless
    refractive indices) at the cell centres bmin + (i + ½)·(bmax − bmin)/res along each axis, stored
    flat at ``(z·H + y)·W + x`` (x runs along world x, y along world y, z along world z: the order
    of ``tirender/media/grid.py`` and Mitsuba's .vol files). A lookup is trilinear with
    clamp-to-edge: beyond the outer cell centres the field is constant along that axis.
    ∇n (1 / scene unit) is the exact gradient of that piecewise-trilinear interpolant — piecewise
    bilinear, discontinuous across the planes through the cell centres (the paper's "piecewise
    constant gradients", §4.3) — not a finite difference. The interpolation cells are the boxes
    between neighbouring centres (``cell_of``; plus the clamped half-cells at the faces); each is one
    trilinear polynomial, and ``index_eval_in`` evaluates a given cell's polynomial (the
    integrator steps within one cell at a time, see trace.py). Outside the box the medium is
    ``n_out`` (1 by default); the box faces may be discontinuities, which ``trace.py`` treats with
    Snell's law.

Parameterisation
    The grid stores n itself; the optimiser (``train.py``) projects every value into
    [n_min, n_max] after each step (the bounds are config keys).

What is differentiable
    :func:`index_eval` returns (n, ∇n) at a world point x (vec3). :func:`index_eval_adjoint` takes
    the adjoints (n̄ scalar, ḡ vec3) of those outputs, scatters ∂/∂(grid value) =
    n̄·w_c + ḡ·∇w_c of each of the eight corners c into a gradient accumulator with
    ``ti.atomic_add`` (64-bit fixed point, deterministic: ``tirender/core/fixed_point.py``), and
    returns x̄ = n̄·∇n + H·ḡ, with H the Hessian of the interpolant (only its mixed terms are
    non-zero inside a cell).

Grids are ``ti.types.ndarray()`` kernel arguments, so every kernel compiles once per dtype for any
resolution and any :class:`IndexGrid` object. :class:`IndexGrid` is the host side: the values and
the gradient accumulator on the device, numpy get/set, save/load and resampling for
coarse-to-fine optimisation.

Software Vulkan (Mesa's lavapipe; :func:`float_accumulation`, a compile-time switch)
    Taichi's SPIR-V puts an ``OpMemoryBarrier`` before every integer atomic. Lavapipe (Mesa 22.3)
    runs a workgroup of 128 invocations as SIMD batches of 8 lanes and switches between the batches
    at barriers. When the lanes of a loop that holds such a barrier diverge (some rays skip the
    atomic, leave the loop earlier, miss the screen), some batches of the workgroup stop early: the
    rest of their loop iterations never run, and their adds are lost. Measured on the 32² rays per
    view of configs/grin.yaml: 39 % of view z's splat additions were lost, and the loss gradient was
    47 % off. View z's caustic throws whole batches of neighbouring rays off the screen. View x lost
    none, until 4 or 8 neighbouring rays were moved off-screen; then the other rays of that
    128-ray workgroup lost adds. A bare barrier (``ti.simt.block.mem_sync()``) before a float atomic
    loses exactly the same adds; float atomics alone (no barrier) lose none. So on such a device the
    accumulator ``IndexGrid.acc`` is Taichi's float, and :func:`grad_add` adds the value itself with
    a float ``ti.atomic_add``: no barrier, no fixed point, no recorded maximum, no relaunch. That is
    correct to float rounding (images within 2e-6 and gradients within 4e-6 of the CPU's, relative
    to their maximum; tests/test_backend_vulkan.py), but not bit-reproducible run to run. The CPU
    (and CUDA, and hardware Vulkan) keep the i64 fixed point unchanged.
"""
import math
import os

import numpy as np
import taichi as ti

from .. import backend
from ..core import fixed_point as fxp
from ..core.math import vec3
from ..errors import ConfigError

ivec3 = ti.types.vector(3, ti.i32)


@ti.dataclass
class GridDesc:
    """Geometry of an index grid inside kernels: box corners (scene units), cells per axis
    (x, y, z) = (W, H, D) and the index outside the box."""
    bmin: vec3
    bmax: vec3
    res: ivec3
    n_out: float


@ti.func
def voxel_coords(G, x):
    """(p, s): voxel coordinates of world point x (cell centres at integers; clamped to [−1, res],
    where the field is constant, so far-away points stay finite) and the world → voxel scale s
    (voxels per scene unit), both vec3."""
    s = ti.cast(G.res, float) / (G.bmax - G.bmin)
    p = (x - G.bmin) * s - 0.5
    for k in ti.static(range(3)):
        p[k] = ti.min(ti.max(p[k], -1.0), ti.cast(G.res[k], float))
    return p, s


@ti.func
def cell_of(G, x):
    """The interpolation cell of x: c (ivec3) with c_k ≤ p_k < c_k + 1, c_k ∈ [−1, res_k − 1]
    (−1 and res_k − 1 are the clamped half-cells next to the box faces). The interpolant is one
    polynomial (trilinear) per cell; across the planes p_k = integer its gradient jumps."""
    p, _s = voxel_coords(G, x)
    c = ivec3(0)
    for k in ti.static(range(3)):
        c[k] = ti.min(ti.max(ti.cast(ti.floor(p[k]), ti.i32), -1), G.res[k] - 1)
    return c


@ti.func
def _cell(G, x, cell):
    """(i0, i1, f, s) of x in interpolation cell ``cell``: lower/upper corner indices (clamped),
    fractions f = p − cell (the cell's polynomial, extended a little beyond it when x is) and
    the world → voxel scale s."""
    p, s = voxel_coords(G, x)
    i0 = ivec3(0)
    i1 = ivec3(0)
    f = vec3(0.0)
    for k in ti.static(range(3)):
        i0[k] = ti.min(ti.max(cell[k], 0), G.res[k] - 1)
        i1[k] = ti.min(ti.max(cell[k] + 1, 0), G.res[k] - 1)
        f[k] = p[k] - ti.cast(cell[k], float)
    return i0, i1, f, s


@ti.func
def _corner(G, i0, i1, f, c):
    """Flat index, weight w_c, ∂w_c/∂f (vec3), the per-axis factors a and signs of corner c
    (bit 0: x, 1: y, 2: z) of a cell."""
    bx, by, bz = c & 1, (c >> 1) & 1, (c >> 2) & 1
    ix = ti.select(bx, i1[0], i0[0])
    iy = ti.select(by, i1[1], i0[1])
    iz = ti.select(bz, i1[2], i0[2])
    ax = ti.select(bx, f[0], 1.0 - f[0])
    ay = ti.select(by, f[1], 1.0 - f[1])
    az = ti.select(bz, f[2], 1.0 - f[2])
    sx = ti.select(bx, 1.0, -1.0)
    sy = ti.select(by, 1.0, -1.0)
    sz = ti.select(bz, 1.0, -1.0)
    idx = (iz * G.res[1] + iy) * G.res[0] + ix
    return idx, ax * ay * az, vec3(sx * ay * az, ax * sy * az, ax * ay * sz), vec3(ax, ay, az), vec3(sx, sy, sz)


@ti.func
def index_eval_in(vals: ti.template(), G, x, cell):
    """(n, ∇n) at world point x from the polynomial of interpolation cell ``cell``: n
    dimensionless, ∇n in 1/scene unit (vec3). Equal to :func:`index_eval` when x lies in it."""
    i0, i1, f, s = _cell(G, x, cell)
    n = 0.0
    g = vec3(0.0)
    for c in range(8):   # a runtime loop over the corners keeps the RK4 adjoint kernels small
        idx, w, dw, _a, _sg = _corner(G, i0, i1, f, c)
        val = vals[idx]
        n += w * val
        g += val * dw
    return n, g * s


@ti.func
def index_eval(vals: ti.template(), G, x):
    """(n, ∇n) at world point x (the cell that holds it)."""
    return index_eval_in(vals, G, x, cell_of(G, x))


@ti.func
def is_finite(v):
    """Whether scalar v is finite (bit test of its f32 value: immune to fast-math folding)."""
    return (ti.bit_cast(ti.cast(v, ti.f32), ti.i32) & 0x7F800000) != 0x7F800000


def float_accumulation():
    """Whether the GRIN kernels accumulate gradients and images in float instead of i64 fixed point:
    on a software Vulkan device (lavapipe), where integer atomics inside loops lose additions (module
    doc). Read at kernel compile time (``ti.static``) and by the host classes; False on the CPU."""
    return backend.software_vulkan()


@ti.func
def grad_add(acc: ti.template(), mx: ti.template(), idx, v, scale):
    """acc[idx] += v in fixed point (i64, ``round(v · scale)``); |v| is recorded in the max slots mx
    (tirender/core/fixed_point.py: the host re-launches with the canonical scale when the guess was
    off). Non-finite v is dropped; zero adds nothing (no contention). With
    :func:`float_accumulation` acc is float and v is added as it is (mx and scale unused)."""
    if v != 0.0 and is_finite(v):
        if ti.static(float_accumulation()):
            ti.atomic_add(acc[idx], v)
        else:
            fxp.track_max(mx, 0, idx, ti.abs(v))
            ti.atomic_add(acc[idx], fxp.to_fixed(v, scale))


vec8 = ti.types.vector(8, float)


@ti.func
def index_eval_adjoint_local(vals: ti.template(), G, x, cell, nbar, gbar):
    """Adjoint of :func:`index_eval_in` for output adjoints n̄ (scalar) and ḡ (vec3), kept local:
    (x̄, cg) with x̄ = n̄·∇n + H·ḡ (vec3; H the Hessian of the cell's polynomial, mixed terms only)
    and cg[c] = n̄·w_c + ḡ·∇w_c, the gradient of corner c's value (vec8). Every point of one cell
    has the same corners, so the lookups of a step add their cg and scatter them once
    (:func:`flush_corners`)."""
    i0, i1, f, s = _cell(G, x, cell)
    gs = gbar * s              # adjoint of the voxel-space gradient ∂n/∂f
    n_f = vec3(0.0)            # ∂n/∂f
    x_f = vec3(0.0)            # H_f·gs (voxel space)
    cg = vec8(0.0)
    for c in ti.static(range(8)):
        idx, w, dw, a, sg = _corner(G, i0, i1, f, c)
        val = vals[idx]
        cg[c] = nbar * w + gs.dot(dw)
        n_f += val * dw
        # ∂²w/∂f_j∂f_k = s_j s_k a_l (j ≠ k, l the third axis); zero for j = k
        x_f[0] += val * sg[0] * (gs[1] * sg[1] * a[2] + gs[2] * sg[2] * a[1])
        x_f[1] += val * sg[1] * (gs[0] * sg[0] * a[2] + gs[2] * sg[2] * a[0])
        x_f[2] += val * sg[2] * (gs[0] * sg[0] * a[1] + gs[1] * sg[1] * a[0])
    return (nbar * n_f + x_f) * s, cg


@ti.func
def flush_corners(G, cell, cg, acc: ti.template(), mx: ti.template(), scale):
    """Scatter the corner gradients cg (vec8) of interpolation cell ``cell`` into acc (fixed point)."""
    i0 = ivec3(0)
    i1 = ivec3(0)
    for k in ti.static(range(3)):
        i0[k] = ti.min(ti.max(cell[k], 0), G.res[k] - 1)
        i1[k] = ti.min(ti.max(cell[k] + 1, 0), G.res[k] - 1)
    for c in ti.static(range(8)):
        idx, _w, _dw, _a, _sg = _corner(G, i0, i1, vec3(0.0), c)
        grad_add(acc, mx, idx, cg[c], scale)


@ti.func
def index_eval_adjoint_in(vals: ti.template(), G, x, cell, nbar, gbar, acc: ti.template(), mx: ti.template(),
                          scale):
    """Adjoint of :func:`index_eval_in` for output adjoints n̄ (scalar) and ḡ (vec3): adds
    n̄·w_c + ḡ·∇w_c to the gradient of each corner value (fixed point, see :func:`grad_add`) and
    returns x̄ = n̄·∇n + H·ḡ (vec3)."""
    xb, cg = index_eval_adjoint_local(vals, G, x, cell, nbar, gbar)
    flush_corners(G, cell, cg, acc, mx, scale)
    return xb


@ti.func
def index_eval_adjoint(vals: ti.template(), G, x, nbar, gbar, acc: ti.template(), mx: ti.template(), scale):
    """Adjoint of :func:`index_eval` (the cell that holds x)."""
    return index_eval_adjoint_in(vals, G, x, cell_of(G, x), nbar, gbar, acc, mx, scale)


# ---------------------------------------------------------------------------- point kernels (tests, tools)
def _vec(a):
    return ti.Vector([float(x) for x in a])


@ti.kernel
def _k_eval(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float, xs: ti.types.ndarray(),
            out: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    for i in range(xs.shape[0]):
        n, g = index_eval(vals, G, vec3(xs[i, 0], xs[i, 1], xs[i, 2]))
        out[i, 0] = n
        for k in ti.static(range(3)):
            out[i, 1 + k] = g[k]


@ti.kernel
def _k_eval_adjoint(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float,
                    xs: ti.types.ndarray(), adj: ti.types.ndarray(), acc: ti.types.ndarray(), mx: ti.types.ndarray(),
                    scale: float, xbar: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    for i in range(xs.shape[0]):
        r = index_eval_adjoint(vals, G, vec3(xs[i, 0], xs[i, 1], xs[i, 2]), adj[i, 0],
                               vec3(adj[i, 1], adj[i, 2], adj[i, 3]), acc, mx, scale)
        for k in ti.static(range(3)):
            xbar[i, k] = r[k]


# ---------------------------------------------------------------------------- host side
def np_float():
    from ..backend import np_float as f
    return f()


class IndexGrid:
    """A GRIN index grid on the device: values n (``self.values``, flat ti.ndarray of Taichi's float,
    capacity ≥ D·H·W so coarse-to-fine stages reuse it) and the gradient accumulator
    (``self.acc``, i64 fixed point, same capacity; Taichi's float where ``self.float_acc``, i.e. on
    software Vulkan: see the module doc).

    data: (D, H, W) array of indices; bmin, bmax: box corners (3 numbers each, scene units);
    n_out: index outside the box. ``capacity``: values to allocate (default: this grid's size).
    """

    def __init__(self, data, bmin=(-0.5, -0.5, -0.5), bmax=(0.5, 0.5, 0.5), n_out=1.0, capacity=None):
        from ..backend import ensure_init
        ensure_init()
        data = np.asarray(data)
        if data.ndim != 3 or min(data.shape) < 1:
            raise ValueError(f"index grid must be (D, H, W), got shape {data.shape}")
        self.bmin = np.asarray(bmin, np.float64).reshape(3)
        self.bmax = np.asarray(bmax, np.float64).reshape(3)
        if not np.all(self.bmax > self.bmin):
            raise ValueError("bmax must exceed bmin on every axis")
        self.n_out = float(n_out)
        self.capacity = int(capacity or data.size)
        self.dtype = np_float()
        self.values = ti.ndarray(float, self.capacity)
        self.float_acc = float_accumulation()
        self.acc = ti.ndarray(float if self.float_acc else ti.i64, self.capacity)
        self.slots = ti.ndarray(ti.i32, fxp.N_SLOTS)
        self.shape = None
        self.set(data)
        self.zero_grad()

    # -- values
    @property
    def size(self):
        return int(np.prod(self.shape))

    def set(self, data):
        """Make the grid ``data`` (D, H, W) (its resolution may change within the capacity)."""
        data = np.asarray(data, self.dtype)
        if data.ndim != 3 or data.size > self.capacity or min(data.shape) < 1:
            raise ValueError(f"grid of shape {data.shape} does not fit the capacity {self.capacity}")
        if not np.all(np.isfinite(data)):
            raise ValueError("index grid has non-finite values")
        self.shape = tuple(int(s) for s in data.shape)
        buf = np.zeros(self.capacity, self.dtype)
        buf[:data.size] = data.ravel()
        self.values.from_numpy(buf)

    def to_numpy(self):
        """The grid (D, H, W) as float64."""
        return self.values.to_numpy()[:self.size].astype(np.float64).reshape(self.shape)

    def args(self):
        """(values, bmin, bmax, res, n_out): the leading arguments of every GRIN kernel."""
        D, H, W = self.shape
        return (self.values, _vec(self.bmin), _vec(self.bmax), ti.Vector([W, H, D], dt=ti.i32), self.n_out)

    # -- gradient
    def zero_grad(self):
        self.acc.fill(0)
        self.slots.fill(0)
        self.grad_scale = None

    def recorded_max(self):
        """Largest |add| recorded since the last :meth:`zero_grad` (fixed_point.track_max)."""
        return fxp.slots_max(self.slots.to_numpy())

    def grad_numpy(self):
        """∂(objective)/∂(grid values) accumulated since :meth:`zero_grad`, (D, H, W) float64."""
        if self.grad_scale is None:
            return np.zeros(self.shape)
        q = self.acc.to_numpy()[:self.size].astype(np.float64)
        if self.float_acc:
            return q.reshape(self.shape)
        return (q / self.grad_scale).reshape(self.shape)

    # -- point evaluation (tests, tools)
    def eval(self, xs):
        """(n (N,), ∇n (N, 3)) at world points xs (N, 3)."""
        xs = np.ascontiguousarray(np.atleast_2d(xs), self.dtype)
        out = np.zeros((len(xs), 4), self.dtype)
        _k_eval(*self.args(), xs, out)
        return out[:, 0].astype(np.float64), out[:, 1:].astype(np.float64)

    def eval_adjoint(self, xs, nbar, gbar, scale=None):
        """Adjoint of :meth:`eval`: adds Σ_i n̄_i ∂n(x_i)/∂grid + ḡ_i·∂∇n(x_i)/∂grid to the gradient
        (read it with :meth:`grad`) and returns x̄ (N, 3)."""
        xs = np.ascontiguousarray(np.atleast_2d(xs), self.dtype)
        adj = np.concatenate([np.asarray(nbar, np.float64).reshape(-1, 1), np.asarray(gbar, np.float64).reshape(-1, 3)],
                             1).astype(self.dtype)
        xbar = np.zeros((len(xs), 3), self.dtype)
        self.zero_grad()
        self.grad_scale = float(scale or fxp.grad_scale_for(max(np.abs(adj).max(), 1e-30) * 8 * len(xs)))
        _k_eval_adjoint(*self.args(), xs, np.ascontiguousarray(adj), self.acc, self.slots, self.grad_scale, xbar)
        return xbar.astype(np.float64)


# ---------------------------------------------------------------------------- numpy helpers
def eval_np(data, bmin, bmax, xs):
    """Reference lookup in float64 numpy: (n (N,), ∇n (N, 3)) of grid data (D, H, W) at xs (N, 3)."""
    data = np.asarray(data, np.float64)
    D, H, W = data.shape
    res = np.array([W, H, D], np.float64)
    bmin, bmax = np.asarray(bmin, np.float64), np.asarray(bmax, np.float64)
    s = res / (bmax - bmin)
    p = np.clip((np.atleast_2d(xs) - bmin) * s - 0.5, -1.0, res)
    pf = np.floor(p)
    f = p - pf
    i0 = np.clip(pf.astype(int), 0, (res - 1).astype(int))
    i1 = np.clip(pf.astype(int) + 1, 0, (res - 1).astype(int))
    n = np.zeros(len(p))
    g = np.zeros((len(p), 3))
    for c in range(8):
        b = [(c >> k) & 1 for k in range(3)]
        a = [f[:, k] if b[k] else 1 - f[:, k] for k in range(3)]
        sg = [1.0 if b[k] else -1.0 for k in range(3)]
        ix = [i1[:, k] if b[k] else i0[:, k] for k in range(3)]
        val = data[ix[2], ix[1], ix[0]]
        n += a[0] * a[1] * a[2] * val
        g[:, 0] += val * sg[0] * a[1] * a[2]
        g[:, 1] += val * a[0] * sg[1] * a[2]
        g[:, 2] += val * a[0] * a[1] * sg[2]
    return n, g * s


def _axis_weights(Rs, Rd, method):
    """(taps (Rd, k), weights (Rd, k)) of one axis: tirender/radiance_field/resample.py's scheme
    (cell centres aligned, clamp-to-edge; trilinear or Catmull-Rom cubic)."""
    from ..radiance_field.resample import _axis_weights as aw
    return aw(Rs, Rd, method)


RESAMPLE_METHODS = ("cubic", "trilinear")


def resample(data, shape, method="cubic", lo=None, hi=None):
    """Grid data (D, H, W) resampled to ``shape`` (an int or (D, H, W)) by ``method`` (separable,
    cell centres aligned, clamp-to-edge), then clipped to [lo, hi] when given (cubic lobes can
    overshoot the index bounds). float64."""
    out = np.asarray(data, np.float64)
    shape = (int(shape),) * 3 if np.isscalar(shape) else tuple(int(s) for s in shape)
    for axis in range(3):
        if out.shape[axis] == shape[axis]:
            continue
        taps, w = _axis_weights(out.shape[axis], shape[axis], method)
        bshape = [1] * 3
        bshape[axis] = shape[axis]
        acc = 0.0
        for k in range(taps.shape[1]):
            acc = acc + np.take(out, taps[:, k], axis=axis) * w[:, k].reshape(bshape)
        out = acc
    if lo is not None or hi is not None:
        out = np.clip(out, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    return out


def save_grid(path, data):
    """Write a (D, H, W) index grid as a float32 .npy file, atomically."""
    from ..io.checkpoints import save_npy
    save_npy(os.fspath(path), np.asarray(data, np.float32))


def load_grid(path, key=None, file=None):
    """A (D, H, W) index grid from a .npy file; ConfigError naming the file when it is missing,
    unreadable, not 3-D or not finite."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError("index grid file not found", file or path, key)
    try:
        a = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any failure to read it is bad input
        raise ConfigError(f"cannot read index grid ({type(e).__name__})", path, key) from None
    if a.ndim != 3 or a.dtype.kind not in "fiu" or min(a.shape) < 1:
        raise ConfigError(f"index grid must be a 3-D numeric array (D, H, W), got {a.dtype} {a.shape}", path, key)
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise ConfigError("index grid has non-finite values", path, key)
    return a


def radial_grid(fn, res, bmin, bmax, centre=None):
    """A grid of resolution ``res`` (an int or (D, H, W)) sampling n = fn(r) at the cell centres, r the
    distance to ``centre`` (default: the box centre): the Luneburg lens, the Maxwell fish-eye."""
    bmin, bmax = np.asarray(bmin, np.float64), np.asarray(bmax, np.float64)
    res3 = (int(res),) * 3 if np.isscalar(res) else tuple(int(r) for r in res)
    axes = [bmin[k] + (np.arange(res3[2 - k]) + 0.5) * (bmax[k] - bmin[k]) / res3[2 - k] for k in range(3)]
    Z, Y, X = np.meshgrid(axes[2], axes[1], axes[0], indexing="ij")
    c = (bmin + bmax) / 2 if centre is None else np.asarray(centre, np.float64)
    r = np.sqrt((X - c[0]) ** 2 + (Y - c[1]) ** 2 + (Z - c[2]) ** 2)
    return fn(r)


def luneburg(r):
    """Luneburg lens index: √(2 − r²) inside the unit sphere, 1 outside (continuous at r = 1)."""
    return np.where(r < 1.0, np.sqrt(np.maximum(2.0 - r * r, 1.0)), 1.0)


def fisheye(r, radius=math.inf):
    """Maxwell fish-eye index 2 / (1 + r²) for r < radius, 1 beyond (radius 1: continuous)."""
    return np.where(r < radius, 2.0 / (1.0 + r * r), 1.0)
