"""prbvolpath (PRB with differentiable delta tracking) vs finite differences with correlated random
numbers: density grid, albedo grid, HG g of a heterogeneous medium (delta tracking + ratio
tracking NEE), homogeneous sigma_t / albedo (RGB), a surface seen through a medium, long paths
(albedo 0.99, unbounded depth with Russian roulette), and the ray-marching variant. Criterion:
means over independent seeds agree within 3 combined standard errors (gradcheck_util)."""
import numpy as np
import pytest

import tirender
from gradcheck_util import assert_agree, image_weights, projected_gradients
from scenes import camera, smoke_scene
from tirender.media.spec import host_majorant

SEEDS_PRB = [301 + k for k in range(10)]
SEEDS_FD = [701 + k for k in range(10)]


@pytest.fixture(scope="module")
def smoke():
    sc = tirender.load_scene(smoke_scene())
    rng = np.random.default_rng(11)
    sc.params["smoke.density"] = rng.uniform(0.3, 1.0, (8, 8, 8, 1)).astype(np.float32)
    sc.params["smoke.albedo"] = rng.uniform(0.5, 0.95, (4, 4, 4, 3)).astype(np.float32)
    assert host_majorant(sc, 0) == 4.0   # fixed: FD perturbations keep the same free-flight sampling
    return sc


SMOKE_CASES = [("smoke.density", 0.05), ("smoke.albedo", 0.03), ("smoke.g", 0.05), ("floor.reflectance", 0.05)]


@pytest.mark.parametrize("pname,h", SMOKE_CASES, ids=[c[0] for c in SMOKE_CASES])
def test_prbvolpath_matches_fd_grid(smoke, pname, h):
    u = np.random.default_rng(5).uniform(0.5, 1.0, smoke.params[pname].shape)
    g, f = projected_gradients(smoke, pname, u, image_weights(smoke), 16, SEEDS_PRB, SEEDS_FD, h)
    assert_agree(g, f, pname)


def _homogeneous(albedo=(0.85, 0.7, 0.6), sigma=(0.8, 1.5, 2.5), max_depth=8, rr_depth=100):
    return {
        "integrator": {"type": "prbvolpath", "max_depth": max_depth, "rr_depth": rr_depth},
        "sensors": [camera([0, 0.5, 3.5], [0, 0, 0], fov=40, w=12, h=12)],
        "shapes": [{"id": "ball", "type": "sphere", "resolution": 24, "bsdf": {"type": "null"},
                    "interior": {"type": "homogeneous", "sigma_t": list(sigma), "albedo": list(albedo),
                                 "phase": {"type": "hg", "g": 0.5}}}],
        "emitters": [{"id": "sky", "type": "constant", "radiance": [0.5, 0.6, 0.7]},
                     {"id": "sun", "type": "directional", "direction": [0.4, -1.0, -0.3], "irradiance": 3.0}],
    }


@pytest.mark.parametrize("pname,h", [("ball.sigma_t", 0.05), ("ball.albedo", 0.02), ("ball.g", 0.05)],
                         ids=["sigma_t", "albedo", "g"])
@pytest.mark.slow
def test_prbvolpath_matches_fd_homogeneous_rgb(pname, h):
    sc = tirender.load_scene(_homogeneous())
    u = np.random.default_rng(6).uniform(0.5, 1.0, sc.params[pname].shape)
    g, f = projected_gradients(sc, pname, u, image_weights(sc), 16, SEEDS_PRB, SEEDS_FD, h)
    assert_agree(g, f, pname)


