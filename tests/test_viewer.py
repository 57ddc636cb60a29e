"""Viewer (issue 7): orbit camera and injected events, headless frames vs tirender.render,
integrator/keys, radiance-field orbit, live optimisation view, and a real window under Xvfb."""
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from tirender.cli import main as cli_main
from tirender.api import load_scene, render
from tirender.scene.transforms import look_at
from tirender.viewer import (MODES, Event, LiveOptimizationView, OrbitCamera, SceneView, apply_event,
                             tonemap)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
SMALL = ["--set", "scene.sensors.0.film.width=48", "--set", "scene.sensors.0.film.height=40"]
SMALL_SCENE = ["sensors.0.film.width=48", "sensors.0.film.height=40"]
CBOX_ORIGIN = np.array([0.0, 0.0, 3.9])


@pytest.fixture(scope="module")
def scene():
    return load_scene(CBOX, overrides=SMALL_SCENE)


def _press(key, pos=(0.5, 0.5), mods=()):
    return Event("press", key, pos, mods)


def _drag(cam, button, start, end, mods=()):
    changed = [apply_event(cam, Event("press", button, start, mods)),
               apply_event(cam, Event("motion", "Motion", end, mods)),
               apply_event(cam, Event("release", button, end, mods))]
    return changed


# ------------------------------------------------------------------------------- orbit camera

def test_orbit_camera_reproduces_sensor(scene):
    s = scene.sensors[0]
    cam = OrbitCamera.from_to_world(s.to_world, center=(0, 0, 0))
    assert cam.distance == pytest.approx(3.9)
    np.testing.assert_allclose(cam.target, 0, atol=1e-6)
    np.testing.assert_allclose(cam.up, [0, 1, 0])
    np.testing.assert_allclose(cam.to_world(), s.to_world, atol=1e-6)
    # no centre: distance 1 along the view direction
    cam1 = OrbitCamera.from_to_world(s.to_world)
    np.testing.assert_allclose(cam1.target, [0, 0, 2.9], atol=1e-6)


def test_orbit_pan_zoom_methods():
    cam = OrbitCamera.from_to_world(look_at(CBOX_ORIGIN, (0, 0, 0), (0, 1, 0)), center=(0, 0, 0))
    cam.orbit(90, 0)                       # counter-clockwise about +y: +z -> +x
    np.testing.assert_allclose(cam.origin, [3.9, 0, 0], atol=1e-9)
    m = cam.to_world()
    np.testing.assert_allclose(m[:3, 2], [-1, 0, 0], atol=1e-9)     # still looking at the target
    np.testing.assert_allclose(m[:3, 1], [0, 1, 0], atol=1e-9)
    cam.orbit(-90, 30)
    np.testing.assert_allclose(cam.origin, 3.9 * np.array([0, np.sin(np.pi / 6), np.cos(np.pi / 6)]),
                               atol=1e-9)
    cam.orbit(0, 100)                      # clamped below the pole
    assert cam.elevation == pytest.approx(89.0)
    cam.reset()
    np.testing.assert_allclose(cam.origin, CBOX_ORIGIN, atol=1e-9)
    cam.zoom(0.5)
    np.testing.assert_allclose(cam.origin, [0, 0, 1.95], atol=1e-9)
    cam.reset()
    cam.pan(0.1, -0.2)                     # right = +x for this camera, up = +y
    np.testing.assert_allclose(cam.target, [0.39, -0.78, 0], atol=1e-9)
    np.testing.assert_allclose(cam.origin, [0.39, -0.78, 3.9], atol=1e-9)


