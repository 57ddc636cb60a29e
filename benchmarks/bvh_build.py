"""BVH build speed: seconds per million triangles for ~100k and ~1M triangles, and what a refit
costs instead (moved vertices, same topology: scene/bvh.refit, as height fields use it after each
optimiser step): the 4-wide collapse, the one-off refit plan and the refit itself, checked against
the boxes of a fresh collapse of the moved triangles' tree.

Mesh: a UV-sphere triangle soup with per-vertex noise (random-ish sizes/orientations).
Usage: python benchmarks/bvh_build.py [n_triangles ...]   (default 100000 1000000)
"""
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tirender.scene.bvh import build_bvh, collapse, refit, refit_plan  # noqa: E402


def noisy_sphere(n_tri, noise=0.3, seed=0):
    """(v0, v1, v2) float32 (T,3) with T ~= n_tri: sphere grid, corners jittered by
    ``noise`` times the grid spacing."""
    nv = max(2, int(round(np.sqrt(n_tri / 4))))
    nu = max(3, int(round(n_tri / (2 * nv))))
    u = np.linspace(0, 2 * np.pi, nu + 1)
    v = np.linspace(0.0, np.pi, nv + 1)
    U, V = np.meshgrid(u, v, indexing="ij")
    P = np.stack([np.sin(V) * np.cos(U), np.sin(V) * np.sin(U), np.cos(V)], -1)
    a, b, c, d = P[:-1, :-1], P[1:, :-1], P[1:, 1:], P[:-1, 1:]
    v0 = np.concatenate([a.reshape(-1, 3), a.reshape(-1, 3)])
    v1 = np.concatenate([b.reshape(-1, 3), c.reshape(-1, 3)])
    v2 = np.concatenate([c.reshape(-1, 3), d.reshape(-1, 3)])
    rng = np.random.default_rng(seed)
    h = noise * np.pi / nv
    out = [(x + h * rng.standard_normal(x.shape)).astype(np.float32) for x in (v0, v1, v2)]
    return tuple(out)


def main(sizes):
    for n in sizes:
        v0, v1, v2 = noisy_sphere(n)
        T = len(v0)
        t = time.perf_counter()
        bvh = build_bvh(v0, v1, v2)
        dt = time.perf_counter() - t
        leaves = bvh.node_count[bvh.node_count > 0]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{T:>9d} triangles: build {dt:6.2f} s = {dt / T * 1e6:5.2f} s per million, "
              f"{bvh.n_nodes} nodes, {len(leaves)} leaves (mean {leaves.mean():.2f}, "
              f"max {leaves.max()} tris), depth {bvh.depth}, peak RSS {rss:.0f} MiB",
              flush=True)
        t = time.perf_counter()
        wide = collapse(bvh)
        dc = time.perf_counter() - t
        t = time.perf_counter()
        plan = refit_plan(wide)
        dp = time.perf_counter() - t
        o = bvh.prim_order
        rng = np.random.default_rng(1)
        moved = [x + 0.01 * rng.standard_normal(x.shape).astype(np.float32) for x in (v0, v1, v2)]
        best = np.inf
        for _ in range(3):
            t = time.perf_counter()
            refit(wide, plan, moved[0][o], moved[1][o], moved[2][o])
            best = min(best, time.perf_counter() - t)
        lo = np.minimum(np.minimum(moved[0][o], moved[1][o]), moved[2][o])
        root_ok = np.allclose(np.where(np.isfinite(wide.box_min[0]), wide.box_min[0], np.inf).reshape(3, -1).min(1),
                              lo.min(0), atol=1e-6)
        print(f"{'':>9s}  refit {best * 1e3:7.1f} ms = {best / T * 1e6:5.3f} s per million "
              f"({dt / best:.0f}x faster than the build); collapse {dc:.2f} s, refit plan {dp:.2f} s (once); "
              f"root box {'matches' if root_ok else 'DIFFERS from'} the moved triangles", flush=True)


if __name__ == "__main__":
    main([int(float(a)) for a in sys.argv[1:]] or [100_000, 1_000_000])
