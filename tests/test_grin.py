"""GRIN optics (tirender/grin): adjoints against float64 central differences, closed-form lenses,
whole-pipeline gradients against finite differences with correlated random numbers, memory flat
in the number of ODE steps, and the ``tirender optimize`` driver.

The float64 checks run in a child process (a process holds one ti.init):
``python tests/test_grin.py --f64 adjoints`` / ``--f64 pipeline`` run them by hand and print JSON.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from child_util import start_f64_script
from gradcheck_util import central_differences, max_rel_err

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(ROOT, "configs", "grin.yaml")
H = 1e-6


def _fd(f, x, h=H):
    return central_differences(f, x, h)


_rel = max_rel_err


def _smooth_field(res, rng, amp=1.0):
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, r) for r in res), indexing="ij")
    return 1.3 + amp * (0.08 * np.sin(2.1 * x + 0.3) * np.cos(1.7 * y) + 0.06 * np.sin(2.5 * z + 1.1 * x)
                        + 0.02 * rng.normal(size=res))


# ----------------------------------------------------------------------------- float64 child checks
def adjoint_checks():
    """name -> {max_rel_err, cases}: the trilinear n/∇n adjoints, one march step (regular, ending on a
    cell plane, ending on the box face) and whole replayed traces, against central differences."""
    from tirender.grin import trace as T
    from tirender.grin.field import IndexGrid
    rng = np.random.default_rng(0)
    out = {}
    data = 1.2 + 0.3 * rng.random((5, 6, 7))               # (D, H, W), rough on purpose
    bmin, bmax = np.array([-0.5, -0.6, -0.4]), np.array([0.6, 0.5, 0.7])
    g = IndexGrid(data, bmin, bmax)

    # trilinear lookup: n and ∇n w.r.t. every grid value, and w.r.t. the position (∇n, Hessian)
    xs = bmin + (bmax - bmin) * rng.uniform(-0.1, 1.1, (60, 3))   # includes the clamped border
    nb, gb = rng.normal(size=60), rng.normal(size=(60, 3))

    def lookup(dat):
        g.set(dat)
        n, grad = g.eval(xs)
        return float((nb * n).sum() + (gb * grad).sum())
    g.set(data)
    xbar = g.eval_adjoint(xs, nb, gb)
    ga = g.grad_numpy()
    out["field: n, grad n w.r.t. grid values"] = {"max_rel_err": _rel(ga, _fd(lookup, data)), "cases": data.size}
    g.set(data)
    xfd = np.zeros_like(xs)
    for k in range(3):
        e = np.zeros(3)
        e[k] = H
        n1, g1 = g.eval(xs + e)
        n2, g2 = g.eval(xs - e)
        xfd[:, k] = (nb * (n1 - n2) + (gb * (g1 - g2)).sum(1)) / (2 * H)
    out["field: n, grad n w.r.t. position"] = {"max_rel_err": _rel(xbar, xfd), "cases": len(xs)}

    # one march step (RK4 + its step length) w.r.t. (x, v) and the grid: regular steps (h below the
    # distance to any plane), and steps that end on a cell plane or the box face (h large)
    N = 40
    x0 = bmin + (bmax - bmin) * rng.uniform(0.1, 0.9, (N, 3))
    dd = rng.normal(size=(N, 3))
    dd /= np.linalg.norm(dd, axis=1, keepdims=True)
    n0, _ = g.eval(x0)
    s = np.concatenate([x0, dd * (n0 * rng.uniform(0.9, 1.1, N))[:, None]], 1)
    for name, h in (("regular", 0.01), ("ending on a plane", 5.0)):
        adj = rng.normal(size=(N, 6))
        sb = T.step_states_adjoint(g, s, h, adj)
        ga = g.grad_numpy()
        sfd = np.zeros_like(s)
        for i in range(N):
            sfd[i] = _fd(lambda y: float((T.step_states(g, y[None], h)[0] * adj[i]).sum()), s[i])
        gfd = _fd(lambda dat: (g.set(dat), float((T.step_states(g, s, h) * adj).sum()))[1], data)
        g.set(data)
        out[f"RK4 step ({name}) w.r.t. x, v"] = {"max_rel_err": _rel(sb, sfd), "cases": N}
        out[f"RK4 step ({name}) w.r.t. grid values"] = {"max_rel_err": _rel(ga, gfd), "cases": data.size}

    # whole traces (entry refraction, march, exit refraction) by replay, w.r.t. the grid: every grid
    # value at h = 0.05; along random directions at h = 0.0002, where rays take > C_CKPT·B_SUB = 4096
    # steps, so sub-segments of K2 > 1 steps are replayed inside each segment
    N = 30
    o = np.zeros((N, 3))
    o[:, 0] = rng.uniform(-0.3, 0.4, N)
    o[:, 1] = rng.uniform(-0.4, 0.3, N)
    o[:, 2] = -2.0
    d = np.tile([0, 0, 1.0], (N, 1)) + 0.15 * rng.normal(size=(N, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    xb, db = rng.normal(size=(N, 3)), rng.normal(size=(N, 3))
    for h in (0.05, 0.0002):
        r = T.trace(g, o, d, h)
        ok = r["status"] == T.OK

        def loss(dat):
            g.set(dat)
            rr = T.trace(g, o, d, h)
            assert np.array_equal(rr["status"], r["status"])
            return float((rr["x"][ok] * xb[ok]).sum() + (rr["d"][ok] * db[ok]).sum())
        g.set(data)
        T.trace_adjoint(g, o, d, xb, db, h)
        ga = g.grad_numpy()
        if h > 0.01:
            err = _rel(ga, _fd(loss, data))
        else:
            us = rng.normal(size=(3,) + data.shape)
            err = _rel(np.array([(ga * u).sum() for u in us]),
                       np.array([_fd(lambda t: loss(data + t[0] * u), np.zeros(1))[0] for u in us]))
        n = int(r["steps"].max())
        K = 1
        while n > T.C_CKPT * K:
            K *= 2
        out[f"trace h={h} w.r.t. grid values"] = {"max_rel_err": err, "cases": int(ok.sum()), "steps": n,
                                                  "K2": int(-(-K // T.B_SUB))}
        g.set(data)
    return out


def pipeline_check(seeds=8, eps=(1e-7, 1e-4)):
    """Whole-pipeline gradient of the GRIN scene (configs/grin.yaml: both views, their targets and
    loss, 32² rays per view) on a perturbed 8³ grid, along a random direction of the grid: the
    replayed adjoint for each seed vs central differences of the loss with the same seed
    (correlated random numbers), for each ε."""
    from tirender.config import load_config
    from tirender.grin.train import Trainer, parse_config
    cfg = parse_config(load_config(CONFIG))
    for v in cfg["views"]:
        v["rays_per_side"] = 32
    tr = Trainer(cfg, log=lambda *a: None)
    tr.prepare()
    rng = np.random.default_rng(3)
    data = _smooth_field((8, 8, 8), rng)
    u = rng.normal(size=data.shape)
    g = tr.grid

    def loss(dat, s):
        g.set(dat)
        return tr.loss(tr.proj.render(g, s))

    ad, fd = [], {e: [] for e in eps}
    for s in range(seeds):
        _, _, adj = loss(data, s)
        tr.proj.backward(g, adj, s)
        ad.append(float((g.grad_numpy() * u).sum()))
        for e in eps:
            fd[e].append((loss(data + e * u, s)[0] - loss(data - e * u, s)[0]) / (2 * e))
    ad = np.array(ad)
    out = {"adjoint": ad.tolist(), "adjoint_mean": float(ad.mean()),
           "adjoint_se": float(ad.std(ddof=1) / np.sqrt(seeds)), "seeds": seeds, "stats": tr.proj.last_stats}
    for e in eps:
        f = np.array(fd[e])
        se = float(np.sqrt(ad.var(ddof=1) / seeds + f.var(ddof=1) / seeds))
        rel = np.abs(ad - f) / np.abs(ad).max()
        out[f"eps={e:g}"] = {"fd": f.tolist(), "fd_mean": float(f.mean()),
                             "fd_se": float(f.std(ddof=1) / np.sqrt(seeds)), "se": se,
                             "z": float((ad.mean() - f.mean()) / se),
                             "paired_rel_diff_median": float(np.median(rel)), "paired_rel_diff_max": float(rel.max())}
    return out


def _child(which):
    proc = start_f64_script(__file__, ["--f64", which])
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_adjoints_vs_central_differences_f64():
    """Every new adjoint (trilinear n and ∇n, one RK4 step with its step length, the replayed trace)
    against float64 central differences of its primal."""
    report = _child("adjoints")
    print(json.dumps(report, indent=1))
    assert len(report) == 8
    for name, r in report.items():
        assert r["cases"] >= 10, (name, r)
        # whole traces: ~1e-12 absolute noise in the loss (rounding over up to ~1500 steps, and the
        # eps = 1e-10 thresholds where a ray changes cell) divided by the step 2·1e-6
        assert r["max_rel_err"] <= (1e-5 if name.startswith("trace") else 1e-6), (name, r)
    assert report["trace h=0.0002 w.r.t. grid values"]["K2"] > 1       # the inner replay level ran


@pytest.mark.slow
def test_pipeline_gradient_vs_finite_differences():
    """The GRIN scene's projection-loss gradient (adjoint) vs central differences with the same seeds:
    the means over 8 seeds within 3 standard errors, and seed by seed the adjoint is the derivative
    of that seed's loss (ε = 1e-7 in float64; a seed may straddle one of the rare O(h⁵) jumps where a
    path starts touching a cell plane, hence the median). At ε = 1e-4 the loss is strongly nonlinear
    (grazing rays): reported, and still within 3 SE."""
    r = _child("pipeline")
    print(json.dumps(r, indent=1))
    tiny, big = r["eps=1e-07"], r["eps=0.0001"]
    assert abs(tiny["z"]) <= 3.0 and abs(big["z"]) <= 3.0, r
    assert abs(r["adjoint_mean"]) > 3 * r["adjoint_se"], r      # a clearly non-zero gradient
    assert tiny["paired_rel_diff_median"] < 1e-4, r


# ----------------------------------------------------------------------------- closed forms (float32)
def test_homogeneous_grid_gives_straight_rays():
    from tirender.grin import trace as T
    from tirender.grin.field import IndexGrid
    rng = np.random.default_rng(1)
    N = 200
    o = np.zeros((N, 3))
    o[:, :2] = rng.uniform(-0.2, 0.2, (N, 2))
    o[:, 2] = -0.7
    d = np.tile([0, 0, 1.0], (N, 1)) + np.clip(0.1 * rng.normal(size=(N, 3)), -0.2, 0.2) * [1, 1, 0]
    d /= np.linalg.norm(d, axis=1, keepdims=True)       # every ray enters at z = −½ and leaves at z = ½
    g = IndexGrid(np.ones((6, 6, 6)), [-0.5] * 3, [0.5] * 3)
    r = T.trace(g, o, d, 0.05)
    assert np.all(r["status"] == T.OK)
    t = (0.5 - o[:, 2]) / d[:, 2]
    np.testing.assert_allclose(r["x"], o + t[:, None] * d, atol=1e-5)     # n = n_out: no bending at all
    np.testing.assert_allclose(r["d"], d, atol=1e-5)
    # n = 1.5 inside: straight inside along the refracted direction, leaving parallel to the beam
    g.set(np.full((6, 6, 6), 1.5))
    r = T.trace(g, o, d, 0.05)
    t0 = (-0.5 - o[:, 2]) / d[:, 2]
    x0 = o + t0[:, None] * d
    vt = d[:, :2]
    vin = np.concatenate([vt, np.sqrt(1.5 ** 2 - (vt ** 2).sum(1, keepdims=True))], 1)
    x1 = x0 + (1.0 / vin[:, 2:]) * vin
    np.testing.assert_allclose(r["x"], x1, atol=1e-5)
    np.testing.assert_allclose(r["d"], d, atol=1e-5)


def test_luneburg_lens_focuses_on_the_far_surface():
    """n = √(2 − r²) in the unit sphere (1 outside): a collimated beam along +z focuses at (0, 0, 1),
    where the sphere touches the box's far face."""
    from tirender.grin import trace as T
    from tirender.grin.field import IndexGrid, luneburg, radial_grid
    g = IndexGrid(radial_grid(luneburg, 48, [-1] * 3, [1] * 3), [-1] * 3, [1] * 3)
    rng = np.random.default_rng(2)
    N = 1000
    rad, ph = 0.7 * np.sqrt(rng.random(N)), 2 * np.pi * rng.random(N)
    o = np.stack([rad * np.cos(ph), rad * np.sin(ph), np.full(N, -3.0)], 1)
    r = T.trace(g, o, [0, 0, 1.0], 0.05)
    assert np.all(r["status"] == T.OK)
    err = np.linalg.norm(r["x"] - [0, 0, 1], axis=1)
    spread = float(np.sqrt((err ** 2).mean()))
    print(f"Luneburg 48^3: beam width 1.4, exit points rms {spread:.4f} max {err.max():.4f} from (0, 0, 1)")
    assert spread < 0.01 and err.max() < 0.04          # ≪ the beam width 1.4
    assert np.linalg.norm(r["x"].mean(0) - [0, 0, 1]) < 2e-3


