"""Bounding volume hierarchy over triangles: the layout, and slow numpy references for the tests.

The tree is built by Taichi kernels (scene/bvh_build.py: binned SAH, collapse, refit). Binary tree, flat
arrays (node 0 is the root)::

    node_min, node_max (N,3) float32   node bounding boxes (scene units)
    node_first (N,) int32   internal node: index of its left child, the right child is
                            node_first + 1 (children are allocated in adjacent pairs);
                            leaf: index of its first triangle in ``prim_order``
    node_count (N,) int32   0 for an internal node, number of triangles for a leaf
    prim_order (T,) int32   triangle ids; each leaf's triangles are contiguous

The kernels traverse the 4-wide tree it is collapsed into (:class:`WideBVH`, core/intersect.py): the children
of a wide node are the up to 4 binary descendants left after repeatedly opening the internal child of largest
surface area; their boxes are stored coordinate-first, so that one ray is tested against all 4 boxes as vector
lanes.

Also here: :func:`intersect_brute_force` and :func:`traverse_numpy`, slow numpy references used by the tests.
"""
from dataclasses import dataclass

import numpy as np

__all__ = ["BVH", "WIDTH", "WideBVH", "intersect_brute_force", "traverse_numpy"]

T_MIN = 1e-6          # rays only count hits with t > T_MIN
WIDTH = 4             # children per node of the wide BVH


@dataclass
class BVH:
    """Flat BVH arrays (see module docstring). ``depth``: number of levels (root = 1)."""
    node_min: np.ndarray
    node_max: np.ndarray
    node_first: np.ndarray
    node_count: np.ndarray
    prim_order: np.ndarray
    depth: int = 0

    @property
    def n_nodes(self):
        return len(self.node_first)

    @property
    def n_leaves(self):
        return int(np.count_nonzero(self.node_count))


@dataclass
class WideBVH:
    """4-wide BVH (node 0 is the root), arrays per node, child slot j in column j::

        box_min, box_max (N, 3*WIDTH) float32   child boxes, coordinate-first: [x0..x3, y0..y3, z0..z3];
                                                empty slots hold +inf (no ray hits them)
        child (N, WIDTH) int32                  internal child: its wide node; leaf: its first triangle
        count (N, WIDTH) int32                  0: internal child (or empty slot), else the leaf's triangles
    """
    box_min: np.ndarray
    box_max: np.ndarray
    child: np.ndarray
    count: np.ndarray
    levels: tuple = ()      # breadth-first levels: level i is wide nodes [levels[i], levels[i + 1])

    @property
    def n_nodes(self):
        return len(self.child)


# --------------------------------------------------------------------------- references
def _mt(o, d, a, b, c):
    """Möller–Trumbore, elementwise over broadcast (…,3) float64 arrays -> t (inf = miss)."""
    e1x, e1y, e1z = b[..., 0] - a[..., 0], b[..., 1] - a[..., 1], b[..., 2] - a[..., 2]
    e2x, e2y, e2z = c[..., 0] - a[..., 0], c[..., 1] - a[..., 1], c[..., 2] - a[..., 2]
    dx, dy, dz = d[..., 0], d[..., 1], d[..., 2]
    px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
    det = e1x * px + e1y * py + e1z * pz
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        sx, sy, sz = o[..., 0] - a[..., 0], o[..., 1] - a[..., 1], o[..., 2] - a[..., 2]
        u = (sx * px + sy * py + sz * pz) * inv
        qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
        v = (dx * qx + dy * qy + dz * qz) * inv
        t = (e2x * qx + e2y * qy + e2z * qz) * inv
        hit = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > T_MIN)
    return np.where(hit, t, np.inf)


