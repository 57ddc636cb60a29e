"""The sensor registry: one line per model, the scene-file parsing generic over their KEYS, the device
rows, the camera parameters by name, and the device dispatch every integrator calls.

A camera's model is chosen at run time from ``st.cam_type[cam]`` (each model's device code is a few
lines): kernels compile once whatever sensors a scene has, and the sensors of one scene (multi-view) may
be of different types.

    pixel_sample(st, cam, pix, seed, index) -> (sampler, pos)       the sample's PCG32 stream, film position
    camera_sample(st, cam, pix, seed, index) -> (sampler, pos, ap)  + the aperture sample (drawn from the
                                                                     stream where the model needs one; a
                                                                     replay calling it again draws the same)
    aperture_sample(st, cam, sampler) -> vec2                       (0.5, 0.5) or the sampler's next 2D
    camera_ray(st, cam, pos, ap) -> (o, d, tmax)                    Mitsuba's sample_ray
    camera_connect(st, cam, p, u) -> base.Connection                Mitsuba's sample_direction (light tracing)
    camera_connect_adjoint(st, cam, p, q, d_pos, d_imp) -> vec3     ∂/∂p of the connection (camera point q held)
"""
import numpy as np
import taichi as ti

from ..core.math import vec2
from ..core.rng import make_sampler
from ..errors import ConfigError
from ..registry import register
from ..schema import family_keys, validate
from . import base, batch
from .orthographic import Orthographic
from .perspective import Perspective
from .thinlens import ThinLens

MODELS = (
    Perspective,
    ThinLens,
    Orthographic,
)
BY_NAME, ALL = register(MODELS)
_KEYS = family_keys(MODELS)


def model(name, file=None, key=None):
    m = BY_NAME.get(name)
    if m is None:
        raise ConfigError(f"unknown sensor type {name!r} (tirender has: {', '.join(BY_NAME)})", file, key)
    return m


def parse(spec, width, height, file, key):
    """A sensor mapping (its film already read: width x height) -> the description.Sensor fields of its
    model (type, to_world, tan_x, tan_y, clip planes, ...); every problem one ConfigError line."""
    t = spec.get("type", "perspective")
    m = model(t, file, f"{key}.type")
    values = validate(spec, m.KEYS, file, key, skip=("type", "film", "id"), family=("sensor", t, _KEYS))
    if values.get("to_world") is None:
        values["to_world"] = np.eye(4)
    fields = m.build(values, width, height, file, key)
    fields["type"] = t
    return fields


# ------------------------------------------------------------------------------ device rows
FIELDS = ("cam_type", "cam_o", "cam_left", "cam_up", "cam_fwd", "cam_lin", "cam_tx", "cam_ty", "cam_near",
          "cam_far", "cam_pp", "cam_aperture", "cam_focus", "cam_child")
_INT = {"cam_type", "cam_child"}
device_list = batch.device_list


def device_rows(sensors, links=None):
    """{storage field: array over `sensors`} of the model fields (scene/storage.py); a batch's row (links:
    batch.device_list's) is its first child's with the batch's tag, (first child row, children) in cam_child
    and in cam_aperture whether a child draws an aperture sample."""
    rows = []
    for i, s in enumerate(sensors):
        if s.type == batch.NAME:
            r = BY_NAME[s.children[0].type].rows(s.children[0])
            r["cam_type"] = batch.TAG
            r["cam_aperture"] = float(any(BY_NAME[c.type].APERTURE for c in s.children))
            r["cam_child"] = (links or {}).get(i, (0, 1))
        else:
            m = BY_NAME[s.type]
            r = m.rows(s)
            r["cam_type"] = m.TAG
            r["cam_child"] = (0, 1)
        rows.append(r)
    return {f: np.array([r[f] for r in rows], np.int32 if f in _INT else np.float32) for f in FIELDS}


# ------------------------------------------------------------------------------ parameters by name
class SensorParameters:
    """The cameras' parameters by name, ``<sensor id>.<name>`` with Mitsuba's names (its ``traverse``: x_fov,
    principal_point_offset_x/y, aperture_radius, focus_distance, to_world, near_clip, far_clip — per model
    its PARAMS). Mitsuba marks them NonDifferentiable: so are they here (not in the parameter pool, no
    gradients). ``params[name]`` reads (a float, or to_world as a 4x4 array); ``params[name] = v`` checks v
    as the scene file would be (a to_world with scale refused for perspective / thin lens, the fov range,
    near < far, aperture 0 -> 2^-24 with a warning) and updates the device rows without compiling any
    kernel (``on_change(index)``)."""

    def __init__(self, sensors, on_change=None):
        self.sensors = sensors
        self.on_change = on_change
        self._names = {f"{s.id}.{p}": (i, p) for i, s in enumerate(sensors) if s.type != batch.NAME
                       for p in BY_NAME[s.type].PARAMS}

    def keys(self):
        return list(self._names)

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __contains__(self, name):
        return name in self._names

    def _lookup(self, name):
        if name not in self._names:
            raise ConfigError(f"unknown sensor parameter '{name}' (sensor parameters: {', '.join(self._names)})",
                              key=name)
        return self._names[name]

    def __getitem__(self, name):
        i, p = self._lookup(name)
        s = self.sensors[i]
        if p == "x_fov":
            return float(np.degrees(2.0 * np.arctan(s.tan_x)))
        if p == "to_world":
            return np.array(s.to_world, np.float64)
        if p.startswith("principal_point_offset_"):
            return float(s.principal_point[p[-1] == "y"])
        return float(getattr(s, p))

    def __setitem__(self, name, value):
        i, p = self._lookup(name)
        BY_NAME[self.sensors[i].type].set_param(self.sensors[i], p, value, name)
        if self.on_change is not None:
            self.on_change(i)

    def __repr__(self):
        return "SensorParameters(" + ", ".join(self._names) + ")"


