"""Defaults that hold beyond our own configs (issue 47): the radiance field's stage change cannot blow
up (a cheap slice of benchmarks/defaults_sweep.py), Adam's default ε, and the loss watch that says
when an optimisation goes wrong (tirender/optim/watch.py, in `tirender optimize` and the trainer)."""
import json

import numpy as np
import pytest
import yaml

from tirender.optim.watch import LossWatch, parse_loss_watch
from tirender.errors import ConfigError


def _watch(**kw):
    lines = []
    w = LossWatch(log=lines.append, settings={"stage_change": "S", "window": "W"}, **kw)
    return w, lines


def test_loss_watch_stage_change_rise_warns_once():
    """The mean of `window` losses after a stage change against the `window` before it: a 3× rise warns
    once, at the iteration that completes the evidence, naming the change and the setting."""
    w, lines = _watch(factor=2.0, window=4)
    rng = np.random.default_rng(0)
    it = 0
    for _ in range(12):                      # falling, noisy (±20 %)
        w.update(it, 1.0 / (1 + 0.1 * it) * (1 + 0.2 * rng.uniform(-1, 1)))
        it += 1
    assert not w.events
    w.end_stage()
    w.stage_change("16³ → 32³")
    for _ in range(6):
        w.update(it, 3.0 * 1.0 / (1 + 0.1 * 11))
        it += 1
    assert len(w.events) == 1 and len(lines) == 1, lines
    e = w.events[0]
    assert e["kind"] == "stage_change" and e["iteration"] == 15 and 2.5 < e["ratio"] < 3.5
    assert "16³ → 32³ at iteration 12" in e["message"] and e["message"].endswith("look at S")


def test_loss_watch_quiet_on_noise_and_small_rises():
    """Noise of ±40 % around a falling loss, and a stage change that raises the loss 1.5×, stay quiet."""
    w, lines = _watch(factor=2.0, window=8)
    rng = np.random.default_rng(1)
    for it in range(200):
        base = 1.0 / (1 + 0.05 * it) * (1.5 if 100 <= it < 110 else 1.0)
        if it == 100:
            w.stage_change("a → b")
        w.update(it, base * (1 + 0.4 * rng.uniform(-1, 1)))
    w.end_stage()
    assert not w.events and not lines


def test_loss_watch_window_rise_rearms_and_not_finite():
    """A sustained rise over a window warns once; after the loss falls back, a second rise warns
    again; a non-finite loss warns at once (once)."""
    w, lines = _watch(factor=2.0, window=3)
    seq = [1.0] * 6 + [3.0] * 6 + [1.0] * 6 + [4.0] * 6
    for it, x in enumerate(seq):
        w.update(it, x)
    kinds = [(e["kind"], e["iteration"]) for e in w.events]
    assert kinds == [("window", 7), ("window", 19)], kinds
    assert "over iterations 5-7" in w.events[0]["message"] and w.events[0]["message"].endswith("look at W")
    w.update(len(seq), float("nan"))
    w.update(len(seq) + 1, float("inf"))
    assert [e["kind"] for e in w.events][-1] == "not_finite" and len(w.events) == 3 and len(lines) == 3


def test_loss_watch_config():
    assert parse_loss_watch(False, "f.yaml", "k") is None and parse_loss_watch(None, "f.yaml", "k") is None
    assert parse_loss_watch({"window": 5}, "f.yaml", "k") == {"factor": 2.0, "window": 5}
    for bad, key in (({"factor": 1.0}, "k.factor"), ({"window": 0}, "k.window"), ({"windw": 3}, "k"),
                     ({"factor": "x"}, "k.factor"), (3, "k")):
        with pytest.raises(ConfigError) as e:
            parse_loss_watch(bad, "f.yaml", "k")
        assert f"f.yaml: {key}:" in str(e.value), (bad, str(e.value))


