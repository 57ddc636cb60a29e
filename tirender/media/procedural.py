"""Procedural density grids (numpy): a smoke-like plume used as ground truth by
configs/volume_recovery.yaml (configs/volumes/smoke64.vol was written by ``write_smoke``)."""
import numpy as np


def _value_noise(res, freq, rng):
    """Smooth random field on a res^3 grid: a (freq+1)^3 random lattice, trilinearly interpolated."""
    from .grid import resample_grid
    lat = rng.uniform(0.0, 1.0, (freq + 1,) * 3 + (1,)).astype(np.float32)
    # sample the lattice at the voxel centres of the target grid (lattice spans the unit cube)
    return resample_grid(lat, res)[..., 0]


def smoke(res=64, seed=3):
    """A rising, twisting plume of smoke in [-1, 1]^3 (density in [0, 1], (res,)*3 + (1,), [z, y, x])."""
    rng = np.random.default_rng(seed)
    c = (np.arange(res) + 0.5) / res * 2 - 1
    z, y, x = np.meshgrid(c, c, c, indexing="ij")
    # plume axis: a gentle helix rising along +y, widening with height
    ax = 0.25 * np.sin(2.2 * y + 0.5)
    az = 0.2 * np.cos(1.7 * y)
    radius = 0.28 + 0.2 * (y + 1) / 2
    r2 = ((x - ax) ** 2 + (z - az) ** 2) / radius ** 2
    body = np.exp(-1.5 * r2)
    # a puff at the top
    body += 0.8 * np.exp(-(((x - 0.15) ** 2 + (y - 0.55) ** 2 + (z + 0.1) ** 2) / 0.09))
    ramp = np.clip((y + 0.85) / 0.25, 0, 1) * np.clip((0.9 - y) / 0.2, 0, 1)
    noise = 0.55 * _value_noise(res, 4, rng) + 0.3 * _value_noise(res, 8, rng) + 0.15 * _value_noise(res, 16, rng)
    d = body * ramp * (0.35 + 1.1 * noise) - 0.12
    d = np.clip(d, 0.0, None)
    d /= d.max()
    return d[..., None].astype(np.float32)


def write_smoke(path, res=64, seed=3):
    from .volfile import write_vol
    write_vol(path, smoke(res, seed), (-1, -1, -1), (1, 1, 1), encoding="uint8")