def test_injected_mouse_events_move_camera_as_specified():
    cam = OrbitCamera.from_to_world(look_at(CBOX_ORIGIN, (0, 0, 0), (0, 1, 0)), center=(0, 0, 0),
                                    tan_x=0.4, tan_y=0.3)
    # LMB drag a quarter window to the left: azimuth + 180 * 0.25 = +45 degrees
    assert _drag(cam, "LMB", (0.5, 0.5), (0.25, 0.5)) == [False, True, False]
    assert cam.azimuth == pytest.approx(45.0)
    s = np.sin(np.pi / 4)
    np.testing.assert_allclose(cam.origin, [3.9 * s, 0, 3.9 * s], atol=1e-9)
    # motion without a held button does nothing
    assert not apply_event(cam, Event("motion", "Motion", (0.9, 0.9)))
    # drag down by 0.1 of the window: elevation +18 degrees
    _drag(cam, "LMB", (0.5, 0.5), (0.5, 0.4))
    assert cam.elevation == pytest.approx(18.0)
    # wheel: one notch away from the user = 0.9x distance, towards the user = 1/0.9
    assert apply_event(cam, Event("press", "Wheel", (0.5, 0.5), (), (0, 120)))
    assert cam.distance == pytest.approx(3.9 * 0.9)
    apply_event(cam, Event("press", "Wheel", (0.5, 0.5), (), (0, -240)))
    assert cam.distance == pytest.approx(3.9 / 0.9)
    # 'r' resets
    assert apply_event(cam, _press("r"))
    np.testing.assert_allclose(cam.to_world(), look_at(CBOX_ORIGIN, (0, 0, 0), (0, 1, 0)), atol=1e-9)
    # RMB drag (and Shift+LMB): pan, the scene follows the cursor -> camera moves the other way
    _drag(cam, "RMB", (0.5, 0.5), (0.6, 0.5))
    np.testing.assert_allclose(cam.target, [-0.1 * 2 * 0.4 * 3.9, 0, 0], atol=1e-9)
    cam.reset()
    _drag(cam, "LMB", (0.5, 0.5), (0.5, 0.55), mods=("Shift",))
    np.testing.assert_allclose(cam.target, [0, -0.05 * 2 * 0.3 * 3.9, 0], atol=1e-9)
    assert cam.azimuth == 0 and cam.elevation == pytest.approx(0.0)
    # arrow keys orbit by 15 degrees
    cam.reset()
    apply_event(cam, _press("Left"))
    assert cam.azimuth == pytest.approx(15.0)


# ------------------------------------------------------------------------------- progressive view

def test_scene_view_uses_the_scenes_own_integrator():
    """A scene rendered by another integrator (here the light tracer) is viewed with it, progressively:
    the accumulated view equals one render of as many samples."""
    sc = load_scene(CBOX, overrides=SMALL_SCENE + ["integrator.type=ptracer"])
    v = SceneView(sc, spp_target=8, spp_per_frame=4)
    assert v.mode == "ptracer" and "ptracer" in v.modes and "path" in v.modes
    v.step()
    v.step()
    assert v.spp == 8
    ref = render(sc, spp=8, seed=v.seed, progress=False)
    np.testing.assert_allclose(v.image, ref, rtol=1e-5, atol=1e-6)


def test_scene_view_keys_and_modes(scene):
    v = SceneView(scene, spp_target=8, spp_per_frame=4)
    assert v.mode == "path" and (v.width, v.height) == (48, 40)
    v.step()
    assert v.spp == 4
    assert v.handle(_press("i")) and v.mode == "direct"
    v.step()
    assert v.spp == 4, "changing the integrator restarts accumulation"
    v.handle(_press("4"))
    assert v.mode == MODES[3] == "aov:normal"
    v.handle(_press("="))
    v.handle(_press("="))
    v.handle(_press("-"))
    assert v.exposure == pytest.approx(0.5)
    v.handle(_press("]"))
    assert v.spp_target == 16
    v.handle(_press("["))
    v.handle(_press("["))
    assert v.spp_target == 4
    v.handle(_press("p"))
    assert v.screenshot_requested
    v.handle(_press("1"))
    for _ in range(3):
        v.step()
    assert v.spp == 4 and v.converged, "accumulation stops at the spp target"
    v.handle(Event("press", "Wheel", (0.5, 0.5), (), (0, 120)))
    assert not v.converged and v.dirty
    for key in ("Escape", "q"):
        assert v.handle(_press(key)) is False
    assert v.handle(Event("press", "WMClose")) is False
    v.cam.reset()
    scene.set_sensor_transform(0, v.cam.to_world())


