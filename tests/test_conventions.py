"""Mitsuba 3's conventions: bitmap v = 0 is the top row (rectangles, PLY), OBJ texture coordinates are
flipped on load, and the environment map's latitude-longitude lookup (rows at θ = πj/(H-1), columns
centred at (x+0.5)/W, no blending across the poles) returns Mitsuba's values.

tests/data/mitsuba_envmap_eval.npz: Mitsuba 3.9.1 ``scalar_rgb`` ``envmap.eval`` of a random 16x8
map at 308 directions (the poles, the seam, the axes, random); regenerated live when mitsuba is
importable."""
import os

import numpy as np
import pytest
import taichi as ti

import tirender
from scenes import camera
from tirender.core.math import vec3
from tirender.emitters.base import env_record
from tirender.emitters.envmap import Envmap

DATA = os.path.join(os.path.dirname(__file__), "data", "mitsuba_envmap_eval.npz")


@ti.kernel
def _env_eval(st: ti.template(), e: ti.i32, d: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(d.shape[0]):
        le = Envmap.eval(st, e, env_record(e, vec3(0.0), vec3(d[k, 0], d[k, 1], d[k, 2])))
        for c in ti.static(range(3)):
            out[k, c] = le[c]


def _tirender_env(img, dirs):
    h, w = img.shape[:2]
    sc = tirender.load_scene({"sensors": [{"film": {"width": 4, "height": 4}}],
                              "emitters": [{"id": "sky", "type": "envmap", "width": w, "height": h}]})
    sc.params["sky.radiance"] = img
    out = np.zeros((len(dirs), 3), np.float32)
    _env_eval(sc.bind(), 0, np.ascontiguousarray(dirs, np.float32), out)
    return out


def test_envmap_eval_equals_mitsuba():
    ref = np.load(DATA)
    got = _tirender_env(ref["image"], ref["dirs"])
    want = ref["values"]
    assert np.allclose(got[0], [3.88, 1.0, 0.5], rtol=1e-6)        # zenith: the top row, unblended
    assert np.allclose(got[1], [0.25, 2.0, 1.5], rtol=1e-6)        # nadir: the bottom row
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-6)
    assert rel.max() < 2e-4, (rel.max(), int(rel.argmax() // 3))


def test_envmap_eval_equals_live_mitsuba():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    rng = np.random.default_rng(11)
    img = rng.uniform(0.0, 3.0, (6, 10, 3)).astype(np.float32)
    dirs = rng.normal(size=(64, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    e = mi.load_dict({"type": "envmap", "bitmap": mi.Bitmap(img)})
    want = []
    for d in dirs:
        si = mi.SurfaceInteraction3f()
        si.wi = mi.Vector3f(*(-d))
        want.append(np.array(e.eval(si)))
    got = _tirender_env(img, dirs)
    assert np.allclose(got, np.array(want), rtol=2e-4, atol=1e-6)


def _quad_files(tmp):
    """The rectangle's quad as OBJ (vt (0,0) at its bottom-left, OpenGL style) and PLY (same uvs)."""
    obj = os.path.join(tmp, "quad.obj")
    with open(obj, "w") as f:
        f.write("v -1 -1 0\nv 1 -1 0\nv 1 1 0\nv -1 1 0\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
                "f 1/1 2/2 3/3\nf 1/1 3/3 4/4\n")
    ply = os.path.join(tmp, "quad.ply")
    with open(ply, "w") as f:
        f.write("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
                "property float u\nproperty float v\nelement face 2\nproperty list uchar int vertex_indices\n"
                "end_header\n-1 -1 0 0 0\n1 -1 0 1 0\n1 1 0 1 1\n-1 1 0 0 1\n3 0 1 2\n3 0 2 3\n")
    return obj, ply


@pytest.mark.parametrize("shape", ["rectangle", "ply", "obj", "obj_noflip"])
def test_texture_rows_on_shapes(tmp_path, shape):
    """A texture whose first row is red and last row blue, seen face-on (image row 0 at the top):
    rectangle and PLY show the first row at the bottom (v = 0 is the top row, at local y = -1);
    OBJ files are flipped on load (upright), unless flip_tex_coords is false."""
    tex = np.zeros((2, 2, 3), np.float32)
    tex[0] = [1, 0, 0]
    tex[1] = [0, 0, 1]
    np.save(tmp_path / "tex.npy", tex)
    obj, ply = _quad_files(str(tmp_path))
    spec = {"id": "q", "bsdf": {"type": "diffuse", "reflectance": {"type": "bitmap", "data": str(tmp_path / "tex.npy"),
                                                                   "filter": "nearest"}}}
    if shape == "rectangle":
        spec["type"] = "rectangle"
    else:
        spec.update(type=shape[:3], filename=obj if shape.startswith("obj") else ply)
        if shape == "obj_noflip":
            spec["flip_tex_coords"] = False
    sc = tirender.load_scene({"integrator": {"type": "aov", "aovs": ["albedo"]},
                              "sensors": [camera([0, 0, 3], [0, 0, 0], fov=30, w=16, h=16)], "shapes": [spec]})
    img = tirender.render(sc, spp=4, seed=0, progress=False)
    top, bottom = img[3, 8], img[12, 8]
    red, blue = np.array([1, 0, 0]), np.array([0, 0, 1])
    upright = shape == "obj"
    assert np.allclose(top, red if upright else blue, atol=1e-3), (shape, top)
    assert np.allclose(bottom, blue if upright else red, atol=1e-3), (shape, bottom)


def test_checkerboard_and_to_uv_follow_mitsuba():
    """checkerboard.cpp: color0 where (frac(u') > .5) == (frac(v') > .5), else color1, with
    (u', v') = to_uv (u, v); checked per pixel against the uv AOV (pixels near cell edges skipped)."""
    def scene(aov):
        return tirender.load_scene({
            "integrator": {"type": "aov", "aovs": [aov]},
            "sensors": [camera([0, 0, 2.5], [0, 0, 0], fov=40, w=32, h=32)],
            "shapes": [{"type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": {
                "type": "checkerboard", "color0": 0.1, "color1": [0.8, 0.6, 0.4],
                "to_uv": [{"scale": [3, 2, 1]}, {"translate": [0.1, 0.2, 0]}]}}}]})
    uv = tirender.render(scene("uv"), spp=1, seed=0, progress=False)[..., :2]
    alb = tirender.render(scene("albedo"), spp=1, seed=0, progress=False)
    up = np.stack([uv[..., 0] * 3 + 0.1, uv[..., 1] * 2 + 0.2], -1)
    fr = up - np.floor(up)
    inner = np.all(np.abs(fr - 0.5) > 0.08, -1) & np.all(np.minimum(fr, 1 - fr) > 0.08, -1)
    is0 = (fr[..., 0] > 0.5) == (fr[..., 1] > 0.5)
    want = np.where(is0[..., None], [0.1, 0.1, 0.1], [0.8, 0.6, 0.4])
    assert inner.sum() > 200
    assert np.allclose(alb[inner], want[inner], atol=1e-4)
