"""Volume PRB benchmark (prbvolpath: PRB with differentiable delta tracking).

1. One gradient step of the volume reconstruction: 4 views x 128², 8 spp primal + 8 spp adjoint,
   max_depth 8, a 32³ density grid (the smoke of configs/volume_recovery.yaml) under an
   environment map: primal renders, L2 loss, PRB gradients accumulated over the views, Adam step.
   Seconds per step (median of 3 after a warm-up) and peak RSS, in a fresh process. Where Mitsuba 3
   is installed, the same step in Mitsuba 3 (llvm_ad_rgb: its prbvolpath on the exact port of the
   scene in benchmarks/time_to_quality.py, mitsuba_volume_scene) alternates with tirender's in
   fresh processes (benchmarks/sidebyside.py): medians, time ratio and peak RSS of each.
2. The same step with the ray-marching variant (volpath_raymarch, Mitsuba 2 style), and its bias:
   the relative difference of its image from delta tracking's (both at high spp).
3. Time vs albedo (0.5 ... 0.999), unbounded depth, Russian roulette from depth 5 (so paths get
   longer with the albedo): one view of 64², primal 4 spp + PRB 4 spp, a thick medium filling the
   view (the smoke + 0.3 everywhere, scale 100: optical diameter ~80). The mean number of real
   scattering vertices per path is counted by a kernel that walks the same primal paths. The peak
   RSS does not change (each albedo in a fresh process) and seconds per vertex do not grow with
   the path length (they vary within ~2x: deeper vertices have longer NEE shadow rays, i.e. more
   ratio-tracking lookups): linear time, constant memory in path length.

    python benchmarks/volume.py [--arch cpu] [--quick]
"""
import json
import math
import os
import resource
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
CONFIG = os.path.join(ROOT, "configs", "volume_recovery.yaml")
sys.path.insert(0, HERE)
import sidebyside  # noqa: E402


def _scene(res, views, integrator="prbvolpath", max_depth=8, rr_depth=5, scale=None, albedo=None, fov=None):
    from tirender.api import load_scene
    from tirender.config import load_config
    from tirender.media.grid import resample_grid
    from tirender.media.volfile import read_vol
    cfg = load_config(CONFIG)
    s = cfg["scene"]
    s["integrator"] = {"type": integrator, "max_depth": max_depth, "rr_depth": rr_depth}
    s["sensors"] = [s["sensors"][v] for v in views]
    for c in s["sensors"]:
        c["film"]["width"] = c["film"]["height"] = res
        if fov is not None:
            c["fov"] = fov
    med = s["media"]["smoke"]
    med["density"] = {"type": "grid", "resolution": 32, "value": 0.0}
    med["bbox"] = {"min": [-1, -1, -1], "max": [1, 1, 1]}
    if scale is not None:
        med["scale"] = scale
    if albedo is not None:
        med["albedo"] = [albedo] * 3
    sc = load_scene(s, base_dir=os.path.dirname(cfg["_scene_file"]))
    truth = resample_grid(read_vol(os.path.join(ROOT, "configs", "volumes", "smoke64.vol"))[0], 32)
    sc.params["smoke.density"] = truth
    return sc, truth


def step_benchmark(arch, integrator, runs):
    import tirender
    tirender.init(arch)
    from tirender.api import render_grad
    from tirender.optim import losses
    from tirender.optim.adam import Adam
    from tirender.api import render
    sc, truth = _scene(128, [0, 1, 2, 3], integrator=integrator)
    targets = [render(sc, spp=8, seed=99 + v, sensor=v, progress=False) for v in range(4)]
    sc.params["smoke.density"] = 0.5 * truth + 0.02
    st = sc.bind()
    n = sc.params.data.size
    lr = np.zeros(st.caps["pool"], np.float32)
    info = sc.params.info("smoke.density")
    lr[info.offset:info.offset + info.size] = 0.02
    opt = Adam(st.pool, st.grad, lr=lr)

    def step(k):
        for v in range(4):
            img = render(sc, spp=8, seed=1000 * k + 2 * v, sensor=v, progress=False)
            _, dy = losses.l2(img, targets[v])
            render_grad(sc, dy / 4, spp=8, seed=1000 * k + 2 * v + 1, sensor=v, accumulate=v > 0, progress=False)
        opt.step()
        sc.mark_device_params_changed()
        return n
    t0 = time.perf_counter()
    step(0)
    first = time.perf_counter() - t0
    ts = []
    for k in range(runs):
        t0 = time.perf_counter()
        step(k + 1)
        ts.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return dict(integrator=integrator, seconds=float(np.median(ts)), all_seconds=ts, first_step_incl_compile=first,
                peak_rss_mb=rss, arch=tirender.current_arch())


