"""Thin lens camera (Mitsuba 3 ``thinlens``, src/sensors/thinlens.cpp): depth of field.

A camera ray starts at a point a of the lens disk of radius ``aperture_radius`` (Mitsuba's concentric map of
the sample's own 2D aperture sample, drawn after the film position: the PRB replay re-draws the same numbers)
and passes through the point the film position maps to on the focal plane at ``focus_distance`` (default:
far_clip, as Mitsuba's ProjectiveCamera); it starts on the near plane and ends at the far plane. The field of
view follows Mitsuba's parse_fov; a to_world with scale is refused; ``aperture_radius`` is required and 0
becomes dr::Epsilon<float> with one warning (as Mitsuba). Light tracing connects as Mitsuba's
sample_direction: a lens point sampled with the connection's own 2D sample, the point projected through it
onto the focal plane, weight 1 / (A cos³θ dist²) (the importance over the lens pdf 1/(π r²)). Parameters
(Mitsuba's traverse, NonDifferentiable there and here: no gradients): aperture_radius, focus_distance, x_fov,
to_world, near_clip, far_clip.
"""
import taichi as ti

from ..core.warp import square_to_uniform_disk_concentric
from ..schema import Number
from . import base


class ThinLens(base.ProjectiveCamera):
    NAME = "thinlens"
    KEYS = base.FOV_KEYS + (
        Number("aperture_radius", lo=0.0, doc="radius of the lens (world units; required, as in Mitsuba; 0 becomes "
                                               "2^-24 with a warning)"),
    ) + base.CLIP_KEYS + base.COMMON_KEYS + (base.TO_WORLD,)
    PARAMS = ("aperture_radius", "focus_distance", "x_fov", "to_world", "near_clip", "far_clip")
    APERTURE = True

    @staticmethod
    def lens_fields(values, file, key):
        return dict(aperture_radius=base.warn_aperture(values["aperture_radius"], f"{file or '<dict>'}: {key}"))

    @staticmethod
    def set_lens(s, name, value, key):
        if name == "aperture_radius":
            s.aperture_radius = base.warn_aperture(base.number(value, None, key, 0.0), key)
        elif name == "focus_distance":
            s.focus_distance = base.number(value, None, key, 0.0, strict_lo=True)
        else:
            return False
        return True

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), cam, pos, ap):
        """(o, d, maxt): from the lens point r · concentric(ap) through the focal-plane point of film
        position pos (pixels)."""
        x, y = base.image_plane(st, cam, pos)
        a = st.cam_aperture[cam] * square_to_uniform_disk_concentric(ap)
        f = st.cam_focus[cam]
        dl = ti.Vector([x * f - a[0], y * f - a[1], f], float).normalized()
        o = st.cam_o[cam] + st.cam_left[cam] * a[0] + st.cam_up[cam] * a[1]
        return base.clipped_ray(st, cam, o, dl)

    @staticmethod
    @ti.func
    def connect(st: ti.template(), cam, p, u):
        """World point p seen through the lens point r · concentric(u): base.Connection."""
        return base.projective_connect(st, cam, p, st.cam_aperture[cam] * square_to_uniform_disk_concentric(u))

