"""Derivatives in spectral_polarized (issue 15): forward mode by tangent propagation (walk/state.py FORWARD).

* f64: the polarizer's and retarder's hand-written Mueller tangents (∂M/∂θ, ∂M/∂δ, bsdfs/polarizer.py) and the
  normalisation's tangent (core/mueller.normalized_tangent_lanes) against central differences of their primal
  (child process, fp = f64; ``python tests/test_polarized_gradients.py --f64`` by hand);
* renders (child process in spectral_polarized, ``--child``): J v of a polarizer's angle, a retarder's delay, a
  diffuse reflectance and an area light's radiance against central differences of full renders with the same
  seed (correlated random numbers: the angle changes no sampling decision, so they agree per pixel up to float
  rounding); ``method: forward`` recovers a polarizer's angle with the optimiser; PRB's gradients (the replay, and
  for the angles one forward pass per element) equal forward mode's to rounding and the central differences of
  the loss; Mueller parameters above prb.MUELLER_MAX_ELEMENTS elements and PRB / forward directions on a polarizer
  nested in a composite are refused in one line."""
import json
import os
import sys

import numpy as np
import pytest

from child_util import error_messages, run_child
from gradcheck_util import f64_child_report

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


# ------------------------------------------------------------------------------------- f64 adjoint checks
def checks():
    """(name -> {max_rel_err, cases}); runs under fp = f64."""
    import taichi as ti
    from tirender.bsdfs.polarizer import Polarizer, Retarder
    from tirender.core import mueller as mu
    from tirender.core.math import vec3

    rng = np.random.default_rng(7)
    n = 200
    wi = rng.normal(size=(n, 3))
    wi /= np.linalg.norm(wi, axis=1, keepdims=True)
    par = np.stack([rng.uniform(-3.2, 3.2, n), rng.uniform(-3.2, 3.2, n), rng.normal(size=n), rng.normal(size=n)], 1)
    out = ti.Matrix.field(4, 4, ti.f64, shape=(2, n))

    @ti.kernel
    def run(which: ti.i32, tangent: ti.i32, h: ti.f64, w: ti.types.ndarray(), q: ti.types.ndarray()):
        for i in range(n):
            d = vec3(w[i, 0], w[i, 1], w[i, 2])
            th = q[i, 0] + h * q[i, 2]
            de = q[i, 1] + h * q[i, 3]
            if which == 0:
                p = Polarizer.Params(transmittance=vec3(1.0), theta=th, polarizing=1)
                dp = Polarizer.Params(transmittance=vec3(0.0), theta=q[i, 2], polarizing=1)
                if tangent == 1:
                    out[0, i] = Polarizer.mueller_tangent(p, dp, d, -d, 1).m1
                else:
                    out[0, i] = Polarizer.mueller(p, d, -d, 1).m1
            else:
                p = Retarder.Params(transmittance=vec3(1.0), theta=th, delta=de)
                dp = Retarder.Params(transmittance=vec3(0.0), theta=q[i, 2], delta=q[i, 3])
                if tangent == 1:
                    out[0, i] = Retarder.mueller_tangent(p, dp, d, -d, 1).m1
                else:
                    out[0, i] = Retarder.mueller(p, d, -d, 1).m1

    m_in = ti.Matrix.field(4, 4, ti.f64, shape=(2, n))

    @ti.kernel
    def norm(tangent: ti.i32, h: ti.f64):
        for i in range(n):
            m = mu.uniform_lanes(m_in[0, i] + h * m_in[1, i])
            a, da = mu.normalized_tangent_lanes(m, mu.uniform_lanes(m_in[1, i]))
            out[0, i] = a.m2
            if tangent == 1:
                out[0, i] = da.m0

    rep = {}
    h = 1e-6
    for which, name in ((0, "polarizer"), (1, "retarder")):
        run(which, 1, 0.0, wi, par)
        tan = out.to_numpy()[0]
        run(which, 0, h, wi, par)
        plus = out.to_numpy()[0]
        run(which, 0, -h, wi, par)
        fd = (plus - out.to_numpy()[0]) / (2 * h)
        rep[name] = {"max_rel_err": float(np.abs(tan - fd).max() / np.abs(fd).max()), "cases": n,
                     "scale": float(np.abs(fd).max())}
    mm = rng.normal(size=(2, n, 4, 4))
    mm[0, :, 0, 0] = rng.uniform(0.5, 2.0, n)
    m_in.from_numpy(mm)
    norm(1, 0.0)
    tan = out.to_numpy()[0]
    norm(0, h)
    plus = out.to_numpy()[0]
    norm(0, -h)
    fd = (plus - out.to_numpy()[0]) / (2 * h)
    rep["normalized"] = {"max_rel_err": float(np.abs(tan - fd).max() / np.abs(fd).max()), "cases": n,
                         "scale": float(np.abs(fd).max())}
    return rep


