"""Scale-out (tirender/distributed.py): the views of `tirender optimize` sharded over Ray workers give
bit-identical results to one process — with 1 or 2 workers, after a worker is killed mid-iteration,
and after the driver is killed and resumed; bad flags are one line, exit 2."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

from tirender.cli import main
from tirender.config import load_config
from tirender.optim.driver import OptimizationRun

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(ROOT, "configs", "volume_recovery.yaml")
# configs/volume_recovery.yaml shortened: 16x16 images, 3 of its views, 8^3 -> 16^3 at iteration 3
# (a stage change the workers must follow), 6 iterations at 4 spp
SHORT = ["optimize.iters=6", "optimize.target.spp=16", "optimize.spp=4", "optimize.spp_grad=4",
         "optimize.multires={smoke.density: [[0, 8], [3, 16]]}", "optimize.save_every=2",
         "optimize.views=[0, 2, 4]"]


def _short_config():
    cfg = load_config(CONFIG, SHORT)
    for s in cfg["scene"]["sensors"]:
        s["film"]["width"] = s["film"]["height"] = 16
    return cfg


def _result(out, param="smoke.density"):
    """(final value of `param`, loss history) of a finished run in `out`."""
    hist = np.loadtxt(os.path.join(out, "loss.csv"), delimiter=",", skiprows=1)
    return np.load(os.path.join(out, "params", param + ".npy")), hist[:, [0, 1, 4]]


def _one_process_child(code, out):
    """Run `code` (after the worker's backend set-up: one CPU thread) in a child process, so that the kernels it
    compiles reach Taichi's offline cache when it exits and the Ray workers load them instead of compiling them
    again. It uses the workers' one thread: Taichi's cache key includes cpu_max_num_threads (with the default
    thread count every worker compiled everything again: the volume kill test took 233 s instead of ~70 s
    cold). The results do not depend on it."""
    code = ("import sys; sys.path.insert(0, %r); sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', cpu_max_num_threads=1)\n" % (ROOT, os.path.dirname(os.path.abspath(__file__))) + code)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


# --------------------------------------------------------------- the default lane: two workers on a small box
def _box_config(tmp_path):
    """A config file: the closed box of tests/test_prb_gradients.py (whose kernels this process shares) seen by
    two 8x8 sensors, its red wall's reflectance recovered in 3 iterations."""
    from scenes import camera
    from test_prb_gradients import _box_scene
    scene = _box_scene()
    scene["sensors"] = [camera([x, 0, 0.9], [0, 0, -1], fov=70, w=8, h=8) for x in (0.0, 0.3)]
    cfg = {"scene": scene, "optimize": {"params": {"red.reflectance": {"init": 0.3, "lr": 0.05}},
                                        "target": {"type": "render", "spp": 8, "seed": 3}, "iters": 3, "spp": 2,
                                        "spp_grad": 2, "save_every": 100, "views": [0, 1]}}
    path = str(tmp_path / "box.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    return path


@pytest.mark.slow
@pytest.mark.extended   # ~300 s cold: three processes (one reference, two Ray workers) compile the box's kernels
def test_two_workers_bit_identical_to_one_process(tmp_path):
    """The views of a small run sharded over two Ray workers: the same parameter values and loss history, bit for
    bit, as one process (the extended lane: 1 and 2 workers on configs/volume_recovery.yaml, killed workers, a
    killed driver)."""
    pytest.importorskip("ray")
    path = _box_config(tmp_path)
    one = _result(_one_process_child(
        "from tirender.config import load_config; from tirender.optim.driver import OptimizationRun; "
        "OptimizationRun(load_config(%r), out=%r).run()" % (path, str(tmp_path / "one")), str(tmp_path / "one")),
        "red.reflectance")
    from tirender.config import load_config
    m = OptimizationRun(load_config(path), out=str(tmp_path / "two"), workers=2, worker_threads=1).run()
    assert m["workers"] == {"count": 2, "lost": 0}
    two = _result(str(tmp_path / "two"), "red.reflectance")
    assert np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1]), (one, two)
    assert np.abs(one[0] - 0.3).max() > 1e-3   # the run moved the parameter


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    """The reference: the shortened task in one process without workers (a child process: _one_process_child)."""
    out = str(tmp_path_factory.mktemp("single"))
    return _result(_one_process_child("from test_distributed import _short_config; "
                                      "from tirender.optim.driver import OptimizationRun; "
                                      "OptimizationRun(_short_config(), out=%r).run()" % out, out))


def _assert_identical(a, b):
    assert a[0].shape == b[0].shape == (16, 16, 16, 1)
    assert np.array_equal(a[0], b[0]), f"densities differ by up to {np.abs(a[0] - b[0]).max():g}"
    assert np.array_equal(a[1], b[1]), "loss histories differ"


