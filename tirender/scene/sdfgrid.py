"""Mitsuba's ``sdfgrid`` shape on the host: the grid read from its file, the voxels the surface crosses as BVH
primitives, and the per-grid rows the device reads (core/sdf.py: layout and the ray query).

Object space is the unit cube [0, 1]^3 with the grid's nodes at its corners (node (x, y, z) at (x, y, z) / (res - 1)),
as Mitsuba's sdfgrid.cpp; the surface is where the trilinear interpolation of the values is 0 (positive outside).
A voxel is a primitive when its 8 values are neither all > 0 nor all < 0; its box is Mitsuba's tight box (the zero
crossings on its edges, and its corners where the value is 0; Hansson-Söderlund and Akenine-Möller 2023), in world
space the box around that box's 8 corners after to_world (any affine to_world: instances are flattened into it).
"""
import numpy as np

from ..errors import ConfigError
from .implicit import CORNERS, SDF, Implicit, box_under

NORMALS = ("smooth", "analytic")


def read_grid(path, file, key):
    """The (D, H, W) float32 values of a one-channel Mitsuba .vol file, each side at least 2 nodes."""
    from ..media.volfile import read_vol
    data, _lo, _hi = read_vol(path)
    if data.shape[3] != 1:
        raise ConfigError(f"an SDF grid has 1 channel, '{path}' has {data.shape[3]}", file, key)
    if min(data.shape[:3]) < 2:
        raise ConfigError(f"an SDF grid needs at least 2 nodes per axis, '{path}' has "
                          f"{'x'.join(str(n) for n in data.shape[2::-1])}", file, key)
    if not np.all(np.isfinite(data)):
        raise ConfigError(f"'{path}' has NaN/Inf values", file, key)
    return np.ascontiguousarray(data[..., 0], np.float32)


def tight_boxes(values, chunk=1 << 20):
    """The voxels the surface crosses and their tight boxes: (voxel (N, 3) int32 x, y, z; lo, hi (N, 3) float64
    in node units). Mitsuba's compute_tight_bbox, vectorised over slabs of about `chunk` voxels."""
    f = np.asarray(values, np.float32)
    D, H, W = f.shape
    step = max(1, chunk // ((H - 1) * (W - 1)))
    parts = [_slab_boxes(f[z0:min(z0 + step, D - 1) + 1], z0) for z0 in range(0, D - 1, step)]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def _slab_boxes(f, z0):
    """tight_boxes of the voxels of the node slab f (d + 1, H, W) whose first node layer is z0."""
    d, H, W = f.shape[0] - 1, f.shape[1], f.shape[2]
    corner = [f[c >> 2:d + (c >> 2), (c >> 1) & 1:H - 1 + ((c >> 1) & 1), c & 1:W - 1 + (c & 1)]
              for c in range(8)]                                    # each (d, H-1, W-1), corner c of every voxel
    c8 = np.stack(corner, -1).reshape(-1, 8)
    occupied = ~((c8 > 0).all(1) | (c8 < 0).all(1))
    z, y, x = np.unravel_index(np.flatnonzero(occupied), (d, H - 1, W - 1))
    z = z + z0
    c8 = c8[occupied].astype(np.float64)
    zero = c8 == 0
    lo = np.ones((len(c8), 3))
    hi = np.zeros((len(c8), 3))
    for a in range(3):
        side0 = CORNERS[:, a] == 0
        lo[:, a] = np.where(zero[:, side0].any(1), 0.0, 1.0)
        hi[:, a] = np.where(zero[:, ~side0].any(1), 1.0, 0.0)
    for c1 in range(8):
        for a in range(3):
            if c1 & (1 << a):
                continue
            c2 = c1 | (1 << a)
            f1, f2 = c8[:, c1], c8[:, c2]
            cross = (f1 * f2 <= 0) & (f1 != f2)
            with np.errstate(divide="ignore", invalid="ignore"):
                s = np.where(cross, f1 / (f1 - f2), 0.0)
            pt = CORNERS[c1][None, :] + s[:, None] * (CORNERS[c2] - CORNERS[c1])[None, :]
            lo = np.where(cross[:, None], np.minimum(lo, pt), lo)
            hi = np.where(cross[:, None], np.maximum(hi, pt), hi)
    voxel = np.stack([x, y, z], 1)
    return voxel.astype(np.int32), lo + voxel, hi + voxel


def sdf_mesh(values, to_world, smooth, file, key, dense=False):
    """The voxel primitives of grid `values` (D, H, W) placed by 4x4 `to_world` as a shape's arrays (core/sdf.py):
    per voxel two vertices, the world box's corners, one face (2i, 2i + 1, 2i) (so that e2 = 0), the voxel's
    coordinates in the uvs of both vertices ((x, y) and (z, 0)); no normals. With `dense`, every voxel of the grid
    in dense_corners' order, each with its whole cube's box (the tree is built on those; a differentiable grid's rows
    are rewritten by dense_corners and refitted). dict(positions, faces, normals, uvs, implicit)."""
    grid = Implicit(SDF, np.asarray(to_world, np.float64), values=values, smooth=bool(smooth))
    D, H, W = grid.values.shape
    if dense:
        from ..limits import check      # per voxel: its rows, BVH nodes and host copies (~64 values)
        check(64 * (D - 1) * (H - 1) * (W - 1), f"a differentiable SDF grid of {W}x{H}x{D} nodes (every voxel a "
              f"primitive)", file, key, copies=1)
        z, y, x = np.unravel_index(np.arange((D - 1) * (H - 1) * (W - 1)), (D - 1, H - 1, W - 1))
        voxel = np.stack([x, y, z], 1).astype(np.int32)
        lo, hi = voxel.astype(np.float64), voxel + 1.0
    else:
        voxel, lo, hi = tight_boxes(grid.values)
        if not len(voxel):
            raise ConfigError("the SDF grid has no voxel the surface crosses (its values never change sign)", file,
                              key)
    size = 1.0 / np.array([W - 1, H - 1, D - 1], np.float64)
    pos = np.empty((2 * len(voxel), 3), np.float32)
    pos[0::2], pos[1::2] = box_under(lo * size, hi * size, grid.to_world)
    uv = np.zeros((2 * len(voxel), 2), np.float32)
    uv[0::2] = voxel[:, :2]
    uv[1::2, 0] = voxel[:, 2]
    i = np.arange(len(voxel), dtype=np.int32)
    faces = np.stack([2 * i, 2 * i + 1, 2 * i], 1)
    return dict(positions=pos, faces=faces, normals=None, uvs=uv, implicit=grid)


def dense_corners(values, to_world):
    """The rows (N, 3, 3) of every voxel of grid `values` (D, H, W), in dense order (x fastest: voxel (x, y, z) at
    (z (H - 1) + y) (W - 1) + x): a voxel the surface crosses has its tight world box (corners lo, hi, lo), the
    others are empty rows (all corners 0: e1 = e2 = 0, left out of the refitted boxes: bvh_build._refit_level)."""
    D, H, W = values.shape
    out = np.zeros(((D - 1) * (H - 1) * (W - 1), 3, 3), np.float64)
    voxel, lo, hi = tight_boxes(values)
    if len(voxel):
        size = 1.0 / np.array([W - 1, H - 1, D - 1], np.float64)
        k = (voxel[:, 2].astype(np.int64) * (H - 1) + voxel[:, 1]) * (W - 1) + voxel[:, 0]
        a, b = box_under(lo * size, hi * size, to_world)
        out[k, 0], out[k, 1], out[k, 2] = a, b, a
    return out
