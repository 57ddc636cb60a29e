"""What the sensor models share (Mitsuba 3's ``Sensor`` and ``ProjectiveCamera``, src/render/sensor.cpp):
the keys of every projective camera, ``parse_fov``, the host-side checks and the device maths of the
projective (pinhole / thin lens) connection.

A sensor model is a class in its own module (perspective.py, thinlens.py, orthographic.py) declaring
NAME (its YAML ``type`` = Mitsuba plugin name), KEYS (tirender.schema, Mitsuba's names and defaults),
PARAMS (the names Mitsuba's ``traverse`` exposes, all NonDifferentiable there and here), APERTURE (whether
a camera sample draws a 2D aperture sample, Mitsuba's ``needs_aperture_sample``), CONNECT (whether it has
Mitsuba's ``sample_direction``: light tracing), ``build(values, width, height, file, key, warn)`` (the
fields of description.Sensor), ``set_param(sensor, name, value, key)`` and the Taichi functions the
dispatch (registry.py) calls:

    sample_ray(st, cam, pos, ap) -> (o, d, tmax)     Mitsuba's sample_ray: film position pos (pixels),
                                                     aperture sample ap ∈ [0,1)²; ray origin (moved to
                                                     the near plane), unit direction, maxt (far clip)
    connect(st, cam, p, u) -> Connection             Mitsuba's sample_direction (light tracing)

Camera space is Mitsuba's: x to the image left, y up, z forward; film position (x, y) in pixels, x to
the right, y downwards, row 0 at the top. Per camera the device holds (scene/storage.py): cam_type (the
model's tag), cam_o / cam_left / cam_up / cam_fwd (origin and the normalised columns of to_world),
cam_lin (the linear part of to_world as given: the orthographic camera's extent), cam_tx / cam_ty (the
image plane's half extent at distance 1: tan(fov/2); orthographic: 1, 1/aspect), cam_near / cam_far,
cam_pp (principal point offset, film units), cam_aperture / cam_focus (thin lens).
"""
import math
import warnings

import numpy as np
import taichi as ti

from ..core.math import vec2, vec3
from ..errors import ConfigError
from ..schema import Choice, Key, Number, Transform, number

EPSILON_F32 = 2.0 ** -24          # dr::Epsilon<float>: the aperture radius Mitsuba puts in for 0
DEFAULT_FOV = 39.3077             # tirender's YAML default (degrees along x); Mitsuba's: focal_length 50mm
MITSUBA_FOCAL_LENGTH = "50mm"     # Mitsuba's default when neither fov nor focal_length is given


class FocalLength(Key):
    """A 35 mm film equivalent focal length: "50mm", "50" or a number (millimetres), > 0."""
    kind = "focal length"

    def parse(self, v, file, key):
        s = str(v).strip()
        try:
            f = float(s[:-2] if s.endswith("mm") else s) if not isinstance(v, bool) else float("nan")
        except ValueError:
            f = float("nan")
        if not (math.isfinite(f) and f > 0.0):
            raise ConfigError(f"expected a focal length like '50mm' (> 0), got {v!r}", file, key)
        return f

    def describe(self):
        return "focal length (`\"50mm\"` or a number of mm, > 0)"


class FovAxis(Choice):
    """Mitsuba's fov_axis, case-insensitive as its parse_fov."""

    def parse(self, v, file, key):
        return super().parse(v.lower() if isinstance(v, str) else v, file, key)


class Refused(Key):
    """A Mitsuba property tirender cannot honour: any value is refused with `why`."""
    kind = "refused"

    def __init__(self, name, why):
        super().__init__(name, None, f"refused: {why}")
        self.why = why

    def parse(self, v, file, key):
        raise ConfigError(f"'{self.name}' is not supported: {self.why}", file, key)

    def describe(self):
        return "refused"


