"""Radiative Backpropagation family (tirender.integrators.rb) and the conventional-AD baseline
(benchmarks/ad_baseline.py):

* unbiased RB agrees with PRB and with finite differences (correlated random numbers) within 3
  standard errors on every parameter type of the PRB tests;
* the PRB paper's Fig. 2: the roughness of a metal plate inside a closed glass box (lit only through
  the glass, so NEE never reaches it) - PRB's gradient has the sign of the true derivative over a
  sweep of (initial, target) pairs, biased RB (Li := 1) has the wrong sign for some of them;
* biased RB I on a diffuse texture: the sign matches PRB on >= 95 % of texels with visible signal;
* the pipelined joint pass renders the same image as ``render`` and gives the same gradients as the
  plain pass; the pipelined driver converges on cbox_red_wall;
* the ti.ad.Tape baseline (megakernel and wavefront) agrees with PRB.
"""
import os
import sys

import numpy as np
import pytest

import tirender
from gradcheck_util import assert_agree, image_weights, projected_gradients
from scenes import camera, cornell_like
from test_prb_gradients import SEEDS_FD_GLOSSY, _box_scene, _glossy_scene, _normalmap_scene
from tirender.errors import ConfigError
from tirender.api import render_grad
from tirender.api import render_and_grad

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SEEDS_RB = [301 + k for k in range(10)]
SEEDS_PRB = [101 + k for k in range(10)]
SEEDS_FD = [501 + k for k in range(12)]


def _prb_projections(scene, pname, u, w, spp, seeds, method="prb"):
    return np.array([float((render_grad(scene, w, spp=spp, seed=s, method=method, progress=False)[pname]
                            .astype(np.float64) * u).sum()) for s in seeds])


def _check_rb(scene, pname, u, h, why, spp=16, seeds_fd=SEEDS_FD):
    w = image_weights(scene)
    g_rb, f = projected_gradients(scene, pname, u, w, spp, SEEDS_RB, seeds_fd, h, method="rb")
    g_prb = _prb_projections(scene, pname, u, w, spp, SEEDS_PRB)
    assert_agree(g_rb, f, f"RB vs FD: {pname} ({why})")
    assert_agree(g_rb, g_prb, f"RB vs PRB: {pname} ({why})")


# ------------------------------------------------------------------------------------------------
# unbiased RB vs PRB vs finite differences, every parameter type
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def box():
    sc = tirender.load_scene(_box_scene())
    sc.params["floor.reflectance"] = np.random.default_rng(1).uniform(0.2, 0.8, (6, 6, 3)).astype(np.float32)
    return sc


BOX_CASES = [
    ("red.reflectance", 0.02, "diffuse, directly visible"),
    ("hidden.reflectance", 0.02, "seen only indirectly (behind the camera)"),
    ("floor.reflectance", 0.02, "bitmap texture"),
    ("light.radiance", 0.2, "area emitter"),
    ("lamp.intensity", 0.1, "point light: lit only through NEE"),
]


@pytest.mark.parametrize("pname,h,why", BOX_CASES, ids=[c[0] for c in BOX_CASES])
def test_rb_matches_prb_and_fd_box(box, pname, h, why):
    _check_rb(box, pname, np.random.default_rng(7).uniform(0.5, 1.0, box.params[pname].shape), h, why)


def test_rb_sees_through_hidden_emitters_as_the_primal(box):
    """hide_emitters with the area light in view: camera rays pass through it to the ceiling (Mitsuba's
    skip_area_emitters), in RB's walk as in the primal's and PRB's (it stopped at the light, and the ceiling behind it
    had no gradient there)."""
    d = _box_scene()
    d["integrator"]["hide_emitters"] = True
    d["sensors"] = [camera([0, -0.6, 0.3], [0, 1, -0.1], up=(0, 0, -1), fov=50, w=20, h=20)]
    sc = tirender.load_scene(d)
    sc.params["floor.reflectance"] = box.params["floor.reflectance"]
    _check_rb(sc, "white.reflectance", np.array([0.8, 0.6, 0.7]), 0.02, "the ceiling behind a hidden light")


@pytest.fixture(scope="module")
def glossy():
    sc = tirender.load_scene(_glossy_scene())
    sky = np.random.default_rng(2).uniform(0.2, 1.5, (8, 16, 3)).astype(np.float32)
    sky[1, 5] = 12.0
    sc.params["sky.radiance"] = sky
    return sc


GLOSSY_CASES = [
    ("metal.roughness", 0.01), ("metal.specular_reflectance", 0.02), ("plastic.roughness", 0.01),
    ("plastic.diffuse_reflectance", 0.02), ("plastic.specular_reflectance", 0.02), ("sky.radiance", 0.2),
]


