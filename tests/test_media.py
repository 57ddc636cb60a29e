"""Participating media (volpath): analytic slab transmittance (RGB, homogeneous and grids, camera
rays and NEE shadow rays), single scattering from a directional light (isotropic and HG), constant
grid == homogeneous medium, white furnace (albedo 1, RGB sigma_t, HG), ray marching vs delta
tracking; trilinear-lookup and HG adjoints vs finite differences; scene format, .vol files."""
import os

import numpy as np
import pytest
import taichi as ti

import tirender
from scenes import camera
from tirender.errors import ConfigError
from tirender.media.grid import grid_eval, grid_eval_adjoint, resample_grid, trilinear_np
from tirender.media.hg import hg_eval, hg_eval_dg
from tirender.media.phase import phase_eval, phase_sample
from tirender.media.volfile import read_vol, write_vol

SIG = np.array([0.5, 1.0, 2.0])
D = 0.5  # slab thickness


def _slab(medium, integ="volpath", emitters=None, max_depth=8, w=8, fov=4.0, extra_shapes=None, cam_z=5.0):
    """A slab z in [-D/2, D/2], 40 x 40 wide, with a null boundary, seen from above along -z."""
    return {
        "integrator": {"type": integ, "max_depth": max_depth, "rr_depth": 100},
        "sensors": [camera([0, 0, cam_z], [0, 0, 0], fov=fov, w=w, h=w)],
        "shapes": [{"id": "slab", "type": "cube", "bsdf": {"type": "null"},
                    "to_world": [{"scale": [20, 20, D / 2]}], "interior": medium}] + (extra_shapes or []),
        "emitters": emitters if emitters is not None else [{"type": "constant", "radiance": 1.0}],
    }


def _mean(img):
    return img.reshape(-1, 3).astype(np.float64).mean(0)


def _se(img, spp):
    """Standard error of the image mean from the pixel spread (pixels are iid here)."""
    px = img.reshape(-1, 3).astype(np.float64)
    return px.std(0, ddof=1) / np.sqrt(len(px))


HOMOGENEOUS_RGB = {"type": "homogeneous", "sigma_t": SIG.tolist(), "albedo": 0.0}
GRID_RGB = {"type": "grid", "density": {"resolution": 3, "value": SIG.tolist()}, "albedo": 0.0}


@pytest.mark.parametrize("medium", [HOMOGENEOUS_RGB, GRID_RGB], ids=["homogeneous", "grid"])
def test_slab_transmittance_rgb(medium):
    """Camera rays through a purely absorbing slab: L = exp(-sigma_t,c d) per channel."""
    sc = tirender.load_scene(_slab(medium))
    img = tirender.render(sc, spp=512, seed=1)
    m, se = _mean(img), _se(img, 512)
    ref = np.exp(-SIG * D)
    assert np.all(np.abs(m - ref) < 4 * se + 2e-3), (m, ref, se)


@pytest.mark.parametrize("medium", [HOMOGENEOUS_RGB, GRID_RGB], ids=["homogeneous", "grid"])
def test_slab_shadow_ray_transmittance(medium):
    """A white diffuse floor below the slab, lit by a directional light through it (NEE shadow rays:
    analytic / ratio tracking), seen directly (not through the slab):
    L = rho/pi * E cos(theta) * exp(-sigma_t,c d / cos(theta))."""
    th = np.radians(30.0)
    sun = [np.sin(th), 0.0, -np.cos(th)]
    floor = {"id": "floor", "type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": 0.5},
             "to_world": [{"scale": 30}, {"translate": [0, 0, -1.0]}]}
    d = _slab(medium, emitters=[{"type": "directional", "direction": sun, "irradiance": 3.0}], max_depth=2,
              extra_shapes=[floor])
    # look at the floor from below the slab
    d["sensors"] = [camera([0, 0, -0.5], [0, 0, -1.0], up=[0, 1, 0], fov=4.0, w=8, h=8)]
    sc = tirender.load_scene(d)
    img = tirender.render(sc, spp=256, seed=2)
    m, se = _mean(img), _se(img, 256)
    ref = 0.5 / np.pi * 3.0 * np.cos(th) * np.exp(-SIG * D / np.cos(th))
    assert np.all(np.abs(m - ref) < 4 * se + 2e-3 * ref.max()), (m, ref, se)


