"""Scale-out model (docs/scale_out.md): time per iteration of a multi-view reconstruction vs the
number of machines, from measured per-view gradient times and the bytes moved per iteration.

1. Per-view gradient time t_view (primal render + loss + PRB gradient of one view) of
   configs/volume_recovery.yaml's task (64² images, 16 spp primal + adjoint, max_depth 8) with the
   density grid at 64³, 128³ and 256³; and of the radiance field (configs/radiance_field.yaml's
   field: SH degree 2, 28 values per voxel; one 128² view's rays, forward + replay backward) at
   64³ and 128³ (256³: 2× the 128³ time, the march's points per ray grow with R; its grids need
   ~8 GB). Median of a few runs after a warm-up, this machine's cores.
2. Bytes per iteration with tirender's protocol (tirender/distributed.py): parameters out
   (float32, once per worker), per view a ViewResult back (image float32 + the maxima), then one
   int64 partial gradient sum per worker (8 bytes per optimised value).
3. The model  T(N) = ceil(V / N) · t_view + N · (4 + 8) · P / B + t_step,  with V views, P
   optimised values, B the driver's network bandwidth (bytes moved through the driver dominate:
   every worker's parameters leave it and every partial sum arrives at it), t_step the driver's
   optimiser step (measured: Adam over P values); and N* where the communication term exceeds
   the compute term.
4. --local-workers: wall time of configs/volume_recovery.yaml (shortened by --iters) in one
   process, with --workers 1 and with --workers 2 (fresh processes, this machine).

    python benchmarks/scale_out.py [--bandwidth-gbit 10] [--views 100] [--local-workers --iters 20]
"""
import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
CONFIG = os.path.join(ROOT, "configs", "volume_recovery.yaml")
sys.path.insert(0, HERE)
from breakdown import timed as _median_time  # noqa: E402  (median seconds of `runs` calls after a warm-up)


def volume_view_time(res, runs):
    """(seconds per view gradient, P) of the volume task with a res³ density grid."""
    import tirender
    from tirender.config import load_config
    from tirender.optim.views import ViewTask, evaluate_view
    cfg = load_config(CONFIG, [])
    sc = tirender.scene_from_config(cfg)
    sc.resize_grid("smoke.density", (res, res, res))
    target = tirender.render(sc, spp=4, seed=1, progress=False)
    sc.params["smoke.density"] = np.full(sc.params.info("smoke.density").shape, 0.02, np.float32)
    task = ViewTask(0, 0, 6, 16, 16, 0, "prb", "l2", ("smoke.density",))
    return _median_time(lambda: evaluate_view(sc, task, target), runs), res ** 3


def adam_step_time(p, runs):
    """Seconds of one Adam step over p values (the driver's part of an iteration)."""
    import taichi as ti
    from tirender.optim.adam import Adam
    x = ti.field(ti.f32, p)
    g = ti.field(ti.f32, p)
    g.fill(1e-3)
    opt = Adam(x, g, lr=np.full(p, 0.01, np.float32))
    return _median_time(opt.step, runs)


def rf_view_time(res, runs, width=128):
    """(seconds per view gradient, P) of a radiance field with SH degree 2 at res³ (one width² view)."""
    from tirender.radiance_field.dataset import orbit_cameras, pixel_rays
    from tirender.radiance_field.field import RadianceField
    from tirender.radiance_field.render import render_and_backward
    fld = RadianceField(res, sh_degree=2, init_density=0.5, init_color=0.5)
    c2w = orbit_cameras(1, 3.2)[0]
    rows, cols = np.divmod(np.arange(width * width), width)
    o, d = pixel_rays(c2w, 45.0, width, width, rows, cols)
    ref = np.full((width * width, 3), 0.5, np.float32)
    jit = np.full(width * width, 0.5, np.float32)
    return _median_time(lambda: render_and_backward(fld, o, d, jit, ref), runs), fld.n_params


def local_workers(iters):
    """Wall seconds, first-iteration seconds and median s/iteration of the volume task (iters
    iterations) in one process and with 1 and 2 workers, and the final densities."""
    rows = []
    for label, flags in (("one process", []), ("--workers 1", ["--workers", "1"]),
                         ("--workers 2", ["--workers", "2"])):
        out = os.path.join("/tmp", f"tirender_scale_out_{label.replace(' ', '_').replace('-', '')}")
        cmd = [sys.executable, "-m", "tirender", "optimize", CONFIG, "--iters", str(iters), "--out", out,
               "--arch", "cpu"] + flags
        t = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        dens = np.load(os.path.join(out, "params", "smoke.density.npy"))
        el = np.loadtxt(os.path.join(out, "loss.csv"), delimiter=",", skiprows=1)[:, 2]   # seconds at each iteration's end
        rows.append((label, wall, el[0], float(np.median(np.diff(el))), dens))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bandwidth-gbit", type=float, default=10.0, help="driver network bandwidth (Gbit/s)")
    ap.add_argument("--views", type=int, default=100, help="views per iteration in the model")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--volume-res", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--rf-res", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--local-workers", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    import tirender
    tirender.init("cpu")
    B = a.bandwidth_gbit * 1e9 / 8
    V = a.views
    rows = []
    for r in a.volume_res:
        t, p = volume_view_time(r, a.runs)
        rows.append(("volume", r, t, p))
    rf = {}
    for r in a.rf_res:
        t, p = rf_view_time(r, a.runs)
        rows.append(("radiance field", r, t, p))
        rf[r] = (t, p)
    if 128 in rf and 256 not in rf:
        t, p = rf[128]
        rows.append(("radiance field (2x the 128³ time)", 256, 2 * t, 256 ** 3 * p // 128 ** 3))
    print(f"model: V = {V} views per iteration, driver bandwidth {a.bandwidth_gbit:g} Gbit/s; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"{'task':36s} {'res':>5s} {'t_view s':>9s} {'P':>11s} {'MB out/worker':>14s} {'MB in/worker':>13s} "
          f"{'t_step s':>9s} {'T(1) s':>9s} {'T(8) s':>8s} {'T(64) s':>8s} {'N*':>6s}")
    for task, r, t, p in rows:
        ts = adam_step_time(min(p, 1 << 26), 2) * p / min(p, 1 << 26)
        out_b, in_b = 4 * p, 8 * p

        def T(n):
            return math.ceil(V / n) * t + n * (out_b + in_b) / B + ts
        # N*: the smallest N whose communication term exceeds its compute term
        n_star = next((n for n in range(1, V + 1) if n * (out_b + in_b) / B > math.ceil(V / n) * t), None)
        print(f"{task:36s} {r:5d} {t:9.3f} {p:11d} {out_b / 1e6:14.1f} {in_b / 1e6:13.1f} {ts:9.3f} {T(1):9.1f} "
              f"{T(8):8.2f} {T(64):8.2f} {str(n_star) if n_star else '>V':>6s}")
    if a.local_workers:
        res = local_workers(a.iters)
        print(f"\nconfigs/volume_recovery.yaml, {a.iters} iterations, this machine ({os.cpu_count()} cores):")
        for label, wall, first, per_it, dens in res:
            same = np.array_equal(dens, res[0][4])
            print(f"  {label:14s} wall {wall:6.1f} s, first iteration {first:5.2f} s (incl. start-up), then "
                  f"{per_it:.3f} s/iteration (median); result identical to one process: {same}")


if __name__ == "__main__":
    main()
