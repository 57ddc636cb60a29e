"""tirender.torch: the torch backward equals render_grad bit for bit for the same seeds (RGB, bitmap,
volume grid), multi-view graphs sum per-call gradients, the radiance-field function matches
backward_rays and finite differences, a torch-Adam texture recovery converges like `tirender
optimize`, and `import tirender` works without torch."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tirender  # noqa: E402
import tirender.torch as tt  # noqa: E402
from scenes import camera, smoke_scene  # noqa: E402
from tirender.errors import ConfigError  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
TEX = "canvas.reflectance"


def _canvas(tex_file, w=32):
    """A textured plane (16x16 bitmap), a diffuse side wall and an area light; two sensors."""
    return {"integrator": {"type": "path", "max_depth": 3},
            "sensors": [camera([0, 0, 3], [0, 0, 0], fov=37.3, w=w, h=w),
                        camera([1.2, 0.3, 2.7], [0, 0, 0], fov=37.3, w=w, h=w)],
            "bsdfs": {"canvas": {"type": "diffuse", "reflectance": {"type": "bitmap", "data": tex_file, "wrap": "clamp"}},
                      "wall": {"type": "diffuse", "reflectance": [0.6, 0.5, 0.4]}},
            "shapes": [{"id": "canvas", "type": "rectangle", "bsdf": "canvas"},
                       {"id": "wall", "type": "rectangle", "bsdf": "wall",
                        "to_world": [{"rotate": {"axis": [0, 1, 0], "angle": 90}}, {"translate": [-1, 0, 0]}]},
                       {"id": "light", "type": "rectangle",
                        "to_world": [{"scale": 0.6}, {"look_at": {"origin": [0.0, 1.2, 2.0], "target": [0, 0, 0],
                                                                  "up": [0, 1, 0]}}],
                        "emitter": {"type": "area", "radiance": [12, 12, 12]}}]}


@pytest.fixture(scope="module")
def tex_file(tmp_path_factory):
    truth = np.random.default_rng(0).uniform(0.1, 0.9, (16, 16, 3)).astype(np.float32)
    path = str(tmp_path_factory.mktemp("torch") / "tex.npy")
    np.save(path, truth)
    return path


@pytest.fixture(scope="module")
def canvas(tex_file):
    return tirender.load_scene(_canvas(tex_file))


def _weights(shape, seed):
    return torch.from_numpy(np.random.default_rng(seed).uniform(0.2, 1.0, shape).astype(np.float32))


def _ref_grad(scene, values, w, spp, seed, seed_grad, sensor=0):
    """(image, gradients) of tirender's own API at `values` ({name: array})."""
    for n, v in values.items():
        scene.params[n] = v
    img = tirender.render(scene, spp=spp, seed=seed, sensor=sensor, progress=False)
    return img, tirender.render_grad(scene, w, spp=spp, seed=seed_grad, sensor=sensor, progress=False)


def test_float32_tensors_written_on_the_device(canvas, monkeypatch):
    """A float32 CPU tensor (Taichi on the CPU) goes into the device pool in place — same image as
    the host path, the host copy follows — and a bad value is refused on the device, writing nothing."""
    calls = []
    orig = canvas.write_param_device
    monkeypatch.setattr(canvas, "write_param_device", lambda n, t: calls.append(n) or orig(n, t))
    tex = torch.from_numpy(np.random.default_rng(4).uniform(0.1, 0.9, (16, 16, 3)).astype(np.float32))
    img = tt.render(canvas, {TEX: tex}, spp=4, seed=3)
    assert calls == [TEX]
    np.testing.assert_array_equal(canvas.params[TEX], tex.numpy())
    canvas.params[TEX] = np.full((16, 16, 3), 0.5, np.float32)
    canvas.params[TEX] = tex.numpy()                   # the host path, from another value
    np.testing.assert_array_equal(img.numpy(), tirender.render(canvas, spp=4, seed=3, progress=False))
    for bad in (float("nan"), -0.5, float("inf")):
        t = tex.clone()
        t[3, 4, 1] = bad
        with pytest.raises(ConfigError, match="1 value"):
            canvas.write_param_device(TEX, t.reshape(-1))
        np.testing.assert_array_equal(canvas.params[TEX], tex.numpy())
    with pytest.raises(ConfigError, match="flat"):
        canvas.write_param_device(TEX, tex)
    rad = canvas.params["light.radiance"]                 # bounds [0, inf): +Inf is still refused
    with pytest.raises(ConfigError, match="1 value"):
        canvas.write_param_device("light.radiance", torch.tensor([1.0, float("inf"), 1.0]))
    np.testing.assert_array_equal(canvas.params["light.radiance"], rad)


