"""Spot light (Mitsuba 3 ``spot``, src/emitters/spot.cpp): a point light at the origin of
``to_world`` shining along its +z axis, of radiant intensity I (W sr⁻¹) on the axis times Mitsuba's
falloff curve of the angle θ between the axis and the emitted direction (linear in θ between
beam_width and cutoff_angle).

    falloff(θ) = 1                                          θ <= beam_width
               = (cutoff - θ) / (cutoff - beam_width)       beam_width < θ < cutoff  (linear in θ)
               = 0                                          θ >= cutoff

(tested as Mitsuba does: cos θ >= cos beam_width -> 1, cos θ <= cos cutoff -> 0). Le/pdf =
I · falloff(θ) / dist² (the sample's ``scale``). Delta emitter (never hit).

An optional projection ``texture`` (a bitmap, as Mitsuba requires) multiplies the intensity: with
(x, y, z) the emitted direction in the light's frame (to_world's columns), it is looked up at

    u = 1/2 + x / (2 z tan(cutoff)),    v = 1/2 + y / (2 z tan(cutoff))

(Mitsuba's direction_to_uv: the cone's circle is inscribed in the unit square; u grows along local +x,
v along local +y). Differentiable: intensity (RGB, a constant) and the texture (RGB texels; adjoint
through the bilinear lookup). The angles and the frame are constants. Spectral variants: the product
I · texture is one emitter spectrum (Mitsuba multiplies the intensity's emitter spectrum by the
texture's reflectance-like one).
"""
import math

import numpy as np
import taichi as ti

from ..core.math import PI, vec2, vec3
from ..errors import ConfigError
from ..schema import Number, Texture, Transform
from ..textures import tex_grad_uv
from .base import DeltaEmitter, direction_grad, distance_grad, slot, slot_adjoint
from .point import lit, point_source

