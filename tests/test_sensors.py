"""Sensor models (tirender/sensors: perspective, thinlens, orthographic) against Mitsuba 3.

* the XML scene loads in both renderers; every camera's x_fov equals Mitsuba's, its ray (origin, direction, maxt)
  for a set of film positions and aperture samples equals Mitsuba's ``sensor.sample_ray`` (scalar_rgb) to float32
  rounding (fov_axis x / y / diagonal / smaller / larger, focal_length, Mitsuba's 50 mm default, principal point
  offsets, near and far clip, thin lens, orthographic with a scaled to_world), and its light-tracing
  connection equals Mitsuba's ``sample_direction`` (film position, camera point, distance, weight);
* the clip planes in the images: near_clip hides what lies before it, far_clip lets rays escape (path,
  aov depth; volpath and the light tracer in the slow lane);
* camera parameters by name (scene.params / scene.sensor_params): x_fov set by name renders the image of
  the scene loaded with that fov, bit for bit; the checks of the scene file apply; not in the pool;
* the scene-file checks (no Taichi): scale in a perspective to_world, missing aperture_radius, aperture 0
  (a warning, 2^-24), fov ranges, near >= far, srf, keys of another model, YAML vs XML defaults;
* thin lens PRB gradients vs finite differences, and the light tracer through a thin lens vs the path
  tracer (slow lane).
"""
import math
import os

import numpy as np
import pytest

import taichi as ti
import tirender
from tirender.core.math import vec2, vec3
from tirender.errors import ConfigError
from tirender.sensors.registry import camera_connect, camera_ray

from scenes import camera

W, H = 40, 30
LOOK = '<lookat origin="1.2, 2.0, 5.0" target="0.1, -0.2, 0" up="0, 1, 0"/>'


def _film(w=W, h=H):
    return f'<film type="hdrfilm"><integer name="width" value="{w}"/><integer name="height" value="{h}"/></film>'


# id -> (type, properties, film size)
SENSORS = {
    "px": ("perspective", '<float name="fov" value="45"/><string name="fov_axis" value="x"/>', (W, H)),
    "py": ("perspective", '<float name="fov" value="45"/><string name="fov_axis" value="y"/>', (W, H)),
    "pdiag": ("perspective", '<float name="fov" value="45"/><string name="fov_axis" value="diagonal"/>', (W, H)),
    "psmall": ("perspective", '<float name="fov" value="45"/><string name="fov_axis" value="smaller"/>', (H, W)),
    "plarge": ("perspective", '<float name="fov" value="45"/><string name="fov_axis" value="larger"/>', (H, W)),
    "pfocal": ("perspective", '<string name="focal_length" value="35mm"/>', (W, H)),
    "pdefault": ("perspective", "", (W, H)),
    "ppp": ("perspective", '<float name="fov" value="50"/><float name="principal_point_offset_x" value="0.1"/>'
                           '<float name="principal_point_offset_y" value="-0.05"/>'
                           '<float name="near_clip" value="0.5"/><float name="far_clip" value="20"/>', (W, H)),
    "tl": ("thinlens", '<float name="fov" value="40"/><float name="aperture_radius" value="0.2"/>'
                       '<float name="focus_distance" value="3"/>', (W, H)),
    "tlf": ("thinlens", '<string name="focal_length" value="28mm"/><float name="aperture_radius" value="0.05"/>'
                        '<float name="focus_distance" value="4"/><float name="near_clip" value="0.2"/>'
                        '<float name="far_clip" value="50"/>', (W, H)),
    "ortho": ("orthographic", '<float name="near_clip" value="1"/><float name="far_clip" value="1000"/>', (W, H)),
    "ortho2": ("orthographic", "", (W, H)),
}
ORTHO_SCALE = {"ortho": '<scale x="1.5" y="1.5"/>', "ortho2": '<scale x="2" y="0.5" z="3"/>'}


def _xml(tmp_path):
    parts = ['<scene version="3.0.0">']
    for sid, (t, props, (w, h)) in SENSORS.items():
        parts.append(f'<sensor type="{t}" id="{sid}">{props}<transform name="to_world">{ORTHO_SCALE.get(sid, "")}'
                     f'{LOOK}</transform>{_film(w, h)}</sensor>')
    parts.append('<shape type="sphere"/></scene>')
    path = tmp_path / "sensors.xml"
    path.write_text("\n".join(parts))
    return str(path)


