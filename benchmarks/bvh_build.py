"""BVH build speed and tree quality against the previous (numpy) builder, and a large scene's load side by side
with Mitsuba 3. Prints the table of docs/performance.md ("BVH build and large scenes").

    python benchmarks/bvh_build.py [--triangles 1e6] [--repeats 3] [--lego DIR/scene.xml] [--baseline CHECKOUT]
                                   [--old-ref c968c37] [--res 128] [--spp 4] [--rays 1e6] [--only build,quality,load]

**build**: seconds per million triangles of scene/bvh_build.build_wide (binned SAH + 4-wide collapse, Taichi kernels;
their first call in a process, which compiles or loads them from Taichi's cache, timed apart) and of the numpy
builder the project had before (``git show OLD_REF:tirender/scene/bvh.py``: build_bvh + collapse), on a noisy-sphere
triangle soup of --triangles; the medians of --repeats runs, the two builders alternating.

**quality**: for configs/cbox.yaml, the lego scene (--lego) and the --triangles mesh, both builders' trees: the SAH cost
of the binary tree (scene/bvh_build.sah_cost: 1 per internal node, 1 per triangle, areas relative to the root's),
rays per second of closest-hit queries (core/intersect.intersect of --rays random rays: origins uniform in the
scene's box, directions uniform on the sphere; both trees must give the same hits) and the wall time of a
render (the scene's integrator, --res² pixels, --spp; samples per second), medians of --repeats, alternating.
Both scenes use the same renderer and device storage; only the tree differs.

**load**: the lego scene loaded in fresh processes, alternating, --repeats times each after one untimed run per
loader (caches warm: Taichi's kernels, Python's bytecode, which the children may write as in a user's installation,
the files' pages): ``tirender.load_scene`` of
this checkout (and of --baseline, another checkout, e.g. /work/main), and Mitsuba 3's ``mi.load_file``
(llvm_ad_rgb: DRJIT_LIBLLVM_PATH). Per loader: the median seconds of the load (imports and ``ti.init`` /
``mi.set_variant`` timed apart), its CPU seconds (with its child processes'), peak RSS (ru_maxrss of the
process), the number of output lines containing "warn" (case-insensitive) and the peak RSS of its largest child
process (tirender's forked mesh reader, scene/prefetch.py: it counts the pages it shares with the parent, and ends
before the parent's peak, the build).

The lego scene is Mitsuba's tutorial scene (mitsuba-renderer/mitsuba-tutorials ``scenes/lego/scene.xml``; default
$TIRENDER_MITSUBA_TUTORIALS/lego/scene.xml), read where it lies. Timings on a shared machine are noisy: the medians
of alternating runs are printed with their spread (min-max).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import types

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)

OLD_REF = "c968c37"      # main before the BVH was built by Taichi kernels (numpy build_bvh + collapse)


def noisy_sphere(n_tri, noise=0.3, seed=0):
    """(v0, v1, v2) float32 (T, 3) with T ~= n_tri: a UV-sphere grid's triangles as a soup, corners jittered by
    ``noise`` times the grid spacing (random-ish sizes and orientations)."""
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
    return tuple((x + h * rng.standard_normal(x.shape)).astype(np.float32) for x in (v0, v1, v2))


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def _fmt(xs, unit="s", digits=2):
    return f"{_median(xs):.{digits}f} {unit} ({min(xs):.{digits}f}-{max(xs):.{digits}f})" if len(xs) > 1 \
        else f"{xs[0]:.{digits}f} {unit}"


def old_builder(ref):
    """The numpy builder module of commit `ref` (tirender/scene/bvh.py there: build_bvh, collapse)."""
    src = subprocess.run(["git", "-C", ROOT, "show", f"{ref}:tirender/scene/bvh.py"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("tirender.scene._bvh_old")
    mod.__package__ = "tirender.scene"
    exec(compile(src, f"{ref}:tirender/scene/bvh.py", "exec"), mod.__dict__)
    return mod


def _soup(v0, v1, v2):
    T = len(v0)
    return np.concatenate([v0, v1, v2]), np.arange(3 * T, dtype=np.int32).reshape(3, T).T.copy()


# ----------------------------------------------------------------------------- build
def bench_build(a, old):
    import tirender
    tirender.init("cpu")
    from tirender.scene import bvh_build
    v0, v1, v2 = noisy_sphere(a.triangles)
    T = len(v0)
    pos, face = _soup(v0, v1, v2)
    t = time.perf_counter()
    bvh_build.build_wide(pos[:3 * 2000], np.arange(6000, dtype=np.int32).reshape(2000, 3))   # compile / cache
    first = time.perf_counter() - t
    new, olds = ([], []), ([], [])
    for _ in range(a.repeats):
        for out, build in ((new, lambda: bvh_build.build_wide(pos, face)),
                           (olds, lambda: old.collapse(old.build_bvh(v0, v1, v2)))):
            t, c = time.perf_counter(), time.process_time()
            build()
            out[0].append(time.perf_counter() - t)
            out[1].append(time.process_time() - c)
    m = T / 1e6
    print(f"\n## build ({T:,} triangles, noisy sphere soup; {a.repeats} runs alternating, median (min-max))")
    print(f"{'builder':44s} {'wall s per 1M triangles':>28s} {'CPU s per 1M':>13s}")
    for name, r in (("Taichi kernels (scene/bvh_build.build_wide)", new),
                    ("numpy (" + a.old_ref + ": bvh.build_bvh + collapse)", olds)):
        print(f"{name:44s} {_fmt([x / m for x in r[0]]):>28s} {_median(r[1]) / m:13.2f}")
    print(f"(the kernels' first call in this process, compile or cache load: {first:.2f} s, once)")


# ----------------------------------------------------------------------------- quality
def _old_built(old):
    """build_wide's signature and result (scene/bvh_build.Built) from the old numpy builder."""
    from tirender.scene.bvh_build import Built

    def build(pos, face, *args, **kw):
        p = pos[face]
        b = old.build_bvh(p[:, 0], p[:, 1], p[:, 2])
        w = old.collapse(b)
        return Built(prim_order=b.prim_order.astype(np.int32), wide=w, n_nodes=b.n_nodes, depth=b.depth)
    return build


