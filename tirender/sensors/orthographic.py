"""Orthographic camera (Mitsuba 3 ``orthographic``, src/sensors/orthographic.cpp).

A planar sensor measuring radiance along its normal: camera space [-1, 1] x [-1/aspect, 1/aspect] (aspect =
width / height) on the near plane, mapped by to_world, whose scale sets the visible extent (Mitsuba's example:
``<scale x="10" y="10"/>`` for 20 x 20 world units). A ray starts at to_world · (x, y, near_clip) and travels
along to_world's normalised z axis for far_clip - near_clip (Mitsuba's sample_ray). Mitsuba's orthographic
camera has no sample_direction: the light tracer refuses it (one line). Parameters (Mitsuba's traverse,
NonDifferentiable there and here: no gradients): to_world, near_clip, far_clip.
"""
import numpy as np
import taichi as ti

from ..errors import ConfigError
from . import base


class Orthographic:
    NAME = "orthographic"
    KEYS = base.CLIP_KEYS + base.COMMON_KEYS + (base.TO_WORLD,)
    PARAMS = ("to_world", "near_clip", "far_clip")
    APERTURE = False
    CONNECT = False
    rows = staticmethod(base.device_row)     # the frame, the clip planes, the half extents (1, 1/aspect)

    @staticmethod
    def build(values, width, height, file, key):
        m = np.asarray(values["to_world"], np.float64)
        if abs(np.linalg.det(m[:3, :3])) < 1e-30:
            raise ConfigError("to_world is singular", file, f"{key}.to_world")
        out = dict(tan_x=1.0, tan_y=height / width, to_world=m)
        out.update(base.clip_fields(values, file, key))
        return out

    @staticmethod
    def set_param(s, name, value, key):
        if name == "to_world":
            s.to_world = base.matrix(value, key)
        else:
            base.set_common(s, name, value, key)

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), cam, pos, ap):
        """(o, d, maxt): from to_world · (x, y, near) along to_world's z axis; ap unused."""
        x, y = base.image_plane(st, cam, pos)
        m = st.cam_lin[cam]
        o = st.cam_o[cam] + m @ ti.Vector([x, y, st.cam_near[cam]], float)
        d = ti.Vector([m[0, 2], m[1, 2], m[2, 2]], float).normalized()
        return o, d, st.cam_far[cam] - st.cam_near[cam]