def test_maxwell_fisheye_images_a_point_to_its_conjugate():
    """n = 2/(1 + r²): rays from P on the unit sphere meet at −P; from P inside, at −P/|P|²."""
    from tirender.grin import trace as T
    from tirender.grin.field import IndexGrid, fisheye, radial_grid
    rng = np.random.default_rng(3)
    N = 1000
    res = []
    for P, cone, box, n in (((-1.0, 0, 0), 60, ([-1] * 3, [1] * 3), 48),
                            ((-0.5, 0, 0), 45, ([-2.5, -2.25, -2.25], [2.0, 2.25, 2.25]), 72)):
        P = np.array(P)
        Q = -P / (P @ P)
        radius = 1.0 if np.isclose(P @ P, 1) else np.inf    # on the sphere: n = 1 outside it (continuous)
        g = IndexGrid(radial_grid(lambda r: fisheye(r, radius), n, *box, centre=(0, 0, 0)), *box)
        th, ph = np.radians(cone) * np.sqrt(rng.random(N)), 2 * np.pi * rng.random(N)
        d = np.stack([np.cos(th), np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph)], 1)
        r = T.trace(g, np.tile(P, (N, 1)), d, 0.05)
        assert np.all(r["status"] == T.OK)
        err = np.linalg.norm(r["x"] - Q, axis=1)
        res.append((P, Q, float(np.sqrt((err ** 2).mean())), float(err.max())))
        print(f"fish-eye {n}^3: P {P} -> {Q}: rms {res[-1][2]:.4f} max {res[-1][3]:.4f}")
    assert res[0][2] < 0.015 and res[0][3] < 0.05      # rays leave P over a 60° cone
    assert res[1][2] < 0.05 and res[1][3] < 0.12       # 45° cone: straight rays would spread ±2.5