_INTENSITY, _TEXTURE = 0, 1
# st.em_f[e, k]: constants of the falloff curve, tan(cutoff) (the texture's uv scale)
_COS_CUTOFF, _COS_BEAM, _CUTOFF, _INV_TRANSITION, _TAN_CUTOFF = 0, 1, 2, 3, 4


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
            Texture("texture", 3, default=None, lo=0.0,
                    doc="projected texture (a bitmap) multiplying the intensity, uv over the cutoff cone"))

    @staticmethod
    def build(b, row, values, key):
        if values.get("texture") is not None and not isinstance(values["texture"], dict):
            raise ConfigError("a spot light's texture must be spatially varying (a bitmap), as in Mitsuba",
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
        row.to_world = m                  # the light's frame (st.em_rot): the texture's axes
        row.position = tuple(float(x) for x in m[:3, 3])
        row.direction = tuple(axis / np.linalg.norm(axis))
        cut, bw = math.radians(cutoff), math.radians(beam)
        row.floats = [math.cos(cut), math.cos(bw), cut, 1.0 / (cut - bw) if cut > bw else 0.0, math.tan(cut)]

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
    def falloff_slope(st: ti.template(), e, cos_theta):
        """d falloff / d cos θ: 1 / ((cutoff - beam_width) sin θ) on the ramp, else 0."""
        res = 0.0
        if cos_theta > st.em_f[e, _COS_CUTOFF] and cos_theta < st.em_f[e, _COS_BEAM]:
            res = st.em_f[e, _INV_TRANSITION] / ti.sqrt(ti.max(1.0 - cos_theta * cos_theta, 1e-20))
        return res

    @staticmethod
    @ti.func
    def ref_grad(st: ti.template(), e, q, w):
        """∂<w, Le>/∂ref_p of sample q, Le = I texture(uv(ℓ)) falloff(cos θ) / r² with ℓ = R (-d) the emitted
        direction in the light's frame, cos θ = ℓ_z: the 1/r² term and the direction's (falloff's slope, the
        texture's through uv_of)."""
        r2inv = 1.0 / ti.max(q.dist * q.dist, 1e-20)
        ia = slot(st, e, _INTENSITY, q.uv)
        cos_theta = -q.d.dot(st.em_dir[e])
        g_d = -st.em_dir[e] * (Spot.falloff_slope(st, e, cos_theta) * w.dot(ia * Spot.texture(st, e, q.uv)) * r2inv)
        tid = st.em_tex[e, _TEXTURE]
        fall = Spot.falloff(st, e, cos_theta)
        if tid >= 0 and fall > 0.0:
            R = st.em_rot[e]
            loc = R @ -q.d
            z = ti.max(loc[2], 1e-20)
            k = 0.5 / (z * st.em_f[e, _TAN_CUTOFF])
            du, dv = tex_grad_uv(st, tid, q.uv)
            gu = w.dot(ia * du) * fall * r2inv
            gv = w.dot(ia * dv) * fall * r2inv
            g_loc = vec3(gu * k, gv * k, -(gu * loc[0] + gv * loc[1]) * k / z)
            g_d -= R.transpose() @ g_loc
        return distance_grad(Spot.eval(st, e, q), w, q) + direction_grad(g_d, q)

    @staticmethod
    @ti.func
    def texture(st: ti.template(), e, uv):
        """The projection texture at uv (1 without one)."""
        res = vec3(1.0)
        if st.em_tex[e, _TEXTURE] >= 0:
            res = slot(st, e, _TEXTURE, uv)
        return res

    @staticmethod
    @ti.func
    def uv_of(st: ti.template(), e, loc):
        """Mitsuba's direction_to_uv of the emitted direction loc in the light's frame (loc.z > 0)."""
        k = 0.5 / (ti.max(loc[2], 1e-20) * st.em_f[e, _TAN_CUTOFF])
        return vec2(0.5 + loc[0] * k, 0.5 + loc[1] * k)

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds, dist2 = point_source(st, e, ref_p)
        if ds.dist > 0.0:
            ds.scale = Spot.falloff(st, e, -ds.d.dot(st.em_dir[e])) / dist2
            if ds.scale > 0.0 and st.em_tex[e, _TEXTURE] >= 0:
                ds.uv = Spot.uv_of(st, e, st.em_rot[e] @ -ds.d)
            ds = lit(ds, Spot.eval(st, e, ds))
        return ds

    @staticmethod
    @ti.func
    def eval(st: ti.template(), e, q):
        """I · texture(q.uv) · q.scale (q.scale: falloff / dist² of a sample, 1 for a light-tracing ray)."""
        return slot(st, e, _INTENSITY, q.uv) * Spot.texture(st, e, q.uv) * q.scale

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        slot_adjoint(st, e, _INTENSITY, q.uv, d_le * Spot.texture(st, e, q.uv) * q.scale)
        if st.em_tex[e, _TEXTURE] >= 0:
            slot_adjoint(st, e, _TEXTURE, q.uv, d_le * slot(st, e, _INTENSITY, q.uv) * q.scale)

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A direction uniform in the cone of the cutoff angle (pdf 1 / (2π (1 - cos cutoff))):
        weight I texture(uv) falloff / pdf."""
        cos_cut = st.em_f[e, _COS_CUTOFF]
        cos_t = 1.0 - u_dir[1] * (1.0 - cos_cut)
        sin_t = ti.sqrt(ti.max(1.0 - cos_t * cos_t, 0.0))
        phi = 2.0 * PI * u_dir[0]
        loc = vec3(ti.cos(phi) * sin_t, ti.sin(phi) * sin_t, cos_t)
        d = (st.em_rot[e].transpose() @ loc).normalized()
        uv = vec2(0.5)
        if st.em_tex[e, _TEXTURE] >= 0:
            uv = Spot.uv_of(st, e, loc)
        w = slot(st, e, _INTENSITY, uv) * Spot.texture(st, e, uv) * \
            (Spot.falloff(st, e, cos_t) * 2.0 * PI * (1.0 - cos_cut))
        return st.em_pos[e], d, vec3(0.0), uv, w, 0.0