@ti.kernel
def _rays(st: ti.template(), cam: ti.i32, pos: ti.types.ndarray(), ap: ti.types.ndarray(), out: ti.types.ndarray()):
    for i in range(pos.shape[0]):
        o, d, t = camera_ray(st, cam, vec2(pos[i, 0], pos[i, 1]), vec2(ap[i, 0], ap[i, 1]))
        for k in ti.static(range(3)):
            out[i, k] = o[k]
            out[i, 3 + k] = d[k]
        out[i, 6] = t


@ti.kernel
def _connect(st: ti.template(), cam: ti.i32, p: ti.types.ndarray(), u: ti.types.ndarray(), out: ti.types.ndarray()):
    for i in range(p.shape[0]):
        c = camera_connect(st, cam, vec3(p[i, 0], p[i, 1], p[i, 2]), vec2(u[i, 0], u[i, 1]))
        out[i, 0] = c.valid
        out[i, 1] = c.pos[0]
        out[i, 2] = c.pos[1]
        out[i, 3] = c.imp
        out[i, 4] = c.dist
        for k in ti.static(range(3)):
            out[i, 5 + k] = c.q[k]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    path = _xml(tmp_path_factory.mktemp("sensors"))
    return tirender.load_scene(path), mi.load_file(path), mi


def test_x_fov_and_rays_match_mitsuba(both):
    sc, ms, mi = both
    params = mi.traverse(ms)
    rng = np.random.default_rng(3)
    samples = np.concatenate([rng.uniform(0, 1, (30, 2)), [[0.0, 0.0], [1.0, 1.0], [0.5, 0.5], [0.0, 1.0]]])
    apert = np.concatenate([rng.uniform(0, 1, (30, 2)), [[0.5, 0.5], [0.0, 0.0], [1.0, 0.25], [0.75, 1.0]]])
    st = sc.bind()
    for cam, (sid, (typ, _p, (w, h))) in enumerate(SENSORS.items()):
        assert sc.sensors[cam].id == sid and sc.sensors[cam].type == typ
        if typ != "orthographic":
            assert abs(sc.params[f"{sid}.x_fov"] - params[f"{sid}.x_fov"]) <= 2e-5, sid
        out = np.zeros((len(samples), 7))
        _rays(st, cam, np.ascontiguousarray(samples * [w, h], np.float32), apert.astype(np.float32), out)
        sensor = ms.sensors()[cam]
        for i, (s, a) in enumerate(zip(samples, apert)):
            ray, _w = sensor.sample_ray(0.0, 0.5, mi.Point2f(*s), mi.Point2f(*a))
            o, d = np.array(ray.o, np.float64), np.array(ray.d, np.float64)
            d_n = d / np.linalg.norm(d)
            scale = 1.0 + np.abs(o).max()
            assert np.abs(out[i, :3] - o).max() <= 1e-6 * scale, (sid, s, a, out[i, :3], o)
            assert np.abs(out[i, 3:6] - d_n).max() <= 1e-6, (sid, s, a, out[i, 3:6], d_n)
            assert abs(out[i, 6] - ray.maxt) <= 1e-6 * ray.maxt, (sid, s, a, out[i, 6], ray.maxt)


def test_light_tracing_connection_matches_mitsuba(both):
    """camera_connect vs Mitsuba's sample_direction (pinhole, thin lens): validity, film position, camera point,
    distance and weight; with a principal point offset, positions and weights where Mitsuba's are valid (its
    importance tests the unshifted image rectangle, tirender's the shifted one: sensors/perspective.py)."""
    sc, ms, mi = both
    rng = np.random.default_rng(5)
    st = sc.bind()
    for cam, (sid, (typ, _p, _wh)) in enumerate(SENSORS.items()):
        if typ == "orthographic":
            continue
        s = sc.sensors[cam]
        m = s.to_world
        local = np.stack([s.tan_x * rng.uniform(-1.2, 1.2, 60), s.tan_y * rng.uniform(-1.2, 1.2, 60), np.ones(60)], 1) \
            * rng.uniform(0.05, 8.0, (60, 1))
        local[:4, 2] = [-1.0, 0.3, 0.6, 25.0]                  # behind, before / at the near planes, beyond a far one
        p = local @ m[:3, :3].T + m[:3, 3]
        u = rng.uniform(0, 1, (60, 2))
        out = np.zeros((60, 8))
        _connect(st, cam, p.astype(np.float32), u.astype(np.float32), out)
        sensor = ms.sensors()[cam]
        n_valid = 0
        for i in range(60):
            it = mi.Interaction3f()
            it.p = mi.Point3f(*p[i])
            ds, wt = sensor.sample_direction(it, mi.Point2f(*u[i]))
            mvalid = float(wt[0]) > 0.0
            if sid != "ppp":
                assert bool(out[i, 0]) == mvalid, (sid, i, local[i], out[i], ds.uv)
            elif not mvalid:
                continue
            if not mvalid:
                continue
            n_valid += 1
            assert np.abs(out[i, 1:3] - np.array(ds.uv)).max() <= 2e-4, (sid, i, out[i, 1:3], ds.uv)
            assert abs(out[i, 3] - wt[0]) <= 1e-5 * wt[0], (sid, i, out[i, 3], wt[0])
            assert abs(out[i, 4] - ds.dist) <= 1e-5 * ds.dist, (sid, i)
            assert np.abs(out[i, 5:8] - np.array(ds.p)).max() <= 1e-5 * (1 + np.abs(ds.p).max()), (sid, i)
        assert n_valid >= 10, sid


