"""GRIN optics (configs/grin.yaml, docs/grin.md): memory of the replayed adjoint vs the number of RK4
steps, and the cost of one optimisation iteration.

    python benchmarks/grin.py                # both; --rays N, --repeat K

Memory: for each step count, a fresh process traces N rays along +z through a 4³ index grid (the step
h sets the count: ~1/h + cell planes) and runs the replayed adjoint once; it prints the process's peak
RSS and the growth of the peak during the adjoint launch alone (``/proc/self/clear_refs`` resets the
peak before it, Linux). The adjoint keeps a fixed (C_CKPT + B_SUB) × 9 local array per ray and nothing
per step, so both numbers should not depend on the step count.
Time: the median of --repeat warm iterations (render both views + replayed adjoint + Adam) of the
config's final (16³) stage.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(ROOT, "configs", "grin.yaml")


def _hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1])
    return 0


def memory_child(h, n_rays):
    sys.path.insert(0, ROOT)
    import tirender.backend as b
    b.init("cpu")
    from tirender.grin import trace as T
    from tirender.grin.field import IndexGrid
    rng = np.random.default_rng(0)
    g = IndexGrid(1.3 + 0.05 * rng.normal(size=(4, 4, 4)), [-0.5] * 3, [0.5] * 3)
    o = np.zeros((n_rays, 3))
    o[:, :2] = rng.uniform(-0.3, 0.3, (n_rays, 2))
    o[:, 2] = -1.0
    ones = np.ones((n_rays, 3))
    T.trace_adjoint(g, o[:8], [0, 0, 1.0], ones[:8], ones[:8], h)      # compile (and warm) first
    steps = float(T.trace(g, o, [0, 0, 1.0], h)["steps"].mean())
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    before = _hwm_kb()
    t0 = time.perf_counter()
    T.trace_adjoint(g, o, [0, 0, 1.0], ones, ones, h)
    dt = time.perf_counter() - t0
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"h": h, "mean_steps": steps, "adjoint_s": round(dt, 4), "peak_rss_mb": round(peak, 1),
                      "adjoint_peak_growth_kb": (_hwm_kb() - before) if reset else None}))


def iteration_time(repeat):
    sys.path.insert(0, ROOT)
    import tirender.backend as b
    b.init("cpu")
    from tirender.config import load_config
    from tirender.grin.train import Trainer, parse_config
    cfg = parse_config(load_config(CONFIG))
    tr = Trainer(cfg, log=lambda *a: None)
    tr.prepare()
    res = cfg["train"]["stages"][-1]["res"]
    tr.data = tr.initial_grid(res)
    tr.adam.reset(tr.data.shape)
    tr.step(0, 0)
    ts = []
    for it in range(1, repeat + 1):
        t0 = time.perf_counter()
        tr.step(it, 0)
        ts.append(time.perf_counter() - t0)
    rays = sum(v.n_rays for v in tr.views)
    return {"grid": f"{res}^3", "rays_per_iteration": rays, "median_s": round(float(np.median(ts)), 4)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rays", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--child", type=float, default=None)
    a = ap.parse_args()
    if a.child is not None:
        return memory_child(a.child, a.rays)
    print("memory of the replayed adjoint vs RK4 steps per ray "
          f"({a.rays} rays, 4^3 grid, one fresh process each):")
    print(f"{'h':>10} {'steps/ray':>10} {'adjoint s':>10} {'peak RSS MB':>12} {'growth during adjoint kB':>25}")
    print("  (growth: VmHWM after the launch minus before it; Linux syncs per-thread RSS counters every 64 "
          "pages, so |growth| < ~0.25 MB per thread is noise)")
    for h in (1 / 64, 1 / 256, 1 / 1024, 1 / 4096):
        r = subprocess.run([sys.executable, __file__, "--child", repr(h), "--rays", str(a.rays)], capture_output=True,
                           text=True, cwd=ROOT)
        if r.returncode:
            print(r.stderr[-2000:])
            return 1
        m = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{h:10.6f} {m['mean_steps']:10.0f} {m['adjoint_s']:10.3f} {m['peak_rss_mb']:12.1f} "
              f"{m['adjoint_peak_growth_kb']!s:>25}")
    t = iteration_time(a.repeat)
    print(f"one iteration of configs/grin.yaml at {t['grid']} ({t['rays_per_iteration']} rays: render both views, "
          f"replayed adjoint, Adam): median {t['median_s'] * 1000:.0f} ms over {a.repeat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