@pytest.fixture(scope="module")
def long_paths():
    """Albedo 0.99, unbounded depth (Russian roulette from depth 20), lit by the sun only: multiple
    scattering carries half of the image and paths reach tens of scattering events (memory stays
    constant: nothing is stored per vertex)."""
    d = smoke_scene(albedo=0.99, max_depth=-1, rr_depth=20, w=10)
    d["emitters"] = d["emitters"][1:]
    d["media"]["smoke"].update(scale=4.0, majorant=4.8)
    sc = tirender.load_scene(d)
    rng = np.random.default_rng(12)
    sc.params["smoke.density"] = rng.uniform(0.2, 0.6, (8, 8, 8, 1)).astype(np.float32)
    sc.params["smoke.albedo"] = np.full((4, 4, 4, 3), 0.99, np.float32)
    full = tirender.render(sc, spp=128, seed=1).mean()
    sc.integrator["max_depth"] = 2
    single = tirender.render(sc, spp=128, seed=1).mean()
    sc.integrator["max_depth"] = 1 << 20
    assert single < 0.6 * full, (single, full)
    return sc


@pytest.mark.parametrize("pname,h", [("smoke.albedo", 0.002), ("smoke.density", 0.05), ("smoke.g", 0.05)],
                         ids=["albedo", "density", "g"])
@pytest.mark.slow
def test_prbvolpath_long_paths(long_paths, pname, h):
    sc = long_paths
    v0 = sc.params[pname]
    if pname == "smoke.albedo":
        sc.params[pname] = v0 - 0.002   # room for +h below 1
    u = np.random.default_rng(14).uniform(0.5, 1.0, v0.shape)
    try:
        g, f = projected_gradients(sc, pname, u, image_weights(sc), 32, SEEDS_PRB, SEEDS_FD, h)
    finally:
        sc.params[pname] = v0
    assert_agree(g, f, pname)


@pytest.mark.slow
def test_raymarch_gradient_matches_fd():
    """The ray-marching variant's (detached) gradient is the derivative of its own estimator."""
    sc = tirender.load_scene(smoke_scene(integ="volpath_raymarch", max_depth=4))
    rng = np.random.default_rng(13)
    sc.params["smoke.density"] = rng.uniform(0.3, 1.0, (8, 8, 8, 1)).astype(np.float32)
    u = rng.uniform(0.5, 1.0, sc.params["smoke.density"].shape)
    g, f = projected_gradients(sc, "smoke.density", u, image_weights(sc), 16, SEEDS_PRB, SEEDS_FD, 0.05)
    assert_agree(g, f, "smoke.density (ray marching)")


@pytest.mark.slow
@pytest.mark.extended     # the same config, shortened, runs in tests/test_distributed.py
def test_volume_recovery_short(tmp_path):
    """configs/volume_recovery.yaml, shortened (32x32 images, 16^3 -> 32^3, 60 iterations):
    the density RMSE vs the ground truth drops by >= 2x and the held-out view's error drops too."""
    import os
    from tirender.config import load_config
    from tirender.optim.driver import OptimizationRun
    cfg = load_config(os.path.join(os.path.dirname(__file__), "..", "configs", "volume_recovery.yaml"),
                      ["optimize.iters=60", "optimize.target.spp=64",
                       "optimize.multires={smoke.density: [[0, 16], [40, 32]]}", "optimize.save_every=1000"])
    for s in cfg["scene"]["sensors"]:
        s["film"]["width"] = s["film"]["height"] = 32
    m = OptimizationRun(cfg, out=str(tmp_path / "run")).run()
    p = m["params"]["smoke.density"]
    h = m["holdout"]["6"]
    print(f"density RMSE {p['rmse_start']:.4f} -> {p['rmse_end']:.4f}; held-out image RMSE "
          f"{h['rmse_start']:.4f} -> {h['rmse_end']:.4f}; {m['seconds']:.1f} s")
    assert p["rmse_end"] * 2.0 <= p["rmse_start"]
    assert h["rmse_end"] < 0.8 * h["rmse_start"]
    out = tmp_path / "run"
    for f in ("params/smoke.density_slices.png", "params/smoke.density_truth_slices.png",
              "params/smoke.density.vol", "holdout_view6_end.png", "holdout_view6_target.png"):
        assert (out / f).exists(), f


