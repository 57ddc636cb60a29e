"""Layout and correctness of the binned-SAH BVH builder (Taichi kernels, scene/bvh_build.py) and its 4-wide collapse."""
import numpy as np
import pytest

from tirender.errors import ConfigError
from tirender.scene.bvh import intersect_brute_force, traverse_numpy
from tirender.scene.bvh_build import build_bvh


def _random_mesh(rng, T, spread=1.0, size=0.2):
    c = spread * rng.normal(size=(T, 1, 3))
    v = (c + size * rng.normal(size=(T, 3, 3))).astype(np.float32)
    return v[:, 0], v[:, 1], v[:, 2]


def _rays_at(rng, v0, v1, v2, R):
    """Rays from outside the mesh towards random points of its bounding box (plus some
    random ones and some starting inside)."""
    pts = np.concatenate([v0, v1, v2]).astype(np.float64)
    lo, hi = pts.min(0), pts.max(0)
    ext = max(float(np.max(hi - lo)), 1e-3)
    centre = 0.5 * (lo + hi)
    o = centre + 2.0 * ext * rng.normal(size=(R, 3))
    o[: R // 5] = centre + 0.3 * ext * rng.normal(size=(R // 5, 3))     # inside
    target = lo + (hi - lo) * rng.random((R, 3))
    # aim rays at triangle centroids (every triangle when R allows): guaranteed hits
    k = R // 3
    tri = rng.permutation(np.resize(np.arange(len(v0)), max(k, len(v0))))[:k]
    target[:k] = (v0[tri] + v1[tri] + v2[tri]) / 3.0
    d = target - o
    d[R - R // 10:] = rng.normal(size=(R // 10, 3))
    return o, d


def check_layout(bvh, v0, v1, v2, cap=16):
    T = len(v0)
    N = bvh.n_nodes
    nf, nc = bvh.node_first.astype(np.int64), bvh.node_count.astype(np.int64)
    assert bvh.node_min.shape == (N, 3) and bvh.node_max.shape == (N, 3)
    assert bvh.node_min.dtype == np.float32 and bvh.node_first.dtype == np.int32
    assert bvh.node_count.dtype == np.int32 and bvh.prim_order.dtype == np.int32
    assert bvh.prim_order.shape == (T,)
    assert (nc >= 0).all() and (nc <= max(cap, 4)).all()
    internal = np.flatnonzero(nc == 0)
    leaves = np.flatnonzero(nc > 0)
    # children: adjacent pair after the parent, every non-root node has exactly one parent
    L = nf[internal]
    assert (L > internal).all() and (L + 1 < N).all()
    parents = np.zeros(N, np.int64)
    np.add.at(parents, L, 1)
    np.add.at(parents, L + 1, 1)
    assert parents[0] == 0 and (parents[1:] == 1).all()
    # every triangle in exactly one leaf
    starts, counts = nf[leaves], nc[leaves]
    assert (starts >= 0).all() and (starts + counts <= T).all()
    idx = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())
    assert np.array_equal(np.sort(idx), np.arange(T))
    assert np.array_equal(np.sort(bvh.prim_order), np.arange(T))
    # child boxes inside parent boxes
    for child in (L, L + 1):
        assert (bvh.node_min[child] >= bvh.node_min[internal]).all()
        assert (bvh.node_max[child] <= bvh.node_max[internal]).all()
    # leaf boxes contain their triangles
    leaf_of = np.repeat(leaves, counts)
    tri = bvh.prim_order[idx]
    tmin = np.minimum(np.minimum(v0, v1), v2)[tri]
    tmax = np.maximum(np.maximum(v0, v1), v2)[tri]
    assert (tmin >= bvh.node_min[leaf_of]).all() and (tmax <= bvh.node_max[leaf_of]).all()
    # root box is the mesh box
    assert np.array_equal(bvh.node_min[0], np.minimum(np.minimum(v0, v1), v2).min(0))
    assert np.array_equal(bvh.node_max[0], np.maximum(np.maximum(v0, v1), v2).max(0))


def check_traversal(bvh, v0, v1, v2, rng, R=None):
    R = R or max(400, 3 * len(v0) + 100)
    o, d = _rays_at(rng, v0, v1, v2, R)
    t_ref, i_ref = intersect_brute_force(o, d, v0, v1, v2)
    t, i = traverse_numpy(bvh, o, d, v0, v1, v2)
    assert np.array_equal(i, i_ref)
    assert np.array_equal(t, t_ref)
    return int((i_ref >= 0).sum())


@pytest.mark.parametrize("T,max_leaf,n_bins", [(2, 4, 16), (7, 4, 16), (50, 1, 16),
                                               (300, 4, 16), (1500, 4, 32), (1500, 8, 16)])
def test_random_meshes(T, max_leaf, n_bins):
    rng = np.random.default_rng(T + max_leaf)
    v0, v1, v2 = _random_mesh(rng, T)
    bvh = build_bvh(v0, v1, v2, max_leaf=max_leaf, n_bins=n_bins)
    check_layout(bvh, v0, v1, v2)
    if T > 4 * max_leaf:
        assert bvh.n_nodes > 1
    hits = check_traversal(bvh, v0, v1, v2, rng)
    assert hits > 50


def structured_mesh(rng):
    """About 12k triangles with what real meshes have: a closed noisy surface (a sphere grid's triangles), a dense
    cluster of tiny triangles, 300 copies of one triangle (identical centroids), long slivers across the scene and
    an axis-aligned flat patch; more than CHUNK triangles in the top nodes, so that the chunked parallel binning,
    the tiny-node sweep and the median fallbacks all run."""
    n = 48
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 2 * n + 1), np.linspace(0.05, np.pi - 0.05, n + 1), indexing="ij")
    P = np.stack([np.sin(v) * np.cos(u), np.sin(v) * np.sin(u), np.cos(v)], -1)
    a, b, c, d = (x.reshape(-1, 3) for x in (P[:-1, :-1], P[1:, :-1], P[1:, 1:], P[:-1, 1:]))
    sphere = np.stack([np.concatenate([a, a]), np.concatenate([b, c]), np.concatenate([c, d])], 1)
    sphere += 0.01 * rng.normal(size=sphere.shape)
    cluster = 0.3 + 0.02 * rng.normal(size=(2000, 1, 3)) + 0.002 * rng.normal(size=(2000, 3, 3))
    copies = np.repeat(rng.normal(size=(1, 3, 3)) * 0.1 - 0.5, 300, axis=0)
    slivers = rng.normal(size=(200, 1, 3)) * [3.0, 0.1, 0.1] + 0.01 * rng.normal(size=(200, 3, 3))
    flat = rng.uniform(-1.5, 1.5, size=(1000, 1, 3)) + 0.05 * rng.normal(size=(1000, 3, 3))
    flat[:, :, 1] = -1.2
    tris = np.concatenate([sphere, cluster, copies, slivers, flat]).astype(np.float32)
    tris = tris[rng.permutation(len(tris))]
    return tris[:, 0], tris[:, 1], tris[:, 2]