def mitsuba_step(runs):
    """The same step in Mitsuba 3 (llvm_ad_rgb): the exact port of configs/volume_recovery.yaml's
    scene (time_to_quality.mitsuba_volume_scene) with views 0-3 at 128², max_depth 8, the 64³ truth
    resampled to 32³ (as _scene: targets at 8 spp), the start 0.5 truth + 0.02, L2 / 4 per view,
    mi.ad.Adam(lr=0.02); the step waits for the updated grid."""
    import tempfile

    import time_to_quality as ttq
    spec = ttq.volume_spec()
    spec["sensors"] = [dict(c, width=128, height=128) for c in spec["sensors"][:4]]
    spec["max_depth"], spec["rr_depth"] = 8, 5
    with tempfile.TemporaryDirectory() as tmp:
        mi, dr, scene, sensors, params, key, truth64 = ttq.mitsuba_volume_scene(spec, tmp)
    truth = ttq.resample_grid(truth64, 32)
    params[key] = mi.TensorXf(truth)
    params.update()
    targets = [mi.render(scene, sensor=sensors[v], spp=8, seed=99 + v) for v in range(4)]
    params[key] = mi.TensorXf(0.5 * truth + 0.02)
    params.update()
    opt = mi.ad.Adam(lr=0.02)
    opt[key] = params[key]
    params.update(opt)

    def step(k):
        for v in range(4):
            img = mi.render(scene, params, sensor=sensors[v], spp=8, spp_grad=8, seed=1000 * k + 2 * v,
                            seed_grad=1000 * k + 2 * v + 1)
            dr.backward(dr.mean(dr.square(img - targets[v]), axis=None) / 4)
        opt.step()
        params.update(opt)
        dr.eval(params[key])
        dr.sync_thread()
    ts = sidebyside.timed(step, runs)
    return {"seconds": ts, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def bias_benchmark(arch, spp):
    import tirender
    tirender.init(arch)
    from tirender.api import render
    out = {}
    imgs = {}
    for integ in ("volpath", "volpath_raymarch"):
        sc, _ = _scene(64, [0], integrator=integ)
        render(sc, spp=1, seed=1, progress=False)   # compile
        t0 = time.perf_counter()
        imgs[integ] = render(sc, spp=spp, seed=5, progress=False).astype(np.float64)
        out[f"{integ}_render_seconds"] = time.perf_counter() - t0
    a, b = imgs["volpath"], imgs["volpath_raymarch"]
    out["raymarch_relative_mean_difference"] = float((b.mean() - a.mean()) / a.mean())
    out["raymarch_relative_rmse"] = float(np.sqrt(((b - a) ** 2).mean()) / a.mean())
    return out


def _path_length_kernel():
    import taichi as ti
    from tirender.sensors.registry import camera_ray
    from tirender.core.math import vec2, vec3
    from tirender.core.rng import make_sampler
    from tirender.integrators import volpath
    from tirender.walk.media import DELTA, MediumVisibility
    from tirender.walk.state import PRIMAL
    vis = MediumVisibility.of(DELTA)

    @ti.kernel
    def count(st: ti.template(), bm: ti.template(), em: ti.template(), spp: ti.i32, seed: ti.u32, max_depth: ti.i32,
              rr_depth: ti.i32) -> ti.f64:
        """Total number of real scattering vertices of the primal paths (as render() walks them)."""
        total = ti.f64(0.0)
        w = st.cam_w[0]
        for pix in range(w * st.cam_h[0]):
            for s in range(spp):
                sampler = make_sampler(seed, pix, s)
                pos = vec2(pix % w, pix // w) + sampler.next_2d()
                o, d, tmax = camera_ray(st, 0, pos, vec2(0.5))
                _, n = volpath.trace(st, bm, em, vis, PRIMAL, o, d, tmax, sampler, max_depth, rr_depth, 0, vec3(0.0),
                                     vec3(0.0), 0)
                total += ti.cast(n, ti.f64)
        return total
    return count


def albedo_benchmark(arch, albedo, runs):
    import tirender
    tirender.init(arch)
    from tirender.integrators import volpath
    from tirender.api import render_grad
    from tirender.media.medium import update_majorants
    from tirender.api import render
    sc, truth = _scene(64, [0], max_depth=-1, rr_depth=5, scale=100.0, albedo=albedo,
                       fov=2 * math.degrees(math.atan(0.22)))   # the cube fills the view
    sc.params["smoke.density"] = 0.3 + truth          # fills the whole cube: optical diameter ~ 80
    ones = np.ones((64, 64, 3), np.float32)
    render(sc, spp=4, seed=1, progress=False)
    render_grad(sc, ones, spp=4, seed=2, progress=False)   # warm-up (compile)
    ts = []
    for k in range(runs):
        t0 = time.perf_counter()
        render(sc, spp=4, seed=10 + 2 * k, progress=False)
        render_grad(sc, ones, spp=4, seed=11 + 2 * k, progress=False)
        ts.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    st = sc.bind()
    update_majorants(sc, st)
    bm, em = volpath.kernel_dispatch(sc)
    length = _path_length_kernel()(st, bm, em, 4, 10, volpath.args(sc).max_depth, 5) / (64 * 64 * 4)   # -1: unbounded
    sec = float(np.median(ts))
    return dict(albedo=albedo, seconds=sec, mean_path_vertices=float(length),
                seconds_per_vertex=sec / max(float(length), 1e-9), peak_rss_mb=rss)


def run_child(arch, what):
    return sidebyside.script_child(__file__, arch, what)


def main():
    a = sidebyside.options("fewer runs and albedos").parse_args()
    if a.child:
        kind, *args = a.child.split(",")
        if kind == "step":
            r = step_benchmark(a.arch, args[0], int(args[1]))
        elif kind == "mitsuba_step":
            r = mitsuba_step(int(args[0]))
        elif kind == "bias":
            r = bias_benchmark(a.arch, int(args[0]))
        else:
            r = albedo_benchmark(a.arch, float(args[0]), int(args[1]))
        print(json.dumps(r))
        return
    runs = 1 if a.quick else 3
    res = {}
    r = run_child(a.arch, f"step,prbvolpath,{runs}")
    res["prbvolpath_step"] = r
    print(f"prbvolpath gradient step (4 views x 128², 8+8 spp, max_depth 8, 32³ density, {r['arch']}): "
          f"{r['seconds']:.2f} s/iteration (first incl. compile {r['first_step_incl_compile']:.1f} s), "
          f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    ok, why = sidebyside.mitsuba_available()
    if ok:
        sbs = sidebyside.alternate(
            lambda: {"seconds": (c := run_child(a.arch, f"step,prbvolpath,{runs}"))["all_seconds"],
                     "peak_rss_mb": c["peak_rss_mb"]},
            lambda: run_child("cpu", f"mitsuba_step,{runs}"), a.rounds)
        sidebyside.report(f"side by side, prbvolpath step ({a.rounds} alternated rounds x {runs} steps):", sbs)
        res["side_by_side"] = sbs
    else:
        print(f"  side by side with Mitsuba 3: skipped ({why})")
    r = run_child(a.arch, f"step,volpath_raymarch,{runs}")
    res["raymarch_step"] = r
    print(f"ray-marching variant, same step: {r['seconds']:.2f} s/iteration, peak RSS {r['peak_rss_mb']:.0f} MB",
          flush=True)
    r = run_child(a.arch, f"bias,{64 if a.quick else 256}")
    res["raymarch_bias"] = r
    print(f"ray marching (step = half a voxel) vs delta tracking, 64² view: mean {100 * r['raymarch_relative_mean_difference']:+.2f} %, "
          f"relative RMSE {100 * r['raymarch_relative_rmse']:.2f} %; render "
          f"{r['volpath_render_seconds']:.2f} s (delta) vs {r['volpath_raymarch_render_seconds']:.2f} s (march)", flush=True)
    albedos = [0.5, 0.9, 0.99, 0.999] if a.quick else [0.5, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999]
    res["albedo"] = []
    print("time vs albedo (1 view 64², primal 4 spp + PRB 4 spp, unbounded depth, RR from 5, thick medium):")
    print(f"  {'albedo':>7s} {'s/step':>8s} {'vertices/path':>14s} {'s/step per vertex':>18s} {'peak RSS MB':>12s}")
    for al in albedos:
        r = run_child(a.arch, f"albedo,{al},{runs}")
        res["albedo"].append(r)
        print(f"  {al:7.3f} {r['seconds']:8.3f} {r['mean_path_vertices']:14.1f} "
              f"{r['seconds_per_vertex']:18.4f} {r['peak_rss_mb']:12.0f}", flush=True)
    out = os.path.join(ROOT, "out", "benchmarks")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "volume.json"), "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
