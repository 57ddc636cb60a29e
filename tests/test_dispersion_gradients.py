"""Gradients of a dielectric's IOR and Cauchy dispersion (issue 15; bsdfs/dielectric.py ``dirac_ior_adjoint``,
integrators/prb_attached.py) in the spectral variant, in a child process (a process holds one variant):

* a prism in front of a backlit panel of soft bars (configs/dispersion_recovery.yaml, smaller): attached PRB's
  gradients w.r.t. ``cauchy_b`` and ``int_ior`` against central differences of full renders with correlated
  random numbers (the bars move with η(λ): h small, the image is far from linear in it);
* the optimiser recovers the dispersion coefficient from a target render (start: a crown glass's B);
* one-line refusals: an unknown IOR name, a negative Cauchy coefficient.
The f64 check of the IOR adjoint itself, and detached PRB's zero gradient (rgb), are in tests/test_attached_prb.py.
The child compiles two spectral megakernels (render, attached replay), which the optimiser reuses."""
import copy
import json
import os
import sys

import numpy as np
import pytest

from child_util import error_messages, run_child

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(ROOT, "configs", "dispersion_recovery.yaml")
TRUE_B = 0.0135


def _config(w=32, h=24, depth=4):
    from tirender.config import load_config
    cfg = load_config(CONFIG)
    cfg["scene"]["sensors"][0]["film"].update(width=w, height=h)
    cfg["scene"]["integrator"]["max_depth"] = depth
    return cfg


def child():
    import tirender
    from tirender.errors import ConfigError
    from tirender.optim.driver import run_optimization
    from gradcheck_util import projected_gradients
    tirender.set_variant("spectral")
    out = os.environ["TIRENDER_TEST_OUT"]
    rep = {}
    sc = tirender.scene_from_config(_config())
    rng = np.random.default_rng(1)
    wts = rng.uniform(0, 1, (24, 32, 3)).astype(np.float32)
    for name in ("glass.cauchy_b", "glass.int_ior"):
        g, f = projected_gradients(sc, name, np.ones(1, np.float32), wts, 128, list(range(11, 19)),
                                   list(range(21, 29)), 1e-3, method="prb_attached")
        rep[name] = {"g": g.tolist(), "f": f.tolist()}
    # the inverse problem: B from a target render, starting at 0.002
    cfg = _config(24, 18)
    cfg["optimize"].update(iters=40, spp=4, spp_grad=8, save_every=100)
    cfg["optimize"]["target"]["spp"] = 128
    res = run_optimization(cfg, out=os.path.join(out, "opt"))
    rep["recovered"] = float(np.ravel(res["params"]["glass.cauchy_b"]["value"])[0])
    # refusals
    bad = copy.deepcopy(_config())
    bad["scene"]["bsdfs"]["glass"]["int_ior"] = "unobtainium"
    negative = copy.deepcopy(_config())
    negative["scene"]["bsdfs"]["glass"]["cauchy_b"] = -0.01
    rep["refusals"] = error_messages((lambda: tirender.scene_from_config(bad),
                                      lambda: tirender.scene_from_config(negative)), ConfigError)
    print(json.dumps(rep))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_child(__file__, ["--child"], tmp_path_factory.mktemp("dispersion_gradients"))


@pytest.mark.parametrize("name", ["glass.cauchy_b", "glass.int_ior"])
def test_ior_gradients_match_finite_differences(report, name):
    from gradcheck_util import assert_agree
    r = report[name]
    mg, mf, se = assert_agree(np.array(r["g"]), np.array(r["f"]), name)
    print(f"{name}: attached {mg:.5g}, FD {mf:.5g} (3 SE {3 * se:.2g})")


def test_optimizer_recovers_the_dispersion(report):
    assert abs(report["recovered"] - TRUE_B) < 0.1 * TRUE_B, report["recovered"]


def test_refusals_are_one_line(report):
    name, negative = report["refusals"]
    assert "int_ior" in name and "unknown IOR 'unobtainium'" in name and "\n" not in name, name
    assert "cauchy_b" in negative and "out of range" in negative and "\n" not in negative, negative


if __name__ == "__main__" and "--child" in sys.argv:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    child()