def test_structured_mesh_hits_match_brute_force():
    """The closest hit (triangle and distance) of every ray through the tree equals the brute-force one, bit for
    bit, on a mesh large enough for the parallel top levels; the 4-wide collapse keeps the binary tree's leaves."""
    from tirender.scene.bvh import WIDTH
    from tirender.scene.bvh_build import CHUNK, build_wide
    rng = np.random.default_rng(11)
    v0, v1, v2 = structured_mesh(rng)
    T = len(v0)
    assert T > 8 * CHUNK
    bvh = build_bvh(v0, v1, v2)
    check_layout(bvh, v0, v1, v2)
    assert bvh.depth < 40
    assert check_traversal(bvh, v0, v1, v2, rng, R=3000) > 1000
    # the scene's path (vertex indices into shared positions) gives the same tree, its collapse the same leaves
    pos = np.concatenate([v0, v1, v2])
    built = build_wide(pos, np.arange(3 * T, dtype=np.int32).reshape(3, T).T)
    assert np.array_equal(built.prim_order, bvh.prim_order) and built.n_nodes == bvh.n_nodes
    w = built.wide
    leaves = sorted(zip(w.child[w.count > 0].tolist(), w.count[w.count > 0].tolist()))
    assert leaves == sorted((int(f), int(c)) for f, c in zip(bvh.node_first, bvh.node_count) if c > 0)
    assert w.box_min.shape == (w.n_nodes, 3 * WIDTH) and w.levels[-1] == w.n_nodes


