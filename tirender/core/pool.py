"""The parameter pool as textures and volumes see it: a value of C channels (1 or 3) at an offset.

``value(st, o, c)`` reads it as RGB (a 1-channel value is replicated); ``add_gradient(st, o, c, d)``
is its adjoint: it adds d (RGB; summed over the channels for C = 1) to ``st.grad_fx`` in
deterministic fixed point (core/fixed_point.py; the scale is ``st.info_f[INFO_GRAD_SCALE]``, the
largest |d| added is recorded with ``track_max``) with ti.atomic_add.

On a software Vulkan device (Mesa's lavapipe) integer atomics inside loops lose additions (Taichi
emits a memory barrier before each; lavapipe mishandles barriers in loops), so there the gradient
is added to the float twin ``st.grad`` instead: correct, but not bit-reproducible run to run.
"""
import taichi as ti

from .. import backend
from .fixed_point import INFO_GRAD_SCALE, SLOT_GRAD, finite_or_zero, to_fixed, track_max
from .math import vec3


@ti.func
def value(st: ti.template(), o, c):
    v = vec3(0.0)
    if c == 1:
        v = vec3(st.pool[o])
    else:
        v = vec3(st.pool[o], st.pool[o + 1], st.pool[o + 2])
    return v


@ti.func
def add_gradient(st: ti.template(), o, c, d_in):
    d = finite_or_zero(d_in)          # a NaN/Inf contribution is dropped, as the film drops such samples
    s = st.info_f[INFO_GRAD_SCALE]  # fixed-point gradient scale
    if ti.static(backend.software_vulkan()):
        if c == 1:
            ti.atomic_add(st.grad[o], d[0] + d[1] + d[2])
        else:
            for k in ti.static(range(3)):
                ti.atomic_add(st.grad[o + k], d[k])
    elif c == 1:
        v = d[0] + d[1] + d[2]
        track_max(st.acc_max, SLOT_GRAD, o, ti.abs(v))
        ti.atomic_add(st.grad_fx[o], to_fixed(v, s))
    else:
        track_max(st.acc_max, SLOT_GRAD, o, ti.abs(d).max())
        ti.atomic_add(st.grad_fx[o], to_fixed(d[0], s))
        ti.atomic_add(st.grad_fx[o + 1], to_fixed(d[1], s))
        ti.atomic_add(st.grad_fx[o + 2], to_fixed(d[2], s))
