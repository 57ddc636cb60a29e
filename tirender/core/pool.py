"""The parameter pool as textures and volumes see it: a value of C channels (1 or 3) at an offset.

``value(st, o, c)`` reads it as RGB (a 1-channel value is replicated); ``add_gradient(st, o, c, d)``
is its adjoint: it adds d (RGB; summed over the channels for C = 1) to ``st.grad_fx`` in
deterministic fixed point (core/fixed_point.py; the scale is ``st.info_f[INFO_GRAD_SCALE]``, the
largest |d| added is recorded with ``track_max``) with ti.atomic_add. ``st.grad_fx`` holds
``st.grad_copies - 1`` more copies of the pool's first ``st.grad_hot`` entries (storage.py) to spread the
atomics on parameters every thread adds into (a constant reflectance); launch.fold_gradients sums them.

On a software Vulkan device (Mesa's lavapipe) integer atomics inside loops lose additions (Taichi
emits a memory barrier before each; lavapipe mishandles barriers in loops), so there the gradient
is added to the float twin ``st.grad`` instead: correct, but not bit-reproducible run to run.

Forward mode (tirender/forward.py) lifts the same adjoint code to tangents by swapping this sink:
kernels given a ``Tangent`` view of the storage (every field of st, plus a direction v in the pool's
layout and a per-thread accumulator) add <d, v[o:o+c]> to their thread's accumulator instead of
adding d to the gradient — the replay of one sample with δL = e_c then yields <∂L_c/∂π, v>.
"""
import taichi as ti

from .. import backend
from .fixed_point import INFO_GRAD_SCALE, SLOT_GRAD, finite_or_zero, to_fixed, track_max
from .math import vec3
from .view import StorageView


@ti.func
def _read(f: ti.template(), o, c):
    """A value of c channels (1 or 3) at offset o of the pool-shaped field f, as RGB (1 channel replicated)."""
    v = vec3(0.0)
    if c == 1:
        v = vec3(f[o])
    else:
        v = vec3(f[o], f[o + 1], f[o + 2])
    return v


@ti.func
def value(st: ti.template(), o, c):
    return _read(st.pool, o, c)


@ti.data_oriented
class Tangent(StorageView):
    """The storage st as forward-mode kernels see it: every attribute of st, plus
    ``tan_v`` (pool capacity, float: the direction v in the pool's layout) and ``tan_acc`` (one
    float per thread that can run a kernel's pixel loop: ti.global_thread_idx() indexes it, so CPU
    and CUDA only). One view per storage (``Tangent.of``): kernels compile once against it."""

    TANGENT = True
    ATTR = "tangent_view"

    def __init__(self, st):
        super().__init__(st)
        self.tan_v = ti.field(float, st.caps["pool"])
        self.tan_acc = ti.field(float, st.caps["pixels"] + 4096)   # CUDA: ≤ pixels + one block; CPU: threads


@ti.func
def direction(st: ti.template(), o, c):
    """Forward mode's direction v at a value of C channels at offset o (st a Tangent view), as ``value`` reads
    the parameter: the tangent of that value."""
    return _read(st.tan_v, o, c)


@ti.func
def tangent_reset(st: ti.template()):
    """Zero this thread's tangent accumulator (forward mode; st a Tangent view)."""
    st.tan_acc[ti.global_thread_idx()] = 0.0


@ti.func
def tangent_value(st: ti.template()):
    """This thread's accumulated <∂L/∂π, v> since tangent_reset."""
    return st.tan_acc[ti.global_thread_idx()]


@ti.func
def add_gradient(st: ti.template(), o, c, d_in):
    d = finite_or_zero(d_in)          # a NaN/Inf contribution is dropped, as the film drops such samples
    s = st.info_f[INFO_GRAD_SCALE]  # fixed-point gradient scale
    if ti.static(hasattr(st, "TANGENT")):
        t = 0.0
        if c == 1:
            t = (d[0] + d[1] + d[2]) * st.tan_v[o]
        else:
            t = d[0] * st.tan_v[o] + d[1] * st.tan_v[o + 1] + d[2] * st.tan_v[o + 2]
        st.tan_acc[ti.global_thread_idx()] += t
    elif ti.static(backend.software_vulkan()):
        if c == 1:
            ti.atomic_add(st.grad[o], d[0] + d[1] + d[2])
        else:
            for k in ti.static(range(3)):
                ti.atomic_add(st.grad[o + k], d[k])
    elif c == 1:
        v = d[0] + d[1] + d[2]
        track_max(st.acc_max, SLOT_GRAD, o, ti.abs(v))
        fx = to_fixed(v, s)
        ti.atomic_add(st.grad_fx[_slot(st, fx, o, 1)], fx)
    else:
        track_max(st.acc_max, SLOT_GRAD, o, ti.abs(d).max())
        f0 = to_fixed(d[0], s)
        f1 = to_fixed(d[1], s)
        f2 = to_fixed(d[2], s)
        j = _slot(st, f0 ^ f1 ^ f2, o, 3)
        ti.atomic_add(st.grad_fx[j], f0)
        ti.atomic_add(st.grad_fx[j + 1], f1)
        ti.atomic_add(st.grad_fx[j + 2], f2)


@ti.kernel
def fold_copies(st: ti.template(), out: ti.types.ndarray(), n: ti.i32):
    """out[i] = st.grad_fx[i] plus its copies (i < grad_hot), i < n (int64; only n values leave the device)."""
    for i in range(n):
        acc = st.grad_fx[i]
        if i < ti.static(st.grad_hot):
            for k in ti.static(range(1, st.grad_copies)):
                acc += st.grad_fx[ti.static(st.caps["pool"] + (k - 1) * st.grad_hot) + i]
        out[i] = acc


@ti.func
def _slot(st: ti.template(), fx, o, c):
    """Index in st.grad_fx of an add fx to the c pool entries from o: a copy chosen by the low bits of the
    fixed-point value itself, so that threads adding into one parameter at once mostly hit different
    copies (no cache-line ping-pong), for parameters within the first grad_hot entries (the copies'
    span); the fold sums the copies (integer sums: the order does not matter, the result stays
    bit-deterministic)."""
    res = o
    if ti.static(st.grad_copies > 1):
        k = ti.cast((fx ^ (fx >> 11)) & (st.grad_copies - 1), ti.i32)
        if k > 0 and o + c <= ti.static(st.grad_hot):
            res = ti.static(st.caps["pool"] - st.grad_hot) + k * ti.static(st.grad_hot) + o
    return res
