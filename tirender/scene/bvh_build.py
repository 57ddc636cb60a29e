"""The BVH built by Taichi kernels in parallel: binned SAH, the 4-wide collapse, and the refit.

Same layout as scene/bvh.py documents (a binary :class:`~tirender.scene.bvh.BVH`, collapsed into the
4-wide :class:`~tirender.scene.bvh.WideBVH` the kernels traverse), the same code on the CPU and GPUs.

**Build** (level-synchronous binned SAH, Wald 2007 "On fast construction of SAH-based bounding volume
hierarchies"): all nodes of one tree level are processed by one kernel launch. A node of at most
``CHUNK`` triangles is one thread's work: its bounds, 16 bins per axis (count and box), the sweep over
the bin boundaries (SAH cost: traversal 1, intersection 1 per triangle, A_L·N_L + A_R·N_R), the decision
and the stable partition of its triangle ids and boxes into the next level's order (each pass over a
node's triangles reads them in sequence). Larger nodes (the top levels) are split into chunks of
``CHUNK`` triangles binned in parallel, their bounds merged with integer atomics on order-preserving float
keys and their bins chunk by chunk (deterministic: min / max / add commute), and partitioned with
per-chunk offsets (stable); nodes of at most ``SMALL`` triangles find the same split by sweeping their
triangles sorted by bin. A node becomes a leaf when it has <= ``max_leaf`` triangles, or when no split is
cheaper than the leaf and it has <= ``max_leaf_cap``; larger nodes that SAH would keep, or whose
centroids fall into one bin, are split at the median of the centroids along their longest centroid axis
(triangle order breaking ties; nodes larger than ``CHUNK`` at the bin boundary nearest to it, or in
halves of the triangle order when every centroid is the same). Children are allocated in adjacent pairs
(a scan over the level), so every level's nodes form one range of node ids.

**Collapse** (level-synchronous too): a wide node's children are the up to 4 binary descendants left
after repeatedly opening the internal child of largest surface area (ties: the first); wide nodes are
numbered breadth first, so that each wide level is one range (``WideBVH.levels``).

**Refit** (:func:`refit_device`): a wide BVH's boxes recomputed on the device for moved triangles, level by
level from the deepest, keeping the topology (height fields, differentiable meshes).

Everything is deterministic: a given input gives the same tree on a backend, whatever the threads do (across
backends, float rounding may differ).
On the CPU the work arrays are numpy arrays Taichi reads in place (untouched capacity costs no memory);
on GPUs they are Taichi ndarrays.
"""
from dataclasses import dataclass

import numpy as np
import taichi as ti

from .. import backend
from ..errors import ConfigError
from .bvh import BVH, WIDTH, WideBVH

__all__ = ["CHUNK", "Built", "build_bvh", "build_wide", "collapse", "refit_device", "sah_cost", "warm", "warmed"]

CHUNK = 1024          # nodes of more triangles are binned in parallel chunks of this many
SMALL = 32            # nodes of at most this many triangles sweep their triangles sorted by bin, not the bins
SCAN = 1024           # block of the parallel exclusive scans
LEAF, SPLIT, HALF = 0, 1, 2   # a node's decision: leaf, split at (axis, bin) or by rank, first half of its order
BIGF = 3.0e38         # finite stand-in for infinity (fast math may assume no infinities in arithmetic)
EMPTY = 1.0e8         # refit: the box of a slot whose rows are all empty (a point no ray aims at; refit_device)
IMAX = 0x7FFFFFFF
IMIN = -IMAX - 1

f32 = ti.f32
vec3f = ti.types.vector(3, f32)
nd_f2 = ti.types.ndarray(dtype=f32, ndim=2)
nd_i1 = ti.types.ndarray(dtype=ti.i32, ndim=1)
nd_i2 = ti.types.ndarray(dtype=ti.i32, ndim=2)


# ----------------------------------------------------------------------------- buffers
def _on_cpu():
    return ti.lang.impl.current_cfg().arch in (ti.x64, ti.arm64)


def _alloc(shape, dtype):
    """A work array: numpy on the CPU (read in place by kernels, pages touched only when written),
    a Taichi ndarray on GPUs."""
    if _on_cpu():
        return np.empty(shape, dtype)
    return ti.ndarray(ti.i32 if dtype == np.int32 else ti.f32, shape)


def _to_device(a, dtype):
    a = np.ascontiguousarray(a, dtype)
    if _on_cpu():
        return a
    d = ti.ndarray(ti.i32 if dtype == np.int32 else ti.f32, a.shape)
    d.from_numpy(a)
    return d


def _to_host(a, n=None):
    """Rows [0, n) of a work array as a numpy array (a view on the CPU)."""
    h = a if isinstance(a, np.ndarray) else a.to_numpy()
    return h if n is None else h[:n]


# ----------------------------------------------------------------------------- small helpers
@ti.func
def _f2o(x):
    """Order-preserving map f32 -> i32 (the median split bisects over these integer keys)."""
    b = ti.bit_cast(x, ti.i32)
    if b < 0:
        b = b ^ IMAX
    return b


@ti.func
def _area(lo, hi):
    """Surface area of the box [lo, hi] (0 if empty)."""
    d = ti.max(hi - lo, f32(0.0))
    return f32(2.0) * (d[0] * d[1] + d[1] * d[2] + d[2] * d[0])


@ti.func
def _prim(box: ti.template(), p):
    """(lo, hi, centroid) of triangle p's bounding box."""
    lo = vec3f(box[p, 0], box[p, 1], box[p, 2])
    hi = vec3f(box[p, 3], box[p, 4], box[p, 5])
    return lo, hi, f32(0.5) * (lo + hi)