def test_aov_mode_matches_render(scene):
    v = SceneView(scene, spp_target=8, spp_per_frame=4, mode="aov:albedo")
    v.step()
    img = v.step()
    scene.integrator["aovs"] = ["albedo"]
    ref = render(scene, spp=8, seed=3, integrator="aov")
    np.testing.assert_allclose(img.mean((0, 1)), ref.mean((0, 1)), rtol=0.03, atol=2e-3)
    disp = tonemap(img, "aov:albedo")
    assert disp.min() >= 0 and disp.max() <= 1


def test_headless_frames_match_render(tmp_path, scene):
    out = str(tmp_path / "h")
    rc = cli_main(["view", CBOX, "--headless", "--frames", "4", "--spp", "16", "--spp-per-frame", "4",
                   "--out", out, "--arch", "cpu"] + SMALL)
    assert rc == 0
    for i in range(4):
        assert os.path.getsize(os.path.join(out, f"frame_{i:04d}.png")) > 0
    info = json.load(open(os.path.join(out, "frames.json")))
    assert [f["spp"] for f in info["frames"]] == [4, 8, 12, 16]
    img = np.load(os.path.join(out, "last_frame.npy"))
    assert img.shape == (40, 48, 3)
    ref = render(scene, spp=16, seed=0)
    # the same sample indices as render(): the same image up to the float summation order of four frames
    # (measured 1.2e-7 of the maximum); no noise to allow for
    assert np.abs(img - ref).max() <= 1e-5 * ref.max(), np.abs(img - ref).max()
    import imageio.v3 as iio
    png = iio.imread(os.path.join(out, "frame_0003.png"))
    assert png.shape[:2] == (40, 48)
    # the PNG is the tonemapped image (status line aside): compare the lower half
    disp = np.round(tonemap(img) * 255)
    assert np.abs(png[20:, :, :3].astype(float) - disp[20:]).mean() < 2.0


def test_headless_scripted_orbit(tmp_path, scene):
    """--orbit 15: three frames 15° apart about the target, each restarting the accumulation; the last is
    render()'s image from its camera (the same sample indices: bit-identical) and differs from the front view."""
    out = str(tmp_path / "o")
    rc = cli_main(["view", CBOX, "--headless", "--frames", "3", "--orbit", "15", "--spp", "64",
                   "--spp-per-frame", "8", "--out", out, "--no-text", "--arch", "cpu"] + SMALL)
    assert rc == 0
    info = json.load(open(os.path.join(out, "frames.json")))["frames"]
    assert [f["azimuth"] for f in info] == pytest.approx([0, 15, 30])
    assert [f["spp"] for f in info] == [8, 8, 8], "each camera move restarts accumulation"
    m = np.array(info[-1]["to_world"])
    np.testing.assert_allclose(m[:3, 3], [3.9 * np.sin(np.radians(30)), 0, 3.9 * np.cos(np.radians(30))], atol=1e-4)
    img = np.load(os.path.join(out, "last_frame.npy"))
    orig = scene.sensors[0].to_world.copy()
    front = render(scene, spp=8, seed=0)
    try:
        scene.set_sensor_transform(0, look_at(m[:3, 3], (0, 0, 0), (0, 1, 0)))
        ref = render(scene, spp=8, seed=0)
    finally:
        scene.set_sensor_transform(0, orig)
    assert ref.mean() > 0.5 * front.mean(), "the orbited camera sees into the box"
    assert np.abs(img - ref).max() <= 1e-5 * ref.max(), np.abs(img - ref).max()
    assert np.abs(img - front).mean() > 0.2 * front.mean(), "the orbited view differs from the front"