def test_backward_equals_render_grad_bitwise(canvas):
    rng = np.random.default_rng(1)
    tex0 = rng.uniform(0.2, 0.8, (16, 16, 3))
    tex = torch.tensor(tex0, dtype=torch.float64, requires_grad=True)     # float64: gradients exactly
    rad = torch.tensor([10.0, 11.0, 12.0], dtype=torch.float64, requires_grad=True)
    wall = torch.tensor([0.3, 0.5, 0.7])                                  # no grad: set, not differentiated
    img = tt.render(canvas, {TEX: tex, "light.emitter.radiance.value": rad, "wall.reflectance": wall},
                    spp=4, seed=5, seed_grad=9)
    assert img.shape == (32, 32, 3) and img.dtype == torch.float32 and img.requires_grad
    w = _weights((32, 32, 3), 2)
    (img * w).sum().backward()
    ref_img, g = _ref_grad(canvas, {TEX: tex0, "light.radiance": [10, 11, 12], "wall.reflectance": wall.numpy()},
                           w.numpy(), 4, 5, 9)
    np.testing.assert_array_equal(img.detach().numpy(), ref_img)
    assert tex.grad.dtype == torch.float64 and tex.grad.shape == (16, 16, 3)
    np.testing.assert_array_equal(tex.grad.numpy(), g[TEX])
    np.testing.assert_array_equal(rad.grad.numpy(), g["light.radiance"])
    assert np.abs(g[TEX]).min() > 0 and np.all(g["light.radiance"] > 0)
    assert wall.grad is None
    # float32 inputs get float32 gradients; the default adjoint seed is adjoint_seed(seed) != seed
    tex32 = torch.tensor(tex0, dtype=torch.float32, requires_grad=True)
    (tt.render(canvas, {TEX: tex32}, spp=4, seed=5) * w).sum().backward()
    _, g2 = _ref_grad(canvas, {TEX: tex0.astype(np.float32)}, w.numpy(), 4, 5, tt.adjoint_seed(5))
    assert tex32.grad.dtype == torch.float32 and tt.adjoint_seed(5) != 5
    np.testing.assert_array_equal(tex32.grad.numpy(), g2[TEX].astype(np.float32))
    # a value broadcast by the pool (one number for an RGB) gets the summed gradient
    s = torch.tensor(11.0, dtype=torch.float64, requires_grad=True)
    (tt.render(canvas, {"light.radiance": s}, spp=4, seed=5, seed_grad=9) * w).sum().backward()
    _, g3 = _ref_grad(canvas, {"light.radiance": [11, 11, 11]}, w.numpy(), 4, 5, 9)
    assert s.grad.shape == () and s.grad.item() == pytest.approx(g3["light.radiance"].sum(), rel=1e-12)
    # another gradient method goes through as configured
    tex_rb = torch.tensor(tex0, requires_grad=True)
    (tt.render(canvas, {TEX: tex_rb}, spp=2, seed=5, seed_grad=9, method="rb") * w).sum().backward()
    canvas.params[TEX] = tex0
    g4 = tirender.render_grad(canvas, w.numpy(), spp=2, seed=9, method="rb", progress=False)
    np.testing.assert_array_equal(tex_rb.grad.numpy(), g4[TEX])
    assert not np.allclose(g4[TEX], g[TEX], rtol=1e-3)


