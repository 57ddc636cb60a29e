"""Perspective pinhole camera (Mitsuba 3 ``perspective``, src/sensors/perspective.cpp).

Rays leave the pinhole (to_world's translation) through the film position on the image plane, start on
the near plane and end at the far plane (Mitsuba's sample_ray: o += d near/d_z, maxt = (far - near)/d_z);
``principal_point_offset_x/y`` shift the image (film units). The field of view follows Mitsuba's parse_fov
(fov + fov_axis, or focal_length); a to_world with scale is refused. Light tracing connects through
Mitsuba's sample_direction (the point between the clip planes, importance 1 / (A cos³θ dist²)). One
deliberate difference: with a principal point offset, Mitsuba's importance() still tests the unshifted image
rectangle (its light tracer then loses the part of the shifted image outside it); tirender tests the shifted
one, so that its light tracer and path tracer agree. Parameters (Mitsuba's traverse, NonDifferentiable there
and here: no gradients): x_fov, principal_point_offset_x, principal_point_offset_y, to_world, near_clip,
far_clip.
"""
import taichi as ti

from ..core.math import vec2
from ..schema import Number
from . import base


class Perspective:
    NAME = "perspective"
    KEYS = base.FOV_KEYS + (
        Number("principal_point_offset_x", default=0.0, doc="principal point offset along x (film widths)"),
        Number("principal_point_offset_y", default=0.0, doc="principal point offset along y (film heights)"),
    ) + base.CLIP_KEYS + base.COMMON_KEYS + (base.TO_WORLD,)
    PARAMS = ("x_fov", "principal_point_offset_x", "principal_point_offset_y", "to_world", "near_clip", "far_clip")
    APERTURE = False
    CONNECT = True
    MITSUBA_DEFAULTS = staticmethod(base.mitsuba_defaults)
    rows = staticmethod(base.device_row)

    @staticmethod
    def build(values, width, height, file, key):
        """Validated values -> description.Sensor fields."""
        x_fov = base.parse_fov(values, width / height, file, key)
        tx, ty = base.tan_half(x_fov, width / height)
        out = dict(tan_x=tx, tan_y=ty, principal_point=(values["principal_point_offset_x"],
                                                        values["principal_point_offset_y"]))
        out.update(base.clip_fields(values, file, key))
        out["to_world"] = base.check_rigid(values["to_world"], file, f"{key}.to_world")
        return out

    @staticmethod
    def set_param(s, name, value, key):
        """Set parameter `name` of description.Sensor s (checked as at load time)."""
        if name == "x_fov":
            s.tan_x, s.tan_y = base.tan_half(base.check_x_fov(base.number(value, None, key), None, key),
                                             s.width / s.height)
        elif name in ("principal_point_offset_x", "principal_point_offset_y"):
            pp = list(s.principal_point)
            pp[name[-1] == "y"] = base.number(value, None, key)
            s.principal_point = tuple(pp)
        elif name == "to_world":
            s.to_world = base.check_rigid(base.matrix(value, key), None, key)
        else:
            base.set_common(s, name, value, key)

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), cam, pos, ap):
        """(o, d, maxt) through film position pos (pixels); ap unused (a pinhole)."""
        x, y = base.image_plane(st, cam, pos)
        dl = ti.Vector([x, y, 1.0], float).normalized()
        return base.clipped_ray(st, cam, st.cam_o[cam], dl)

    @staticmethod
    @ti.func
    def connect(st: ti.template(), cam, p, u):
        """The pinhole seen from world point p (u unused): base.Connection."""
        return base.projective_connect(st, cam, p, vec2(0.0))