def test_headless_needs_out(capsys):
    rc = cli_main(["view", CBOX, "--headless", "--frames", "1", "--arch", "cpu"] + SMALL)
    assert rc == 2
    assert "--out" in capsys.readouterr().err


def test_view_radiance_field(tmp_path):
    from tirender.radiance_field.dataset import procedural_params
    from tirender.radiance_field.field import RadianceField
    fld = RadianceField(16, sh_degree=1, color_activation="relu", params=procedural_params(16, 1))
    path = str(tmp_path / "field.npz")
    fld.save(path, orbit_center=np.zeros(3), orbit_radius=3.2, orbit_up=np.array([0.0, 1, 0]),
             fov_x=45.0, width=32, height=24, linear=False)
    out = str(tmp_path / "fv")
    rc = cli_main(["view", path, "--headless", "--frames", "2", "--orbit", "90", "--spp-per-frame", "2",
                   "--out", out, "--no-text"])
    assert rc == 0
    info = json.load(open(os.path.join(out, "frames.json")))
    assert (info["width"], info["height"]) == (32, 24)
    f0, f1 = info["frames"]
    np.testing.assert_allclose(np.linalg.norm(np.array(f1["to_world"])[:3, 3]), 3.2, rtol=1e-9)
    assert f1["azimuth"] - f0["azimuth"] == pytest.approx(90)
    img = np.load(os.path.join(out, "last_frame.npy"))
    assert img.shape == (24, 32, 3) and img.max() > 0.1, "the field is visible"
    assert os.path.exists(os.path.join(out, "frame_0001.png"))
    # the same camera as `tirender render field.npz --frames 4` frame 1 (orbit_cameras, 90 deg apart)
    from tirender.radiance_field.dataset import orbit_cameras, render_field_views
    c2w = orbit_cameras(4, 3.2, np.zeros(3), np.array([0.0, 1, 0]), elevation=25.0)
    np.testing.assert_allclose(np.array(f1["to_world"]), c2w[1], atol=1e-9)
    ref = render_field_views(fld, c2w[1:2], 45.0, 32, 24, spp=4, seed=1)[0]
    np.testing.assert_allclose(img.mean((0, 1)), ref.mean((0, 1)), rtol=0.05, atol=2e-3)


# ------------------------------------------------------------------------------- live optimisation

def test_live_view_layout_and_close_hook(tmp_path):
    rng = np.random.default_rng(0)
    tgt = rng.random((20, 30, 3)).astype(np.float32)
    cur = np.zeros_like(tgt)
    out = str(tmp_path / "live")
    v = LiveOptimizationView("test", 30, 20, headless=True, out_dir=out, close_after=3, keep_all=True)
    assert v.pw % 30 == 0 and v.pw >= 200 and v.width == 3 * v.pw + 2 * v.gap
    comp = v.compose(cur, tgt)
    r0, r1, c0, c1 = v.panel_box(1)
    scale = v.pw // 30
    np.testing.assert_allclose(comp[r0:r1:scale, c0:c1:scale], tonemap(tgt), atol=1e-6)
    r0, r1, c0, c1 = v.panel_box(2)
    np.testing.assert_allclose(comp[r0:r1:scale, c0:c1:scale], tonemap(np.abs(tgt - cur)), atol=1e-6)
    losses = []
    results = []
    for it in range(5):
        losses.append(1.0 / (it + 1))
        results.append(v.update(it, cur + it * 0.1, tgt, losses))
    assert results == [True, True, True, False, False]
    assert sorted(os.listdir(out)) == ["live_0000.png", "live_0001.png", "live_0002.png"]
    frame = v.last_frame
    assert frame.shape == (v.height, v.width, 3)
    r0, r1, c0, c1 = v.panel_box(1)
    # the target panel (below its label) is shown as composed
    assert np.abs(frame[r0 + 24:r1, c0:c1] - comp[r0 + 24:r1, c0:c1]).max() < 1e-6
    plot = frame[v.ph + v.gap:]
    assert plot.std() > 0.05, "the loss plot is drawn"
    v.close()
    v.close()
    assert v.update(5, cur, tgt, losses) is False