# ------------------------------------------------------------------------------ clip planes in images
def _clip_scene(integ, **sensor):
    """Camera at the origin looking down -z: a small red emitter 0.5 away (before a near plane of 1), a large
    green one 5 away (beyond a far plane of 3); nothing else."""
    cam = dict(camera([0, 0, 0], [0, 0, -1], fov=40, w=8, h=8), **sensor)
    return {"integrator": integ, "sensors": [cam],
            "shapes": [{"id": "red", "type": "rectangle", "to_world": [{"scale": 0.1}, {"translate": [0, 0, -0.5]}],
                        "emitter": {"type": "area", "radiance": [1.0, 0.0, 0.0]}},
                       {"id": "green", "type": "rectangle", "to_world": [{"scale": 2.5}, {"translate": [0, 0, -5]}],
                        "emitter": {"type": "area", "radiance": [0.0, 1.0, 0.0]}}]}


CLIPS = ({"near_clip": 0.1},                      # the red emitter in front
         {"near_clip": 1.0},                      # clipped: the green one behind it
         {"near_clip": 1.0, "far_clip": 3.0})     # both clipped: the ray escapes
RED, GREEN, BLACK = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]


def _clip_images(integ, spp=2):
    """(centre 2 x 2 pixels, corner pixel) of each CLIPS case."""
    out = []
    for clip in CLIPS:
        img = tirender.render(tirender.load_scene(_clip_scene(integ, **clip)), spp=spp, seed=0, progress=False)
        out.append((img[3:5, 3:5].reshape(-1, 3), img[0, 0]))
    return out


def _assert_clips(integ):
    for (centre, corner), want_c, want_k in zip(_clip_images(integ), (RED, GREEN, BLACK), (GREEN, GREEN, BLACK)):
        assert np.allclose(centre, want_c, atol=1e-6) and np.allclose(corner, want_k, atol=1e-6), (centre, corner)


def test_clip_planes_in_images():
    _assert_clips({"type": "path", "max_depth": 1})


@pytest.mark.slow
def test_clip_planes_in_images_volpath_and_light_tracer():
    _assert_clips({"type": "volpath", "max_depth": 1})
    # the light tracer: points outside the clip range connect nothing (Mitsuba's sample_direction); with the red
    # emitter before the near plane its square still occludes the green one's connections to the pinhole (as in
    # Mitsuba's ptracer, whose shadow rays end at the pinhole)
    pos = lambda x: (np.asarray(x) > 0).tolist()     # noqa: E731
    (c1, k1), (c2, k2), (c3, k3) = _clip_images({"type": "ptracer", "max_depth": 1}, spp=8)
    assert all(pos(c) == [True, False, False] for c in c1) and pos(k1) == [False, True, False], (c1, k1)
    assert not c2.any() and pos(k2) == [False, True, False], (c2, k2)
    assert not c3.any() and not k3.any(), (c3, k3)


def test_clip_planes_aov_depth():
    """aov depth is the distance from the ray's origin on the near plane (Mitsuba's si.t): 5 - near along the
    optical axis; 0 where the far plane clips."""
    for clip, want in (({"near_clip": 1.0}, 4.0), ({"near_clip": 0.2}, 0.3), ({"near_clip": 1.0, "far_clip": 3.0}, 0.0)):
        sc = tirender.load_scene(_clip_scene({"type": "aov", "aovs": ["depth"]}, **clip))
        img = tirender.render(sc, spp=1, seed=0, progress=False)
        centre = img[4, 4, 0]
        # the pixel's rays leave the axis by at most (1, 1) px: (5 - near) / cos θ, cos θ > 0.99
        assert want <= centre <= want * 1.01 + 1e-6, (clip, centre)


