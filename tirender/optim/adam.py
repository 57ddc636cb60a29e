"""Adam (Kingma & Ba 2015) and SGD as Taichi kernels over a flat 1-D parameter field.

The parameter pool of a scene (or a radiance-field grid) is one f32 field ``x`` with a twin
gradient field ``g``; per-element learning rates ``lr`` and bounds ``lo``/``hi`` let one kernel
serve every named parameter. After each step ``x`` is projected into [lo, hi].

Adam's step is written as Dr.Jit's (Mitsuba 3's) optimiser writes it, with ε inside the square root
of the *uncorrected* second moment:
    m ← β₁ m + (1 − β₁) g,   v ← β₂ v + (1 − β₂) g²
    x ← x − lr · √(1 − β₂ᵗ)/(1 − β₁ᵗ) · m / √(v + ε²)
``eps_mode`` (the default chosen by benchmarks/defaults_sweep.py, docs/optimize.md):
    "absolute" (default): ε = eps as given (default 1e-8, Dr.Jit's), in the units of the gradient:
        the step Mitsuba 3 takes, on every task of the sweep (texture, Cornell-box wall, radiance
        field: within 1 % of Mitsuba's error where the relative form was up to 9 % worse). ε then
        acts where √v is near it: per-texel gradients of a mean-over-pixels image loss are ~1e-7,
        so the first steps (v ~ (1 − β₂)g²) are damped — an implicit warm-up Mitsuba's users tune
        their learning rates with. What it gives up: invariance to the scale of the loss; a loss
        × 1e-6 has gradients far below ε and barely moves (tests/test_adam.py).
    "relative": ε = eps · RMS_k, RMS_k = √(mean of v over the element's segment k) — a
        contiguous range such as one named parameter (``segments``; the ranges between them are
        segments too) —, recomputed every step on the device (block sums in a fixed order,
        folded in float64 on the host: deterministic).
        The trajectory is then invariant to the scale of the loss: multiplying every gradient by c
        multiplies v by c² and ε by c (tested down to c = 1e-6); eps (default 1e-3) is the
        fraction of a group's typical gradient below which an element's steps are damped. What it
        gives up: Mitsuba's trajectory (its first steps are full ±lr steps, not damped).
"""
import numpy as np
import taichi as ti

EPS_MODES = ("relative", "absolute")
DEFAULT_EPS_MODE = "absolute"
DEFAULT_EPS = {"relative": 1e-3, "absolute": 1e-8}
BLOCK = 4096   # elements per block of the deterministic device reduction (one group)


@ti.kernel
def _adam_moments(g: ti.template(), m: ti.template(), v: ti.template(), n: ti.i32, beta1: float, beta2: float):
    for i in range(n):
        gi = g[i]
        if gi != gi:  # NaN gradients never reach the parameters
            gi = 0.0
        m[i] = beta1 * m[i] + (1.0 - beta1) * gi
        v[i] = beta2 * v[i] + (1.0 - beta2) * gi * gi


