"""Forward mode (tirender.render_forward, `tirender gradimage`): the image's directional derivative
J v, computed by the PRB replay with a tangent sink (core/pool.Tangent).

* <w, J v> forward equals <∇<w, image>, v> reverse (render_grad) for the same seed, to float
  rounding — per parameter type: RGB constants, scalar roughness, textures, area/point/env
  emitters — so the sink, the direction layout and the film weights are right for each; for a
  volume's density and albedo grids within 3 SE (its replay's random choices depend on δL);
* J v agrees with finite differences of full renders (correlated random numbers) within 3 SE;
* a seed fixes the image; the CLI writes gradimage.{npy,exr,png} with red = positive, blue =
  negative, and refuses bad flags in one line."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tirender
from test_prb_gradients import _box_scene, _glossy_scene
from scenes import smoke_scene

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def box():
    sc = tirender.load_scene(_box_scene())
    sc.params["floor.reflectance"] = np.random.default_rng(1).uniform(0.2, 0.8, (6, 6, 3)).astype(np.float32)
    return sc


@pytest.fixture(scope="module")
def glossy():
    sc = tirender.load_scene(_glossy_scene())
    sc.params["sky.radiance"] = np.random.default_rng(2).uniform(0.2, 1.5, (8, 16, 3)).astype(np.float32)
    return sc


def _forward_vs_reverse(sc, directions, seed=5, spp=8, lo=-1.0):
    """(<w, J v> forward, <∇<w, image>, v> reverse, J v) for the same seed; w uniform in [lo, 1]."""
    s = sc.sensors[0]
    w = np.random.default_rng(3).uniform(lo, 1.0, (s.height, s.width, 3)).astype(np.float32)
    jv = tirender.render_forward(sc, directions, spp=spp, seed=seed, progress=False)
    g = tirender.render_grad(sc, w, spp=spp, seed=seed, progress=False)
    fwd = float((w.astype(np.float64) * jv).sum())
    rev = sum(float((g[n] * np.broadcast_to(np.asarray(v, np.float64), g[n].shape)).sum())
              for n, v in directions.items())
    return fwd, rev, jv


@pytest.mark.parametrize("pname", ["red.reflectance", "floor.reflectance", "light.radiance", "lamp.intensity",
                                   "hidden.reflectance"])
def test_forward_equals_reverse_box(box, pname):
    v = np.random.default_rng(4).normal(size=box.params[pname].shape)
    fwd, rev, jv = _forward_vs_reverse(box, {pname: v})
    assert abs(rev) > 1e-3
    assert abs(fwd - rev) <= 2e-4 * abs(rev), (pname, fwd, rev)


def test_method_forward_is_the_reverse_gradient(box):
    """``method: forward`` (one forward pass per element, integrators/forward_gradient.py) gives PRB's gradient for
    the same seed; only the named parameters are differentiated; too many elements are refused in one line."""
    from tirender.errors import ConfigError
    s = box.sensors[0]
    w = np.random.default_rng(8).uniform(-1.0, 1.0, (s.height, s.width, 3)).astype(np.float32)
    g_rev = tirender.render_grad(box, w, spp=8, seed=5, progress=False)
    g_fwd = tirender.render_grad(box, w, spp=8, seed=5, progress=False, method="forward",
                                 params=["red.reflectance", "lamp.intensity"])
    for n in ("red.reflectance", "lamp.intensity"):
        assert np.abs(g_rev[n]).max() > 1e-3
        assert np.abs(g_fwd[n] - g_rev[n]).max() <= 2e-4 * np.abs(g_rev[n]).max(), (n, g_fwd[n], g_rev[n])
    assert not np.any(g_fwd["floor.reflectance"])            # not asked for
    with pytest.raises(ConfigError, match="one pass per parameter element: 108 elements"):
        tirender.render_grad(box, w, spp=1, progress=False, method="forward", params=["floor.reflectance"])


@pytest.mark.extended
def test_forward_equals_reverse_several_parameters_at_once(glossy):
    rng = np.random.default_rng(6)
    d = {n: rng.normal(size=glossy.params[n].shape) for n in ("metal.roughness", "plastic.roughness",
                                                               "plastic.diffuse_reflectance", "sky.radiance")}
    fwd, rev, jv = _forward_vs_reverse(glossy, d)
    assert abs(rev) > 1e-3
    assert abs(fwd - rev) <= 2e-4 * abs(rev), (fwd, rev)
    # linear in v: the sum of the single-parameter images is the joint image (same seed)
    parts = sum(tirender.render_forward(glossy, {n: v}, spp=8, seed=5, progress=False) for n, v in d.items())
    assert np.abs(parts - jv).max() <= 1e-4 * np.abs(jv).max()


def forward_vs_reverse_volume(sc, pnames, seeds, rng_seed=11):
    """Volumes: the replay picks its in-scattering point with weights |δL ...| (walk/media.py IndirectPick), so
    forward (δL = e_c) and reverse (δL from the adjoint image) draw different points for one seed: equal in
    expectation, checked within 3 SE over ``seeds`` for each parameter of ``pnames`` (random positive
    directions)."""
    rng = np.random.default_rng(rng_seed)
    for pname in pnames:
        v = rng.uniform(0.5, 1.0, sc.params[pname].shape)
        fr = np.array([_forward_vs_reverse(sc, {pname: v}, seed=s, lo=0.2)[:2] for s in seeds])
        se = np.hypot(*(fr.std(axis=0, ddof=1) / np.sqrt(len(fr))))
        assert abs(fr[:, 0].mean() - fr[:, 1].mean()) <= 3 * se, (pname, fr.mean(axis=0), se)
        assert abs(fr[:, 1].mean()) > 3 * se


@pytest.mark.slow
@pytest.mark.extended   # the default lane: the density on the exact kernels (tests/test_prbvolpath.py)
def test_forward_agrees_with_reverse_volume():
    """Forward vs reverse on volumes (forward_vs_reverse_volume): the density and albedo grids, shared kernels."""
    sc = tirender.load_scene(smoke_scene())
    sc.params["smoke.density"] = np.random.default_rng(11).uniform(0.3, 1.0, (8, 8, 8, 1)).astype(np.float32)
    forward_vs_reverse_volume(sc, ("smoke.density", "smoke.albedo"), seeds=range(30, 38))


@pytest.mark.extended   # 95 s of compilation cold (the glossy scene's forward kernel); the default lane checks
#                         forward = reverse per seed (test_forward_equals_reverse_box) and reverse against finite
#                         differences (tests/test_prb_gradients.py, the same glossy roughness)
def test_forward_matches_finite_differences(glossy):
    """J v per pixel against (render(π + h v) - render(π - h v)) / 2h with the same seeds, summed
    over a weighted window (the per-pixel values are noisy): within 3 SE, and clearly non-zero."""
    pname, h = "metal.roughness", 0.01
    s = glossy.sensors[0]
    w = np.random.default_rng(0).uniform(0.2, 1.0, (s.height, s.width, 3))
    f, g = [], []
    v0 = glossy.params[pname]
    for seed in range(20, 28):
        g.append(float((w * tirender.render_forward(glossy, {pname: 1.0}, spp=16, seed=seed, progress=False)).sum()))
    for seed in range(40, 52):
        glossy.params[pname] = v0 + h
        a = tirender.render(glossy, spp=16, seed=seed, progress=False).astype(np.float64)
        glossy.params[pname] = v0 - h
        b = tirender.render(glossy, spp=16, seed=seed, progress=False).astype(np.float64)
        f.append(float((w * (a - b)).sum() / (2 * h)))
    glossy.params[pname] = v0
    g, f = np.array(g), np.array(f)
    se = np.hypot(g.std(ddof=1) / np.sqrt(len(g)), f.std(ddof=1) / np.sqrt(len(f)))
    assert abs(g.mean() - f.mean()) <= 3 * se, (g.mean(), f.mean(), se)
    assert abs(f.mean()) > 3 * f.std(ddof=1) / np.sqrt(len(f))


def test_forward_is_deterministic_and_checks_its_input(box):
    a = tirender.render_forward(box, {"red.reflectance": [1.0, 0.0, 0.0]}, spp=4, seed=9, progress=False)
    b = tirender.render_forward(box, {"red.reflectance": [1.0, 0.0, 0.0]}, spp=4, seed=9, progress=False)
    assert np.array_equal(a, b)
    assert a[..., 0].min() >= 0.0 and a[..., 0].sum() > 0 and np.abs(a[..., 1:]).max() == 0.0   # red only
    with pytest.raises(tirender.ConfigError, match="unknown parameter"):
        tirender.render_forward(box, {"nope.reflectance": 1.0}, spp=1)
    with pytest.raises(tirender.ConfigError, match="direction has 5 values"):
        tirender.render_forward(box, {"red.reflectance": np.ones(5)}, spp=1)
    with pytest.raises(tirender.ConfigError, match="non-finite"):
        tirender.render_forward(box, {"red.reflectance": [1.0, np.nan, 0.0]}, spp=1)
    with pytest.raises(tirender.ConfigError, match="has no forward mode"):
        tirender.render_forward(box, {"red.reflectance": 1.0}, spp=1, method="rb")


def test_diverging_colours():
    from tirender.io.images import diverging
    rgb, scale = diverging(np.array([[0.0, 2.0, -2.0, 1.0, np.nan]]), scale=2.0)
    assert scale == 2.0
    assert rgb[0, 0].tolist() == [255, 255, 255]          # zero: white
    assert rgb[0, 1].tolist() == [255, 0, 0]              # positive: red
    assert rgb[0, 2].tolist() == [0, 0, 255]              # negative: blue
    assert rgb[0, 3].tolist() == [255, 128, 128]          # half way: pale red
    assert rgb[0, 4].tolist() == [0, 0, 0]                # NaN: black


def _cli(*a):
    return subprocess.run([sys.executable, "-m", "tirender", *a], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, TIRENDER_ARCH="cpu"))


def test_gradimage_cli(tmp_path):
    import imageio.v3 as iio
    out = str(tmp_path / "g")
    p = _cli("gradimage", "configs/cbox.yaml", "--param", "red.reflectance", "--index", "0", "--spp", "4",
             "--out", out, "--set", "scene.sensors.0.film.width=32", "--set", "scene.sensors.0.film.height=32")
    assert p.returncode == 0, p.stderr
    assert "d image / d red.reflectance[0]" in p.stdout
    jv = np.load(os.path.join(out, "gradimage.npy"))
    assert jv.shape == (32, 32, 3) and np.abs(jv[..., 1:]).max() == 0.0 and jv[..., 0].max() > 0
    png = iio.imread(os.path.join(out, "gradimage.png"))
    hot = np.unravel_index(np.argmax(jv[..., 0]), jv.shape[:2])
    assert png[hot][0] == 255 and png[hot][2] < 100                      # the red wall's pixels are red
    assert os.path.exists(os.path.join(out, "gradimage.exr"))
    for args, key in ((("--param", "nope"), "--param"), (("--param", "red.reflectance", "--index", "3"), "--index"),
                      (("--param", "red.reflectance", "--spp", "0"), "--spp")):
        p = _cli("gradimage", "configs/cbox.yaml", *args, "--out", out)
        assert p.returncode == 2 and key in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.vulkan
def test_gradimage_refused_on_vulkan_in_one_line(tmp_path):
    import tirender.backend as backend
    if not backend.vulkan_devices():
        pytest.skip("no Vulkan device (apt-get install mesa-vulkan-drivers)")
    p = _cli("gradimage", "configs/cbox.yaml", "--param", "red.reflectance", "--spp", "1", "--arch", "vulkan",
             "--out", str(tmp_path / "g"), "--set", "scene.sensors.0.film.width=8",
             "--set", "scene.sensors.0.film.height=8")
    assert p.returncode == 2 and "forward mode needs the CPU or CUDA backend" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not os.listdir(tmp_path / "g")          # nothing written
