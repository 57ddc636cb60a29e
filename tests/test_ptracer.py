"""The light tracer (``ptracer``) against the path tracer on scenes both render: a Cornell-like box
(box, Gaussian and tent filters), every emitter type (area, point, spot, directional, constant,
envmap, projector, a spot's texture), a glass caustic (importance transport through refraction), directly visible emitters
and hide_emitters; determinism; one-line refusals (media, gradients)."""
import numpy as np
import pytest

import tirender
from gradcheck_util import assert_agree, assert_images_agree, projected_gradients
from scenes import FLOOR_BSDF, camera, cornell_like, floor
from tirender.errors import ConfigError


def _compare(sc, spp_path, spp_pt, seed=1, seeds=8):
    """The light tracer's image against the path tracer's, each as ``seeds`` independent renders of 1/seeds of
    the budget: means and 4 x 4 blocks within their noise (gradcheck_util.assert_images_agree). Returns the two
    mean images."""
    ref = [tirender.render(sc, spp=spp_path // seeds, seed=seed + k, progress=False) for k in range(seeds)]
    img = [tirender.render(sc, spp=spp_pt // seeds, seed=seed + 100 + k, integrator="ptracer", progress=False)
           for k in range(seeds)]
    return assert_images_agree(img, ref, name="ptracer vs path")[::-1]


@pytest.mark.parametrize("filt", [{"type": "box"}, {"type": "gaussian"}, {"type": "tent", "radius": 1.5}])
def test_cornell_box_matches_path_tracer(filt):
    """(The tent: the light tracer's pixel weights are the tent's integral over the film, launch.py.)"""
    d = cornell_like(w=32, max_depth=4)
    d["sensors"][0]["film"]["filter"] = filt
    _compare(tirender.load_scene(d), 256, 256)


def _plane_scene(emitter, w=24):
    """A diffuse floor and a box on it under one emitter (dict), camera above at an angle."""
    return {"integrator": {"type": "path", "max_depth": 4, "rr_depth": 100},
            "sensors": [camera([0, 2.0, 3.0], [0, 0, 0], fov=45, w=w, h=w)],
            "bsdfs": {"floor": FLOOR_BSDF, "box": {"type": "diffuse", "reflectance": [0.3, 0.5, 0.7]}},
            "shapes": [floor(), {"id": "box", "type": "cube", "bsdf": "box",
                        "to_world": [{"scale": 0.3}, {"translate": [0.2, 0.3, 0.0]}]}],
            "emitters": [emitter]}


@pytest.mark.slow
@pytest.mark.parametrize("emitter", [
    {"type": "point", "position": [0.5, 1.5, 1.0], "intensity": [6.0, 5.0, 4.0]},
    {"type": "spot", "intensity": 20.0, "cutoff_angle": 35.0, "beam_width": 20.0,
     "to_world": {"look_at": {"origin": [0.0, 2.0, 0.5], "target": [0, 0, 0], "up": [0, 0, 1]}}},
    {"type": "directional", "direction": [0.3, -1.0, -0.4], "irradiance": [2.0, 2.0, 1.5]},
    {"type": "constant", "radiance": [0.5, 0.6, 0.7]},
    {"type": "beam", "direction": [0.2, -1.0, -0.1], "origin": [-0.1, 1.5, 0.2], "radius": 0.6, "irradiance": 3.0},
    {"type": "beam", "direction": [0.0, -1.0, 0.0], "origin": [0.1, 1.5, 0.0], "radius": 0.5, "irradiance": 3.0,
     "aperture": "square"},
], ids=["point", "spot", "directional", "constant", "beam", "beam_square"])
def test_emitters_match_path_tracer(emitter):
    _compare(tirender.load_scene(_plane_scene(emitter)), 512, 512)


@pytest.mark.slow
def test_projector_and_textured_spot_match_path_tracer(tmp_path):
    """Bitmap lights: the projector's rays drawn by its texture's luminance (a dark third of the texels),
    the spot's rays carrying its projected texture at their uv."""
    tex = np.random.default_rng(5).uniform(0.0, 1.0, (6, 8, 3)).astype(np.float32)
    tex[:, :3] *= 0.05
    path = str(tmp_path / "t.npy")
    np.save(path, tex)
    d = _plane_scene({"type": "projector", "irradiance": {"type": "bitmap", "data": path}, "scale": 2.0, "fov": 50,
                      "to_world": {"look_at": {"origin": [0.5, 2.0, 1.0], "target": [0, 0, 0], "up": [0, 1, 0]}}})
    d["emitters"].append({"type": "spot", "intensity": 15.0, "cutoff_angle": 30.0, "texture": {"type": "bitmap",
                                                                                            "data": path},
                          "to_world": {"look_at": {"origin": [-0.5, 1.5, 1.0], "target": [0, 0, 0], "up": [0, 0, 1]}}})
    _compare(tirender.load_scene(d), 512, 512)


@pytest.mark.slow
def test_envmap_matches_path_tracer(tmp_path):
    rng = np.random.default_rng(3)
    env = rng.uniform(0.1, 1.0, (16, 32, 3)).astype(np.float32)
    env[3:5, 20:23] = 20.0      # a bright patch: the map's importance sampling matters
    path = str(tmp_path / "env.npy")
    np.save(path, env)
    _compare(tirender.load_scene(_plane_scene({"type": "envmap", "data": path})), 512, 512)


@pytest.mark.slow
def test_glass_caustic_matches_path_tracer():
    """A glass sphere on a diffuse floor lit from the side by a small area light; the camera looks
    down at the floor beside the ball (a light tracer cannot render a Dirac surface seen directly by
    a pinhole), where the light refracted through the ball focuses: L S S D E paths."""
    d = {"integrator": {"type": "path", "max_depth": 6, "rr_depth": 100},
         "sensors": [camera([0.9, 2.0, 0.0], [0.9, 0.0, 0.0], up=(0, 0, -1), fov=25, w=24, h=24)],
         "bsdfs": {"floor": {"type": "diffuse", "reflectance": [0.8, 0.8, 0.8]},
                   "glass": {"type": "dielectric", "int_ior": 1.5}},
         "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor",
                     "to_world": [{"scale": 2}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]},
                    {"id": "ball", "type": "sphere", "bsdf": "glass", "resolution": 48,
                     "to_world": [{"scale": 0.4}, {"translate": [0, 0.45, 0]}]},
                    {"id": "light", "type": "rectangle",
                     "to_world": [{"scale": 0.2}, {"look_at": {"origin": [-1.6, 1.4, 0.0], "target": [0, 0.45, 0],
                                                               "up": [0, 1, 0]}}],
                     "emitter": {"type": "area", "radiance": [40.0, 40.0, 40.0]}}]}
    ref, img = _compare(tirender.load_scene(d), 4096, 256)
    # the focused light is brighter than the floor around it, in both
    for im in (ref, img):
        lum = im.mean(2)
        assert lum.max() > 3 * np.median(lum), (lum.max(), np.median(lum))


@pytest.mark.parametrize("bsdf", [{"type": "dielectric", "int_ior": 1.5},
                                  {"type": "roughdielectric", "int_ior": 1.5, "alpha": 0.3}],
                         ids=["smooth", "rough"])
def test_camera_under_water_matches_path_tracer(bsdf):
    """The camera and a diffuse floor lie inside a dielectric (below its interface), the light above
    it: light enters the denser medium once, so importance transport must drop the radiance
    compression (sampled smooth refraction) or take the adjoint BSDF (rough: connections)."""
    d = {"integrator": {"type": "path", "max_depth": 5, "rr_depth": 100},
         "sensors": [camera([0, 0.8, 0.8], [0, 0, 0], fov=30, w=16, h=16)],
         "bsdfs": {"floor": {"type": "diffuse", "reflectance": [0.7, 0.7, 0.7]}, "water": bsdf},
         "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor",
                     "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]},
                    {"id": "surface", "type": "rectangle", "bsdf": "water",
                     "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}, {"translate": [0, 1, 0]}]},
                    {"id": "light", "type": "rectangle",
                     "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 0, 0], "angle": 90}}, {"translate": [0, 2.5, 0]}],
                     "emitter": {"type": "area", "radiance": [20.0, 20.0, 20.0]}}]}
    _compare(tirender.load_scene(d), 1024, 256)


def test_visible_emitters_and_hide():
    """The ceiling light seen directly (light paths that reach the camera at once), and hidden with
    hide_emitters: the light tracer's image is the path tracer's within noise either way (the light's pixels
    included), and hiding removes the light's own radiance from the top rows."""
    top = {}
    for hide in (False, True):
        d = cornell_like(w=24, max_depth=2)
        d["integrator"]["hide_emitters"] = hide
        ref, img = _compare(tirender.load_scene(d), 256, 256)
        top[hide] = ref[:4].max()
    assert top[False] > 5.0 > 2.0 > top[True], top     # the light (radiance 10, 9, 8) covers whole pixels
    env = _plane_scene({"type": "constant", "radiance": [0.5, 0.6, 0.7]})
    env["sensors"][0] = camera([0, 0.5, 3.0], [0, 0.5, 0], fov=45, w=16, h=16)   # sky above the horizon
    sky = tirender.render(tirender.load_scene(env), spp=16, seed=0, integrator="ptracer", progress=False)
    np.testing.assert_allclose(sky[0, 0], [0.5, 0.6, 0.7], rtol=1e-5)


def test_deterministic_per_seed():
    sc = tirender.load_scene(cornell_like(w=16, max_depth=4))
    a = tirender.render(sc, spp=16, seed=7, integrator="ptracer", progress=False)
    b = tirender.render(sc, spp=16, seed=7, integrator="ptracer", progress=False)
    c = tirender.render(sc, spp=16, seed=8, integrator="ptracer", progress=False)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


SEEDS_PRB = [11 + k for k in range(8)]
SEEDS_FD = [51 + k for k in range(8)]


def _grad_scene(emitter=None, roughness=None):
    d = _plane_scene(emitter or {"type": "point", "position": [0.5, 1.5, 1.0], "intensity": [6.0, 5.0, 4.0]}, w=12)
    d["integrator"]["type"] = "ptracer"
    if roughness is not None:
        d["bsdfs"]["box"] = {"type": "roughconductor", "material": "Au", "alpha": roughness}
    return tirender.load_scene(d)


def _w(sc, seed=0):
    s = sc.sensors[0]
    return np.random.default_rng(seed).uniform(0.2, 1.0, (s.height, s.width, 3)).astype(np.float32) / (s.width * s.height)


@pytest.mark.slow
@pytest.mark.parametrize("pname,emitter,roughness", [
    ("floor.reflectance", None, None),                     # connections and a sampled bounce
    ("box.reflectance", None, None),
    ("box.roughness", None, 0.3),                          # a rough conductor, sampled and connected
    ("light.intensity", {"id": "light", "type": "point", "position": [0.5, 1.5, 1.0], "intensity": [6.0, 5.0, 4.0]},
     None),
    ("sky.radiance", {"id": "sky", "type": "constant", "radiance": [0.5, 0.6, 0.7]}, None),   # light paths + seen
])
def test_light_tracer_gradients_match_fd(pname, emitter, roughness):
    """Detached PRB for light paths vs central differences of the light tracer's image (correlated
    random numbers), every parameter direction random."""
    sc = _grad_scene(emitter, roughness)
    u = np.random.default_rng(5).uniform(0.5, 1.0, sc.params[pname].shape)
    g, f = projected_gradients(sc, pname, u, _w(sc), 64, SEEDS_PRB, SEEDS_FD, 0.02)
    assert_agree(g, f, pname)


def test_refusals_are_one_line():
    d = cornell_like(w=8)
    d["integrator"]["type"] = "ptracer"
    sc = tirender.load_scene(d)
    with pytest.raises(ConfigError, match="does not support the 'ptracer' integrator") as e:
        tirender.render_grad(sc, np.zeros((8, 8, 3), np.float32), spp=1, method="rb", progress=False)
    assert "\n" not in str(e.value)
    d["media"] = {"fog": {"type": "homogeneous", "sigma_t": 0.5, "albedo": 0.5}}
    d["shapes"].append({"id": "box", "type": "cube", "bsdf": {"type": "null"}, "interior": "fog",
                        "to_world": [{"scale": 0.3}]})
    with pytest.raises(ConfigError, match="surfaces only"):
        tirender.render(tirender.load_scene(d), spp=1, progress=False)