def test_multiview_sum_and_replay_of_forward_values(canvas):
    """Two sensors in one graph: the gradient is the sum of both render_grad calls; and a backward
    run after another forward changed the values still differentiates at its own forward's values."""
    base = np.full((16, 16, 3), 0.5)
    tex = torch.tensor(base, requires_grad=True)
    w0, w1 = _weights((32, 32, 3), 3), _weights((32, 32, 3), 4)
    img0 = tt.render(canvas, {TEX: tex}, spp=4, seed=11, sensor=0)
    img1 = tt.render(canvas, {TEX: tex}, spp=4, seed=12, sensor=1)
    ((img0 * w0).sum() + (img1 * w1).sum()).backward()
    _, ga = _ref_grad(canvas, {TEX: base}, w0.numpy(), 4, 11, tt.adjoint_seed(11), sensor=0)
    _, gb = _ref_grad(canvas, {TEX: base}, w1.numpy(), 4, 12, tt.adjoint_seed(12), sensor=1)
    np.testing.assert_allclose(tex.grad.numpy(), ga[TEX] + gb[TEX], rtol=1e-12, atol=0)
    assert not np.allclose(ga[TEX], gb[TEX], rtol=0.1)    # the two views do differ
    # stale values: forward A (dim light), forward B (bright light, other texture), backward A only
    rad_a = torch.tensor([4.0, 4.0, 4.0], requires_grad=True)
    tex_a = torch.tensor(base * 0.4, requires_grad=True)
    img_a = tt.render(canvas, {TEX: tex_a, "light.radiance": rad_a}, spp=4, seed=13)
    tt.render(canvas, {TEX: torch.full((16, 16, 3), 0.9), "light.radiance": torch.tensor([20.0, 20.0, 20.0])},
              spp=4, seed=14)
    (img_a * w0).sum().backward()
    _, gs = _ref_grad(canvas, {TEX: base * 0.4, "light.radiance": [4, 4, 4]}, w0.numpy(), 4, 13, tt.adjoint_seed(13))
    np.testing.assert_array_equal(rad_a.grad.numpy(), gs["light.radiance"].astype(np.float32))
    np.testing.assert_array_equal(tex_a.grad.numpy(), gs[TEX])


def test_bad_input_is_one_config_error(canvas):
    tex = torch.full((16, 16, 3), 0.5)
    for params, kw, word in [({"canvas.nope": tex}, {}, "unknown parameter"),
                             ({TEX: torch.full((8, 8, 3), 0.5)}, {}, "wrong shape"),
                             ({TEX: torch.full((16, 16, 3), 1.5)}, {}, "out of bounds"),
                             ({TEX: tex.requires_grad_()}, {"method": "magic"}, "unknown gradient method"),
                             ({TEX: tex}, {"spp_grad": 0}, "spp_grad")]:
        with pytest.raises(ConfigError, match=word) as e:
            tt.render(canvas, params, spp=1, **kw)
        assert "\n" not in str(e.value)


def test_volume_grid_prbvolpath_bitwise():
    sc = tirender.load_scene(smoke_scene())
    d0 = np.random.default_rng(5).uniform(0.3, 1.0, (8, 8, 8, 1))
    dens = torch.tensor(d0, requires_grad=True)
    img = tt.render(sc, {"smoke.density": dens}, spp=4, seed=21, seed_grad=22)
    w = _weights((12, 12, 3), 6)
    (img * w).sum().backward()
    ref_img, g = _ref_grad(sc, {"smoke.density": d0}, w.numpy(), 4, 21, 22)
    np.testing.assert_array_equal(img.detach().numpy(), ref_img)
    np.testing.assert_array_equal(dens.grad.numpy(), g["smoke.density"])
    assert dens.grad.shape == (8, 8, 8, 1) and np.count_nonzero(g["smoke.density"]) > 100


def _field_case():
    from tirender.radiance_field import RadianceField
    from tirender.radiance_field.field import channels
    rng = np.random.default_rng(7)
    R, deg = 4, 1
    P = np.zeros((R, R, R, channels(deg)))
    P[..., 0] = rng.uniform(0.3, 2.0, (R, R, R))
    P[..., 1:] = rng.normal(0, 0.6, (R, R, R, channels(deg) - 1))
    n = 40
    o = rng.normal(size=(n, 3))
    o = 3.0 * o / np.linalg.norm(o, axis=1, keepdims=True)
    d = rng.uniform(-0.5, 0.5, (n, 3)) - o
    fld = RadianceField(R, deg, density_activation="softplus", color_activation="sigmoid", t_min=0.0,
                        background=(0.1, 0.2, 0.3), params=P)
    return fld, P, o, d, rng.random(n), rng.uniform(0.2, 1.0, (n, 3))


def test_radiance_field_matches_backward_rays_and_fd():
    from tirender.radiance_field import backward_rays, render_rays
    fld, P, o, d, jit, w = _field_case()
    x = torch.tensor(P, requires_grad=True)
    L = tt.render_rays(fld, x, torch.from_numpy(o), d, jit, mode="ordered")
    assert L.shape == (40, 3) and L.requires_grad
    marker = np.arange(fld.n_params, dtype=np.float32).reshape(fld.to_numpy().shape)
    fld.grad.from_numpy(fld.grid_to_flat(marker))                   # field.grad is left as it was
    (L * torch.from_numpy(w)).sum().backward()
    np.testing.assert_array_equal(fld.grad_numpy(), marker)
    # the existing backward on the same rays
    fld.from_numpy(P)
    L0, ns = render_rays(fld, o, d, jit)
    np.testing.assert_array_equal(L.detach().numpy(), L0)
    fld.zero_grad()
    backward_rays(fld, o, d, jit, L0, w, ns, mode="ordered")
    g_ref = fld.grad_numpy()
    np.testing.assert_array_equal(x.grad.numpy(), g_ref.astype(np.float64))
    assert np.count_nonzero(g_ref) > 0.5 * g_ref.size
    # central differences of <w, L(x)> along random directions (smooth activations, fixed step count)
    rng = np.random.default_rng(8)
    for _ in range(3):
        u = rng.normal(size=P.shape)
        h = 1e-2
        fd = [(render_rays(_with(fld, P + s * h * u), o, d, jit)[0].astype(np.float64) * w).sum() for s in (1, -1)]
        fd = (fd[0] - fd[1]) / (2 * h)
        an = float((x.grad.numpy() * u).sum())
        assert an == pytest.approx(fd, rel=2e-2, abs=1e-3)


def _with(fld, P):
    fld.from_numpy(P)
    return fld


def _texture_task(tex_file, iters, lr, spp):
    return {"scene": _canvas(tex_file),
            "optimize": {"params": {TEX: {"init": 0.5, "lr": lr}}, "views": [0], "target": {"type": "render", "spp": 64,
                                                                                       "seed": 1000},
                         "loss": "l2", "optimizer": {"type": "adam"}, "iters": iters, "spp": spp, "save_every": 1000}}


def test_torch_adam_converges_like_tirender_optimize(tex_file, tmp_path):
    """Texture recovery (16x16 texels, one 32x32 view, 8 spp, 30 Adam steps at lr 0.05): the torch
    loop reaches about the parameter error of `tirender optimize` on the same task (a wrong sign or
    scale of the gradient would leave it at or above the start error)."""
    from tirender.config import load_config
    from tirender.optim.driver import run_optimization
    iters, lr, spp = 30, 0.05, 8
    cfg = load_config(_texture_task(tex_file, iters, lr, spp))
    m = run_optimization(cfg, out=str(tmp_path / "driver"))["params"][TEX]
    sc = tirender.load_scene(_canvas(tex_file))
    truth = sc.params[TEX]
    target = torch.from_numpy(tirender.render(sc, spp=64, seed=1000, progress=False))
    tex = torch.full((16, 16, 3), 0.5, requires_grad=True)
    opt = torch.optim.Adam([tex], lr=lr)
    for it in range(iters):
        opt.zero_grad()
        img = tt.render(sc, {TEX: tex}, spp=spp, seed=2 * it + 1)
        ((img - target) ** 2).mean().backward()
        opt.step()
        with torch.no_grad():
            tex.clamp_(0.0, 1.0)
    start = float(np.sqrt(((0.5 - truth) ** 2).mean()))
    end = float(np.sqrt(((tex.detach().numpy() - truth) ** 2).mean()))
    assert m["rmse_start"] == pytest.approx(start, rel=1e-6)
    assert m["rmse_end"] < 0.6 * start                      # the driver converges on this task ...
    assert end < 0.6 * start                                # ... and so does torch's Adam
    assert end == pytest.approx(m["rmse_end"], rel=0.35)    # ... about as far


def test_import_without_torch():
    """`import tirender` never imports torch; `import tirender.torch` without it says how to install it."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT))
    code = ("import sys; sys.modules['torch'] = None\n"
            "import tirender, tirender.api, tirender.radiance_field\n"
            "try:\n    import tirender.torch\nexcept ImportError as e:\n    print('HINT', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == 'HINT tirender.torch needs PyTorch: pip install "tirender[torch]"'
    r = subprocess.run([sys.executable, "-c", "import sys, tirender, tirender.api; print('torch' in sys.modules)"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "False", r.stderr
