"""Defaults chosen by a sweep, not by one config (issue 47): every reconstruction family over a small
grid of the choices users make, tirender's defaults and their alternatives side by side with Mitsuba 3's
port.

Families (the Mitsuba ports are benchmarks/time_to_quality.py's children; each run is a fresh process,
one at a time):

radiance_field  the issue's schedule (16³ × 32, 32³ × 32, 64³ × 36 iterations, Adam lr 0.1 for density
                and colour, initial density 0.01 and colour 0.1, L1, one training view per iteration
                in order, 8 training + 2 held-out 128² views of the procedural scene all around, the rest
                at tirender's defaults). Grid: lr × {0.3, 1, 3}; schedules "issue" and "two" (16³ × 50,
                32³ × 50); activations relu/relu and softplus/relu. Variants: tirender's defaults and the
                relative ε at every cell; at the base cell (issue, relu, × 1) also upsample trilinear,
                adam_state reset and both. Error: the mean training-view PSNR (dB) at the end; drop: the
                largest fall of the training PSNR from the end of a stage to the lowest of the first
                DROP_WINDOW iterations after its upsampling (evaluated at every one of them). Mitsuba 3:
                its tutorial's stage change (dr.upsample, which resets mi.ad.Adam).
texture         configs/texture_recovery.yaml (256² diffuse texture from one 128² view, 80 iterations).
                Grid: lr × {0.3, 1, 3} around its 0.03 with its schedule "multires" (32² → 64² → 128² →
                256²), "flat" (256² throughout) at × 1, and the issue's cell "issue" (lr 0.01, 16 + 16
                spp, 100 iterations, flat). Error: texture RMSE at the end; drop: the largest rise of the
                texture RMSE over the DROP_WINDOW iterations after a stage change, in dB
                (20 log10(after / before), > 0 is worse). Variants: defaults, the relative ε.
cbox            configs/cbox_red_wall.yaml (the red wall's RGB from grey, 40 iterations): lr × {0.3, 1, 3};
                variants: defaults, the relative ε. Error: reflectance RMSE.
volume          configs/volume_recovery.yaml (64³ smoke density, 6 views, prbvolpath, 32³ → 64³, its own
                ε absolute 1e-6): lr × {0.3, 1, 3}; schedules "multires" and "flat" (64³ throughout, at
                lr × 1); at multires × 1 also relative 1e-3 and absolute 1e-8 (the default without the
                config's). Error: density RMSE.
shape           configs/shape_recovery.yaml (sphere → blob, 8 views, large steps, uniform Adam; ε plays
                no part): lr × {0.3, 1, 3}, tirender only (NO_MITSUBA). Error: Chamfer distance.

    python benchmarks/defaults_sweep.py [--family radiance_field,texture,cbox,volume,shape] [--quick]
                                        [--only SUBSTRING] [--variants A,B] [--skip-mitsuba] [--cached]
                                        [--out out/defaults_sweep]

--quick (a few minutes: 105 s measured on 2 shared cores at load ~2, most of it Taichi's and Dr.Jit's
compilation): the base cell of radiance_field, texture and cbox only (radiance field: issue, relu, × 1
at 64² views and half the iterations, defaults and the relative ε; texture: the issue's cell at 30
iterations; cbox at 10), each with its Mitsuba port; volume (12 iterations, its config's ε, ~7 min)
and shape (5 iterations, ~3 min) when named with --family. Output in <out>_quick.
Results are kept per run (<out>/<family>/<cell>__<variant>/result.json) and reused by a rerun while the
run's spec is the same (delete them to measure again; --cached: run nothing, tabulate what is there);
the table goes to stdout and <out>/defaults_sweep.md, all numbers to <out>/defaults_sweep.json.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]   # time_to_quality; tirender (the loss watch)
import time_to_quality as ttq  # noqa: E402

DROP_WINDOW = 10     # iterations after a stage change in which a drop counts
EPOCH = 8            # the radiance field's training views: its last-epoch mean PSNR averages the one-view swings

# the issue's radiance-field task (tirender's defaults for everything it does not name)
ISSUE_RF = {"seed": 0,
            "dataset": {"type": "procedural", "views": 8, "heldout": 2, "width": 128, "height": 128},
            "field": {"init_density": 0.01, "init_color": 0.1, "density_activation": "relu",
                      "color_activation": "relu"},
            "train": {"stages": [{"res": 16, "iters": 32}, {"res": 32, "iters": 32}, {"res": 64, "iters": 36}],
                      "lr_density": 0.1, "lr_color": 0.1, "loss": "l1", "batch": "view", "view_order": "sequential",
                      "eval_every": 0, "checkpoint_every": 0, "save_pngs": False}}
RF_SCHEDULES = {"issue": ISSUE_RF["train"]["stages"],
                "two": [{"res": 16, "iters": 50}, {"res": 32, "iters": 50}]}
RF_ACTIVATIONS = {"relu": ("relu", "relu"), "softplus": ("softplus", "relu")}
DEFAULTS = "defaults"   # the variant label of tirender's defaults (train.upsample cubic, adam_state carry, ε absolute 1e-8)
# alternatives to the defaults: Adam's other ε at every cell, the stage change's at the base cell
RF_VARIANTS = {DEFAULTS: {}, "eps=relative": {"eps_mode": "relative"},
               "upsample=trilinear": {"upsample": "trilinear"}, "adam_state=reset": {"adam_state": "reset"},
               "trilinear+reset": {"upsample": "trilinear", "adam_state": "reset"}}
DRIVER_VARIANTS = {DEFAULTS: {}, "eps=relative": {"eps_mode": "relative"}}
VOLUME_VARIANTS = {"config (eps 1e-6)": {}, "eps=relative": {"eps_mode": "relative", "eps": 1e-3},
                   "eps=absolute 1e-8": {"eps_mode": "absolute", "eps": 1e-8}}
LR_MULTS = (0.3, 1.0, 3.0)
# --quick: the base cell of each family only (lr × 1, first schedule), shorter
QUICK_ITERS = {"texture": 30, "cbox": 10, "volume": 12, "shape": 5}
QUICK_FAMILIES = ("radiance_field", "texture", "cbox")   # --quick without --family (volume, shape: minutes per run)
# why a family has no Mitsuba column
NO_MITSUBA = {"shape": "not run: the port (benchmarks/shape_recovery.py) needs cholespy and takes ~16.5 s/it "
                       "(docs/geometry.md: 40 it, Chamfer 0.0464 → 0.0247)"}


class Cell:
    """One point of the grid: a family's settings (axes), its tirender variants {label: spec} and
    the Mitsuba spec (None: no port or not at this point)."""

    def __init__(self, family, name, axes, variants, mitsuba, kind):
        self.family, self.name, self.axes, self.variants, self.mitsuba, self.kind = \
            family, name, axes, variants, mitsuba, kind


def _copy(x):
    return json.loads(json.dumps(x))


# -- cells -------------------------------------------------------------------------------------------
def rf_cells(quick):
    """The radiance field: schedules × activations × lr; tirender's defaults and the relative ε at
    every cell, the stage change's alternatives at the base cell (issue, relu, lr × 1); Mitsuba 3 with
    its tutorial's stage change. --quick: the base cell at 64² views and half the iterations."""
    out = []
    for sched, stages in RF_SCHEDULES.items():
        for act, (da, ca) in RF_ACTIVATIONS.items():
            for lr in LR_MULTS:
                base = sched == "issue" and act == "relu" and lr == 1.0
                if quick and not base:
                    continue
                rf = _copy(ISSUE_RF)
                rf["field"].update(density_activation=da, color_activation=ca)
                rf["train"].update(stages=[dict(s) for s in stages], lr_density=0.1 * lr, lr_color=0.1 * lr)
                if quick:
                    rf["dataset"].update(width=64, height=64)
                    for s in rf["train"]["stages"]:
                        s["iters"] = max(4, s["iters"] // 2)
                names = list(RF_VARIANTS) if (base and not quick) else [DEFAULTS, "eps=relative"]
                variants = {}
                for v in names:
                    r = _copy(rf)
                    r["train"].update(RF_VARIANTS[v])
                    spec = ttq.radiance_field_spec(rf=r, eval_train=True)
                    spec.update(eval_every=4, eval_after_change=DROP_WINDOW, eval_last=EPOCH)
                    variants[v] = spec
                mi = ttq.radiance_field_spec(rf=rf, eval_train=True, mitsuba_stage_change="tutorial")
                mi.update(eval_every=4, eval_after_change=DROP_WINDOW, eval_last=EPOCH)
                out.append(Cell("radiance_field", f"{sched}_{act}_lr{lr:g}", dict(schedule=sched, activation=act,
                                lr=f"×{lr:g}"), variants, mi, "rf"))
    return out


def _driver_cells(family, spec_fn, schedules, variants, quick, base_only=()):
    """Cells of a driver task: its first schedule at every lr of the grid, the others at the config's
    lr; variants in base_only only at the first schedule's lr × 1. --quick: that base cell only, at
    QUICK_ITERS[family] iterations."""
    out = []
    first = next(iter(schedules))
    for sched, fix in schedules.items():
        for lr in LR_MULTS:
            base = sched == first and lr == 1.0
            if (sched != first and lr != 1.0) or (quick and not base):
                continue
            spec = spec_fn(QUICK_ITERS[family] if quick else None)
            spec.update(fix(spec))
            spec["lr"] *= lr
            vs = {}
            for label, o in variants.items():
                if label in base_only and (quick or not base):
                    continue
                vs[label] = dict(_copy(spec), optimizer=o)
            out.append(Cell(family, f"{sched}_lr{lr:g}", dict(schedule=sched, lr=f"×{lr:g}"), vs, spec,
                            "volume" if family == "volume" else "driver"))
    return out


def texture_cells(quick):
    """configs/texture_recovery.yaml over lr × {0.3, 1, 3} (multires) and flat, plus the issue's cell
    (flat 256², 16 + 16 spp, lr 0.01, 100 iterations). --quick: the issue's cell at QUICK_ITERS."""
    scheds = {"multires": lambda s: {}, "flat": lambda s: {"stages": [[0, None]]}}
    out = [] if quick else _driver_cells("texture", ttq.texture_spec, scheds, DRIVER_VARIANTS, quick)
    spec = ttq.texture_spec(QUICK_ITERS["texture"] if quick else 100)   # the issue's texture task
    spec.update(stages=[[0, None]], spp=16, spp_grad=16, lr=0.01)
    vs = {label: dict(_copy(spec), optimizer=o) for label, o in DRIVER_VARIANTS.items()}
    out.append(Cell("texture", "issue", dict(schedule=f"issue: flat, 16 spp, {spec['iters']} it", lr="0.01"), vs,
                    spec, "driver"))
    return out


def cbox_cells(quick):
    return _driver_cells("cbox", ttq.cbox_spec, {"config": lambda s: {}}, DRIVER_VARIANTS, quick)


def volume_cells(quick):
    scheds = {"multires": lambda s: {}, "flat": lambda s: {"stages": [[0, s["stages"][-1][1]]]}}
    return _driver_cells("volume", ttq.volume_spec, scheds, VOLUME_VARIANTS, quick,
                         base_only=("eps=relative", "eps=absolute 1e-8"))


def shape_cells(quick):
    """tirender only (NO_MITSUBA["shape"]); ε plays no part (uniform Adam on large-steps coordinates)."""
    iters = QUICK_ITERS["shape"] if quick else 150
    return [Cell("shape", f"config_lr{lr:g}", dict(schedule="config", lr=f"×{lr:g}"),
                 {DEFAULTS: dict(iters=iters, lr_scale=lr)}, None, "shape") for lr in LR_MULTS
            if not quick or lr == 1.0]


FAMILIES = {"radiance_field": rf_cells, "texture": texture_cells, "cbox": cbox_cells, "volume": volume_cells,
            "shape": shape_cells}


# -- runs --------------------------------------------------------------------------------------------
def spec_hash(spec):
    """A run's identity: the hash of its spec (a cached result of another spec is not reused)."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def run_one(cell, label, spec, renderer, root, cached_only=False):
    """One run (cached in <root>/<family>/<cell>__<label>/result.json, reused while its spec is the
    same): its summary dict (None when cached_only and not there)."""
    fam = os.path.join(root, cell.family)
    d = os.path.join(fam, f"{cell.name}__{label}".replace(" ", "_").replace("(", "").replace(")", ""))
    path = os.path.join(d, "result.json")
    data = os.path.join(fam, f"data_{spec['rf']['dataset']['width']}") if cell.kind == "rf" else None
    run_dir = os.path.join(data, os.path.basename(d)) if data else d  # rf children read <their parent>/data
    if os.path.exists(path):
        with open(path) as fh:
            old = json.load(fh)
        if old.get("spec_hash") == spec_hash(spec):
            csv_path = os.path.join(run_dir, "loss.csv")
            if "watch" not in old and cell.kind != "shape" and os.path.exists(csv_path):   # a run from before it
                old["watch"] = watch_events(ttq.read_rows(csv_path), [start for start, _ in spec["stages"][1:]])
                with open(path, "w") as fh:
                    json.dump(old, fh)
            return old
    if cached_only:
        return None
    t0 = time.perf_counter()
    if cell.kind == "rf":
        if not os.path.exists(os.path.join(data, "data", "images.npy")):   # one dataset per view size
            ttq.run_child("tirender_rf_data", spec, os.path.join(data, "data"), os.path.join(data, "data.log"))
        child = "tirender_radiance_field" if renderer == "tirender" else "mitsuba_radiance_field"
        r = ttq.run_child(child, spec, run_dir, run_dir + ".log")
        s = summarize_rf(r)
    elif cell.kind == "shape":
        import shape_recovery
        r, err = shape_recovery.child(renderer, spec["iters"], spec["lr_scale"])
        if r is None:
            raise RuntimeError(f"shape {renderer} failed: {err}")
        s = {"final": r["chamfer_end"], "start": r["chamfer_start"], "drop_db": None, "unit": "Chamfer"}
    else:
        child = "tirender_task" if renderer == "tirender" else ("mitsuba_volume" if cell.kind == "volume" else
                                                                "mitsuba_task")
        r = ttq.run_child(child, spec, d, d + ".log")
        s = summarize_driver(r, spec)
    if cell.kind != "shape":
        s["watch"] = watch_events(r["rows"], [start for start, _ in spec["stages"][1:]])
    s["seconds"] = round(time.perf_counter() - t0, 1)
    s["spec_hash"] = spec_hash(spec)
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(s, fh)
    return s


def watch_events(rows, changes):
    """What tirender's loss watch (tirender/optim/watch.py, its defaults) says of a run's per-iteration
    losses (either renderer's), with stage changes at the iterations `changes`: its warnings as
    "kind@iteration ×ratio"."""
    from tirender.optim.watch import LossWatch
    w = LossWatch(log=lambda *_: None)
    for r in rows:
        if r["iteration"] in changes:
            w.end_stage()
            w.stage_change(str(r["iteration"]))
        w.update(r["iteration"], r["loss"])
    w.end_stage()
    return [f"{e['kind']}@{e['iteration']} ×{e['ratio']:.2g}" if e["ratio"] is not None else
            f"{e['kind']}@{e['iteration']}" for e in w.events]


def summarize_rf(r):
    """Final training PSNR (and its mean over the last EPOCH iterations: one-view batches make it swing
    by a few dB within a stage), held-out PSNR and the worst stage-change drop (dB) of a radiance-field
    run: over DROP_WINDOW iterations and right at the upsampling (before any step)."""
    rows = r["rows"]
    drops, at = [], []
    for c in r["changes"]:
        seg = [x["train_psnr"] for x in rows[c["iteration"]:c["iteration"] + DROP_WINDOW]]
        drops.append(c["train_psnr_before"] - min([c["train_psnr_after"]] + seg))
        at.append(c["train_psnr_before"] - c["train_psnr_after"])
    return {"final": rows[-1]["train_psnr"], "epoch": float(np.mean([x["train_psnr"] for x in rows[-EPOCH:]])),
            "heldout": r["psnr_end"], "drop_db": max(drops) if drops else None, "drops_db": drops,
            "drop_at_change_db": max(at) if at else None, "unit": "training PSNR dB",
            "curve": [[x["iteration"] + 1, round(x["train_psnr"], 3)] for x in rows]}


def summarize_driver(r, spec):
    """Final parameter RMSE and the worst rise (dB) of it over the DROP_WINDOW iterations after a stage change."""
    rows = r["rows"]
    drops = []
    for start, _ in spec["stages"][1:]:
        if 0 < start < len(rows):
            before = rows[start - 1]["param_rmse"]
            after = max(x["param_rmse"] for x in rows[start:start + DROP_WINDOW])
            drops.append(20 * np.log10(after / before) if before > 0 else float("inf"))
    return {"final": rows[-1]["param_rmse"], "start": r["rmse_start"], "drop_db": max(drops) if drops else None,
            "drops_db": drops, "unit": "parameter RMSE"}


# -- table -------------------------------------------------------------------------------------------
def fmt(x, unit):
    if x is None:
        return "—"
    return f"{x:.2f} dB" if unit == "dB" else f"{x:.4g}"


def _vs(t, mi):
    """tirender against Mitsuba: the PSNR difference (dB, > 0 better) or the relative error (%, < 0 better)."""
    if mi is None or mi.get("final") is None:
        return None
    if "dB" in t["unit"]:
        return t["final"] - mi["final"]
    return 100 * (t["final"] / mi["final"] - 1)


def _fmt_vs(x, unit):
    return "" if x is None else (f"{x:+.2f} dB" if "dB" in unit else f"{x:+.1f} %")


def _final(t, u):
    """The final error; the radiance field's with its last-epoch mean."""
    if t.get("epoch") is None:
        return fmt(t["final"], u)
    return fmt(t["final"], u) + f" (last {EPOCH}: {t['epoch']:.2f}; held-out {t['heldout']:.2f})"


def _drop(t):
    """The worst drop; the radiance field's with its drop right at the upsampling."""
    return fmt(t["drop_db"], "dB") + (f" ({t['drop_at_change_db']:+.2f} at the change)" if t.get("drop_at_change_db") is not None
                                      else "")


def _watch(t):
    """The loss watch's warnings on a run ("quiet": none; "—": not watched)."""
    if t is None or t.get("watch") is None:
        return "—"
    return ", ".join(t["watch"]) or "quiet"


def table(results):
    """Markdown: one row per (cell, variant), then one per (family, variant) over its cells."""
    lines = ["| family | cell | variant | tirender final | worst stage-change drop | Mitsuba 3 final | "
             "Mitsuba worst drop | tirender vs Mitsuba | loss watch: tirender / Mitsuba's losses |",
             "|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for fam, cells in results.items():
        for c in cells:
            mi = c["mitsuba"]
            for label, t in c["tirender"].items():
                u = "dB" if "dB" in t["unit"] else t["unit"]
                vs = _vs(t, mi)
                name = f"**{label}**" if label == DEFAULTS else label
                if mi is not None:
                    mcol, mdrop = _final(mi, u), _drop(mi)
                else:
                    mcol, mdrop = NO_MITSUBA.get(fam, "no port"), "—"
                lines.append(f"| {fam} | {c['name']} | {name} | {_final(t, u)} | {_drop(t)} | {mcol} | {mdrop} | "
                             f"{_fmt_vs(vs, t['unit'])} | {_watch(t)} / {_watch(mi)} |")
                acc = summary.setdefault((fam, label), {"unit": t["unit"], "n": 0, "vs": [], "drop": [], "mi_drop": []})
                acc["n"] += 1
                if vs is not None:
                    acc["vs"].append(vs)
                if t["drop_db"] is not None:
                    acc["drop"].append(t["drop_db"])
                if mi is not None and mi["drop_db"] is not None:
                    acc["mi_drop"].append(mi["drop_db"])
    lines += ["", "| family | variant | cells | error: " + "unit | tirender vs Mitsuba: median | worst | "
              "worst stage-change drop | Mitsuba's worst drop |", "|---|---|---|---|---|---|---|---|"]
    for (fam, label), a in summary.items():
        db = "dB" in a["unit"]
        worst = (min(a["vs"]) if db else max(a["vs"])) if a["vs"] else None
        name = f"**{label}**" if label == DEFAULTS else label
        lines.append(f"| {fam} | {name} | {a['n']} | {a['unit']} | "
                     f"{_fmt_vs(float(np.median(a['vs'])) if a['vs'] else None, a['unit'])} | {_fmt_vs(worst, a['unit'])} | "
                     f"{fmt(max(a['drop']) if a['drop'] else None, 'dB')} | "
                     f"{fmt(max(a['mi_drop']) if a['mi_drop'] else None, 'dB')} |")
    return "\n".join(lines)


HEADER = """Drop: radiance field, the fall of the mean training-view PSNR from the end of a stage to the lowest of
the DROP_WINDOW = {w} iterations after its upsampling (in brackets: right at the upsampling, before any
step); its final PSNR is followed by the mean over the last {e} iterations (one training view per
iteration makes the PSNR swing by a few dB within a stage) and the final held-out PSNR; texture and volume, the rise of the parameter
RMSE over those iterations, 20 log10(after / before) (> 0: worse). Final error: the radiance field's
training PSNR (higher is better), the others' parameter RMSE (texture, reflectance, density; shape:
Chamfer distance; lower is better). Mitsuba 3: the port of each family in benchmarks/time_to_quality.py
(the radiance field with its tutorial's stage change: dr.upsample, Adam reset); **defaults**: tirender's
(train.upsample cubic, train.adam_state carry, Adam ε absolute 1e-8; volume: its config's ε 1e-6).
Loss watch: what tirender's (tirender/optim/watch.py, factor 2 over 10-iteration means) says of each
run's per-iteration image loss, "kind@iteration ×ratio" per warning."""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=None, help="comma-separated families (default: all; --quick: "
                    + ", ".join(QUICK_FAMILIES) + ")")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="run only cells whose name contains this")
    ap.add_argument("--variants", default=None, help="comma-separated variant labels to run (default: all)")
    ap.add_argument("--skip-mitsuba", action="store_true")
    ap.add_argument("--cached", action="store_true", help="run nothing: the table of the runs already in --out")
    ap.add_argument("--out", default=os.path.join("out", "defaults_sweep"))
    a = ap.parse_args(argv)
    root = os.path.abspath(a.out) + ("_quick" if a.quick else "")
    ok, why = (False, "--skip-mitsuba") if a.skip_mitsuba else ttq.sidebyside.mitsuba_available()
    if not ok:
        print(f"Mitsuba 3 columns skipped: {why}")
    want = a.variants.split(",") if a.variants else None
    results = {}
    t0 = time.perf_counter()
    families = a.family.split(",") if a.family else list(QUICK_FAMILIES if a.quick else FAMILIES)
    for fam in families:
        if fam not in FAMILIES:
            ap.error(f"unknown family {fam!r} ({', '.join(FAMILIES)})")
        for cell in FAMILIES[fam](a.quick):
            if a.only and a.only not in cell.name:
                continue
            row = {"name": cell.name, "axes": cell.axes, "tirender": {}, "mitsuba": None}
            for label, spec in cell.variants.items():
                if want and label not in want:
                    continue
                try:
                    t = run_one(cell, label, spec, "tirender", root, a.cached)
                except RuntimeError as e:
                    print(f"{fam} {cell.name} {label}: {e}", flush=True)
                    continue
                if t is None:
                    continue
                row["tirender"][label] = t
                u = "dB" if "dB" in t["unit"] else t["unit"]
                print(f"{fam:15s} {cell.name:24s} {label:22s} tirender {fmt(t['final'], u)} "
                      f"drop {fmt(t['drop_db'], 'dB')} ({t.get('seconds') or 0:.0f} s)", flush=True)
            if ok and cell.mitsuba is not None:
                try:
                    row["mitsuba"] = m = run_one(cell, "mitsuba", cell.mitsuba, "mitsuba", root, a.cached)
                    u = "dB" if m is None or "dB" in m["unit"] else m["unit"]
                    if m is not None:
                        print(f"{fam:15s} {cell.name:24s} {'Mitsuba 3':22s} {fmt(m['final'], u)} "
                              f"drop {fmt(m['drop_db'], 'dB')} ({m.get('seconds') or 0:.0f} s)", flush=True)
                except RuntimeError as e:
                    print(f"{fam} {cell.name} Mitsuba: {e}", flush=True)
            if row["tirender"]:
                results.setdefault(fam, []).append(row)
    md = HEADER.format(w=DROP_WINDOW, e=EPOCH) + "\n\n" + table(results)
    print(md)
    print(f"{time.perf_counter() - t0:.0f} s")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "defaults_sweep.md"), "w") as fh:
        fh.write("    python benchmarks/defaults_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:]) +
                 "\n\n" + md + "\n")
    with open(os.path.join(root, "defaults_sweep.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    return results


if __name__ == "__main__":
    main()
