"""Schedules: samples per pixel over iterations, and multi-resolution texture upsampling."""
import numpy as np

from ..errors import ConfigError


def spp_at(iteration, base, double_every=None, max_spp=None):
    """spp for an iteration: `base`, doubled every `double_every` iterations, capped at `max_spp`."""
    spp = int(base)
    if double_every:
        spp = base * (2 ** (iteration // int(double_every)))
    if max_spp:
        spp = min(spp, int(max_spp))
    return max(int(spp), 1)


def resolution_at(iteration, schedule):
    """schedule: list of [start_iteration, resolution] (sorted); the active resolution (int or [h, w])."""
    res = None
    for it, r in schedule:
        if iteration >= it:
            res = r
    return res


def upsample(tex, h, w):
    """Bilinear resampling of a texture (H, W, C) to (h, w, C) (texel centres aligned)."""
    H, W, C = tex.shape
    if (H, W) == (h, w):
        return tex.copy()
    ys = (np.arange(h) + 0.5) * H / h - 0.5
    xs = (np.arange(w) + 0.5) * W / w - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, H - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, W - 1)
    y1 = np.clip(y0 + 1, 0, H - 1)
    x1 = np.clip(x0 + 1, 0, W - 1)
    fy = np.clip(ys - np.floor(ys), 0, 1)[:, None, None]
    fx = np.clip(xs - np.floor(xs), 0, 1)[None, :, None]
    a = tex[y0][:, x0]
    b = tex[y0][:, x1]
    c = tex[y1][:, x0]
    d = tex[y1][:, x1]
    return ((1 - fy) * ((1 - fx) * a + fx * b) + fy * ((1 - fx) * c + fx * d)).astype(np.float32)


def parse_multires(spec, file, key):
    if not isinstance(spec, list) or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in spec):
        raise ConfigError("expected a list of [iteration, resolution] pairs", file, key)
    out = sorted((int(a), b) for a, b in spec)
    if out[0][0] != 0:
        raise ConfigError("the first multi-resolution stage must start at iteration 0", file, key)
    return out
