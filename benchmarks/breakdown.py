"""Where a sample's CPU time goes: per-stage timings of the path tracer and the PRB step.

Stage kernels built from the library's own ti.funcs run over every sample of the sensor (W·H·spp)
and are cumulative, so that differences isolate one stage each:

    camera      sampler + film position + camera ray
    primary     + BVH traversal of the camera ray (closest hit)
    vertex      + surface interaction and shading frame / BSDF context (textures, normal maps)
    bsdf        + BSDF eval+pdf towards a cosine direction and a BSDF sample
    bounce      + BVH traversal of the sampled bounce ray (closest hit)
    shadow      + an any-hit shadow ray towards a random point of the scene's bounds

then whole-integrator timings: the path tracer at max_depth 1 (camera + emission + film splat; its film +
emission also as a multiple of the camera + primary stages, each render timed between two runs of those, so that
a shared machine's swings cancel out),
at the scene's max_depth, and the PRB step (primal + adjoint replay, whose difference to two
primal passes is the adjoint work and its atomics). Scenes: the Cornell box, a ~1M-triangle
mesh (displaced sphere, rough plastic), and the textured canvas of configs/texture_recovery.yaml.

    python benchmarks/breakdown.py [--arch cpu] [--spp 16] [--tris 1000000] [--scenes cbox,mesh,texture]

Prints one table per scene: ns per sample of every stage (median of --runs after a warm-up).
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
STAGES = ("camera", "primary", "vertex", "bsdf", "bounce", "shadow")


def stage_kernels():
    import taichi as ti
    from tirender.sensors.registry import camera_ray, camera_sample
    from tirender.core.interaction import make_interaction
    from tirender.core.intersect import intersect, occluded
    from tirender.core.math import BIG, to_world, vec3
    from tirender.core.warp import square_to_cosine_hemisphere
    from tirender.scene.bvh import WIDTH

    @ti.func
    def root_box(st: ti.template()):
        """The scene's bounds: the union of the wide BVH root's used child boxes (empty slots: +inf)."""
        bmin = st.wnode_min[0]
        bmax = st.wnode_max[0]
        lo = vec3(BIG)
        hi = vec3(-BIG)
        for s in ti.static(range(WIDTH)):
            if bmax[s] < BIG:
                for q in ti.static(range(3)):
                    lo[q] = ti.min(lo[q], bmin[q * WIDTH + s])
                    hi[q] = ti.max(hi[q], bmax[q * WIDTH + s])
        return lo, hi
    from tirender.walk import vertex

    def make(level):
        @ti.kernel
        def k(st: ti.template(), bsdf: ti.template(), spp: ti.i32, seed: ti.u32) -> ti.f32:
            n = st.cam_w[0] * st.cam_h[0]
            total = 0.0
            for pix in range(n):
                acc = 0.0
                for s in range(spp):
                    sampler, pos, ap = camera_sample(st, 0, pix, seed, s)
                    o, d, tmax = camera_ray(st, 0, pos, ap)
                    acc += d[0]
                    if ti.static(level >= 1):
                        tri, t, b1, b2, _inst = intersect(st, o, d, BIG)
                        acc += t * 1e-9
                        if ti.static(level >= 2):
                            if tri >= 0:
                                si = make_interaction(st, tri, t, b1, b2, o, d, _inst)
                                v = vertex.surface_vertex(st, si, d, vec3(0.0))
                                acc += v.n[0]
                                if ti.static(level >= 3):
                                    wl = square_to_cosine_hemisphere(sampler.next_2d())
                                    dw = to_world(v.s, v.t, v.n, wl)
                                    f, pdf = vertex.eval_pdf(st, bsdf, v, dw)
                                    bs = vertex.sample(st, bsdf, v, sampler)
                                    acc += f[0] + pdf + bs.weight[1]
                                    if ti.static(level >= 4):
                                        if bs.valid:
                                            o2 = vertex.spawn(st, v, bs.wo)
                                            tri2, t2, c1, c2, _inst = intersect(st, o2, bs.wo, BIG)
                                            acc += t2 * 1e-9 + tri2
                                    if ti.static(level >= 5):
                                        lo, hi = root_box(st)
                                        u = vec3(sampler.next_1d(), sampler.next_1d(), sampler.next_1d())
                                        q = lo + u * (hi - lo)
                                        dq = q - v.p
                                        dist = dq.norm()
                                        if dist > 1e-4:
                                            dq /= dist
                                            o3 = vertex.spawn(st, v, dq)
                                            if occluded(st, o3, dq, dist * (1.0 - 1e-4)):
                                                acc += 1.0
                total += acc
            return total
        return k
    return [make(i) for i in range(len(STAGES))]


def timed(fn, runs):
    """Median seconds of `runs` calls of fn after one warm-up call (compilation)."""
    fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def paired_quotient(stage, whole, pairs):
    """Median over `pairs` of whole() / stage() - 1, each whole() timed (CPU time of the process) between two
    stage() calls: what whole() adds, as a multiple of stage(), with the machine's swings cancelled out."""
    stage(), whole()
    q = []
    for _ in range(pairs):
        t0 = time.process_time()
        stage()
        t1 = time.process_time()
        whole()
        t2 = time.process_time()
        stage()
        t3 = time.process_time()
        q.append((t2 - t1) / max(0.5 * ((t1 - t0) + (t3 - t2)), 1e-12) - 1.0)
    return float(np.median(q))


