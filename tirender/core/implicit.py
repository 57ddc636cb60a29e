"""Primitives that are not triangles (host side: scene/implicit.py): the dispatch from a BVH primitive to the
quadrics (core/quadrics.py) and SDF grids (core/sdf.py).

Such a primitive is a triangle row k whose edge e2 is zero (a real triangle never is one: degenerate triangles are
dropped at load); p0 and p0 + e1 are the corners of its world box, and ``shape_geo[tri_shape[k]]`` names its record r
(-1: a mesh after all, e.g. a height field's or a deforming mesh's collapsed triangle, which then stays a miss)::

    geo_kind (R,) i32        scene/implicit.py KINDS: 1 sdfgrid, 2 sphere, 3 disk, 4 cylinder, 5 instance
    geo_flags (R,) i32       1: flip_normals, 2: smooth normals (sdfgrid)
    geo_slot (R,) i32        a differentiable sphere's derived slot (pool offset of ∂/∂(c, R), scene/sphere_body.py),
                             a differentiable SDF grid's values (pool offset, scene/sdf_body.py); -1: static
    geo_to_obj, geo_to_world (R,) 3x4   world <-> object
    geo_nm (R,) 3x3          object -> world normal matrix (inverse transpose of to_world's linear part)
    geo_c (R,) vec3, geo_r (R,)         a sphere's centre and radius (world)
    geo_ray (R,) 3x4         world -> a quadric's canonical space for the ray (the unit sphere; object space)
    geo_off (R,) i32, geo_res (R,) ivec3   an SDF grid's values in sdf_val, its nodes per axis (W, H, D);
                                           an instance's group tree (its root wide node)

An instance (Mitsuba's ``instance`` of a ``shapegroup``) is a box primitive of the top-level tree whose record maps
world <-> the group's space; the group's triangles and primitives are stored once, in group space, under their own
tree (core/intersect.traverse enters it); make_interaction maps the hit back to world space.

A storage without quadrics, SDF grids or instances (capacities ``quads`` / ``sdfv`` / ``insts`` 0: no scene of the
process had one) compiles none of their code (``st.quadrics``, ``st.sdf_grids``, ``st.instances``).
"""
import taichi as ti

from . import pool, quadrics, sdf
from .math import BIG, coordinate_system, vec2, vec3

SDF, SPHERE, CYLINDER, INSTANCE = 1, 2, 4, 5   # geo_kind (scene/implicit.py KINDS)


@ti.func
def geo_of(st: ti.template(), k):
    """The record of primitive row k, -1 for a triangle."""
    r = -1
    if st.tri_e2[k].norm_sqr() == 0.0:
        r = st.shape_geo[st.tri_shape[k]]
    return r


@ti.func
def moves(st: ti.template(), k):
    """Whether primitive row k is a differentiable analytic sphere's or SDF grid's (its record has a pool slot)."""
    res = False
    if ti.static(st.quadrics or st.sdf_grids):
        r = geo_of(st, k)
        if r >= 0:
            res = st.geo_slot[r] >= 0
    return res


@ti.func
def ray_prim(st: ti.template(), k, r, o, d):
    """t of the ray o + t d against primitive k of record r (BIG: a miss)."""
    t = BIG
    if ti.static(st.sdf_grids):
        if st.geo_kind[r] == SDF:
            t = sdf.ray_voxel(st, k, r, o, d)
    if ti.static(st.quadrics):
        if st.geo_kind[r] >= SPHERE and st.geo_kind[r] <= CYLINDER:
            t = quadrics.ray(st, r, o, d)
    return t


@ti.func
def interaction(st: ti.template(), r, p):
    """(p, ng, n, s, t, uv, dp/du, dp/dv) at the world hit point p on record r (p re-projected on quadrics; an SDF
    grid has no uv and no dp/du: coordinate_system(ng), as a mesh without uv)."""
    q = p
    ng = vec3(0.0, 0.0, 1.0)
    n = ng
    s = vec3(1.0, 0.0, 0.0)
    ts = vec3(0.0, 1.0, 0.0)
    uv = vec2(0.0)
    dpdu = s
    dpdv = ts
    if ti.static(st.sdf_grids):
        if st.geo_kind[r] == SDF:
            ng, n, s, ts = sdf.interaction(st, r, p)
            dpdu, dpdv = coordinate_system(ng)
    if ti.static(st.quadrics):
        if st.geo_kind[r] >= SPHERE and st.geo_kind[r] <= CYLINDER:
            q, ng, n, s, ts, uv, dpdu, dpdv = quadrics.interaction(st, r, p)
    return q, ng, n, s, ts, uv, dpdu, dpdv


@ti.func
def hit_adjoint(st: ti.template(), r, t, o, d, g_p, g_n, g_uv):
    """(∂/∂o, ∂/∂d) of <g_p, p> + <g_n, n> + <g_uv, uv> for interaction(st, r, o + t d) at the hit t of the ray
    (o, d) on record r (its t moves with the ray: the hit stays on the surface; core/quadrics.hit_adjoint). A
    differentiable sphere's (geo_slot >= 0: scene/sphere_body.py) ∂/∂(c, R) go into its derived slot, a
    differentiable SDF grid's ∂/∂(values) into its parameter (core/sdf.hit_adjoint)."""
    g_o = vec3(0.0)
    g_d = vec3(0.0)
    if ti.static(st.quadrics):
        if st.geo_kind[r] >= SPHERE and st.geo_kind[r] <= CYLINDER:
            g_o, g_d, g_c, g_rad = quadrics.hit_adjoint(st, r, t, o, d, g_p, g_n, g_uv)
            slot = st.geo_slot[r]
            if slot >= 0:
                pool.add_gradient(st, slot, 3, g_c)
                pool.add_gradient(st, slot + 3, 1, vec3(g_rad, 0.0, 0.0))
    if ti.static(st.sdf_grids):
        if st.geo_kind[r] == SDF:
            g_o, g_d = sdf.hit_adjoint(st, r, t, o, d, g_p, g_n)
    return g_o, g_d