# ProjectiveCamera (sensor.cpp): every camera model reads these
CLIP_KEYS = (
    Number("near_clip", default=1e-2, lo=0.0, strict_lo=True,
           doc="distance to the near clip plane: camera rays start on it (Mitsuba's sample_ray)"),
    Number("far_clip", default=1e4, lo=0.0, strict_lo=True,
           doc="distance to the far clip plane: a camera ray that meets nothing before it escapes"),
    Number("focus_distance", default=None, lo=0.0, strict_lo=True,
           doc="distance to the focal plane (default: far_clip); only the thin lens focuses"),
)
# Sensor (sensor.cpp): tirender scenes do not move, so the shutter interval changes nothing
SHUTTER_KEYS = (
    Number("shutter_open", default=0.0, doc="shutter opening time (accepted: no motion in tirender scenes)"),
    Number("shutter_close", default=0.0, doc="shutter closing time (accepted: no motion)"),
)
COMMON_KEYS = SHUTTER_KEYS + (
    Refused("srf", "sensor response functions (the film records the variant's colours)"),
)
# parse_fov (sensor.cpp)
FOV_KEYS = (
    Number("fov", default=None, lo=0.0, hi=180.0, strict_lo=True, strict_hi=True,
           doc=f"field of view in degrees along fov_axis (neither fov nor focal_length: {DEFAULT_FOV} along x "
               f"in YAML scenes; Mitsuba XML scenes get Mitsuba's default focal_length {MITSUBA_FOCAL_LENGTH})"),
    FocalLength("focal_length", default=None,
                doc="35 mm film equivalent focal length, mapped to the 36 x 24 mm diagonal (instead of fov)"),
    FovAxis("fov_axis", ("x", "y", "diagonal", "smaller", "larger"), default="x",
            doc="the image axis fov applies to (smaller / larger: the film's smaller / larger side)"),
)
TO_WORLD = Transform("to_world", default=None, doc="camera-to-world transform (Mitsuba's lookat etc.)")


def mitsuba_defaults(given):
    """What a Mitsuba XML camera with a field of view gets where the YAML default differs: focal_length
    50mm when neither fov nor focal_length is given (Mitsuba's parse_fov)."""
    return {} if ("fov" in given or "focal_length" in given) else {"focal_length": MITSUBA_FOCAL_LENGTH}


def parse_fov(values, aspect, file, key):
    """The horizontal field of view x_fov (degrees) as Mitsuba's parse_fov (src/render/sensor.cpp): ``fov``
    along ``fov_axis`` (x, y, diagonal, smaller, larger), or ``focal_length`` (35 mm film equivalent, mapped
    to the 36 x 24 mm diagonal). Neither given: tirender's YAML default fov along x."""
    if values.get("fov") is not None and values.get("focal_length") is not None:
        raise ConfigError("give either 'fov' or 'focal_length', not both", file, f"{key}.focal_length")
    if values.get("focal_length") is not None:
        fov = math.degrees(2.0 * math.atan(math.sqrt(36.0 ** 2 + 24.0 ** 2) / (2.0 * values["focal_length"])))
        axis = "diagonal"
    else:
        fov = values["fov"] if values.get("fov") is not None else DEFAULT_FOV
        axis = values.get("fov_axis", "x")
        if axis == "smaller":
            axis = "y" if aspect > 1 else "x"
        elif axis == "larger":
            axis = "x" if aspect > 1 else "y"
    t = math.tan(math.radians(fov) / 2)
    if axis == "x":
        x_fov = fov
    elif axis == "y":
        x_fov = math.degrees(2.0 * math.atan(t * aspect))
    else:
        x_fov = math.degrees(2.0 * math.atan(t / math.sqrt(1.0 + 1.0 / (aspect * aspect))))
    return check_x_fov(x_fov, file, f"{key}.fov")


def check_x_fov(x_fov, file, key):
    if not (0.0 < x_fov < 180.0):
        raise ConfigError(f"the horizontal field of view must lie in (0, 180) degrees, got {x_fov:g}", file, key)
    return float(x_fov)


def tan_half(x_fov, aspect):
    """(tan_x, tan_y): the image plane's half extent at distance 1 for x_fov (degrees) and aspect W/H."""
    tx = math.tan(math.radians(x_fov) / 2)
    return tx, tx / aspect


def check_rigid(m, file, key):
    """Mitsuba's has_scale test on a perspective / thin lens to_world (M·Mᵀ = I within 1e-3): refused."""
    lin = np.asarray(m, np.float64)[:3, :3]
    if np.abs(lin @ lin.T - np.eye(3)).max() > 1e-3:
        raise ConfigError("scale factors in the camera-to-world transformation are not allowed (as in Mitsuba)",
                          file, key)
    return m


def check_common(values, file, key):
    """ProjectiveCamera's and Sensor's checks (sensor.cpp) -> (near, far, focus distance)."""
    near, far = values["near_clip"], values["far_clip"]
    if near >= far:
        raise ConfigError(f"near_clip ({near:g}) must be smaller than far_clip ({far:g})", file, f"{key}.near_clip")
    if values["shutter_close"] < values["shutter_open"]:
        raise ConfigError("shutter_open must be <= shutter_close", file, f"{key}.shutter_close")
    focus = values.get("focus_distance")
    return near, far, float(far if focus is None else focus)


def clip_fields(values, file, key):
    near, far, focus = check_common(values, file, key)
    return dict(near_clip=near, far_clip=far, focus_distance=focus)


