"""Radiance-field benchmark: seconds per iteration at 16³/32³/64³ and PSNR against time.

Scene: the procedural ground truth (soft spheres + torus, view-dependent colour), 8 training
views + 2 held-out at 128², SH degree 2 (28 values per voxel), 1 spp (one jittered ray per pixel).

Part 1 (speed): one iteration = forward + loss + path-replay backward + Adam (+ TV) over
  * "all":  all 8 training views (8 × 128² = 131 072 rays) — the issue's definition,
  * "view": one full training view (16 384 rays) — the Mitsuba tutorial's loop (one sensor per
    step), the likelier meaning of its 0.017 / 0.034 / 0.180 s figures,
  * "4096": a random batch of 4 096 rays (the default training configuration).
  The grid is taken mid-training (after a short warm-up schedule) so that empty space and early
  termination look as they do in practice; compile time is excluded (reported separately).
Part 2 (quality): a fixed schedule (16³ → 32³ → 64³), PSNR on the training views (the Mitsuba
  tutorial's published figure: 32.9 dB in 10.6 s) and on the held-out views against training time;
  the time to reach 30 / 32 / 32.9 dB. Peak RSS at the end.
Part 3 (Mitsuba 3 side by side, where it is installed): the configs/radiance_field.yaml schedule
  scaled to --sbs-iters iterations, one full view per iteration, run by tirender's Trainer and by a
  Mitsuba 3 port of the tutorial (time_to_quality.py's radiance_field task: the same data, the same
  model), one after the other in fresh processes; median s/iteration per stage and the ratio.

    python benchmarks/radiance_field.py [--quick] [--out DIR] [--arch cpu] [--sbs-iters N]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TUTORIAL_PSNR = 32.9   # the Mitsuba 3 radiance-field tutorial's reported training PSNR (a target level only)

FIELD = {"sh_degree": 2, "init_density": 0.01, "color_activation": "relu", "init_color": 0.5}
DATA = {"type": "procedural", "views": 8, "heldout": 2, "width": 128, "height": 128,
        "azimuth": 120, "elevation": [0, 45]}


def _cfg(stages, batch=4096, **train):
    t = {"stages": stages, "batch": batch, "lr_density": 0.2, "lr_color": 0.05, "tv_density": 0.002,
         "tv_color": 0.002, "checkpoint_every": 0, "save_pngs": False}
    t.update(train)
    return {"radiance_field": {"seed": 0, "dataset": DATA, "field": FIELD, "train": t}}


def speed(ds, res_list, reps, warm_iters, log):
    from tirender.radiance_field.train import Trainer, parse_config
    out = {}
    for R in res_list:
        # warm-up schedule at low resolution, then upsample to R (a realistic mid-training grid)
        stages = [{"res": 16, "iters": warm_iters}] + ([{"res": R, "iters": 1}] if R != 16 else [])
        cfg = parse_config(_cfg(stages))
        tr = Trainer(cfg, ds, log=lambda *_: None)
        tr.prepare()
        tr.enter_stage(0)
        for it in range(warm_iters):
            tr.step(it)
        if R != 16:
            tr.enter_stage(1)
        row = {}
        for batch in ("all", "view", 4096):
            tr.cfg["train"]["batch"] = batch
            t0 = time.perf_counter()
            tr.step(warm_iters)                     # compiles on first use
            first = time.perf_counter() - t0
            ts, cpu = [], []
            for k in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                tr.step(warm_iters + 1 + k)
                ts.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            row[str(batch)] = {"s_per_iter": float(np.median(ts)), "min": float(np.min(ts)),
                               "cpu_s_per_iter": float(np.median(cpu)), "first_call_s": round(first, 3)}
        out[R] = row
        log(f"{R:>3}³  all-views {row['all']['s_per_iter']:.3f} s/it   one view {row['view']['s_per_iter']:.3f} s/it"
            f"   4096 rays {row['4096']['s_per_iter']:.4f} s/it   CPU s/it (both threads):"
            f" {row['all']['cpu_s_per_iter']:.3f} / {row['view']['cpu_s_per_iter']:.3f} / "
            f"{row['4096']['cpu_s_per_iter']:.4f}")
    return out


def quality(ds, stages, batch, eval_every, log):
    """Fixed schedule; PSNR on training and held-out views at eval points (clock paused)."""
    from tirender.radiance_field.train import Trainer, parse_config, psnr
    cfg = parse_config(_cfg(stages, batch=batch))
    tr = Trainer(cfg, ds, log=lambda *_: None)
    curve, clock, git = [], 0.0, 0
    # allocate every stage's field and compile every kernel once, before the clock starts
    t0 = time.perf_counter()
    tr.prepare()
    prep = time.perf_counter() - t0
    log(f"  prepare (allocate {len(stages)} stages, compile kernels): {prep:.1f} s")
    for si, st in enumerate(stages):
        t0 = time.perf_counter()
        tr.enter_stage(si)
        clock += time.perf_counter() - t0
        for it in range(st["iters"]):
            t0 = time.perf_counter()
            tr.step(git)
            clock += time.perf_counter() - t0
            git += 1
            if git % eval_every == 0 or it == st["iters"] - 1:
                imgs = tr.render_views(np.r_[ds.train, ds.heldout])
                nt = len(ds.train)
                p_tr = float(np.mean([psnr(imgs[i], ds.images[v]) for i, v in enumerate(ds.train)]))
                p_he = float(np.mean([psnr(imgs[nt + i], ds.images[v]) for i, v in enumerate(ds.heldout)]))
                curve.append({"iter": git, "res": st["res"], "time_s": round(clock, 3), "train_psnr": round(p_tr, 3),
                              "heldout_psnr": round(p_he, 3)})
                log(f"  it {git:4d}  {st['res']:>3}³  t={clock:6.1f}s  train {p_tr:5.2f} dB  held-out {p_he:5.2f} dB")
    reach = {}
    for target in (28.0, 30.0, 32.0, TUTORIAL_PSNR):
        hit = [c for c in curve if c["train_psnr"] >= target]
        reach[f"train_{target:g}dB_s"] = hit[0]["time_s"] if hit else None
        hit = [c for c in curve if c["heldout_psnr"] >= target]
        reach[f"heldout_{target:g}dB_s"] = hit[0]["time_s"] if hit else None
    return {"stages": stages, "batch": batch, "prepare_s": round(prep, 3), "curve": curve,
            "time_to_psnr": reach, "final": curve[-1]}


def side_by_side(iters, out, log):
    """Part 3: tirender's Trainer and the Mitsuba 3 port on the same data and schedule (one full view
    per iteration), fresh processes one after the other; per stage the median s/iteration (the first
    iteration of a stage, with its compilation and upsampling, left out) and peak RSS."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sidebyside
    import time_to_quality as ttq
    ok, why = sidebyside.mitsuba_available()
    if not ok:
        log(f"Mitsuba 3 side by side: skipped ({why})")
        return None
    spec = ttq.radiance_field_spec(iters)
    ttq.run_child(spec["data_child"], spec, os.path.join(out, "data"), os.path.join(out, "data.log"))
    res = {}
    for label, child in (("tirender", "tirender_radiance_field"), ("mitsuba", "mitsuba_radiance_field")):
        res[label] = ttq.run_child(child, spec, os.path.join(out, label), os.path.join(out, f"{label}.log"))
    stats = {k: ttq.stage_stats(r["rows"], spec["stages"]) for k, r in res.items()}
    rows = []
    for (label, _, t), (_, _, m) in zip(stats["tirender"], stats["mitsuba"]):
        rows.append({"stage": label, "tirender_s_per_iter": t, "mitsuba_s_per_iter": m, "ratio": t / m})
        log(f"  {label:<28} tirender {t:.4f} s/it   Mitsuba 3 {m:.4f} s/it   ratio {t / m:.2f}x")
    peaks = {k: r["peak_rss_mb"] for k, r in res.items()}
    log(f"  peak RSS tirender {peaks['tirender']:.0f} MB, Mitsuba 3 {peaks['mitsuba']:.0f} MB; held-out PSNR "
        f"{res['tirender']['psnr_end']:.2f} vs {res['mitsuba']['psnr_end']:.2f} dB ({spec['iters']} iterations; "
        f"{res['mitsuba']['renderer']})")
    return {"iters": spec["iters"], "stages": rows, "peak_rss_mb": peaks,
            "heldout_psnr": {k: r["psnr_end"] for k, r in res.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and a shorter schedule")
    ap.add_argument("--out", default="out/bench_radiance_field")
    ap.add_argument("--arch", default="cpu")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--sbs-iters", type=int, default=None, help="part 3's iterations (default: 150, --quick 60; "
                    "0 skips it)")
    a = ap.parse_args(argv)
    import tirender.backend as backend
    backend.init(a.arch)
    from tirender.radiance_field.train import load_dataset, parse_config, peak_rss_mb
    log = print
    t0 = time.perf_counter()
    ds = load_dataset(parse_config(_cfg([{"res": 16, "iters": 1}])))
    log(f"dataset: {len(ds.train)} training + {len(ds.heldout)} held-out views at {ds.width}x{ds.height} "
        f"({time.perf_counter() - t0:.1f} s)  arch={backend.current_arch()}")
    res = {"arch": backend.current_arch()}
    if not a.skip_speed:
        log("seconds per iteration (median; SH degree 2, 1 spp):")
        res["speed"] = speed(ds, (16, 32, 64), 2 if a.quick else 5, 40, log)
    if not a.skip_quality:
        stages = ([{"res": 16, "iters": 100}, {"res": 32, "iters": 100}] if a.quick else
                  [{"res": 16, "iters": 200}, {"res": 32, "iters": 200},
                   {"res": 64, "iters": 200, "lr_scale": 0.5}])   # the default config's schedule
        log(f"fixed schedule {[(s['res'], s['iters']) for s in stages]}, batch 4096 rays:")
        res["quality"] = quality(ds, stages, 4096, 50, log)
        log(f"time to PSNR: {res['quality']['time_to_psnr']}")
    res["peak_rss_mb"] = round(peak_rss_mb(), 1)
    sbs = a.sbs_iters if a.sbs_iters is not None else (60 if a.quick else 150)
    if sbs:
        log(f"Mitsuba 3 side by side ({sbs} iterations of the config's schedule, one view per iteration):")
        res["mitsuba3_side_by_side"] = side_by_side(sbs, os.path.join(os.path.abspath(a.out), "side_by_side"), log)
    res["load_avg_at_end"] = os.getloadavg()
    log(f"peak RSS {res['peak_rss_mb']} MB")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "radiance_field.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    log(f"wrote {os.path.join(a.out, 'radiance_field.json')}")
    return res


if __name__ == "__main__":
    main()
