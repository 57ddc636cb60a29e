"""Interactive viewer (``tirender view``) and the live optimisation window (``optimize --gui``).

Both use Taichi's ``ti.GUI``; with ``headless=True`` the same frames are drawn into an
off-screen ``ti.GUI(show_gui=False)`` and written to PNG files, so everything here can be
tested and scripted without a display.

Pieces (all usable without a window):

* :class:`OrbitCamera` -- target / distance / azimuth / elevation / up camera model built from a
  sensor's ``to_world``; :func:`apply_event` applies one input :class:`Event` (mouse drag,
  wheel, arrow keys, ``r``) to it. Tests inject events with these two.
* :class:`SceneView` / :class:`FieldView` -- progressive renderers of a scene (path / direct /
  AOVs) or a saved radiance field from the orbit camera; :func:`run_viewer` is the window loop.
* :class:`LiveOptimizationView` -- current | target | |difference| side by side and the loss
  curve (log scale) below, updated by the optimisation driver each iteration.

See docs/viewer.md for the key bindings and the command-line options.
"""
import contextlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

__all__ = ["Event", "OrbitCamera", "apply_event", "SceneView", "FieldView", "run_viewer", "view",
           "view_field", "LiveOptimizationView", "MODES", "tonemap"]

# integrator modes of the scene viewer, in the order of keys 1..5 / the 'i' cycle
MODES = ("path", "direct", "aov:albedo", "aov:normal", "aov:depth")
AOV_NAMES = ("depth", "normal", "albedo", "position", "uv")

ORBIT_DEG_PER_WINDOW = 180.0   # a drag across the whole window turns the camera by this much
KEY_ORBIT_DEG = 15.0           # arrow keys
WHEEL_ZOOM = 0.9               # distance factor per wheel notch (towards the target)
MAX_ELEVATION = 89.0

QUIT_KEYS = ("Escape", "q", "WMClose")


# ------------------------------------------------------------------------------------ input events

@dataclass
class Event:
    """An input event, shaped like ``ti.GUI.Event`` but with plain values.

    type: "press" | "release" | "motion"; key: "LMB" | "RMB" | "MMB" | "Wheel" | "Motion" or a
    key name as ti.GUI reports it ("a", "=", "[", "Escape", "Left", "Shift_L", ...);
    pos: cursor position in [0, 1]^2, origin at the bottom left (y up); modifier: held
    modifiers ("Shift", "Control", "Alt"); delta: wheel delta (+120 per notch away from the user).
    """
    type: str
    key: str = ""
    pos: tuple = (0.5, 0.5)
    modifier: tuple = ()
    delta: tuple = (0, 0)


def from_gui_event(e):
    """Convert a ``ti.GUI.Event`` into an :class:`Event`."""
    import taichi as ti
    if e.key == ti.GUI.WHEEL:
        typ = "press"
    elif e.type == ti.GUI.PRESS:
        typ = "press"
    elif e.type == ti.GUI.RELEASE:
        typ = "release"
    else:
        typ = "motion"
    d = e.delta
    try:
        delta = (int(d[0]), int(d[1]))
    except (TypeError, IndexError):
        delta = (int(getattr(d, "x", 0)), int(getattr(d, "y", 0)))
    return Event(typ, str(e.key), (float(e.pos[0]), float(e.pos[1])), tuple(e.modifier or ()), delta)


# ------------------------------------------------------------------------------------ orbit camera

def _unit(v):
    v = np.asarray(v, np.float64)
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def _perp(up):
    a = np.array([1.0, 0, 0]) if abs(up[0]) < 0.9 else np.array([0, 0, 1.0])
    return _unit(np.cross(up, a))