def intersect_brute_force(o, d, v0, v1, v2, chunk_elems=1 << 21):
    """Closest hit of every ray against every triangle (numpy reference).

    o, d: (R,3) ray origins / directions; v0, v1, v2: (T,3) corners.
    Returns (t (R,) float64, inf on a miss; tri (R,) int64, -1 on a miss). Only hits with
    t > 1e-6 count; ties go to the lowest triangle index.
    """
    o = np.asarray(o, np.float64).reshape(-1, 3)
    d = np.asarray(d, np.float64).reshape(-1, 3)
    a = np.asarray(v0, np.float64).reshape(1, -1, 3)
    b = np.asarray(v1, np.float64).reshape(1, -1, 3)
    c = np.asarray(v2, np.float64).reshape(1, -1, 3)
    R, T = len(o), a.shape[1]
    t_out = np.full(R, np.inf)
    tri_out = np.full(R, -1, np.int64)
    if T == 0:
        return t_out, tri_out
    step = max(1, chunk_elems // T)
    for r0 in range(0, R, step):
        t = _mt(o[r0:r0 + step, None], d[r0:r0 + step, None], a, b, c)
        i = np.argmin(t, axis=1)
        ti = t[np.arange(len(t)), i]
        t_out[r0:r0 + step] = ti
        tri_out[r0:r0 + step] = np.where(np.isfinite(ti), i, -1)
    return t_out, tri_out


def traverse_numpy(bvh, o, d, v0, v1, v2):
    """Closest hits through the BVH (reference traversal, wavefront over (ray, node) pairs).

    Same inputs/outputs as :func:`intersect_brute_force`; boxes are padded by a tiny
    epsilon so that the result equals the brute force one exactly when the layout is right.
    """
    o = np.asarray(o, np.float64).reshape(-1, 3)
    d = np.asarray(d, np.float64).reshape(-1, 3)
    a = np.asarray(v0, np.float64).reshape(-1, 3)
    b = np.asarray(v1, np.float64).reshape(-1, 3)
    c = np.asarray(v2, np.float64).reshape(-1, 3)
    R = len(o)
    best_t = np.full(R, np.inf)
    best_tri = np.full(R, -1, np.int64)
    lo = bvh.node_min.astype(np.float64)
    hi = bvh.node_max.astype(np.float64)
    scale = float(np.max(np.abs(np.concatenate([lo[:1], hi[:1]])))) if len(lo) else 1.0
    scale = max(scale, float(np.max(hi[:1] - lo[:1])) if len(lo) else 0.0, 1e-30)
    pad = 1e-6 * scale
    lo, hi = lo - pad, hi + pad
    dd = np.where(np.abs(d) < 1e-300, 1e-300, d)
    inv = 1.0 / dd
    ray = np.arange(R)
    node = np.zeros(R, np.int64)
    while len(ray):
        t0 = (lo[node] - o[ray]) * inv[ray]
        t1 = (hi[node] - o[ray]) * inv[ray]
        tn = np.minimum(t0, t1).max(axis=1)
        tf = np.maximum(t0, t1).min(axis=1)
        ok = (tn <= tf) & (tf >= T_MIN) & (tn <= best_t[ray] * (1 + 1e-9) + 1e-12)
        ray, node = ray[ok], node[ok]
        cnt = bvh.node_count[node].astype(np.int64)
        is_leaf = cnt > 0
        # leaves: test their triangles, keep the closest (lowest index on ties) per ray
        lr, ln, lc = ray[is_leaf], node[is_leaf], cnt[is_leaf]
        if len(lr):
            pr = np.repeat(lr, lc)
            k = np.arange(int(lc.sum())) - np.repeat(np.cumsum(lc) - lc, lc)
            tri = bvh.prim_order[np.repeat(bvh.node_first[ln].astype(np.int64), lc) + k]
            tri = tri.astype(np.int64)
            t = _mt(o[pr], d[pr], a[tri], b[tri], c[tri])
            h = np.isfinite(t)
            pr, tri, t = pr[h], tri[h], t[h]
            # include the current best so that the lexsort picks the overall winner
            pr = np.concatenate([pr, np.flatnonzero(best_tri >= 0)])
            tri = np.concatenate([tri, best_tri[best_tri >= 0]])
            t = np.concatenate([t, best_t[best_tri >= 0]])
            if len(pr):
                s = np.lexsort((tri, t, pr))
                pr, tri, t = pr[s], tri[s], t[s]
                firsts = np.r_[True, pr[1:] != pr[:-1]]
                best_t[pr[firsts]] = t[firsts]
                best_tri[pr[firsts]] = tri[firsts]
        ir, inode = ray[~is_leaf], node[~is_leaf]
        f = bvh.node_first[inode].astype(np.int64)
        ray = np.concatenate([ir, ir])
        node = np.concatenate([f, f + 1])
    return best_t, best_tri
