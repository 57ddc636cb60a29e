"""Memory account: where a task's peak RSS goes, step by step, in a fresh process.

For a task's PRB step (``--scene``: cbox = configs/cbox.yaml, 256²; texture = the scene of
configs/texture_recovery.yaml, 128²; volume = configs/volume_recovery.yaml's view 0 at the task's
start, 32³ grid, prbvolpath; primal --spp + adjoint --spp) it prints the
resident set size (current, from /proc/self/statm) and the peak (ru_maxrss) after each stage:
Python + numpy imports, `import taichi`, `ti.init`, the scene description (parsing, then the Scene: BVH
and arrays), the device storage (`scene.bind()`: Taichi fields at their capacities, listed with their
sizes), the first render (kernel compilation), steady renders, the first and steady gradient passes. The
field table shows which capacities dominate, the host table what the Scene keeps.

``--scene lego``: Mitsuba's tutorial lego scene (2 M triangles in 439 PLY files, an .hdr environment
map, a volume texture; the mitsuba-tutorials repository's ``scenes/`` folder named by the environment
variable TIRENDER_MITSUBA_TUTORIALS), unchanged; renders at 128² (no gradient pass: its texture
parameters are the environment map's and the volume's). ``--mitsuba`` runs Mitsuba 3's ``mi.load_file`` of
the same scene (llvm_ad_rgb: DRJIT_LIBLLVM_PATH) instead and prints its stages, for comparison.

    python benchmarks/memory.py [--scene cbox|texture|volume|lego] [--spp 64] [--mitsuba]
"""
import argparse
import os
import resource

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
SCENES = {"cbox": CBOX, "texture": os.path.join(ROOT, "configs", "texture_recovery.yaml"),
          "volume": os.path.join(ROOT, "configs", "volume_recovery.yaml"),
          "lego": os.path.join(os.environ.get("TIRENDER_MITSUBA_TUTORIALS", "scenes"), "lego", "scene.xml")}
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
    ap.add_argument("--mitsuba", action="store_true", help="Mitsuba 3's load of the scene instead (lego)")
    a = ap.parse_args()
    if a.scene == "lego" and not os.path.exists(SCENES["lego"]):
        raise SystemExit("--scene lego: set TIRENDER_MITSUBA_TUTORIALS to the mitsuba-tutorials 'scenes' folder")
    rows = []
    last = [rss_mb()]

    def mark(stage):
        now = rss_mb()
        rows.append((stage, now, now - last[0], peak_mb()))
        last[0] = now

    def table():
        print(f"{'stage':28s} {'RSS MB':>8s} {'+MB':>8s} {'peak MB':>8s}")
        for stage, now, d, pk in rows:
            print(f"{stage:28s} {now:8.1f} {d:+8.1f} {pk:8.1f}")
    mark("python + numpy")
    if a.mitsuba:
        import mitsuba as mi
        mi.set_variant("llvm_ad_rgb")
        mark("import mitsuba (llvm_ad_rgb)")
        scene = mi.load_file(SCENES[a.scene])
        mark("mi.load_file")
        mi.render(scene, spp=1)
        mark("first render (1 spp)")
        return table()
    import taichi as ti
    mark("import taichi")
    import tirender
    tirender.init("cpu")
    mark("ti.init (cpu)")
    from tirender.api import describe, render, render_grad, scene_from_config
    from tirender.config import load_config
    cfg = load_config(SCENES[a.scene], scene_overrides=["sensors.0.film.width=128", "sensors.0.film.height=128"]
                      if a.scene == "lego" else None)
    described = describe(cfg)
    mark("scene description (parse)")
    sc = scene_from_config(cfg, described)
    del described
    if a.scene == "volume":   # the task's start: a constant 32^3 grid
        sc.resize_grid("smoke.density", (32, 32, 32))
        sc.params["smoke.density"] = np.full(sc.params["smoke.density"].shape, 0.02, np.float32)
    mark("scene (BVH, arrays)")
    st = sc.bind()
    mark("device storage (fields)")
    img = render(sc, spp=1, seed=0, progress=False)
    mark("first render (compile)")
    render(sc, spp=a.spp, seed=1, progress=False)
    mark(f"render {a.spp} spp")
    if a.scene != "lego":
        w = np.random.default_rng(0).random(img.shape).astype(np.float32)
        render_grad(sc, w, spp=1, seed=0, progress=False)
        mark("first gradient (compile)")
        render_grad(sc, w, spp=a.spp, seed=1, progress=False)
        mark(f"gradient {a.spp} spp")
    table()
    host = _host_arrays(sc)
    print(f"\nhost arrays the scene keeps: {sum(h[0] for h in host):.1f} MB; largest:")
    for mb, name, shape in host[:14]:
        print(f"  {name:24s} {str(shape):>16s} {mb:8.1f} MB")
    # the device fields by size
    sizes = []
    st = getattr(st, "base", st)          # a VolumeTextureView: its storage
    for name, f in vars(st).items():
        if isinstance(f, ti.Field):
            n = int(np.prod(f.shape)) * int(getattr(f, "n", 1) or 1) * int(getattr(f, "m", 1) or 1)
            sizes.append((n * _bytes(f.dtype) / 2 ** 20, name, f.shape))
    sizes.sort(reverse=True)
    print(f"\ndevice fields: {sum(s[0] for s in sizes):.1f} MB in {len(sizes)} fields; largest:")
    for mb, name, shape in sizes[:24]:
        print(f"  {name:16s} {str(shape):>16s} {mb:8.1f} MB")
    print(f"(storage capacities: {st.caps}; gradient copies {st.grad_copies} of the first {st.grad_hot} entries)")


def _host_arrays(sc):
    """(MB, name, shape) of the numpy arrays a Scene holds (its device arrays, its triangles, the description's
    meshes and textures; views of another array counted once, with it), largest first."""
    seen, out = set(), []

    def add(name, arr):
        if not isinstance(arr, np.ndarray):
            return
        base = arr if arr.base is None else arr.base
        if id(base) in seen or not isinstance(base, np.ndarray):
            return
        seen.add(id(base))
        out.append((base.nbytes / 2 ** 20, name, base.shape))
    for k, v in sc.host_arrays().items():
        add(k, v)
    add("params.data", sc.params.data)
    for s in sc.desc.shapes:
        for k in ("positions", "faces", "normals", "uvs"):
            add(f"shapes[*].{k}", getattr(s, k))
    for t in sc.desc.textures:
        add(f"texture {t.name}", t.data)
    merged = {}
    for mb, name, shape in out:
        m = merged.setdefault(name, [0.0, name, shape])
        m[0] += mb
    return sorted((tuple(v) for v in merged.values()), key=lambda r: -r[0])


def _bytes(dt):
    import taichi as ti
    return 8 if dt in (ti.i64, ti.f64, ti.u64) else 2 if dt in (ti.f16, ti.i16, ti.u16) else 1 if dt in (ti.i8, ti.u8) else 4


if __name__ == "__main__":
    main()
