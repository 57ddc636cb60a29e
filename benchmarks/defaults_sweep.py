"""Defaults chosen by a sweep, not by one config (issue 47): every reconstruction family over a small
grid of the choices users make, tirender's candidate defaults side by side with Mitsuba 3's port.

Families (the Mitsuba ports are benchmarks/time_to_quality.py's children and
benchmarks/shape_recovery.py's; each run is a fresh process, one at a time):

radiance_field  the issue's schedule (16³ × 32, 32³ × 32, 64³ × 36 iterations, Adam lr 0.1 for density
                and colour, initial density 0.01 and colour 0.1, L1, one training view per iteration
                in order, 8 training + 2 held-out 128² views of the procedural scene all around, the rest
                at tirender's defaults). Grid: lr × {0.3, 1, 3}; schedules "issue" and "two" (16³ × 50,
                32³ × 50); activations relu/relu and softplus/relu. Error: the mean training-view PSNR
                (dB) at the end; drop: the largest fall of the training PSNR from the end of a stage to
                the lowest of the first DROP_WINDOW iterations after its upsampling (evaluated at every
                one of them). Mitsuba 3: its tutorial's stage change (dr.upsample, which resets
                mi.ad.Adam: "tutorial"). Variants: the stage change (upsample cubic / trilinear,
                adam_state carry / reset) and Adam's ε.
texture         configs/texture_recovery.yaml (256² diffuse texture from one 128² view, 80 iterations).
                Grid: lr × {0.3, 1, 3} around its 0.03; schedules "multires" (32² → 64² → 128² → 256², the
                config's) and "flat" (256² throughout); plus the issue's cell "issue" (lr 0.01, 16 spp,
                100 iterations, flat). Error: texture RMSE at the end; drop: the largest rise of the
                texture RMSE over the DROP_WINDOW iterations after a stage change, in dB
                (20 log10(after / before), > 0 is worse). Variants: Adam's ε.
cbox            configs/cbox_red_wall.yaml (the red wall's RGB from grey, 40 iterations): lr × {0.3, 1, 3};
                variants: Adam's ε. Error: reflectance RMSE.
volume          configs/volume_recovery.yaml (64³ smoke density, 6 views, prbvolpath, 32³ → 64³):
                lr × {0.3, 1, 3}; schedules "multires" and "flat" (64³ throughout, at lr × 1); variants:
                the config's ε (absolute 1e-6), and at lr × 1 relative 1e-3 and absolute 1e-8. Error:
                density RMSE.
shape           configs/shape_recovery.yaml (sphere → blob, 8 views, large steps, uniform Adam; ε plays
                no part): lr × {0.3, 1, 3}, tirender only (Mitsuba's projective integrator takes ~16×
                tirender's time per iteration: docs/geometry.md's 40-iteration side by side is the
                reference). Error: Chamfer distance.

    python benchmarks/defaults_sweep.py [--family radiance_field,texture,cbox,volume,shape] [--quick]
                                        [--only SUBSTRING] [--skip-mitsuba] [--out out/defaults_sweep]

--quick: smaller and shorter (radiance field 64² views and half the iterations, volume half the
iterations, shape 40, texture and cbox as they are), each family's first schedule and activation
over the lr grid only.
Results are kept per run (<out>/<family>/<cell>__<variant>/result.json) and reused by a rerun (delete
them to measure again); the table goes to stdout and <out>/defaults_sweep.md, all numbers to
<out>/defaults_sweep.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import time_to_quality as ttq  # noqa: E402

DROP_WINDOW = 10     # iterations after a stage change in which a drop counts

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
# candidate settings (the others at tirender's defaults): both forms of Adam's ε everywhere, the
# stage change's alternatives at the base cell
RF_VARIANTS = {"eps=relative": {"eps_mode": "relative"}, "eps=absolute": {"eps_mode": "absolute"},
               "upsample=trilinear": {"upsample": "trilinear"}, "adam_state=reset": {"adam_state": "reset"}}
DRIVER_VARIANTS = {"eps=relative": {"eps_mode": "relative"}, "eps=absolute": {"eps_mode": "absolute", "eps": 1e-8}}
VOLUME_VARIANTS = {"config (absolute 1e-6)": {}, "eps=relative": {"eps_mode": "relative", "eps": 1e-3},
                   "eps=absolute 1e-8": {"eps_mode": "absolute", "eps": 1e-8}}
LR_MULTS = (0.3, 1.0, 3.0)


class Cell:
    """One point of the grid: a family's settings (axes), its tirender variants {label: spec} and
    the Mitsuba spec (None: no port or not at this point)."""

    def __init__(self, family, name, axes, variants, mitsuba, kind):
        self.family, self.name, self.axes, self.variants, self.mitsuba, self.kind = \
            family, name, axes, variants, mitsuba, kind


# -- cells -------------------------------------------------------------------------------------------
def rf_cells(quick, full_variants):
    out = []
    for sched, stages in RF_SCHEDULES.items():
        for act, (da, ca) in RF_ACTIVATIONS.items():
            for lr in LR_MULTS:
                base = sched == "issue" and act == "relu" and lr == 1.0
                if quick and not (base or (sched == "issue" and act == "relu")):
                    continue
                rf = json.loads(json.dumps(ISSUE_RF))
                rf["field"].update(density_activation=da, color_activation=ca)
                rf["train"].update(stages=[dict(s) for s in stages], lr_density=0.1 * lr, lr_color=0.1 * lr)
                if quick:
                    rf["dataset"].update(width=64, height=64)
                    for s in rf["train"]["stages"]:
                        s["iters"] = max(4, s["iters"] // 2)
                names = list(RF_VARIANTS) if (base and full_variants) else ["eps=relative", "eps=absolute"]
                variants = {}
                for v in names:
                    r = json.loads(json.dumps(rf))
                    r["train"].update(RF_VARIANTS[v])
                    spec = ttq.radiance_field_spec(rf=r, eval_train=True)
                    spec.update(eval_every=4, eval_after_change=DROP_WINDOW)
                    variants[v] = spec
                mi = ttq.radiance_field_spec(rf=rf, eval_train=True, mitsuba_stage_change="tutorial")
                mi.update(eval_every=4, eval_after_change=DROP_WINDOW)
                out.append(Cell("radiance_field", f"{sched}_{act}_lr{lr:g}", dict(schedule=sched, activation=act,
                                lr=f"×{lr:g}"), variants, mi, "rf"))
    return out


def _driver_cells(family, spec_fn, schedules, variants, quick, iters=None, base_only=()):
    """Cells of a driver task: its first schedule at every lr of the grid, the others at the config's
    lr; variants in base_only are run only at the first schedule's lr × 1."""
    out = []
    first = next(iter(schedules))
    for sched, fix in schedules.items():
        for lr in LR_MULTS:
            if (sched != first and lr != 1.0) or (quick and sched != first):
                continue
            spec = spec_fn(iters)
            spec.update(fix(spec))
            spec["lr"] *= lr
            vs = {}
            for label, o in variants.items():
                if label in base_only and not (sched == first and lr == 1.0):
                    continue
                s = json.loads(json.dumps(spec))
                s["optimizer"] = o
                vs[label] = s
            out.append(Cell(family, f"{sched}_lr{lr:g}", dict(schedule=sched, lr=f"×{lr:g}"), vs, spec,
                            "volume" if family == "volume" else "driver"))
    return out


