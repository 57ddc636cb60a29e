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


class Perspective(base.ProjectiveCamera):
    NAME = "perspective"
    KEYS = base.FOV_KEYS + (
        Number("principal_point_offset_x", default=0.0, doc="principal point offset along x (film widths)"),
        Number("principal_point_offset_y", default=0.0, doc="principal point offset along y (film heights)"),
    ) + base.CLIP_KEYS + base.COMMON_KEYS + (base.TO_WORLD,)
    PARAMS = ("x_fov", "principal_point_offset_x", "principal_point_offset_y", "to_world", "near_clip", "far_clip")
    APERTURE = False

    @staticmethod
    def lens_fields(values, file, key):
        return dict(principal_point=(values["principal_point_offset_x"], values["principal_point_offset_y"]))

    @staticmethod
    def set_lens(s, name, value, key):
        if name in ("principal_point_offset_x", "principal_point_offset_y"):
            pp = list(s.principal_point)
            pp[name[-1] == "y"] = base.number(value, None, key)
            s.principal_point = tuple(pp)
            return True
        return False

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
