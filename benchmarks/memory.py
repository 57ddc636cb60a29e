"""Memory account: where a task's peak RSS goes, step by step, in a fresh process.

For a task's PRB step (``--scene``: cbox = configs/cbox.yaml, 256²; texture = the scene of
configs/texture_recovery.yaml, 128²; volume = configs/volume_recovery.yaml's view 0 at the task's
start, 32³ grid, prbvolpath; primal --spp + adjoint --spp) it prints the
resident set size (current, from /proc/self/statm) and the peak (ru_maxrss) after each stage:
Python + numpy imports, `import taichi`, `ti.init`, the scene description, the device storage
(`scene.bind()`: Taichi fields at their capacities, listed with their sizes), the first render
(kernel compilation), steady renders, the first and steady gradient passes. The field table
shows which capacities dominate.

    python benchmarks/memory.py [--scene cbox|texture|volume] [--spp 64]
"""
import argparse
import os
import resource

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
SCENES = {"cbox": CBOX, "texture": os.path.join(ROOT, "configs", "texture_recovery.yaml"),
          "volume": os.path.join(ROOT, "configs", "volume_recovery.yaml")}
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2 ** 20


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--scene", default="cbox", choices=sorted(SCENES))
    a = ap.parse_args()
    rows = []
    last = [rss_mb()]

    def mark(stage):
        now = rss_mb()
        rows.append((stage, now, now - last[0], peak_mb()))
        last[0] = now
    mark("python + numpy")
    import taichi as ti
    mark("import taichi")
    import tirender
    tirender.init("cpu")
    mark("ti.init (cpu)")
    from tirender.api import load_scene, render, render_grad
    sc = load_scene(SCENES[a.scene])
    if a.scene == "volume":   # the task's start: a constant 32^3 grid
        sc.resize_grid("smoke.density", (32, 32, 32))
        sc.params["smoke.density"] = np.full(sc.params["smoke.density"].shape, 0.02, np.float32)
    mark("scene description")
    st = sc.bind()
    mark("device storage (fields)")
    img = render(sc, spp=1, seed=0, progress=False)
    mark("first render (compile)")
    render(sc, spp=a.spp, seed=1, progress=False)
    mark(f"render {a.spp} spp")
    w = np.random.default_rng(0).random(img.shape).astype(np.float32)
    render_grad(sc, w, spp=1, seed=0, progress=False)
    mark("first gradient (compile)")
    render_grad(sc, w, spp=a.spp, seed=1, progress=False)
    mark(f"gradient {a.spp} spp")
    print(f"{'stage':28s} {'RSS MB':>8s} {'+MB':>8s} {'peak MB':>8s}")
    for stage, now, d, pk in rows:
        print(f"{stage:28s} {now:8.1f} {d:+8.1f} {pk:8.1f}")
    # the device fields by size
    sizes = []
    for name, f in vars(st).items():
        if isinstance(f, ti.Field):
            n = int(np.prod(f.shape)) * int(getattr(f, "n", 1) or 1) * int(getattr(f, "m", 1) or 1)
            sizes.append((n * _bytes(f.dtype) / 2 ** 20, name, f.shape))
    sizes.sort(reverse=True)
    print(f"\ndevice fields: {sum(s[0] for s in sizes):.1f} MB in {len(sizes)} fields; largest:")
    for mb, name, shape in sizes[:10]:
        print(f"  {name:16s} {str(shape):>16s} {mb:8.1f} MB")
    print(f"(storage capacities: {st.caps}; gradient copies {st.grad_copies} of the first {st.grad_hot} entries)")


def _bytes(dt):
    import taichi as ti
    return 8 if dt in (ti.i64, ti.f64, ti.u64) else 2 if dt in (ti.f16, ti.i16, ti.u16) else 1 if dt in (ti.i8, ti.u8) else 4


if __name__ == "__main__":
    main()
