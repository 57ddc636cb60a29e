"""Variants benchmark (docs/variants.md): the Cornell box (256², 64 spp, max_depth 6, Gaussian filter) rendered
by tirender in each variant (rgb, mono, spectral, spectral_polarized) and, where Mitsuba 3 is installed, by
Mitsuba 3 in ``llvm_ad_rgb``, ``llvm_ad_spectral`` and ``llvm_ad_spectral_polarized`` on the XML twin of the same scene. Every measurement is a fresh
process (a process holds one variant), warm-up first, then the median of ``--runs``; the renderers are
alternated for ``--rounds`` rounds (benchmarks/sidebyside.py). Prints each variant's slowdown against RGB in
tirender and the tirender / Mitsuba time ratio of the RGB, spectral and polarized variants, with peak RSS and the load
average.

    python benchmarks/variants.py [--spp 64] [--runs 3] [--rounds 2]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
CBOX_XML = os.path.join(ROOT, "tests", "data", "cbox.xml")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside  # noqa: E402

VARIANTS = ("rgb", "mono", "spectral", "spectral_polarized")
MITSUBA = {"rgb": "llvm_ad_rgb", "spectral": "llvm_ad_spectral", "spectral_polarized": "llvm_ad_spectral_polarized"}


def tirender_forward(variant, spp, runs):
    import tirender
    tirender.init("cpu")
    tirender.set_variant(variant)
    from tirender.api import load_scene, render
    sc = load_scene(CBOX)
    ts = sidebyside.timed(lambda k: render(sc, spp=spp, seed=k, progress=False), runs)
    return {"seconds": ts, "peak_rss_mb": sidebyside._rss_mb()}


def _child(args):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(args)],
                         capture_output=True, text=True, env=sidebyside.child_env())
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip().splitlines() or ["child failed"])[-1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        v, spp, runs = json.loads(a.child)
        print(json.dumps(tirender_forward(v, spp, runs)))
        return
    ok, why = sidebyside.mitsuba_available()
    jobs = [("tirender " + v, lambda v=v: _child([v, a.spp, a.runs])) for v in VARIANTS]
    if ok:
        for mv in MITSUBA.values():
            jobs.append(("Mitsuba 3 " + mv, lambda mv=mv: sidebyside.run_child("mitsuba_forward", CBOX_XML, a.spp,
                                                                               a.runs, mv)))
    else:
        print(f"Mitsuba 3 comparison skipped: {why}")
    load0 = os.getloadavg()[0]
    res = {name: ([], 0.0) for name, _ in jobs}
    for _ in range(a.rounds):
        for name, fn in jobs:
            r = fn()
            ts, rss = res[name]
            res[name] = (ts + list(r["seconds"]), max(rss, r["peak_rss_mb"]))
    med = {k: (float(np.median(v[0])), v[1]) for k, v in res.items()}
    print(f"cbox 256x256, {a.spp} spp, max_depth 6, Gaussian filter; medians of {a.rounds} alternated rounds x "
          f"{a.runs} runs (load average {load0:.2f} -> {os.getloadavg()[0]:.2f})")
    rgb = med["tirender rgb"][0]
    for name, (t, rss) in med.items():
        extra = f"   x{t / rgb:.2f} of tirender rgb" if name.startswith("tirender") else ""
        print(f"  {name:28s} {t:8.3f} s   peak RSS {rss:6.0f} MB{extra}")
    if ok:
        for v, mv in MITSUBA.items():
            print(f"  time ratio tirender {v} / Mitsuba {mv}: {med['tirender ' + v][0] / med['Mitsuba 3 ' + mv][0]:.2f}x")


if __name__ == "__main__":
    main()