class OrbitCamera:
    """A camera orbiting a target point.

    origin = target + distance · (cos(el)·(cos(az)·e1 + sin(az)·e2) + sin(el)·up), looking at the
    target, with e2 = up × e1: a positive azimuth turns the camera counter-clockwise about ``up``
    (right-hand rule) and a positive elevation raises it. ``e1`` (the azimuth-0 direction) is fixed
    at construction. Angles are in degrees.

    ``tan_x``/``tan_y`` (half-field-of-view tangents) only scale mouse panning.
    """

    def __init__(self, target, distance, azimuth=0.0, elevation=0.0, up=(0.0, 1.0, 0.0), e1=None,
                 tan_x=0.5, tan_y=0.5):
        self.up = _unit(up)
        if np.linalg.norm(self.up) == 0:
            raise ValueError("up must be non-zero")
        if e1 is None:
            e1 = _perp(self.up)
        e1 = np.asarray(e1, np.float64)
        e1 = e1 - np.dot(e1, self.up) * self.up
        if np.linalg.norm(e1) < 1e-9:
            e1 = _perp(self.up)
        self.e1 = _unit(e1)
        self.e2 = np.cross(self.up, self.e1)
        self.target = np.asarray(target, np.float64).copy()
        self.distance = float(distance)
        self.azimuth = float(azimuth)
        self.elevation = float(np.clip(elevation, -MAX_ELEVATION, MAX_ELEVATION))
        self.tan_x, self.tan_y = float(tan_x), float(tan_y)
        self._drag = None          # (mode, last pos) while a mouse button is held
        self._home = self.state()

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_to_world(cls, to_world, center=None, tan_x=0.5, tan_y=0.5):
        """Orbit camera reproducing a camera-to-world matrix (columns left, up, forward, origin).

        distance = |origin - center| (1 when no center is given or it coincides with the origin);
        target = origin + forward·distance; up = the world axis (±x, ±y, ±z) closest to the
        camera's up column; azimuth 0 is the camera's initial direction, so a camera built with
        ``look_at(..., up=<that axis>)`` is reproduced exactly by :meth:`to_world`.
        """
        m = np.asarray(to_world, np.float64)
        origin = m[:3, 3]
        fwd = _unit(m[:3, 2])
        cam_up = _unit(m[:3, 1])
        k = int(np.argmax(np.abs(cam_up)))
        up = np.zeros(3)
        up[k] = 1.0 if cam_up[k] >= 0 else -1.0
        dist = 1.0
        if center is not None:
            d = float(np.linalg.norm(origin - np.asarray(center, np.float64)))
            if d > 1e-6:
                dist = d
        target = origin + fwd * dist
        back = -fwd
        el = math.degrees(math.asin(float(np.clip(np.dot(back, up), -1.0, 1.0))))
        horiz = back - np.dot(back, up) * up
        e1 = horiz if np.linalg.norm(horiz) > 1e-9 else None
        return cls(target, dist, 0.0, el, up, e1, tan_x, tan_y)

    # -- state -------------------------------------------------------------------------------
    def state(self):
        return (self.target.copy(), self.distance, self.azimuth, self.elevation)

    def set_state(self, st):
        self.target, self.distance, self.azimuth, self.elevation = st[0].copy(), st[1], st[2], st[3]

    def reset(self):
        """Back to the camera the view started with."""
        self.set_state(self._home)
        self._drag = None

    def direction(self):
        """Unit vector from the target to the camera."""
        az, el = math.radians(self.azimuth), math.radians(self.elevation)
        return math.cos(el) * (math.cos(az) * self.e1 + math.sin(az) * self.e2) + math.sin(el) * self.up

    @property
    def origin(self):
        return self.target + self.distance * self.direction()

    def to_world(self):
        """4x4 camera-to-world (columns left, up, forward, origin), as ``transforms.look_at``."""
        from .scene.transforms import look_at
        return look_at(self.origin, self.target, self.up)

    # -- operations --------------------------------------------------------------------------
    def orbit(self, dx, dy):
        """Add dx degrees to the azimuth and dy degrees to the elevation (clamped to ±89°)."""
        self.azimuth = (self.azimuth + float(dx) + 180.0) % 360.0 - 180.0
        self.elevation = float(np.clip(self.elevation + float(dy), -MAX_ELEVATION, MAX_ELEVATION))

    def pan(self, dx, dy):
        """Move target and camera by dx·distance along the camera's right and dy·distance along
        its up vector."""
        m = self.to_world()
        right, cam_up = -m[:3, 0], m[:3, 1]
        self.target = self.target + self.distance * (float(dx) * right + float(dy) * cam_up)

    def zoom(self, factor):
        """Multiply the distance to the target by factor (< 1 moves closer)."""
        f = float(factor)
        if not f > 0:
            raise ValueError("zoom factor must be positive")
        self.distance = max(self.distance * f, 1e-6)

    def __repr__(self):
        return (f"OrbitCamera(target={np.round(self.target, 4).tolist()}, distance={self.distance:.4g}, "
                f"azimuth={self.azimuth:.4g}, elevation={self.elevation:.4g}, up={self.up.tolist()})")


def apply_event(cam, ev):
    """Apply one input event to an :class:`OrbitCamera`; returns True if the camera moved.

    Left drag: orbit (dragging right turns the view right-to-left around the target, i.e. the
    azimuth decreases by 180° per window width; dragging up lowers the elevation). Right or middle
    drag, or Shift + left drag: pan (the scene follows the cursor). Wheel: zoom (0.9× distance per
    notch away from the user). Arrow keys: orbit by 15° (Shift+Up/Down zoom). ``r``: reset.
    Drag state is kept on the camera, so events must come in order.
    """
    key, typ = ev.key, ev.type
    mods = tuple(ev.modifier or ())
    if key == "Wheel":
        dy = float(ev.delta[1]) if ev.delta else 0.0
        steps = dy / 120.0 if abs(dy) >= 30 else float(np.sign(dy))
        if steps == 0:
            return False
        cam.zoom(WHEEL_ZOOM ** steps)
        return True
    if key in ("LMB", "RMB", "MMB"):
        if typ == "press":
            mode = "pan" if key != "LMB" or "Shift" in mods else "orbit"
            cam._drag = (mode, tuple(ev.pos))
        elif typ == "release":
            cam._drag = None
        return False
    if typ == "motion" or key == "Motion":
        if cam._drag is None:
            return False
        mode, last = cam._drag
        dx, dy = ev.pos[0] - last[0], ev.pos[1] - last[1]
        cam._drag = (mode, tuple(ev.pos))
        if dx == 0 and dy == 0:
            return False
        if mode == "orbit":
            cam.orbit(-dx * ORBIT_DEG_PER_WINDOW, -dy * ORBIT_DEG_PER_WINDOW)
        else:
            cam.pan(-dx * 2 * cam.tan_x, -dy * 2 * cam.tan_y)
        return True
    if typ != "press":
        return False
    if key in ("Left", "Right"):
        cam.orbit(KEY_ORBIT_DEG if key == "Left" else -KEY_ORBIT_DEG, 0.0)
        return True
    if key in ("Up", "Down"):
        if "Shift" in mods:
            cam.zoom(WHEEL_ZOOM if key == "Up" else 1.0 / WHEEL_ZOOM)
        else:
            cam.orbit(0.0, KEY_ORBIT_DEG if key == "Up" else -KEY_ORBIT_DEG)
        return True
    if key == "r":
        cam.reset()
        return True
    return False


