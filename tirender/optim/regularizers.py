"""Regularisers on parameters (numpy): total variation for textures, the eikonal penalty for SDF grids."""
import numpy as np


def tv(tex, eps=1e-4):
    """Isotropic-ish total variation of a texture (H, W, C), smoothed: mean over texels of
    sqrt(dx² + dy² + eps) - sqrt(eps). Returns (value, gradient shaped like tex)."""
    x = tex.astype(np.float64)
    dx = np.zeros_like(x)
    dy = np.zeros_like(x)
    dx[:, :-1] = x[:, 1:] - x[:, :-1]
    dy[:-1, :] = x[1:, :] - x[:-1, :]
    mag = np.sqrt(dx * dx + dy * dy + eps)
    n = x.size
    val = float((mag - np.sqrt(eps)).sum() / n)
    gx = dx / mag / n
    gy = dy / mag / n
    g = np.zeros_like(x)
    g[:, :-1] -= gx[:, :-1]
    g[:, 1:] += gx[:, :-1]
    g[:-1, :] -= gy[:-1, :]
    g[1:, :] += gy[:-1, :]
    return val, g.astype(np.float32)


def eikonal(f):
    """The eikonal penalty of an SDF grid f (D, H, W) over the unit cube (node (x, y, z) at (x, y, z) / (res - 1),
    scene/sdfgrid.py): mean over cells of (|∇f| - 1)², ∇f the trilinear function's gradient at each cell's centre
    (per axis the mean of the cell's four edge differences over the node spacing). Zero for a true distance
    function; it keeps an optimised grid one (Vicini et al. 2022 redistance instead). Returns (value, gradient
    shaped like f)."""
    x = np.asarray(f, np.float64)
    axes = ((2, x.shape[2] - 1), (1, x.shape[1] - 1), (0, x.shape[0] - 1))      # (array axis, cells) of x, y, z
    n = axes[0][1] * axes[1][1] * axes[2][1]
    g = []
    for a, cells in axes:
        c = np.diff(x, axis=a) * cells                                          # edge differences along a
        for b in (b for b in range(3) if b != a):                               # the mean of the cell's four
            c = 0.5 * (np.delete(c, -1, axis=b) + np.delete(c, 0, axis=b))
        g.append(c)
    r = np.sqrt(sum(c * c for c in g))
    val = float(((r - 1.0) ** 2).sum() / n)
    k = 2.0 * (r - 1.0) / np.maximum(r, 1e-12) / n
    out = np.zeros_like(x)
    for (a, cells), c in zip(axes, g):
        d = k * c                                                               # ∂val/∂(the cells' component a)
        for b in (b for b in range(3) if b != a):
            d = 0.5 * (_pad1(d, b, 1) + _pad1(d, b, 0))
        out += (_pad1(d, a, 0) - _pad1(d, a, 1)) * cells
    return val, out.astype(np.float32)


def _pad1(x, axis, side):
    """x with one layer of zeros added on `axis`, before it (side 0) or after it (side 1)."""
    w = [(0, 0)] * x.ndim
    w[axis] = (1, 0) if side == 0 else (0, 1)
    return np.pad(x, w)
