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


def test_volume_recovery_config_end_to_end(tmp_path):
    """configs/volume_recovery.yaml through the driver, cut to 6 iterations at 16x16 on three views (its kernels
    are this file's: the suite's shared volume kernels): a stage change 8^3 -> 16^3, the held-out view, the
    outputs; the density moves towards the truth and the held-out view's error falls (the extended lane: the
    density's RMSE halves in 60 iterations)."""
    import os
    from tirender.config import load_config
    from tirender.optim.driver import OptimizationRun
    cfg = load_config(os.path.join(os.path.dirname(__file__), "..", "configs", "volume_recovery.yaml"),
                      ["optimize.iters=6", "optimize.target.spp=32", "optimize.spp=4", "optimize.spp_grad=4",
                       "optimize.multires={smoke.density: [[0, 8], [3, 16]]}", "optimize.save_every=3",
                       "optimize.views=[0, 2, 4]"])
    for s in cfg["scene"]["sensors"]:
        s["film"]["width"] = s["film"]["height"] = 16
    m = OptimizationRun(cfg, out=str(tmp_path / "run")).run()
    p, h = m["params"]["smoke.density"], m["holdout"]["6"]
    assert m["iterations"] == 6, m
    assert p["rmse_end"] < 0.9 * p["rmse_start"] and h["rmse_end"] < h["rmse_start"], m    # measured: -28 %, -21 %
    out = tmp_path / "run"
    assert np.load(out / "params" / "smoke.density.npy").shape == (16, 16, 16, 1)
    for f in ("params/smoke.density_slices.png", "params/smoke.density_truth_slices.png",
              "params/smoke.density.vol", "holdout_view6_end.png", "holdout_view6_target.png"):
        assert (out / f).exists(), f


@pytest.mark.slow
@pytest.mark.extended     # the default lane: test_volume_recovery_config_end_to_end
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


def _each_kernel_kind(fn):
    """{shared: fn()} with the volume kernels compiled for the suite's superset of models (shared=True) and for
    exactly the scene's models (False: what a user's process compiles, backend.share_kernels off by default)."""
    from tirender import backend
    was = backend.share_kernels()
    out = {}
    try:
        for shared in (True, False):
            backend.share_kernels(shared)
            out[shared] = fn()
    finally:
        backend.share_kernels(was)
    return out


def test_exact_kernels_match_shared_ones(smoke):
    """The volume integrators (the only kernels backend.share_kernels changes, see the test below): the image
    (volpath: delta tracking) and gradients (prbvolpath) compiled for exactly the scene's models as in a user's
    process and for the suite's superset are the same (the superset only adds untaken branches; the ray-marched
    and Stokes images and forward mode go through the same kernel_dispatch and args). Forward mode on volumes
    runs on the exact kernels below, the polarized medium in tests/test_polarization.py too."""
    from tirender.integrators import volpath
    w = image_weights(smoke)
    spec = _each_kernel_kind(lambda: volpath.kernel_dispatch(smoke)[1])
    assert spec[True] != spec[False], "the two settings compile the same kernel: nothing compared"

    def run():
        img = tirender.render(smoke, spp=4, seed=21, progress=False)
        g = tirender.render_grad(smoke, w, spp=4, seed=22, progress=False)
        return img, {k: g[k] for k in ("smoke.density", "smoke.albedo", "smoke.g", "floor.reflectance")}
    res = _each_kernel_kind(run)
    assert res[True][0].mean() > 0.01
    np.testing.assert_allclose(res[False][0], res[True][0], rtol=1e-5, atol=1e-7)
    for k, v in res[True][1].items():
        assert np.abs(v).max() > 0, k
        np.testing.assert_allclose(res[False][1][k], v, rtol=1e-4, atol=1e-5 * np.abs(v).max(), err_msg=k)


def test_share_kernels_reaches_the_volume_kernels_only():
    """backend.share_kernels (the suite's setting) changes only the volume integrators' specialisation
    (integrators/volpath.py kernel_dispatch and args, which volpath, volpath_raymarch, prbvolpath, their forward
    mode and stokes with media call): no other module reads it, so the surface integrators compile exactly the
    kernels a user's process does. A new reader needs its family in the test above."""
    import pathlib
    pkg = pathlib.Path(tirender.__file__).parent
    readers = sorted(str(f.relative_to(pkg)) for f in pkg.rglob("*.py")
                     if "share_kernels" in f.read_text() or "_shared()" in f.read_text())
    assert readers == ["backend.py", "integrators/volpath.py"], readers
    src = (pkg / "integrators" / "volpath.py").read_text()
    assert src.count("_shared()") == 3, "_shared() read outside kernel_dispatch / args"   # its def and two uses


def test_forward_agrees_with_reverse_volume_exact_kernels(smoke):
    """Forward mode on volumes with a user's exact kernels: <w, J v> for the density grid agrees with the reverse
    gradient within 3 SE over seeds (tests/test_forward_mode.py: the extended lane also checks the albedo grid, on
    the shared kernels)."""
    from test_forward_mode import forward_vs_reverse_volume
    from tirender import backend
    was = backend.share_kernels()
    try:
        backend.share_kernels(False)
        forward_vs_reverse_volume(smoke, ("smoke.density",), seeds=range(30, 38))
    finally:
        backend.share_kernels(was)


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
