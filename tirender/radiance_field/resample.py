"""Resampling of cell-centred voxel grids between resolutions (the coarse-to-fine stage change).

Grids are numpy arrays (R, R, R, C) indexed [z, y, x, channel] with values at voxel centres, the
layout of :meth:`RadianceField.to_numpy`. A destination voxel centre i (of R_d) sits at the source
coordinate u = (i + ½)·R_s/R_d − ½ (in source voxels), clamped to [0, R_s − 1] — the same
clamp-to-edge as the field's lookup, so the field beyond the outer centres stays constant.

Methods (separable, one axis at a time; float32 grids stay float32 — the field's own precision,
2-3× faster on a 64³ × 28 grid — anything else is computed in float64):
    "trilinear":   linear interpolation of the two nearest source centres per axis.
    "cubic":       Catmull-Rom (Keys, a = −½) through the four nearest centres per axis, clamped to
                   the range [min, max] of the 2×2×2 source centres around the destination point
                   (the trilinear taps): it reproduces quadratics where they are monotone across the
                   cell, and never rings — no value leaves its neighbourhood's range, so a step in
                   the coarse grid (a surface, the edge of empty space) cannot become a negative or
                   larger-than-any-neighbour density or colour.
    "catmull_rom": the same cubic without the clamp (the Catmull-Rom overshoot; for comparison only).

:func:`carry_adam_moments` carries Adam's moments across a stage change (``train.adam_state: carry``).
This module needs only numpy (the Mitsuba port of benchmarks/time_to_quality.py loads it by path).
"""
import numpy as np

METHODS = ("cubic", "trilinear")           # train.upsample
RESAMPLERS = METHODS + ("catmull_rom",)


def _axis_weights(Rs, Rd, method):
    """(taps (Rd, k) int source indices, weights (Rd, k) float64) of one axis, k = 2 or 4."""
    u = np.clip((np.arange(Rd) + 0.5) * (Rs / Rd) - 0.5, 0.0, Rs - 1.0)
    i0 = np.clip(np.floor(u).astype(np.int64), 0, max(Rs - 2, 0))
    t = u - i0
    if method == "trilinear":
        taps = np.stack([i0, i0 + 1], 1)
        w = np.stack([1.0 - t, t], 1)
    elif method in ("cubic", "catmull_rom"):
        taps = np.stack([i0 - 1, i0, i0 + 1, i0 + 2], 1)
        t2, t3 = t * t, t * t * t
        w = 0.5 * np.stack([-t3 + 2 * t2 - t, 3 * t3 - 5 * t2 + 2, -3 * t3 + 4 * t2 + t, t3 - t2], 1)
    else:
        raise ValueError(f"unknown resampling method '{method}' ({', '.join(RESAMPLERS)})")
    return np.clip(taps, 0, Rs - 1), w


CHANNEL_BLOCK = 4   # channels resampled at a time: the temporaries of a 64³ × 28 grid stay ~1/7 of its size


def resample(a, res, method="cubic"):
    """Grid a (R, R, R, C) (or (R, R, R)) resampled to (res, res, res[, C]) by ``method``
    (float32 in → float32 out, else float64), CHANNEL_BLOCK channels at a time."""
    a = np.asarray(a)
    if method not in RESAMPLERS:
        raise ValueError(f"unknown resampling method '{method}' ({', '.join(RESAMPLERS)})")
    dt = np.float32 if a.dtype == np.float32 else np.float64
    if a.ndim != 4 or a.shape[3] <= CHANNEL_BLOCK:
        return _resample_block(a.astype(dt, copy=False), res, method)
    out = np.empty((int(res),) * 3 + (a.shape[3],), dt)
    for c in range(0, a.shape[3], CHANNEL_BLOCK):
        out[..., c:c + CHANNEL_BLOCK] = _resample_block(a[..., c:c + CHANNEL_BLOCK].astype(dt, copy=False), res,
                                                        method)
    return out