def _scene_corners(sc):
    """(v0, v1, v2) float32 of a scene's triangles (description order)."""
    p = [s.positions[s.faces] for s in sc.desc.shapes]
    p = np.concatenate(p).astype(np.float32)
    return p[:, 0], p[:, 1], p[:, 2]


_CAST = None


def _cast_kernel():
    global _CAST
    if _CAST is None:
        import taichi as ti
        from tirender.core.intersect import intersect
        from tirender.core.math import vec3

        @ti.kernel
        def cast(st: ti.template(), o: ti.types.ndarray(), d: ti.types.ndarray(), t_out: ti.types.ndarray(),
                 i_out: ti.types.ndarray()):
            for k in range(o.shape[0]):
                tri, t, b1, b2, _inst = intersect(st, vec3(o[k, 0], o[k, 1], o[k, 2]), vec3(d[k, 0], d[k, 1], d[k, 2]), 1e30)
                t_out[k] = t
                i_out[k] = tri
        _CAST = cast
    return _CAST


def _random_rays(v0, v1, v2, n, seed=0):
    lo = np.minimum(np.minimum(v0.min(0), v1.min(0)), v2.min(0))
    hi = np.maximum(np.maximum(v0.max(0), v1.max(0)), v2.max(0))
    rng = np.random.default_rng(seed)
    o = (lo + (hi - lo) * rng.random((n, 3))).astype(np.float32)
    d = rng.normal(size=(n, 3))
    return o, (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)