def test_single_triangle():
    v0, v1, v2 = (np.array([[0, 0, 0]], np.float32), np.array([[1, 0, 0]], np.float32),
                  np.array([[0, 1, 0]], np.float32))
    bvh = build_bvh(v0, v1, v2)
    assert bvh.n_nodes == 1 and bvh.node_count[0] == 1 and bvh.node_first[0] == 0
    assert bvh.prim_order.tolist() == [0]
    t, i = traverse_numpy(bvh, [[0.2, 0.2, 1.0]], [[0, 0, -1.0]], v0, v1, v2)
    assert i[0] == 0 and abs(t[0] - 1.0) < 1e-12
    t, i = traverse_numpy(bvh, [[2.0, 2.0, 1.0]], [[0, 0, -1.0]], v0, v1, v2)
    assert i[0] == -1 and np.isinf(t[0])
    check_traversal(bvh, v0, v1, v2, np.random.default_rng(1), R=100)


def test_identical_centroids():
    rng = np.random.default_rng(2)
    # identical triangles (all bins collapse -> median fallback, leaves capped)
    base = rng.normal(size=(3, 3)).astype(np.float32)
    v = np.repeat(base[None], 200, axis=0)
    bvh = build_bvh(v[:, 0], v[:, 1], v[:, 2])
    check_layout(bvh, v[:, 0], v[:, 1], v[:, 2])
    assert bvh.node_count.max() <= 16 and bvh.n_nodes > 1
    check_traversal(bvh, v[:, 0], v[:, 1], v[:, 2], rng, R=200)
    # differently shaped triangles sharing one bounding-box centre
    w = rng.normal(size=(300, 3, 3)).astype(np.float32)
    w -= (0.5 * (w.min(1) + w.max(1)))[:, None, :]
    bvh = build_bvh(w[:, 0], w[:, 1], w[:, 2])
    check_layout(bvh, w[:, 0], w[:, 1], w[:, 2])
    check_traversal(bvh, w[:, 0], w[:, 1], w[:, 2], rng)


def test_flat_mesh():
    rng = np.random.default_rng(3)
    for axis in range(3):
        v0, v1, v2 = _random_mesh(rng, 400, size=0.1)
        for v in (v0, v1, v2):
            v[:, axis] = 0.25
        bvh = build_bvh(v0, v1, v2)
        check_layout(bvh, v0, v1, v2)
        assert (bvh.node_min[:, axis] == 0.25).all() and (bvh.node_max[:, axis] == 0.25).all()
        assert check_traversal(bvh, v0, v1, v2, rng) > 50


def test_grid_mesh_is_balanced():
    # a regular grid of 2*32*32 triangles: SAH gives small leaves and a shallow tree
    n = 32
    x, y = np.meshgrid(np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32))
    p00 = np.stack([x, y, 0 * x], -1).reshape(-1, 3)
    p10, p01, p11 = p00 + [1, 0, 0], p00 + [0, 1, 0], p00 + [1, 1, 0]
    v0 = np.concatenate([p00, p10]).astype(np.float32)
    v1 = np.concatenate([p10, p11]).astype(np.float32)
    v2 = np.concatenate([p01, p01]).astype(np.float32)
    bvh = build_bvh(v0, v1, v2)
    check_layout(bvh, v0, v1, v2)
    assert bvh.node_count[bvh.node_count > 0].max() <= 4
    assert bvh.depth <= 16
    check_traversal(bvh, v0, v1, v2, np.random.default_rng(4))