# ----------------------------------------------------------------------------- memory and allocation
def _vm_hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1])
    return None


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.extended   # a memory property (27 s of compilation cold), not a correctness check
def test_memory_flat_in_ode_steps():
    """The replayed adjoint's peak memory does not grow with the number of RK4 steps: 1024 rays with
    ~64 and ~1024 steps each (a fixed (C_CKPT + B_SUB)-row local array per ray; nothing per step)."""
    from tirender.grin import trace as T
    from tirender.grin.field import IndexGrid
    rng = np.random.default_rng(4)
    g = IndexGrid(_smooth_field((4, 4, 4), rng), [-0.5] * 3, [0.5] * 3)
    N = 1024
    o = np.zeros((N, 3))
    o[:, :2] = rng.uniform(-0.3, 0.3, (N, 2))
    o[:, 2] = -1.0
    d, xb, db = [0, 0, 1.0], np.ones((N, 3)), np.ones((N, 3))
    T.trace_adjoint(g, o, d, xb, db, 1 / 64)          # compiled and warm
    growth, steps = {}, {}
    for h in (1 / 64, 1 / 1024, 1 / 64):
        r = T.trace(g, o, d, h)
        have = _reset_hwm()
        before = _vm_hwm_kb()
        T.trace_adjoint(g, o, d, xb, db, h)
        growth[h] = (_vm_hwm_kb() - before) if have else 0
        steps[h] = float(r["steps"].mean())
    print(f"mean steps {steps}; peak RSS growth (kB) during the adjoint launch {growth}")
    assert steps[1 / 1024] > 10 * steps[1 / 64]
    if not _reset_hwm():
        pytest.skip("/proc/self/clear_refs is not writable: peak RSS cannot be reset")
    assert abs(growth[1 / 1024] - growth[1 / 64]) < 2048, growth


