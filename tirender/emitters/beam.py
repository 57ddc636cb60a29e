"""Collimated beam (``beam``): irradiance E travelling along ``direction`` through an aperture
centred at ``origin`` (perpendicular to the direction): a disk of ``radius`` r, or (``aperture:
square``) the square [-r, r]² in the frame (s, t) = coordinate_system(direction) (Duff et al.: for
direction ∓z the world x and ∓y axes) — a directional light that only exists downstream of the
aperture and within its cylinder (prism): a laser-like or sun-through-a-window source, and the light
of caustic design. Delta emitter (never hit): Le/pdf = E at points whose projection onto the aperture
plane lies within it, 0 elsewhere; the shadow ray ends at the aperture. Light tracing: an origin
uniform on the aperture, weight E · area (π r² or 4 r²). Differentiable: irradiance (RGB).
"""
import taichi as ti

from ..core.math import PI, coordinate_system, vec2, vec3
from ..core.warp import square_to_uniform_disk_concentric
from ..schema import Choice, Number, Texture, Vec3
from .base import DeltaEmitter, slot
from .directional import Directional

_IRRADIANCE = 0
_RADIUS, _SQUARE = 0, 1     # st.em_f[e, 0], st.em_f[e, 1] (1: square aperture)


class Beam(DeltaEmitter):
    NAME = "beam"
    KEYS = (Texture("irradiance", 3, default=1.0, lo=0.0,
                    doc="irradiance E (W m⁻²) on a surface facing the beam, inside it"),
            Vec3("direction", default=(0.0, 0.0, -1.0), doc="direction of propagation"),
            Vec3("origin", default=(0.0, 0.0, 0.0), doc="centre of the aperture disk (the beam starts there)"),
            Number("radius", default=1.0, lo=0.0, strict_lo=True,
                   doc="radius of the aperture disk (square: half its side)"),
            Choice("aperture", ("disk", "square"), default="disk", doc="shape of the aperture"))

    @staticmethod
    def build(b, row, values, key):
        Directional.build(b, row, values, key)     # the direction, checked and normalised
        row.position = tuple(float(x) for x in values["origin"])
        row.floats = [float(values["radius"]), float(values["aperture"] == "square")]

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        """Directional's sample, ending at the aperture, and 0 outside the beam's cylinder."""
        ds = Directional.sample_direction(st, e, ref_p, u)
        a = st.em_dir[e]
        q = ref_p - st.em_pos[e]
        t = q.dot(a)                      # distance downstream of the aperture plane
        lateral = q - t * a
        ds.dist = ti.max(t, 0.0)
        ds.p = ref_p - a * ds.dist        # on the aperture
        r = st.em_f[e, _RADIUS]
        inside = lateral.dot(lateral) <= r * r
        if st.em_f[e, _SQUARE] > 0.0:
            s, tt = coordinate_system(a)
            inside = ti.abs(lateral.dot(s)) <= r and ti.abs(lateral.dot(tt)) <= r
        if not (t > 0.0 and inside):
            ds.le_rgb = vec3(0.0)
            ds.weight_rgb = vec3(0.0)
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """Along the direction from a point uniform on the aperture (pdf 1 / area): weight E · area."""
        a = st.em_dir[e]
        r = st.em_f[e, _RADIUS]
        s, t = coordinate_system(a)
        q = square_to_uniform_disk_concentric(u_pos) * r
        area = PI * r * r
        if st.em_f[e, _SQUARE] > 0.0:
            q = (2.0 * u_pos - 1.0) * r
            area = 4.0 * r * r
        o = st.em_pos[e] + s * q[0] + t * q[1]
        return o, a, vec3(0.0), vec2(0.5), slot(st, e, _IRRADIANCE, vec2(0.5)) * area, 0.0
