"""PRB gradients vs finite differences with correlated random numbers, for every parameter type:
diffuse reflectance (constant, bitmap texture), rough conductor (roughness, specular), rough plastic
(roughness, diffuse, specular), area / point / directional / constant / envmap emitters, normal maps —
including a parameter seen only indirectly (a wall behind the camera) and one lit only through NEE
(a point light). Criterion: means over independent seeds agree within 3 combined standard errors."""
import os
import sys

import numpy as np
import pytest

import tirender
from gradcheck_util import assert_agree, image_weights, projected_gradients
from scenes import camera

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from methods import box_scene  # noqa: E402

SEEDS_PRB = [101 + k for k in range(10)]
SEEDS_FD = [501 + k for k in range(10)]
# glossy highlights of an envmap: per-seed FD values are wide (sd ≈ 0.1 of a mean ≈ -0.28 for the
# roughness), so 10 seeds under-estimate the standard error; these cases use 24
SEEDS_FD_GLOSSY = [501 + k for k in range(24)]


def _box_scene():
    """Closed box seen from inside (benchmarks/methods.box_scene's walls and ceiling light); a hidden wall behind
    the camera; area light + point light; a textured floor."""
    d = box_scene(w=20, max_depth=4)
    d["integrator"]["rr_depth"] = 100
    d["bsdfs"] = {"white": {"type": "diffuse", "reflectance": [0.6, 0.6, 0.6]},
                  "red": {"type": "diffuse", "reflectance": [0.6, 0.2, 0.15]},
                  "hidden": {"type": "diffuse", "reflectance": [0.5, 0.7, 0.3]},
                  "floor": {"type": "diffuse", "reflectance": {"type": "bitmap", "width": 6, "height": 6,
                                                               "value": 0.5}}}
    for shape, bsdf in zip(d["shapes"], ("floor", "white", "white", "hidden", "red", "white")):
        shape["bsdf"] = bsdf
    d["emitters"] = [{"id": "lamp", "type": "point", "position": [0.5, 0.5, 0.5], "intensity": [2.0, 2.0, 2.0]}]
    return d


@pytest.fixture(scope="module")
def box():
    sc = tirender.load_scene(_box_scene())
    rng = np.random.default_rng(1)
    sc.params["floor.reflectance"] = rng.uniform(0.2, 0.8, (6, 6, 3)).astype(np.float32)
    return sc


BOX_CASES = [
    ("red.reflectance", "rgb", 0.02, "directly visible"),
    ("hidden.reflectance", "rgb", 0.02, "seen only indirectly (behind the camera)"),
    ("floor.reflectance", "tex", 0.02, "bitmap texture"),
    ("light.radiance", "rgb", 0.2, "area emitter"),
    ("lamp.intensity", "rgb", 0.1, "point light: lit only through NEE"),
]


@pytest.mark.parametrize("pname,kind,h,why", BOX_CASES, ids=[c[0] for c in BOX_CASES])
def test_prb_matches_fd_box(box, pname, kind, h, why):
    u = np.random.default_rng(7).uniform(0.5, 1.0, box.params[pname].shape)
    g, f = projected_gradients(box, pname, u, image_weights(box), 16, SEEDS_PRB, SEEDS_FD, h)
    assert_agree(g, f, f"{pname} ({why})")


