"""Binned-SAH bounding volume hierarchy over triangles, built with vectorised numpy.

The build is level-synchronous: all nodes of one tree level are binned and split together
(``np.bincount`` / ``np.minimum.at`` keyed by (node, bin)), so the Python overhead is per
level, not per node.  Layout (flat arrays, node 0 is the root)::

    node_min, node_max (N,3) float32   node bounding boxes (scene units)
    node_first (N,) int32   internal node: index of its left child, the right child is
                            node_first + 1 (children are allocated in adjacent pairs);
                            leaf: index of its first triangle in ``prim_order``
    node_count (N,) int32   0 for an internal node, number of triangles for a leaf
    prim_order (T,) int32   triangle ids; each leaf's triangles are contiguous

:func:`refit` recomputes a wide BVH's boxes for moved triangles (height fields: scene/heightfield.py),
keeping its topology (:func:`refit_plan`: the order, computed once).

:func:`collapse` turns the binary tree into the 4-wide one the kernels traverse (core/intersect.py):
the children of a wide node are the up to 4 binary descendants left after repeatedly opening the
internal child of largest surface area; their boxes are stored coordinate-first, so that one ray
is tested against all 4 boxes as vector lanes.

Also here: :func:`intersect_brute_force` and :func:`traverse_numpy`, slow numpy
references used by the tests.
"""
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

__all__ = ["BVH", "WIDTH", "WideBVH", "build_bvh", "collapse", "refit", "refit_plan", "intersect_brute_force", "traverse_numpy"]

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


def _area(lo, hi):
    """Surface area of boxes (..., 3) (0 for empty boxes with lo > hi)."""
    d = np.maximum(hi - lo, 0)
    return 2.0 * (d[..., 0] * d[..., 1] + d[..., 1] * d[..., 2] + d[..., 2] * d[..., 0])


def _area3(lo, hi):
    """Surface area of boxes stored coordinate-first: lo, hi (3, ...)."""
    d = np.maximum(hi - lo, 0)
    return 2.0 * (d[0] * d[1] + d[1] * d[2] + d[2] * d[0])


def _segments(starts, counts):
    """Global positions of the concatenated ranges [start, start+count) (all counts > 0)."""
    first = np.cumsum(counts) - counts
    pos = np.arange(int(counts.sum()), dtype=np.int64)
    pos += np.repeat(starts - first, counts)
    return pos, first


def _bin_sah(P, cnt, cen, tmin, tmax, n_bins):
    """Binned SAH for consecutive segments of primitives.

    P: (n,) triangle ids grouped by segment, cnt: (S,) segment sizes.
    Returns (cost (S,) float64 = min over splits of A_L*N_L + A_R*N_R (inf if no valid
    split), axis (S,), split bin (S,) (left side = bins <= split), bins (3, n) uint8,
    centroid extent (S,3)).
    """
    S, K = len(cnt), n_bins
    first = np.cumsum(cnt) - cnt
    seg = np.repeat(np.arange(S, dtype=np.int64), cnt)
    c = cen[P]
    cmin = np.minimum.reduceat(c, first, axis=0)
    cmax = np.maximum.reduceat(c, first, axis=0)
    ext = cmax - cmin
    scale = np.where(ext > 1e-30, np.float32(K) / np.maximum(ext, 1e-30), 0).astype(np.float32)
    lo, hi = tmin[P], tmax[P]
    best_cost = np.full(S, np.inf)
    best_axis = np.zeros(S, np.int64)
    best_bin = np.zeros(S, np.int64)
    bins = np.empty((3, len(P)), np.uint8)
    ar = np.arange(S)
    for a in range(3):
        b = ((c[:, a] - cmin[seg, a]) * scale[seg, a])
        b = np.clip(b, 0, K - 1).astype(np.uint8)
        bins[a] = b
        key = b.astype(np.int64) * S + seg           # layout (bin, segment)
        n_in = np.bincount(key, minlength=S * K).reshape(K, S)
        bmin = np.full((3, K * S), np.inf, np.float32)
        bmax = np.full((3, K * S), -np.inf, np.float32)
        for j in range(3):
            np.minimum.at(bmin[j], key, lo[:, j])
            np.maximum.at(bmax[j], key, hi[:, j])
        bmin = bmin.reshape(3, K, S)
        bmax = bmax.reshape(3, K, S)
        # left boxes over bins [0..i], right boxes over bins [i+1..K-1], i = 0..K-2
        lmin, lmax = bmin.copy(), bmax.copy()
        rmin, rmax = bmin.copy(), bmax.copy()
        for k in range(1, K):
            np.minimum(lmin[:, k], lmin[:, k - 1], out=lmin[:, k])
            np.maximum(lmax[:, k], lmax[:, k - 1], out=lmax[:, k])
            np.minimum(rmin[:, K - 1 - k], rmin[:, K - k], out=rmin[:, K - 1 - k])
            np.maximum(rmax[:, K - 1 - k], rmax[:, K - k], out=rmax[:, K - 1 - k])
        nl = np.cumsum(n_in, axis=0)[:-1]
        nr = cnt[None, :] - nl
        with np.errstate(invalid="ignore"):
            cost = (_area3(lmin[:, :-1], lmax[:, :-1]).astype(np.float64) * nl
                    + _area3(rmin[:, 1:], rmax[:, 1:]).astype(np.float64) * nr)
        cost[(nl == 0) | (nr == 0)] = np.inf
        i = np.argmin(cost, axis=0)
        ci = cost[i, ar]
        better = ci < best_cost
        best_cost[better], best_axis[better], best_bin[better] = ci[better], a, i[better]
    return best_cost, best_axis, best_bin, bins, ext


def build_bvh(v0, v1, v2, max_leaf=4, n_bins=16, max_leaf_cap=16, chunk_prims=1 << 18):
    """Build a binned-SAH BVH over triangles (v0, v1, v2: (T,3) corners, scene units).

    SAH cost: traversal 1 + intersection 1 per triangle. A node becomes a leaf when it
    has <= ``max_leaf`` triangles, or when no split is cheaper than the leaf and it has
    <= ``max_leaf_cap`` triangles. Larger nodes that SAH would keep, and nodes whose
    centroids all fall into one bin, are split at the median of the longest centroid
    axis. Returns a :class:`BVH`.
    """
    v0 = np.asarray(v0, np.float32).reshape(-1, 3)
    v1 = np.asarray(v1, np.float32).reshape(-1, 3)
    v2 = np.asarray(v2, np.float32).reshape(-1, 3)
    T = len(v0)
    if T == 0:
        raise ConfigError("cannot build a BVH over 0 triangles")
    if not (len(v1) == len(v2) == T):
        raise ValueError("v0, v1, v2 must have the same length")
    if not (1 <= n_bins <= 256):
        raise ValueError("n_bins must be in 1..256")
    max_leaf = max(1, int(max_leaf))
    cap = max(int(max_leaf_cap), max_leaf)
    tmin = np.minimum(np.minimum(v0, v1), v2)
    tmax = np.maximum(np.maximum(v0, v1), v2)
    cen = 0.5 * (tmin + tmax)

    order = np.arange(T, dtype=np.int32)
    cap_nodes = 2 * T - 1
    node_min = np.empty((cap_nodes, 3), np.float32)
    node_max = np.empty((cap_nodes, 3), np.float32)
    node_first = np.zeros(cap_nodes, np.int32)
    node_count = np.zeros(cap_nodes, np.int32)

    lvl_node = np.zeros(1, np.int64)
    lvl_start = np.zeros(1, np.int64)
    lvl_count = np.full(1, T, np.int64)
    n_nodes, depth = 1, 0
    while len(lvl_node):
        depth += 1
        pos, first = _segments(lvl_start, lvl_count)
        P = order[pos]
        del pos
        bmin = np.minimum.reduceat(tmin[P], first, axis=0)
        bmax = np.maximum.reduceat(tmax[P], first, axis=0)
        node_min[lvl_node], node_max[lvl_node] = bmin, bmax

        cand = lvl_count > max_leaf
        ci = np.flatnonzero(cand)
        split = np.zeros(len(lvl_node), bool)
        if len(ci):
            # primitives of candidate segments (contiguous groups in P)
            keep = np.repeat(cand, lvl_count)
            Pc = P[keep]
            cc = lvl_count[ci]
            cfirst = np.cumsum(cc) - cc
            S = len(ci)
            cost = np.empty(S)
            axis = np.empty(S, np.int64)
            sbin = np.empty(S, np.int64)
            bins = np.empty((3, len(Pc)), np.uint8)
            ext = np.empty((S, 3), np.float32)
            s0 = 0
            while s0 < S:        # chunks of segments bound the memory of the bin arrays
                s1 = int(np.searchsorted(cfirst, cfirst[s0] + chunk_prims, side="left"))
                s1 = min(max(s1, s0 + 1), S, s0 + max(1, chunk_prims // n_bins))
                p0, p1 = int(cfirst[s0]), int(cfirst[s1 - 1] + cc[s1 - 1])
                r = _bin_sah(Pc[p0:p1], cc[s0:s1], cen, tmin, tmax, n_bins)
                cost[s0:s1], axis[s0:s1], sbin[s0:s1], bins[:, p0:p1], ext[s0:s1] = r
                s0 = s1
            A = _area(bmin[ci], bmax[ci]).astype(np.float64)
            valid = np.isfinite(cost)
            sah = valid & (A + cost < A * cc)
            median = ~sah & (cc > cap)
            do = sah | median
            split[ci[do]] = True

            # new position of every candidate primitive inside its segment
            seg = np.repeat(np.arange(S), cc)
            loc = np.arange(len(Pc)) - np.repeat(cfirst, cc)
            nleft = np.zeros(S, np.int64)
            new = loc.copy()
            ms = np.repeat(sah, cc)
            if ms.any():
                ax = axis[seg[ms]]
                left = bins[ax, np.flatnonzero(ms)] <= sbin[seg[ms]]
                sseg = seg[ms]
                li = left.astype(np.int64)
                ri = 1 - li
                nleft[sah] = np.bincount(sseg, weights=li, minlength=S)[sah].astype(np.int64)
                csl = np.cumsum(li) - li              # lefts before this prim (global)
                csr = np.cumsum(ri) - ri
                sfirst = np.flatnonzero(np.r_[True, sseg[1:] != sseg[:-1]])
                base = np.repeat(sfirst, cc[sah])     # first index of own segment in subset
                rank_l = csl - csl[base]
                rank_r = csr - csr[base]
                new[ms] = np.where(left, rank_l, nleft[sseg] + rank_r)
            mm = np.repeat(median, cc)
            if mm.any():
                msg = seg[mm]
                ax = np.argmax(ext[median], axis=1)
                vals = cen[Pc[mm], np.repeat(ax, cc[median])]
                srt = np.lexsort((np.arange(len(vals)), vals, msg))
                rank = np.empty(len(vals), np.int64)
                mfirst = np.repeat(np.cumsum(cc[median]) - cc[median], cc[median])
                rank[srt] = np.arange(len(vals)) - mfirst
                new[mm] = rank
                nleft[median] = cc[median] // 2
            do_p = np.repeat(do, cc)
            order[(lvl_start[ci][seg] + new)[do_p]] = Pc[do_p]

        leaf = ~split
        ln = lvl_node[leaf]
        node_first[ln] = lvl_start[leaf]
        node_count[ln] = lvl_count[leaf]

        si = np.flatnonzero(split)
        if len(si) == 0:
            break
        nl_all = np.zeros(len(lvl_node), np.int64)
        nl_all[ci] = nleft
        nL = nl_all[si]
        ns = len(si)
        left_ids = n_nodes + 2 * np.arange(ns)
        node_first[lvl_node[si]] = left_ids
        node_count[lvl_node[si]] = 0
        n_nodes += 2 * ns
        new_node = np.stack([left_ids, left_ids + 1], 1).reshape(-1)
        new_start = np.stack([lvl_start[si], lvl_start[si] + nL], 1).reshape(-1)
        new_count = np.stack([nL, lvl_count[si] - nL], 1).reshape(-1)
        lvl_node, lvl_start, lvl_count = new_node, new_start, new_count

    return BVH(node_min=node_min[:n_nodes].copy(), node_max=node_max[:n_nodes].copy(),
               node_first=node_first[:n_nodes].copy(), node_count=node_count[:n_nodes].copy(),
               prim_order=order, depth=depth)


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

    @property
    def n_nodes(self):
        return len(self.child)


def collapse(bvh, width=WIDTH):
    """The wide BVH of a binary :class:`BVH` (same leaves, same triangle order)."""
    lo, hi = bvh.node_min, bvh.node_max
    d = np.maximum(hi - lo, 0).astype(np.float64)
    area = d[:, 0] * d[:, 1] + d[:, 1] * d[:, 2] + d[:, 2] * d[:, 0]
    first, count = bvh.node_first.tolist(), bvh.node_count.tolist()
    area = area.tolist()
    groups = []                      # per wide node: its binary children
    todo = [0]
    i = 0
    while i < len(todo):
        n = todo[i]
        i += 1
        kids = [first[n], first[n] + 1] if count[n] == 0 else [n]
        while len(kids) < width:
            inner = [k for k in kids if count[k] == 0]
            if not inner:
                break
            k = max(inner, key=area.__getitem__)
            kids.remove(k)
            kids += [first[k], first[k] + 1]
        groups.append(kids)
        todo += [k for k in kids if count[k] == 0]
    # wide node of every internal binary node that heads a group: breadth-first order = todo order
    wide_id = {n: j for j, n in enumerate(todo)}
    N = len(groups)
    box_min = np.full((N, 3, width), np.inf, np.float32)
    box_max = np.full((N, 3, width), np.inf, np.float32)
    child = np.zeros((N, width), np.int32)
    cnt = np.zeros((N, width), np.int32)
    for j, kids in enumerate(groups):
        for s, k in enumerate(kids):
            box_min[j, :, s], box_max[j, :, s] = lo[k], hi[k]
            if count[k] > 0:
                child[j, s], cnt[j, s] = first[k], count[k]
            else:
                child[j, s] = wide_id[k]
    return WideBVH(box_min=box_min.reshape(N, -1), box_max=box_max.reshape(N, -1), child=child, count=cnt)


def refit_plan(wide):
    """What :func:`refit` needs of a wide BVH's topology, computed once: the leaf slots sorted by first
    triangle, and the internal slots grouped by the level of their parent (deepest first)."""
    N = wide.n_nodes
    level = np.zeros(N, np.int64)
    inner = (wide.count == 0) & (wide.child > 0)
    for n in range(N):                       # breadth-first order: parents before children
        kids = wide.child[n][inner[n]]
        level[kids] = level[n] + 1
    leaf_n, leaf_s = np.nonzero(wide.count > 0)
    order = np.argsort(wide.child[leaf_n, leaf_s], kind="stable")
    leaf_n, leaf_s = leaf_n[order], leaf_s[order]
    in_n, in_s = np.nonzero(inner)
    groups = []
    for lv in range(int(level.max(initial=0)), -1, -1):
        m = level[in_n] == lv
        if m.any():
            groups.append((in_n[m], in_s[m]))
    return dict(leaf_n=leaf_n, leaf_s=leaf_s, starts=wide.child[leaf_n, leaf_s].astype(np.int64),
                groups=groups, valid=(wide.count > 0) | inner)


def refit(wide, plan, v0, v1, v2):
    """Recompute every child box of `wide` (in place) for moved triangles v0, v1, v2 (T, 3), in the
    BVH's triangle order, keeping the topology (the nodes' triangles stay theirs): leaf slots from their
    triangles' bounds, internal slots bottom-up as the union of their child node's slots."""
    lo = np.minimum(np.minimum(v0, v1), v2).astype(np.float32)
    hi = np.maximum(np.maximum(v0, v1), v2).astype(np.float32)
    bmin = wide.box_min.reshape(-1, 3, WIDTH)
    bmax = wide.box_max.reshape(-1, 3, WIDTH)
    st = plan["starts"]
    bmin[plan["leaf_n"], :, plan["leaf_s"]] = np.minimum.reduceat(lo, st, axis=0)
    bmax[plan["leaf_n"], :, plan["leaf_s"]] = np.maximum.reduceat(hi, st, axis=0)
    valid = plan["valid"][:, None, :]
    for n, s in plan["groups"]:
        c = wide.child[n, s]
        bmin[n, :, s] = np.where(valid[c], bmin[c], np.inf).min(axis=2)
        bmax[n, :, s] = np.where(valid[c], bmax[c], -np.inf).max(axis=2)
    return wide


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