# ------------------------------------------------------------------------------------ images

def tonemap(img, mode="path", exposure=0.0, linear=True):
    """Linear viewer image (H, W, 3) -> display values in [0, 1] (float32, sRGB-encoded).

    path/direct/aov:albedo: ×2^exposure, clip, sRGB; aov:normal: n/2 + 1/2; aov:depth and
    aov:position: normalised to [0, 1] over the non-empty pixels; aov:uv: clip.
    ``linear=False`` (radiance fields trained on display values): ×2^exposure and clip only.
    """
    from .io.images import to_srgb
    a = np.nan_to_num(np.asarray(img, np.float32), nan=0.0, posinf=1.0, neginf=0.0)
    if mode == "aov:normal":
        return np.clip(a * 0.5 + 0.5, 0, 1).astype(np.float32)
    if mode in ("aov:depth", "aov:position"):
        valid = np.any(a != 0, axis=2)
        if not valid.any():
            return np.zeros_like(a)
        lo = a[valid].min(0) if mode == "aov:position" else a[valid].min()
        hi = a[valid].max(0) if mode == "aov:position" else a[valid].max()
        out = np.where(valid[..., None], (a - lo) / np.maximum(hi - lo, 1e-12), 0.0)
        if mode == "aov:depth":
            out = np.where(valid[..., None], 1.0 - 0.85 * out, 0.0)   # near = bright
        return np.clip(out, 0, 1).astype(np.float32)
    if mode == "aov:uv":
        return np.clip(a, 0, 1).astype(np.float32)
    a = np.clip(a * np.float32(2.0 ** exposure), 0, 1)
    return (to_srgb(a) if linear else a).astype(np.float32)


def to_gui(img):
    """Top-down (H, W, C) array -> ti.GUI layout (W, H, C), y up."""
    return np.ascontiguousarray(np.transpose(np.asarray(img), (1, 0, 2))[:, ::-1])


def from_gui(canvas):
    """ti.GUI canvas (W, H, C) -> top-down (H, W, 3) float32."""
    return np.ascontiguousarray(np.transpose(np.asarray(canvas)[:, ::-1, :3], (1, 0, 2)), np.float32)


def write_png8(path, display_img):
    """Write display values in [0, 1] (H, W, 3) as an 8-bit PNG (no further encoding)."""
    import imageio.v3 as iio
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    a = np.round(np.clip(np.nan_to_num(np.asarray(display_img, np.float32)), 0, 1) * 255).astype(np.uint8)
    tmp = path + ".tmp.png"
    iio.imwrite(tmp, a, extension=".png")
    os.replace(tmp, path)
    return path


def _make_gui(title, width, height, headless):
    import taichi as ti

    from .backend import quiet
    try:
        with quiet():   # Taichi logs its own "[E ...] fails to create a window" line otherwise
            return ti.GUI(title, res=(int(width), int(height)), show_gui=not headless)
    except RuntimeError as e:
        if headless:
            raise
        raise ConfigError(f"cannot open a window ({str(e).split('] ')[-1].split('.')[0]}; "
                          f"DISPLAY={os.environ.get('DISPLAY', '<unset>')}): use --headless --out DIR",
                          key="view") from None


def _text(gui, s, pos, size, color=0xFFFFFF):
    """Text with a one-pixel dark shadow (readable on any background)."""
    W, H = gui.res
    gui.text(s, (pos[0] + 1.0 / W, pos[1] - 1.0 / H), font_size=size, color=0x000000)
    gui.text(s, pos, font_size=size, color=color)


def _font_size(width):
    return int(np.clip(width / 22, 9, 15))


# ------------------------------------------------------------------------------------ progressive views

