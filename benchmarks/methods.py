"""Gradient methods compared: PRB, RB (unbiased), RB biased I, pipelined RB, and a ti.ad.Tape
conventional-AD baseline (benchmarks/ad_baseline.py) - the trade-offs of the RB and PRB papers.

1. time   : seconds per gradient step vs max_depth (2 ... 64), closed diffuse box (every path reaches
            max_depth; no Russian roulette): PRB and biased RB linear, unbiased RB quadratic
            (nested Li estimates), AD (megakernel and wavefront tapes).
2. memory : peak memory vs spp and vs max_depth for PRB, RB and the AD baselines - each method in
            a fresh process; reported: the RSS increase during the gradient step over the
            process's RSS after warm-up (kernels compiled), and the bytes of recorded state.
3. converge: parameter RMSE vs wall time of all five methods on configs/texture_recovery.yaml.

Writes benchmarks/results/methods_*.{md,csv,png}.

    python benchmarks/methods.py [--only time,memory,converge] [--quick] [--arch cpu]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def box_scene(w=32, max_depth=8):
    """Closed diffuse box seen from inside, ceiling light (constant reflectances: the AD baseline's
    scope). Every path bounces until max_depth."""
    rot = lambda ax, a: {"rotate": {"axis": ax, "angle": a}}  # noqa: E731
    return {
        "integrator": {"type": "path", "max_depth": int(max_depth), "rr_depth": 1000},
        "sensors": [{"type": "perspective", "fov": 70, "fov_axis": "x",
                     "to_world": {"look_at": {"origin": [0, 0, 0.9], "target": [0, 0, -1], "up": [0, 1, 0]}},
                     "film": {"width": w, "height": w, "filter": {"type": "box"}}}],
        "bsdfs": {"white": {"type": "diffuse", "reflectance": [0.7, 0.7, 0.7]},
                  "red": {"type": "diffuse", "reflectance": [0.6, 0.15, 0.1]},
                  "green": {"type": "diffuse", "reflectance": [0.15, 0.5, 0.1]}},
        "shapes": [
            {"id": "floor", "type": "rectangle", "bsdf": "white", "to_world": [rot([1, 0, 0], -90), {"translate": [0, -1, 0]}]},
            {"id": "ceiling", "type": "rectangle", "bsdf": "white", "to_world": [rot([1, 0, 0], 90), {"translate": [0, 1, 0]}]},
            {"id": "back", "type": "rectangle", "bsdf": "white", "to_world": [{"translate": [0, 0, -1]}]},
            {"id": "front", "type": "rectangle", "bsdf": "white", "to_world": [rot([0, 1, 0], 180), {"translate": [0, 0, 1]}]},
            {"id": "left", "type": "rectangle", "bsdf": "red", "to_world": [rot([0, 1, 0], 90), {"translate": [-1, 0, 0]}]},
            {"id": "right", "type": "rectangle", "bsdf": "green", "to_world": [rot([0, 1, 0], -90), {"translate": [1, 0, 0]}]},
            {"id": "light", "type": "rectangle", "to_world": [{"scale": 0.3}, rot([1, 0, 0], 90), {"translate": [0, 0.99, 0]}],
             "emitter": {"type": "area", "radiance": [8.0, 7.0, 6.0]}},
        ],
    }


def _init(arch):
    import tirender
    tirender.init(arch)


def _adjoint(sc, spp, seed):
    """δy of an L2 loss against a fixed target (red wall 0.5 grey vs the truth)."""
    import tirender
    from tirender.optim import losses
    truth = sc.params["red.reflectance"].copy()
    target = tirender.render(sc, spp=4, seed=99, progress=False)
    sc.params["red.reflectance"] = [0.5, 0.5, 0.5]
    img = tirender.render(sc, spp=spp, seed=seed, progress=False)
    _, dy = losses.l2(img, target)
    sc.params["red.reflectance"] = truth
    return dy.astype(np.float32)


def _write_table(name, header, rows, title):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{name}.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join(x if isinstance(x, str) else f"{x:.4g}" for x in r) + " |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as fh:
        fh.write(text)
    print(text)


# ------------------------------------------------------------------------------------ 1. time
def bench_time(arch, depths, spp, reps, w):
    _init(arch)
    import tirender
    from benchmarks.ad_baseline import ADPathTracer
    from tirender.api import render_grad
    methods = ["prb", "rb", "rb_biased", "ad_megakernel", "ad_wavefront"]
    res = {m: [] for m in methods}
    prim = []
    ad = None
    for depth in depths:
        sc = tirender.load_scene(box_scene(w, depth))
        dy = _adjoint(sc, spp, 5)
        if ad is None:
            ad = ADPathTracer(sc, max_depth_cap=max(depths))
        t0 = time.perf_counter()
        tirender.render(sc, spp=spp, seed=1, progress=False)
        for k in range(reps):
            t0 = time.perf_counter()
            tirender.render(sc, spp=spp, seed=2 + k, progress=False)
            prim.append((depth, time.perf_counter() - t0))
        for m in methods:
            def run(k):
                if m.startswith("ad_"):
                    ad.gradient(dy, spp, seed=k, max_depth=depth, mode=m[3:])
                else:
                    render_grad(sc, dy, spp=spp, seed=k, method=m, progress=False)
            run(0)  # warm-up (compile / load)
            ts = []
            for k in range(reps):
                t0 = time.perf_counter()
                run(k + 1)
                ts.append(time.perf_counter() - t0)
            res[m].append(float(np.median(ts)))
            print(f"  depth {depth:3d} {m:14s} {res[m][-1]:8.4f} s", flush=True)
    ad.release()
    prim_t = [float(np.median([t for d, t in prim if d == depth])) for depth in depths]
    rows = [[str(d), prim_t[i]] + [res[m][i] for m in methods] for i, d in enumerate(depths)]
    _write_table("methods_time_vs_depth", ["max_depth", "primal render s"] + [f"{m} grad s" for m in methods],
                 rows, f"Gradient pass time vs max_depth ({w}x{w}, {spp} spp, closed diffuse box, {arch}; "
                       f"PRB/RB columns exclude the primal render, the AD columns include their forward pass)")
    from tirender.io.plot import save_line_plot
    x = np.array(depths, float)
    save_line_plot(os.path.join(RESULTS, "methods_time_vs_depth.png"),
                   {m: (x, np.array(res[m])) for m in methods},
                   title="seconds per gradient vs max_depth", xlabel="max_depth", ylabel="seconds", logy=True)
    # growth exponents between the two deepest points (1: linear, 2: quadratic)
    if len(depths) >= 2:
        e = {m: np.log(res[m][-1] / res[m][-2]) / np.log(depths[-1] / depths[-2]) for m in methods}
        print("growth exponent (last two depths):", {m: round(float(v), 2) for m, v in e.items()})
        with open(os.path.join(RESULTS, "methods_time_vs_depth.md"), "a") as fh:
            fh.write("\nGrowth exponent d log t / d log max_depth between the two deepest points: " +
                     ", ".join(f"{m} {v:.2f}" for m, v in e.items()) + "\n")
    return res


# ------------------------------------------------------------------------------------ 2. memory
def _rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Peak:
    """Peak RSS while the block runs (a sampling thread; Taichi kernels release the GIL)."""

    def __enter__(self):
        self.peak = _rss()
        self.stop = False
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()
        return self

    def _loop(self):
        while not self.stop:
            self.peak = max(self.peak, _rss())
            time.sleep(0.001)

    def __exit__(self, *a):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, _rss())


def mem_child(arch, method, configs, w):
    """One method, configs (spp, depth) in increasing state size; prints JSON rows."""
    _init(arch)
    import tirender
    from tirender.api import render_grad
    cap = max(d for _, d in configs)
    sc = tirender.load_scene(box_scene(w, cap))
    dy = _adjoint(sc, 1, 5)
    ad = None
    if method.startswith("ad_"):
        from benchmarks.ad_baseline import ADPathTracer
        ad = ADPathTracer(sc, max_depth_cap=cap)

    def run(spp, depth):
        if ad is not None:
            ad.gradient(dy, spp, seed=1, max_depth=depth, mode=method[3:])
        else:
            sc.integrator["max_depth"] = depth
            render_grad(sc, dy, spp=spp, seed=1, method=method, progress=False)

    run(1, 2)  # compile + load kernels, allocate the scene
    base = _rss()
    out = []
    for spp, depth in configs:
        with _Peak() as pk:
            t0 = time.perf_counter()
            run(spp, depth)
            dt = time.perf_counter() - t0
        state = ad.state_bytes(spp, depth, method[3:]) if ad is not None else 0
        out.append(dict(method=method, spp=spp, depth=depth, delta_mb=(pk.peak - base) / 2 ** 20,
                        state_mb=state / 2 ** 20, seconds=dt, base_mb=base / 2 ** 20))
    print(json.dumps(out))


def bench_memory(arch, spps, depths, w, spp_fixed, depth_fixed):
    methods = ["prb", "rb", "ad_megakernel", "ad_wavefront"]
    configs = sorted({(s, depth_fixed) for s in spps} | {(spp_fixed, d) for d in depths},
                     key=lambda c: (c[0] * (c[1] + 1), c))
    rows = {}
    for m in methods:
        cmd = [sys.executable, os.path.abspath(__file__), "--arch", arch, "--mem-child", m, "--w", str(w),
               "--configs", ";".join(f"{s},{d}" for s, d in configs)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  {m}: child failed (rc {r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
            continue
        for row in json.loads(r.stdout.strip().splitlines()[-1]):
            rows[(m, row["spp"], row["depth"])] = row
            print(f"  {m:14s} spp {row['spp']:3d} depth {row['depth']:3d}: +{row['delta_mb']:8.1f} MB RSS, "
                  f"state {row['state_mb']:8.2f} MB, {row['seconds']:.3f} s", flush=True)
    from tirender.io.plot import save_line_plot
    _init(arch)
    for name, key, xs, fixed in (("spp", 1, spps, f"max_depth {depth_fixed}"),
                                 ("depth", 2, depths, f"{spp_fixed} spp")):
        sel = [(s, depth_fixed) for s in spps] if name == "spp" else [(spp_fixed, d) for d in depths]
        table = []
        for (s, d) in sel:
            r = [str(s if name == "spp" else d)]
            for m in methods:
                row = rows.get((m, s, d))
                r += [row["delta_mb"] if row else float("nan")]
            for m in ("ad_megakernel", "ad_wavefront"):
                row = rows.get((m, s, d))
                r += [row["state_mb"] if row else float("nan")]
            table.append(r)
        hdr = [name] + [f"{m} +RSS MB" for m in methods] + ["ad_megakernel AD-stack MB per thread",
                                                            "ad_wavefront tape MB"]
        _write_table(f"methods_memory_vs_{name}", hdr, table,
                     f"Memory of one gradient vs {name} ({w}x{w}, {fixed}, {arch}): RSS increase over the "
                     f"warmed-up process, and the AD state recorded (analytic)")
        x = np.array(xs, float)
        save_line_plot(os.path.join(RESULTS, f"methods_memory_vs_{name}.png"),
                       {m: (x, np.array([max(t[1 + i], 1e-3) for t in table])) for i, m in enumerate(methods)},
                       title=f"memory increase during one gradient vs {name} ({fixed})",
                       xlabel=name, ylabel="MB", logy=True)
    return rows


# ------------------------------------------------------------------------------------ 3. convergence
def bench_converge(arch, iters):
    _init(arch)
    import tempfile

    from tirender.config import load_config
    from tirender.optim.driver import METHODS, run_optimization
    cfgpath = os.path.join(ROOT, "configs", "texture_recovery.yaml")
    curves, rows = {}, []
    tmp = tempfile.mkdtemp(prefix="tirender-methods-")
    for m in METHODS:
        cfg = load_config(cfgpath)
        cfg["optimize"]["method"] = m
        run_optimization(cfg, out=os.path.join(tmp, "warm"), iters=1)  # compile / load kernels
        cfg = load_config(cfgpath)
        cfg["optimize"]["method"] = m
        if iters:
            cfg["optimize"]["iters"] = iters
        out = os.path.join(tmp, m)
        met = run_optimization(cfg, out=out)
        data = np.genfromtxt(os.path.join(out, "loss.csv"), delimiter=",", names=True)
        curves[m] = (data["seconds"], data["param_rmse"])
        p = met["params"]["canvas.reflectance"]
        rows.append([m, int(met["iterations"]), float(met["seconds"]), float(met["seconds"]) / met["iterations"],
                     p["rmse_start"], p["rmse_end"], p["rmse_start"] / p["rmse_end"]])
        print(f"  {m:20s} {met['seconds']:7.1f} s  rmse {p['rmse_start']:.4f} -> {p['rmse_end']:.4f}", flush=True)
    _write_table("methods_convergence", ["method", "iterations", "seconds", "s/iter", "rmse start", "rmse end",
                                         "reduction"], rows,
                 f"texture_recovery.yaml: texture RMSE vs truth, all five methods ({arch}; same config, "
                 f"lr and seeds; pipelined = one joint pass per iteration)")
    from tirender.io.plot import save_line_plot
    save_line_plot(os.path.join(RESULTS, "methods_convergence.png"), curves,
                   title="texture_recovery: parameter RMSE vs wall time", xlabel="seconds", ylabel="RMSE",
                   logy=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--only", default="time,memory,converge")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mem-child", default=None)
    ap.add_argument("--configs", default="")
    ap.add_argument("--w", type=int, default=64)
    a = ap.parse_args()
    if a.mem_child:
        cfgs = [tuple(int(x) for x in c.split(",")) for c in a.configs.split(";")]
        mem_child(a.arch, a.mem_child, cfgs, a.w)
        return
    only = set(a.only.split(","))
    if "time" in only:
        print("1. time per gradient vs max_depth", flush=True)
        bench_time(a.arch, [2, 4, 8, 16] if a.quick else [2, 4, 8, 16, 32, 64], spp=8, reps=1 if a.quick else 3,
                   w=32)
    if "memory" in only:
        print("2. memory vs spp and max_depth", flush=True)
        bench_memory(a.arch, [1, 4, 16] if a.quick else [1, 4, 16, 64], [2, 8, 32] if a.quick else [2, 8, 16, 32, 64],
                     w=64, spp_fixed=4, depth_fixed=8)
    if "converge" in only:
        print("3. convergence on texture_recovery", flush=True)
        bench_converge(a.arch, 20 if a.quick else None)


if __name__ == "__main__":
    main()