@pytest.mark.slow
@pytest.mark.extended   # 60 s of compilation cold (the glossy RB kernel); the default lane checks RB against PRB and
#                         finite differences on the box and the normal-mapped scene, and PRB's glossy gradients
#                         against finite differences (tests/test_prb_gradients.py)
@pytest.mark.parametrize("pname,h", GLOSSY_CASES, ids=[c[0] for c in GLOSSY_CASES])
def test_rb_matches_prb_and_fd_glossy(glossy, pname, h):
    # the envmap highlight makes per-seed FD values wide (see test_prb_gradients.SEEDS_FD_GLOSSY)
    _check_rb(glossy, pname, np.random.default_rng(8).uniform(0.5, 1.0, glossy.params[pname].shape), h, pname,
              seeds_fd=SEEDS_FD_GLOSSY)


@pytest.mark.slow
def test_rb_matches_prb_and_fd_normalmap_constant_env_directional():
    rng = np.random.default_rng(3)
    sc = _normalmap_scene(rng)
    for pname, h in (("bumpy.normalmap", 0.01), ("sun.irradiance", 0.05), ("amb.radiance", 0.02)):
        u = rng.uniform(-1.0, 1.0, sc.params[pname].shape) if pname == "bumpy.normalmap" else \
            rng.uniform(0.5, 1.0, sc.params[pname].shape)
        _check_rb(sc, pname, u, h, pname)


def test_unknown_method_is_a_config_error(box):
    with pytest.raises(ConfigError, match="unknown gradient method"):
        render_grad(box, image_weights(box), spp=1, method="rb_unbiased_fast", progress=False)


# ------------------------------------------------------------------------------------------------
# PRB paper, Fig. 2: enclosed rough metal, biased RB gets the sign wrong
# ------------------------------------------------------------------------------------------------
# The default lane's RB kernels: the texture scene below and the Fig. 2 scene hold the same models (tiny shapes far
# outside every view carry the other's), filter and emitters, so that they share the render, PRB and biased-RB kernels.
GLASS = {"type": "dielectric", "int_ior": 1.5}
METAL = {"type": "roughconductor", "distribution": "ggx", "material": "Au", "roughness": 0.2}
CANVAS_FILTER = {"type": "gaussian", "stddev": 0.5}      # configs/texture_recovery.yaml's


def _decoys(bsdfs):
    return [{"id": f"decoy_{i}", "type": "rectangle", "bsdf": b,
             "to_world": [{"scale": 0.01}, {"translate": [50.0 + i, 50.0, 50.0]}]} for i, b in enumerate(bsdfs)]


def _enclosed_metal_scene():
    """A rough gold plate inside a closed smooth-glass box, lit by an area light outside: every light
    path to the plate crosses the glass (Dirac lobes), so emitter sampling at the plate is always
    occluded and the plate's incident radiance only enters through BSDF sampling - the term that
    biased RB replaces by 1. The camera sees the plate only through the glass."""
    cam = camera([0, 2, 3], [0, -0.5, 0], fov=30, w=20, h=20)
    cam["film"]["filter"] = dict(CANVAS_FILTER)
    return {
        "integrator": {"type": "path", "max_depth": 6, "rr_depth": 100},
        "sensors": [cam],
        "bsdfs": {"glass": GLASS, "metal": METAL},
        "shapes": [{"id": "container", "type": "cube", "bsdf": "glass"},
                   {"id": "plate", "type": "rectangle", "bsdf": "metal",
                    "to_world": [{"scale": 0.8}, {"rotate": {"axis": [1, 0, 0], "angle": -90}},
                                 {"translate": [0, -0.5, 0]}]},
                   {"id": "light", "type": "rectangle",
                    "to_world": [{"scale": 0.6}, {"look_at": {"origin": [0, 3.5, -1], "target": [0, -0.5, 0],
                                                              "up": [0, 0, 1]}}],
                    "emitter": {"type": "area", "radiance": 20}}] + _decoys([{"type": "diffuse"}]),
    }


# (initial, target) roughness pairs with a clearly non-zero true derivative (for pairs like 0.25 -> 0.15
# the derivative of this loss is ~0 and its sign cannot be checked at test budgets)
FIG2_PAIRS = [(0.03, 0.15), (0.05, 0.25), (0.1, 0.3), (0.1, 0.03), (0.15, 0.03), (0.2, 0.05), (0.25, 0.03),
              (0.3, 0.1)]