def test_live_view_env_hook_and_single_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TIRENDER_GUI_CLOSE_AFTER", "1")
    out = str(tmp_path / "l")
    with LiveOptimizationView("t", 16, 16, headless=True, out_dir=out) as v:
        img = np.full((16, 16), 0.5, np.float32)
        assert v.update(10, img, img, [float("nan"), 0.0, 2.0]) is True
        assert v.update(11, img, img, [1.0, 2.0]) is False
    assert os.listdir(out) == ["live.png"]


# ------------------------------------------------------------------------------- real window (Xvfb)

def _xwd_nonblack_fraction(data):
    """Fraction of non-black pixels of an xwd dump (ZPixmap, 32 bits per pixel)."""
    import struct
    hdr = struct.unpack(">25I", data[:100])
    header_size, bpp, bpl, ncolors = hdr[0], hdr[11], hdr[12], hdr[19]
    w, h = hdr[4], hdr[5]
    if bpp != 32:
        return None
    off = header_size + 12 * ncolors
    px = np.frombuffer(data[off:off + bpl * h], np.uint8).reshape(h, bpl)[:, :4 * w].reshape(h, w, 4)
    return float(np.any(px[:, :, :3] > 8, axis=2).mean()), w * h


def test_window_under_xvfb(tmp_path):
    if not shutil.which("Xvfb"):
        pytest.skip("Xvfb not installed (apt-get install xvfb)")
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", "1", "-screen", "0", "640x480x24", "-br", "-nolisten", "tcp"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = xvfb.stdout.readline().decode().strip()
        if not line.isdigit():
            pytest.skip(f"Xvfb did not start (got {line!r})")
        env = dict(os.environ, DISPLAY=f":{line}", TIRENDER_ARCH=os.environ.get("TIRENDER_ARCH", "cpu"))
        shot = str(tmp_path / "shot.png")
        frames = 150 if shutil.which("xwd") else 5     # keep the window up while xwd looks at it
        cmd = [sys.executable, "-m", "tirender", "view", CBOX, "--frames", str(frames), "--spp", "8",
               "--spp-per-frame", "4", "--screenshot", shot, "--out", str(tmp_path / "o"),
               "--arch", env["TIRENDER_ARCH"], "--set", "scene.sensors.0.film.width=96",
               "--set", "scene.sensors.0.film.height=96"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = None
        if shutil.which("xwd"):
            t0 = time.time()
            while proc.poll() is None and time.time() - t0 < 120:
                r = subprocess.run(["xwd", "-root", "-silent"], env=env, capture_output=True)
                if r.returncode == 0 and len(r.stdout) > 100:
                    res = _xwd_nonblack_fraction(r.stdout)
                    if res is not None and res[0] * res[1] > 0.5 * 96 * 96:
                        seen = res
                        break
                time.sleep(0.2)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert "window on display" in err.decode()
        import imageio.v3 as iio
        img = iio.imread(shot)
        assert img.shape[:2] == (96, 96)
        rgb = img[:, :, :3].astype(float)
        assert rgb.mean() > 20 and rgb.std() > 10, "screenshot is blank"
        # red wall on the left, green wall on the right
        mid = rgb[40:70]
        assert mid[:, :15, 0].mean() > mid[:, :15, 1].mean() + 10
        assert mid[:, -15:, 1].mean() > mid[:, -15:, 0].mean() + 10
        if shutil.which("xwd"):
            assert seen is not None, "the window never appeared on the X display"
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)