def _hg(g, mu):
    return (1 - g * g) / (4 * np.pi * (1 + g * g - 2 * g * mu) ** 1.5)


@pytest.mark.slow
@pytest.mark.parametrize("g", [None, -0.3], ids=["isotropic", "hg"])
def test_single_scattering_slab(g):
    """Single scattering (max_depth 2) in a thin slab lit by a directional light at 30 degrees,
    seen from above along -z:
    L = E sigma_s p(mu) (1 - exp(-sigma_t d (1 + 1/cos))) / (sigma_t (1 + 1/cos)), mu = -cos."""
    th = np.radians(30.0)
    E, alb = 10.0, 0.8
    med = {"type": "homogeneous", "sigma_t": SIG.tolist(), "albedo": alb}
    if g is not None:
        med["phase"] = {"type": "hg", "g": g}
    d = _slab(med, emitters=[{"type": "directional", "direction": [np.sin(th), 0, -np.cos(th)], "irradiance": E}],
              max_depth=2)
    sc = tirender.load_scene(d)
    img = tirender.render(sc, spp=1024, seed=3)
    m, se = _mean(img), _se(img, 1024)
    c = np.cos(th)
    p = 1 / (4 * np.pi) if g is None else _hg(g, -c)
    k = 1 + 1 / c
    ref = E * alb * SIG * p * (1 - np.exp(-SIG * D * k)) / (SIG * k)
    assert np.all(np.abs(m - ref) < 4 * se + 3e-3 * ref.max()), (m, ref, se)


def _ball(medium, emitters, w=12, max_depth=-1, integ="volpath"):
    return {
        "integrator": {"type": integ, "max_depth": max_depth, "rr_depth": 6},
        "sensors": [camera([0, 0, 4], [0, 0, 0], fov=30, w=w, h=w)],
        "shapes": [{"id": "ball", "type": "cube", "bsdf": {"type": "null"}, "interior": medium}],
        "emitters": emitters,
    }


@pytest.mark.slow
def test_constant_grid_matches_homogeneous():
    """Multiple scattering (HG, albedo 0.8) in a cube: a grid of constant density renders the same
    image as the homogeneous medium (statistically, per pixel)."""
    ems = [{"type": "constant", "radiance": [0.4, 0.5, 0.6]},
           {"type": "directional", "direction": [0.3, -1.0, -0.4], "irradiance": 2.0}]
    hom = {"type": "homogeneous", "sigma_t": 1.5, "albedo": [0.8, 0.7, 0.6], "phase": {"type": "hg", "g": 0.3}}
    grid = {"type": "grid", "density": {"resolution": 4, "value": 0.75}, "scale": 2.0,
            "albedo": [0.8, 0.7, 0.6], "phase": {"type": "hg", "g": 0.3}}
    spp = 256
    a = tirender.render(tirender.load_scene(_ball(hom, ems)), spp=spp, seed=4).astype(np.float64)
    b = tirender.render(tirender.load_scene(_ball(grid, ems)), spp=spp, seed=5).astype(np.float64)
    # per-pixel noise estimate from the difference of two independent homogeneous renders
    a2 = tirender.render(tirender.load_scene(_ball(hom, ems)), spp=spp, seed=6).astype(np.float64)
    noise = np.sqrt(((a - a2) ** 2).mean() / 2)
    assert abs(a.mean() - b.mean()) < 4 * noise / np.sqrt(a.size) * np.sqrt(2) + 2e-3
    assert np.sqrt(((a - b) ** 2).mean()) < 1.3 * np.sqrt(2) * noise
    assert a.mean() > 0.1