# ------------------------------------------------------------------------------ device dispatch
@ti.func
def pixel_sample(st: ti.template(), cam, pix, seed, index):
    """(sampler, film position) of sample `index` of pixel `pix`: the PCG32 stream of (seed, pixel,
    index) — a replay re-derives the same path from it — and the pixel's corner plus a jitter."""
    sampler = make_sampler(seed, pix, index)
    w = st.cam_w[cam]
    pos = vec2(pix % w, pix // w) + sampler.next_2d()
    return sampler, pos


@ti.func
def aperture_sample(st: ti.template(), cam, sampler: ti.template()):
    """The aperture sample of a camera sample (Mitsuba's order: after the film position, before the
    wavelengths): the sampler's next 2D sample for models that need one (thin lens), else (0.5, 0.5)."""
    ap = vec2(0.5)
    t = st.cam_type[cam]
    for i in ti.static(range(len(MODELS))):
        if ti.static(MODELS[i].APERTURE):
            if t == MODELS[i].TAG:
                ap = sampler.next_2d()
    if t == batch.TAG and st.cam_aperture[cam] > 0.0:    # one of its children needs one (Mitsuba's needs_sample_3)
        ap = sampler.next_2d()
    return ap


@ti.func
def camera_sample(st: ti.template(), cam, pix, seed, index):
    """(sampler, film position, aperture sample) of sample `index` of pixel `pix` (pixel_sample, then
    aperture_sample): what every camera path starts with, and what its replay calls again."""
    sampler, pos = pixel_sample(st, cam, pix, seed, index)
    ap = aperture_sample(st, cam, sampler)
    return sampler, pos, ap


@ti.func
def camera_ray(st: ti.template(), cam, pos, ap):
    """World-space ray (origin, unit direction, maxt) of film position pos (pixels) and aperture sample ap (a
    batch's: its child's, sensors/batch.py)."""
    c, q = batch.resolve(st, cam, pos)
    o = st.cam_o[c]
    d = st.cam_fwd[c]
    tmax = 0.0
    t = st.cam_type[c]
    for i in ti.static(range(len(MODELS))):
        if t == MODELS[i].TAG:
            o, d, tmax = MODELS[i].sample_ray(st, c, q, ap)
    return o, d, tmax


@ti.func
def camera_connect(st: ti.template(), cam, p, u):
    """The camera seen from world point p (light tracing; u: the connection's 2D sample, used by the thin
    lens): base.Connection (valid = 0 outside the film or the clip range, and for models without Mitsuba's
    sample_direction)."""
    c = base.Connection(valid=0, pos=vec2(0.0), to_cam=st.cam_fwd[cam], dist=0.0, imp=0.0, q=st.cam_o[cam])
    t = st.cam_type[cam]
    for i in ti.static(range(len(MODELS))):
        if ti.static(MODELS[i].CONNECT):
            if t == MODELS[i].TAG:
                c = MODELS[i].connect(st, cam, p, u)
    return c


@ti.func
def camera_connect_adjoint(st: ti.template(), cam, p, q, d_pos, d_imp):
    """∂/∂p of <d_pos, pos(p)> + d_imp · imp(p) of camera_connect through the camera point q (every model
    that connects is projective: base.projective_connect_adjoint)."""
    return base.projective_connect_adjoint(st, cam, p, q, d_pos, d_imp)


def check_connect(scene, sensor, what):
    """Refuse light tracing (`what`) through a sensor whose model has no sample_direction in Mitsuba."""
    s = scene.sensors[sensor]
    if s.type == batch.NAME:
        raise ConfigError(f"{what} cannot trace light to a batch sensor (as Mitsuba's, it is incompatible with the "
                          f"particle tracer): render its sensors one by one", key=f"sensors[{sensor}].type")
    if not BY_NAME[s.type].CONNECT:
        raise ConfigError(f"{what} needs a sensor that light can be traced to (perspective, thinlens); Mitsuba's "
                          f"'{s.type}' sensor has no sample_direction", key=f"sensors[{sensor}].type")


def check_perspective(scene, sensor, what):
    """Refuse `what` for a sensor other than the perspective pinhole (Mitsuba's projective integrators: "Only
    perspective cameras are supported")."""
    s = scene.sensors[sensor]
    if s.type == batch.NAME and all(c.type == Perspective.NAME for c in s.children):
        return
    if s.type != Perspective.NAME:
        raise ConfigError(f"{what} needs a perspective sensor (as Mitsuba's projective integrators); this one is "
                          f"'{s.type}'", key=f"sensors[{sensor}].type")