def _fig2(fd):
    """The Fig. 2 sweep: for each pair, PRB's and biased RB's gradient of ||y(α) - t||²/N (δy from a noisy primal
    render, the gradients with another seed) must have the sign of the true derivative: sign(α - α_target), the
    loss being unimodal in α here; fd: also the true derivative itself, from finite differences of images with
    common random numbers (1024 spp), checked to have that sign. Returns the number of pairs where biased RB's
    sign is wrong."""
    sc = tirender.load_scene(_enclosed_metal_scene())
    shp = sc.params["metal.roughness"].shape

    def set_alpha(a):
        sc.params["metal.roughness"] = np.full(shp, a, np.float32)

    targets = {}
    for a in sorted({t for _, t in FIG2_PAIRS}):
        set_alpha(a)
        targets[a] = tirender.render(sc, spp=1024, seed=7, progress=False).astype(np.float64)
    rows, wrong_biased = [], 0
    h = 0.01
    for k, (ai, at) in enumerate(FIG2_PAIRS):
        t = targets[at]
        true = float(np.sign(ai - at))
        if fd:
            # true derivative of ||E[y(α)] - t||²/N: <2(ȳ - t), ∂y/∂α>/N with ∂y/∂α from finite differences
            # of images with common random numbers, ȳ an independent render
            set_alpha(ai + h)
            yp = tirender.render(sc, spp=1024, seed=11, progress=False).astype(np.float64)
            set_alpha(ai - h)
            ym = tirender.render(sc, spp=1024, seed=11, progress=False).astype(np.float64)
            set_alpha(ai)
            yb = tirender.render(sc, spp=1024, seed=12, progress=False).astype(np.float64)
            true = float((2 * (yb - t) * (yp - ym) / (2 * h)).mean())
        set_alpha(ai)
        # the optimiser's view: δy from a noisy primal render, gradients with another seed
        y = tirender.render(sc, spp=256, seed=20 + k, progress=False)
        dy = (2 * (y - t) / y.size).astype(np.float32)
        g = {m: float(render_grad(sc, dy, spp=256, seed=40 + k, method=m, progress=False)["metal.roughness"].sum())
             for m in ("prb", "rb_biased")}
        rows.append(f"α {ai:.2f} -> target {at:.2f}: true {true:+.4f}  PRB {g['prb']:+.4f}  "
                    f"biased RB {g['rb_biased']:+.4f}")
        # the loss is unimodal in α here: the true derivative points away from the target
        assert np.sign(true) == np.sign(ai - at), rows[-1]
        assert np.sign(g["prb"]) == np.sign(true), "PRB sign wrong:\n" + "\n".join(rows)
        wrong_biased += int(np.sign(g["rb_biased"]) != np.sign(true))
    print("\n".join(rows) + f"\nbiased RB has the wrong sign for {wrong_biased} / {len(FIG2_PAIRS)} pairs")
    return wrong_biased, rows


@pytest.mark.slow
def test_fig2_enclosed_roughness_sign_prb_right_biased_rb_wrong():
    """PRB paper, Fig. 2: PRB's gradient has the true derivative's sign for every pair, biased RB (Li := 1) the
    wrong one for some (the extended lane also measures the true derivative by finite differences)."""
    wrong_biased, rows = _fig2(fd=False)
    assert wrong_biased >= 1, "biased RB had the right sign everywhere:\n" + "\n".join(rows)


@pytest.mark.slow
@pytest.mark.extended    # 1024-spp finite differences for 8 pairs: 1.5-2 min
def test_fig2_true_derivative_by_finite_differences():
    wrong_biased, rows = _fig2(fd=True)
    # documents the bias of RB I (PRB paper, Fig. 2): the sign is wrong for some pairs
    assert wrong_biased >= 1, "biased RB had the right sign everywhere:\n" + "\n".join(rows)


