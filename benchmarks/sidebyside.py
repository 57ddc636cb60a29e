"""Mitsuba 3 side by side: run the same workload in Mitsuba 3 (``llvm_ad_rgb``) and in tirender, each
in a fresh process, alternating the two, and report medians, the time ratio and peak memory.

The machines here are shared and noisy, so a benchmark compares only within one run: ``alternate``
runs tirender, Mitsuba, tirender, Mitsuba, ... (``rounds`` each) and returns per-renderer medians
with the load average before and after. Mitsuba comes from its pip package (the ``test`` extra);
its LLVM backend needs the system ``libllvm`` and ``DRJIT_LIBLLVM_PATH`` (set here to the Debian
path when unset and present). Without Mitsuba the comparison is skipped with a one-line reason.

Workloads (each a function run in a child process, returning {"seconds": [...], "peak_rss_mb"}):
    mitsuba_forward(xml, spp, runs, variant, res) mi.render of the scene file (its own film and filter; res: its
                                             ``$res`` parameter where given) in
                                             ``variant`` (default $MITSUBA_BENCH_VARIANT or llvm_ad_rgb;
                                             llvm_ad_spectral, cuda_ad_rgb, ...)
    mitsuba_prb_step(xml, key, value, spp, spp_grad, runs, max_depth, variant, res)
                                             one PRB gradient step: primal spp + adjoint spp_grad,
                                             L2 loss against a 4-spp target of the original scene
"""
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM-19.so"
# the backends of the workloads' children (benchmarks/gpu_check.py sets cuda and cuda_ad_rgb)
BENCH_ARCH = os.environ.get("TIRENDER_BENCH_ARCH", "cpu")
MI_VARIANT = os.environ.get("MITSUBA_BENCH_VARIANT", "llvm_ad_rgb")


def child_env():
    """The environment of a benchmark's child processes: DRJIT_LIBLLVM_PATH set when unset and present."""
    env = dict(os.environ)
    if "DRJIT_LIBLLVM_PATH" not in env and os.path.exists(LLVM):
        env["DRJIT_LIBLLVM_PATH"] = LLVM
    return env


def mitsuba_available():
    """(True, "") or (False, why) — whether llvm_ad_rgb loads in a child process."""
    code = "import mitsuba as mi; mi.set_variant('llvm_ad_rgb'); print('ok')"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if out.returncode == 0 and out.stdout.strip().endswith("ok"):
        return True, ""
    last = (out.stderr.strip().splitlines() or ["unknown error"])[-1]
    return False, f"Mitsuba 3 llvm_ad_rgb unavailable ({last[:160]})"


def timed(fn, runs):
    """fn(0) as a warm-up (compilation), then fn(1), ..., fn(runs) timed: their seconds (list)."""
    fn(0)
    ts = []
    for k in range(runs):
        t0 = time.perf_counter()
        fn(k + 1)
        ts.append(time.perf_counter() - t0)
    return ts


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _load(mi, xml, res):
    """The scene file, at resolution res (its ``$res`` parameter) when given."""
    return mi.load_file(xml) if res is None else mi.load_file(xml, res=res)


def mitsuba_forward(xml, spp, runs, variant=None, res=None):
    import mitsuba as mi
    mi.set_variant(variant or MI_VARIANT)
    import drjit as dr
    scene = _load(mi, xml, res)
    def one(k):
        dr.eval(mi.render(scene, spp=spp, seed=k))
        dr.sync_thread()
    return {"seconds": timed(one, runs), "peak_rss_mb": _rss_mb()}


def mitsuba_prb_step(xml, key, value, spp, spp_grad, runs, max_depth=6, variant=None, res=None):
    import mitsuba as mi
    mi.set_variant(variant or MI_VARIANT)
    import drjit as dr
    scene = _load(mi, xml, res)
    integ = mi.load_dict({"type": "prb", "max_depth": max_depth})
    target = mi.render(scene, spp=4, seed=99, integrator=integ)
    dr.eval(target)
    params = mi.traverse(scene)
    params[key] = mi.Color3f(value)
    params.update()

    def step(k):
        v = params[key]
        dr.enable_grad(v)
        params.update()
        img = mi.render(scene, params, spp=spp, spp_grad=spp_grad, seed=2 * k, integrator=integ)
        loss = dr.mean(dr.square(img - target), axis=None)
        dr.backward(loss)
        g = dr.grad(v)
        dr.eval(g)
        dr.sync_thread()
        dr.disable_grad(v)
        return g
    return {"seconds": timed(step, runs), "peak_rss_mb": _rss_mb()}


WORKLOADS = {"mitsuba_forward": mitsuba_forward, "mitsuba_prb_step": mitsuba_prb_step}


def options(quick_help):
    """The options of a side-by-side benchmark script: --arch, --quick, --rounds and the internal --child."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--child", default=None)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of the Mitsuba comparison")
    return ap


def script_child(script, arch, what):
    """Run ``script --arch arch --child what`` in a fresh process; the dict its last output line holds (JSON)."""
    out = subprocess.run([sys.executable, script, "--arch", arch, "--child", what], capture_output=True, text=True,
                         env=child_env())
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_child(name, *args, **kw):
    """Run WORKLOADS[name](*args, **kw) in a fresh process; returns its dict."""
    payload = json.dumps([name, args, kw])
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", payload], capture_output=True,
                         text=True, env=child_env())
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip().splitlines() or ["child failed"])[-1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternate(ti_fn, mi_fn, rounds):
    """Call ti_fn() and mi_fn() alternately `rounds` times (each returns {"seconds": [...],
    "peak_rss_mb"}). Returns {"tirender": (median s, max RSS MB), "mitsuba": (...), "ratio",
    "load": (before, after)} — medians over all runs of all rounds."""
    load0 = os.getloadavg()
    res = {"tirender": ([], 0.0), "mitsuba": ([], 0.0)}
    for _ in range(rounds):
        for name, fn in (("tirender", ti_fn), ("mitsuba", mi_fn)):
            r = fn()
            ts, rss = res[name]
            res[name] = (ts + list(r["seconds"]), max(rss, r["peak_rss_mb"]))
    out = {k: (float(np.median(v[0])), v[1]) for k, v in res.items()}
    out["ratio"] = out["tirender"][0] / out["mitsuba"][0]
    out["load"] = (load0[0], os.getloadavg()[0])
    return out


def report(title, r):
    """One printed block for an `alternate` result."""
    (t, rt), (m, rm) = r["tirender"], r["mitsuba"]
    print(f"{title}\n  tirender {t:.3f} s (peak RSS {rt:.0f} MB)   Mitsuba 3 {m:.3f} s (peak RSS {rm:.0f} MB)"
          f"   time ratio {r['ratio']:.2f}x   memory ratio {rt / max(rm, 1e-9):.2f}x"
          f"   (medians of alternated runs; load average {r['load'][0]:.2f} -> {r['load'][1]:.2f})")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        name, args, kw = json.loads(sys.argv[2])
        print(json.dumps(WORKLOADS[name](*args, **kw)))