def mesh_scene(tris, path):
    from tirender.scene.mesh_io import save_ply
    from tirender.scene.shapes import sphere
    res = int(np.sqrt(tris))
    m = sphere(res)
    rng = np.random.default_rng(0)
    m["positions"] = m["positions"] * (1 + 0.01 * rng.standard_normal((len(m["positions"]), 1))).astype(np.float32)
    save_ply(path, m["positions"], m["faces"], m["normals"], m["uvs"])
    return {"integrator": {"type": "path", "max_depth": 4},
            "sensors": [{"fov": 40, "to_world": {"look_at": {"origin": [0, 0, 4], "target": [0, 0, 0], "up": [0, 1, 0]}},
                         "film": {"width": 128, "height": 128}}],
            "bsdfs": {"m": {"type": "roughplastic", "roughness": 0.2}},
            "shapes": [{"id": "big", "type": "ply", "filename": path, "bsdf": "m"},
                       {"id": "floor", "type": "rectangle", "bsdf": "m",
                        "to_world": [{"scale": 4}, {"rotate": {"axis": [1, 0, 0], "angle": -90}},
                                     {"translate": [0, -1.1, 0]}]},
                       {"id": "light", "type": "rectangle",
                        "to_world": [{"scale": 0.5}, {"look_at": {"origin": [1, 2.5, 1], "target": [0, 0, 0],
                                                                  "up": [0, 1, 0]}}],
                        "emitter": {"type": "area", "radiance": 20}}],
            "emitters": [{"type": "constant", "radiance": 0.2}]}


def param_of(sc):
    for name in ("red.reflectance", "canvas.reflectance", "m.reflectance", "m.diffuse_reflectance"):
        if name in list(sc.params.keys()):
            return name
    return list(sc.params.keys())[0]


def profile(name, sc, spp, runs, kernels):
    import tirender
    from tirender.api import render_grad
    from tirender.bsdfs.registry import dispatch
    st = sc.bind()
    bsdf = dispatch(sc.bsdf_levels)
    s = sc.sensors[0]
    n = s.width * s.height * spp
    cum = []
    for k in kernels:
        cum.append(timed(lambda: k(st, bsdf, spp, 7), runs) / n * 1e9)
    rows = [(STAGES[0], cum[0])] + [(STAGES[i], cum[i] - cum[i - 1]) for i in range(1, len(cum))]
    depth = sc.integrator["max_depth"]
    sc.integrator["max_depth"] = 1
    t1 = timed(lambda: tirender.render(sc, spp=spp, seed=3, progress=False), runs) / n * 1e9
    q1 = paired_quotient(lambda: kernels[1](st, bsdf, spp, 7),
                         lambda: tirender.render(sc, spp=spp, seed=3, progress=False), max(runs, 7) * 3)
    sc.integrator["max_depth"] = depth
    tf = timed(lambda: tirender.render(sc, spp=spp, seed=3, progress=False), runs) / n * 1e9
    p = param_of(sc)
    dy = np.full((s.height, s.width, 3), 1e-3, np.float32)
    tg = timed(lambda: render_grad(sc, dy, spp=spp, seed=5, progress=False), runs) / n * 1e9
    print(f"\n{name}: {sc.n_triangles} triangles, {s.width}x{s.height} x {spp} spp, max_depth {depth}, "
          f"{tirender.current_arch()}  (ns per sample, median of {runs})")
    for k, v in rows:
        print(f"  {k:<28s} {v:9.1f}")
    print(f"  {'stage kernels, cumulative':<28s} {cum[-1]:9.1f}")
    print(f"  {'path, max_depth 1 (+film)':<28s} {t1:9.1f}   film + emission ≈ {t1 - cum[1]:.1f}; paired with the "
          f"camera + primary stages: {q1:.2f}× theirs")
    print(f"  {'path, max_depth ' + str(depth):<28s} {tf:9.1f}")
    print(f"  {'PRB step (primal+replay)':<28s} {tg:9.1f}   adjoint work + atomics ≈ {tg - 2 * tf:.1f} ({p})")
    return dict(rows=rows, path1=t1, path=tf, prb=tg, film_quotient=q1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tris", type=int, default=1_000_000)
    ap.add_argument("--scenes", default="cbox,mesh,texture")
    a = ap.parse_args()
    sys.path.insert(0, ROOT)
    import tirender
    tirender.init(a.arch)
    kernels = stage_kernels()
    want = a.scenes.split(",")
    if "cbox" in want:
        profile("cbox", tirender.load_scene(os.path.join(ROOT, "configs", "cbox.yaml")), a.spp, a.runs, kernels)
    if "texture" in want:
        sc = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
        profile("textured canvas (configs/texture_recovery.yaml)", sc, a.spp, a.runs, kernels)
    if "mesh" in want:
        with tempfile.TemporaryDirectory() as d:
            sc = tirender.load_scene(mesh_scene(a.tris, os.path.join(d, "big.ply")))
        profile("displaced sphere mesh", sc, max(1, a.spp // 4), a.runs, kernels)


if __name__ == "__main__":
    main()