@ti.func
def _bin_rows(box: ti.template(), k0, k1, clo, scale, K: ti.template()):
    """The K bins per axis of rows [k0, k1) by centroid: (counts (3K,), bin box lows (9K,), highs (9K,)), bin j of
    axis a at a * K + j, its box at 3 (a * K + j) + (x, y, z); an empty bin's box is (+BIGF, -BIGF)."""
    bc = ti.Vector([0] * (3 * K))
    bl = ti.Vector([f32(BIGF)] * (9 * K))
    bh = ti.Vector([f32(-BIGF)] * (9 * K))
    for k in range(k0, k1):
        tl, th, c = _prim(box, k)
        for a in range(3):
            j = a * K + _bin(c[a], clo[a], scale[a], K)
            bc[j] += 1
            for q in ti.static(range(3)):
                bl[3 * j + q] = ti.min(bl[3 * j + q], tl[q])
                bh[3 * j + q] = ti.max(bh[3 * j + q], th[q])
    return bc, bl, bh


@ti.func
def _chunk_rows(c, a, chunk: ti.template(), bnode: ti.template(), bchunk: ti.template(), nlink: ti.template()):
    """(b, k0, k1): chunk c's big node (index b among the level's big nodes, node a + bnode[b]) and its rows
    [k0, k1) of the level's order (CHUNK rows, the node's last chunk fewer)."""
    b = chunk[c, 0]
    n = a + bnode[b]
    start = nlink[n, 0]
    k0 = start + (c - bchunk[b]) * CHUNK
    return b, k0, ti.min(k0 + CHUNK, start + nlink[n, 1])


@ti.func
def _range_bounds(box: ti.template(), k0, k1):
    """(lo, hi, centroid lo, centroid hi) of the triangles in rows [k0, k1) of the level's order."""
    lo = vec3f(BIGF)
    hi = vec3f(-BIGF)
    clo = vec3f(BIGF)
    chi = vec3f(-BIGF)
    for k in range(k0, k1):
        tl, th, c = _prim(box, k)
        lo = ti.min(lo, tl)
        hi = ti.max(hi, th)
        clo = ti.min(clo, c)
        chi = ti.max(chi, c)
    return lo, hi, clo, chi


@ti.func
def _move(src: ti.template(), dst: ti.template(), bsrc: ti.template(), bdst: ti.template(), k, j):
    """Triangle row k of the level's order (id src[k], box bsrc[k]) to row j of the next level's."""
    dst[j] = src[k]
    for q in ti.static(range(6)):
        bdst[j, q] = bsrc[k, q]


@ti.func
def _place(src: ti.template(), dst: ti.template(), bsrc: ti.template(), bdst: ti.template(), k, left, l, r):
    """Row k to the next level's left part (at row l) or right part (at row r), in order (a stable partition);
    returns the advanced (l, r)."""
    if left:
        _move(src, dst, bsrc, bdst, k, l)
        l += 1
    else:
        _move(src, dst, bsrc, bdst, k, r)
        r += 1
    return l, r


@ti.func
def _scales(clo, chi, K: ti.template()):
    """Per axis: bins per unit of centroid extent (0 where the extent is ~0)."""
    ext = chi - clo
    s = vec3f(0.0)
    for q in ti.static(range(3)):
        if ext[q] > f32(1e-30):
            s[q] = ti.cast(K, f32) / ti.max(ext[q], f32(1e-30))
    return s


@ti.func
def _bin(c, cmin, scale, K: ti.template()):
    return ti.cast(ti.min(ti.max((c - cmin) * scale, f32(0.0)), ti.cast(K - 1, f32)), ti.i32)


@ti.func
def _sweep(bc, bl, bh, K: ti.template()):
    """Binned SAH over 3 axes x K bins (bc: counts [axis*K + bin], bl / bh: boxes [3*(axis*K + bin) + q]):
    (cost, axis, bin) of the cheapest split, left side = bins <= bin; axis -1 when no split has both sides
    non-empty. Ties: the lowest bin of an axis, then the first axis."""
    best = f32(BIGF)
    bax = -1
    bbin = 0
    for ax in range(3):
        la = ti.Vector([f32(0.0)] * K)
        ln = ti.Vector([0] * K)
        n = 0
        l0 = vec3f(BIGF)
        l1 = vec3f(-BIGF)
        for b in range(K - 1):
            j = ax * K + b
            if bc[j] > 0:
                n += bc[j]
                l0 = ti.min(l0, vec3f(bl[3 * j], bl[3 * j + 1], bl[3 * j + 2]))
                l1 = ti.max(l1, vec3f(bh[3 * j], bh[3 * j + 1], bh[3 * j + 2]))
            ln[b] = n
            if n > 0:
                la[b] = _area(l0, l1)
        n = 0
        r0 = vec3f(BIGF)
        r1 = vec3f(-BIGF)
        abest = f32(BIGF)
        ai = -1
        for bb in range(K - 1):
            b = K - 1 - bb
            j = ax * K + b
            if bc[j] > 0:
                n += bc[j]
                r0 = ti.min(r0, vec3f(bl[3 * j], bl[3 * j + 1], bl[3 * j + 2]))
                r1 = ti.max(r1, vec3f(bh[3 * j], bh[3 * j + 1], bh[3 * j + 2]))
            i = b - 1
            if ln[i] > 0 and n > 0:
                cost = la[i] * ti.cast(ln[i], f32) + _area(r0, r1) * ti.cast(n, f32)
                if cost <= abest:
                    abest = cost
                    ai = i
        if ai >= 0 and abest < best:
            best = abest
            bax = ax
            bbin = ai
    return best, bax, bbin


@ti.func
def _longest(clo, chi):
    """The axis of largest centroid extent (the first on ties)."""
    ext = chi - clo
    ax = 0
    if ext[1] > ext[ax]:
        ax = 1
    if ext[2] > ext[ax]:
        ax = 2
    return ax