def test_mueller_tangents_vs_central_differences_f64():
    report = f64_child_report(__file__)
    assert set(report) == {"polarizer", "retarder", "normalized"}
    for name, r in report.items():
        assert r["cases"] >= 100 and r["scale"] > 0.1, (name, r)
        assert r["max_rel_err"] <= 1e-6, (name, r)


# ------------------------------------------------------------------------------------- renders (child)
RES = 20


def scene(theta=30.0, res=RES, nested=False):
    """A backlight seen through a polarizer (left half), a tilted quarter-wave-ish retarder and a tilted analyser
    (theta) in front of the camera; a diffuse floor lit by the backlight below them."""
    p1 = {"type": "polarizer", "theta": theta}
    if nested:
        p1 = {"type": "mask", "opacity": 1.0, "bsdf": p1}
    return {"integrator": {"type": "path", "max_depth": 6},
            "sensors": [{"fov": 40, "to_world": {"look_at": {"origin": [0, 0.5, 6], "target": [0, -0.3, 0],
                                                             "up": [0, 1, 0]}},
                         "film": {"width": res, "height": res, "filter": {"type": "box"}}}],
            "bsdfs": {"p0": {"type": "polarizer", "theta": 0}, "p1": p1,
                      "plate": {"type": "retarder", "theta": 20, "delta": 70},
                      "floor": {"type": "diffuse", "reflectance": [0.6, 0.5, 0.395]}},
            "shapes": [
                {"id": "light", "type": "rectangle", "to_world": [{"scale": 3}, {"translate": [0, 0, -2]}],
                 "emitter": {"type": "area", "radiance": [1.0, 0.9, 0.8]}},
                {"id": "a", "type": "rectangle", "bsdf": "p0",
                 "to_world": [{"scale": [1.2, 3, 1]}, {"translate": [-1.2, 0, -1]}]},
                {"id": "r", "type": "rectangle", "bsdf": "plate",
                 "to_world": [{"scale": 2}, {"rotate": {"axis": [0, 1, 0], "angle": 25}}, {"translate": [0, 0, 0.5]}]},
                {"id": "f", "type": "rectangle", "bsdf": "floor",
                 "to_world": [{"scale": 4}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}, {"translate": [0, -1, 0]}]},
                {"id": "b", "type": "rectangle", "bsdf": "p1",
                 "to_world": [{"scale": 2}, {"rotate": {"axis": [1, 0, 0], "angle": 20}}, {"translate": [0, 0, 2]}]}]}