@ti.kernel
def _block_sums(v: ti.template(), out: ti.types.ndarray(), start: ti.i32, stop: ti.i32, block: ti.i32):
    """out[b] = Σ v[i] over block b of [start, stop) (serial inside a block, blocks in parallel:
    deterministic)."""
    for b in range((stop - start + block - 1) // block):
        acc = 0.0
        for i in range(start + b * block, ti.min(stop, start + (b + 1) * block)):
            acc += v[i]
        out[b] = acc


@ti.func
def _segment_of(seg_start: ti.template(), n_seg, i):
    """Index k of the segment [seg_start[k], seg_start[k + 1]) that holds element i (binary search)."""
    lo, hi = 0, n_seg - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if seg_start[mid] <= i:
            lo = mid
        else:
            hi = mid - 1
    return lo


@ti.kernel
def _adam_apply(x: ti.template(), m: ti.template(), v: ti.template(), seg_start: ti.template(),
                seg_eps2: ti.template(), n_seg: ti.i32, lr: ti.template(), lo: ti.template(), hi: ti.template(),
                bounded: ti.template(), n: ti.i32, scale: float):
    for i in range(n):
        q = v[i] + seg_eps2[_segment_of(seg_start, n_seg, i)]
        step = 0.0
        if q > 0.0:
            step = m[i] / ti.sqrt(q)
        x[i] = _project(x[i] - lr[i] * scale * step, lo, hi, bounded, i)


@ti.kernel
def _sgd_step(x: ti.template(), g: ti.template(), m: ti.template(), lr: ti.template(),
              lo: ti.template(), hi: ti.template(), bounded: ti.template(), n: ti.i32, momentum: float):
    for i in range(n):
        gi = g[i]
        if gi != gi:
            gi = 0.0
        m[i] = momentum * m[i] + gi
        x[i] = _project(x[i] - lr[i] * m[i], lo, hi, bounded, i)


@ti.func
def _project(xi, lo: ti.template(), hi: ti.template(), bounded: ti.template(), i):
    """xi clamped to [lo[i], hi[i]] (bounded: compile-time; unbounded optimisers have no bound fields)."""
    res = xi
    if ti.static(bounded):
        res = ti.min(ti.max(xi, lo[i]), hi[i])
    return res


class _FieldOptimizer:
    """Shared state: moment fields sized like ``x``; ``lr`` per element; ``lo``, ``hi`` per element
    when bounds are given (otherwise one-element placeholders: an unbounded optimiser of n values
    keeps 2n fewer values, 59 MB for the 64³ radiance field)."""

    def __init__(self, x, g, lr, lo=None, hi=None):
        self.x, self.g = x, g
        self.n = x.shape[0]
        self.m = ti.field(x.dtype, self.n)
        self.v = ti.field(x.dtype, self.n)
        self.lr = ti.field(x.dtype, self.n)
        self.bounded = lo is not None or hi is not None
        nb = self.n if self.bounded else 1
        self.lo = ti.field(x.dtype, nb)
        self.hi = ti.field(x.dtype, nb)
        self.set_lr(lr)
        self._set_bounds(lo, hi)
        self.t = 0

    def _set_bounds(self, lo, hi):
        nb = self.lo.shape[0]
        self.lo.from_numpy(np.broadcast_to(np.asarray(-np.inf if lo is None else lo, np.float32), (nb,)).copy())
        self.hi.from_numpy(np.broadcast_to(np.asarray(np.inf if hi is None else hi, np.float32), (nb,)).copy())

    def reconfigure(self, lr, lo=None, hi=None, segments=None):
        """New learning rates and bounds (and Adam's ε segments) for the same x (a coarse-to-fine stage
        change): the fields, and the kernels compiled for them, are kept (a new optimiser would compile
        its kernels again). False (nothing changed) when the bounds' presence differs: build a new
        optimiser then."""
        if (lo is not None or hi is not None) != self.bounded:
            return False
        self.set_lr(lr)
        if self.bounded:
            self._set_bounds(lo, hi)
        return True

    def set_lr(self, lr):
        """lr: scalar or (n,) array of per-element learning rates."""
        self.lr.from_numpy(np.broadcast_to(np.asarray(lr, np.float32), (self.n,)).copy())

    def reset(self):
        self.m.fill(0)
        self.v.fill(0)
        self.t = 0

    def state_dict(self):
        return {"m": self.m.to_numpy(), "v": self.v.to_numpy(), "t": self.t}

    def load_state_dict(self, s):
        self.m.from_numpy(np.asarray(s["m"], np.float32))
        self.v.from_numpy(np.asarray(s["v"], np.float32))
        self.t = int(s["t"])


def cover(segments, n):
    """Sorted, disjoint (start, stop) ranges covering [0, n): the given ones plus the gaps."""
    out, pos = [], 0
    for a, b in sorted((max(0, int(a)), min(n, int(b))) for a, b in (segments or ())):
        if b <= a:
            continue
        if a < pos:
            raise ValueError("overlapping segments")
        if a > pos:
            out.append((pos, a))
        out.append((a, b))
        pos = b
    if pos < n:
        out.append((pos, n))
    return out


class Adam(_FieldOptimizer):
    """Adam over x (see the module doc). eps_mode: "absolute" (default, Dr.Jit's) or "relative";
    eps: None -> the mode's default (1e-8, 1e-3); segments: contiguous (start, stop) ranges, each its
    own group for the relative ε (default: all of x one group)."""

    def __init__(self, x, g, lr=1e-2, beta1=0.9, beta2=0.999, eps=None, lo=None, hi=None, eps_mode=DEFAULT_EPS_MODE,
                 segments=None):
        super().__init__(x, g, lr, lo, hi)
        if eps_mode not in EPS_MODES:
            raise ValueError(f"eps_mode must be one of {EPS_MODES}, got {eps_mode!r}")
        self.beta1, self.beta2, self.eps_mode = beta1, beta2, eps_mode
        self.eps = DEFAULT_EPS[eps_mode] if eps is None else float(eps)
        self.seg_start = self.seg_eps2 = None
        self._set_segments(segments)

    def _set_segments(self, segments):
        self.segments = cover(segments, self.n) or [(0, self.n)]
        # ε² per segment (not per element: n fewer values), found by the element's index
        if self.seg_start is None or self.seg_start.shape[0] != len(self.segments):
            self.seg_start = ti.field(ti.i32, len(self.segments))
            self.seg_eps2 = ti.field(self.x.dtype, len(self.segments))
        self.seg_start.from_numpy(np.array([a for a, _ in self.segments], np.int32))
        self._sums = np.zeros(max([(b - a + BLOCK - 1) // BLOCK for a, b in self.segments] + [1]), np.float32)
        if self.eps_mode == "absolute":
            self.seg_eps2.fill(self.eps * self.eps)

    def reconfigure(self, lr, lo=None, hi=None, segments=None):
        if not super().reconfigure(lr, lo, hi):
            return False
        self._set_segments(segments)
        return True

    def step(self):
        self.t += 1
        _adam_moments(self.g, self.m, self.v, self.n, self.beta1, self.beta2)
        if self.eps_mode == "relative":
            e2 = np.zeros(len(self.segments), np.float32)
            for k, (a, b) in enumerate(self.segments):
                nb = (b - a + BLOCK - 1) // BLOCK
                _block_sums(self.v, self._sums, a, b, BLOCK)
                mean_v = self._sums[:nb].astype(np.float64).sum() / max(b - a, 1)
                e2[k] = self.eps * self.eps * mean_v
            self.seg_eps2.from_numpy(e2)
        scale = float(np.sqrt(1.0 - self.beta2 ** self.t) / (1.0 - self.beta1 ** self.t))
        _adam_apply(self.x, self.m, self.v, self.seg_start, self.seg_eps2, len(self.segments), self.lr, self.lo,
                    self.hi, self.bounded, self.n, scale)


class SGD(_FieldOptimizer):
    def __init__(self, x, g, lr=1e-2, momentum=0.0, lo=None, hi=None):
        super().__init__(x, g, lr, lo, hi)
        self.momentum = momentum

    def step(self):
        self.t += 1
        _sgd_step(self.x, self.g, self.m, self.lr, self.lo, self.hi, self.bounded, self.n, self.momentum)
