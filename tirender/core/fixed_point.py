"""Deterministic accumulation: fixed-point 64-bit integer atomics.

Floating-point atomic adds from parallel threads land in a run-dependent order, so sums differ in
their last bits from run to run. Integer addition is associative: the film and the gradient pool
accumulate ``round(x * scale)`` as i64, which makes a seed fix the image and the gradients bit for
bit on a given backend (PRB's replay and ``--resume`` rely on it).

Film: scale 2^28 (resolution 3.7e-9, capacity 3.4e10 per pixel). Gradients: the scale is chosen per
gradient evaluation from the adjoint image (``grad_scale_for``), resolution ~2.3e-10·max|δ|.
"""
import taichi as ti

FILM_SCALE = float(2 ** 28)


@ti.func
def to_fixed(x, scale):
    return ti.cast(ti.round(x * scale), ti.i64)


def grad_scale_for(max_abs_adjoint):
    """Fixed-point scale for gradients whose per-sample adjoint radiance is at most ~max_abs_adjoint."""
    m = float(max_abs_adjoint)
    if not m > 0.0:
        m = 1.0
    return float(2.0 ** 32) / m
