"""Diffuse area emitter (Mitsuba 3 ``area``), one-sided: emits into the hemisphere of the shading
normal, Le(x, ω) = radiance(uv) if ω·n > 0. Attached to a shape (``shapes[i].emitter``).

Sampling: a triangle of the shape by area (CDF), a uniform point on it (an analytic quadric: uniform on its
surface; a sphere seen from outside: uniform over its visible cap's solid angle, as Mitsuba); pdf converted to solid
angle. Light tracing: that point, and a cosine-weighted direction about its normal. Differentiable:
radiance (RGB texture), and the radiance seen at a moving point (``eval_grad``: attached PRB).
"""
import taichi as ti

from ..core import quadrics
from ..core.math import BIG, PI, coordinate_system, to_world, vec2, vec3
from ..core.warp import square_to_cosine_hemisphere, square_to_uniform_triangle
from ..schema import Texture
from ..textures import tex_grad_uv
from .base import SURFACE, DirectionSample, slot, slot_adjoint

_RADIANCE = 0


@ti.func
def _find_tri(st: ti.template(), start, count, u):
    """Index j in [start, start + count) with cdf[j-1] <= u < cdf[j] (cdf ends at 1)."""
    lo = start
    hi = start + count - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if st.emtri_cdf[mid] <= u:
            lo = mid + 1
        else:
            hi = mid
    return lo


@ti.func
def _triangle_position(st: ti.template(), tri, u):
    """(p, n, uv): the point of triangle tri at uniform-area sample u, its (shading) normal and uv."""
    b = square_to_uniform_triangle(u)
    e1 = st.tri_e1[tri]
    e2 = st.tri_e2[tri]
    p = st.tri_p0[tri] + b[0] * e1 + b[1] * e2
    n = e1.cross(e2).normalized()
    shape = st.tri_shape[tri]
    if st.shape_smooth[shape] != 0:          # core.interaction.FLAT
        nn = (1.0 - b[0] - b[1]) * st.tri_n0[tri] + b[0] * st.tri_n1[tri] + b[1] * st.tri_n2[tri]
        if nn.norm() > 1e-12:
            n = nn.normalized()
    uv0 = st.tri_uv0[tri]
    uv = uv0 + b[0] * (st.tri_uv1[tri] - uv0) + b[1] * (st.tri_uv2[tri] - uv0)
    return p, n, uv


class Area:
    NAME = "area"
    KEYS = (Texture("radiance", 3, default=1.0, lo=0.0, doc="emitted radiance Le (W m⁻² sr⁻¹)"),)
    FLAGS = SURFACE

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        """A point on emitter e seen from ref_p: uniform by area (an analytic sphere seen from outside: uniform over
        its visible cap's solid angle, as Mitsuba), its direction, distance, Le and pdf (per steradian)."""
        p, n, uv, cone_pdf = Area.sample(st, e, ref_p, u, True)
        ds = DirectionSample(delta=0, emitter=e, dist=BIG, scale=1.0)
        dv = p - ref_p
        dist2 = dv.dot(dv)
        dist = ti.sqrt(dist2)
        d = dv / ti.max(dist, 1e-20)
        cos_e = -d.dot(n)
        ds.p = p
        ds.n = n
        ds.d = d
        ds.dist = dist
        ds.uv = uv
        if cos_e > 0.0 and dist > 0.0:
            ds.pdf = cone_pdf if cone_pdf > 0.0 else dist2 / (cos_e * st.em_area[e])
            ds.le_rgb = slot(st, e, _RADIANCE, uv)
            ds.weight_rgb = ds.le_rgb / ds.pdf
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A point uniform by area (pdf 1/A) and a cosine-weighted direction about its normal
        (pdf cos/π): weight Le A π."""
        p, n, uv = Area.position(st, e, u_pos)
        s, t = coordinate_system(n)
        d = to_world(s, t, n, square_to_cosine_hemisphere(u_dir))
        area = st.em_area[e]
        return p, d, n, uv, slot(st, e, _RADIANCE, uv) * (area * PI), area

    @staticmethod
    @ti.func
    def position(st: ti.template(), e, u):
        """(p, n, uv): a point uniform by area on emitter e, its (shading) normal and uv."""
        p, n, uv, pdf = Area.sample(st, e, vec3(0.0), u, False)
        return p, n, uv

    @staticmethod
    @ti.func
    def sample(st: ti.template(), e, ref_p, u, cone: ti.template()):
        """(p, n, uv, pdf) of a point on emitter e: a triangle by area (CDF), a uniform point on it; a quadric's
        (core/quadrics.sample_point: with `cone`, a sphere's visible cap from ref_p, pdf per steradian; else 0)."""
        start = st.em_tri_start[e]
        j = _find_tri(st, start, st.em_tri_count[e], u[0])
        c0 = st.emtri_cdf[j - 1] if j > start else 0.0
        c1 = st.emtri_cdf[j]
        ur = ti.min((u[0] - c0) / ti.max(c1 - c0, 1e-20), 0.99999994)
        p, n, uv = _triangle_position(st, st.emtri_idx[j], vec2(ur, u[1]))
        pdf = 0.0
        if ti.static(st.quadrics):
            r = quadrics.of_emitter(st, e)
            if r >= 0:
                q, pdf = quadrics.sample_point(st, r, ref_p, u, cone)
                p, n, uv, dpdu, dpdv = quadrics.surface(st, r, q)
        return p, n, uv, pdf

    @staticmethod
    @ti.func
    def pdf_direction(st: ti.template(), e, ref_p, q):
        """Solid-angle density of sampling the point q.p (normal q.n) from ref_p."""
        dv = q.p - ref_p
        dist2 = dv.dot(dv)
        cos_e = -dv.dot(q.n) / ti.max(ti.sqrt(dist2), 1e-20)
        res = 0.0
        if cos_e > 0.0:
            res = dist2 / (cos_e * st.em_area[e])
            if ti.static(st.quadrics):
                r = quadrics.of_emitter(st, e)
                if r >= 0:
                    if st.geo_kind[r] == quadrics.SPHERE and (st.geo_flags[r] & quadrics.FLIP) == 0:
                        cos_max = quadrics.cone_cos(st, r, ref_p)
                        if cos_max < 1.0:
                            res = 1.0 / (2.0 * PI * (1.0 - cos_max))
        return res

    @staticmethod
    @ti.func
    def eval(st: ti.template(), e, q):
        """Radiance leaving q.p towards -q.d (0 from the back side)."""
        res = vec3(0.0)
        if q.d.dot(q.n) < 0.0:
            res = slot(st, e, _RADIANCE, q.uv)
        return res

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        if q.d.dot(q.n) < 0.0:
            slot_adjoint(st, e, _RADIANCE, q.uv, d_le)

    @staticmethod
    @ti.func
    def eval_grad(st: ti.template(), e, q, w):
        """(∂/∂uv, ∂/∂d) of <w, Le>: the radiance texture's slope at q.uv (Lambertian: no direction
        dependence on the front side)."""
        g_uv = vec2(0.0)
        if q.d.dot(q.n) < 0.0:
            du, dv = tex_grad_uv(st, st.em_tex[e, _RADIANCE], q.uv)
            g_uv = vec2(w.dot(du), w.dot(dv))
        return g_uv, vec3(0.0)
