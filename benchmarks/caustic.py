"""Caustic design (configs/caustic.yaml): cost of one iteration, memory vs spp, and the error of an
optimised height field against the target at high spp.

    python benchmarks/caustic.py                       # timings and memory
    python benchmarks/caustic.py --eval out/caustic    # + relative L2 of out/caustic's heights vs the target

Time: the light-traced primal (spp · W · H light paths) and its attached gradient w.r.t. every height
(medians of --repeat calls, warm). Memory: peak RSS of a fresh process that computes one gradient at
spp 4 and at spp 64 (the attached replay keeps no per-vertex or per-sample state: flat in spp).
--eval renders the starting slab and the optimised heights at --spp-eval and prints the relative L2
error ||y - t|| / ||t|| of each against the target (scaled to the starting render's mean, as
`target.normalize: initial` does) and their ratio.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(ROOT, "configs", "caustic.yaml")


def _scene(config):
    import tirender
    from tirender.config import load_config
    cfg = load_config(config, [])
    return tirender.load_scene(cfg["scene"], base_dir=cfg["_dir"]), cfg


def _peak_rss_child(config, spp):
    code = f"""
import resource, sys, json, numpy as np
sys.path.insert(0, {os.path.join(ROOT, "benchmarks")!r})
import tirender
from caustic import _scene
sc, cfg = _scene({config!r})
s = sc.sensors[0]
w = np.ones((s.height, s.width, 3), np.float32)
tirender.render_grad(sc, w, spp=1, seed=0, progress=False)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tirender.render_grad(sc, w, spp={spp}, seed=1, progress=False)
print(json.dumps([base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    base, peak = json.loads(out.stdout.strip().splitlines()[-1])
    return base / 1024, peak / 1024


def relative_l2(img, target):
    return float(np.linalg.norm(img - target) / np.linalg.norm(target))


def evaluate(config, out_dir, spp):
    """(relative L2 of the starting slab, of the optimised heights) against the normalised target."""
    import tirender
    from tirender.io.images import load_image
    sc, cfg = _scene(config)
    start = tirender.render(sc, spp=spp, seed=7, progress=False)
    t = load_image(os.path.join(cfg["_dir"], cfg["optimize"]["target"]["images"][0]))
    t = (t[..., None] if t.ndim == 2 else t)[..., :3]
    t = np.repeat(t[..., :1], 3, axis=2) if t.shape[2] == 1 else t
    t = t * (start.mean() / t.mean())
    h = np.load(os.path.join(out_dir, "params", "lens.height.npy"))
    sc.resize_texture("lens.height", h.shape[0], h.shape[1])
    sc.params["lens.height"] = h
    end = tirender.render(sc, spp=spp, seed=7, progress=False)
    return relative_l2(start, t), relative_l2(end, t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=CONFIG)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--eval", default=None, help="an optimize output folder to evaluate")
    ap.add_argument("--spp-eval", type=int, default=512)
    a = ap.parse_args()
    import tirender
    sc, cfg = _scene(a.config)
    spp, spp_g = cfg["optimize"]["spp"], cfg["optimize"].get("spp_grad", cfg["optimize"]["spp"])
    s = sc.sensors[0]
    w = np.random.default_rng(0).random((s.height, s.width, 3)).astype(np.float32)
    tirender.render(sc, spp=spp, seed=0, progress=False)
    tirender.render_grad(sc, w, spp=spp_g, seed=1, progress=False)
    tp, tg = [], []
    for k in range(a.repeat):
        t0 = time.perf_counter()
        tirender.render(sc, spp=spp, seed=k, progress=False)
        tp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tirender.render_grad(sc, w, spp=spp_g, seed=k, progress=False)
        tg.append(time.perf_counter() - t0)
    paths = s.width * s.height
    print(f"primal   {spp:3d} spp ({spp * paths} light paths): {np.median(tp):.3f} s")
    print(f"gradient {spp_g:3d} spp (attached, {sc.n_triangles} triangles): {np.median(tg):.3f} s")
    for k in (4, 64):
        base, peak = _peak_rss_child(a.config, k)
        print(f"peak RSS, gradient at spp {k:3d}: {peak:.0f} MB (after a 1-spp gradient: {base:.0f} MB)")
    if a.eval:
        r0, r1 = evaluate(a.config, a.eval, a.spp_eval)
        print(f"relative L2 vs the target at {a.spp_eval} spp: start {r0:.4f}, optimised {r1:.4f} "
              f"({r0 / r1:.1f}x lower)")


if __name__ == "__main__":
    main()
