"""Mitsuba's analytic shapes in geometry gradients. A differentiable analytic sphere (scene/sphere_body.py): Mitsuba's
sphere, rendered exactly, its centre and radius parameters of ``prb_attached`` (``direct_projective`` /
``prb_projective``): the hit sliding on the sphere
(core/quadrics.hit_adjoint, checked in f64 by tests/test_optics_adjoints.py with the derived slot), the silhouette
from the camera as fine chords of its circle and the silhouette from a path vertex made exactly per sample
(integrators/edges.py).

* Moving the parameters renders like the same sphere placed by to_world; the derived slot is not a parameter.
* Whole-render gradients against central differences with correlated random numbers (3 SE): a sphere casting a
  shadow onto a floor under an area light, also in view (the default lane: the centre moving up, which moves the
  shadow, the silhouette and the lit side), and a static sphere's, cylinder's and disk's shadow on a floor that moves
  (their curves seen from moving points, exactly: integrators/quadric_edges.py); the extended lane also the radius, a
  silhouette over a constant environment (radius and centre) and forward mode equal to reverse mode per seed.
"""
import os
import sys

import numpy as np
import pytest

import tirender
from tirender.errors import ConfigError

sys.path.insert(0, os.path.dirname(__file__))
from gradcheck_util import assert_agree, projected_gradients  # noqa: E402
from scenes import camera  # noqa: E402


# a sphere placed by an instance far outside the view and the light's reach (x = 40), in every scene of _shadow that
# has no instance of its own: all of them compile one kernel specialisation (the instanced case's)
_FAR_INSTANCE = [{"type": "shapegroup", "id": "far_grp", "shapes": [
    {"id": "far_ball", "type": "sphere", "to_world": [{"scale": 0.4}], "bsdf": {"type": "diffuse", "reflectance": 0.3}}]},
    {"id": "far", "type": "instance", "shapegroup": "far_grp", "to_world": [{"translate": [40.0, 0, 1.0]}]}]


def _shadow(ball=None, w=24, floor=None):
    """A diffuse sphere (radius 0.4 at (0.2, 0, 1)) over a floor under a square area light, seen from above
    (and _FAR_INSTANCE)."""
    ball = ball or {"id": "obj", "type": "sphere", "differentiable": True,
                    "to_world": [{"scale": 0.4}, {"translate": [0.2, 0, 1.0]}]}
    floor = floor or {"id": "floor", "type": "rectangle", "to_world": [{"scale": 3}]}
    balls = ball if isinstance(ball, list) else [dict(ball, bsdf={"type": "diffuse", "reflectance": 0.3})] + \
        _FAR_INSTANCE
    return tirender.load_scene({
        "integrator": {"type": "direct_projective"},
        "sensors": [camera([0, -2.5, 5], [0, 0, 0], fov=35, w=w, h=w)],
        "shapes": [dict(floor, bsdf={"type": "diffuse", "reflectance": 0.8})] + balls + [
                   {"id": "light", "type": "rectangle", "emitter": {"type": "area", "radiance": 20.0},
                    "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 0, 0], "angle": 180}},
                                 {"translate": [0, 0, 3]}]}]})


def _silhouette():
    return tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [camera([0, 0, 4], [0, 0, 0], fov=30, w=24, h=24, filt="box")],
        "emitters": [{"type": "constant", "radiance": 1.0}],
        "shapes": [{"id": "obj", "type": "sphere", "differentiable": True, "to_world": [{"scale": 0.6}],
                    "bsdf": {"type": "diffuse", "reflectance": 0.2}}]})


def _weights(w, ramp=0.0):
    rng = np.random.default_rng(1)
    return (rng.uniform(0, 1, (w, w, 3)) + ramp * np.linspace(0, 1, w)[None, :, None]).astype(np.float32)


def test_parameters_move_the_sphere_like_to_world():
    """centre and radius are the sphere's to_world translation and scale: moved, it renders as the static sphere
    placed there (analytic both: no tessellation); the derived slot is hidden and a radius below 0 refused."""
    sc = _shadow(w=16)
    assert np.allclose(sc.params["obj.center"], [0.2, 0.0, 1.0]) and np.allclose(sc.params["obj.radius"], [0.4])
    names = [n for n, _s, _b in sc.params.describe()]
    assert "obj.center" in names and "obj.world" not in names
    with pytest.raises(ConfigError):
        sc.params["obj.radius"] = [-0.1]
    sc.params["obj.center"] = [-0.1, 0.3, 0.8]
    sc.params["obj.radius"] = [0.5]
    moved = tirender.render(sc, spp=4, seed=2, progress=False)
    ref = _shadow({"id": "obj", "type": "sphere", "to_world": [{"scale": 0.5}, {"translate": [-0.1, 0.3, 0.8]}]}, w=16)
    want = tirender.render(ref, spp=4, seed=2, progress=False)
    assert np.abs(moved - want).max() < 1e-4 * max(float(want.max()), 1.0)
    assert np.abs(moved - tirender.render(_shadow(w=16), spp=4, seed=2, progress=False)).max() > 0.05


def test_a_differentiable_instance_moves_its_sphere_as_a_mesh():
    """An instance with differentiable: true moves its members as one mesh body (scene/instances.py): a sphere in
    its group is tessellated (64 segments) instead of becoming an analytic sphere of its own."""
    sc = tirender.load_scene({"shapes": [{"type": "shapegroup", "id": "g", "shapes": [{"id": "b", "type": "sphere"}]},
                                         {"id": "i", "type": "instance", "shapegroup": "g", "differentiable": True}],
                              "emitters": [{"type": "constant"}]})
    assert "i.translation" in sc.params and "i.b.center" not in sc.params
    assert not any(d.analytic for d in sc.deformables) and sc.desc.shapes[0].implicit is None