def child(extended=False):
    import tirender
    from tirender.errors import ConfigError
    from tirender.integrators import prb
    from tirender.optim.driver import run_optimization
    tirender.set_variant("spectral_polarized")
    tirender.init(arch="cpu")
    out = os.environ["TIRENDER_TEST_OUT"]
    sc = tirender.load_scene(scene())
    rep = {"fd": {}}
    spp, seed = 8, 3
    wts = np.random.default_rng(5).uniform(0, 1, (RES, RES, 3))
    # the RGB steps stay inside one cell of the RGB→spectrum table (its trilinear interpolation has kinks
    # at the nodes: b/r = 0.4/0.6 = 42/63 is one, where central differences average two slopes)
    for name, dv, h in (("p1.theta", 1.0, 0.5), ("plate.delta", 1.0, 0.5), ("floor.reflectance", [1.0, 0.5, 0.2], 0.004),
                        ("light.radiance", [0.2, 1.0, 0.5], 0.004)):
        jv = tirender.render_forward(sc, {name: dv}, spp=spp, seed=seed, progress=False).astype(np.float64)
        v0 = sc.params[name].copy()
        u = np.asarray(dv, np.float32)
        sc.params[name] = v0 + h * u
        ip = tirender.render(sc, spp=spp, seed=seed, progress=False).astype(np.float64)
        sc.params[name] = v0 - h * u
        im = tirender.render(sc, spp=spp, seed=seed, progress=False).astype(np.float64)
        sc.params[name] = v0
        fd = (ip - im) / (2 * h)
        rep["fd"][name] = {"max_diff": float(np.abs(jv - fd).max()), "max_fd": float(np.abs(fd).max()),
                           "sum_jv": float(jv.sum()), "sum_fd": float(fd.sum()),
                           "dir": np.broadcast_to(u, sc.params[name].shape).tolist(),
                           "w_jv": float((wts * jv).sum()), "w_fd": float((wts * fd).sum())}
    # reverse mode (PRB) with the same seed: the replay for the reflectance and the radiance, one forward pass per
    # element for the Mueller parameters (the angles)
    g = tirender.render_grad(sc, wts.astype(np.float32), spp=spp, seed=seed, progress=False)
    rep["reverse"] = {n: float((g[n].astype(np.float64) * np.asarray(r["dir"])).sum()) for n, r in rep["fd"].items()}
    rep["reverse_keys"] = sorted(g)
    # params and accumulate: only p1.theta's passes; a second call with accumulate adds as much again
    one = tirender.render_grad(sc, wts.astype(np.float32), spp=spp, seed=seed, progress=False, params=["p1.theta"])
    two = tirender.render_grad(sc, wts.astype(np.float32), spp=spp, seed=seed, progress=False, params=["p1.theta"],
                               accumulate=True)
    rep["accumulate"] = [float(np.ravel(one["p1.theta"])[0]), float(np.ravel(two["p1.theta"])[0]),
                         float(np.ravel(tirender.api.read_gradients(sc)["p1.theta"])[0]), "plate.delta" in one]
    rep["deterministic"] = bool(np.array_equal(tirender.render_forward(sc, {"p1.theta": 1.0}, spp=2, seed=9, progress=False),
                                               tirender.render_forward(sc, {"p1.theta": 1.0}, spp=2, seed=9, progress=False)))
    # the inverse problem: the analyser's angle from a render at 30 degrees, starting at 65
    cfg = {"variant": "spectral_polarized", "scene": scene(30.0),
           "optimize": {"params": {"p1.theta": {"init": 65.0, "lr": 3.0}}, "target": {"type": "render", "spp": 64,
                                                                                       "seed": 1000},
                        "method": "forward", "loss": "l2", "iters": 60, "spp": 4, "save_every": 100,
                        "lr_decay": {"every": 15, "factor": 0.5}}}
    res = run_optimization(cfg, out=os.path.join(out, "opt"))
    rep["recovered"] = float(np.ravel(res["params"]["p1.theta"]["value"])[0])
    rep["loss"] = [res["initial_loss"], res["final_loss"]]
    # coherent MCMC in spectral_polarized on this scene (its S0 through the polarizers), extended lane: image means
    # over 4 seeds against the path tracer's (its kernel compiled above; the Markov-chain kernels, 25 s, more)
    rep["mcmc"] = {}
    for integ in (("path", "coherent_mcmc") if extended else ()):
        m = np.array([tirender.render(sc, spp=64, seed=60 + k, integrator=integ, progress=False).reshape(-1, 3)
                      .mean(0) for k in range(4)])
        rep["mcmc"][integ] = {"mean": m.mean(0).tolist(), "se": (m.std(0, ddof=1) / 2).tolist()}
    w = np.ones((RES, RES, 3), np.float32)
    nested = tirender.load_scene(scene(nested=True))
    big = scene()       # an analyser with a bitmap of angles: 72 elements, above prb.MUELLER_MAX_ELEMENTS
    big["bsdfs"]["p1"]["theta"] = {"type": "bitmap", "width": 9, "height": 8, "value": 30.0}
    big = tirender.load_scene(big)
    rep["targets"] = {k: prb.mueller_targets(s) for k, s in (("sc", sc), ("nested", nested), ("big", big))}
    rep["cap"] = prb.MUELLER_MAX_ELEMENTS
    rep["refusals"] = error_messages(
        (lambda: tirender.render_grad(big, w, spp=1, progress=False, params=["floor.reflectance", "p1.theta"]),
         lambda: tirender.render_forward(nested, {"p1.bsdf.theta": 1.0}, spp=1, progress=False),
         lambda: tirender.render_grad(nested, w, spp=1, progress=False, params=["p1.bsdf.theta"])), ConfigError)
    print(json.dumps(rep))


@pytest.fixture(scope="module")
def report(tmp_path_factory, extended):
    return run_child(__file__, ["--child"], tmp_path_factory.mktemp("polarized_gradients"), extended=extended)


