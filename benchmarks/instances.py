"""Instances stored once: rows on the device, load time and peak RSS for N instances of one mesh.

    python3 benchmarks/instances.py              # 64, 256 and 4096 instances, each in a fresh process
    python3 benchmarks/instances.py --child 256  # one count in this process

A shapegroup holding one PLY mesh (a 160-segment UV sphere, 25,280 triangles) placed N times on a grid, loaded
(`tirender.load_scene` + bind) and rendered once (64², 4 spp, the compile included in the peak RSS). With the
two-level BVH (scene/toplevel.py) the rows grow by one per instance; flattened copies grew by the mesh's triangles.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time


def child(n):
    import numpy as np
    import tirender
    tirender.init("cpu")
    from tirender.scene import mesh_io, shapes as builtin
    d = tempfile.mkdtemp()
    m = builtin.sphere(160)
    mesh_io.save_ply(os.path.join(d, "m.ply"), m["positions"], m["faces"])
    side = max(int(np.ceil(np.sqrt(n))), 1)
    spec = {"sensor": {"film": {"width": 64, "height": 64},
                       "to_world": {"look_at": {"origin": [0, -3.0 * side, 1.5 * side], "target": [0, 0, 0],
                                                "up": [0, 0, 1]}}},
            "emitters": [{"type": "constant"}],
            "shapes": [{"type": "shapegroup", "id": "g", "shapes": [{"type": "ply", "filename": "m.ply"}]}]
            + [{"type": "instance", "shapegroup": "g",
                "to_world": {"translate": [3.0 * (k % side - side / 2), 3.0 * (k // side - side / 2), 0]}}
               for k in range(n)]}
    t = time.perf_counter()
    sc = tirender.load_scene(spec, base_dir=d)
    sc.bind()
    load = time.perf_counter() - t
    img = np.asarray(tirender.render(sc, spp=4, seed=0, progress=False))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {n:,} | {sc.n_triangles:,} | {load:.2f} s | {rss:.0f} MB | {img.mean():.4f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="64,256,4096")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        return child(a.child)
    print("| instances | rows on the device | load + bind | peak RSS | mean pixel |\n| --- | --- | --- | --- | --- |")
    for n in (int(x) for x in a.counts.split(",")):
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(n)], check=True)


if __name__ == "__main__":
    main()
