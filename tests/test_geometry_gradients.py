"""Geometry gradients (issue 17): differentiable meshes (scene/deform.py) and visibility-aware
gradients by edge sampling (integrators/edges.py) with method ``prb_attached``.

* f64: the mesh's primal (positions through the transform, area-weighted normals), its adjoint and
  its tangent against central differences (numpy float64, every parameter).
* The moved mesh renders like the same mesh placed by ``to_world`` (refit, not rebuild).
* Whole-render gradients against finite differences with correlated random numbers (3 SE), where
  detached PRB sees nothing: a silhouette over a constant environment (primary visibility) and a
  shadow cast onto a plane (secondary visibility, the occluder also in view).
* Forward mode equals reverse mode per seed; a seed fixes the gradient; bad input is one line.
"""
import os
import sys

import numpy as np
import pytest

import tirender
from tirender.errors import ConfigError
from tirender.scene import deform, shapes

sys.path.insert(0, os.path.dirname(__file__))
from gradcheck_util import assert_agree, central_differences, max_rel_err, projected_gradients  # noqa: E402
from scenes import camera  # noqa: E402


# ------------------------------------------------------------------------------ host-side mesh maths
def _mesh_params(rng, d, rest):
    n = d.names()
    return {n["vertex_positions"]: rest + 0.05 * rng.normal(size=rest.shape),
            n["translation"]: rng.normal(size=3), n["rotation"]: rng.uniform(-40, 40, 3),
            n["scale"]: rng.uniform(0.5, 1.5, 3), n["uniform_scale"]: rng.uniform(0.5, 1.5, 1)}


@pytest.mark.parametrize("smooth", [True, False])
def test_deform_adjoint_and_tangent_vs_central_differences_f64(smooth):
    """Deformable.backward (∂/∂params of <a, P> + <b, N>) and Deformable.tangent against central
    differences of Deformable.positions/normals in float64, for every parameter element."""
    rng = np.random.default_rng(3)
    m = shapes.sphere(12)
    rest = m["positions"].astype(np.float64)
    d = deform.Deformable("obj", m["faces"], rest, smooth)
    params = _mesh_params(rng, d, rest)
    a = rng.normal(size=rest.shape)
    b = rng.normal(size=rest.shape) if smooth else np.zeros_like(rest)

    def loss(p):
        P = d.positions(p.__getitem__)
        return float((a * P).sum() + (b * d.normals(P)[0]).sum())
    grads = d.backward(params.__getitem__, a, b)
    errs = {}
    for name, x in params.items():
        def f(y, name=name):
            q = dict(params)
            q[name] = y
            return loss(q)
        fd = central_differences(f, np.asarray(x, np.float64))
        errs[name] = max_rel_err(grads[name], fd)
        # forward mode: <∇, v> = <a, Ṗ> + <b, Ṅ> along a random direction of this parameter
        v = rng.normal(size=np.shape(x))
        dP, dN = d.tangent(params.__getitem__, lambda k, name=name, v=v: v if k == name else np.zeros_like(params[k]))
        jv = float((a * dP).sum() + (b * dN).sum())
        assert abs(jv - float((grads[name] * v).sum())) <= 1e-8 * max(1.0, abs(jv)), name
    assert max(errs.values()) < 1e-6, errs


def test_edge_topology_welds_seams_and_finds_creases():
    cube = shapes.cube()
    e, f, split = deform.edge_topology(cube["faces"], cube["positions"])
    assert len(e) == 18 and (f[:, 1] >= 0).all() and split.sum() == 12      # 12 cube edges + 6 face diagonals
    sph = shapes.sphere(24)
    e, f, split = deform.edge_topology(sph["faces"], sph["positions"])
    assert (f[:, 1] >= 0).all()                                              # the uv seam is closed
    rect = shapes.rectangle()
    e, f, split = deform.edge_topology(rect["faces"], rect["positions"])
    assert (f[:, 1] < 0).sum() == 4 and len(e) == 5


# ------------------------------------------------------------------------------------------ scenes
def _silhouette(w=24, shape="sphere"):
    sh = {"id": "obj", "type": shape, "differentiable": True, "bsdf": {"type": "diffuse", "reflectance": 0.2},
          "to_world": [{"scale": 0.6}]}
    if shape == "sphere":
        sh["resolution"] = 24
    else:
        sh["to_world"] = [{"scale": 0.5}, {"rotate": {"axis": [1, 1, 0], "angle": 30}}]
    return tirender.load_scene({"integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
                                "sensors": [camera([0, 0, 4], [0, 0, 0], fov=30, w=w, h=w, filt="box")],
                                "emitters": [{"type": "constant", "radiance": 1.0}], "shapes": [sh]})


