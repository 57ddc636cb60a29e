"""The Python optimisation loop written as Mitsuba's tutorial (tirender.Adam / tirender.SGD over a scene's named
parameters, optim/scene_optimizer.py): the loop of the models issue runs as written and recovers the red wall, it
takes the same steps as `tirender optimize` on the same settings, its state round-trips, and misuse is one
ConfigError line."""
import numpy as np
import pytest
import yaml

import tirender
from tirender.config import load_config
from tirender.errors import ConfigError
from tirender.optim.driver import run_optimization
from tirender.optim.views import view_seed

from scenes import cornell_like


def _scene(w=24):
    return tirender.load_scene(cornell_like(w=w, max_depth=3))


def test_mitsuba_style_loop_recovers_the_red_wall():
    """The contract loop (issue: models, item 3): grey start, 40 iterations of render -> l2 -> render_grad ->
    opt.step; the red reflectance's RMSE falls at least 5x, and every value stays in its bounds."""
    scene = _scene()
    truth = scene.params["red.reflectance"].copy()
    target = tirender.render(scene, spp=256, seed=999, progress=False)
    scene.params["red.reflectance"] = [0.5, 0.5, 0.5]
    rmse0 = float(np.sqrt(np.mean((scene.params["red.reflectance"] - truth) ** 2)))
    opt = tirender.Adam(scene, lr=0.05, params=["red.reflectance"])
    for it in range(40):
        img = tirender.render(scene, spp=8, seed=1 + it, progress=False)
        loss, dy = tirender.losses.l2(img, target)
        opt.step(tirender.render_grad(scene, dy, spp=8, seed=1000 + it, progress=False))
    got = scene.params["red.reflectance"]
    rmse = float(np.sqrt(np.mean((got - truth) ** 2)))
    assert rmse * 5 <= rmse0, (rmse0, rmse, got, truth)
    assert np.all((got >= 0) & (got <= 1))


def test_same_steps_as_the_yaml_driver(tmp_path):
    """Same scene, target, seeds, spp, loss, learning rate and ε: the Python loop ends at the driver's parameters
    (the same kernels on the same pool: equal to float32 rounding)."""
    d = {"scene": cornell_like(w=16, max_depth=3),
         "optimize": {"params": {"red.reflectance": {"init": 0.4, "lr": 0.05}}, "iters": 6, "spp": 4, "seed": 3,
                      "save_every": 100, "target": {"type": "render", "spp": 32, "seed": 77},
                      "optimizer": {"type": "adam", "eps_mode": "absolute", "eps": 1e-8}}}
    p = tmp_path / "opt.yaml"
    p.write_text(yaml.safe_dump(d))
    run_optimization(load_config(str(p)), out=str(tmp_path / "o"))
    want = np.load(tmp_path / "o" / "params" / "red.reflectance.npy")

    scene = tirender.load_scene(cornell_like(w=16, max_depth=3))
    target = tirender.render(scene, spp=32, seed=77, progress=False)
    scene.params["red.reflectance"] = 0.4
    opt = tirender.Adam(scene, lr={"red.reflectance": 0.05})
    for it in range(6):
        img = tirender.render(scene, spp=4, seed=view_seed(3, it, 0, 0), progress=False)
        _, dy = tirender.losses.l2(img, target)
        opt.step(tirender.render_grad(scene, dy, spp=4, seed=view_seed(3, it, 0, 1), progress=False))
    np.testing.assert_allclose(scene.params["red.reflectance"], want, rtol=0, atol=2e-6)


def test_state_dict_round_trip_and_sgd():
    """Adam's per-parameter state restores the trajectory; SGD with momentum takes x − lr·m steps."""
    scene = _scene(w=8)
    target = np.full((8, 8, 3), 0.2, np.float32)

    def run(opt, its):
        for it in its:
            _, dy = tirender.losses.l2(tirender.render(scene, spp=2, seed=it, progress=False), target)
            opt.step(tirender.render_grad(scene, dy, spp=2, seed=100 + it, progress=False))

    start = scene.params["red.reflectance"].copy()
    a = tirender.Adam(scene, lr=0.02, params=["red.reflectance", "white.reflectance"])
    run(a, range(2))
    state = a.state_dict()
    mid = {n: scene.params[n].copy() for n in ("red.reflectance", "white.reflectance")}
    assert state["t"] == 2 and state["m:red.reflectance"].shape == (3,)
    run(a, range(2, 4))
    end = scene.params["red.reflectance"].copy()
    for n, v in mid.items():
        scene.params[n] = v
    b = tirender.Adam(scene, lr=0.02, params=["red.reflectance", "white.reflectance"])
    b.load_state_dict(state)
    run(b, range(2, 4))
    np.testing.assert_allclose(scene.params["red.reflectance"], end, atol=1e-6)

    scene.params["red.reflectance"] = start
    s = tirender.SGD(scene, lr=0.1, params=["red.reflectance"], momentum=0.5)
    _, dy = tirender.losses.l2(tirender.render(scene, spp=2, seed=9, progress=False), target)
    g = tirender.render_grad(scene, dy, spp=2, seed=109, progress=False)
    s.step(g)
    np.testing.assert_allclose(scene.params["red.reflectance"], np.clip(start - 0.1 * g["red.reflectance"], 0, 1),
                               atol=1e-6)


