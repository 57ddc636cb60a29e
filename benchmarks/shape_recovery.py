"""Shape recovery side by side with Mitsuba 3: configs/shape_recovery.yaml's task (a sphere -> the
non-convex blob from 8 views, 64x64, 4 spp primal and adjoint, L2, large steps λ = 20 with uniform
Adam at lr 0.02) run by tirender (edge sampling, `prb_attached`) and by Mitsuba 3.9 `llvm_ad_rgb`
(`prb_projective`, `mi.ad.LargeSteps`, `mi.ad.Adam(uniform=True)`: its shape-optimisation tutorial's
settings). Each renderer renders its own targets of the truth (128 spp) and starts from the same
sphere (the blob's vertices moved onto the sphere of their mean radius). Each runs in a fresh
process, alternated (``--rounds``); printed: median seconds per iteration (after the first),
first-iteration time, peak RSS, and the symmetric Chamfer distance to the truth at the start and
the end, with the ratio tirender / Mitsuba.

    python3 benchmarks/shape_recovery.py [--iters 150] [--rounds 1]

Mitsuba's LLVM backend needs the system libLLVM (DRJIT_LIBLLVM_PATH; benchmarks/sidebyside.py) and
its large steps the `cholespy` package; without them only tirender runs, with a one-line reason.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CONFIG = os.path.join(ROOT, "configs", "shape_recovery.yaml")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside  # noqa: E402


def _task():
    """The config's scene and optimisation settings, read without Taichi."""
    from tirender.config import load_config
    cfg = load_config(CONFIG)
    o = cfg["optimize"]
    po = o["params"]["blob.vertex_positions"]
    return cfg, dict(views=o["views"], spp=o["spp"], spp_grad=o["spp_grad"], lr=po["lr"], lam=po["large_steps"],
                     t_spp=o["target"]["spp"], t_seed=o["target"]["seed"])


def _sphere(P):
    c = 0.5 * (P.min(0) + P.max(0))
    q = P - c
    r = np.linalg.norm(q, axis=1, keepdims=True)
    return c + q / r * r.mean()


def run_tirender(iters, lr_scale=1.0):
    import tirender
    from tirender.api import render, render_grad, scene_from_config
    from tirender.optim import losses
    from tirender.optim.geometry import GeometryOptions, chamfer_distance
    cfg, t = _task()
    sc = scene_from_config(cfg)
    name = "blob.vertex_positions"
    d = sc.deformables[0]
    truth = d.positions(sc.params.__getitem__)
    targets = [render(sc, spp=t["t_spp"], seed=t["t_seed"] + v, sensor=v, progress=False) for v in t["views"]]
    geo = GeometryOptions(sc, {name: {"lr": t["lr"] * lr_scale, "large_steps": t["lam"]}}, None)
    sc.params[name] = _sphere(sc.params[name].astype(np.float64)).astype(np.float32)
    start = chamfer_distance(d.positions(sc.params.__getitem__), truth, d.faces)
    times = []
    for it in range(iters):
        t0 = time.perf_counter()
        grad = np.zeros(sc.params[name].shape)
        for k, v in enumerate(t["views"]):
            img = render(sc, spp=t["spp"], seed=2 * (it * 64 + v), sensor=v, progress=False)
            _, dy = losses.l2(img, targets[k])
            grad += render_grad(sc, dy / len(t["views"]), spp=t["spp_grad"], seed=2 * (it * 64 + v) + 1, sensor=v,
                                method="prb_attached", progress=False)[name]
        geo.step({name: grad})
        times.append(time.perf_counter() - t0)
    end = chamfer_distance(d.positions(sc.params.__getitem__), truth, d.faces)
    return dict(seconds=times, chamfer_start=start, chamfer_end=end, arch=tirender.current_arch(),
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)


def run_mitsuba(iters, lr_scale=1.0):
    import drjit as dr
    import mitsuba as mi
    mi.set_variant("llvm_ad_rgb")
    from tirender.optim.geometry import chamfer_distance
    cfg, t = _task()
    s = cfg["scene"]
    T = mi.ScalarTransform4f

    def look_at(la):
        return T().look_at(origin=la["origin"], target=la["target"], up=la["up"])
    film = s["sensors"][0]["film"]
    sensors = [mi.load_dict({"type": "perspective", "fov": s["sensors"][v]["fov"], "fov_axis": "x",
                             "to_world": look_at(s["sensors"][v]["to_world"]["look_at"]),
                             "film": {"type": "hdrfilm", "width": film["width"], "height": film["height"],
                                      "rfilter": {"type": "gaussian", "stddev": 0.5}, "pixel_format": "rgb"}})
               for v in t["views"]]
    blob = s["shapes"][0]
    light = s["shapes"][1]
    la = light["to_world"][1]["look_at"]
    scene = mi.load_dict({
        "type": "scene",
        # like for like: as many derivative samples per pixel as tirender's (interior: spp_grad; primary
        # edges: sppp = spp_grad; secondary: one edge sample per path vertex)
        "integrator": {"type": "prb_projective", "max_depth": s["integrator"]["max_depth"],
                       "sppc": t["spp_grad"], "sppp": t["spp_grad"], "sppi": t["spp_grad"]},
        "sky": {"type": "constant", "radiance": {"type": "rgb", "value": s["emitters"][0]["radiance"]}},
        "blob": {"type": "ply", "filename": os.path.join(ROOT, "configs", blob["filename"]),
                 "bsdf": {"type": "diffuse", "reflectance": {"type": "rgb", "value": blob["bsdf"]["reflectance"]}}},
        "light": {"type": "rectangle", "to_world": look_at(la) @ T().scale(light["to_world"][0]["scale"]),
                  "emitter": {"type": "area", "radiance": {"type": "rgb", "value": light["emitter"]["radiance"]}}}})
    params = mi.traverse(scene)
    key = "blob.vertex_positions"
    faces = np.array(params["blob.faces"]).reshape(-1, 3)
    truth = np.array(params[key]).reshape(-1, 3).astype(np.float64)
    targets = [mi.render(scene, sensor=sn, spp=t["t_spp"], seed=t["t_seed"] + v) for v, sn in zip(t["views"], sensors)]
    init = _sphere(truth)
    ls = mi.ad.LargeSteps(mi.Float(init.astype(np.float32).ravel()), params["blob.faces"], t["lam"])
    opt = mi.ad.Adam(lr=t["lr"] * lr_scale, uniform=True)
    opt["u"] = ls.to_differential(mi.Float(init.astype(np.float32).ravel()))
    start = chamfer_distance(init, truth, faces)
    times = []
    for it in range(iters):
        t0 = time.perf_counter()
        params[key] = ls.from_differential(opt["u"])
        params.update()
        loss = 0
        for k, sn in enumerate(sensors):
            img = mi.render(scene, params, sensor=sn, spp=t["spp"], spp_grad=t["spp_grad"], seed=it * 64 + k)
            loss = loss + dr.mean(dr.square(img - targets[k])) / len(sensors)
        dr.backward(loss)
        opt.step()
        dr.eval(opt["u"])
        dr.sync_thread()
        times.append(time.perf_counter() - t0)
    params[key] = ls.from_differential(opt["u"])
    params.update()
    end = chamfer_distance(np.array(params[key]).reshape(-1, 3), truth, faces)
    return dict(seconds=times, chamfer_start=start, chamfer_end=end,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)


def child(which, iters, lr_scale=1.0):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", which, "--iters", str(iters),
           "--lr-scale", str(lr_scale)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=sidebyside.child_env())
    if out.returncode != 0:
        return None, (out.stderr.strip().splitlines() or ["failed"])[-1][:200]
    last = out.stdout.strip().splitlines()[-1]
    return json.loads(last[last.index("{"):]), ""          # Mitsuba's log lines share stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--lr-scale", type=float, default=1.0, help="the config's learning rate times this "
                    "(benchmarks/defaults_sweep.py's grid)")
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        r = run_tirender(a.iters, a.lr_scale) if a.child == "tirender" else run_mitsuba(a.iters, a.lr_scale)
        print(json.dumps(r))
        return
    ok, why = sidebyside.mitsuba_available()
    try:
        import cholespy  # noqa: F401
    except ImportError:
        ok, why = False, "Mitsuba's large steps need the cholespy package (pip install cholespy)"
    res = {"tirender": [], "mitsuba": []}
    print(f"load average {os.getloadavg()[0]:.2f}")
    for _ in range(a.rounds):
        for which in ("tirender", "mitsuba") if ok else ("tirender",):
            r, err = child(which, a.iters)
            if r is None:
                print(f"{which}: failed ({err})")
                continue
            res[which].append(r)
            ts = r["seconds"]
            print(f"{which}: {np.median(ts[1:]):.3f} s/iteration (first {ts[0]:.1f} s), peak RSS "
                  f"{r['peak_rss_mb']:.0f} MB, Chamfer {r['chamfer_start']:.4f} -> {r['chamfer_end']:.4f} "
                  f"({r['chamfer_start'] / max(r['chamfer_end'], 1e-12):.1f}x)", flush=True)
    if not ok:
        print(f"Mitsuba side by side skipped: {why}")
    elif res["tirender"] and res["mitsuba"]:
        med = {k: float(np.median([np.median(r["seconds"][1:]) for r in v])) for k, v in res.items()}
        ch = {k: float(np.median([r["chamfer_end"] for r in v])) for k, v in res.items()}
        print(f"time per iteration tirender / Mitsuba: {med['tirender'] / med['mitsuba']:.2f}; final Chamfer "
              f"tirender {ch['tirender']:.4f} vs Mitsuba {ch['mitsuba']:.4f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
