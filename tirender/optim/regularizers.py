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
    D, H, W = x.shape
    n = (D - 1) * (H - 1) * (W - 1)
    g = []
    for a, res in ((2, W), (1, H), (0, D)):          # x, y, z
        e = np.diff(x, axis=a) * (res - 1)           # edge differences along axis a
        others = [b for b in range(3) if b != a]
        c = e
        for b in others:                             # average the cell's four edges
            c = 0.5 * (np.take(c, range(c.shape[b] - 1), axis=b) + np.take(c, range(1, c.shape[b]), axis=b))
        g.append(c)
    r = np.sqrt(sum(c * c for c in g))
    val = float(((r - 1.0) ** 2).sum() / n)
    k = 2.0 * (r - 1.0) / np.maximum(r, 1e-12) / n
    out = np.zeros_like(x)
    for (a, res), c in zip(((2, W), (1, H), (0, D)), g):
        d = k * c                                    # ∂val/∂(cell gradient component)
        others = [b for b in range(3) if b != a]
        for b in others:                             # adjoint of the averaging: spread back to the edges
            pad_lo = [(0, 0)] * 3
            pad_hi = [(0, 0)] * 3
            pad_lo[b] = (1, 0)
            pad_hi[b] = (0, 1)
            d = 0.5 * (np.pad(d, pad_hi) + np.pad(d, pad_lo))
        d = d * (res - 1)                            # adjoint of the edge differences
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[a] = slice(0, -1)
        hi[a] = slice(1, None)
        out[tuple(lo)] -= d
        out[tuple(hi)] += d
    return val, out.astype(np.float32)