# ----------------------------------------------------------------------------- kernels: build
@ti.kernel
def _prim_bounds(pos: nd_f2, face: nd_i2, box: nd_f2, src: nd_i1, nlink: nd_i2):
    """Triangle boxes (T, 6) = (lo, hi) from vertex positions and faces; the identity order; the root."""
    for t in range(face.shape[0]):
        for q in ti.static(range(3)):
            a = pos[face[t, 0], q]
            b = pos[face[t, 1], q]
            c = pos[face[t, 2], q]
            box[t, q] = ti.min(ti.min(a, b), c)
            box[t, 3 + q] = ti.max(ti.max(a, b), c)
        src[t] = t
    nlink[0, 0] = 0
    nlink[0, 1] = face.shape[0]


@ti.func
def _tiny_sweep(start, cnt, box: ti.template(), clo, scale, K: ti.template()):
    """The binned SAH split of a node of at most SMALL triangles, as _sweep finds it over the node's bins, but
    evaluated over its triangles sorted by bin (a counting sort per axis): O(cnt + K) per axis instead of K
    bins' boxes to initialise and sweep. Returns (cost, axis, bin, n_left); axis -1: no split."""
    bl = ti.Vector([f32(0.0)] * (3 * SMALL))
    bh = ti.Vector([f32(0.0)] * (3 * SMALL))
    for i in range(cnt):
        for q in ti.static(range(3)):
            bl[3 * i + q] = box[start + i, q]
            bh[3 * i + q] = box[start + i, 3 + q]
    best = f32(BIGF)
    bax = -1
    bbin = 0
    bnl = 0
    for a in range(3):
        bins = ti.Vector([0] * SMALL)
        first = ti.Vector([0] * K)
        for i in range(cnt):
            b = _bin(f32(0.5) * (bl[3 * i + a] + bh[3 * i + a]), clo[a], scale[a], K)
            bins[i] = b
            first[b] += 1
        s = 0
        for b in range(K):
            t = first[b]
            first[b] = s
            s += t
        srt = ti.Vector([0] * SMALL)
        for i in range(cnt):
            b = bins[i]
            srt[first[b]] = i
            first[b] += 1
        ra = ti.Vector([f32(0.0)] * SMALL)
        r0 = vec3f(BIGF)
        r1 = vec3f(-BIGF)
        for jj in range(cnt):
            j = cnt - 1 - jj
            i = srt[j]
            r0 = ti.min(r0, vec3f(bl[3 * i], bl[3 * i + 1], bl[3 * i + 2]))
            r1 = ti.max(r1, vec3f(bh[3 * i], bh[3 * i + 1], bh[3 * i + 2]))
            ra[j] = _area(r0, r1)
        l0 = vec3f(BIGF)
        l1 = vec3f(-BIGF)
        abest = f32(BIGF)
        ai = -1
        anl = 0
        for j in range(cnt - 1):
            i = srt[j]
            l0 = ti.min(l0, vec3f(bl[3 * i], bl[3 * i + 1], bl[3 * i + 2]))
            l1 = ti.max(l1, vec3f(bh[3 * i], bh[3 * i + 1], bh[3 * i + 2]))
            if bins[i] != bins[srt[j + 1]]:
                cost = _area(l0, l1) * ti.cast(j + 1, f32) + ra[j + 1] * ti.cast(cnt - j - 1, f32)
                if cost < abest:
                    abest = cost
                    ai = bins[i]
                    anl = j + 1
        if ai >= 0 and abest < best:
            best = abest
            bax = a
            bbin = ai
            bnl = anl
    return best, bax, bbin, bnl


@ti.func
def _small_node(n, K: ti.template(), max_leaf, cap, src: ti.template(), dst: ti.template(), order: ti.template(),
                box: ti.template(), bdst: ti.template(), nlink: ti.template(), nbox: ti.template()):
    """One thread's node (at most CHUNK triangles; ids src, boxes box in the level's order): bounds, bins,
    decision, partition into dst, bdst. Returns (kind, n_left)."""
    start = nlink[n, 0]
    cnt = nlink[n, 1]
    lo, hi, clo, chi = _range_bounds(box, start, start + cnt)
    for q in ti.static(range(3)):
        nbox[n, q] = lo[q]
        nbox[n, 3 + q] = hi[q]
    kind = LEAF
    nl = 0
    ax = 0
    sb = 0
    scale = _scales(clo, chi, K)
    if cnt > max_leaf:
        cost = f32(BIGF)
        if cnt <= SMALL:
            cost, ax, sb, nl = _tiny_sweep(start, cnt, box, clo, scale, K)
        else:
            bc, bl, bh = _bin_rows(box, start, start + cnt, clo, scale, K)
            cost, ax, sb = _sweep(bc, bl, bh, K)
            if ax >= 0:
                for b in range(sb + 1):
                    nl += bc[ax * K + b]
        A = _area(lo, hi)
        if ax >= 0 and A + cost < A * ti.cast(cnt, f32):
            kind = SPLIT
        elif cnt > cap:
            kind = HALF            # median below
    if kind == LEAF:
        for k in range(start, start + cnt):
            order[k] = src[k]
    elif kind == SPLIT:
        l = start
        r = start + nl
        for k in range(start, start + cnt):
            tl, th, c = _prim(box, k)
            l, r = _place(src, dst, box, bdst, k, _bin(c[ax], clo[ax], scale[ax], K) <= sb, l, r)
    else:
        # median of the centroids on the longest axis (ties by order): the smallest key v with
        # #{key <= v} >= need, by bisection over order-preserving integer keys
        ma = _longest(clo, chi)
        need = cnt // 2
        kmin = IMAX
        kmax = IMIN
        for k in range(start, start + cnt):
            tl, th, c = _prim(box, k)
            key = _f2o(c[ma])
            kmin = ti.min(kmin, key)
            kmax = ti.max(kmax, key)
        klo = ti.cast(kmin, ti.i64)
        khi = ti.cast(kmax, ti.i64)
        while klo < khi:
            mid = klo + (khi - klo) // 2
            m = 0
            for k in range(start, start + cnt):
                tl, th, c = _prim(box, k)
                if ti.cast(_f2o(c[ma]), ti.i64) <= mid:
                    m += 1
            if m >= need:
                khi = mid
            else:
                klo = mid + 1
        v = ti.cast(klo, ti.i32)
        less = 0
        for k in range(start, start + cnt):
            tl, th, c = _prim(box, k)
            if _f2o(c[ma]) < v:
                less += 1
        take = need - less
        l = start
        r = start + need
        eq = 0
        for k in range(start, start + cnt):
            tl, th, c = _prim(box, k)
            key = _f2o(c[ma])
            left = key < v
            if key == v:
                left = eq < take
                eq += 1
            l, r = _place(src, dst, box, bdst, k, left, l, r)
        nl = need
        kind = SPLIT
    return kind, nl