# ------------------------------------------------------------------------------------------------
# biased RB I on a diffuse texture
# ------------------------------------------------------------------------------------------------
def _texture_scene():
    from tirender.config import load_config
    cfg = load_config(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    d = cfg["scene"]
    d["sensors"][0]["film"].update(width=24, height=24)
    assert d["sensors"][0]["film"]["filter"] == CANVAS_FILTER
    d["shapes"] += _decoys([GLASS, METAL])            # the Fig. 2 scene's models (see GLASS)
    sc = tirender.load_scene(d, base_dir=cfg["_dir"])
    sc.resize_texture("canvas.reflectance", 12, 12)
    return sc


@pytest.mark.slow
def test_biased_rb_texture_signs_match_prb():
    sc = _texture_scene()
    rng = np.random.default_rng(5)
    sc.params["canvas.reflectance"] = rng.uniform(0.1, 0.9, (12, 12, 3)).astype(np.float32)
    target = tirender.render(sc, spp=256, seed=3, progress=False)
    sc.params["canvas.reflectance"] = rng.uniform(0.1, 0.9, (12, 12, 3)).astype(np.float32)
    y = tirender.render(sc, spp=64, seed=4, progress=False)
    dy = (2 * (y - target) / y.size).astype(np.float32)
    P = np.array([render_grad(sc, dy, spp=16, seed=100 + k, method="prb", progress=False)["canvas.reflectance"]
                  for k in range(8)])
    B = np.array([render_grad(sc, dy, spp=16, seed=200 + k, method="rb_biased",
                              progress=False)["canvas.reflectance"] for k in range(8)])
    mp, se = P.mean(0), P.std(0, ddof=1) / np.sqrt(len(P))
    visible = np.abs(mp) > 3 * se
    agree = np.sign(B.mean(0)[visible]) == np.sign(mp[visible])
    frac = agree.mean()
    print(f"texels x channels with visible signal: {visible.sum()} / {visible.size}, sign agreement {frac:.3f}")
    assert visible.sum() >= 0.5 * visible.size
    assert frac >= 0.95, frac


# ------------------------------------------------------------------------------------------------
# pipelining
# ------------------------------------------------------------------------------------------------
def test_joint_pass_renders_the_primal_image_and_the_plain_gradients():
    sc = _texture_scene()
    rng = np.random.default_rng(6)
    dy = rng.normal(0, 1e-3, (24, 24, 3)).astype(np.float32)
    img = tirender.render(sc, spp=4, seed=9, progress=False)
    img2, g2 = render_and_grad(sc, dy, spp=4, seed=9, method="rb_biased_pipelined")
    g1 = render_grad(sc, dy, spp=4, seed=9, method="rb_biased", progress=False)
    g3 = render_grad(sc, dy, spp=4, seed=9, method="rb_biased_pipelined", progress=False)
    np.testing.assert_allclose(img2, img, rtol=1e-4, atol=1e-5)   # same paths (compiler rounding only)
    np.testing.assert_array_equal(g2["canvas.reflectance"], g1["canvas.reflectance"])
    np.testing.assert_array_equal(g3["canvas.reflectance"], g1["canvas.reflectance"])


@pytest.mark.slow
def test_pipelined_driver_converges_cbox_red_wall(tmp_path):
    """configs/cbox_red_wall.yaml with method rb_biased_pipelined. With the config's Adam step (lr 0.04,
    40 iterations) the one-iteration lag of pipelining turns Adam's small oscillation of the red
    channel into a ±0.07 limit cycle (final error ~0.04 for both pipelined methods, vs 0.013 for PRB);
    with lr 0.01 the lagged gradients converge. A 32² film and 100 iterations keep the test short (final error
    0.005-0.010 over four seeds of the optimisation; 0.006 at 64²)."""
    from tirender.config import load_config
    from tirender.optim.driver import run_optimization
    cfg = load_config(os.path.join(ROOT, "configs", "cbox_red_wall.yaml"))
    cfg["scene"]["sensors"][0]["film"].update(width=32, height=32)
    o = cfg["optimize"]
    o["method"] = "rb_biased_pipelined"
    o["iters"] = 100
    o["params"]["red.reflectance"]["lr"] = 0.01
    o["save_every"] = 1000
    m = run_optimization(cfg, out=str(tmp_path / "rw"))
    p = m["params"]["red.reflectance"]
    err = np.abs(np.array(p["value"]) - np.array(p["truth"]))
    assert m["method"] == "rb_biased_pipelined" and m["iterations"] == 100
    assert np.all(err < 0.03), (p["value"], p["truth"])


# ------------------------------------------------------------------------------------------------
# conventional AD baseline (ti.ad.Tape) vs PRB
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["megakernel", "wavefront"])
def test_ad_baseline_matches_prb(mode):
    sys.path.insert(0, ROOT)
    from benchmarks.ad_baseline import ADPathTracer
    sc = tirender.load_scene(cornell_like(w=16, max_depth=3))
    w = np.random.default_rng(0).uniform(0.2, 1.0, (16, 16, 3)).astype(np.float32) / 256
    ad = ADPathTracer(sc)
    try:
        G = [ad.gradient(w, 16, seed=10 + k, mode=mode) for k in range(8)]
    finally:
        ad.release()
    P = [render_grad(sc, w, spp=16, seed=50 + k, progress=False) for k in range(8)]
    rng = np.random.default_rng(1)
    for name in ("red.reflectance", "white.reflectance", "light.radiance"):
        u = rng.uniform(0.5, 1.0, 3)
        a = np.array([(g[name] * u).sum() for g in G])
        b = np.array([(p[name] * u).sum() for p in P])
        assert_agree(a, b, f"ti.ad {mode} vs PRB: {name}")