# ------------------------------------------------------------------------------ parameters by name
def _ball_scene(**sensor):
    cam = dict(camera([0.3, 0.6, 3.5], [0, 0, 0], fov=40, w=12, h=10), **sensor)
    if cam["type"] == "orthographic":
        del cam["fov"], cam["fov_axis"]
    return {"integrator": {"type": "path", "max_depth": 2}, "sensors": [cam],
            "shapes": [{"id": "ball", "type": "sphere", "resolution": 16}],
            "emitters": [{"type": "constant", "radiance": 1.0}]}


def test_camera_parameters_by_name():
    sc = tirender.load_scene(_ball_scene(id="cam"))
    assert set(sc.sensor_params.keys()) == {f"cam.{k}" for k in ("x_fov", "principal_point_offset_x",
                                                                 "principal_point_offset_y", "to_world", "near_clip",
                                                                 "far_clip")}
    assert "cam.x_fov" in sc.params and "cam.x_fov" not in sc.params.keys()
    with pytest.raises(ConfigError, match="not differentiable"):
        sc.params.info("cam.x_fov")          # what optimisers and gradient readers ask for
    assert sc.params["cam.x_fov"] == pytest.approx(40.0, abs=1e-9)
    sc.params["cam.x_fov"] = 25.0
    sc.params["cam.principal_point_offset_x"] = 0.1
    img = tirender.render(sc, spp=2, seed=3, progress=False)
    ref = tirender.load_scene(_ball_scene(fov=25.0, principal_point_offset_x=0.1))
    assert np.array_equal(img, tirender.render(ref, spp=2, seed=3, progress=False))
    # a to_world set by name moves the camera as the scene file's does
    look = {"look_at": {"origin": [0.5, 0, 4], "target": [0, 0.1, 0], "up": [0, 1, 0]}}
    ref = tirender.load_scene(_ball_scene(fov=25.0, principal_point_offset_x=0.1, to_world=look))
    sc.params["cam.to_world"] = ref.sensors[0].to_world
    assert np.array_equal(sc.sensor_params["cam.to_world"], ref.sensors[0].to_world)
    assert np.array_equal(tirender.render(sc, spp=2, seed=3, progress=False),
                          tirender.render(ref, spp=2, seed=3, progress=False))
    with pytest.raises(ConfigError, match="scale factors"):
        sc.params["cam.to_world"] = np.diag([2.0, 2.0, 2.0, 1.0])
    with pytest.raises(ConfigError, match="180"):
        sc.params["cam.x_fov"] = 180.0
    with pytest.raises(ConfigError, match="near_clip"):
        sc.params["cam.near_clip"] = 2e4
    with pytest.raises(ConfigError, match="unknown sensor parameter"):
        sc.sensor_params["cam.aperture_radius"] = 0.1
    thin = tirender.load_scene(_ball_scene(type="thinlens", aperture_radius=0.1))
    assert set(thin.sensor_params.keys()) == {f"sensor0.{k}" for k in ("aperture_radius", "focus_distance", "x_fov",
                                                                      "to_world", "near_clip", "far_clip")}
    with pytest.warns(UserWarning, match="zero aperture radius"):
        thin.params["sensor0.aperture_radius"] = 0.0
    assert thin.params["sensor0.aperture_radius"] == 2.0 ** -24


# ------------------------------------------------------------------------------ scene-file checks
def _describe(sensor, xml=None, tmp_path=None):
    from tirender.api import describe
    from tirender.config import load_config
    if xml is not None:
        p = tmp_path / "s.xml"
        p.write_text(f'<scene version="3.0.0">{xml}<shape type="sphere"/></scene>')
        return describe(load_config(str(p)))[0].sensors[0]
    return describe({"scene": {"sensors": [sensor], "shapes": [{"type": "sphere"}]}})[0].sensors[0]