def test_no_fields_or_kernels_created_in_the_loop(monkeypatch):
    import taichi as ti

    from tirender.grin.train import Trainer, parse_config
    cfg = parse_config({"grin": _small_grin()}, CONFIG)
    tr = Trainer(cfg, log=lambda *a: None)
    tr.prepare()
    tr.data = tr.initial_grid(4)
    tr.adam.reset(tr.data.shape)

    def refuse(*a, **k):
        raise AssertionError("a field or ndarray was created inside the loop")
    monkeypatch.setattr(ti, "field", refuse)
    monkeypatch.setattr(ti, "ndarray", refuse)
    losses = [tr.step(it, 0)[0] for it in range(4)]
    assert np.all(np.isfinite(losses))


# ----------------------------------------------------------------------------- the optimisation driver
def _small_grin(**train):
    """A fast variant of configs/grin.yaml: 16x16 screens, 24² rays, 4³ → 8³."""
    t = {"stages": [{"res": 4, "iters": 4}, {"res": 8, "iters": 6}], "lr": 0.01, "save_every": 5,
         "checkpoint_every": 3}
    t.update(train)
    views = [{"name": "z", "direction": [0, 0, 1], "target": "grin/target_ring.png", "rays_per_side": 24},
             {"name": "x", "direction": [1, 0, 0], "target": "grin/target_arcs.png", "rays_per_side": 24}]
    return {"seed": 1, "views": views, "train": t}


