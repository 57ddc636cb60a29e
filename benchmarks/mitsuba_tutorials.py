"""Mitsuba 3's tutorial scenes, loaded unchanged and rendered by both renderers from the same file: image means per
channel (Welch's test over seeds) and the RMSE of the seed-averaged images against their combined noise — the
comparison of benchmarks/parity/run.py, without gradients.

    python3 benchmarks/mitsuba_tutorials.py [--data DIR] [--scenes simple,cbox,...] [--variant rgb]
                                            [--res 64] [--spp 256] [--seeds 4]

The scenes come from a clone of mitsuba-renderer/mitsuba-tutorials (its ``scenes`` folder), given by ``--data`` or
$TIRENDER_MITSUBA_TUTORIALS; they are read where they lie, never copied. Mitsuba runs its ``llvm_ad_<variant>``
(DRJIT_LIBLLVM_PATH must point at libLLVM). The scenes' ``res`` and ``spp`` parameters are set from the options.
"""
import argparse
import importlib.util
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = "TIRENDER_MITSUBA_TUTORIALS"
# the tutorials' scene files of the scene-description issue -> the variants they are compared in (Mitsuba's stokes
# integrator runs in polarized variants only)
SCENES = {"simple": ("rgb",), "cbox": ("rgb",), "cbox_pol": ("spectral_polarized",),
          "polarizers": ("rgb", "spectral_polarized"), "shadow_art": ("rgb",)}
# scenes whose resolution parameters are not res (shadow_art: resx, resy; 2:1)
RES_DEFINES = {"shadow_art": lambda res: {"resx": str(2 * res), "resy": str(res)}}


def _parity():
    spec = importlib.util.spec_from_file_location("parity_run", os.path.join(HERE, "parity", "run.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def scenes_dir(given=None):
    """The tutorials' ``scenes`` folder (``--data`` / $TIRENDER_MITSUBA_TUTORIALS: the clone or its scenes/), or None."""
    d = given or os.environ.get(ENV)
    if not d:
        return None
    for cand in (d, os.path.join(d, "scenes")):
        if os.path.exists(os.path.join(cand, "simple.xml")):
            return os.path.abspath(cand)
    return None


def run(data, names=SCENES, variant="rgb", res=64, spp=256, seeds=4):
    """[(name, parity comparison dict)] of the scenes (tirender in this process, whose variant must be ``variant``)."""
    par = _parity()
    out = []
    for name in names:
        path = os.path.join(data, name + ".xml")
        defines = RES_DEFINES[name](res) if name in RES_DEFINES else {"res": str(res), "spp": str(spp)}
        t0 = time.time()
        ti = par.tirender_run(path, defines, spp, seeds, [], 0, grad=False)
        if "missing" in ti:
            out.append((name, {"missing": ti["missing"]}))
            continue
        mi_ = par.mitsuba_run(path, defines, spp, seeds, [], 0, grad=False, variant=f"llvm_ad_{variant}")
        r = par.compare(ti, mi_, name)
        r["time"] = time.time() - t0
        out.append((name, r))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help=f"mitsuba-tutorials clone or its scenes/ folder (default ${ENV})")
    ap.add_argument("--scenes", default=",".join(SCENES))
    ap.add_argument("--variant", default=None, help="only this variant (default: each scene's, SCENES)")
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--spp", type=int, default=256,
                    help="per seed (the noise estimate from 4 seeds needs a few hundred where an environment map's sun makes the pixels' noise heavy-tailed)")
    ap.add_argument("--seeds", type=int, default=4)
    a = ap.parse_args(argv)
    data = scenes_dir(a.data)
    if data is None:
        print(f"error: --data / ${ENV}: no mitsuba-tutorials scenes folder with simple.xml", file=sys.stderr)
        return 2
    names = a.scenes.split(",")
    if a.variant is None:       # a variant is fixed per process: one child per variant
        import subprocess
        print(f"| scene | variant | mean tirender | mean Mitsuba | Welch p | RMSE / noise | verdict |  "
              f"({a.res}², {a.spp} spp × {a.seeds} seeds)")
        print("|---|---|---|---|---|---|---|")
        rc = 0
        for v in ("rgb", "mono", "spectral", "spectral_polarized"):
            mine = [n for n in names if v in SCENES.get(n, ("rgb",))]
            if mine:
                rc |= subprocess.call([sys.executable, __file__, "--data", data, "--scenes", ",".join(mine),
                                       "--variant", v, "--res", str(a.res), "--spp", str(a.spp),
                                       "--seeds", str(a.seeds)])
        return rc
    os.environ["TIRENDER_VARIANT"] = a.variant
    sys.path.insert(0, os.path.join(HERE, ".."))
    ok = True
    for name, r in run(data, names, a.variant, a.res, a.spp, a.seeds):
        if "missing" in r:
            print(f"| {name} | {a.variant} | does not load: {r['missing']} | | | | FAIL |")
            ok = False
            continue
        ok &= r["pass_img"]
        print(f"| {name} | {a.variant} | {np.round(r['mean_ti'], 5).tolist()} | {np.round(r['mean_mi'], 5).tolist()} | "
              f"{np.round(r['p'], 3).tolist()} | {r['rmse_ratio']:.2f} | {'pass' if r['pass_img'] else 'FAIL'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
