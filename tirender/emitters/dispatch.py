"""Emitter dispatch, specialised at compile time to the emitter types present.

``em_mask`` is a Python int bitmask (bit i = type tag i used), passed as ``ti.template()`` so
only the models a scene uses are compiled. Emitters are chosen uniformly (probability 1/N), as
Mitsuba does; pdfs and weights returned here include that selection probability.
"""
import taichi as ti

from ..core.math import vec3
from . import AREA, CONSTANT, DIRECTIONAL, ENVMAP, POINT
from . import area, constant, directional, envmap, point
from .common import DirectionSample


@ti.func
def sample_emitter_direction(st: ti.template(), em_mask: ti.template(), ref_p, u):
    """Pick an emitter uniformly with u[0], then sample a direction towards it."""
    n = st.info_i[0]
    ds = DirectionSample(emitter=-1)
    if n > 0:
        x = u[0] * n
        e = ti.min(ti.cast(x, ti.i32), n - 1)
        ur = ti.Vector([ti.min(x - e, 0.99999994), u[1]], dt=float)
        t = st.em_type[e]
        if ti.static(em_mask & (1 << AREA)):
            if t == AREA:
                ds = area.sample_direction(st, e, ref_p, ur)
        if ti.static(em_mask & (1 << POINT)):
            if t == POINT:
                ds = point.sample_direction(st, e, ref_p, ur)
        if ti.static(em_mask & (1 << DIRECTIONAL)):
            if t == DIRECTIONAL:
                ds = directional.sample_direction(st, e, ref_p, ur)
        if ti.static(em_mask & (1 << CONSTANT)):
            if t == CONSTANT:
                ds = constant.sample_direction(st, e, ref_p, ur)
        if ti.static(em_mask & (1 << ENVMAP)):
            if t == ENVMAP:
                ds = envmap.sample_direction(st, e, ref_p, ur)
        ds.pdf = ds.pdf / n
        ds.weight = ds.weight * n
    return ds


@ti.func
def sample_le_adjoint(st: ti.template(), em_mask: ti.template(), ds, d_le):
    """Adjoint of the emitted radiance ds.le of a direction sample (scatter into its texture)."""
    e = ds.emitter
    if e >= 0:
        t = st.em_type[e]
        if ti.static(em_mask & (1 << AREA)):
            if t == AREA:
                area.tex_eval_adjoint(st, st.em_tex[e], ds.uv, d_le)
        if ti.static(em_mask & (1 << POINT)):
            if t == POINT:
                point.eval_adjoint_sample(st, e, ds, d_le)
        if ti.static(em_mask & (1 << DIRECTIONAL)):
            if t == DIRECTIONAL:
                directional.eval_adjoint_sample(st, e, ds, d_le)
        if ti.static(em_mask & ((1 << CONSTANT) | (1 << ENVMAP))):
            if t == CONSTANT or t == ENVMAP:
                area.tex_eval_adjoint(st, st.em_tex[e], ds.uv, d_le)


@ti.func
def pdf_area_hit(st: ti.template(), e, ref_p, p, n):
    """Density (solid angle, incl. selection) that emitter sampling from ref_p picks the hit point p."""
    res = 0.0
    if ti.static(True):
        res = area.pdf_direction(st, e, ref_p, p, n) / st.info_i[0]
    return res


@ti.func
def env_eval(st: ti.template(), em_mask: ti.template(), d):
    """Radiance of the environment emitter (if any) arriving from direction d; (Le, emitter index)."""
    e = st.info_i[1]
    le = vec3(0.0)
    if e >= 0:
        if ti.static(em_mask & (1 << CONSTANT)):
            if st.em_type[e] == CONSTANT:
                le = constant.eval(st, e, d)
        if ti.static(em_mask & (1 << ENVMAP)):
            if st.em_type[e] == ENVMAP:
                le = envmap.eval(st, e, d)
    return le


@ti.func
def env_eval_adjoint(st: ti.template(), em_mask: ti.template(), d, d_le):
    e = st.info_i[1]
    if e >= 0:
        if ti.static(em_mask & (1 << CONSTANT)):
            if st.em_type[e] == CONSTANT:
                constant.eval_adjoint(st, e, d, d_le)
        if ti.static(em_mask & (1 << ENVMAP)):
            if st.em_type[e] == ENVMAP:
                envmap.eval_adjoint(st, e, d, d_le)


@ti.func
def env_pdf(st: ti.template(), em_mask: ti.template(), d):
    e = st.info_i[1]
    res = 0.0
    if e >= 0:
        if ti.static(em_mask & (1 << CONSTANT)):
            if st.em_type[e] == CONSTANT:
                res = constant.pdf_direction(st, e, d)
        if ti.static(em_mask & (1 << ENVMAP)):
            if st.em_type[e] == ENVMAP:
                res = envmap.pdf_direction(st, e, d)
        res = res / st.info_i[0]
    return res
