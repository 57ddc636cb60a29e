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
a guess (the last launch's m with this launch's own ``adds``), reads the recorded m, and redoes the
launch with ``scale_for(m, adds)`` when the guess's scale differs from it. The accepted scale is
therefore a function of the launch's own values, never of the history: a seed still fixes every
bit. m is a per-sample quantity (the largest single add, not the largest sum), and the launch's
size enters only through ``adds``, exactly: the magnitude alone is rounded up to a bucket of
2^BUCKET, so a guess from a launch of another size (a 4-spp preview before a 64-spp render, an spp
schedule, progressive passes) is right unless the largest sample itself moved across a bucket
boundary (``launch.STATS`` counts the redos). The resolution is then at least 2^(62 - BUCKET - 1)
/ adds units of m, i.e. relative precision ~1e-13 for the film. Each launch's sums are folded into
float64 on the host, divided by their scale, so launches with different scales combine exactly (to
f64 rounding).

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


def _ceil_log2(x):
    """ceil(log2 x) exactly, for a finite x > 0."""
    f, e = math.frexp(x)       # x = f 2^e, 0.5 <= f < 1
    return e - 1 if f == 0.5 else e


def scale_for(m, adds, per=1):
    """The canonical power-of-two scale for `adds` values of magnitude ≤ m into one accumulator:
    2^e with e = HEADROOM_BITS - ceil_B(log2(m·per)) + floor(log2 per) - ceil(log2 adds), ceil_B
    rounding up to a multiple of BUCKET, clamped to the f32 range; adds · m · s ≤ 2^HEADROOM_BITS.

    The two factors are bucketed apart: the launch's work (``adds``, known before the launch) enters
    exactly, and only the magnitude m·per (``per`` ≥ 1: a normaliser known before the launch that
    makes m·per independent of the launch's size, e.g. the spp of a gradient whose adjoint image is
    divided by the filter-weight sums) is rounded to a bucket of 2^BUCKET. So a guess of m from a
    launch of another size (another spp) gives the canonical scale unless m·per itself moved across
    a bucket boundary."""
    m = float(m)
    adds = int(max(adds, 1))
    per = max(float(per), 1.0)
    lo, hi = SCALE_EXP_RANGE
    if not m > 0.0:
        e = hi
    elif not math.isfinite(m * per):
        e = lo
    else:
        e = (HEADROOM_BITS - BUCKET * math.ceil(_ceil_log2(m * per) / BUCKET) + (math.frexp(per)[1] - 1)
             - (adds - 1).bit_length())
    return math.ldexp(1.0, min(max(e, lo), hi))


def grad_scale_for(max_abs_adjoint):
    """A fixed-point scale for direct kernel tests whose adds are at most ~max_abs_adjoint each."""
    m = float(max_abs_adjoint)
    if not m > 0.0:
        m = 1.0
    return float(2.0 ** 32) / m