def test_forward_mode_matches_central_differences(report):
    """Per pixel, J v equals the central differences of two renders with the same seed (float32 rounding)."""
    for name, r in report["fd"].items():
        assert r["max_fd"] > 1e-3, (name, r)
        assert r["max_diff"] <= 2e-3 * r["max_fd"], (name, r)
        assert abs(r["sum_jv"] - r["sum_fd"]) <= 1e-3 * abs(r["sum_fd"]) + 1e-4, (name, r)
    assert report["deterministic"]


def test_optimizer_recovers_a_polarizer_angle(report):
    assert abs(report["recovered"] - 30.0) < 1.0, report["recovered"]


def test_prb_equals_forward_mode(report):
    """Reverse mode (PRB) in spectral_polarized with forward mode's seed: for parameters that leave Mueller matrices
    alone (a reflectance, an emitter's radiance) the replay's <PRB gradient, v> equals <w, J v> (the same detached
    path estimator, float rounding); the Mueller parameters (an analyser's angle, a retarder's delay) come from one
    forward pass per element, so they equal <w, J e> to rounding too, and the central differences of the loss
    <w, render> with the same seed (correlated random numbers) to the differences' own error."""
    for name, r in report["fd"].items():
        rev, fwd, fd = report["reverse"][name], r["w_jv"], r["w_fd"]
        assert abs(fwd) > 1e-2 and abs(fd) > 1e-2, (name, rev, fwd, fd)
        tol = 1e-6 if name in ("p1.theta", "plate.delta") else 1e-3    # the same passes / the replay's rounding
        assert abs(rev - fwd) <= tol * abs(fwd), (name, rev, fwd)
        assert abs(rev - fd) <= 5e-3 * abs(fd), (name, rev, fd)
    keys = report["reverse_keys"]
    assert {"floor.reflectance", "p0.theta", "p1.theta", "plate.theta", "plate.delta"} <= set(keys), keys


def test_prb_mueller_parameters_respect_params_and_accumulate(report):
    """params=[...] runs the passes of the Mueller parameters named only; accumulate=True adds them to the
    accumulated gradients (two equal calls: twice one, read back by read_gradients)."""
    one, two, read, has_delta = report["accumulate"]
    assert abs(one - report["reverse"]["p1.theta"]) <= 1e-9 * abs(one) and abs(one) > 1e-2, (one, report["reverse"])
    assert abs(two - 2 * one) <= 1e-9 * abs(one) and abs(read - two) <= 1e-6 * abs(two), (one, two, read)
    assert not has_delta


def test_mueller_parameters_prb_cannot_differentiate(report):
    """Left out when params is None: a bitmap of angles above the cap, a polarizer nested in a composite."""
    t = report["targets"]
    assert t["sc"] == ["p0.theta", "p1.theta", "plate.theta", "plate.delta"], t
    assert "p1.theta" not in t["big"] and "p0.theta" in t["big"], t
    assert t["nested"] == ["p0.theta", "plate.theta", "plate.delta"], t


@pytest.mark.extended
def test_coherent_mcmc_in_spectral_polarized(report):
    """coherent_mcmc in spectral_polarized (the film's S0 behind polarizers and a retarder): per-channel image
    means within 4 standard errors (and 1 %) of the path tracer's (extended lane, a variant more of the default
    lane's MCMC checks: rgb in tests/test_mcmc.py, spectral pssmlt there, mono in tests/test_variants.py; and the
    extended lane's pssmlt and gold box in tests/test_mcmc.py)."""
    ref, r = report["mcmc"]["path"], report["mcmc"]["coherent_mcmc"]
    tol = 4 * np.hypot(r["se"], ref["se"]) + 0.01 * np.array(ref["mean"])
    assert np.all(np.abs(np.subtract(r["mean"], ref["mean"])) <= tol), (r, ref)
    assert np.all(np.array(ref["se"]) < 0.02 * np.array(ref["mean"])), ref


def test_refusals_are_one_line(report):
    big, nested_fwd, nested_prb = report["refusals"]
    cap = str(report["cap"])
    assert "'p1.theta'" in big and "72 elements" in big and cap in big and "render_forward" in big, big
    assert "direction" in big and "\n" not in big, big
    for msg in (nested_fwd, nested_prb):
        assert "nested in a composite" in msg and "p1.bsdf.theta" in msg and "\n" not in msg, msg


if __name__ == "__main__" and "--f64" in sys.argv:
    print(json.dumps(checks()))
elif __name__ == "__main__" and "--child" in sys.argv:
    child(extended="--extended" in sys.argv)
