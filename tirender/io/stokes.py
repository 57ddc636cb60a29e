"""Stokes images (integrators/stokes.py): the four components and PNG views of the polarization state.

    degree_of_linear(S) -> (H, W)    DoLP = √(S1² + S2²) / S0 of the luminance Y of each component
    angle_of_linear(S) -> (H, W)     AoLP = ½ atan2(S2, S1), radians in (−π/2, π/2], from the camera's x axis
    degree_of_circular(S) -> (H, W)  DoCP = S3 / S0 (signed: > 0 right circular)
    save_stokes_set(dir, S)          S0..S3 as ``S<k>.exr`` / ``S<k>.npy`` (linear sRGB, signed), ``stokes.npy``
                                     (4, H, W, 3), and ``dolp.png`` (grey), ``aolp.png`` (hue = angle,
                                     brightness = DoLP: unpolarized is black), ``docp.png`` (red right, blue left)
S: float (4, H, W, 3), row 0 at the top.
"""
import io
import os

import numpy as np

from .atomic import atomic_write_bytes
from .exr import write_exr
from .images import save_diverging_png

_Y = np.array([0.212671, 0.715160, 0.072169])


def _lum(S):
    return np.asarray(S, np.float64) @ _Y


def degree_of_linear(S):
    y = _lum(S)
    return np.where(y[0] > 0, np.sqrt(y[1] ** 2 + y[2] ** 2) / np.where(y[0] > 0, y[0], 1.0), 0.0)


def angle_of_linear(S):
    y = _lum(S)
    return 0.5 * np.arctan2(y[2], y[1])


def degree_of_circular(S):
    y = _lum(S)
    return np.where(y[0] > 0, y[3] / np.where(y[0] > 0, y[0], 1.0), 0.0)


def _hsv(h, v):
    """RGB (…, 3) in [0, 1] of hue h in [0, 1), saturation 1, value v."""
    k = (np.asarray(h)[..., None] * 6.0 + np.array([5.0, 3.0, 1.0])) % 6.0
    return np.asarray(v)[..., None] * (1.0 - np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0))


def _png(path, rgb8):
    import imageio.v3 as iio
    buf = io.BytesIO()
    iio.imwrite(buf, rgb8, extension=".png", plugin="pillow")
    atomic_write_bytes(path, buf.getvalue())


def _npy(path, arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    atomic_write_bytes(path, buf.getvalue())


NAMES = ("stokes.npy", "dolp.png", "aolp.png", "docp.png") + tuple(f"S{k}.{e}" for k in range(4) for e in ("exr", "npy"))


def save_stokes_set(dir, S):
    """Write the Stokes images of S (module doc) into dir; returns the paths written."""
    S = np.asarray(S, np.float32)
    if S.ndim != 4 or S.shape[0] != 4 or S.shape[3] != 3:
        raise ValueError(f"expected Stokes images of shape (4, H, W, 3), got {S.shape}")
    os.makedirs(dir, exist_ok=True)
    paths = []
    for k in range(4):
        write_exr(os.path.join(dir, f"S{k}.exr"), np.ascontiguousarray(S[k]))
        _npy(os.path.join(dir, f"S{k}.npy"), np.ascontiguousarray(S[k]))
        paths += [os.path.join(dir, f"S{k}.exr"), os.path.join(dir, f"S{k}.npy")]
    _npy(os.path.join(dir, "stokes.npy"), S)
    dolp = np.clip(degree_of_linear(S), 0.0, 1.0)
    _png(os.path.join(dir, "dolp.png"), np.round(np.repeat(dolp[..., None], 3, -1) * 255).astype(np.uint8))
    hue = (angle_of_linear(S) + 0.5 * np.pi) / np.pi % 1.0
    _png(os.path.join(dir, "aolp.png"), np.round(_hsv(hue, dolp) * 255).astype(np.uint8))
    save_diverging_png(os.path.join(dir, "docp.png"), degree_of_circular(S), scale=1.0)
    return paths + [os.path.join(dir, n) for n in ("stokes.npy", "dolp.png", "aolp.png", "docp.png")]