def bench_quality(a, old):
    import tirender
    tirender.init("cpu")
    from tirender.api import scene_from_config
    from tirender.config import load_config
    from tirender.scene import scene as scene_mod
    from tirender.scene.bvh_build import build_bvh, build_wide, refit_device, sah_cost
    cases = [("cbox (configs/cbox.yaml)", os.path.join(ROOT, "configs", "cbox.yaml"))]
    if a.lego and os.path.exists(a.lego):
        cases.append(("lego (Mitsuba tutorials)", a.lego))
    cases.append((f"noisy sphere ({a.triangles / 1e6:g}M triangles)", None))
    print(f"\n## tree quality ({a.rays:,} random rays; renders {a.res}x{a.res}, {a.spp} spp; "
          f"{a.repeats} runs alternating, median (min-max))")
    print(f"{'scene':30s} {'builder':7s} {'triangles':>10s} {'SAH cost':>9s} {'Mrays/s':>22s} "
          f"{'render s':>22s} {'ksamples/s':>11s}")
    overrides = [f"sensors.0.film.width={a.res}", f"sensors.0.film.height={a.res}"]
    for name, path in cases:
        if path is None:
            cfg = _sphere_config(a)
        else:
            cfg = load_config(path, scene_overrides=overrides)
        scenes = {}
        for label, builder in (("new", build_wide), ("old", _old_built(old))):
            scene_mod.build_wide = builder
            try:
                scenes[label] = scene_from_config(cfg)
            finally:
                scene_mod.build_wide = build_wide
        v0, v1, v2 = _scene_corners(scenes["new"])
        sah = {"new": sah_cost(build_bvh(v0, v1, v2)), "old": sah_cost(old.build_bvh(v0, v1, v2))}
        o, d = _random_rays(v0, v1, v2, a.rays)
        for sc in scenes.values():       # both on one storage (the second may grow it), compiled once
            sc.bind()
        hits, rays, renders = {}, {k: [] for k in scenes}, {k: [] for k in scenes}
        cast = _cast_kernel()
        for label, sc in scenes.items():  # warm-up: compile
            st = sc.bind()
            t_out, i_out = np.zeros(len(o), np.float32), np.zeros(len(o), np.int32)
            cast(st, o, d, t_out, i_out)
            # hits as input triangle ids (the trees order the triangles differently)
            hits[label] = (np.where(i_out >= 0, sc.bvh.prim_order[np.maximum(i_out, 0)], -1), t_out)
            tirender.render(sc, spp=1, seed=0, progress=False)
        same = np.array_equal(hits["new"][0], hits["old"][0])
        same_tree = np.array_equal(scenes["new"].bvh.prim_order, scenes["old"].bvh.prim_order) and \
            all(np.array_equal(getattr(scenes["new"].bvh.wide, k), getattr(scenes["old"].bvh.wide, k))
                for k in ("box_min", "box_max", "child", "count"))
        dt_max = float(np.abs(hits["new"][1] - hits["old"][1])[hits["new"][0] >= 0].max(initial=0.0))
        for _ in range(a.repeats):
            for label, sc in scenes.items():
                st = sc.bind()
                t_out, i_out = np.zeros(len(o), np.float32), np.zeros(len(o), np.int32)
                t = time.perf_counter()
                cast(st, o, d, t_out, i_out)
                rays[label].append(len(o) / (time.perf_counter() - t) / 1e6)
                t = time.perf_counter()
                tirender.render(sc, spp=a.spp, seed=1, progress=False)
                renders[label].append(time.perf_counter() - t)
        st = scenes["new"].bind()
        refit_device(st, scenes["new"].bvh.wide)
        refits = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            refit_device(st, scenes["new"].bvh.wide)
            refits.append(time.perf_counter() - t)
        px = scenes["new"].sensors[0].width * scenes["new"].sensors[0].height
        for label in ("new", "old"):
            print(f"{name:30s} {label:7s} {scenes[label].n_triangles:>10,d} {sah[label]:9.2f} "
                  f"{_fmt(rays[label], '', 2):>22s} {_fmt(renders[label], '', 2):>22s} "
                  f"{px * a.spp / _median(renders[label]) / 1e3:11.1f}")
        n = scenes["new"].n_triangles
        print(f"{'':30s} same 4-wide tree: {same_tree}; same closest hits for every ray: {same} (hit fraction "
              f"{(hits['new'][0] >= 0).mean():.3f}; max |t_new - t_old| {dt_max:.2e}); refit of the new tree on "
              f"the device (bvh_build.refit_device): {_median(refits) * 1e3:.1f} ms"
              + (f" = {_median(refits) / n * 1e6:.3f} s per 1M triangles" if n >= 100_000 else ""))
        del scenes


def _sphere_config(a):
    """A scene dict: the noisy-sphere soup (written as a PLY into a temporary folder), diffuse, a constant
    environment, a camera at distance 3."""
    from tirender.config import load_config
    from tirender.scene.mesh_io import save_ply
    v0, v1, v2 = noisy_sphere(a.triangles)
    pos, face = _soup(v0, v1, v2)
    path = os.path.join(tempfile.mkdtemp(prefix="bvh_bench_"), "sphere.ply")
    save_ply(path, pos, face)
    spec = {"integrator": {"type": "path", "max_depth": 4},
            "sensors": [{"type": "perspective", "fov": 45,
                         "to_world": {"look_at": {"origin": [0, 0.5, 3], "target": [0, 0, 0], "up": [0, 1, 0]}},
                         "film": {"width": a.res, "height": a.res}}],
            "bsdfs": {"white": {"type": "diffuse", "reflectance": 0.7}},
            "shapes": [{"id": "sphere", "type": "ply", "filename": path, "bsdf": "white", "face_normals": True}],
            "emitters": [{"type": "constant", "radiance": 1.0}]}
    return load_config({"scene": spec})


