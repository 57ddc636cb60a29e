"""Build + render a ~1M-triangle mesh: mesh load time, BVH build time per million triangles,
render time and peak RSS.

    python benchmarks/big_mesh.py [--tris 1000000] [--arch cpu]
"""
import argparse
import os
import resource
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tris", type=int, default=1_000_000)
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--spp", type=int, default=4)
    a = ap.parse_args()
    import tirender
    tirender.init(a.arch)
    from tirender.scene.mesh_io import save_ply
    from tirender.scene.shapes import sphere
    res = int(np.sqrt(a.tris))
    m = sphere(res)
    rng = np.random.default_rng(0)
    m["positions"] = m["positions"] * (1 + 0.01 * rng.standard_normal((len(m["positions"]), 1))).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.ply")
        save_ply(path, m["positions"], m["faces"], m["normals"], m["uvs"])
        scene = {"integrator": {"type": "path", "max_depth": 3},
                 "sensors": [{"fov": 40, "to_world": {"look_at": {"origin": [0, 0, 4], "target": [0, 0, 0], "up": [0, 1, 0]}},
                              "film": {"width": 128, "height": 128}}],
                 "bsdfs": {"m": {"type": "roughplastic", "roughness": 0.2}},
                 "shapes": [{"id": "big", "type": "ply", "filename": path, "bsdf": "m"}],
                 "emitters": [{"type": "constant", "radiance": 1.0}]}
        t0 = time.perf_counter()
        sc = tirender.load_scene(scene)
        t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    img = tirender.render(sc, spp=1, progress=False)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    img = tirender.render(sc, spp=a.spp, progress=False)
    t_render = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = sc.n_triangles
    print(f"{n} triangles: load+pack {t_load:.2f} s (BVH build {sc.bvh_seconds:.2f} s = "
          f"{sc.bvh_seconds / n * 1e6:.2f} s per million, {sc.bvh.n_nodes} nodes)")
    print(f"first render (incl. upload/compile) {t_first:.2f} s; 128x128 x {a.spp} spp: {t_render:.2f} s "
          f"({128 * 128 * a.spp / t_render / 1e6:.2f} Msamples/s); peak RSS {rss:.0f} MB; mean {img.mean():.4f}")


if __name__ == "__main__":
    main()
