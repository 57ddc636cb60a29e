"""Regularisers on parameters (numpy): total variation for textures."""
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
