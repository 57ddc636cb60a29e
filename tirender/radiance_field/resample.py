"""Resampling of cell-centred voxel grids between resolutions (the coarse-to-fine stage change).

Grids are numpy arrays (R, R, R, C) indexed [z, y, x, channel] with values at voxel centres, the
layout of :meth:`RadianceField.to_numpy`. A destination voxel centre i (of R_d) sits at the source
coordinate u = (i + ½)·R_s/R_d − ½ (in source voxels), clamped to [0, R_s − 1] — the same
clamp-to-edge as the field's lookup, so the field beyond the outer centres stays constant.

Methods (separable, one axis at a time; float32 grids stay float32 — the field's own precision,
2-3× faster on a 64³ × 28 grid — anything else is computed in float64):
    "trilinear": linear interpolation of the two nearest source centres per axis.
    "cubic":     Catmull-Rom (Keys, a = −½) interpolation of the four nearest centres per axis
                 (taps beyond the edge are replicated): reproduces polynomials up to degree 2
                 where all four taps are inside the grid; trilinear only reproduces degree 1.
"""
import numpy as np

METHODS = ("cubic", "trilinear")


def _axis_weights(Rs, Rd, method):
    """(taps (Rd, k) int source indices, weights (Rd, k) float64) of one axis, k = 2 or 4."""
    u = np.clip((np.arange(Rd) + 0.5) * (Rs / Rd) - 0.5, 0.0, Rs - 1.0)
    i0 = np.clip(np.floor(u).astype(np.int64), 0, max(Rs - 2, 0))
    t = u - i0
    if method == "trilinear":
        taps = np.stack([i0, i0 + 1], 1)
        w = np.stack([1.0 - t, t], 1)
    elif method == "cubic":
        taps = np.stack([i0 - 1, i0, i0 + 1, i0 + 2], 1)
        t2, t3 = t * t, t * t * t
        w = 0.5 * np.stack([-t3 + 2 * t2 - t, 3 * t3 - 5 * t2 + 2, -3 * t3 + 4 * t2 + t, t3 - t2], 1)
    else:
        raise ValueError(f"unknown resampling method '{method}' ({', '.join(METHODS)})")
    return np.clip(taps, 0, Rs - 1), w


CHANNEL_BLOCK = 4   # channels resampled at a time: the temporaries of a 64³ × 28 grid stay ~1/7 of its size


def resample(a, res, method="cubic"):
    """Grid a (R, R, R, C) (or (R, R, R)) resampled to (res, res, res[, C]) by ``method``
    (float32 in → float32 out, else float64), CHANNEL_BLOCK channels at a time."""
    a = np.asarray(a)
    dt = np.float32 if a.dtype == np.float32 else np.float64
    if a.ndim != 4 or a.shape[3] <= CHANNEL_BLOCK:
        return _resample3(a.astype(dt, copy=False), res, method)
    out = np.empty((int(res),) * 3 + (a.shape[3],), dt)
    for c in range(0, a.shape[3], CHANNEL_BLOCK):
        out[..., c:c + CHANNEL_BLOCK] = _resample3(a[..., c:c + CHANNEL_BLOCK].astype(dt, copy=False), res, method)
    return out


def _resample3(out, res, method):
    """The three separable passes over the leading axes of out (float32 or float64)."""
    for axis in range(3):
        taps, w = _axis_weights(out.shape[axis], int(res), method)
        w = w.astype(out.dtype)
        shape = [1] * out.ndim
        shape[axis] = int(res)
        acc = 0.0
        for k in range(taps.shape[1]):
            acc = acc + np.take(out, taps[:, k], axis=axis) * w[:, k].reshape(shape)
        out = acc
    return out


def resample_field_params(p, res, method="cubic", density_activation="relu"):
    """Radiance-field parameters p (R, R, R, C) [channel 0 raw density] resampled to res.

    Under a ReLU density the cubic result's undershoot is clamped: a raw density never falls below
    min(trilinear value, 0), so the cubic lobes cannot create negative ("dead": σ = 0 and zero
    gradient) voxels where the trilinear field is non-negative, and do not move negative ones below
    the trilinear value. Softplus densities (any raw value is meaningful) are left as they are."""
    out = resample(p, res, method)
    if method == "cubic" and density_activation == "relu":
        tri = resample(np.asarray(p)[..., 0], res, "trilinear")
        out[..., 0] = np.maximum(out[..., 0], np.minimum(tri, 0.0))
    return out
