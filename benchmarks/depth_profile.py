"""Cost of a path by depth, and of the gradient pass relative to the primal one (the cbox).

Renders configs/cbox.yaml (256², Gaussian filter) at max_depth 1, 2, 3 and 6 and prints wall
nanoseconds per sample (best of `runs`): depth 1 is the camera ray, the primary hit, emission and
the film; each further depth adds NEE, BSDF sampling and one bounce ray. Then the PRB gradient pass
(`render_grad`, same spp) against the primal render: PRB walks every path twice (primal and
replay), so a ratio near 2 means the adjoint work itself (BSDF adjoints, atomics) is cheap.

    python benchmarks/depth_profile.py [--spp 32] [--runs 3] [--box]
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside  # noqa: E402
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")


def best(fn, runs):
    return min(sidebyside.timed(fn, runs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spp", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--box", action="store_true", help="box filter instead of the cbox's Gaussian")
    a = ap.parse_args()
    import tirender
    tirender.init("cpu")
    from tirender.api import load_scene, render, render_grad
    filt = ["sensors.0.film.filter.type=box"] if a.box else []
    print(f"cbox 256x256, {a.spp} spp, {'box' if a.box else 'gaussian'} filter, load average {os.getloadavg()[0]:.2f}")
    n = 256 * 256 * a.spp
    for md in (1, 2, 3, 6):
        sc = load_scene(CBOX, overrides=[f"integrator.max_depth={md}"] + filt)
        t = best(lambda r: render(sc, spp=a.spp, seed=r, progress=False), a.runs)
        print(f"  max_depth {md}: {t:7.3f} s  {t / n * 1e9:6.0f} ns/sample (wall)")
    sc = load_scene(CBOX, overrides=filt)
    w = np.random.default_rng(0).random((256, 256, 3)).astype(np.float32)
    tp = best(lambda r: render(sc, spp=a.spp, seed=r, progress=False), a.runs)
    tg = best(lambda r: render_grad(sc, w, spp=a.spp, seed=r, progress=False), a.runs)
    print(f"  primal {tp:.3f} s, PRB gradient pass {tg:.3f} s: ratio {tg / tp:.2f} (2 = the two walks alone)")


if __name__ == "__main__":
    main()