def test_scene_file_checks(tmp_path):
    look = {"look_at": {"origin": [0, 0, 3], "target": [0, 0, 0], "up": [0, 1, 0]}}
    s = _describe({})
    assert s.type == "perspective" and s.tan_x == pytest.approx(math.tan(math.radians(39.3077) / 2))
    assert (s.near_clip, s.far_clip, s.focus_distance) == (1e-2, 1e4, 1e4)
    # XML scenes get Mitsuba's default focal length 50 mm (diagonal of 36 x 24 mm film)
    x = _describe(None, '<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="36"/>'
                        '<integer name="height" value="24"/></film></sensor>', tmp_path)
    assert x.tan_x == pytest.approx(18.0 / 50.0, rel=1e-12)
    o = _describe({"type": "orthographic", "to_world": [{"scale": [2, 3, 1]}], "film": {"width": 20, "height": 10}})
    assert (o.tan_x, o.tan_y) == (1.0, 0.5)
    cases = [
        ({"to_world": [{"scale": 2}, look]}, "scale factors"),
        ({"type": "thinlens", "aperture_radius": 0.1, "to_world": [{"scale": 1.1}]}, "scale factors"),
        ({"type": "thinlens"}, "aperture_radius: missing required key"),
        ({"fov": 180}, "must be"),
        ({"fov": 40, "focal_length": "50mm"}, "either"),
        ({"focal_length": "fifty"}, "focal length"),
        ({"fov_axis": "z"}, "unknown value"),
        ({"near_clip": 0.0}, "near_clip: must be > 0"),
        ({"near_clip": 10.0, "far_clip": 5.0}, "smaller than far_clip"),
        ({"shutter_open": 1.0, "shutter_close": 0.5}, "shutter_open"),
        ({"srf": 1.0}, "srf"),
        ({"aperture_radius": 0.1}, "does not apply to a 'perspective' sensor"),
        ({"type": "orthographic", "fov": 30}, "does not apply to a 'orthographic' sensor"),
        ({"type": "fisheye"}, "unknown sensor type"),
    ]
    for spec, msg in cases:
        with pytest.raises(ConfigError, match=msg):
            _describe(spec)
    with pytest.warns(UserWarning, match="zero aperture radius"):
        t = _describe({"type": "thinlens", "aperture_radius": 0.0})
    assert t.aperture_radius == 2.0 ** -24 and t.focus_distance == 1e4
    assert _describe({"type": "perspective", "shutter_open": 0.1, "shutter_close": 0.4, "focus_distance": 2.0}) \
        .focus_distance == 2.0
    with pytest.raises(ConfigError, match=r"line 1: <spectrum name=\"srf\">: 'srf' is not supported"):
        _describe(None, '<sensor type="perspective"><spectrum name="srf" value="1"/></sensor>', tmp_path)
    with pytest.raises(ConfigError, match="unsupported sensor type 'radiancemeter'"):
        _describe(None, '<sensor type="radiancemeter"/>', tmp_path)


def test_light_tracer_refuses_orthographic():
    sc = tirender.load_scene(dict(_ball_scene(type="orthographic"), integrator={"type": "ptracer"}))
    with pytest.raises(ConfigError, match="no sample_direction"):
        tirender.render(sc, spp=1, progress=False)


# ------------------------------------------------------------------------------ thin lens images (slow)
def _dof_scene(integ, w=24, h=18):
    """Depth of field: a ball in focus, one far behind it, on a floor under an area light."""
    cam = dict(camera([0.0, 0.8, 4.0], [0, 0.3, 0], fov=45, w=w, h=h, filt="gaussian"), type="thinlens",
               aperture_radius=0.25, focus_distance=4.0)
    rot = {"rotate": {"axis": [1, 0, 0], "angle": -90}}
    return {"integrator": integ, "sensors": [cam],
            "bsdfs": {"floor": {"type": "diffuse", "reflectance": [0.6, 0.5, 0.4]},
                      "near": {"type": "diffuse", "reflectance": [0.2, 0.5, 0.8]},
                      "far": {"type": "diffuse", "reflectance": [0.8, 0.3, 0.2]}},
            "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor", "to_world": [{"scale": 6}, rot]},
                       {"id": "near", "type": "sphere", "bsdf": "near", "resolution": 32,
                        "to_world": [{"scale": 0.5}, {"translate": [0.3, 0.5, 0.0]}]},
                       {"id": "far", "type": "sphere", "bsdf": "far", "resolution": 32,
                        "to_world": [{"scale": 0.6}, {"translate": [-0.8, 0.6, -3.0]}]},
                       {"id": "light", "type": "rectangle", "to_world": [{"scale": 0.8}, {"rotate": {"axis": [1, 0, 0],
                                                                                                      "angle": 90}},
                                                                         {"translate": [0, 3.0, 0]}],
                        "emitter": {"type": "area", "radiance": [6.0, 6.0, 6.0]}}]}