def test_empty_mesh_is_an_error():
    z = np.zeros((0, 3), np.float32)
    with pytest.raises(ConfigError):
        build_bvh(z, z, z)


def test_brute_force_basics():
    v0 = np.array([[0, 0, 0], [0, 0, -1]], np.float32)
    v1 = np.array([[1, 0, 0], [1, 0, -1]], np.float32)
    v2 = np.array([[0, 1, 0], [0, 1, -1]], np.float32)
    o = np.array([[0.2, 0.2, 1.0], [0.2, 0.2, -0.5], [0.2, 0.2, 0.0], [5, 5, 1]])
    d = np.array([[0, 0, -1.0], [0, 0, 1.0], [0, 0, -1.0], [0, 0, -1.0]])
    t, i = intersect_brute_force(o, d, v0, v1, v2)
    assert i.tolist() == [0, 0, 1, -1]        # closest hit; origin on a triangle skips it
    assert np.allclose(t[:3], [1.0, 0.5, 1.0]) and np.isinf(t[3])


@pytest.mark.parametrize("T", [1, 7, 500])
def test_collapse_wide_layout(T):
    """The 4-wide BVH keeps the binary tree's leaves, reaches each exactly once, and every child
    box holds its subtree's triangles; empty slots can never be hit (+inf boxes)."""
    from tirender.scene.bvh import WIDTH
    from tirender.scene.bvh_build import collapse
    rng = np.random.default_rng(T)
    v0, v1, v2 = _random_mesh(rng, T)
    bvh = build_bvh(v0, v1, v2, max_leaf=2)
    w = collapse(bvh)
    lo = w.box_min.reshape(-1, 3, WIDTH)
    hi = w.box_max.reshape(-1, 3, WIDTH)
    tri_lo = np.minimum(np.minimum(v0, v1), v2)[bvh.prim_order]
    tri_hi = np.maximum(np.maximum(v0, v1), v2)[bvh.prim_order]
    seen_nodes, leaves = [], []

    def tris_below(n):
        out = []
        for s in range(WIDTH):
            if w.count[n, s] > 0:
                out += list(range(w.child[n, s], w.child[n, s] + w.count[n, s]))
            elif np.isfinite(hi[n, 0, s]):
                out += tris_below(w.child[n, s])
        return out

    todo = [0]
    while todo:
        n = todo.pop()
        seen_nodes.append(n)
        for s in range(WIDTH):
            if not np.isfinite(hi[n, 0, s]):          # empty slot
                assert np.all(lo[n, :, s] == np.inf) and w.count[n, s] == 0
                continue
            if w.count[n, s] > 0:
                k = np.arange(w.child[n, s], w.child[n, s] + w.count[n, s])
                leaves.append((int(w.child[n, s]), int(w.count[n, s])))
            else:
                assert w.child[n, s] > n          # children come after their parent
                todo.append(int(w.child[n, s]))
                k = np.array(tris_below(int(w.child[n, s])))
            assert np.all(tri_lo[k] >= lo[n, :, s].T - 1e-6) and np.all(tri_hi[k] <= hi[n, :, s].T + 1e-6)
    assert sorted(seen_nodes) == list(range(w.n_nodes))
    binary = sorted((int(f), int(c)) for f, c in zip(bvh.node_first, bvh.node_count) if c > 0)
    assert sorted(leaves) == binary
    covered = np.concatenate([np.arange(f, f + c) for f, c in leaves])
    assert np.array_equal(np.sort(covered), np.arange(T))
