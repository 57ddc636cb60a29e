"""Quality of the prbvolpath density gradient at the start of the volume reconstruction.

The task of ``configs/volume_recovery.yaml`` at its first iteration: six 64² views of the smoke
(targets rendered from the 64³ ground truth), the density grid at 32³ and constant (the config's
``init``), L2 loss, ``spp`` primal + ``spp_grad`` adjoint samples per view. Prints

* the correlation between two independent gradient estimates (all seeds different) over the
  voxels — the issue-20 criterion (≥ 0.8 at the task's spp) — and the same after pooling
  ``--pool`` estimates per side;
* the projected gradient <∇, u> along u = 1 (all voxels) against central finite differences with
  correlated random numbers (same seed for the ± renders) of <δy, y(σ)> with one fixed δy: means
  and standard errors over ``--seeds`` seeds, and z;
* seconds per gradient evaluation (all views).

    python benchmarks/volume_gradient.py [--spp 8] [--pool 4] [--seeds 8] [--target-spp 128]
                                         [--inscatter-points K] [--state start|truth]
"""
import argparse
import os
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CONFIG = os.path.join(ROOT, "configs", "volume_recovery.yaml")


def setup(target_spp, res=32, init=0.02, views=(0, 1, 2, 3, 4, 5), state="start"):
    """state "start": the task's first iteration (targets from the 64³ truth, a constant 32³ grid);
    "truth": the 64³ truth itself, with fixed random adjoint images (seeded) instead of a loss."""
    import tirender
    sc = tirender.load_scene(CONFIG)
    if state == "truth":
        rng = np.random.default_rng(0)
        return sc, [rng.uniform(-1, 1, (64, 64, 3)).astype(np.float32) for _ in views]
    targets = [tirender.render(sc, spp=target_spp, seed=1000 + v, sensor=v, progress=False) for v in views]
    sc.resize_grid("smoke.density", (res, res, res))
    sc.params["smoke.density"] = np.full(sc.params["smoke.density"].shape, init, np.float32)
    return sc, targets


def gradient(sc, targets, spp, spp_grad, seed, views=(0, 1, 2, 3, 4, 5), state="start"):
    """One iteration's density gradient (the driver's loop: primal seed s0, adjoint seed s1)."""
    import tirender
    from tirender.api import render_grad
    nv = len(views)
    g = None
    for k, v in enumerate(views):
        if state == "truth":
            dy = targets[k] / targets[k].size
        else:
            img = tirender.render(sc, spp=spp, seed=seed * 7919 + 2 * v, sensor=v, progress=False)
            _, dy = tirender.losses.l2(img, targets[k])
        gr = render_grad(sc, dy / nv, spp=spp_grad, seed=seed * 7919 + 2 * v + 1, sensor=v, progress=False)
        gv = gr["smoke.density"].astype(np.float64)
        g = gv if g is None else g + gv
    return g


def fd_check(sc, targets, spp, seeds, h):
    """<∇, 1> by PRB and by central differences of <δy, y> (δy fixed from a 64-spp render)."""
    import tirender
    from tirender.api import render_grad
    v = 0
    img = tirender.render(sc, spp=64, seed=99, sensor=v, progress=False)
    _, dy = tirender.losses.l2(img, targets[v])
    x0 = sc.params["smoke.density"]
    g, f = [], []
    for s in range(seeds):
        g.append(float(render_grad(sc, dy, spp=spp, seed=500 + s, sensor=v, progress=False)["smoke.density"].sum()))
        sc.params["smoke.density"] = x0 + h
        a = float((tirender.render(sc, spp=spp, seed=900 + s, sensor=v, progress=False).astype(np.float64) * dy).sum())
        sc.params["smoke.density"] = x0 - h
        b = float((tirender.render(sc, spp=spp, seed=900 + s, sensor=v, progress=False).astype(np.float64) * dy).sum())
        f.append((a - b) / (2 * h))
    sc.params["smoke.density"] = x0
    g, f = np.array(g), np.array(f)
    se = np.hypot(g.std(ddof=1) / np.sqrt(len(g)), f.std(ddof=1) / np.sqrt(len(f)))
    return g.mean(), g.std(ddof=1) / np.sqrt(len(g)), f.mean(), f.std(ddof=1) / np.sqrt(len(f)), (g.mean() - f.mean()) / se


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--spp", type=int, default=8, help="primal and adjoint spp per view (the task's: 8)")
    ap.add_argument("--pool", type=int, default=4, help="estimates pooled per side for the second correlation")
    ap.add_argument("--seeds", type=int, default=8, help="FD / PRB seeds of the projected-gradient check (0: skip)")
    ap.add_argument("--fd-spp", type=int, default=16)
    ap.add_argument("--target-spp", type=int, default=128)
    ap.add_argument("--state", choices=("start", "truth"), default="start",
                    help="start: the task's first iteration; truth: the 64^3 truth with fixed random adjoint images")
    ap.add_argument("--inscatter-points", type=int, default=None, help="prbvolpath's inscatter_points (default: the config's)")
    a = ap.parse_args()
    import tirender
    tirender.init(a.arch)
    sc, targets = setup(a.target_spp, state=a.state)
    if a.inscatter_points is not None:
        sc.integrator["inscatter_points"] = a.inscatter_points
    gradient(sc, targets, a.spp, a.spp, 0, state=a.state)        # compile
    est = []
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(2 * a.pool):
        est.append(gradient(sc, targets, a.spp, a.spp, 1 + s, state=a.state).ravel())
    dt = (time.perf_counter() - t0) / (2 * a.pool)
    dc = (time.process_time() - c0) / (2 * a.pool)
    r1 = np.corrcoef(est[0], est[1])[0, 1]
    ga, gb = np.mean(est[0::2], axis=0), np.mean(est[1::2], axis=0)
    rp = np.corrcoef(ga, gb)[0, 1]
    sums = np.array([e.sum() for e in est])
    print(f"density gradient at the {a.state} ({est[0].size} voxels, 6 views 64^2, {a.spp}+{a.spp} spp)")
    print(f"  correlation of two independent estimates: {r1:.3f}")
    print(f"  correlation of two means of {a.pool} estimates: {rp:.3f}")
    print(f"  sum over voxels: {sums.mean():.5g} ± {sums.std(ddof=1) / np.sqrt(len(sums)):.2g} (over {len(sums)})")
    print(f"  seconds per gradient (6 views, primal + adjoint): {dt:.2f} wall, {dc:.2f} CPU (load {os.getloadavg()[0]:.1f})")
    if a.seeds and a.state == "start":
        mg, sg, mf, sf, z = fd_check(sc, targets, a.fd_spp, a.seeds, 0.005)
        print(f"  <grad, 1> view 0, fixed adjoint image: PRB {mg:.5g} ± {sg:.2g}, FD {mf:.5g} ± {sf:.2g}, z = {z:+.2f}")


if __name__ == "__main__":
    main()