def texture_cells(quick, full_variants):
    scheds = {"multires": lambda s: {}, "flat": lambda s: {"stages": [[0, None]]}}
    out = _driver_cells("texture", ttq.texture_spec, scheds, DRIVER_VARIANTS, quick)
    spec = ttq.texture_spec(100)   # the issue's texture task
    spec.update(stages=[[0, None]], spp=16, spp_grad=16, lr=0.01)
    vs = {label: dict(json.loads(json.dumps(spec)), optimizer=o) for label, o in DRIVER_VARIANTS.items()}
    out.append(Cell("texture", "issue", dict(schedule="issue: flat, 16 spp, 100 it", lr="0.01"), vs, spec, "driver"))
    return out


def cbox_cells(quick, full_variants):
    return _driver_cells("cbox", ttq.cbox_spec, {"config": lambda s: {}}, DRIVER_VARIANTS, quick)


def volume_cells(quick, full_variants):
    scheds = {"multires": lambda s: {}, "flat": lambda s: {"stages": [[0, s["stages"][-1][1]]]}}
    return _driver_cells("volume", ttq.volume_spec, scheds, VOLUME_VARIANTS, quick, 70 if quick else None,
                         base_only=("eps=relative", "eps=absolute 1e-8"))


def shape_cells(quick, full_variants):
    """tirender only: Mitsuba's projective integrator takes 16.5 s per iteration here (docs/geometry.md:
    its 40-iteration result, Chamfer 0.0464 → 0.0247, against tirender's 0.0181, is the reference)."""
    iters = 40 if quick else 150
    return [Cell("shape", f"config_lr{lr:g}", dict(schedule="config", lr=f"×{lr:g}"),
                 {"defaults": dict(iters=iters, lr_scale=lr)}, None, "shape") for lr in LR_MULTS]


FAMILIES = {"radiance_field": rf_cells, "texture": texture_cells, "cbox": cbox_cells, "volume": volume_cells,
            "shape": shape_cells}