def _write(tmp_path, grin, name="g.yaml"):
    import yaml
    grin = json.loads(json.dumps(grin))
    for v in grin.get("views") or []:
        if isinstance(v, dict) and isinstance(v.get("target"), str) and not os.path.isabs(v["target"]):
            v["target"] = os.path.join(ROOT, "configs", v["target"])
    p = tmp_path / name
    p.write_text(yaml.safe_dump({"scene": {}, "grin": grin}))
    return str(p)


def test_optimize_cli_writes_outputs_and_the_error_falls(tmp_path, capsys):
    from tirender.cli import main
    out = tmp_path / "out"
    assert main(["optimize", CONFIG, "--iters", "12", "--out", str(out), "--arch", "cpu"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("optimized GRIN cube") and "x:" in line and "z:" in line
    for f in ("grid.npy", "metrics.json", "loss.png", "loss.csv", "checkpoint.npz", "final_z.png", "final_x.png",
              "target_z.png", "target_x.png", "iter_0000_z.png", "iter_0000_x.png"):
        assert (out / f).is_file(), f
    m = json.loads((out / "metrics.json").read_text())
    assert m["iterations"] == 12 and np.load(out / "grid.npy").shape == (16, 16, 16)
    for name, v in m["views"].items():
        assert v["mse_final"] < 0.7 * v["mse_start"], (name, v)
    # the keys every optimisation task writes first (tirender/optim/metrics.py): the views' mean MSE here
    assert list(m)[:4] == ["initial_loss", "final_loss", "iterations", "seconds"]
    assert m["initial_loss"] == pytest.approx(np.mean([v["mse_start"] for v in m["views"].values()]))
    assert m["final_loss"] == pytest.approx(np.mean([v["mse_final"] for v in m["views"].values()]))


def test_resume_matches_an_uninterrupted_run(tmp_path):
    from tirender.grin.train import Trainer, parse_config
    cfg = lambda: parse_config({"grin": _small_grin()}, CONFIG)   # noqa: E731
    a = Trainer(cfg(), out_dir=str(tmp_path / "a"), log=lambda *x: None)
    os.makedirs(tmp_path / "a")
    ma = a.run()
    os.makedirs(tmp_path / "b")
    b = Trainer(cfg(), out_dir=str(tmp_path / "b"), log=lambda *x: None)
    assert b.run(stop_after=7) is None                       # stops inside the second stage
    c = Trainer(cfg(), out_dir=str(tmp_path / "b"), log=lambda *x: None)
    mc = c.run(resume=True)
    assert np.array_equal(a.data, c.data)                    # bit for bit (fixed-point gradients)
    assert ma["views"]["z"]["mse_final"] == mc["views"]["z"]["mse_final"]


@pytest.mark.parametrize("grin, key, needle", [
    ({"views": [{"direction": [0, 0, 1], "target": "grin/nope.png"}]}, "grin.views[0].target", "not found"),
    ({"views": [{"direction": [0, 0, 1], "target": "grin/target_ring.png", "colour": 1}]}, "grin.views[0].colour",
     "unknown key"),
    ({"views": [{"direction": [0, 0, 1], "target": "grin/target_ring.png", "rays_per_side": "many"}]},
     "grin.views[0].rays_per_side", "expected a number"),
    ({"views": [{"target": "grin/target_ring.png"}]}, "grin.views[0].direction", "missing"),
    ({"cube": {"n_min": 1.5, "n_max": 1.2, "n_init": 1.3}, "views": []}, "grin.cube.n_max", "below"),
    ({"views": "ring"}, "grin.views", "list"),
    ({"views": [{"direction": [0, 0, 1], "target": "grin/target_ring.png"}], "train": {"stages": [{"res": 8}]}},
     "grin.train.stages[0].iters", "missing"),
    ({"speed": 3, "views": []}, "grin.speed", "unknown key"),
])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, grin, key, needle):
    from tirender.cli import main
    p = _write(tmp_path, grin)
    assert main(["optimize", p, "--out", str(tmp_path / "o"), "--arch", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {p}: {key}: ") and needle in err, err


def test_bad_config_through_python_m_tirender(tmp_path):
    """End to end through ``python -m tirender``: a missing target is one line, exit 2, before any work."""
    p = _write(tmp_path, {"views": [{"direction": [1, 0, 0], "target": "grin/missing.png"}]})
    r = subprocess.run([sys.executable, "-m", "tirender", "optimize", p, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.strip() == f"error: {p}: grin.views[0].target: image file not found", r.stderr


if __name__ == "__main__" and "--f64" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu", fp="f64")
    which = sys.argv[sys.argv.index("--f64") + 1] if len(sys.argv) > sys.argv.index("--f64") + 1 else "adjoints"
    print(json.dumps(adjoint_checks() if which == "adjoints" else pipeline_check()))