def _shadow(w=24):
    return tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [camera([0, -2.5, 5], [0, 0, 0], fov=35, w=w, h=w, filt="gaussian")],
        "shapes": [
            {"id": "floor", "type": "rectangle", "to_world": [{"scale": 3}],
             "bsdf": {"type": "diffuse", "reflectance": 0.8}},
            {"id": "occ", "type": "cube", "differentiable": True, "bsdf": {"type": "diffuse", "reflectance": 0.3},
             "to_world": [{"scale": 0.4}, {"rotate": {"axis": [0, 0, 1], "angle": 20}}, {"translate": [0.2, 0, 1.0]}]},
            {"id": "light", "type": "rectangle", "emitter": {"type": "area", "radiance": 20.0},
             "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, 3]}]}]})


def _weights(w, ramp=0.0):
    rng = np.random.default_rng(1)
    return (rng.uniform(0, 1, (w, w, 3)) + ramp * np.linspace(0, 1, w)[None, :, None]).astype(np.float32)


def test_parameters_move_the_mesh_like_to_world():
    """Translation, rotation and scale about the pivot render exactly like the same placement given
    by to_world (the BVH refitted, normals recomputed), and the derived slot is not a parameter."""
    sc = _silhouette(w=16, shape="cube")
    names = [n for n, _s, _b in sc.params.describe()]
    assert "obj.translation" in names and "obj.world" not in names and "obj.world" not in sc.params
    with pytest.raises(ConfigError):
        sc.params["obj.world"] = 0.0
    sc.params["obj.translation"] = [0.3, -0.2, 0.1]
    sc.params["obj.uniform_scale"] = [1.2]
    sc.params["obj.rotation"] = [0.0, 0.0, 25.0]
    moved = tirender.render(sc, spp=4, seed=2, progress=False)
    ref = tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [camera([0, 0, 4], [0, 0, 0], fov=30, w=16, h=16, filt="box")],
        "emitters": [{"type": "constant", "radiance": 1.0}],
        "shapes": [{"id": "obj", "type": "cube", "bsdf": {"type": "diffuse", "reflectance": 0.2},
                    "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 1, 0], "angle": 30}}, {"scale": 1.2},
                                 {"rotate": {"axis": [0, 0, 1], "angle": 25}}, {"translate": [0.3, -0.2, 0.1]}]}]})
    want = tirender.render(ref, spp=4, seed=2, progress=False)
    assert np.abs(moved - want).max() < 1e-3
    assert np.abs(moved - tirender.render(_silhouette(w=16, shape="cube"), spp=4, seed=2, progress=False)).max() > 0.1


@pytest.mark.parametrize("pname,u", [("obj.uniform_scale", [1.0]), ("obj.translation", [1.0, 0.3, 0.0])])
def test_silhouette_gradient_vs_finite_differences(pname, u):
    """Primary visibility: a diffuse sphere over a bright constant environment. Detached PRB's
    gradient is exactly 0; edge sampling's agrees with central differences (h = 0.01, 256 spp)."""
    sc = _silhouette()
    wts = _weights(24, ramp=1.0)
    u = np.array(u)
    g, _ = projected_gradients(sc, pname, u, wts, 16, list(range(6)), [], 1e-2, method="prb_attached")
    _, f = projected_gradients(sc, pname, u, wts, 256, [], list(range(100, 108)), 1e-2)
    mg, mf, se = assert_agree(g, f, pname)
    det = (tirender.render_grad(sc, wts, spp=4, seed=0, method="prb", progress=False)[pname] * u).sum()
    print(f"{pname}: edge sampling {mg:.4g}, FD {mf:.4g} (3 SE {3 * se:.2g}), detached PRB {det:.3g}")
    assert det == 0.0


@pytest.mark.parametrize("pname,u", [("occ.uniform_scale", [1.0]), ("occ.translation", [0.0, 0.0, 1.0]),
                                     ("occ.rotation", [0.0, 0.0, 30.0])])
def test_shadow_gradient_vs_finite_differences(pname, u):
    """Secondary visibility: a cube between an area light and a floor (and in view): its shadow's
    and silhouette's motion, against central differences (h = 0.01, 512 spp)."""
    sc = _shadow()
    wts = _weights(24)
    u = np.array(u)
    g, _ = projected_gradients(sc, pname, u, wts, 16, list(range(12)), [], 1e-2, method="prb_attached")
    _, f = projected_gradients(sc, pname, u, wts, 512, [], list(range(100, 108)), 1e-2)
    mg, mf, se = assert_agree(g, f, pname)
    print(f"{pname}: edge sampling {mg:.4g}, FD {mf:.4g} (3 SE {3 * se:.2g})")


def test_forward_equals_reverse_and_seed_fixes_gradient():
    """<w, J v> by forward mode equals reverse mode's <∇, v> per seed (the same estimator run both
    ways, boundary terms included), and a seed fixes the gradient bit for bit."""
    sc = _shadow(w=16)
    wts = _weights(16)
    rng = np.random.default_rng(5)
    for pname, u in (("occ.translation", np.array([1.0, 0.5, 0.0])), ("occ.vertex_positions", rng.normal(size=(24, 3)))):
        r = tirender.render_grad(sc, wts, spp=2, seed=3, method="prb_attached", progress=False)[pname]
        r2 = tirender.render_grad(sc, wts, spp=2, seed=3, method="prb_attached", progress=False)[pname]
        assert np.array_equal(r, r2)
        fw = tirender.render_forward(sc, {pname: u}, spp=2, seed=3, method="prb_attached", progress=False)
        a, b = float((r * u).sum()), float((fw.astype(np.float64) * wts).sum())
        assert abs(a) > 0 and abs(a - b) <= 1e-4 * abs(a), (pname, a, b)


def test_bad_geometry_input_is_one_line(tmp_path):
    base = {"sensors": [camera([0, 0, 4], [0, 0, 0])]}
    with pytest.raises(ConfigError, match="emitter"):
        tirender.load_scene(dict(base, shapes=[{"type": "rectangle", "differentiable": True,
                                                "emitter": {"type": "area", "radiance": 1.0}}]))
    with pytest.raises(ConfigError, match="heightfield"):
        tirender.load_scene(dict(base, shapes=[{"type": "heightfield", "differentiable": True}]))
    with pytest.raises(ConfigError, match="differentiable"):
        tirender.load_scene(dict(base, shapes=[{"type": "cube", "differentiable": "maybe"}]))