def test_white_furnace():
    """An albedo-1 medium in a constant environment renders the environment radiance: homogeneous
    with RGB sigma_t and HG, a heterogeneous random grid (delta + ratio tracking, NEE, MIS), and a
    homogeneous medium behind a dielectric boundary."""
    env = [{"type": "constant", "radiance": 1.0}]
    hom = {"type": "homogeneous", "sigma_t": [0.5, 1.5, 3.0], "albedo": 1.0, "phase": {"type": "hg", "g": 0.5}}
    img = tirender.render(tirender.load_scene(_ball(hom, env)), spp=1024, seed=7)
    # every channel is exact on average; per pixel the spectral MIS over very different sigma_t is noisier
    assert np.all(np.abs(_mean(img) - 1.0) < 0.01) and np.abs(img - 1.0).max() < 0.25, (_mean(img),
                                                                                          np.abs(img - 1).max())
    rng = np.random.default_rng(0)
    d = _ball({"type": "grid", "density": {"resolution": 6, "value": 1.0}, "scale": 3.0, "albedo": 1.0}, env)
    sc = tirender.load_scene(d)
    sc.params["ball.density"] = rng.uniform(0.0, 1.0, (6, 6, 6, 1)).astype(np.float32)
    img = tirender.render(sc, spp=1024, seed=8)
    assert abs(img.mean() - 1.0) < 0.005 and np.abs(img - 1.0).max() < 0.08, (_mean(img), np.abs(img - 1).max())
    # a dielectric boundary (refraction into the medium, total internal reflection) conserves energy too (the
    # cube: the kernel of the scenes above, no analytic shape's code)
    d = _ball({"type": "homogeneous", "sigma_t": 2.0, "albedo": 1.0, "phase": {"type": "hg", "g": 0.3}}, env)
    d["shapes"][0].update(bsdf={"type": "dielectric", "int_ior": 1.33})
    d["integrator"]["rr_depth"] = 20
    img = tirender.render(tirender.load_scene(d), spp=256, seed=9)
    assert abs(img.mean() - 1.0) < 0.005 and np.abs(img - 1.0).max() < 0.08, (_mean(img), np.abs(img - 1).max())


@pytest.mark.slow
def test_raymarch_matches_delta_tracking():
    """The ray-marching variant (fine steps) agrees with delta tracking on a smooth grid."""
    rng = np.random.default_rng(1)
    dens = resample_grid(rng.uniform(0.2, 1.0, (4, 4, 4, 1)).astype(np.float32), 8)
    med = {"type": "grid", "density": {"resolution": 8, "value": 1.0}, "scale": 2.0, "albedo": 0.7}
    ems = [{"type": "constant", "radiance": 1.0}, {"type": "directional", "direction": [0, -1, -1], "irradiance": 2.0}]
    imgs = []
    for integ in ("volpath", "volpath_raymarch"):
        sc = tirender.load_scene(_ball(med, ems, w=8, max_depth=6, integ=integ))
        sc.params["ball.density"] = dens
        imgs.append(tirender.render(sc, spp=256, seed=9).astype(np.float64))
    assert abs(imgs[0].mean() - imgs[1].mean()) < 0.02 * imgs[0].mean()


def _sparse_density(res=20, seed=3):
    """A sparse grid: zero except a dense blob and a few isolated spikes (most majorant cells empty)."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*(np.arange(res) + 0.5,) * 3, indexing="ij")
    d = np.exp(-((x - 0.7 * res) ** 2 + (y - 0.35 * res) ** 2 + (z - 0.5 * res) ** 2) / (2 * (0.12 * res) ** 2))
    d = np.where(d > 0.05, d, 0.0)
    for _ in range(4):
        d[tuple(rng.integers(0, res, 3))] = rng.uniform(1.0, 3.0)
    return d[..., None].astype(np.float32)


def test_cell_majorants_bound_the_density():
    """Per-cell majorants (MAJORANT_GRID^3 cells over the bbox) bound scale * density at every point
    of their cell (trilinear lookups reach one voxel beyond it), are 0 in empty cells, and are far
    below the global majorant in most cells of a sparse grid."""
    from tirender.media import GRID_MAJORANT_MARGIN, MAJORANT_GRID
    from tirender.media.medium import update_majorants
    med = {"type": "grid", "density": {"resolution": 20, "value": 0.0}, "scale": 3.0, "albedo": 0.8}
    sc = tirender.load_scene(_ball(med, [{"type": "constant", "radiance": 1.0}]))
    dens = _sparse_density()
    sc.params["ball.density"] = dens
    st = sc.bind()
    update_majorants(sc, st)
    r = MAJORANT_GRID
    cells = st.med_majgrid.to_numpy()[0, :r ** 3]
    u = np.random.default_rng(0).uniform(0, 1, (200000, 3))
    sig = 3.0 * trilinear_np(dens, u)[:, 0]
    c = np.minimum((u * r).astype(int), r - 1)
    mu = cells[(c[:, 2] * r + c[:, 1]) * r + c[:, 0]]
    assert np.all(sig <= mu * (1 + 1e-6)), (sig - mu).max()
    glob = GRID_MAJORANT_MARGIN * 3.0 * dens.max()
    assert np.isclose(cells.max(), glob, rtol=1e-5)
    assert (cells == 0).mean() > 0.5 and (cells < 0.25 * glob).mean() > 0.8, ((cells == 0).mean(), (cells < 0.25 * glob).mean())


@pytest.mark.slow
def test_sparse_grid_tracking_matches_raymarch():
    """Delta / ratio tracking through per-cell majorants (empty cells skipped) agrees with fine ray
    marching on a sparse grid with sharp spikes (means within 2 %)."""
    med = {"type": "grid", "density": {"resolution": 20, "value": 0.0}, "scale": 3.0, "albedo": 0.7,
           "phase": {"type": "hg", "g": 0.4}}
    ems = [{"type": "constant", "radiance": 1.0}, {"type": "directional", "direction": [0, -1, -1], "irradiance": 2.0}]
    imgs = []
    for integ in ("volpath", "volpath_raymarch"):
        d = _ball(med, ems, w=8, max_depth=6, integ=integ)
        d["integrator"]["step_size"] = 0.01 if integ == "volpath_raymarch" else 0.0
        sc = tirender.load_scene(d)
        sc.params["ball.density"] = _sparse_density()
        imgs.append(tirender.render(sc, spp=512, seed=9).astype(np.float64))
    assert abs(imgs[0].mean() - imgs[1].mean()) < 0.02 * imgs[0].mean(), (imgs[0].mean(), imgs[1].mean())


# ------------------------------------------------------------------------------- adjoints vs FD
_N = 48
_uq = ti.Vector.field(3, float, _N)
_wq = ti.Vector.field(3, float, _N)
_out = ti.field(float, ())


@ti.kernel
def _lookup_k(st: ti.template(), tid: ti.i32):
    _out[None] = 0.0
    for i in range(_N):
        _out[None] += _wq[i].dot(grid_eval(st, tid, _uq[i]))


@ti.kernel
def _lookup_adj_k(st: ti.template(), tid: ti.i32):
    for i in range(_N):
        grid_eval_adjoint(st, tid, _uq[i], _wq[i])


def _grid_scene(channels):
    dens = {"resolution": [3, 4, 5], "value": [1.0] * channels if channels == 3 else 1.0}
    return tirender.load_scene({
        "sensors": [camera([0, 0, 4], [0, 0, 0], w=4, h=4)],
        "shapes": [{"id": "box", "type": "cube", "bsdf": {"type": "null"},
                    "interior": {"type": "grid", "density": dens, "albedo": {"resolution": 2, "value": 0.5},
                                 "phase": {"type": "hg", "g": 0.2}}}],
        "emitters": [{"type": "constant", "radiance": 1.0}]})


@pytest.mark.parametrize("channels", [1, 3])
def test_trilinear_adjoint_matches_fd(channels):
    from tirender.launch import read_gradients, reset_gradients
    sc = _grid_scene(channels)
    rng = np.random.default_rng(channels)
    name = "box.density"
    sc.params[name] = rng.uniform(0.1, 2.0, sc.params[name].shape).astype(np.float32)
    u = rng.uniform(-0.1, 1.1, (_N, 3)).astype(np.float32)   # includes clamped border lookups
    wq = rng.uniform(-1, 1, (_N, 3)).astype(np.float32)
    _uq.from_numpy(u)
    _wq.from_numpy(wq)
    tid = [t.name for t in sc.desc.textures].index(name)

    def f():
        st = sc.bind()
        _lookup_k(st, tid)
        return float(_out[None])

    # lookup vs the numpy reference
    ref = (trilinear_np(sc.params[name], np.clip(u, 0, 1)) * (wq if channels == 3 else wq.sum(1, keepdims=True))).sum()
    assert abs(f() - ref) < 1e-4 * max(1.0, abs(ref))
    # adjoint
    st = sc.bind()
    reset_gradients(st, 2.0 ** 24)
    _lookup_adj_k(st, tid)
    grad = read_gradients(sc, st)[name].astype(np.float64)
    v0 = sc.params[name]
    for k in range(3):  # projected central differences along random directions (the lookup is linear)
        du = rng.uniform(-1, 1, v0.shape)
        h = 0.05  # keeps the density >= 0.05
        sc.params[name] = v0 + h * du
        fp = f()
        sc.params[name] = v0 - h * du
        fm = f()
        sc.params[name] = v0
        fd = (fp - fm) / (2 * h)
        assert abs(fd - (grad * du).sum()) < 2e-3 * max(1.0, abs(fd)), (fd, (grad * du).sum())


_g = ti.field(float, 64)
_mu = ti.field(float, 64)
_val = ti.field(float, 64)
_dval = ti.field(float, 64)


@ti.kernel
def _hg_k():
    for i in range(64):
        _val[i] = hg_eval(_g[i], _mu[i])
        _dval[i] = hg_eval_dg(_g[i], _mu[i])


def test_hg_adjoint_matches_fd():
    rng = np.random.default_rng(3)
    g = rng.uniform(-0.9, 0.9, 64)
    mu = rng.uniform(-1, 1, 64)
    _mu.from_numpy(mu.astype(np.float32))

    def run(gv):
        _g.from_numpy(gv.astype(np.float32))
        _hg_k()
        return _val.to_numpy().astype(np.float64), _dval.to_numpy().astype(np.float64)

    v, dv = run(g)
    assert np.allclose(v, _hg(g, mu), rtol=1e-4)
    h = 1e-3
    fd = (run(g + h)[0] - run(g - h)[0]) / (2 * h)
    assert np.allclose(dv, fd, rtol=2e-3, atol=1e-4 * np.abs(v).max())
    fd64 = (_hg(g + 1e-6, mu) - _hg(g - 1e-6, mu)) / 2e-6
    assert np.allclose(dv, fd64, rtol=1e-4, atol=1e-6)
    # normalisation and mean cosine (= g) of the model
    m = np.linspace(-1, 1, 200001)
    for gg in (-0.7, 0.0, 0.5, 0.95):
        assert abs(np.trapezoid(_hg(gg, m), m) * 2 * np.pi - 1) < 1e-3
        assert abs(np.trapezoid(m * _hg(gg, m), m) * 2 * np.pi - gg) < 1e-3


_su = ti.Vector.field(2, float, 4096)
_smu = ti.field(float, 4096)
_spdf = ti.field(float, 4096)


@ti.kernel
def _hg_sample_k(st: ti.template(), m: ti.i32):
    d_in = ti.Vector([0.0, 0.6, 0.8])
    for i in range(4096):
        wo, pdf = phase_sample(st, m, d_in, _su[i])
        _smu[i] = wo.dot(d_in)
        _spdf[i] = pdf - phase_eval(st, m, d_in, wo)


def test_hg_sampling_mean_cosine():
    sc = _grid_scene(1)
    sc.params["box.g"] = 0.6
    st = sc.bind()
    rng = np.random.default_rng(4)
    _su.from_numpy(((np.arange(4096)[:, None] + rng.uniform(size=(4096, 2))) / 4096).astype(np.float32)[
        :, [0, 1]] % 1.0)
    _hg_sample_k(st, 0)
    assert abs(_smu.to_numpy().mean() - 0.6) < 0.02
    assert np.abs(_spdf.to_numpy()).max() < 1e-3


# ------------------------------------------------------------------------------- scene format
def test_media_parameters_and_errors(tmp_path):
    data = np.random.default_rng(5).uniform(0, 1, (4, 5, 6)).astype(np.float32)
    write_vol(str(tmp_path / "d.vol"), data, (-1, -2, -3), (1, 2, 3))
    back, lo, hi = read_vol(str(tmp_path / "d.vol"))
    assert back.shape == (4, 5, 6, 1) and np.array_equal(back[..., 0], data)
    assert np.allclose(lo, (-1, -2, -3)) and np.allclose(hi, (1, 2, 3))
    np.save(tmp_path / "a.npy", np.full((2, 2, 2, 3), 0.5, np.float32))
    d = {
        "sensors": [camera([0, 0, 4], [0, 0, 0], w=4, h=4)],
        "media": {"smoke": {"type": "grid", "density": {"type": "grid", "filename": "d.vol"}, "scale": 2.0,
                            "albedo": {"data": "a.npy"}, "phase": {"type": "hg", "g": 0.1}}},
        "shapes": [{"id": "box", "type": "cube", "bsdf": {"type": "null"}, "interior": "smoke"},
                   {"id": "glass", "type": "sphere", "bsdf": {"type": "dielectric"},
                    "interior": {"type": "homogeneous", "sigma_t": [1, 2, 3], "albedo": 0.9}}],
        "emitters": [{"type": "constant", "radiance": 1.0}],
    }
    sc = tirender.load_scene(d, base_dir=str(tmp_path))
    p = sc.params
    assert p.info("smoke.density").shape == (4, 5, 6, 1) and p.info("smoke.density").kind == "grid"
    assert p.info("smoke.albedo").shape == (2, 2, 2, 3)
    assert p.info("smoke.g").shape == (1,)
    assert p.info("glass.sigma_t").shape == (3,) and p.info("glass.albedo").shape == (3,)
    assert sc.desc.media[0].bbox_min == (-1.0, -2.0, -3.0)  # from the .vol header
    assert [s.interior for s in sc.desc.shapes] == [0, 1]
    sc.resize_grid("smoke.density", 8)
    assert sc.params["smoke.density"].shape == (8, 8, 8, 1)
    bad = [
        ({"type": "fog"}, "unknown medium type"),
        ({"type": "homogeneous", "density": 1.0}, "does not apply"),
        ({"type": "grid", "density": {"resolution": 2, "value": -1.0}}, "must lie in"),
        ({"type": "homogeneous", "phase": {"type": "hg", "g": 1.5}}, "out of range"),
        ({"type": "grid", "density": {"filename": "missing.vol"}}, "file not found"),
    ]
    for spec, msg in bad:
        dd = dict(d, media={"m": spec})
        dd["shapes"] = [{"id": "box", "type": "cube", "bsdf": {"type": "null"}, "interior": "m"}]
        with pytest.raises(ConfigError, match=msg):
            tirender.load_scene(dd, base_dir=str(tmp_path))
    dd = dict(d)
    dd["shapes"] = [{"id": "box", "type": "cube", "bsdf": {"type": "null"}, "interior": "nope"}]
    with pytest.raises(ConfigError, match="unknown medium id"):
        tirender.load_scene(dd, base_dir=str(tmp_path))
    assert os.path.exists(tmp_path / "d.vol")


def test_grid_tv_and_resampling():
    from tirender.media.grid import tv_grid
    rng = np.random.default_rng(6)
    x = rng.uniform(0, 1, (5, 4, 6, 1)).astype(np.float32)
    val, g = tv_grid(x)
    u = rng.normal(size=x.shape)
    h = 1e-4
    fd = (tv_grid(x.astype(np.float64) + h * u)[0] - tv_grid(x.astype(np.float64) - h * u)[0]) / (2 * h)
    assert abs(fd - (g * u).sum()) < 1e-3 * abs(fd) + 1e-7
    # resampling to 2x and back (voxel centres aligned) reproduces a linear field exactly inside
    z, y, xx = np.meshgrid(np.arange(8), np.arange(8), np.arange(8), indexing="ij")
    lin = (0.1 * xx + 0.2 * y + 0.3 * z).astype(np.float32)[..., None]
    up = resample_grid(lin, 16)
    assert np.allclose(resample_grid(up, 8)[1:-1, 1:-1, 1:-1], lin[1:-1, 1:-1, 1:-1], atol=1e-5)