def test_optimize_prints_and_records_a_loss_rise(tmp_path, capsys):
    """`tirender optimize` starting at the truth with a far too large learning rate: the loss rises
    (Adam's first step is ±lr); one warning line naming the learning-rate setting, and metrics.json
    records it. With loss_watch: false nothing is said."""
    from scenes import cornell_like
    from tirender.cli import main
    out = {}
    for name, watch in (("on", {"factor": 2.0, "window": 1}), ("off", False)):
        d = {"scene": cornell_like(w=16, max_depth=3),
             "optimize": {"params": {"red.reflectance": {"init": [0.6, 0.1, 0.1], "lr": 0.5}}, "iters": 4,
                          "spp": 4, "save_every": 4, "target": {"type": "render", "spp": 32},
                          "loss_watch": watch}}
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump(d))
        assert main(["optimize", str(p), "--out", str(tmp_path / name)]) == 0
        lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning:")]
        out[name] = (lines, json.load(open(tmp_path / name / "metrics.json"))["warnings"])
    lines, events = out["on"]
    assert len(lines) >= 1 and lines == [e["message"] for e in events], (lines, events)
    assert events[0]["kind"] == "window" and 1 <= events[0]["iteration"] <= 3
    assert "optimize.params.red.reflectance.lr" in lines[0]
    assert out["off"] == ([], [])


def _rf_slice_cfg(**train):
    """The issue's radiance-field schedule, cut to 16³ → 32³ and 64² views (defaults_sweep.ISSUE_RF)."""
    t = {"stages": [{"res": 16, "iters": 16}, {"res": 32, "iters": 10}], "lr_density": 0.1, "lr_color": 0.1,
         "loss": "l1", "batch": "view", "view_order": "sequential", "checkpoint_every": 0, "save_pngs": False}
    t.update(train)
    return {"radiance_field": {"seed": 0,
                               "dataset": {"type": "procedural", "views": 8, "heldout": 0, "width": 64, "height": 64},
                               "field": {"init_density": 0.01, "init_color": 0.1},
                               "train": t}}


def test_radiance_field_stage_change_cannot_blow_up():
    """The issue's schedule at 16³ → 32³ with tirender's defaults (upsample, adam_state, ε): in the 10
    iterations after the upsampling the training PSNR never falls more than 2 dB below the end of 16³,
    no step moves a value by more than 2 lr, and the loss watch stays quiet. The step bound is the
    collapse's mechanism: the carry before issue 47 resampled Adam's moments by Catmull-Rom, whose lobes
    leave v̂ = 0 beside m̂ ≠ 0, and its first step here was 236 lr (docs/radiance_field.md)."""
    from tirender.radiance_field.train import Trainer, load_dataset, parse_config, psnr
    cfg = parse_config(_rf_slice_cfg())
    ds = load_dataset(cfg)
    lines = []
    tr = Trainer(cfg, ds, log=lines.append)
    tr.prepare()

    def train_psnr():
        return float(np.mean([psnr(im, ds.images[v]) for im, v in zip(tr.render_views(ds.train), ds.train)]))
    g = 0
    tr.enter_stage(0)
    for _ in range(tr.stages[0]["iters"]):
        tr.watch.update(g, tr.step(g))
        g += 1
    before = train_psnr()
    tr.watch.end_stage()
    tr.enter_stage(1)
    tr.watch.stage_change("16³ → 32³")
    after, steps = [train_psnr()], []
    for _ in range(tr.stages[1]["iters"]):
        x0 = tr.field.to_numpy()
        tr.watch.update(g, tr.step(g))
        g += 1
        steps.append(np.abs(tr.field.to_numpy() - x0).max() / 0.1)
        after.append(train_psnr())
    tr.watch.end_stage()
    assert before > 15.0, before
    assert before - min(after) <= 2.0, (before, after)
    assert max(steps) <= 2.0, steps
    assert not tr.watch.events and not lines, lines