@pytest.mark.parametrize("pname,u", [("obj.center", [0.0, 0.0, 1.0]),
                                     pytest.param("obj.radius", [1.0], marks=pytest.mark.extended)])
def test_shadow_gradient_vs_finite_differences(pname, u):
    """Secondary visibility (the shadow's penumbra: the silhouette from each floor point, sampled on its circle),
    primary visibility (the silhouette in view) and the lit side moving with the sphere."""
    sc = _shadow()
    wts = _weights(24)
    u = np.array(u)
    g, _ = projected_gradients(sc, pname, u, wts, 16, list(range(12)), [], 1e-2, method=None)
    _, f = projected_gradients(sc, pname, u, wts, 512, [], list(range(100, 108)), 1e-2)
    mg, mf, se = assert_agree(g, f, pname)
    print(f"{pname}: {mg:.4g} against central differences {mf:.4g} (3 SE {3 * se:.2g})")


STATIC = {"sphere": [{"scale": 0.4}, {"translate": [0.2, 0, 1.2]}],
          # a sphere of a group stored once, placed by an instance that stretches it (an ellipsoid): its silhouette
          # made in the group's space and mapped to the world (integrators/quadric_edges.curve)
          "instanced sphere": [{"type": "shapegroup", "id": "grp", "shapes": [
              {"id": "ball", "type": "sphere", "to_world": [{"scale": 0.4}],
               "bsdf": {"type": "diffuse", "reflectance": 0.3}}]},
              {"id": "obj", "type": "instance", "shapegroup": "grp",
               "to_world": [{"scale": [1.3, 0.8, 1.0]}, {"rotate": {"axis": [0, 0, 1], "angle": 30}},
                            {"translate": [0.2, 0, 1.2]}]}],
          "cylinder": [{"translate": [0, 0, -0.5]}, {"scale": [0.3, 0.3, 1.2]}, {"rotate": {"axis": [1, 0.2, 0], "angle": 90}},
                       {"translate": [0.1, 0.0, 1.2]}],
          "disk": [{"scale": [0.5, 0.35, 1.0]}, {"rotate": {"axis": [1, 1, 0], "angle": 35}}, {"translate": [0.2, 0, 1.2]}]}


@pytest.mark.parametrize("kind", list(STATIC))
def test_moving_floor_under_a_static_shape(kind):
    """A static analytic shape's shadow on a floor that moves up (a differentiable mesh): the boundary term at the
    floor's moving points samples the shape's curves exactly (integrators/quadric_edges.py: a sphere's silhouette
    circle, a cylinder's rims and silhouette lines, a disk's rim; an instance's through its transform). They came
    from a 64-segment proxy mesh whose chords the two sides' rays missed: the sphere's 118 ± 1.5 against central
    differences 162.4 ± 0.7."""
    floor = {"id": "floor", "type": "rectangle", "differentiable": True, "to_world": [{"scale": 3}]}
    ball = STATIC[kind] if kind.startswith("instanced") else {"id": "obj", "type": kind, "to_world": STATIC[kind]}
    sc = _shadow(ball, floor=floor)
    wts = _weights(24)
    u = np.array([0.0, 0.0, 1.0])
    g, _ = projected_gradients(sc, "floor.translation", u, wts, 16, list(range(12)), [], 1e-2, method=None)
    _, f = projected_gradients(sc, "floor.translation", u, wts, 512, [], list(range(100, 108)), 1e-2)
    mg, mf, se = assert_agree(g, f, f"floor.translation under a {kind}")
    print(f"{kind}: {mg:.4g} against central differences {mf:.4g} (3 SE {3 * se:.2g})")


@pytest.mark.extended
@pytest.mark.parametrize("pname,u", [("obj.radius", [1.0]), ("obj.center", [1.0, 0.3, 0.0])])
def test_silhouette_gradient_vs_finite_differences(pname, u):
    """Primary visibility only: a diffuse sphere over a bright constant environment; detached PRB sees nothing."""
    sc = _silhouette()
    wts = _weights(24, ramp=1.0)
    u = np.array(u)
    g, _ = projected_gradients(sc, pname, u, wts, 16, list(range(8)), [], 1e-2, method="prb_attached")
    _, f = projected_gradients(sc, pname, u, wts, 256, [], list(range(100, 108)), 1e-2)
    assert_agree(g, f, pname)
    det = (tirender.render_grad(sc, wts, spp=4, seed=0, method="prb", progress=False)[pname] * u).sum()
    assert det == 0.0


@pytest.mark.extended
def test_forward_equals_reverse():
    """<w, J v> by forward mode equals reverse mode's <∇, v> per seed (boundary terms included)."""
    sc = _shadow(w=16)
    wts = _weights(16)
    v = {"obj.center": np.array([0.3, -0.2, 1.0]), "obj.radius": np.array([0.5])}
    r = tirender.render_grad(sc, wts, spp=2, seed=3, method="prb_attached", progress=False)
    fw = tirender.render_forward(sc, v, spp=2, seed=3, method="prb_attached", progress=False)
    a = sum(float((r[n] * d).sum()) for n, d in v.items())
    b = float((fw.astype(np.float64) * wts).sum())
    assert abs(a) > 0 and abs(a - b) <= 1e-4 * abs(a), (a, b)
