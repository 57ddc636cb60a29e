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


@pytest.mark.parametrize("smooth,sphere", [(True, False), (False, False), (True, True)])
def test_deform_adjoint_and_tangent_vs_central_differences_f64(smooth, sphere):
    """Deformable.backward (∂/∂params of <a, P> + <b, N>) and Deformable.tangent against central
    differences of Deformable.positions/normals in float64, for every parameter element (a sphere
    shape's centre and radius too)."""
    rng = np.random.default_rng(3)
    m = shapes.sphere(12)
    rest = m["positions"].astype(np.float64) * 0.7 + 0.2
    d = deform.Deformable("obj", m["faces"], rest, smooth, sphere=sphere)
    params = _mesh_params(rng, d, rest)
    if sphere:
        n = d.names()
        assert n["translation"] == "obj.center" and n["uniform_scale"] == "obj.radius"
        assert abs(d.r0 - 0.7) < 0.01 and np.allclose(d.positions({**params, n["translation"]: d.pivot,
                                                                   n["uniform_scale"]: [d.r0], n["rotation"]: np.zeros(3),
                                                                   n["scale"]: np.ones(3)}.__getitem__), params[n["vertex_positions"]])
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


def _shadow(w=24, colours=False, filt="gaussian", through_light=False):
    """through_light: the camera looks down through the (hidden) light at the cube and its shadow."""
    floor, cube = (0.8, 0.3) if not colours else ([0.8, 0.5, 0.2], [0.2, 0.3, 0.7])
    eye = [0, -0.3, 6] if through_light else [0, -2.5, 5]
    return tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100, "hide_emitters": through_light},
        "sensors": [camera(eye, [0, 0, 0], fov=35, w=w, h=w, filt=filt)],
        "shapes": [
            {"id": "floor", "type": "rectangle", "to_world": [{"scale": 3}],
             "bsdf": {"type": "diffuse", "reflectance": floor}},
            {"id": "occ", "type": "cube", "differentiable": True, "bsdf": {"type": "diffuse", "reflectance": cube},
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


def test_a_written_parameter_moves_only_its_body():
    """Writing one body's parameter (scene.params, or write_param_device as the torch path and finite differences
    do) moves that body alone before the BVH refit (Scene._geometry_moved): the other differentiable meshes are not
    rewritten, and the image equals a scene loaded with the body already there."""
    def scene(occ_at):
        cfg = {"integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
               "sensors": [camera([0, -2.5, 5], [0, 0, 0], fov=35, w=16, h=16)],
               "shapes": [{"id": "floor", "type": "rectangle", "differentiable": True, "to_world": [{"scale": 3}],
                           "bsdf": {"type": "diffuse", "reflectance": 0.8}},
                          {"id": "occ", "type": "cube", "differentiable": True,
                           "bsdf": {"type": "diffuse", "reflectance": 0.3},
                           "to_world": [{"scale": 0.4}, {"translate": occ_at}]},
                          {"id": "light", "type": "rectangle", "emitter": {"type": "area", "radiance": 20.0},
                           "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 0, 0], "angle": 180}},
                                        {"translate": [0, 0, 3]}]}]}
        return tirender.load_scene(cfg)

    sc = scene([0.2, 0.0, 1.0])
    tirender.render(sc, spp=1, seed=0, progress=False)          # bound, geometry in place
    moved = {d.name: 0 for d in sc.deformables}

    def counted(d):
        positions = d.positions

        def count(get):
            moved[d.name] += 1
            return positions(get)
        return count
    for d in sc.deformables:
        d.positions = counted(d)
    sc.write_param_device("occ.translation", np.array([-0.3, 0.25, 0.1]))
    sc.params["occ.translation"] = [-0.3, 0.25, 0.2]
    img = tirender.render(sc, spp=4, seed=3, progress=False)
    assert moved == {"floor": 0, "occ": 2}, moved
    want = tirender.render(scene([-0.1, 0.25, 1.2]), spp=4, seed=3, progress=False)
    assert np.abs(img - want).max() < 1e-4 * max(float(want.max()), 1.0)


# (the default lane: every vertex; the extended lane also the mesh sphere's radius and centre and an anisotropic scale —
# each case renders 2 x 8 x 256 spp of finite differences; the analytic sphere's radius and centre:
# tests/test_quadric_gradients.py; the mesh sphere's transform chain in f64 above)
@pytest.mark.parametrize("pname,u", [pytest.param("obj.radius", [1.0], marks=pytest.mark.extended),
                                     pytest.param("obj.center", [1.0, 0.3, 0.0], marks=pytest.mark.extended),
                                     pytest.param("obj.scale", [1.0, -0.5, 0.3], marks=pytest.mark.extended),
                                     ("obj.vertex_positions", "smooth")])
def test_silhouette_gradient_vs_finite_differences(pname, u):
    """Primary visibility: a diffuse sphere over a bright constant environment (a sphere shape: its
    centre and radius are parameters). Detached PRB's gradient is exactly 0; edge sampling's agrees
    with central differences (h = 0.01, 256 spp). vertex_positions: a smooth field of displacements
    (every vertex moves, copies together)."""
    sc = _silhouette()
    wts = _weights(24, ramp=1.0)
    if u == "smooth":
        V = sc.params[pname].astype(np.float64)
        u = np.stack([np.sin(3 * V[:, 1]), np.cos(2 * V[:, 0]), V[:, 0] * V[:, 2]], 1)
    u = np.array(u)
    g, _ = projected_gradients(sc, pname, u, wts, 16, list(range(6)), [], 1e-2, method="prb_attached")
    _, f = projected_gradients(sc, pname, u, wts, 256, [], list(range(100, 108)), 1e-2)
    mg, mf, se = assert_agree(g, f, pname)
    det = (tirender.render_grad(sc, wts, spp=4, seed=0, method="prb", progress=False)[pname] * u).sum()
    print(f"{pname}: edge sampling {mg:.4g}, FD {mf:.4g} (3 SE {3 * se:.2g}), detached PRB {det:.3g}")
    assert det == 0.0


# (the default lane: the rotation; the extended lane also a uniform scale and a translation)
@pytest.mark.parametrize("pname,u", [pytest.param("occ.uniform_scale", [1.0], marks=pytest.mark.extended),
                                     pytest.param("occ.translation", [0.0, 0.0, 1.0], marks=pytest.mark.extended),
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


def test_gradient_through_a_hidden_light_vs_finite_differences():
    """hide_emitters with the area light in view: camera rays pass through it to the moving cube and its shadow
    (Mitsuba's skip_area_emitters), in prb_attached's replay as in the primal (the replay stopped at the light's
    back, and the cube behind it had no interior gradient there)."""
    sc = _shadow(through_light=True)
    wts = _weights(24)
    u = np.array([0.0, 0.0, 1.0])      # the cube's lit top towards the light (before the fix: -20.1 vs FD -9.6 ± 0.8)
    g, _ = projected_gradients(sc, "occ.translation", u, wts, 16, list(range(12)), [], 1e-2, method="prb_attached")
    _, f = projected_gradients(sc, "occ.translation", u, wts, 512, [], list(range(100, 108)), 1e-2)
    mg, mf, se = assert_agree(g, f, "occ.translation")
    print(f"through the light: edge sampling {mg:.4g}, FD {mf:.4g} (3 SE {3 * se:.2g})")


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


# ------------------------------------------------------------------------------ shape optimisation
def test_large_steps_solve_and_keep_copies_together():
    from tirender.optim.large_steps import LargeSteps
    m = shapes.sphere(16)
    P = m["positions"].astype(np.float64)
    ls = LargeSteps(m["faces"], P, 10.0)
    rng = np.random.default_rng(0)
    b = rng.normal(size=(ls.n_unique, 3))
    assert np.abs(ls.matvec(ls.solve(b)) - b).max() < 1e-8
    g = rng.normal(size=P.shape)
    gu = ls.precondition(g)
    w, _n, _first = deform.weld(P)
    shared = np.flatnonzero(np.bincount(w) > 1)                   # welded points with several copies
    assert len(shared) and all(np.ptp(gu[w == k], axis=0).max() == 0 for k in shared)   # copies equal
    # (I + λL)⁻¹ is symmetric: <a, M⁻¹ b> = <M⁻¹ a, b> on the welded unknowns
    a = rng.normal(size=(ls.n_unique, 3))
    assert abs((a * ls.solve(b)).sum() - (ls.solve(a) * b).sum()) < 1e-8 * np.abs(a).sum()
    x_new = ls.apply(P, P - 0.01 * gu)
    assert all(np.ptp(x_new[w == k], axis=0).max() < 1e-12 for k in np.unique(w))
    assert deform.Deformable("s", m["faces"], x_new, True).edges.shape == \
        deform.Deformable("s", m["faces"], P, True).edges.shape          # no crack opened


def test_chamfer_distance():
    """Exact point-to-mesh distances and the Chamfer distance of concentric cubes [-1, 1]³ and [-1.5, 1.5]³ in
    closed form: a point x of the inner cube is min_i (1.5 - |x_i|) from the outer one (0.5 for every point of its
    surface), a point y of the outer cube |y - clamp(y, -1, 1)| from the inner one; the Chamfer distance's
    outer-to-inner half is a mean over CHAMFER_POINTS uniform points, within 4 standard errors of the closed-form
    mean (its variance by quadrature). A mesh against itself: floating-point rounding only."""
    from tirender.optim.geometry import CHAMFER_POINTS, chamfer_distance, point_mesh_distance
    m = shapes.sphere(16)
    P = m["positions"].astype(np.float64)
    assert chamfer_distance(P, P, m["faces"]) < 1e-12
    c = shapes.cube()
    C, F = c["positions"].astype(np.float64), c["faces"]
    assert chamfer_distance(C, C, F) < 1e-12
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.4, 1.4, (500, 3))                                   # inside the outer cube
    assert np.allclose(point_mesh_distance(x, 1.5 * C, F), (1.5 - np.abs(x)).min(1), rtol=0, atol=1e-12)
    y = rng.uniform(-2.5, 2.5, (500, 3))
    y = y[np.abs(y).max(1) > 1.0]                                          # outside the inner cube
    assert np.allclose(point_mesh_distance(y, C, F), np.linalg.norm(y - np.clip(y, -1, 1), axis=1), rtol=0,
                       atol=1e-12)
    # the outer cube's face z = 1.5: distance sqrt(0.25 + (|u| - 1)+² + (|v| - 1)+²) over (u, v) in [-1.5, 1.5]²
    t = (np.arange(3000) + 0.5) / 3000 * 3.0 - 1.5                         # midpoint rule
    e = np.maximum(np.abs(t) - 1.0, 0.0) ** 2
    d = np.sqrt(0.25 + e[:, None] + e[None, :])
    mean, var = d.mean(), d.var()
    expect = 0.5 * (0.5 + mean)
    got = chamfer_distance(C, 1.5 * C, F)
    assert abs(got - expect) <= 0.5 * 4.0 * np.sqrt(var / CHAMFER_POINTS), (got, expect)


def _shape_config(tmp_path, **opt):
    from tirender.scene.mesh_io import save_ply
    m = shapes.sphere(12)
    P = m["positions"] * np.array([0.8, 0.5, 0.6], np.float32)       # an ellipsoid: the truth
    save_ply(str(tmp_path / "target.ply"), P, m["faces"])
    views = [[0, 0, 4], [4, 0, 0], [0, 4, 0.5]]
    o = {"params": {"obj.vertex_positions": {"init": "sphere", "lr": 0.2, "large_steps": 10}},
         "target": {"type": "render", "spp": 32, "seed": 5}, "method": "prb_attached", "iters": 30, "spp": 4,
         "spp_grad": 4, "save_every": 10, "holdout": [2], "views": [0, 1]}
    o.update(opt)
    from tirender.config import load_config
    return load_config({"scene": {"integrator": {"type": "path", "max_depth": 2},
                      "sensors": [camera(v, [0, 0, 0], fov=40, w=24, h=24, filt="gaussian") for v in views],
                      "emitters": [{"type": "constant", "radiance": 1.0}],
                      "shapes": [{"id": "obj", "type": "ply", "filename": "target.ply", "differentiable": True,
                                  "bsdf": {"type": "diffuse", "reflectance": 0.3}}]},
                        "optimize": o}, base_dir=str(tmp_path))


def test_shape_optimisation_recovers_an_ellipsoid(tmp_path):
    """`tirender optimize` with geometry: a sphere (init: sphere) becomes the target ellipsoid from two
    views; the Chamfer distance and the held-out view's error fall; meshes and a turntable are written."""
    from tirender.optim.driver import run_optimization
    m = run_optimization(_shape_config(tmp_path), out=str(tmp_path / "out"))
    c = m["chamfer"]["obj"]
    h = m["holdout"]["2"]
    print(f"Chamfer {c['start']:.4f} -> {c['end']:.4f}, held-out RMSE {h['rmse_start']:.4f} -> {h['rmse_end']:.4f}")
    assert c["end"] < 0.5 * c["start"] and h["rmse_end"] < 0.7 * h["rmse_start"]
    out = tmp_path / "out"
    assert (out / "params" / "obj.ply").exists() and (out / "meshes" / "iter0010_obj.ply").exists()
    assert (out / "turntable_obj.png").exists()


def test_shape_optimisation_bad_input(tmp_path):
    from tirender.optim.driver import OptimizationRun
    with pytest.raises(ConfigError, match="prb_attached"):
        OptimizationRun(_shape_config(tmp_path, method="prb"), out=str(tmp_path / "o1"))
    cfg = _shape_config(tmp_path)
    cfg["optimize"]["params"] = {"obj.reflectance": {"large_steps": 5}}
    with pytest.raises(ConfigError, match="large_steps"):
        OptimizationRun(cfg, out=str(tmp_path / "o2"))
    cfg["optimize"]["params"] = {"obj.translation": {"init": "sphere"}}
    with pytest.raises(ConfigError, match="init"):
        OptimizationRun(cfg, out=str(tmp_path / "o3"))


VK_CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import tirender
tirender.init("vulkan")
import test_geometry_gradients as t
g = tirender.render_grad(t._shadow(w=16), t._weights(16), spp=4, seed=1, method="prb_attached", progress=False)
print(json.dumps({{k: g[k].tolist() for k in ("occ.translation", "occ.uniform_scale", "occ.rotation")}}))
"""


SPECTRAL_CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
import tirender
tirender.set_variant("spectral")
import test_geometry_gradients as t
from gradcheck_util import projected_gradients
sc = t._shadow(w=16, colours=True)
u = np.array([0.0, 0.0, 1.0], np.float32)
g, _ = projected_gradients(sc, "occ.translation", u, t._weights(16), 64, list(range(16)), [], 1e-2, method="prb_attached")
_, f = projected_gradients(sc, "occ.translation", u, t._weights(16), 1024, [], list(range(100, 112)), 1e-2)
print(json.dumps({{"g": g.tolist(), "f": f.tolist()}}))
"""


@pytest.mark.slow
@pytest.mark.extended     # a spectral child: two more megakernels to compile (also extended: tests/test_variants.py
#                           test_spectral_geometry_gradient; the default lane: geometry gradients in rgb, above)
def test_spectral_shadow_gradient_vs_finite_differences():
    """Geometry gradients (edge sampling, prb_attached) in the spectral variant: the edge samples' paths carry
    wavelengths and the boundary terms go through the film's conversion; a cube over coloured surfaces moved
    up, against central differences in a child process."""
    import json
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(here))
    env.pop("TIRENDER_VARIANT", None)
    r = subprocess.run([sys.executable, "-c", SPECTRAL_CHILD.format(tests=here)], capture_output=True, text=True,
                       env=env, timeout=1500)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    mg, mf, se = assert_agree(np.array(rep["g"]), np.array(rep["f"]), "spectral occ.translation")
    print(f"spectral occ.translation: edge sampling {mg:.4g}, FD {mf:.4g} (3 SE {3 * se:.2g})")


@pytest.mark.vulkan
@pytest.mark.skipif(not __import__("tirender.backend", fromlist=["x"]).vulkan_devices(),
                    reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
@pytest.mark.extended
def test_geometry_gradients_on_vulkan_match_cpu():
    """The same seed gives the same geometry gradients on Vulkan (a child process) as on the CPU,
    edge sampling included (float atomics on lavapipe: equal to ~1e-5)."""
    import json
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(here))
    env.pop("TIRENDER_ARCH", None)
    r = subprocess.run([sys.executable, "-c", VK_CHILD.format(tests=here)], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    vk = json.loads(r.stdout.strip().splitlines()[-1])
    g = tirender.render_grad(_shadow(w=16), _weights(16), spp=4, seed=1, method="prb_attached", progress=False)
    for k, v in vk.items():
        assert np.allclose(v, g[k], rtol=1e-4, atol=1e-4 * np.abs(g[k]).max()), (k, v, g[k])


def test_shape_optimisation_resume_is_exact(tmp_path):
    """--resume of a large-steps run (host uniform-Adam moments in the checkpoint) continues exactly:
    6 iterations then 6 resumed = 12 straight, bit for bit."""
    from tirender.optim.driver import OptimizationRun
    a = OptimizationRun(_shape_config(tmp_path, iters=12, save_every=6, holdout=[]), out=str(tmp_path / "a"))
    a.run()
    OptimizationRun(_shape_config(tmp_path, iters=6, save_every=6, holdout=[]), out=str(tmp_path / "b")).run()
    b = OptimizationRun(_shape_config(tmp_path, iters=12, save_every=6, holdout=[]), out=str(tmp_path / "b"),
                        resume=True)
    b.run()
    va, vb = a.scene.params["obj.vertex_positions"], b.scene.params["obj.vertex_positions"]
    assert np.array_equal(va, vb) and np.abs(va - a.truth["obj.vertex_positions"]).max() > 0


def test_forward_mode_refuses_detached_geometry():
    """Detached derivatives do not move geometry: render_forward of a geometry parameter with method
    prb is one ConfigError naming the parameter (not a blank image)."""
    sc = _shadow(w=8)
    with pytest.raises(ConfigError, match="occ.translation.*prb_attached"):
        tirender.render_forward(sc, {"occ.translation": [1.0, 0.0, 0.0]}, spp=1, method="prb", progress=False)


def test_edge_table_shrinks_in_a_shared_table():
    """A smaller edge table after a larger one in the same process (the table is shared, its capacity only grows):
    the rows are written into the larger fields (this raised a shape error once)."""
    from tirender.integrators.edges import SecondaryTable

    def rows(n):
        x = np.random.default_rng(n).normal(size=(n, 3))
        return {"x0": x, "x1": x + 1.0, "n1": x, "n2": x, "flags": np.zeros(n, np.int32),
                "slot0": np.full(n, -1), "slot1": np.full(n, -1)}
    big = SecondaryTable.holding(rows(3000), 3000)
    small = SecondaryTable.holding(rows(10), 5)
    assert small is big and small.cap >= 3000
    assert list(small.info_i.to_numpy()) == [10, 5] and np.allclose(small.x0.to_numpy()[:10], rows(10)["x0"])
    assert np.all(small.cdf_all.to_numpy()[10:] == 2.0)


def test_silhouette_anywhere_along_a_long_edge():
    """A long edge seen in perspective can be a silhouette over part of its length only: the primary candidates
    keep it when the faces' orientations to the eye differ anywhere along it (not only at its first end)."""
    from tirender.integrators.edges import _silhouette_somewhere
    n1, n2 = np.array([[1.0, 0.0, 0.2]]), np.array([[-1.0, 0.0, 0.2]])
    # f1 = x - 0.2, f2 = -x - 0.2 at z = -1: the same sign at x = 0, opposite at x = 3
    a, b = np.array([[0.0, 0.0, -1.0]]), np.array([[3.0, 0.0, -1.0]])
    assert not _silhouette_somewhere(n1, n2, a, a)[0]
    assert _silhouette_somewhere(n1, n2, a, b)[0] and _silhouette_somewhere(n1, n2, b, a)[0]
    # opposite signs in the middle only: f1 = x, f2 = x - 0.4 for x from -0.3 to 0.7 (q > 0 at both ends)
    n1m, n2m = np.array([[1.0, 0.0, 0.0]]), np.array([[1.0, 0.0, -0.4]])
    am, bm = np.array([[-0.3, 0.0, 1.0]]), np.array([[0.7, 0.0, 1.0]])
    assert _silhouette_somewhere(n1m, n2m, am, bm)[0]
    assert not _silhouette_somewhere(n1m, n2m, am, am)[0] and not _silhouette_somewhere(n1m, n2m, bm, bm)[0]