@pytest.mark.parametrize("call,needle", [
    (lambda sc: tirender.Adam("scene.xml"), "scene: expected a tirender Scene"),
    (lambda sc: tirender.Adam(sc, lr=0.1, params=["red.colour"]), "params: unknown parameter 'red.colour'"),
    (lambda sc: tirender.Adam(sc, lr=0.1, params=5), "params: expected a list"),
    (lambda sc: tirender.Adam(sc, lr="fast", params=["red.reflectance"]), "lr: expected a number"),
    (lambda sc: tirender.Adam(sc, lr={"white.reflectance": 0.1}, params=["red.reflectance"]), "lr: a learning rate"),
    (lambda sc: tirender.Adam(sc, lr=0.1, params=["red.reflectance"], beta1=1.5), "beta1: must be in [0, 1)"),
    (lambda sc: tirender.Adam(sc, lr=0.1, params=["red.reflectance"], eps_mode="huge"), "eps_mode: unknown"),
    (lambda sc: tirender.SGD(sc, lr=-1.0, params=["red.reflectance"]), "lr: expected a number ≥ 0"),
    (lambda sc: tirender.Adam(sc, lr=0.1, params=["red.reflectance"]).step([1, 2]), "grads: expected"),
    (lambda sc: sc.params.__setitem__("red.reflectance", "red"), "red.reflectance: expected a number"),
    (lambda sc: sc.params.__setitem__("red.reflectance", [[0.1], [0.2, 0.3]]), "red.reflectance: expected a number"),
    (lambda sc: sc.params.__setitem__("red.reflectance", None), "red.reflectance: expected a number"),
    (lambda sc: tirender.losses.l2(np.zeros((4, 4, 3)), np.zeros((5, 5, 3))),
     "target: shape (5, 5, 3) differs from the image's (4, 4, 3)"),
    (lambda sc: tirender.losses.l1("img", np.zeros((5, 5, 3))), "image: expected a number"),
    # one misuse per public function of `import tirender`
    (lambda sc: tirender.render(sc, spp="a"), "spp: expected a number"),
    (lambda sc: tirender.render(sc, spp=1, sensor=5), "sensor: sensor must be an index"),
    (lambda sc: tirender.render(sc, spp=1, integrator="foo"), "unknown integrator 'foo'"),
    (lambda sc: tirender.render_moments(sc, spp=-1), "spp: must be >= 1"),
    (lambda sc: tirender.render_stokes(sc, seed="x"), "seed: expected a number"),
    (lambda sc: tirender.render_progressive(sc, spp="a"), "spp: expected a number"),
    (lambda sc: tirender.render_grad(sc, np.zeros((3, 3))), "adjoint_image: expected an (H, W, 3) array"),
    (lambda sc: tirender.render_grad(sc, np.zeros((8, 8, 3)), method="nope"), "unknown gradient method 'nope'"),
    (lambda sc: tirender.render_forward(sc, [1, 2]), "directions: expected a non-empty dict"),
    (lambda sc: tirender.render_and_grad(sc, np.zeros((2, 2, 3))), "adjoint image has shape (2, 2, 3)"),
    (lambda sc: tirender.load_scene(5), "expected a file name or a dict, got int"),
    (lambda sc: tirender.load_scene("/nonexistent/scene.yaml"), "file not found"),
    (lambda sc: tirender.scene_from_config([1]), "cfg: expected a config mapping"),
    (lambda sc: tirender.set_gradients(sc, [1]), "grads: expected a dict"),
    (lambda sc: tirender.set_gradients(sc, {"red.reflectance": np.zeros(7)}), "grads.red.reflectance: 7 values"),
    (lambda sc: tirender.set_gradients("scene.xml", {}), "scene: expected a loaded Scene"),
    (lambda sc: tirender.set_variant("hyper"), "unknown variant 'hyper'"),
    (lambda sc: tirender.init("tpu"), "unknown arch 'tpu'"),
    (lambda sc: tirender.register_bsdf(3), "register_bsdf(int): expected a class"),
])
def test_api_misuse_is_one_config_error_line(call, needle):
    sc = _scene(w=8)
    with pytest.raises(ConfigError) as e:
        call(sc)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg
