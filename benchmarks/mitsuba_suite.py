"""Mitsuba 3's render regression test, run on tirender: every scene of mitsuba-data ``tests/scenes/*/*.xml``,
loaded unchanged, rendered with Mitsuba's budget and judged by Mitsuba's own Z-test against its 32k-spp
reference and variance images (``src/render/tests/test_renders.py`` in mitsuba-renderer/mitsuba3).

    python3 benchmarks/mitsuba_suite.py [--data DIR] [--variants rgb,mono,spectral,spectral_polarized]
                                        [--scenes SUBSTRING,...] [--integrators path,prb,...]
                                        [--out benchmarks/results/mitsuba_suite.md] [--docs]

The data (a clone of mitsuba-renderer/mitsuba-data, or ``../shared/mitsuba-data``) comes from ``--data`` or
``TIRENDER_MITSUBA_DATA``; it is read where it lies, never copied. What is run, as Mitsuba's test runs it:

- per scene, its own integrator (the file name's suffix: ``test_x_path.xml`` -> ``path``) and the ones
  Mitsuba's ``INTEGRATOR_MAPPING`` adds (path -> prb, prb_projective; volpath -> volpathmis, prbvolpath;
  direct -> direct_projective), in every variant tirender has (rgb, mono, spectral, spectral_polarized); the
  polarized variant skips ``participating_media/`` and the integrators prb, prbvolpath, direct_projective and
  prb_projective (Mitsuba's exclusions);
- the scene is loaded with ``spp`` and ``integrator`` given as parameters (Mitsuba's ``mi.load_file(scene,
  spp=spp, integrator=...)``), spp = 2·10⁶ // pixels, seed 0;
- the Z-test exactly: images in XYZ (tirender's linear sRGB through Mitsuba's ``srgb_to_xyz``; in mono the
  luminance against each of the reference's X, Y, Z), the reference variance floored at 1e-4,
  z = |img - ref| sqrt(spp / var), p = 2 (1 - Φ(z)), Šidák-corrected α = 1 - (1 - 0.01)^(1/pixels), and the
  case passes when at least 99.75 % of the pixels pass (successes over three channels / 3).

Note what the test demands: the reference variance sets the tolerance, so an estimator that is noisier per
sample than Mitsuba's fails even when it is unbiased.

Each variant runs in a child process (a variant is fixed per process); a scene that tirender cannot load
reports the one-line error. The table (scene × variant × integrator: pass, pass fraction, or the reason)
is printed, written to ``--out`` and, with ``--docs``, into docs/mitsuba.md between its markers.
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, ROOT)

ENV = "TIRENDER_MITSUBA_DATA"
VARIANTS = ("rgb", "mono", "spectral", "spectral_polarized")
# Mitsuba's test_renders.py
INTEGRATOR_MAPPING = {"direct": ("direct_projective",), "path": ("prb", "prb_projective"),
                      "volpath": ("volpathmis", "prbvolpath")}
POLARIZED_EXCLUDE_FOLDERS = ("participating_media",)
POLARIZED_EXCLUDE_INTEGRATORS = ("prb", "prbvolpath", "direct_projective", "prb_projective")
SAMPLE_BUDGET = int(2e6)
SIGNIFICANCE = 0.01
PASS_FRACTION = 0.9975
VARIANCE_FLOOR = 1e-4
# Mitsuba's srgb_to_xyz (include/mitsuba/core/spectrum.h)
SRGB_TO_XYZ = np.array([[0.412453, 0.357580, 0.180423],
                        [0.212671, 0.715160, 0.072169],
                        [0.019334, 0.119193, 0.950227]])
DOC_BEGIN = "<!-- mitsuba-suite table: begin (python3 benchmarks/mitsuba_suite.py --docs) -->"
DOC_END = "<!-- mitsuba-suite table: end -->"


def data_dir(given=None):
    """The mitsuba-data folder (``--data`` or $TIRENDER_MITSUBA_DATA), or None when absent."""
    d = given or os.environ.get(ENV)
    if d and os.path.isdir(os.path.join(d, "tests", "scenes")):
        return os.path.abspath(d)
    return None


def scenes(data):
    """The suite's scene files (sorted), as Mitsuba's test globs them: tests/scenes/*/*.xml."""
    return sorted(glob.glob(os.path.join(data, "tests", "scenes", "*", "*.xml")))


def scene_integrator(path):
    """The integrator a scene is named for: its file name's suffix (``scene_path.xml`` -> ``path``)."""
    return os.path.splitext(os.path.basename(path))[0].rsplit("_", 1)[-1]


def cases(data, variants=VARIANTS, scene_filter=None, integrators=None):
    """[(variant, scene file, integrator)] of Mitsuba's test for these variants."""
    out = []
    for v in variants:
        polarized = "polarized" in v
        for f in scenes(data):
            rel = os.path.relpath(f, os.path.join(data, "tests", "scenes"))
            if scene_filter and not any(s in rel for s in scene_filter):
                continue
            if polarized and any(ex in f for ex in POLARIZED_EXCLUDE_FOLDERS):
                continue
            own = scene_integrator(f)
            for it in (own,) + INTEGRATOR_MAPPING.get(own, ()):
                if polarized and it in POLARIZED_EXCLUDE_INTEGRATORS:
                    continue
                if integrators and it not in integrators:
                    continue
                out.append((v, f, it))
    return out


def reference_files(scene, variant):
    """(reference image, variance image) of a scene in a variant (Mitsuba's get_ref_fname)."""
    stem = os.path.splitext(os.path.basename(scene))[0].rsplit("_", 1)[0]
    ref = os.path.join(os.path.dirname(scene), "refs", f"{stem}_ref_{variant}.exr")
    return ref, ref.replace(".exr", "_var.exr")


def to_xyz(rgb):
    """Linear sRGB (..., 3) -> XYZ with Mitsuba's matrix (float64)."""
    return np.asarray(rgb, np.float64) @ SRGB_TO_XYZ.T


def ztest(img, spp, ref, ref_var, significance=SIGNIFICANCE):
    """Mitsuba's Z-test: img (H, W, C) the rendered XYZ image at spp samples per pixel (C = 1 broadcasts
    against the reference's channels, as Mitsuba's mono case), ref / ref_var (H, W, 3) XYZ. Returns
    (passed, pass fraction, min p-value, alpha)."""
    ref_var = np.maximum(ref_var, VARIANCE_FLOOR)
    z = np.abs(img - ref) * np.sqrt(spp / ref_var)
    p = np.vectorize(math.erfc, otypes=[np.float64])(z / math.sqrt(2.0))     # 2 (1 - Φ(z))
    n = ref.shape[0] * ref.shape[1]
    alpha = 1.0 - (1.0 - significance) ** (1.0 / n)
    frac = np.count_nonzero(p > alpha) / 3.0 / n
    return frac >= PASS_FRACTION, frac, float(p.min()), alpha


def reference_variant():
    """Mitsuba's rgb variant for reference images: llvm_ad_rgb where Dr.Jit finds libLLVM (DRJIT_LIBLLVM_PATH),
    else scalar_rgb. The same plugins and estimators, the same image in distribution; llvm_ad_rgb renders a 36 × 40
    film at 8192 spp in 4 CPU-s (Dr.Jit's kernel cache empty) against scalar_rgb's 12 (this 2-core machine)."""
    import mitsuba as mi
    if os.environ.get("DRJIT_LIBLLVM_PATH") and "llvm_ad_rgb" in mi.variants():
        try:
            mi.set_variant("llvm_ad_rgb")
            return "llvm_ad_rgb"
        except Exception:   # noqa: BLE001 (Dr.Jit could not load that libLLVM)
            pass
    mi.set_variant("scalar_rgb")
    return "scalar_rgb"


def ztest_file(path, spp=256, ref_spp=4096, scene=None):
    """Mitsuba's Z-test of tirender's image of the XML file `path` (spp, seed 0; `scene`: the file already loaded)
    against Mitsuba 3's (reference_variant(), ref_spp, the per-pixel variance of its ``moment`` integrator, which the
    file must use). Returns (passed, details: fraction, p_min, alpha, mean, ref_mean, variant)."""
    import mitsuba as mi
    import tirender
    variant = reference_variant()
    ref = np.array(mi.render(mi.load_file(str(path), spp=ref_spp)), np.float64)
    m1, var = ref[..., 3:6], ref[..., 6:9] - ref[..., 3:6] ** 2
    sc = scene if scene is not None else tirender.load_scene(str(path))
    ours = to_xyz(tirender.render(sc, spp=spp, seed=0, progress=False))
    ok, frac, pmin, alpha = ztest(ours, spp, m1, var)
    return ok, dict(fraction=frac, p_min=pmin, alpha=alpha, mean=ours.mean((0, 1)), ref_mean=m1.mean((0, 1)),
                    variant=variant)


def _one_line(e):
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:300]


def run_case(variant, scene, integrator):
    """Render one case in this process (whose variant is `variant`) and judge it: a result dict."""
    import tirender
    from tirender.errors import ConfigError
    from tirender.io.exr import read_exr
    res = dict(variant=variant, scene=scene, integrator=integrator)
    ref_f, var_f = reference_files(scene, variant)
    if not (os.path.exists(ref_f) and os.path.exists(var_f)):
        return dict(res, status="skip", message="no reference in this variant")
    ref, ref_var = to_xyz(read_exr(ref_f)), to_xyz(read_exr(var_f))
    n = ref.shape[0] * ref.shape[1]
    spp = SAMPLE_BUDGET // n
    t0 = time.time()
    try:
        sc = tirender.load_scene(scene, defines={"spp": str(spp), "integrator": integrator})
        img = tirender.render(sc, spp=spp, seed=0, progress=False)
    except ConfigError as e:
        if "file not found" in str(e):        # e.g. various_shapes/ names meshes and an SDF grid that mitsuba-data's
            return dict(res, status="skip",   # tests/ and common/ lack; a full clone of mitsuba-data has them
                        message=f"data incomplete: {_one_line(e)}", seconds=time.time() - t0)
        return dict(res, status="unsupported", message=_one_line(e), seconds=time.time() - t0)
    except Exception as e:  # noqa: BLE001 - reported per case, the suite goes on
        return dict(res, status="error", message=f"{type(e).__name__}: {_one_line(e)}", seconds=time.time() - t0)
    if img.shape[:2] != ref.shape[:2]:
        return dict(res, status="fail", message=f"image {img.shape[:2]} vs reference {ref.shape[:2]}",
                    seconds=time.time() - t0)
    xyz = np.asarray(img, np.float64)[..., :1] if variant == "mono" else to_xyz(img)
    ok, frac, pmin, alpha = ztest(xyz, spp, ref, ref_var)
    mean = xyz.mean(axis=(0, 1))
    return dict(res, status="pass" if ok else "fail", fraction=frac, p_min=pmin, alpha=alpha, spp=spp,
                seconds=time.time() - t0, mean=[float(x) for x in np.broadcast_to(mean, 3)],
                ref_mean=[float(x) for x in ref.mean(axis=(0, 1))])


def _worker(variant, case_file):
    """Child process: one variant's cases, one JSON line per case on stdout."""
    os.environ["TIRENDER_VARIANT"] = variant
    import tirender
    tirender.init(os.environ.get("TIRENDER_ARCH", "cpu"))
    with open(case_file) as f:
        todo = json.load(f)
    for scene, integrator in todo:
        r = run_case(variant, scene, integrator)
        print("CASE " + json.dumps(r), flush=True)


def run(cases_list, progress=True):
    """Run the cases, one child process per variant (a case that kills its process is reported and the rest
    go on in a new one). Returns the result dicts in the order given."""
    import tempfile
    by_variant = {}
    for v, f, it in cases_list:
        by_variant.setdefault(v, []).append((f, it))
    results = {}
    for v, todo in by_variant.items():
        left = list(todo)
        while left:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tf:
                json.dump(left, tf)
            env = dict(os.environ, TIRENDER_VARIANT=v, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", v, tf.name],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            done = set()
            for line in p.stdout:
                if line.startswith("CASE "):
                    r = json.loads(line[5:])
                    results[(v, r["scene"], r["integrator"])] = r
                    done.add((r["scene"], r["integrator"]))
                    if progress:
                        print(_row_text(r), flush=True)
            err = p.stderr.read()
            p.wait()
            os.unlink(tf.name)
            rest = [c for c in left if tuple(c) not in done]
            if rest and p.returncode != 0:      # the first undone case killed the worker
                f, it = rest[0]
                tail = [ln for ln in err.strip().splitlines() if ln.strip()]
                r = dict(variant=v, scene=f, integrator=it, status="error",
                         message=f"worker died (exit {p.returncode}): {tail[-1][:200] if tail else ''}")
                results[(v, f, it)] = r
                if progress:
                    print(_row_text(r), flush=True)
                rest = rest[1:]
            left = rest
    return [results[c] for c in cases_list if c in results]


def _short(scene):
    return "/".join(scene.replace("\\", "/").split("/")[-2:])


def _verdict(r):
    if r["status"] in ("pass", "fail"):
        return f"{r['status']} {100 * r['fraction']:.2f} %"
    return f"{r['status']}: {r.get('message', '')}"


def _row_text(r):
    return f"{r['variant']:18s} {_short(r['scene']):60s} {r['integrator']:17s} {_verdict(r)}"


def table(results):
    """Markdown table: one row per scene × integrator, one column per variant."""
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in results)]
    rows = {}
    for r in results:
        rows.setdefault((_short(r["scene"]), r["integrator"]), {})[r["variant"]] = r
    out = ["| scene | integrator | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
    for (scene, it), by in sorted(rows.items()):
        cells = []
        for v in variants:
            r = by.get(v)
            if r is None:
                cells.append("–")
            elif r["status"] in ("pass", "fail"):
                cells.append(f"{'**pass**' if r['status'] == 'pass' else 'FAIL'} {100 * r['fraction']:.2f} %")
            else:
                cells.append(f"{r['status']}: {r.get('message', '').replace('|', '/')}")
        out.append(f"| {scene} | {it} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def counts(results):
    """{variant: (passed, failed, other)}."""
    c = {}
    for r in results:
        p, f, o = c.get(r["variant"], (0, 0, 0))
        c[r["variant"]] = (p + (r["status"] == "pass"), f + (r["status"] == "fail"),
                           o + (r["status"] not in ("pass", "fail")))
    return c


def report(results, command):
    lines = [f"Command: `{command}` ({time.strftime('%Y-%m-%d')})", ""]
    for v, (p, f, o) in counts(results).items():
        lines.append(f"- {v}: {p} pass, {f} fail, {o} not run (unsupported / error / no reference) "
                     f"of {p + f + o} cases")
    return "\n".join(lines + ["", table(results), ""])


def _portable(r):
    """A result as stored and shown: the scene as folder/file, no data location in its message."""
    r = dict(r, scene=_short(r["scene"]))
    if "message" in r:
        r["message"] = re.sub(r"\S*tests/scenes/[^:]*: ", "", r["message"])
    return r


def _stored(store, md):
    """{"commands", "results"} of the earlier runs: the .json, or (written before it existed) the table of --out."""
    if os.path.exists(store):
        with open(store) as f:
            return json.load(f)
    text = open(md).read()
    commands = [c for c in (ln[len("Command: `"):].split("` (")[0] for ln in text.splitlines()
                            if ln.startswith("Command: `"))]
    rows = [ln.strip().strip("|").split("|") for ln in text.splitlines() if ln.startswith("| ") and ".xml" in ln]
    header = [h.strip() for h in next(ln for ln in text.splitlines() if ln.startswith("| scene |")).strip("|").split("|")]
    results = []
    for cells in rows:
        cells = [c.strip() for c in cells]
        for v, cell in zip(header[2:], cells[2:]):
            if cell in ("–", ""):
                continue
            word = cell.replace("**", "").split()[0].rstrip(":").lower()
            r = dict(variant=v, scene=cells[0], integrator=cells[1], status=word)
            if word in ("pass", "fail"):
                r["fraction"] = float(cell.replace("**", "").split()[1]) / 100
            else:
                r["message"] = cell.split(":", 1)[1].strip() if ":" in cell else ""
            results.append(r)
    return {"commands": commands, "results": results}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help=f"mitsuba-data folder (default ${ENV})")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--scenes", help="comma-separated substrings of the scene paths to run")
    ap.add_argument("--integrators", help="comma-separated integrators to run (default: Mitsuba's mapping)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "mitsuba_suite.md"))
    ap.add_argument("--docs", action="store_true", help="also write the table into docs/mitsuba.md")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of earlier runs (the .json next to --out) that this run does not redo, "
                         "so that variants or integrators can be run in separate sittings")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)
    data = data_dir(a.data)
    if data is None:
        print(f"error: --data / ${ENV}: no mitsuba-data folder with tests/scenes (clone "
              f"mitsuba-renderer/mitsuba-data)", file=sys.stderr)
        return 2
    todo = cases(data, [v for v in a.variants.split(",") if v], a.scenes.split(",") if a.scenes else None,
                 a.integrators.split(",") if a.integrators else None)
    t0 = time.time()
    results = run(todo)
    cmd = ("python3 benchmarks/mitsuba_suite.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    store = os.path.splitext(os.path.abspath(a.out))[0] + ".json"
    commands = [cmd] if todo else []      # (--merge with nothing to run: the stored table written again)
    if a.merge and (os.path.exists(store) or os.path.exists(a.out)):
        old = _stored(store, a.out)
        key = lambda r: (r["variant"], _short(r["scene"]), r["integrator"])  # noqa: E731
        redone = {key(r) for r in results}
        results = [r for r in old["results"] if key(r) not in redone] + results
        commands = old["commands"] + [c for c in commands if c not in old["commands"]]
    results = [_portable(r) for r in results]
    os.makedirs(os.path.dirname(store), exist_ok=True)
    with open(store, "w") as f:
        json.dump({"commands": commands, "results": results}, f, indent=0)
    text = report(results, "`; `".join(commands)) + f"\nTotal {time.time() - t0:.0f} s (this run).\n"
    print()
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("# Mitsuba 3's render test on tirender\n\n" + text)
    if a.docs:
        doc = os.path.join(ROOT, "docs", "mitsuba.md")
        s = open(doc).read()
        if DOC_BEGIN in s and DOC_END in s:
            head, rest = s.split(DOC_BEGIN, 1)
            s = head + DOC_BEGIN + "\n" + text + DOC_END + rest.split(DOC_END, 1)[1]
            open(doc, "w").write(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