@ti.kernel
def _big_bounds(a: ti.i32, W: ti.i32, spread: ti.i32, box: nd_f2, nlink: nd_i2, meta: nd_i1, bnode: nd_i1,
                bchunk: nd_i1, chunk: nd_i2, cbnd: nd_f2, bacc: nd_f2):
    """The nodes of more than CHUNK triangles of the level [a, a + W) (boxes box in the level's order) and their
    chunks of CHUNK triangles: meta = (big nodes, chunks), bnode[b] the level index of big node b, bchunk[b] its
    first chunk, chunk[c, 0] the big node of chunk c; bacc[b] = (lo, hi, centroid lo, centroid hi) its bounds,
    from its chunks' cbnd[c] (in parallel), merged in order.
    (The big nodes take four kernels, _big_bounds, _big_bins, _big_decide and _big_partition, each with one
    parallel loop that builds constant local vectors, and merge their chunks without atomics: Taichi's SPIR-V
    code generation fails on a kernel whose parallel loops build the same constant local vectors, and a
    software Vulkan device loses integer atomics in loops, see tirender/grin/field.py.)"""
    # the big nodes and their chunks (serial: few)
    ti.loop_config(serialize=True)
    for _ in range(1):
        nb = 0
        nc = 0
        for i in range(W):
            cnt = nlink[a + i, 1]
            if cnt > CHUNK:
                bnode[nb] = i
                bchunk[nb] = nc
                for c in range((cnt + CHUNK - 1) // CHUNK):
                    chunk[nc, 0] = nb
                    nc += 1
                nb += 1
        bchunk[nb] = nc
        meta[0] = nb
        meta[1] = nc
    # bounds and centroid bounds of the chunks
    for cc in range(meta[1] * spread):
        if cc % spread == 0:
            c = cc // spread
            b, k0, k1 = _chunk_rows(c, a, chunk, bnode, bchunk, nlink)
            lo, hi, clo, chi = _range_bounds(box, k0, k1)
            for q in ti.static(range(3)):
                cbnd[c, q] = lo[q]
                cbnd[c, 3 + q] = hi[q]
                cbnd[c, 6 + q] = clo[q]
                cbnd[c, 9 + q] = chi[q]
    # of the big nodes (no constant vectors here: see above)
    for b in range(meta[0]):
        for q in ti.static(range(12)):
            bacc[b, q] = cbnd[bchunk[b], q]
        for c in range(bchunk[b] + 1, bchunk[b + 1]):
            for q in ti.static(range(12)):
                if q % 6 < 3:
                    bacc[b, q] = ti.min(bacc[b, q], cbnd[c, q])
                else:
                    bacc[b, q] = ti.max(bacc[b, q], cbnd[c, q])


@ti.kernel
def _big_bins(a: ti.i32, K: ti.template(), spread: ti.i32, box: nd_f2, nlink: nd_i2, meta: nd_i1, bnode: nd_i1,
              bchunk: nd_i1, chunk: nd_i2, bacc: nd_f2, cbc: nd_i2, cbb: nd_f2):
    """The big nodes' bins (_big_bounds), chunk by chunk in parallel: cbc[c] chunk c's bin counts [axis*K + bin],
    cbb[c] their boxes [6*(axis*K + bin) + (lo, hi)] (an empty bin's: +BIGF, -BIGF)."""
    for cc in range(meta[1] * spread):
        if cc % spread == 0:
            c = cc // spread
            b, k0, k1 = _chunk_rows(c, a, chunk, bnode, bchunk, nlink)
            clo = vec3f(bacc[b, 6], bacc[b, 7], bacc[b, 8])
            chi = vec3f(bacc[b, 9], bacc[b, 10], bacc[b, 11])
            scale = _scales(clo, chi, K)
            bc, bl, bh = _bin_rows(box, k0, k1, clo, scale, K)
            for j in range(3 * K):
                cbc[c, j] = bc[j]
                for q in ti.static(range(3)):
                    cbb[c, 6 * j + q] = bl[3 * j + q]
                    cbb[c, 6 * j + 3 + q] = bh[3 * j + q]


@ti.kernel
def _big_decide(a: ti.i32, K: ti.template(), nlink: nd_i2, nbox: nd_f2, lvl: nd_i2, meta: nd_i1, bnode: nd_i1,
                bchunk: nd_i1, bacc: nd_f2, cbc: nd_i2, cbb: nd_f2):
    """The big nodes binned by _big_bins decided (their chunks' bins merged in order: deterministic): lvl[i] =
    (kind, axis, bin) of level node i, nbox its bounds."""
    # decide: SAH, else (no cheaper split) the bin boundary nearest the median, else halves
    for b in range(meta[0]):
        i = bnode[b]
        n = a + i
        cnt = nlink[n, 1]
        lo = vec3f(bacc[b, 0], bacc[b, 1], bacc[b, 2])
        hi = vec3f(bacc[b, 3], bacc[b, 4], bacc[b, 5])
        for q in ti.static(range(3)):
            nbox[n, q] = lo[q]
            nbox[n, 3 + q] = hi[q]
        bc = ti.Vector([0] * (3 * K))
        bl = ti.Vector([f32(BIGF)] * (9 * K))
        bh = ti.Vector([f32(-BIGF)] * (9 * K))
        for c in range(bchunk[b], bchunk[b + 1]):
            for j in range(3 * K):
                bc[j] += cbc[c, j]
                for q in ti.static(range(3)):
                    bl[3 * j + q] = ti.min(bl[3 * j + q], cbb[c, 6 * j + q])
                    bh[3 * j + q] = ti.max(bh[3 * j + q], cbb[c, 6 * j + 3 + q])
        cost, ax, sb = _sweep(bc, bl, bh, K)
        A = _area(lo, hi)
        kind = SPLIT
        if not (ax >= 0 and A + cost < A * ti.cast(cnt, f32)):
            clo = vec3f(bacc[b, 6], bacc[b, 7], bacc[b, 8])
            chi = vec3f(bacc[b, 9], bacc[b, 10], bacc[b, 11])
            ax = _longest(clo, chi)
            sb = -1
            nl = 0
            gap = cnt
            for bb in range(K - 1):
                nl += bc[ax * K + bb]
                g = ti.abs(2 * nl - cnt)
                if nl > 0 and nl < cnt and g < gap:
                    gap = g
                    sb = bb
            if sb < 0:
                kind = HALF
        lvl[i, 0] = kind
        lvl[i, 1] = ax
        lvl[i, 2] = sb


@ti.kernel
def _big_partition(a: ti.i32, K: ti.template(), spread: ti.i32, src: nd_i1, dst: nd_i1, box: nd_f2, bdst: nd_f2,
                   nlink: nd_i2, lvl: nd_i2, meta: nd_i1, bnode: nd_i1, bchunk: nd_i1, chunk: nd_i2, bacc: nd_f2,
                   cbc: nd_i2):
    """The big nodes decided by _big_decide partitioned stably into dst, bdst (per-chunk offsets from the chunks'
    bin counts); lvl[i, 3] = n_left."""
    # exclusive offsets of the chunks' left triangles within their node (from the chunks' bin counts)
    for b in range(meta[0]):
        i = bnode[b]
        n = a + i
        start = nlink[n, 0]
        s = 0
        for c in range(bchunk[b], bchunk[b + 1]):
            m = 0
            if lvl[i, 0] == HALF:
                k0 = start + (c - bchunk[b]) * CHUNK
                m = ti.max(0, ti.min(k0 + CHUNK, start + nlink[n, 1] // 2) - k0)
            else:
                for bb in range(lvl[i, 2] + 1):
                    m += cbc[c, lvl[i, 1] * K + bb]
            chunk[c, 1] = s
            s += m
        lvl[i, 3] = s
    # stable partition into dst
    for cc in range(meta[1] * spread):
        if cc % spread == 0:
            c = cc // spread
            b = chunk[c, 0]
            i = bnode[b]
            n = a + i
            start = nlink[n, 0]
            cnt = nlink[n, 1]
            k0 = start + (c - bchunk[b]) * CHUNK
            k1 = ti.min(k0 + CHUNK, start + cnt)
            l = start + chunk[c, 1]
            r = start + lvl[i, 3] + (k0 - start - chunk[c, 1])
            kind = lvl[i, 0]
            ax = lvl[i, 1]
            clo = vec3f(bacc[b, 6], bacc[b, 7], bacc[b, 8])
            chi = vec3f(bacc[b, 9], bacc[b, 10], bacc[b, 11])
            scale = _scales(clo, chi, K)
            for k in range(k0, k1):
                left = k < start + cnt // 2
                if kind != HALF:
                    tl, th, ce = _prim(box, k)
                    left = _bin(ce[ax], clo[ax], scale[ax], K) <= lvl[i, 2]
                l, r = _place(src, dst, box, bdst, k, left, l, r)


@ti.func
def _scan(x: ti.template(), sums: ti.template(), n):
    """In-place exclusive scan of x[0, n) in blocks of SCAN (the block's offset is sums[i // SCAN] after
    the serial pass that follows in the caller). Parallel over blocks."""
    for blk in range((n + SCAN - 1) // SCAN):
        s = 0
        for i in range(blk * SCAN, ti.min(n, blk * SCAN + SCAN)):
            v = x[i]
            x[i] = s
            s += v
        sums[blk] = s


@ti.func
def _scan_sums(sums: ti.template(), n):
    """Exclusive scan of the block sums (serial); returns the total."""
    s = 0
    for blk in range((n + SCAN - 1) // SCAN):
        v = sums[blk]
        sums[blk] = s
        s += v
    return s


@ti.kernel
def _level(a: ti.i32, W: ti.i32, base: ti.i32, K: ti.template(), max_leaf: ti.i32, cap: ti.i32, spread: ti.i32,
           src: nd_i1, dst: nd_i1, order: nd_i1, box: nd_f2, bdst: nd_f2, nlink: nd_i2, nbox: nd_f2, lvl: nd_i2,
           x: nd_i1, sums: nd_i1, res: nd_i1) -> ti.types.vector(3, ti.i32):
    """One level [a, a + W) of the build (its big nodes already done by _big_bounds ... _big_partition): the small nodes, then the
    children of the split nodes allocated at base + 2 * (rank among split nodes). Returns (children, big
    children, their chunks)."""
    for ii in range(W * spread):
        if ii % spread == 0:
            i = ii // spread
            n = a + i
            if nlink[n, 1] <= CHUNK:
                kind, nl = _small_node(n, K, max_leaf, cap, src, dst, order, box, bdst, nlink, nbox)
                lvl[i, 0] = kind
                lvl[i, 3] = nl
    for i in range(W):
        x[i] = 0 if lvl[i, 0] == LEAF else 2
    _scan(x, sums, W)
    ti.loop_config(serialize=True)
    for _ in range(1):
        res[0] = _scan_sums(sums, W)
    big = 0
    chunks = 0
    for i in range(W):
        if lvl[i, 0] != LEAF:
            n = a + i
            c = base + x[i] + sums[i // SCAN]
            start = nlink[n, 0]
            cnt = nlink[n, 1]
            nl = lvl[i, 3]
            nlink[n, 0] = c
            nlink[n, 1] = 0
            nlink[c, 0] = start
            nlink[c, 1] = nl
            nlink[c + 1, 0] = start + nl
            nlink[c + 1, 1] = cnt - nl
            if nl > CHUNK:
                big += 1
                chunks += (nl + CHUNK - 1) // CHUNK
            if cnt - nl > CHUNK:
                big += 1
                chunks += (cnt - nl + CHUNK - 1) // CHUNK
    return ti.Vector([res[0], big, chunks])


# ----------------------------------------------------------------------------- kernels: collapse
@ti.func
def _half_area(nbox: ti.template(), k):
    lo = vec3f(nbox[k, 0], nbox[k, 1], nbox[k, 2])
    hi = vec3f(nbox[k, 3], nbox[k, 4], nbox[k, 5])
    d = ti.max(hi - lo, f32(0.0))
    return d[0] * d[1] + d[1] * d[2] + d[2] * d[0]


@ti.kernel
def _collapse_level(F: ti.i32, wbase: ti.i32, nbase: ti.i32, fsrc: nd_i1, fdst: nd_i1, nlink: nd_i2,
                    nbox: nd_f2, kids: nd_i2, x: nd_i1, sums: nd_i1, res: nd_i1, wmin: nd_f2, wmax: nd_f2,
                    wchild: nd_i2, wcount: nd_i2) -> ti.i32:
    """Wide nodes wbase + j of the binary nodes fsrc[j] (j < F); their internal children, in order, become
    the next level's heads fdst, numbered from nbase. Returns the next level's size."""
    for j in range(F):
        h = fsrc[j]
        kd = ti.Vector([-1] * (WIDTH + 1))
        m = 1
        if nlink[h, 1] > 0:
            kd[0] = h
        else:
            kd[0] = nlink[h, 0]
            kd[1] = nlink[h, 0] + 1
            m = 2
        while m < WIDTH:
            best = -1
            ba = f32(-1.0)
            for s in range(m):
                k = kd[s]
                if nlink[k, 1] == 0:
                    ar = _half_area(nbox, k)
                    if ar > ba:
                        ba = ar
                        best = s
            if best < 0:
                break
            k = kd[best]
            for s in range(best, m - 1):
                kd[s] = kd[s + 1]
            kd[m - 1] = nlink[k, 0]
            kd[m] = nlink[k, 0] + 1
            m += 1
        inner = 0
        for s in ti.static(range(WIDTH)):
            kids[j, s] = kd[s]
            if kd[s] >= 0:
                if nlink[kd[s], 1] == 0:
                    inner += 1
        x[j] = inner
    _scan(x, sums, F)
    ti.loop_config(serialize=True)
    for _ in range(1):
        res[0] = _scan_sums(sums, F)
    for j in range(F):
        w = wbase + j
        off = x[j] + sums[j // SCAN]
        for s in ti.static(range(WIDTH)):
            k = kids[j, s]
            if k < 0:
                for q in ti.static(range(3)):
                    wmin[w, q * WIDTH + s] = ti.math.inf
                    wmax[w, q * WIDTH + s] = ti.math.inf
                wchild[w, s] = 0
                wcount[w, s] = 0
            else:
                for q in ti.static(range(3)):
                    wmin[w, q * WIDTH + s] = nbox[k, q]
                    wmax[w, q * WIDTH + s] = nbox[k, 3 + q]
                if nlink[k, 1] > 0:
                    wchild[w, s] = nlink[k, 0]
                    wcount[w, s] = nlink[k, 1]
                else:
                    wchild[w, s] = nbase + off
                    wcount[w, s] = 0
                    fdst[off] = k
                    off += 1
    return res[0]


# ----------------------------------------------------------------------------- kernel: refit
@ti.kernel
def _refit_level(st: ti.template(), lo: ti.i32, hi: ti.i32):
    """Boxes of the wide nodes [lo, hi) (one level; the next levels' already refitted) from the triangles
    st.tri_p0, p0 + e1, p0 + e2 (BVH order) and the child nodes' boxes. A row with e1 = e2 = 0 is empty (a
    differentiable SDF grid's voxel the surface does not cross now: scene/sdf_body.py) and a slot with only such
    rows gets the point box EMPTY, which its parent leaves out."""
    for n in range(lo, hi):
        child = st.wnode_child[n]
        count = st.wnode_count[n]
        bmin = st.wnode_min[n]
        bmax = st.wnode_max[n]
        for s in ti.static(range(WIDTH)):
            if count[s] > 0 or child[s] > 0:
                l = ti.Vector([BIGF] * 3)
                h = -l
                if count[s] > 0:
                    for k in range(child[s], child[s] + count[s]):
                        p0 = st.tri_p0[k]
                        e1 = st.tri_e1[k]
                        e2 = st.tri_e2[k]
                        if e1.norm_sqr() + e2.norm_sqr() > 0.0:
                            l = ti.min(l, ti.min(p0, ti.min(p0 + e1, p0 + e2)))
                            h = ti.max(h, ti.max(p0, ti.max(p0 + e1, p0 + e2)))
                else:
                    c = child[s]
                    cmin = st.wnode_min[c]
                    cmax = st.wnode_max[c]
                    for t in ti.static(range(WIDTH)):
                        if (st.wnode_count[c][t] > 0 or st.wnode_child[c][t] > 0) and \
                                not (cmin[t] == EMPTY and cmax[t] == EMPTY):
                            for q in ti.static(range(3)):
                                l[q] = ti.min(l[q], cmin[q * WIDTH + t])
                                h[q] = ti.max(h[q], cmax[q * WIDTH + t])
                if l[0] > h[0]:
                    l = ti.Vector([EMPTY] * 3)
                    h = l
                for q in ti.static(range(3)):
                    bmin[q * WIDTH + s] = l[q]
                    bmax[q * WIDTH + s] = h[q]
        st.wnode_min[n] = bmin
        st.wnode_max[n] = bmax


# ----------------------------------------------------------------------------- host drivers
class _Binary:
    """A binary BVH in work arrays (node links (N, 2): (first, count), boxes (N, 6)), before the collapse."""

    def __init__(self, order, nlink, nbox, n_nodes, depth):
        self.order, self.nlink, self.nbox, self.n_nodes, self.depth = order, nlink, nbox, n_nodes, depth

    def host(self):
        """The :class:`~tirender.scene.bvh.BVH` (numpy arrays)."""
        link = np.array(_to_host(self.nlink, self.n_nodes))
        box = np.array(_to_host(self.nbox, self.n_nodes))
        return BVH(node_min=np.ascontiguousarray(box[:, :3]), node_max=np.ascontiguousarray(box[:, 3:]),
                   node_first=np.ascontiguousarray(link[:, 0]), node_count=np.ascontiguousarray(link[:, 1]),
                   prim_order=np.array(_to_host(self.order)), depth=self.depth)


def _check_args(T, n_bins):
    if T == 0:
        raise ConfigError("cannot build a BVH over 0 triangles")
    if not (2 <= n_bins <= 64):
        raise ValueError("n_bins must be in 2..64")


_COMPILED = set()


def warm(n_bins=16):
    """Load the build's kernels for n_bins into this process now (their first calls: Taichi re-traces them and
    generates their machine code, ~0.6 s on the CPU), e.g. while a forked child reads a scene's mesh files
    (scene/prefetch.py); nothing when they are loaded (:func:`warmed`)."""
    _compile(n_bins)


def warmed(n_bins=16):
    """Whether the build's kernels for n_bins are loaded in this process."""
    return n_bins in _COMPILED


def _compile(n_bins):
    """Compile the build's kernels for n_bins once per process, on a mesh of CHUNK + 1 triangles: Taichi keeps
    the arguments of a kernel's first (compiling) call alive until the next garbage collection (a reference
    cycle), which for a scene of millions of triangles would be hundreds of MB of work arrays."""
    if n_bins in _COMPILED:
        return
    _COMPILED.add(n_bins)
    t = np.arange(CHUNK + 1, dtype=np.float32)
    pos = np.stack([t, t * t % 7, t % 5], 1).astype(np.float32)
    face = (np.arange(3 * (CHUNK + 1)) % (CHUNK + 1)).astype(np.int32).reshape(-1, 3)
    _collapse(_build(pos, face, n_bins=n_bins))


def _build(pos, face, max_leaf=4, n_bins=16, max_leaf_cap=16):
    """Binary BVH (_Binary) over the triangles face (T, 3) (indices into pos (V, 3), scene units)."""
    backend.ensure_init()
    T = len(face)
    _check_args(T, n_bins)
    if T > CHUNK + 1:
        _compile(n_bins)
    max_leaf = max(1, int(max_leaf))
    cap = max(int(max_leaf_cap), max_leaf)
    pos = _to_device(pos, np.float32)
    face = _to_device(face, np.int32)
    # triangle ids and their boxes in the level's order (src, box), partitioned into the next level's (dst, bdst):
    # every pass over a node's triangles reads them in sequence
    box, bdst = _alloc((T, 6), np.float32), _alloc((T, 6), np.float32)
    src, dst, order = _alloc(T, np.int32), _alloc(T, np.int32), _alloc(T, np.int32)
    N = 2 * T - 1
    nlink = _alloc((N, 2), np.int32)
    nbox = _alloc((N, 6), np.float32)
    _prim_bounds(pos, face, box, src, nlink)
    del pos, face
    lvl = _alloc((T, 4), np.int32)
    x = _alloc(T, np.int32)
    sums = _alloc(T // SCAN + 2, np.int32)
    res = _alloc(2, np.int32)
    nb = T // (CHUNK + 1) + 2
    big = dict(meta=_alloc(2, np.int32), bnode=_alloc(nb, np.int32), bchunk=_alloc(nb + 1, np.int32),
               chunk=_alloc((nb + T // CHUNK + 2, 2), np.int32), bacc=_alloc((nb, 12), np.float32),
               cbnd=_alloc((nb + T // CHUNK + 2, 12), np.float32), cbc=_alloc((nb + T // CHUNK + 2, 3 * n_bins), np.int32),
               cbb=_alloc((nb + T // CHUNK + 2, 18 * n_bins), np.float32))
    a, W, n_nodes, depth, n_big, n_chunks = 0, 1, 1, 0, int(T > CHUNK), (T + CHUNK - 1) // CHUNK
    while W:
        depth += 1
        if n_big:
            sp = backend.spread(n_chunks)
            _big_bounds(a, W, sp, box, nlink, big["meta"], big["bnode"], big["bchunk"], big["chunk"], big["cbnd"],
                        big["bacc"])
            _big_bins(a, n_bins, sp, box, nlink, big["meta"], big["bnode"], big["bchunk"], big["chunk"], big["bacc"],
                      big["cbc"], big["cbb"])
            _big_decide(a, n_bins, nlink, nbox, lvl, big["meta"], big["bnode"], big["bchunk"], big["bacc"], big["cbc"],
                        big["cbb"])
            _big_partition(a, n_bins, sp, src, dst, box, bdst, nlink, lvl, big["meta"], big["bnode"], big["bchunk"],
                           big["chunk"], big["bacc"], big["cbc"])
        r = _level(a, W, n_nodes, n_bins, max_leaf, cap, backend.spread(W), src, dst, order, box, bdst, nlink,
                   nbox, lvl, x, sums, res)
        a, W, n_big, n_chunks = n_nodes, int(r[0]), int(r[1]), int(r[2])
        n_nodes += W
        src, dst, box, bdst = dst, src, bdst, box
    return _Binary(order, nlink, nbox, n_nodes, depth)


def _collapse(b):
    """WideBVH of a _Binary (breadth-first wide nodes; ``levels``: the first wide node of each level)."""
    n_inner = (b.n_nodes - 1) // 2
    NW = max(n_inner, 1)
    wmin, wmax = _alloc((NW, 3 * WIDTH), np.float32), _alloc((NW, 3 * WIDTH), np.float32)
    wchild, wcount = _alloc((NW, WIDTH), np.int32), _alloc((NW, WIDTH), np.int32)
    F_cap = max(NW, 1)
    fa, fb = _alloc(F_cap, np.int32), _alloc(F_cap, np.int32)
    kids = _alloc((F_cap, WIDTH), np.int32)
    x = _alloc(F_cap, np.int32)
    sums = _alloc(F_cap // SCAN + 2, np.int32)
    res = _alloc(2, np.int32)
    _zero_root(fa)
    levels = [0]
    w, F = 0, 1
    while F:
        nxt = _collapse_level(F, w, w + F, fa, fb, b.nlink, b.nbox, kids, x, sums, res, wmin, wmax, wchild, wcount)
        w += F
        levels.append(w)
        F = int(nxt)
        fa, fb = fb, fa
    return WideBVH(box_min=np.array(_to_host(wmin, w)), box_max=np.array(_to_host(wmax, w)),
                   child=np.array(_to_host(wchild, w)), count=np.array(_to_host(wcount, w)),
                   levels=tuple(levels))


@ti.kernel
def _zero_root(f: nd_i1):
    f[0] = 0


@dataclass
class Built:
    """What :func:`build_wide` returns: ``prim_order`` (T,) int32 (row k of the BVH's triangles is input
    triangle prim_order[k]), the :class:`WideBVH` ``wide``, and of the binary tree it was collapsed from:
    ``n_nodes``, ``depth`` (levels)."""
    prim_order: np.ndarray
    wide: WideBVH
    n_nodes: int
    depth: int


def build_wide(pos, face, max_leaf=4, n_bins=16, max_leaf_cap=16):
    """Build the BVH over triangles face (T, 3) int (vertex indices into pos (V, 3) float32, scene units) and
    collapse it into the 4-wide BVH the kernels traverse (:class:`Built`)."""
    b = _build(pos, face, max_leaf, n_bins, max_leaf_cap)
    wide = _collapse(b)
    return Built(prim_order=np.array(_to_host(b.order)), wide=wide, n_nodes=b.n_nodes, depth=b.depth)


def build_bvh(v0, v1, v2, max_leaf=4, n_bins=16, max_leaf_cap=16):
    """Binary BVH (:class:`BVH`, numpy arrays) over triangles with corners v0, v1, v2 (T, 3)."""
    v0, v1, v2 = (np.asarray(v, np.float32).reshape(-1, 3) for v in (v0, v1, v2))
    T = len(v0)
    if not (len(v1) == len(v2) == T):
        raise ValueError("v0, v1, v2 must have the same length")
    _check_args(T, n_bins)
    pos = np.concatenate([v0, v1, v2])
    face = np.arange(3 * T, dtype=np.int32).reshape(3, T).T
    return _build(pos, face, max_leaf, n_bins, max_leaf_cap).host()


def collapse(bvh):
    """The wide BVH of a binary :class:`BVH` (same leaves, same triangle order)."""
    link = np.stack([bvh.node_first, bvh.node_count], 1).astype(np.int32)
    box = np.concatenate([bvh.node_min, bvh.node_max], 1).astype(np.float32)
    b = _Binary(None, _to_device(link, np.int32), _to_device(box, np.float32), bvh.n_nodes, bvh.depth)
    return _collapse(b)


def refit_device(st, wide):
    """Recompute the boxes of the wide BVH in st's fields (its topology `wide`: levels) for the triangles
    st.tri_p0/e1/e2 now hold, deepest level first."""
    lv = wide.levels
    for i in range(len(lv) - 2, -1, -1):
        _refit_level(st, lv[i], lv[i + 1])


def sah_cost(bvh):
    """SAH cost of a binary :class:`BVH` (traversal 1 per internal node, 1 per triangle in a leaf), relative
    to the root's area: sum over nodes of area / area(root) x (1 or the leaf's count)."""
    d = np.maximum(bvh.node_max.astype(np.float64) - bvh.node_min, 0)
    area = d[:, 0] * d[:, 1] + d[:, 1] * d[:, 2] + d[:, 2] * d[:, 0]
    w = np.where(bvh.node_count > 0, bvh.node_count, 1)
    return float((area * w).sum() / max(area[0], 1e-300))