def matrix(value, key):
    """A to_world set by name: a finite, invertible 4x4 (array or nested list) -> float64 array."""
    try:
        m = np.array(value, np.float64)
    except (TypeError, ValueError):
        m = np.zeros(0)
    if m.shape != (4, 4) or not np.all(np.isfinite(m)):
        raise ConfigError(f"expected a finite 4x4 matrix, got {value!r}", None, key)
    if abs(np.linalg.det(m[:3, :3])) < 1e-30:
        raise ConfigError("to_world is singular", None, key)
    return m


def set_number(sensor, name, value, key, lo=0.0):
    """A float camera parameter set by name (> lo), with the near < far rule kept."""
    v = number(value, None, key, lo, strict_lo=True)
    near = v if name == "near_clip" else sensor.near_clip
    far = v if name == "far_clip" else sensor.far_clip
    if near >= far:
        raise ConfigError(f"near_clip ({near:g}) must be smaller than far_clip ({far:g})", None, key)
    return v


def set_common(sensor, name, value, key):
    """Set a parameter every camera model exposes (near_clip, far_clip, to_world); False if `name` is not one."""
    if name in ("near_clip", "far_clip"):
        setattr(sensor, name, set_number(sensor, name, value, key))
        return True
    return False


def warn_aperture(value, where):
    """Mitsuba's thin lens with aperture_radius 0: one warning line, the radius becomes dr::Epsilon<float>."""
    if value == 0.0:
        warnings.warn(f"{where}: a zero aperture radius is not possible -- setting it to {EPSILON_F32:g} "
                      f"(as Mitsuba's thinlens)", stacklevel=3)
        return EPSILON_F32
    return value


def device_row(s):
    """The device row of a projective camera (perspective, thin lens) of description.Sensor s."""
    m = np.asarray(s.to_world, np.float64)
    cols = [m[:3, k] / np.linalg.norm(m[:3, k]) for k in range(3)]
    return dict(cam_o=m[:3, 3], cam_left=cols[0], cam_up=cols[1], cam_fwd=cols[2], cam_lin=m[:3, :3],
                cam_tx=s.tan_x, cam_ty=s.tan_y, cam_near=s.near_clip, cam_far=s.far_clip,
                cam_pp=np.asarray(s.principal_point, np.float64), cam_aperture=s.aperture_radius,
                cam_focus=s.focus_distance)


class ProjectiveCamera:
    """What the projective cameras (perspective, thin lens; Mitsuba's ProjectiveCamera) share on the host: the
    field of view, the clip planes, a rigid to_world, light tracing. A subclass adds its own fields in
    ``lens_fields(values, file, key) -> dict`` and sets its own parameters in ``set_lens(s, name, value, key)``
    (True where it did)."""
    CONNECT = True
    MITSUBA_DEFAULTS = staticmethod(mitsuba_defaults)
    rows = staticmethod(device_row)

    @classmethod
    def build(cls, values, width, height, file, key):
        """Validated values -> description.Sensor fields."""
        x_fov = parse_fov(values, width / height, file, key)
        tx, ty = tan_half(x_fov, width / height)
        out = dict(tan_x=tx, tan_y=ty, **cls.lens_fields(values, file, key))
        out.update(clip_fields(values, file, key))
        out["to_world"] = check_rigid(values["to_world"], file, f"{key}.to_world")
        return out

    @classmethod
    def set_param(cls, s, name, value, key):
        """Set parameter `name` of description.Sensor s (checked as at load time)."""
        if name == "x_fov":
            s.tan_x, s.tan_y = tan_half(check_x_fov(number(value, None, key), None, key), s.width / s.height)
        elif name == "to_world":
            s.to_world = check_rigid(matrix(value, key), None, key)
        elif not cls.set_lens(s, name, value, key):
            set_common(s, name, value, key)


def project(s, X):
    """Film positions (N, 2) in pixels of world points X (N, 3) seen through the pinhole of a perspective
    sensor s (description.Sensor; numpy, the principal point offset included)."""
    m = np.asarray(s.to_world, np.float64)
    o = m[:3, 3]
    left, up, fwd = (m[:3, k] / np.linalg.norm(m[:3, k]) for k in range(3))
    r = np.asarray(X, np.float64) - o
    z = r @ fwd
    x, y = (r @ left) / z, (r @ up) / z
    ppx, ppy = s.principal_point
    return np.stack([(0.5 * (1.0 - x / s.tan_x) - ppx) * s.width, (0.5 * (1.0 - y / s.tan_y) - ppy) * s.height], 1)


# ------------------------------------------------------------------------------------------ device
# Connection: (valid, film position (pixels), unit direction p -> the camera point q, distance, importance
# W = sensor weight of Mitsuba's sample_direction (already divided by the aperture pdf), q)
Connection = ti.types.struct(valid=ti.i32, pos=vec2, to_cam=vec3, dist=float, imp=float, q=vec3)