def _glossy_scene():
    return {
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [camera([0, 0.8, 3.2], [0, -0.2, 0], fov=40, w=20, h=20)],
        "bsdfs": {"metal": {"type": "roughconductor", "distribution": "ggx", "material": "Cu", "roughness": 0.25,
                            "specular_reflectance": [0.9, 0.8, 0.7]},
                  "plastic": {"type": "roughplastic", "distribution": "ggx", "roughness": 0.3,
                              "diffuse_reflectance": [0.3, 0.5, 0.6],
                              "specular_reflectance": [0.8, 0.8, 0.8]}},
        "shapes": [{"id": "ball", "type": "sphere", "bsdf": "metal", "resolution": 24},
                   {"id": "floor", "type": "rectangle", "bsdf": "plastic",
                    "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}, {"translate": [0, -1, 0]}]}],
        "emitters": [{"id": "sky", "type": "envmap", "width": 16, "height": 8, "radiance": 1.0}],
    }


@pytest.fixture(scope="module")
def glossy():
    sc = tirender.load_scene(_glossy_scene())
    rng = np.random.default_rng(2)
    sky = rng.uniform(0.2, 1.5, (8, 16, 3)).astype(np.float32)
    sky[1, 5] = 12.0  # a bright spot
    sc.params["sky.radiance"] = sky
    return sc


GLOSSY_CASES = [
    ("metal.roughness", 0.01), ("metal.specular_reflectance", 0.02), ("plastic.roughness", 0.01),
    ("plastic.diffuse_reflectance", 0.02), ("plastic.specular_reflectance", 0.02),
    ("sky.radiance", 0.2),  # the image is linear in the texels: a large step has no bias, less FD noise
]


@pytest.mark.slow
@pytest.mark.parametrize("pname,h", GLOSSY_CASES, ids=[c[0] for c in GLOSSY_CASES])
def test_prb_matches_fd_glossy(glossy, pname, h):
    u = np.random.default_rng(8).uniform(0.5, 1.0, glossy.params[pname].shape)
    g, f = projected_gradients(glossy, pname, u, image_weights(glossy), 16, SEEDS_PRB, SEEDS_FD_GLOSSY, h)
    assert_agree(g, f, pname)


def _normalmap_scene(rng):
    """A normal-mapped diffuse plane (a random 4x4 normal map drawn from rng) under a directional light and a
    constant environment: 16x16 pixels."""
    sc = tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [camera([0, 0, 3], [0, 0, 0], fov=40, w=16, h=16)],
        "bsdfs": {"bumpy": {"type": "diffuse", "reflectance": [0.7, 0.6, 0.5],
                            "normalmap": {"type": "bitmap", "width": 4, "height": 4, "value": [0.5, 0.5, 1.0]}}},
        "shapes": [{"id": "plane", "type": "rectangle", "bsdf": "bumpy"}],
        "emitters": [{"id": "sun", "type": "directional", "direction": [0.4, -0.3, -1.0], "irradiance": 3.0},
                     {"id": "amb", "type": "constant", "radiance": [0.3, 0.35, 0.4]}],
    })
    sc.params["bumpy.normalmap"] = np.concatenate([rng.uniform(0.3, 0.7, (4, 4, 2)), np.full((4, 4, 1), 0.9)],
                                                  -1).astype(np.float32)
    return sc


@pytest.mark.slow
def test_prb_matches_fd_normalmap_constant_env_directional():
    rng = np.random.default_rng(3)
    sc = _normalmap_scene(rng)
    w = image_weights(sc)
    for pname, h in (("bumpy.normalmap", 0.01), ("sun.irradiance", 0.05), ("amb.radiance", 0.02)):
        u = rng.uniform(-1.0, 1.0, sc.params[pname].shape) if pname == "bumpy.normalmap" else \
            rng.uniform(0.5, 1.0, sc.params[pname].shape)
        g, f = projected_gradients(sc, pname, u, w, 16, SEEDS_PRB, SEEDS_FD, h)
        assert_agree(g, f, pname)


@pytest.mark.slow
@pytest.mark.parametrize("wrapped", [pytest.param(False, marks=pytest.mark.extended), True],
                         ids=["mask", "mask_under_normalmap"])   # the wrapped case checks the opacity gradient too
def test_prb_matches_fd_mask_opacity(wrapped):
    """A half-transparent card (mask over a diffuse) in front of a lit floor: the opacity gradient has
    a term through the card's material (L_nested / o) and one through its holes (-L_through / (1 - o),
    the pass-through lobe) — Mitsuba's prb has only the first. Also under a (tilted) normal map, which
    forwards the pass-through term to the mask."""
    d = {
        "integrator": {"type": "path", "max_depth": 4, "rr_depth": 100},
        "sensors": [camera([0, 1.0, 3.0], [0, 0.3, 0], fov=45, w=16, h=16)],
        "bsdfs": {"card": {"type": "mask", "opacity": 0.4, "bsdf": {"type": "diffuse", "reflectance": [0.3, 0.4, 0.5]}},
                  "floor": {"type": "diffuse", "reflectance": [0.7, 0.6, 0.5]}},
        "shapes": [{"id": "card", "type": "rectangle", "bsdf": "card",
                    "to_world": [{"scale": 0.6}, {"translate": [0, 0.5, 0.5]}]},
                   {"id": "floor", "type": "rectangle", "bsdf": "floor",
                    "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]}],
        "emitters": [{"id": "sun", "type": "directional", "direction": [0.3, -1.0, -0.4], "irradiance": 3.0},
                     {"id": "amb", "type": "constant", "radiance": [0.2, 0.2, 0.25]}],
    }
    if wrapped:
        d["bsdfs"]["card"]["normalmap"] = {"type": "bitmap", "width": 2, "height": 2, "value": [0.6, 0.45, 0.9]}
    sc = tirender.load_scene(d)
    w = image_weights(sc)
    g, f = projected_gradients(sc, "card.opacity", np.float32(1.0), w, 16, SEEDS_PRB, SEEDS_FD_GLOSSY, 0.02)
    assert_agree(g, f, "card.opacity")