def _thin():
    """The start of a volume reconstruction: a thin constant density (sigma_t = 0.1, optical depth
    ~0.16 across the box), albedo 0.9, a fixed majorant 0.2 (FD perturbations keep the sampling)."""
    d = smoke_scene(albedo=0.9, max_depth=6)
    d["media"]["smoke"].update(density={"resolution": 8, "value": 0.04}, albedo=[0.9, 0.9, 0.9], majorant=0.2)
    return tirender.load_scene(d)


@pytest.mark.parametrize("points", [8, pytest.param(0, marks=pytest.mark.extended)], ids=["split", "collision"])
def test_prbvolpath_thin_density_matches_fd(points):
    """Both in-scattering estimators (a quadrature along each flight, Ls by an emitter sample plus a
    path; the collision alone) are unbiased where the reconstruction starts."""
    sc = _thin()
    sc.integrator["inscatter_points"] = points
    u = np.random.default_rng(7).uniform(0.5, 1.0, sc.params["smoke.density"].shape)
    g, f = projected_gradients(sc, "smoke.density", u, image_weights(sc), 32, SEEDS_PRB, SEEDS_FD, 0.03)
    assert_agree(g, f, f"smoke.density (inscatter_points={points})")


@pytest.mark.parametrize("rr", [0.1, pytest.param(1.0, marks=pytest.mark.extended)])   # 1.0: 40 s cold
def test_prbvolpath_dense_density_matches_fd(rr):
    """A dense medium (sigma_t 5-10, optical depth ~12 across the box): the in-scattering
    quadrature's Russian roulette on T (integrator.inscatter_rr; 1: at every point, survival
    probability max T) ends most flights' points, and the gradient stays unbiased."""
    d = smoke_scene(albedo=0.8, max_depth=6)
    d["integrator"]["inscatter_rr"] = rr
    d["media"]["smoke"].update(majorant=12.0)
    sc = tirender.load_scene(d)
    sc.params["smoke.density"] = np.random.default_rng(5).uniform(2.0, 4.0, (8, 8, 8, 1)).astype(np.float32)
    u = np.random.default_rng(8).uniform(0.5, 1.0, sc.params["smoke.density"].shape)
    g, f = projected_gradients(sc, "smoke.density", u, image_weights(sc), 32, SEEDS_PRB, SEEDS_FD, 0.03)
    assert_agree(g, f, f"smoke.density (dense, inscatter_rr {rr})")


@pytest.mark.slow
@pytest.mark.extended   # a variance comparison (50 s of compilation cold); the estimator's unbiasedness with the
#                         split is checked against finite differences in the default lane (tests above)
def test_inscatter_split_reduces_variance():
    """Per-voxel variance of the density gradient over independent seeds at the thin start: the
    in-scattering estimator along the flights (8 points) is far below the collision-only one (16.8x
    measured)."""
    sc = _thin()
    w = image_weights(sc)
    var = {}
    for points in (0, 8):
        sc.integrator["inscatter_points"] = points
        g = np.stack([tirender.render_grad(sc, w, spp=16, seed=900 + k, progress=False)["smoke.density"]
                      for k in range(8)]).astype(np.float64)
        var[points] = g.var(axis=0, ddof=1).sum()
    print(f"per-voxel gradient variance: collision {var[0]:.3g}, split {var[8]:.3g} ({var[0] / var[8]:.1f}x)")
    assert var[8] * 6.0 < var[0], var