def _default_spp_per_frame(npix):
    from .backend import current_arch
    budget = (1 << 18) if current_arch() in (None, "cpu") else (1 << 22)
    return int(np.clip(budget // max(npix, 1), 1, 64))


class _Progressive:
    """Camera + accumulation bookkeeping shared by the scene and radiance-field views."""

    modes = ("path",)

    def __init__(self, cam, width, height, spp_target=256, spp_per_frame=None, exposure=0.0, seed=0):
        self.cam = cam
        self.width, self.height = int(width), int(height)
        self.spp_target = max(1, int(spp_target))
        self.spp_per_frame = int(spp_per_frame) if spp_per_frame else _default_spp_per_frame(self.width * self.height)
        self.exposure = float(exposure)
        self.seed = int(seed)
        self.mode = self.modes[0]
        self.spp = 0                 # samples per pixel accumulated for the current view
        self.image = np.zeros((self.height, self.width, 3), np.float32)   # linear running mean
        self.samples_per_s = 0.0
        self.dirty = True            # camera / mode changed: restart accumulation
        self.screenshot_requested = False
        self.show_text = True

    def invalidate(self):
        self.dirty = True

    @property
    def converged(self):
        return not self.dirty and self.spp >= self.spp_target

    def set_mode(self, mode):
        if mode not in self.modes:
            raise ConfigError(f"unknown integrator mode '{mode}' (one of {', '.join(self.modes)})",
                              key="integrator")
        if mode != self.mode:
            self.mode = mode
            self.invalidate()

    def handle(self, ev):
        """Apply an input event (camera or key binding). Returns False when the user quits."""
        if ev.type == "press" and ev.key in QUIT_KEYS:
            return False
        if ev.key == "WMClose":
            return False
        if apply_event(self.cam, ev):
            self.invalidate()
            return True
        if ev.type != "press":
            return True
        k = ev.key
        if k == "i":
            self.set_mode(self.modes[(self.modes.index(self.mode) + 1) % len(self.modes)])
        elif k.isdigit() and 1 <= int(k) <= len(self.modes):
            self.set_mode(self.modes[int(k) - 1])
        elif k in ("=", "+", "plus", "equal", "KP_Add"):
            self.exposure += 0.5
        elif k in ("-", "minus", "KP_Subtract", "_"):
            self.exposure -= 0.5
        elif k in ("]", "bracketright"):
            self.spp_target = min(self.spp_target * 2, 1 << 20)
        elif k in ("[", "bracketleft"):
            self.spp_target = max(self.spp_target // 2, 1)
        elif k == "p":
            self.screenshot_requested = True
        elif k == "h":
            self.show_text = not self.show_text
        return True

    def step(self):
        """Add one frame's samples (unless the spp target is reached); returns the linear image."""
        if self.dirty:
            self._apply_camera()
            self.spp = 0
        if self.spp >= self.spp_target:
            return self.image
        k = min(self.spp_per_frame, self.spp_target - self.spp)
        t0 = time.perf_counter()
        self.image = self._render(k, clear=self.dirty)
        dt = max(time.perf_counter() - t0, 1e-9)
        self.spp += k
        self.dirty = False
        rate = self.width * self.height * k / dt
        self.samples_per_s = rate if self.samples_per_s == 0 else 0.7 * self.samples_per_s + 0.3 * rate
        return self.image

    def display(self):
        return tonemap(self.image, self.mode, self.exposure)

    def status(self):
        from .backend import current_arch
        ev = f"  EV {self.exposure:+.1f}" if self.exposure else ""
        return (f"{self.spp}/{self.spp_target} spp  {self.samples_per_s / 1e6:.2f} MS/s  "
                f"{current_arch()}  {self.mode}{ev}")

    def frame_info(self):
        return {"spp": self.spp, "mode": self.mode, "exposure": self.exposure,
                "to_world": self.cam.to_world().tolist(), "azimuth": self.cam.azimuth,
                "elevation": self.cam.elevation, "distance": self.cam.distance,
                "target": self.cam.target.tolist()}

    # subclasses
    def _apply_camera(self):
        raise NotImplementedError

    def _render(self, k, clear):
        raise NotImplementedError


def scene_center(scene):
    """Centre of the bounding box of the scene's shapes (None for a scene without shapes)."""
    ps = [np.asarray(s.positions, np.float64).reshape(-1, 3) for s in scene.desc.shapes]
    ps = [p[np.all(np.isfinite(p), axis=1)] for p in ps]
    ps = [p for p in ps if len(p)]
    if not ps:
        return None
    p = np.concatenate(ps)
    return 0.5 * (p.min(0) + p.max(0))


class SceneView(_Progressive):
    """Progressive rendering of one sensor of a :class:`~tirender.scene.scene.Scene` from an
    :class:`OrbitCamera` (the sensor is moved with ``Scene.set_sensor_transform``).

    Modes: path, direct (path tracer limited to direct light), aov:albedo / aov:normal / aov:depth,
    and the scene's own integrator when it is another (ptracer, volpath, pssmlt, ...).
    Each :meth:`step` adds ``spp_per_frame`` samples with ``render_progressive`` (same sample
    indices as ``tirender.render`` with the same seed, so a converged view equals that render).
    """

    modes = MODES

    def __init__(self, scene, sensor=0, spp_target=256, spp_per_frame=None, exposure=0.0, seed=0,
                 mode=None):
        if not 0 <= sensor < len(scene.sensors):
            raise ConfigError(f"sensor index {sensor} out of range (scene has {len(scene.sensors)})",
                              key="sensor")
        self.scene, self.sensor = scene, int(sensor)
        s = scene.sensors[self.sensor]
        cam = OrbitCamera.from_to_world(s.to_world, scene_center(scene), s.tan_x, s.tan_y)
        super().__init__(cam, s.width, s.height, spp_target, spp_per_frame, exposure, seed)
        if mode is None:
            t = scene.integrator.get("type", "path")
            if t == "aov":
                mode = "aov:" + (scene.integrator.get("aovs") or ["albedo"])[0]
            else:
                mode = t
        if mode == "aov":
            mode = "aov:albedo"
        if mode.startswith("aov:") and mode not in self.modes and mode[4:] in AOV_NAMES:
            self.modes = tuple(self.modes) + (mode,)
        from .integrators.registry import NAMES as INTEGRATORS
        if mode not in self.modes and mode in INTEGRATORS:   # the scene's own (ptracer, volpath, pssmlt, ...)
            self.modes = tuple(self.modes) + (mode,)
        self.set_mode(mode)
        self._aov_acc = None

    def _apply_camera(self):
        self.scene.set_sensor_transform(self.sensor, self.cam.to_world())

    def _render(self, k, clear):
        from .api import render, render_progressive
        if self.mode.startswith("aov:"):
            name = self.mode[4:]
            old = self.scene.integrator.get("aovs")
            self.scene.integrator["aovs"] = [name]
            try:
                seed = (self.seed * 1000003 + self.spp * 7919 + 1) & 0xFFFFFFFF
                img = render(self.scene, spp=k, seed=seed, sensor=self.sensor, integrator="aov", progress=False)
            finally:
                if old is None:
                    self.scene.integrator.pop("aovs", None)
                else:
                    self.scene.integrator["aovs"] = old
            if clear or self._aov_acc is None:
                self._aov_acc = np.zeros_like(img, np.float64)
            self._aov_acc += img.astype(np.float64) * k
            return (self._aov_acc / (self.spp + k)).astype(np.float32)
        return render_progressive(self.scene, sensor=self.sensor, spp=k, sample_offset=self.spp,
                                  seed=self.seed, integrator=self.mode, clear=clear)


class FieldView(_Progressive):
    """Progressive rendering of a saved radiance field (``RadianceField.save`` .npz) from an
    orbit camera around its ``orbit_center``; each step adds jittered samples per pixel.

    The start camera and the orbit are those of ``tirender render FIELD.npz`` (radiance_field.cli
    ``render_main``: metadata orbit_center / orbit_radius / orbit_up / orbit_elevation / fov_x /
    width / height / linear, same defaults), so ``view --orbit 360/N`` frames follow its frames."""

    modes = ("field",)

    def __init__(self, fld, extra=None, width=None, height=None, spp_target=64, spp_per_frame=None,
                 exposure=0.0, seed=0, elevation=None):
        extra = extra or {}

        def get(k, default):
            return np.asarray(extra[k]) if k in extra else default
        self.field = fld
        center = np.asarray(get("orbit_center", (fld.bbox_min + fld.bbox_max) / 2), np.float64).reshape(3)
        radius = float(get("orbit_radius", 2.0 * float(np.linalg.norm(fld.bbox_max - fld.bbox_min))))
        if elevation is None:
            elevation = float(get("orbit_elevation", 25.0))
        up = np.asarray(get("orbit_up", (0.0, 1.0, 0.0)), np.float64).reshape(3)
        if not np.linalg.norm(up) > 0:
            up = np.array([0.0, 1.0, 0.0])
        self.fov_x = float(get("fov_x", 45.0))
        W = int(width or int(get("width", 256)))
        H = int(height or int(get("height", W)))
        self.linear = bool(get("linear", False))
        tx = math.tan(math.radians(self.fov_x) / 2)
        from .radiance_field.dataset import _azimuth_frame  # the orbit frame of `tirender render FIELD.npz`
        cam = OrbitCamera(center, radius, 0.0, elevation, up, e1=_azimuth_frame(_unit(up))[0], tan_x=tx,
                          tan_y=tx * H / W)
        super().__init__(cam, W, H, spp_target, spp_per_frame, exposure, seed)
        self._acc = np.zeros((H * W, 3), np.float64)
        self._rows, self._cols = np.divmod(np.arange(H * W), W)

    def _apply_camera(self):
        self._c2w = self.cam.to_world()

    def _render(self, k, clear):
        from .radiance_field.dataset import pixel_rays
        from .radiance_field.render import render_rays
        if clear:
            self._acc[:] = 0
        rng = np.random.default_rng([self.seed, self.spp])
        n = self._rows.size
        for _ in range(k):
            jx, jy = rng.random(n), rng.random(n)
            o, d = pixel_rays(self._c2w, self.fov_x, self.width, self.height, self._rows, self._cols, jx, jy)
            L, _ = render_rays(self.field, o, d, rng.random(n))
            self._acc += L
        return (self._acc / (self.spp + k)).reshape(self.height, self.width, 3).astype(np.float32)

    def display(self):
        return tonemap(self.image, "path", self.exposure, linear=self.linear)


# ------------------------------------------------------------------------------------ window loop

def run_viewer(src, title="tirender", headless=False, frames=None, out=None, orbit=0.0, screenshot=None,
               show_text=True, events=None, log=print):
    """Show a progressive view (:class:`SceneView` / :class:`FieldView`) in a ti.GUI window.

    headless: draw off-screen and write every frame to ``out/frame_NNNN.png`` (what the window
    would show, status line included unless show_text=False); frames: stop after this many
    frames (None: until the user quits; headless needs a number); orbit: add this many degrees
    of azimuth before every frame after the first; screenshot: write the last frame's window
    content (status line included) to this PNG when the viewer exits; events: {frame: [Event,
    ...]} injected before that frame (scripting and tests). Key 'p' writes the current image
    (without the status line) to ``out/screenshot_NNNN.png`` (out defaults to the current folder).

    On exit (any mode) with ``out`` set, writes ``out/last_frame.npy`` (linear float32 (H, W, 3),
    row 0 at the top) and ``out/frames.json`` (per frame: spp, mode, camera). Returns a dict with
    ``frames`` (count), ``image`` (last linear image), ``info`` (per-frame dicts).
    """
    if headless and frames is None:
        raise ConfigError("headless viewing needs --frames N", key="frames")
    if headless and not out and not screenshot:
        raise ConfigError("headless viewing needs --out DIR (or --screenshot PNG)", key="out")
    src.show_text = show_text
    gui = _make_gui(title, src.width, src.height, headless)
    if not headless:
        log(f"viewer: {src.width}x{src.height} window on display {os.environ.get('DISPLAY', '?')} "
            f"(drag: orbit, right-drag: pan, wheel: zoom, i: integrator, +/-: exposure, [ ]: spp, "
            f"p: screenshot, r: reset, q/Esc: quit)")
    info, frame, last_canvas, n_shots = [], 0, None, 0
    shot_dir = out or "."
    fs = _font_size(src.width)
    try:
        while frames is None or frame < frames:
            quit_ = False
            injected = list((events or {}).get(frame, ()))
            if not headless:
                injected += [from_gui_event(e) for e in gui.get_events()]
            for ev in injected:
                if not src.handle(ev):
                    quit_ = True
            if quit_ or not gui.running:
                break
            if orbit and frame > 0:
                src.cam.orbit(orbit, 0.0)
                src.invalidate()
            if src.converged and not headless:
                time.sleep(0.01)          # idle: nothing to add, keep the window responsive
            src.step()
            disp = src.display()
            if src.screenshot_requested:
                src.screenshot_requested = False
                p = os.path.join(shot_dir, f"screenshot_{n_shots:04d}.png")
                while os.path.exists(p):
                    n_shots += 1
                    p = os.path.join(shot_dir, f"screenshot_{n_shots:04d}.png")
                write_png8(p, disp)
                n_shots += 1
                log(f"screenshot -> {p}")
            gui.set_image(to_gui(disp))
            if src.show_text:
                _text(gui, src.status(), (0.01, 0.99), fs)
            if screenshot:
                last_canvas = gui.get_image().copy()
            info.append(dict(frame=frame, **src.frame_info()))
            fname = None
            if headless and out:
                os.makedirs(out, exist_ok=True)
                fname = os.path.join(out, f"frame_{frame:04d}.png")
            gui.show(fname)
            frame += 1
    finally:
        gui.close()
        if screenshot and last_canvas is not None:
            write_png8(screenshot, from_gui(last_canvas))
        if out:
            os.makedirs(out, exist_ok=True)
            np.save(os.path.join(out, "last_frame.npy"), src.image.astype(np.float32))
            with open(os.path.join(out, "frames.json"), "w") as f:
                json.dump({"width": src.width, "height": src.height, "frames": info}, f, indent=1)
    return {"frames": frame, "image": src.image, "info": info}


# ------------------------------------------------------------------------------------ CLI entry points

VIEWER_KEYS = {"spp", "spp_per_frame", "exposure", "sensor", "integrator", "seed"}


def _arg(args, name, default=None):
    v = getattr(args, name, None)
    return default if v is None else v


def _log(*a):
    print(*a, file=sys.stderr)


def view(cfg, args, described=None):
    """``tirender view CONFIG``: interactive (or --headless) progressive view of a scene config."""
    from .api import scene_from_config
    from .config import section
    vs = section(cfg, "viewer", VIEWER_KEYS)
    rs = cfg.get("render") if isinstance(cfg.get("render"), dict) else {}
    sensor = _arg(args, "sensor", vs.get("sensor", rs.get("sensor", 0)))
    w, h = _arg(args, "width"), _arg(args, "height")
    if w or h:
        sensors = cfg["scene"].get("sensors") or []
        if not 0 <= int(sensor) < len(sensors):
            raise ConfigError(f"sensor index {sensor} out of range", cfg.get("_file"), "sensor")
        film = sensors[int(sensor)].setdefault("film", {}) if isinstance(sensors[int(sensor)], dict) else None
        if film is not None:
            if w:
                film["width"] = int(w)
            if h:
                film["height"] = int(h)
            described = None
    scene = scene_from_config(cfg, described)
    mode = _arg(args, "integrator", vs.get("integrator", rs.get("integrator")))
    src = SceneView(scene, sensor=int(sensor),
                    spp_target=_arg(args, "spp", vs.get("spp", rs.get("spp", 256))),
                    spp_per_frame=_arg(args, "spp_per_frame", vs.get("spp_per_frame")),
                    exposure=_arg(args, "exposure", vs.get("exposure", 0.0)),
                    seed=_arg(args, "seed", vs.get("seed", rs.get("seed", 0))), mode=mode)
    return _run_from_args(src, args, "tirender view " + os.path.basename(str(cfg.get("_file", ""))))


def view_field(npz_path, args):
    """``tirender view FIELD.npz``: orbit a saved radiance field (progressive jittered samples)."""
    from .radiance_field.field import RadianceField
    fld, extra = RadianceField.load(npz_path)
    src = FieldView(fld, extra, width=_arg(args, "width"), height=_arg(args, "height"),
                    spp_target=_arg(args, "spp", 16), spp_per_frame=_arg(args, "spp_per_frame", 1),
                    exposure=_arg(args, "exposure", 0.0), seed=_arg(args, "seed", 0))
    return _run_from_args(src, args, "tirender view " + os.path.basename(npz_path))


def _run_from_args(src, args, title):
    headless = bool(_arg(args, "headless", False))
    frames = _arg(args, "frames")
    if headless and frames is None:
        frames = 4
    out = _arg(args, "out")
    res = run_viewer(src, title=title, headless=headless, frames=frames, out=out,
                     orbit=float(_arg(args, "orbit", 0.0)), screenshot=_arg(args, "screenshot"),
                     show_text=not _arg(args, "no_text", False), log=_log)
    where = f" -> {out}" if out else ""
    _log(f"viewer: {res['frames']} frames, {src.spp} spp in the last, {src.mode}{where}")
    return 0


# ------------------------------------------------------------------------------------ live optimisation

def _as_rgb(img, h, w):
    a = np.asarray(img, np.float32)
    if a.ndim == 1 and a.size == h * w * 3:
        a = a.reshape(h, w, 3)
    elif a.ndim == 1 and a.size == h * w:
        a = a.reshape(h, w)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    elif a.shape[2] == 2:
        a = np.concatenate([a, np.zeros_like(a[:, :, :1])], 2)
    return a[:, :, :3]


def _resize_nearest(a, h, w):
    H, W = a.shape[:2]
    if (H, W) == (h, w):
        return a
    ri = np.minimum((np.arange(h) + 0.5) * H / h, H - 1).astype(int)
    ci = np.minimum((np.arange(w) + 0.5) * W / w, W - 1).astype(int)
    return a[ri][:, ci]


class LiveOptimizationView(contextlib.AbstractContextManager):   # __enter__: self
    """Live view of an optimisation: current | target | |difference| and the loss curve.

    Layout (top to bottom): three panels (each the render upscaled by an integer factor to at
    least ~200 px wide, or shrunk to fit ``max_width``) separated by ``gap`` pixels, then a
    ``plot_height`` strip with the loss curve (log10 scale, drawn into the GUI with
    ``io.plot.draw_line_plot_into``) titled with the iteration and the last loss. Images are linear RGB tonemapped with ``exposure`` and
    sRGB; the difference panel shows |current - target| with the same tonemap.

    headless=True (or no display available: a warning is printed and the view falls back to
    headless): frames are drawn off-screen; with ``out_dir`` each update writes
    ``out_dir/live.png`` (overwritten, the latest frame) or, with ``keep_all=True``,
    ``out_dir/live_NNNN.png`` (NNNN = iteration).

    ``update`` returns False once the user closed the window (window close button, Esc or q) or
    -- test hook -- after ``close_after`` updates (default: environment variable
    ``TIRENDER_GUI_CLOSE_AFTER``): the first ``close_after`` calls draw and return True, every
    later call returns False without drawing, exactly as if the user had closed the window after
    seeing ``close_after`` frames.
    """

    def __init__(self, title="tirender optimize", width=256, height=256, headless=False, out_dir=None,
                 close_after=None, keep_all=False, exposure=0.0, max_width=1600, gap=4, plot_height=None):
        self.w, self.h = int(width), int(height)
        if self.w < 1 or self.h < 1:
            raise ValueError("width and height must be positive")
        if close_after is None:
            env = os.environ.get("TIRENDER_GUI_CLOSE_AFTER")
            close_after = int(env) if env not in (None, "") else None
        self.close_after = close_after
        self.keep_all, self.exposure, self.out_dir, self.gap = keep_all, float(exposure), out_dir, int(gap)
        scale = max(1, math.ceil(200 / self.w))
        pw, ph = self.w * scale, self.h * scale
        if 3 * pw + 2 * gap > max_width:
            pw = max(16, (max_width - 2 * gap) // 3)
            ph = max(16, round(self.h * pw / self.w))
        self.pw, self.ph = pw, ph
        self.width = 3 * pw + 2 * self.gap
        self.plot_h = int(plot_height or max(180, min(ph, 260)))
        self.height = ph + self.gap + self.plot_h
        self.headless = bool(headless)
        self.updates = 0
        self.closed = False
        self.last_frame = None       # top-down (H, W, 3) display values of the last drawn frame
        try:
            self.gui = _make_gui(title, self.width, self.height, self.headless)
        except ConfigError as e:
            print(f"warning: live view: {e.problem}; continuing headless"
                  + (f" (frames -> {out_dir})" if out_dir else ""), file=sys.stderr)
            self.headless = True
            self.gui = _make_gui(title, self.width, self.height, True)
        self.fs = max(_font_size(self.pw), 13)

    # -- layout ------------------------------------------------------------------------------
    def compose(self, current, target):
        """The panel part of a frame: top-down (height, width, 3) display values in [0, 1]
        (panels on the top ``ph`` rows; the plot strip below is dark grey)."""
        cur = _as_rgb(current, self.h, self.w)
        tgt = _as_rgb(target, cur.shape[0], cur.shape[1])
        diff = np.abs(cur - tgt)
        canvas = np.full((self.height, self.width, 3), 0.12, np.float32)
        for i, img in enumerate((cur, tgt, diff)):
            d = tonemap(img, "path", self.exposure)
            x0 = i * (self.pw + self.gap)
            canvas[:self.ph, x0:x0 + self.pw] = _resize_nearest(d, self.ph, self.pw)
        return canvas

    def panel_box(self, i):
        """(row0, row1, col0, col1) of panel i (0 current, 1 target, 2 difference) in compose()."""
        x0 = i * (self.pw + self.gap)
        return 0, self.ph, x0, x0 + self.pw

    def _draw_plot(self, iteration, losses):
        """Loss curve (log y) in the bottom strip; x = iteration numbers (the last loss belongs to
        ``iteration``). Uses io.plot.draw_line_plot_into when available."""
        gui, H = self.gui, self.height
        vals = np.asarray([float(v) for v in (losses or [])], np.float64)
        last = vals[-1] if len(vals) else float("nan")
        title = f"iteration {iteration}   loss {last:.6g}"
        xs = int(iteration) - len(vals) + 1 + np.arange(len(vals), dtype=np.float64)
        region = (0.0, 0.0, 1.0, self.plot_h / H)
        try:
            from .io.plot import draw_line_plot_into
        except ImportError:
            draw_line_plot_into = None
        if draw_line_plot_into is not None:
            draw_line_plot_into(gui, {"loss": (xs, vals)}, title=title, xlabel="iteration", logy=True,
                                region=region)
            return
        _text(gui, title, (0.01, (self.plot_h - 2) / H), self.fs)
        y0, y1 = 0.08 * self.plot_h / H, (self.plot_h - 22) / H
        x0, x1 = 0.06, 0.98
        gui.lines(np.array([[x0, y0], [x0, y0]]), np.array([[x1, y0], [x0, y1]]), radius=1, color=0x808080)
        ok = np.isfinite(vals) & (vals > 0)
        if ok.sum() < 1:
            return
        lv = np.log10(vals[ok])
        lo, hi = lv.min(), lv.max()
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        px = x0 + (x1 - x0) * (np.nonzero(ok)[0] / max(len(vals) - 1, 1))
        py = y0 + (y1 - y0) * (lv - lo) / (hi - lo)
        pts = np.stack([px, py], 1)
        if len(pts) == 1:
            pts = np.concatenate([pts, pts + [0.002, 0]])
        gui.lines(pts[:-1], pts[1:], radius=1.5, color=0xFFB000)
        _text(gui, f"{10 ** hi:.3g}", (0.005, y1 + 0.01), max(self.fs - 3, 8), 0xB0B0B0)
        _text(gui, f"{10 ** lo:.3g}", (0.005, y0 + 0.04), max(self.fs - 3, 8), 0xB0B0B0)

    # -- API ---------------------------------------------------------------------------------
    def update(self, iteration, current, target, losses):
        """Draw one frame. current/target: linear (H, W, 3) (or (H, W)) images; losses: the loss
        of every iteration so far. Returns False once the view is closed (then draws nothing)."""
        if self.closed:
            return False
        if self.close_after is not None and self.updates >= self.close_after:
            self.closed = True
            return False
        if not self.headless:
            for e in self.gui.get_events():
                if e.type == self.gui.PRESS and str(e.key) in QUIT_KEYS or str(e.key) == "WMClose":
                    self.closed = True
            if self.closed or not self.gui.running:
                self.closed = True
                return False
        gui = self.gui
        canvas = self.compose(current, target)
        gui.set_image(to_gui(canvas))
        ty = 1.0 - 4.0 / self.height
        for i, label in enumerate(("current", "target", "|difference|")):
            _text(gui, label, ((i * (self.pw + self.gap) + 3) / self.width, ty), self.fs)
        self._draw_plot(iteration, losses)
        self.last_frame = from_gui(gui.get_image())
        fname = None
        if self.headless and self.out_dir:
            os.makedirs(self.out_dir, exist_ok=True)
            name = f"live_{int(iteration):04d}.png" if self.keep_all else "live.png"
            fname = os.path.join(self.out_dir, name)
        if fname:
            write_png8(fname, self.last_frame)
            gui.show()
        else:
            gui.show()
        self.updates += 1
        return True

    def close(self):
        """Close the window (idempotent)."""
        self.closed = True
        if getattr(self, "gui", None) is not None:
            self.gui.close()
            self.gui = None

    def __exit__(self, *exc):
        self.close()