def _resample_block(a, res, method):
    if method != "cubic":
        return _resample3(a, res, method)
    out = _resample3(a, res, "catmull_rom")
    np.clip(out, _resample3(a, res, "trilinear", np.minimum), _resample3(a, res, "trilinear", np.maximum), out=out)
    return out


def _resample3(out, res, method, reduce=None):
    """The three separable passes over the leading axes of out (float32 or float64). reduce (np.minimum
    or np.maximum): the per-axis extreme of the taps instead of their weighted sum (the separable
    min / max over the 2×2×2 trilinear neighbourhood)."""
    for axis in range(3):
        taps, w = _axis_weights(out.shape[axis], int(res), method)
        w = w.astype(out.dtype)
        shape = [1] * out.ndim
        shape[axis] = int(res)
        acc = None
        for k in range(taps.shape[1]):
            term = np.take(out, taps[:, k], axis=axis)
            if reduce is None:
                term = term * w[:, k].reshape(shape)
                acc = term if acc is None else acc + term
            else:
                acc = term if acc is None else reduce(acc, term)
        out = acc
    return out


def resample_field_params(p, res, method="cubic", density_activation="relu"):
    """Radiance-field parameters p (R, R, R, C) [channel 0 raw density] resampled to res.

    Under a ReLU density a raw density also never falls below min(trilinear value, 0): where the
    trilinear field is non-negative, the cubic cannot create negative ("dead": σ = 0 and zero
    gradient) voxels, even when a negative coarse neighbour allows it within the local range.
    Softplus densities (any raw value is meaningful) keep the clamped cubic as it is."""
    out = resample(p, res, method)
    if method == "cubic" and density_activation == "relu":
        tri = resample(np.asarray(p)[..., 0], res, "trilinear")
        out[..., 0] = np.maximum(out[..., 0], np.minimum(tri, 0.0))
    return out


def carry_adam_moments(m, v, t, res, beta1, beta2, k):
    """Adam's moments m, v (R, R, R, C grids after t steps) carried to resolution res.

    The bias-corrected moments m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ) are resampled **trilinearly**
    whatever the grid's method: with non-negative weights |Σ wᵢ m̂ᵢ| ≤ Σ wᵢ|m̂ᵢ| ≤ ρ Σ wᵢ √v̂ᵢ ≤
    ρ √(Σ wᵢ v̂ᵢ) (Cauchy-Schwarz), so an element's ratio |m̂|/√v̂ — its Adam step in units of lr —
    never exceeds the largest ratio ρ among its coarse neighbours. (Catmull-Rom's negative lobes
    break this: they push v̂ to ≤ 0 beside a large v̂ while m̂ stays non-zero, and those elements then
    step by m/ε, 100–400 × lr measured at 32³ → 64³.) Then |m̂| ≤ √v̂ per element: the first carried
    steps are at most lr, the size of Adam's own first step. Both are rescaled by the chain rule — a
    coarse value's gradient is the sum over the s = (R_new/R_old)³ finer values it becomes, so
    m̂ ← m̂/s, v̂ ← v̂/s² — and re-enter as a prior worth k steps: m = (1 − β₁ᵏ)m̂, v = (1 − β₂ᵏ)v̂,
    t = k. Returns (m, v, k) as float32 grids."""
    s = (int(res) / m.shape[0]) ** 3
    mh = np.asarray(m, np.float32) * np.float32(1.0 / (1.0 - beta1 ** t))
    vh = np.asarray(v, np.float32) * np.float32(1.0 / (1.0 - beta2 ** t))
    if res != m.shape[0]:
        mh, vh = resample(mh, res, "trilinear"), resample(vh, res, "trilinear")
    vh = np.maximum(vh, 0.0)
    bound = np.sqrt(vh)
    mh = np.clip(mh, -bound, bound)
    return (mh * np.float32((1.0 - beta1 ** k) / s), vh * np.float32((1.0 - beta2 ** k) / s ** 2), int(k))