@ti.func
def image_plane(st: ti.template(), cam, pos):
    """(x, y) on the image plane at distance 1 (camera space) of film position pos (pixels), with the
    principal point offset: Mitsuba's sample_to_camera of (pos / (W, H) + offset)."""
    sx = pos[0] / st.cam_w[cam] + st.cam_pp[cam][0]
    sy = pos[1] / st.cam_h[cam] + st.cam_pp[cam][1]
    return st.cam_tx[cam] * (1.0 - 2.0 * sx), st.cam_ty[cam] * (1.0 - 2.0 * sy)


@ti.func
def to_world_dir(st: ti.template(), cam, v):
    return st.cam_left[cam] * v[0] + st.cam_up[cam] * v[1] + st.cam_fwd[cam] * v[2]


@ti.func
def clipped_ray(st: ti.template(), cam, o, dl):
    """Mitsuba's projective sample_ray tail: the ray from o along the camera-space unit direction dl moved
    to the near plane, its maxt the far plane's: (o + d near/dl_z, d, (far - near)/dl_z)."""
    d = to_world_dir(st, cam, dl)
    inv_z = 1.0 / dl[2]
    return o + d * (st.cam_near[cam] * inv_z), d, (st.cam_far[cam] - st.cam_near[cam]) * inv_z


@ti.func
def projective_connect(st: ti.template(), cam, p, a):
    """Mitsuba's sample_direction of a projective camera seen from world point p through the aperture point
    a = (a_x, a_y) (camera space, lens plane z = 0; 0: the pinhole). r = p - q (q: the aperture point in world
    space); the point must lie between the clip planes (its camera-space z from the lens centre); it projects
    through a onto the focal plane z = F: x = a_x / F + (r·left) / (r·fwd) (likewise y) on the plane at
    distance 1, the film position from x, y and the principal point offset; valid inside the film. Importance
    (Mitsuba's value / dist²): W = 1 / (A cos³θ dist²) = |r| / (A (r·fwd)³), A = 4 tx ty (the image plane's
    area at distance 1), cos θ = (r·fwd) / |r|."""
    res = Connection(valid=0, pos=vec2(0.0), to_cam=vec3(0.0), dist=0.0, imp=0.0, q=st.cam_o[cam])
    z0 = (p - st.cam_o[cam]).dot(st.cam_fwd[cam])
    if st.cam_near[cam] <= z0 and z0 <= st.cam_far[cam]:
        q = st.cam_o[cam] + st.cam_left[cam] * a[0] + st.cam_up[cam] * a[1]
        v = q - p
        dist = v.norm()
        c = -v.dot(st.cam_fwd[cam])          # r·fwd = z0 (a lies in the lens plane)
        if c > 0.0 and dist > 0.0:
            tx = st.cam_tx[cam]
            ty = st.cam_ty[cam]
            inv_f = 1.0 / st.cam_focus[cam]
            x = a[0] * inv_f - v.dot(st.cam_left[cam]) / c
            y = a[1] * inv_f - v.dot(st.cam_up[cam]) / c
            pos = vec2((0.5 * (1.0 - x / tx) - st.cam_pp[cam][0]) * st.cam_w[cam],
                       (0.5 * (1.0 - y / ty) - st.cam_pp[cam][1]) * st.cam_h[cam])
            if 0.0 <= pos[0] < st.cam_w[cam] and 0.0 <= pos[1] < st.cam_h[cam]:
                res.valid = 1
                res.pos = pos
                res.to_cam = v / dist
                res.dist = dist
                res.imp = dist / (4.0 * tx * ty * c * c * c)
                res.q = q
    return res


@ti.func
def projective_connect_adjoint(st: ti.template(), cam, p, q, d_pos, d_imp):
    """∂/∂p of <d_pos, pos(p)> + d_imp · imp(p) for projective_connect's film position and importance with
    the camera point q held (p inside the film; vec3). With r = p - q and c = r·fwd: x = r·left / c + const,
    y = r·up / c + const, pos = ((½ (1 - x / tx) - pp_x) W, (½ (1 - y / ty) - pp_y) H), imp = |r| / (4 tx ty c³)."""
    r = p - q
    fwd = st.cam_fwd[cam]
    c = r.dot(fwd)
    x = r.dot(st.cam_left[cam]) / c
    y = r.dot(st.cam_up[cam]) / c
    dx = (st.cam_left[cam] - x * fwd) / c
    dy = (st.cam_up[cam] - y * fwd) / c
    tx = st.cam_tx[cam]
    ty = st.cam_ty[cam]
    g = d_pos[0] * (-0.5 * st.cam_w[cam] / tx) * dx + d_pos[1] * (-0.5 * st.cam_h[cam] / ty) * dy
    n = r.norm()
    imp = n / (4.0 * tx * ty * c * c * c)
    return g + d_imp * imp * (r / (n * n) - 3.0 * fwd / c)