# -- runs --------------------------------------------------------------------------------------------
def run_one(cell, label, spec, renderer, root):
    """One run (cached in <root>/<family>/<cell>__<label>/result.json): its summary dict."""
    fam = os.path.join(root, cell.family)
    d = os.path.join(fam, f"{cell.name}__{label}".replace(" ", "_").replace("(", "").replace(")", ""))
    path = os.path.join(d, "result.json")
    if os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    t0 = time.perf_counter()
    if cell.kind == "rf":
        data = os.path.join(fam, f"data_{spec['rf']['dataset']['width']}")
        if not os.path.exists(os.path.join(data, "images.npy")):
            ttq.run_child("tirender_rf_data", spec, os.path.join(data, "data"), os.path.join(data, "data.log"))
        run_dir = os.path.join(data, os.path.basename(d))   # rf children read <their folder's parent>/data
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
    s["seconds"] = round(time.perf_counter() - t0, 1)
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(s, fh)
    return s


def summarize_rf(r):
    """Final training PSNR, held-out PSNR and the worst stage-change drop (dB) of a radiance-field run."""
    rows = r["rows"]
    drops = []
    for c in r["changes"]:
        seg = [x["train_psnr"] for x in rows[c["iteration"]:c["iteration"] + DROP_WINDOW]]
        drops.append(c["train_psnr_before"] - min([c["train_psnr_after"]] + seg))
    return {"final": rows[-1]["train_psnr"], "heldout": r["psnr_end"], "drop_db": max(drops) if drops else None,
            "drops_db": drops, "unit": "training PSNR dB",
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
    return f"{x:.2f}" if "dB" in unit else f"{x:.4g}"


def table(results):
    """Markdown table: one row per (cell, variant)."""
    lines = ["| family | cell | variant | tirender final | worst stage-change drop (dB) | Mitsuba 3 final | "
             "Mitsuba worst drop (dB) | tirender vs Mitsuba |", "|---|---|---|---|---|---|---|---|"]
    for fam, cells in results.items():
        for c in cells:
            mi = c["mitsuba"]
            for label, t in c["tirender"].items():
                u = t["unit"]
                if mi is None:
                    rel = ""
                elif "dB" in u:
                    rel = f"{t['final'] - mi['final']:+.2f} dB"
                else:
                    rel = f"{100 * (t['final'] / mi['final'] - 1):+.1f} %"
                lines.append(f"| {fam} | {c['name']} | {label} | {fmt(t['final'], u)} {'dB' if 'dB' in u else ''} | "
                             f"{fmt(t['drop_db'], 'dB')} | {fmt(mi['final'], u) if mi else '—'} | "
                             f"{fmt(mi['drop_db'], 'dB') if mi else '—'} | {rel} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=",".join(FAMILIES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="run only cells whose name contains this")
    ap.add_argument("--variants", default=None, help="comma-separated variant labels to run (default: all)")
    ap.add_argument("--skip-mitsuba", action="store_true")
    ap.add_argument("--out", default=os.path.join("out", "defaults_sweep"))
    a = ap.parse_args(argv)
    root = os.path.abspath(a.out) + ("_quick" if a.quick else "")
    ok, why = (False, "--skip-mitsuba") if a.skip_mitsuba else ttq.sidebyside.mitsuba_available()
    if not ok:
        print(f"Mitsuba 3 columns skipped: {why}")
    want = a.variants.split(",") if a.variants else None
    results = {}
    for fam in a.family.split(","):
        cells = FAMILIES[fam](a.quick, not a.quick)
        for cell in cells:
            if a.only and a.only not in cell.name:
                continue
            row = {"name": cell.name, "axes": cell.axes, "tirender": {}, "mitsuba": None}
            for label, spec in cell.variants.items():
                if want and label not in want:
                    continue
                try:
                    row["tirender"][label] = run_one(cell, label, spec, "tirender", root)
                except RuntimeError as e:
                    print(f"{fam} {cell.name} {label}: {e}", flush=True)
                    continue
                t = row["tirender"][label]
                print(f"{fam:15s} {cell.name:24s} {label:22s} tirender {fmt(t['final'], t['unit'])} "
                      f"drop {fmt(t['drop_db'], 'dB')} ({t.get('seconds') or 0:.0f} s)", flush=True)
            if ok and cell.mitsuba is not None:
                try:
                    row["mitsuba"] = run_one(cell, "mitsuba", cell.mitsuba, "mitsuba", root)
                    m = row["mitsuba"]
                    print(f"{fam:15s} {cell.name:24s} {'Mitsuba 3':22s} {fmt(m['final'], m['unit'])} "
                          f"drop {fmt(m['drop_db'], 'dB')} ({m.get('seconds') or 0:.0f} s)", flush=True)
                except RuntimeError as e:
                    print(f"{fam} {cell.name} Mitsuba: {e}", flush=True)
            results.setdefault(fam, []).append(row)
    md = table(results)
    print(md)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "defaults_sweep.md"), "w") as fh:
        fh.write(md + "\n")
    with open(os.path.join(root, "defaults_sweep.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    return results


if __name__ == "__main__":
    main()
