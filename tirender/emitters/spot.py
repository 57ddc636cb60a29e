"""Spot light (Mitsuba 3 ``spot``, src/emitters/spot.cpp): a point light at the origin of
``to_world`` shining along its +z axis, of radiant intensity I (W sr⁻¹) on the axis times Mitsuba's
falloff curve of the angle θ between the axis and the emitted direction (linear in θ between
beam_width and cutoff_angle).

    falloff(θ) = 1                                          θ <= beam_width
               = (cutoff - θ) / (cutoff - beam_width)       beam_width < θ < cutoff  (linear in θ)
               = 0                                          θ >= cutoff

(tested as Mitsuba does: cos θ >= cos beam_width -> 1, cos θ <= cos cutoff -> 0). Le/pdf =
I · falloff(θ) / dist² (the sample's ``scale``). Delta emitter (never hit). Differentiable:
intensity (RGB; its adjoint is DeltaEmitter.eval_adjoint: ∂Le/∂I = falloff / dist²). The angles
and the frame are constants. Mitsuba's projection ``texture`` is not supported (refused).
"""
import math

import numpy as np
import taichi as ti

from ..core.math import PI, coordinate_system, vec2, vec3
from ..errors import ConfigError
from ..schema import Key, Number, Texture, Transform
from .base import DeltaEmitter, slot
from .point import point_source

_INTENSITY = 0
# st.em_f[e, k]: constants of the falloff curve
_COS_CUTOFF, _COS_BEAM, _CUTOFF, _INV_TRANSITION = 0, 1, 2, 3


def falloff_np(cos_theta, cutoff_deg, beam_deg):
    """Mitsuba's falloff curve (numpy, float64) of cos θ for the given angles in degrees."""
    c = np.clip(np.asarray(cos_theta, np.float64), -1.0, 1.0)
    cut, beam = math.radians(cutoff_deg), math.radians(beam_deg)
    inv_tw = 1.0 / (cut - beam) if cut > beam else 0.0
    ramp = np.where(c >= math.cos(beam), 1.0, (cut - np.arccos(c)) * inv_tw)
    return np.where(c > math.cos(cut), ramp, 0.0)


class Spot(DeltaEmitter):
    NAME = "spot"
    KEYS = (Texture("intensity", 3, default=1.0, lo=0.0,
                    doc="radiant intensity I (W sr⁻¹) on the axis (a constant: RGB or a number)"),
            Number("cutoff_angle", default=20.0, lo=0.0, hi=180.0, strict_lo=True,
                   doc="angle (degrees) from the axis beyond which the light is black"),
            Number("beam_width", default=None, lo=0.0, hi=180.0,
                   doc="angle (degrees) of the full-intensity central beam (default cutoff_angle · 3/4)"),
            Transform("to_world", default=None,
                      doc="position (origin) and orientation (+z = the axis; e.g. look_at); "
                          "rotation, translation and uniform scale only"),
            Key("texture", default=None, doc="Mitsuba's projection texture: not supported (refused)"))

    @staticmethod
    def build(b, row, values, key):
        if values.get("texture") is not None:
            raise ConfigError("a spot light's projection texture is not supported (only a constant intensity)",
                              b.file, f"{key}.texture")
        if b.textures[row.tex[_INTENSITY]].data.shape[-3:-1] != (1, 1):
            raise ConfigError("must be a constant (RGB or a number), not a bitmap (as in Mitsuba)",
                              b.file, f"{key}.intensity")
        cutoff = float(values["cutoff_angle"])
        beam = float(values["beam_width"]) if values.get("beam_width") is not None else cutoff * 0.75
        if beam > cutoff:
            raise ConfigError(f"must be <= cutoff_angle ({cutoff:g}), got {beam:g}", b.file, f"{key}.beam_width")
        m = values.get("to_world")
        m = np.eye(4) if m is None else np.asarray(m, np.float64)
        lin = m[:3, :3]
        s2 = np.diag(lin.T @ lin)
        if np.abs(lin.T @ lin - np.eye(3) * s2.mean()).max() > 1e-5 * s2.mean():
            raise ConfigError("a spot light's to_world must be a rotation, translation and uniform scale "
                              "(no shear or non-uniform scale)", b.file, f"{key}.to_world")
        axis = lin @ np.array([0.0, 0.0, 1.0])
        row.position = tuple(float(x) for x in m[:3, 3])
        row.direction = tuple(axis / np.linalg.norm(axis))
        cut, bw = math.radians(cutoff), math.radians(beam)
        row.floats = [math.cos(cut), math.cos(bw), cut, 1.0 / (cut - bw) if cut > bw else 0.0]

    @staticmethod
    @ti.func
    def falloff(st: ti.template(), e, cos_theta):
        """Mitsuba's falloff curve at cos θ (θ: angle between the axis and the emitted direction)."""
        res = 0.0
        if cos_theta > st.em_f[e, _COS_CUTOFF]:
            res = 1.0
            if cos_theta < st.em_f[e, _COS_BEAM]:
                theta = ti.acos(ti.min(ti.max(cos_theta, -1.0), 1.0))
                res = ti.min(ti.max((st.em_f[e, _CUTOFF] - theta) * st.em_f[e, _INV_TRANSITION], 0.0), 1.0)
        return res

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds, dist2 = point_source(st, e, ref_p)
        if ds.dist > 0.0:
            ds.scale = Spot.falloff(st, e, -ds.d.dot(st.em_dir[e])) / dist2
            ds.le_rgb = slot(st, e, _INTENSITY, ds.uv) * ds.scale
            ds.weight_rgb = ds.le_rgb
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A direction uniform in the cone of the cutoff angle (pdf 1 / (2π (1 - cos cutoff))):
        weight I falloff / pdf."""
        cos_cut = st.em_f[e, _COS_CUTOFF]
        cos_t = 1.0 - u_dir[1] * (1.0 - cos_cut)
        sin_t = ti.sqrt(ti.max(1.0 - cos_t * cos_t, 0.0))
        phi = 2.0 * PI * u_dir[0]
        a = st.em_dir[e]
        s, t = coordinate_system(a)
        d = (s * ti.cos(phi) * sin_t + t * ti.sin(phi) * sin_t + a * cos_t).normalized()
        w = slot(st, e, _INTENSITY, vec2(0.5)) * (Spot.falloff(st, e, cos_t) * 2.0 * PI * (1.0 - cos_cut))
        return st.em_pos[e], d, vec3(0.0), vec2(0.5), w, 0.0