# ----------------------------------------------------------------------------- load
_LOAD = r"""
import os, resource, sys, time
def cpu():       # this process's CPU seconds and its reaped children's (tirender's forked mesh reader)
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
t0 = time.perf_counter()
{setup}
t1, c1 = time.perf_counter(), cpu()
sc = {load}(sys.argv[1])
t2, c2 = time.perf_counter(), cpu()
{extra}print("RESULT", t1 - t0, t2 - t1, c2 - c1, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""
_TIRENDER_LOAD = _LOAD.format(setup='import tirender\ntirender.init("cpu")', load="tirender.load_scene",
                              extra='print("FROM", tirender.__file__)\n')
_MITSUBA_LOAD = _LOAD.format(setup='import mitsuba as mi\nmi.set_variant("llvm_ad_rgb")', load="mi.load_file",
                             extra="")


def _run_load(code, path, pythonpath):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    # Python's bytecode cache as in a user's installation (this machine's shell turns it off, which makes every
    # process compile tirender's modules from source: ~0.4 s of the first load_scene, which imports them)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")
    # run from a neutral folder: `python -c` puts the working directory first on sys.path
    p = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True,
                       cwd=tempfile.gettempdir())
    out = p.stdout + p.stderr
    res = [ln for ln in out.splitlines() if ln.startswith("RESULT")]
    if p.returncode or not res:
        raise SystemExit(f"load failed ({pythonpath}):\n{out[-3000:]}")
    src = [ln.split(None, 1)[1] for ln in out.splitlines() if ln.startswith("FROM")]
    if src and not os.path.abspath(src[0]).startswith(os.path.abspath(pythonpath) + os.sep):
        raise SystemExit(f"{pythonpath}: the child imported tirender from {src[0]}")
    imp, load, cpu, rss, child = (float(x) for x in res[-1].split()[1:])
    warn = sum("warn" in ln.lower() for ln in out.splitlines())
    return imp, load, rss, warn, cpu, child


def bench_load(a):
    if not (a.lego and os.path.exists(a.lego)):
        print("\n## load: no lego scene (--lego or $TIRENDER_MITSUBA_TUTORIALS)")
        return
    loaders = [("tirender (this checkout)", _TIRENDER_LOAD, ROOT)]
    if a.baseline:
        loaders.append((f"tirender ({a.baseline})", _TIRENDER_LOAD, a.baseline))
    loaders.append(("Mitsuba 3 (mi.load_file, llvm_ad_rgb)", _MITSUBA_LOAD, os.environ.get("PYTHONPATH", "")))
    res = {n: [] for n, _, _ in loaders}
    for name, code, pp in loaders:       # untimed: Taichi's kernel cache, the bytecode cache, the files' pages
        _run_load(code, a.lego, pp)
    for _ in range(a.repeats):
        for name, code, pp in loaders:
            res[name].append(_run_load(code, a.lego, pp))
    print(f"\n## load of {a.lego} (fresh processes, {a.repeats} runs alternating, median (min-max))")
    print(f"{'loader':40s} {'load s (wall)':>22s} {'CPU s':>7s} {'import+init s':>14s} {'peak RSS MB':>12s} "
          f"{'warning lines':>14s} {'child peak RSS MB':>18s}")
    mi = _median([r[1] for r in res[loaders[-1][0]]])
    for name, _, _ in loaders:
        r = res[name]
        print(f"{name:40s} {_fmt([x[1] for x in r]):>22s} {_median([x[4] for x in r]):7.2f} "
              f"{_median([x[0] for x in r]):14.2f} {_median([x[2] for x in r]):12.0f} "
              f"{_median([x[3] for x in r]):14.0f} {_median([x[5] for x in r]):18.0f}")
    for name, _, _ in loaders[:-1]:
        print(f"{name}: load {_median([x[1] for x in res[name]]) / mi:.2f}x Mitsuba's, peak RSS "
              f"{_median([x[2] for x in res[name]]) / _median([x[2] for x in res[loaders[-1][0]]]):.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triangles", type=float, default=1e6)
    ap.add_argument("--repeats", type=int, default=3)
    tut = os.environ.get("TIRENDER_MITSUBA_TUTORIALS")
    ap.add_argument("--lego", default=os.path.join(tut, "lego", "scene.xml") if tut else None)
    ap.add_argument("--baseline", help="another tirender checkout to load the lego scene with (e.g. /work/main)")
    ap.add_argument("--old-ref", default=OLD_REF, help="git revision of the numpy builder compared against")
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--spp", type=int, default=4)
    ap.add_argument("--rays", type=float, default=1e6)
    ap.add_argument("--only", default="build,quality,load")
    a = ap.parse_args()
    a.triangles, a.rays = int(a.triangles), int(a.rays)
    only = set(a.only.split(","))
    print(f"# BVH benchmark: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    if "load" in only:              # fresh processes first, before this one holds scenes
        bench_load(a)
    old = old_builder(a.old_ref) if only & {"build", "quality"} else None
    if "build" in only:
        bench_build(a, old)
    if "quality" in only:
        bench_quality(a, old)
    print(f"\n(load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
