"""Deterministic accumulation that cannot overflow silently: 64-bit fixed point with a scale chosen
from the values actually accumulated.

Floating-point atomic adds from parallel threads land in a run-dependent order, so sums differ in
their last bits from run to run. Integer addition is associative: the film and the gradient pool
accumulate ``q = round(x · s)`` as i64, which makes a seed fix the image and the gradients bit for
bit on a given backend (PRB's replay and ``--resume`` rely on it).

The scale s is a power of two chosen per kernel launch so that no sum can leave the i64 range:
a launch adds at most ``adds`` values into one accumulator, each ``|x| ≤ m``; with
``s = scale_for(m, adds)`` every partial sum stays within ``adds · m · s ≤ 2^62``. The kernels record
m exactly (``track_max``: an integer atomic max of the float's bit pattern, which orders like the
value for x ≥ 0, so it is deterministic too). The host layer (launch.py) launches with a scale from
a guess (the last launch's m), reads the recorded m, and redoes the launch with ``scale_for(m)``
when the guess's scale differs from it. The accepted scale is therefore a function of the launch's
own values, never of the history: a seed still fixes every bit. Scale exponents are multiples of
``BUCKET`` so that a guess from the previous launch is almost always right (a redo costs one
launch); the resolution is then at least 2^(62 - BUCKET) / adds units of m, i.e. relative
precision ~1e-14 for the film. Each launch's sums are folded into float64 on the host, divided by
their scale, so launches with different scales combine exactly (to f64 rounding).

Filter weights (≤ 1 per sample) keep a fixed scale ``WEIGHT_SCALE`` (resolution 3.7e-9).
"""
import math

import taichi as ti

WEIGHT_SCALE = float(2 ** 28)
HEADROOM_BITS = 62
BUCKET = 8
SCALE_EXP_RANGE = (-120, 120)     # power-of-two scales that f32 represents, with room for x·s
N_SLOTS = 64                      # max-tracking slots per kind (spread to limit contention)
SLOT_FILM, SLOT_GRAD = 0, N_SLOTS  # offsets in st.acc_max
F32_MAX = 3.4028234663852886e38
INFO_GRAD_SCALE, INFO_FILM_SCALE = 2, 4   # slots of st.info_f (scene/storage.py)


@ti.func
def to_fixed(x, scale):
    return ti.cast(ti.round(x * scale), ti.i64)


@ti.func
def finite_or_zero(v):
    """v (a vector), or 0 if any component is NaN or ±Inf (bit test of its f32 value: immune to
    fast-math folding; in f64 builds magnitudes beyond the f32 range count as infinite too)."""
    ok = True
    for i in ti.static(range(v.n)):
        if (ti.bit_cast(ti.cast(v[i], ti.f32), ti.i32) & 0x7F800000) == 0x7F800000:
            ok = False
    res = v
    if not ok:
        res = ti.Vector([0.0 for _ in ti.static(range(v.n))], dt=float)
    return res


@ti.func
def track_max(slots: ti.template(), base, i, m):
    """Record m ≥ 0 in slot base + (i mod N_SLOTS) of st.acc_max (integer max of the bit pattern;
    the plain read first skips the atomic when the slot already holds more)."""
    b = ti.bit_cast(ti.cast(m, ti.f32), ti.i32)
    k = base + (i & (N_SLOTS - 1))
    if b > slots[k]:
        ti.atomic_max(slots[k], b)


def slots_max(bits):
    """The float recorded by track_max in the int32 array `bits` (0 if nothing was recorded)."""
    import numpy as np
    b = int(np.max(bits)) if len(bits) else 0
    return float(np.array([max(b, 0)], np.int32).view(np.float32)[0])


def scale_for(m, adds):
    """The canonical power-of-two scale for `adds` values of magnitude ≤ m into one accumulator:
    the largest 2^(BUCKET·j) with adds · m · s ≤ 2^HEADROOM_BITS (clamped to the f32 range)."""
    m = float(m) * float(max(adds, 1))
    lo, hi = SCALE_EXP_RANGE
    if not m > 0.0 or not math.isfinite(m):
        e = hi if not m > 0.0 else lo
    else:
        e = HEADROOM_BITS - math.ceil(math.log2(m))
        if math.ldexp(m, e) > 2.0 ** HEADROOM_BITS:   # log2 rounding
            e -= 1
        e = BUCKET * math.floor(e / BUCKET)
    e = min(max(e, BUCKET * math.ceil(lo / BUCKET)), BUCKET * math.floor(hi / BUCKET))
    return math.ldexp(1.0, e)


def grad_scale_for(max_abs_adjoint):
    """A fixed-point scale for direct kernel tests whose adds are at most ~max_abs_adjoint each."""
    m = float(max_abs_adjoint)
    if not m > 0.0:
        m = 1.0
    return float(2.0 ** 32) / m
