"""PRB gradient-step benchmark: the Cornell box red wall, primal 64 spp + adjoint 64 spp at 256².

Prints seconds per gradient step (median of 3 after a warm-up) and peak RSS, each configuration in a
fresh process; then peak RSS vs adjoint spp (64 -> 1024) and vs max_depth (2 -> 64) to show that
PRB's memory does not grow with either. Where Mitsuba 3 is installed, the same step (its `prb`,
`mi.render(spp=64, spp_grad=64)` on the XML twin tests/data/cbox.xml, L2 loss, `dr.backward`) runs
side by side, alternated with tirender's in fresh processes (benchmarks/sidebyside.py): medians,
time ratio and peak RSS of each.

    python benchmarks/gradient.py [--arch cpu] [--quick] [--rounds 3]
"""
import json
import os
import resource
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
CBOX_XML = os.path.join(ROOT, "tests", "data", "cbox.xml")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside  # noqa: E402


def one(arch, spp_primal, spp_adj, max_depth, runs):
    import tirender
    tirender.init(arch)
    from tirender.api import render_grad
    from tirender.optim import losses
    from tirender.api import load_scene, render
    sc = load_scene(CBOX, overrides=[f"integrator.max_depth={max_depth}"])
    target = render(sc, spp=4, seed=99, progress=False)
    sc.params["red.reflectance"] = [0.5, 0.5, 0.5]

    def step(k):
        img = render(sc, spp=spp_primal, seed=2 * k, progress=False)
        _, dy = losses.l2(img, target)
        return render_grad(sc, dy, spp=spp_adj, seed=2 * k + 1, progress=False)
    ts = sidebyside.timed(step, runs)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return dict(spp_primal=spp_primal, spp_adj=spp_adj, max_depth=max_depth, seconds=float(np.median(ts)), all_seconds=ts,
                peak_rss_mb=rss, arch=tirender.current_arch())


def run_child(arch, spp_primal, spp_adj, depth, runs):
    return sidebyside.script_child(__file__, arch, f"{spp_primal},{spp_adj},{depth},{runs}")


def main():
    a = sidebyside.options("fewer configurations").parse_args()
    if a.child:
        p, q, d, r = (int(x) for x in a.child.split(","))
        print(json.dumps(one(a.arch, p, q, d, r)))
        return
    main_row = run_child(a.arch, 64, 64, 6, 3)
    print(f"PRB gradient step, cbox red wall, 256x256, primal 64 spp + adjoint 64 spp, max_depth 6, {main_row['arch']}:")
    print(f"  {main_row['seconds']:.2f} s, peak RSS {main_row['peak_rss_mb']:.0f} MB")
    ok, why = sidebyside.mitsuba_available()
    if ok:
        r = sidebyside.alternate(
            lambda: {"seconds": (c := run_child(a.arch, 64, 64, 6, 3))["all_seconds"], "peak_rss_mb": c["peak_rss_mb"]},
            lambda: sidebyside.run_child("mitsuba_prb_step", CBOX_XML, "red.reflectance.value", 0.5, 64, 64, 3),
            a.rounds)
        sidebyside.report(f"side by side, PRB step ({a.rounds} alternated rounds x 3 steps):", r)
    else:
        print(f"  side by side with Mitsuba 3: skipped ({why})")
    print("\npeak RSS vs adjoint spp (max_depth 6):")
    for spp in ([64, 256] if a.quick else [64, 256, 1024]):
        r = run_child(a.arch, 4, spp, 6, 1)
        print(f"  spp {spp:5d}: {r['peak_rss_mb']:7.0f} MB  ({r['seconds']:.2f} s)")
    print("\npeak RSS vs max_depth (adjoint 16 spp):")
    for depth in ([2, 16] if a.quick else [2, 8, 16, 64]):
        r = run_child(a.arch, 4, 16, depth, 1)
        print(f"  max_depth {depth:3d}: {r['peak_rss_mb']:7.0f} MB  ({r['seconds']:.2f} s)")


if __name__ == "__main__":
    main()
