"""Mitsuba 3's conventions: bitmap v = 0 is the top row (rectangles, PLY), OBJ texture coordinates are
flipped on load, and Mitsuba's checkerboard / to_uv."""
import os

import numpy as np
import pytest

import tirender
from scenes import camera


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


def test_scalar_checkerboard_is_mitsubas_eval_1():
    """Mitsuba's checkerboard gives its colours crosswise in eval_1 (color0 where (frac(u) > .5) != (frac(v) > .5)),
    which scalar parameters read, and as above in eval (colours): the 2x2 bitmap of each kind of key against
    Mitsuba's eval_1 / eval at the four cell centres."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    board = {"type": "checkerboard", "color0": 0.2, "color1": 0.7}
    sc = tirender.load_scene({"sensors": [{"film": {"width": 2, "height": 2}}],
                              "bsdfs": {"p": {"type": "principledthin", "spec_trans": board, "base_color": board}},
                              "shapes": [{"type": "rectangle", "bsdf": "p"}]})
    t = mi.load_dict({"type": "checkerboard", "color0": 0.2, "color1": 0.7})
    si = mi.SurfaceInteraction3f()
    for row in range(2):
        for col in range(2):
            si.uv = mi.Point2f(0.25 + 0.5 * col, 0.25 + 0.5 * row)      # bitmap row = v
            assert np.isclose(sc.params["p.spec_trans"][row, col, 0], t.eval_1(si)), (row, col)
            assert np.allclose(sc.params["p.base_color"][row, col], np.array(t.eval(si)), atol=1e-6), (row, col)
    assert not np.allclose(sc.params["p.spec_trans"][..., 0], sc.params["p.base_color"][..., 0])