@pytest.mark.extended
def test_exact_kernels_match_shared_ones(smoke):
    """A user's process compiles volume kernels for exactly the scene's models (backend.share_kernels
    off, the default); the suite shares superset kernels. Both give the same image and gradients."""
    from tirender import backend
    w = image_weights(smoke)
    res = {}
    was = backend.share_kernels()
    try:
        for shared in (True, False):
            backend.share_kernels(shared)
            img = tirender.render(smoke, spp=4, seed=21, progress=False)
            g = tirender.render_grad(smoke, w, spp=4, seed=22, progress=False)
            res[shared] = (img, {k: g[k] for k in ("smoke.density", "smoke.albedo", "smoke.g", "floor.reflectance")})
    finally:
        backend.share_kernels(was)
    np.testing.assert_allclose(res[False][0], res[True][0], rtol=1e-5, atol=1e-7)
    for k, v in res[True][1].items():
        np.testing.assert_allclose(res[False][1][k], v, rtol=1e-4, atol=1e-5 * np.abs(v).max(), err_msg=k)


def _pass_through_sheets():
    """A floor lit by the sun through a thin dielectric sheet and a masked card (Mitsuba's null components:
    volume integrators' shadow rays cross them weighted by their null transmission). Direct light only
    (max_depth 2) and the sheets outside the view: every path's light is an NEE term through the sheets."""
    return {
        "integrator": {"type": "prbvolpath", "max_depth": 2},
        "sensors": [camera([0, 0.8, 0], [0, 0, 0], up=(0, 0, 1), fov=60, w=10, h=10)],
        "shapes": [
            {"id": "floor", "type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": 0.6},
             "to_world": [{"scale": [3, 3, 1]}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]},
            {"id": "sheet", "type": "rectangle", "to_world": [{"scale": [2, 2, 1]}, {"rotate": {"axis": [1, 0, 0],
                                                                                          "angle": -80}},
                                                           {"translate": [0.6, 1.5, 0]}],
             "bsdf": {"type": "thindielectric", "int_ior": 1.6, "specular_transmittance": [0.8, 0.7, 0.9]}},
            {"id": "card", "type": "rectangle", "to_world": [{"scale": [1.2, 1.2, 1]}, {"rotate": {"axis": [1, 0, 0],
                                                                                              "angle": -90}},
                                                          {"translate": [-0.8, 2.0, 0]}],
             "bsdf": {"type": "mask", "opacity": 0.4, "bsdf": {"type": "diffuse", "reflectance": 0.5}}},
        ],
        "emitters": [{"type": "directional", "direction": [0.1, -1.0, 0.05], "irradiance": 3.0}],
    }


@pytest.mark.parametrize("pname,h", [("sheet.specular_transmittance", 0.02), ("sheet.int_ior", 0.03),
                                     ("card.opacity", 0.03)], ids=["transmittance", "int_ior", "opacity"])
def test_prbvolpath_null_transmission_matches_fd(pname, h):
    """Shadow rays through pass-through surfaces: their null transmission's adjoint (walk/media.py)."""
    sc = tirender.load_scene(_pass_through_sheets())
    img = tirender.render(sc, spp=16, seed=1, progress=False)
    sc.params["sheet.specular_transmittance"] = [0.0, 0.0, 0.0]
    sc.params["card.opacity"] = 1.0
    dark = tirender.render(sc, spp=16, seed=1, progress=False)
    sc.params["sheet.specular_transmittance"] = [0.8, 0.7, 0.9]
    sc.params["card.opacity"] = 0.4
    assert dark.mean() < 0.5 * img.mean(), (dark.mean(), img.mean())   # the sheets' shadows are in view
    u = np.ones(sc.params[pname].shape)
    g, f = projected_gradients(sc, pname, u, image_weights(sc), 8, SEEDS_PRB[:4], SEEDS_FD[:4], h)
    # a directional light and direct light only: nearly noise-free, so the float32 rounding of the renders
    # (~1e-6 relative) and the central difference's O(h²) truncation set the tolerance beside the noise
    mg, mf = g.mean(), f.mean()
    se = np.hypot(g.std(ddof=1), f.std(ddof=1)) / 2.0
    assert abs(mg - mf) <= 3.0 * se + 1e-3 * abs(mf), (pname, mg, mf, se)
    assert abs(mf) > 1e-3, (pname, mf)