@pytest.mark.slow
def test_light_tracer_thinlens_matches_path_tracer():
    """ptracer through a thin lens (Mitsuba's sample_direction: the lens sampled per connection) converges to the
    path tracer's image: the image means agree within 3 SE (the light tracer's, over 16 seeds: its per-seed
    values are heavy-tailed), and 3 x 3 pixel blocks within their noise (RMSE <= 1.5 x: heavy tails again)."""
    pt = tirender.load_scene(_dof_scene({"type": "ptracer", "max_depth": 3}))
    a = np.stack([tirender.render(pt, spp=32, seed=10 + s, progress=False) for s in range(16)])
    pa = tirender.load_scene(_dof_scene({"type": "path", "max_depth": 3}))
    b = np.stack([tirender.render(pa, spp=128, seed=50 + s, progress=False) for s in range(4)])
    ma, mb = a.mean(axis=(1, 2)), b.mean(axis=(1, 2))        # (seeds, 3)
    se = np.sqrt(ma.var(axis=0, ddof=1) / len(a) + mb.var(axis=0, ddof=1) / len(b))
    assert np.all(np.abs(ma.mean(0) - mb.mean(0)) <= 3 * se), (ma.mean(0), mb.mean(0), se)
    blocks = lambda x: x.reshape(len(x), 6, 3, 8, 3, 3).mean(axis=(2, 4))   # noqa: E731
    ba, bb = blocks(a), blocks(b)
    noise = np.sqrt((ba.var(axis=0, ddof=1) / len(a) + bb.var(axis=0, ddof=1) / len(b)).mean())
    rmse = np.sqrt(((ba.mean(0) - bb.mean(0)) ** 2).mean())
    assert rmse <= 1.5 * noise, (rmse, noise)


@pytest.mark.slow
def test_thinlens_prb_matches_finite_differences():
    """PRB through a thin lens: the replay draws the lens sample again (sensors/registry.camera_sample), so the
    defocused edge between the ball and the floor gives the floor's gradient of finite differences."""
    from gradcheck_util import assert_agree, projected_gradients
    sc = tirender.load_scene(_dof_scene({"type": "path", "max_depth": 3, "rr_depth": 100}, w=16, h=12))
    w = np.random.default_rng(0).uniform(0.2, 1.0, (12, 16, 3)).astype(np.float32) / (16 * 12)
    g, f = projected_gradients(sc, "near.reflectance", [1.0, 1.0, 1.0], w, spp=16, seeds_prb=range(101, 109),
                               seeds_fd=range(501, 509), h=0.02)
    assert_agree(g, f, "near.reflectance (thin lens)")


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TIRENDER_MITSUBA_DATA"), reason="needs Mitsuba's test data")
def test_mitsuba_suite_orthographic_scene_passes_z_test():
    """Mitsuba's own regression scene (tests/scenes/orthographic_sensor: a scaled orthographic camera with near
    and far clip, a checkerboard) at Mitsuba's budget (2e6 samples per image) passes its per-pixel Z-test
    against the 32k-spp reference (at most 0.25 % of the pixels below the Bonferroni-corrected 1 % level)."""
    from tirender.io.exr import read_exr
    folder = os.path.join(os.environ["TIRENDER_MITSUBA_DATA"], "tests", "scenes", "orthographic_sensor")
    ref, var = (read_exr(os.path.join(folder, "refs", f"test_orthographic_ref_rgb{x}.exr")).astype(np.float64)
                for x in ("", "_var"))
    n = ref.shape[0] * ref.shape[1]
    spp = int(2e6) // n
    sc = tirender.load_scene(os.path.join(folder, "test_orthographic_path.xml"),
                             defines={"spp": str(spp), "integrator": "path"})
    img = tirender.render(sc, spp=spp, seed=0, progress=False).astype(np.float64)
    z = np.abs(img - ref) * np.sqrt(spp / np.maximum(var, 1e-4))
    p = np.vectorize(math.erfc)(z / math.sqrt(2))
    alpha = 1 - (1 - 0.01) ** (1 / n)
    assert (p > alpha).mean() >= 0.9975, (p > alpha).mean()