@pytest.mark.slow
@pytest.mark.extended     # the Ray runs (this one, the kill tests) are the extended lane: ~150 s or more each, cold
@pytest.mark.parametrize("workers", [1, 2])
def test_workers_bit_identical_to_one_process(single_process, tmp_path, workers):
    pytest.importorskip("ray")
    out = str(tmp_path / "run")
    m = OptimizationRun(_short_config(), out=out, workers=workers, worker_threads=1).run()
    assert m["workers"] == {"count": workers, "lost": 0}
    _assert_identical(_result(out), single_process)
    assert np.abs(single_process[0] - 0.02).max() > 1e-3   # the run moved the parameters


@pytest.mark.slow
@pytest.mark.extended   # Ray start-up, four worker processes and the reference's compilation: 150 s cold
def test_killed_workers_change_nothing(single_process, tmp_path, monkeypatch):
    """Worker 0 exits at iteration 1 in the middle of its views; its replacement (worker 2) exits at
    iteration 4 holding its views' gradients before the reduction: each time the views are
    reassigned and recomputed, and a replacement takes them on for the following iterations."""
    pytest.importorskip("ray")
    monkeypatch.setenv("TIRENDER_TEST_KILL_WORKER", "0:1:evaluate,2:4:reduce")   # passed on to the workers
    out = str(tmp_path / "run")
    m = OptimizationRun(_short_config(), out=out, workers=2, worker_threads=1).run()
    assert m["workers"] == {"count": 2, "lost": 2}
    _assert_identical(_result(out), single_process)


def _cli(args, env=None):
    """Run `tirender ...` in a child of its own session; afterwards kill what it left behind (a
    driver killed hard leaves its local Ray instance's agents running)."""
    e = dict(os.environ, **(env or {}))
    p = subprocess.Popen([sys.executable, "-m", "tirender"] + args, cwd=ROOT, env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=600)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return p.returncode, out, err


@pytest.mark.slow
@pytest.mark.extended     # resume itself: tests/test_optimize.py (one process)
def test_killed_driver_resumes_identically(single_process, tmp_path):
    pytest.importorskip("ray")
    cfg = yaml.safe_load(open(CONFIG))
    for s in cfg["scene"]["sensors"]:
        s["film"]["width"] = s["film"]["height"] = 16
    cfg["scene"]["media"]["smoke"]["density"]["filename"] = os.path.join(ROOT, "configs", "volumes", "smoke64.vol")
    cfg["scene"]["emitters"][0]["data"] = os.path.join(ROOT, "configs", "textures", "sky.npy")
    path = str(tmp_path / "short.yaml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    out = str(tmp_path / "run")
    flags = [path, "--out", out, "--workers", "2", "--worker-threads", "1", "--arch", "cpu"]
    sets = []
    for s in SHORT:
        sets += ["--set", s]
    rc, _, err = _cli(["optimize"] + flags + sets, {"TIRENDER_TEST_ABORT_AT": "3"})
    assert rc == 3, err
    assert os.path.exists(os.path.join(out, "checkpoint.npz"))
    rc, so, err = _cli(["optimize"] + flags + sets + ["--resume"])
    assert rc == 0, err
    assert "resuming from iteration 2" in so
    assert json.load(open(os.path.join(out, "metrics.json")))["workers"]["count"] == 2
    _assert_identical(_result(out), single_process)


@pytest.mark.parametrize("flags,expect", [
    (["--address", "localhost:6379"], "--address: does not apply without --workers N"),
    (["--worker-threads", "2"], "--worker-threads: does not apply without --workers N"),
    (["--workers", "0"], "--workers: must be >= 1"),
])
def test_bad_flags_one_line(flags, expect, capsys, tmp_path):
    rc = main(["optimize", CONFIG, "--out", str(tmp_path / "o")] + flags)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and expect in err, err
    assert not (tmp_path / "o").exists()


def test_radiance_field_refuses_workers(capsys, tmp_path):
    pytest.importorskip("ray")
    rc = main(["optimize", os.path.join(ROOT, "configs", "radiance_field.yaml"), "--workers", "2",
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--workers: does not apply to radiance-field configs" in err, err


def test_missing_ray_is_one_line(tmp_path):
    code = ("import sys; sys.modules['ray'] = None; from tirender.cli import main; "
            f"sys.exit(main(['optimize', {CONFIG!r}, '--workers', '2', '--out', {str(tmp_path / 'o')!r}]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == 'error: --workers: needs Ray, which is not installed (pip install "tirender[distributed]")'
