"""Equal-time comparison of path, pssmlt and coherent_mcmc on scenes with difficult light transport.

For each scene (configs/door_ajar.yaml, configs/caustic_glass.yaml by default): a long path-traced
reference (``--ref-spp``, seed 1000; cached in the temp directory), then every integrator at each wall-time budget: its throughput
is measured once (paths per second, after a warm-up that compiles its kernels), the spp that fills
the budget is rendered (seeds 0..--seeds-1), and the RMSE against the reference and the wall time are
recorded. Also the lane utilisation (the fraction of lanes doing useful work if the paths ran as
the lanes of a wide walk in lock step): the plain path tracer's groups of B samples of a pixel vs
coherent_mcmc's bundles of B paths.

    python benchmarks/mcmc.py [--scenes door_ajar,caustic_glass] [--budgets 2,4,8,16]
                              [--ref-spp door_ajar=8192,caustic_glass=65536] [--seeds 3] [--quick]

Writes benchmarks/results/mcmc_<scene>.png (RMSE vs seconds, log scale), mcmc.md (the table) and
mcmc_<scene>_<integrator>.png (the images at the largest budget, next to the reference).
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RESULTS = os.path.join(ROOT, "benchmarks", "results")
METHODS = ("path", "pssmlt", "coherent_mcmc")


def _reference(tirender, scene, name, spp, arch):
    """The path-traced reference (seed 1000), cached in the temp directory by scene file, spp, arch."""
    import hashlib
    import tempfile
    with open(os.path.join(ROOT, "configs", f"{name}.yaml"), "rb") as f:
        h = hashlib.sha1(f.read()).hexdigest()[:12]
    cache = os.path.join(tempfile.gettempdir(), f"tirender_mcmc_ref_{name}_{h}_{spp}_{arch}.npy")
    if os.path.exists(cache):
        return np.load(cache)
    t = time.perf_counter()
    ref = tirender.render(scene, spp=spp, seed=1000, integrator="path", progress=True)
    print(f"{name}: reference {spp} spp in {time.perf_counter() - t:.1f} s, mean {ref.mean():.4f}", flush=True)
    np.save(cache + ".tmp.npy", ref)
    os.replace(cache + ".tmp.npy", cache)
    return ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", default="door_ajar,caustic_glass")
    ap.add_argument("--budgets", default="2,4,8,16", help="wall-time budgets in seconds")
    ap.add_argument("--ref-spp", default="door_ajar=8192,caustic_glass=65536",
                    help="spp of the path-traced reference, per scene (name=spp,...) or one number")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--quick", action="store_true", help="budgets 1,2, reference 1024 spp, one seed")
    a = ap.parse_args()
    if a.quick:
        a.budgets, a.ref_spp, a.seeds = "1,2", "1024", 1
    ref_spp = dict(kv.split("=") for kv in a.ref_spp.split(",")) if "=" in a.ref_spp else {}
    sys.path.insert(0, ROOT)
    import imageio

    import tirender
    from tirender.integrators import mcmc
    from tirender.io.plot import save_line_plot
    tirender.init(a.arch)
    budgets = [float(b) for b in a.budgets.split(",")]
    os.makedirs(RESULTS, exist_ok=True)
    load = os.getloadavg()[0]
    lines = [f"# MCMC vs path tracing at equal time ({a.arch}, load average {load:.2f}, "
             f"`python benchmarks/mcmc.py --budgets {a.budgets} --ref-spp {a.ref_spp} --seeds {a.seeds}`)", ""]
    for name in a.scenes.split(","):
        scene = tirender.load_scene(os.path.join(ROOT, "configs", f"{name}.yaml"))
        s = scene.sensors[0]
        npix = s.width * s.height
        rspp = int(ref_spp.get(name, 8192)) if ref_spp else int(a.ref_spp)
        ref = _reference(tirender, scene, name, rspp, a.arch)
        series, rows, images = {}, [], {}
        bundle = mcmc.settings(scene, "coherent_mcmc").bundle
        walk_util = mcmc.walk_utilisation(scene, 64, bundle)     # the plain path tracer's, once per scene
        for m in METHODS:
            tirender.render(scene, spp=4, seed=99, integrator=m, progress=False)     # compile
            t = time.perf_counter()
            tirender.render(scene, spp=16, seed=98, integrator=m, progress=False)
            rate = 16 * npix / (time.perf_counter() - t)                               # paths per second
            xs, ys = [], []
            for b in budgets:
                spp = max(1, int(round(b * rate / npix)))
                errs, secs = [], []
                for seed in range(a.seeds):
                    t = time.perf_counter()
                    img = tirender.render(scene, spp=spp, seed=seed, integrator=m, progress=False)
                    secs.append(time.perf_counter() - t)
                    errs.append(float(np.sqrt(np.mean((img.astype(np.float64) - ref) ** 2))))
                    images[m] = img
                stats = mcmc.statistics() if m != "path" else {}
                util = {"path": walk_util, "coherent_mcmc": stats.get("lane_utilisation")}.get(m) or float("nan")
                acc = stats.get("acceptance", float("nan"))
                row = (m, b, spp, float(np.median(secs)), float(np.mean(errs)), acc, util)
                rows.append(row)
                xs.append(row[3])
                ys.append(row[4])
                print(f"  {m:14s} budget {b:5.1f} s: {spp:6d} spp in {row[3]:6.2f} s, RMSE {row[4]:.5f}"
                      f"  acceptance {acc:.3f}  lane utilisation (B={bundle}) {util:.3f}", flush=True)
            series[m] = (np.array(xs), np.array(ys))
        save_line_plot(os.path.join(RESULTS, f"mcmc_{name}.png"), series,
                       title=f"{name}: RMSE vs wall time (reference {rspp} spp)", xlabel="seconds",
                       ylabel="RMSE", logy=True)
        def srgb(x):
            return (np.clip(x, 0, 1) ** (1 / 2.2) * 255).astype(np.uint8)
        imageio.imwrite(os.path.join(RESULTS, f"mcmc_{name}_images.png"),
                        srgb(np.concatenate([ref] + [images[m] for m in METHODS], axis=1)))
        lines += [f"## {name} ({s.width}x{s.height}, reference: path {rspp} spp; images: reference, "
                  f"{', '.join(METHODS)} at {budgets[-1]:g} s in `mcmc_{name}_images.png`)", "",
                  "| integrator | budget s | spp | wall s | RMSE (mean of seeds) | acceptance | lane utilisation |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {m} | {b:g} | {spp} | {sec:.2f} | {err:.5f} | {acc:.3f} | {util:.3f} |"
                  for m, b, spp, sec, err, acc, util in rows]
        lines.append("")
    with open(os.path.join(RESULTS, "mcmc.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
