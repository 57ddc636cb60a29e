"""Forward rendering benchmark: the Cornell box at 256², 64 spp, max_depth 6.

Prints seconds (median of 5 after one warm-up), Msamples/s and the first-call time (kernel compile,
measured in a fresh process with Taichi's offline cache disabled), for the Gaussian and box filters.
Then, where Mitsuba 3 is installed, both renderers side by side on the same scene (the XML twin
tests/data/cbox.xml, Gaussian filter), each in fresh processes, alternated (benchmarks/sidebyside.py):
median seconds, time ratio, peak RSS of each, load average.

    python benchmarks/forward.py [--arch cpu] [--spp 64] [--runs 5] [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
CBOX_XML = os.path.join(ROOT, "tests", "data", "cbox.xml")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside  # noqa: E402


def one(arch, spp, runs, filt, cache):
    import tirender
    tirender.init(arch, offline_cache=cache)
    from tirender.api import load_scene, render
    sets = [] if filt == "gaussian" else ["sensors.0.film.filter.type=box"]
    sc = load_scene(CBOX, overrides=sets)
    t0 = time.perf_counter()
    render(sc, spp=1, seed=0, progress=False)
    first = time.perf_counter() - t0
    times = []
    for r in range(runs):
        t0 = time.perf_counter()
        render(sc, spp=spp, seed=r, progress=False)
        times.append(time.perf_counter() - t0)
    s = sc.sensors[0]
    med = float(np.median(times))
    import resource
    return dict(filter=filt, arch=tirender.current_arch(), first_call_s=first, seconds=med, all_seconds=times,
                msamples_per_s=s.width * s.height * spp / med / 1e6,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of the Mitsuba comparison")
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        filt, cache = a.child.split(",")
        print(json.dumps(one(a.arch, a.spp, a.runs, filt, cache == "1")))
        return
    def child(filt, cache, runs):
        out = subprocess.run([sys.executable, __file__, "--arch", a.arch, "--spp", str(a.spp), "--runs",
                              str(runs), "--child", f"{filt},{cache}"],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        return json.loads(out)
    rows = []
    for filt in ("gaussian", "box"):
        for cache in ("0", "1"):
            r = child(filt, cache, a.runs if cache == "1" else 1)
            r["offline_cache"] = cache == "1"
            rows.append(r)
    print(f"cbox 256x256, {a.spp} spp, max_depth 6")
    print(f"{'filter':10s} {'arch':6s} {'cache':6s} {'first call s':>12s} {'seconds':>9s} {'Msamples/s':>11s}")
    for r in rows:
        secs = f"{r['seconds']:9.3f}" if r["offline_cache"] else f"{'-':>9s}"
        ms = f"{r['msamples_per_s']:11.2f}" if r["offline_cache"] else f"{'-':>11s}"
        print(f"{r['filter']:10s} {r['arch']:6s} {str(r['offline_cache']):6s} {r['first_call_s']:12.2f} {secs} {ms}")

    ok, why = sidebyside.mitsuba_available()
    if not ok:
        print(f"\nside by side with Mitsuba 3: skipped ({why})")
        return
    r = sidebyside.alternate(
        lambda: {"seconds": (c := child("gaussian", "1", 3))["all_seconds"], "peak_rss_mb": c["peak_rss_mb"]},
        lambda: sidebyside.run_child("mitsuba_forward", CBOX_XML, a.spp, 3), a.rounds)
    print()
    sidebyside.report(f"side by side, cbox forward ({a.spp} spp, Gaussian filter, {a.rounds} alternated rounds x 3 runs):", r)


if __name__ == "__main__":
    main()
