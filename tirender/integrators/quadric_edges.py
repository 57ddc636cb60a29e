"""The discontinuity curves of Mitsuba's analytic shapes for the secondary boundary term (integrators/edges.py),
made exactly instead of from a tessellation: a sphere's silhouette circle seen from the path vertex, a disk's rim, a
cylinder's two rims and its two silhouette lines seen from the vertex (the tangent lines of its circle in object
space: an affine to_world keeps tangency).

Each curve is one SecondaryTable row with ``quadric`` its record (core/implicit.py) and a part in ``flags`` (RIM0,
RIM1, SIDE; a sphere's row: none); x0 a point of the shape and |x1 - x0| the row's weight in the table's CDFs (a
sphere's largest silhouette 2πR, a rim's length, the side lines' 2 × height). A sample τ ∈ [0, 1) is the curve's
point x(τ) with e = dx/dτ; the tangent curves (silhouettes) are made from the rays' origin, the vertex moved off its
surface by spawn: from the vertex itself, that offset tilts the tangent ray into the shape on part of the curve (a
hit before x, and the sample lost). A differentiable sphere's row has its derived slot (scene/sphere_body.py): a
point of its surface moves as δX = δc + n δR.

A shape of a group stored once (an instance's) has one row per instance, made in the group's space from the vertex
mapped there (``inst``: the instance's record).

A tessellation's chords lie inside the curved surface (up to 1.2e-3 R for 64 segments), where both sides' rays,
1e-4 rad apart, hit it: the term was lost (a floor moving under a sphere's shadow: 118 ± 1.5 against central
differences 162.4 ± 0.7, tests/test_quadric_gradients.py).
"""
import numpy as np
import taichi as ti

from ..core import pool
from ..core.math import PI, affine_point, affine_vector, coordinate_system, vec3
from ..scene.implicit import CYLINDER, DISK, SPHERE

RIM0, RIM1, SIDE = 4, 8, 16          # SecondaryTable.flags: which curve of a disk or cylinder (edges.BOUNDARY: 1)
RING = 256                           # points measuring an ellipse's length (a rim's weight)


# ------------------------------------------------------------------------------ host: table rows
def _row(point, weight, flags, slot, record, inst):
    return dict(x0=np.asarray(point, np.float64)[None], x1=(np.asarray(point, np.float64) + [weight, 0.0, 0.0])[None],
                n1=np.zeros((1, 3)), n2=np.zeros((1, 3)), flags=np.full(1, flags), slot0=np.full(1, slot),
                slot1=np.full(1, slot), quadric=np.full(1, record), inst=np.full(1, inst))


def _rim_length(m, z):
    """Length of the ellipse to_world·(cos φ, sin φ, z), m 4x4."""
    phi = 2.0 * np.pi * np.arange(RING + 1) / RING
    p = np.stack([np.cos(phi), np.sin(phi), np.full_like(phi, z)], 1) @ m[:3, :3].T
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())


def rows(imp, record, slot=-1, state=None, place=None, inst=-1):
    """The table rows of analytic shape `imp` (scene/implicit.Implicit; `state` (c, R): a differentiable sphere's
    current centre and radius, slot its derived slot; a shape of a group stored once: `place` the 4x4 to_world of
    its instance record `inst`, the curves made in the group's space and mapped to the world): a list of row dicts
    (edges.secondary_edges' keys). The weights are the curves' world lengths (a sphere's under a non-uniform
    instance: 2π R times the largest stretch)."""
    boundary = 1                     # edges.BOUNDARY: a discontinuity wherever seen
    pm = np.eye(4) if place is None else np.asarray(place, np.float64)
    m = pm @ np.asarray(imp.to_world, np.float64)
    if imp.kind == SPHERE:
        c, r = state if state is not None else imp.sphere()
        stretch = float(np.linalg.svd(pm[:3, :3], compute_uv=False)[0])
        return [_row(pm[:3, :3] @ c + pm[:3, 3], 2.0 * np.pi * r * stretch, boundary, slot, record, inst)]
    if imp.kind == DISK:
        return [_row(m[:3, 3], _rim_length(m, 0.0), boundary | RIM0, slot, record, inst)]
    if imp.kind == CYLINDER:
        top = m[:3, 3] + m[:3, 2]
        return [_row(m[:3, 3], _rim_length(m, 0.0), boundary | RIM0, slot, record, inst),
                _row(top, _rim_length(m, 1.0), boundary | RIM1, slot, record, inst),
                _row(m[:3, 3], 2.0 * float(np.linalg.norm(m[:3, 2])), boundary | SIDE, slot, record, inst)]
    return []


# ------------------------------------------------------------------------------ device: the curves
@ti.func
def _sphere(st: ti.template(), r, p, tau):
    """(ok, x, e): the point x(τ) = c' + ρ (cos φ a + sin φ b), φ = 2πτ, of the silhouette circle of sphere r seen
    from p (centre c' = c + (R² / D²)(p - c), radius ρ = R √(1 - R² / D²), D = |p - c|; a, b ⟂ p - c) and
    e = dx/dτ; ok = 0 when p is inside (or on) the sphere."""
    c = st.geo_c[r]
    rad = st.geo_r[r]
    q = p - c
    d2 = q.dot(q)
    ok = d2 > (rad * (1.0 + 1e-4)) ** 2
    x = c
    e = vec3(0.0)
    if ok:
        a, b = coordinate_system(q / ti.sqrt(d2))
        rho = rad * ti.sqrt(ti.max(1.0 - rad * rad / d2, 0.0))
        phi = 2.0 * PI * tau
        x = c + (rad * rad / d2) * q + rho * (ti.cos(phi) * a + ti.sin(phi) * b)
        e = (2.0 * PI * rho) * (ti.cos(phi) * b - ti.sin(phi) * a)
    return ok, x, e


@ti.func
def _flat(st: ti.template(), r, flags, p, tau):
    """(ok, x, e) of a disk's or a cylinder's curve (flags: RIM0, RIM1, SIDE) at τ, seen from p: a rim is the
    ellipse to_world·(cos 2πτ, sin 2πτ, z); the side's two lines are to_world·(cos φ±, sin φ±, z), z = 2τ mod 1,
    φ± = φ_p ± acos(1 / |p_xy|) in object space (ok = 0 inside the cylinder's infinite tube)."""
    m = st.geo_to_world[r]
    ok = True
    x = vec3(0.0)
    e = vec3(0.0)
    if flags & SIDE:
        q = affine_point(st.geo_to_obj[r], p)
        d2 = q[0] * q[0] + q[1] * q[1]
        ok = d2 > 1.0 + 1e-6
        if ok:
            second = tau >= 0.5
            z = 2.0 * tau - (1.0 if second else 0.0)
            a = ti.acos(ti.min(1.0 / ti.sqrt(d2), 1.0))
            phi = ti.atan2(q[1], q[0]) + (a if second else -a)
            x = affine_point(m, vec3(ti.cos(phi), ti.sin(phi), z))
            e = 2.0 * affine_vector(m, vec3(0.0, 0.0, 1.0))
    else:
        phi = 2.0 * PI * tau
        z = 1.0 if flags & RIM1 else 0.0
        x = affine_point(m, vec3(ti.cos(phi), ti.sin(phi), z))
        e = (2.0 * PI) * affine_vector(m, vec3(-ti.sin(phi), ti.cos(phi), 0.0))
    return ok, x, e


@ti.func
def curve(st: ti.template(), r, inst, flags, p, tau):
    """(ok, x, e): the point τ of the curve (flags) of analytic shape r seen from p, and e = dx/dτ (world). A shape
    of a group stored once (inst: its instance's record, core/implicit.py; else -1) is seen from p in the group's
    space and its curve mapped back: an affine map keeps tangency, so a silhouette maps to the silhouette."""
    ok = False
    x = vec3(0.0)
    e = vec3(0.0)
    q = p
    if ti.static(st.instances):
        if inst >= 0:
            q = affine_point(st.geo_to_obj[inst], p)
    if st.geo_kind[r] == SPHERE:
        ok, x, e = _sphere(st, r, q, tau)
    else:
        ok, x, e = _flat(st, r, flags, q, tau)
    if ti.static(st.instances):
        if inst >= 0:
            x = affine_point(st.geo_to_world[inst], x)
            e = affine_vector(st.geo_to_world[inst], e)
    return ok, x, e


@ti.func
def point_adjoint(st: ti.template(), r, slot, X, g):
    """Add <g, δX> for a point X of differentiable sphere r's surface into its derived slot (scene/sphere_body.py):
    X moves as c + R n, δX = δc + n δR (n = normalize(X - c)): ∂/∂c += g, ∂/∂R += g·n. (A silhouette's own motion
    differs by a move along the surface, which the boundary terms' normals do not see.)"""
    n = (X - st.geo_c[r]).normalized()
    pool.add_gradient(st, slot, 3, g)
    pool.add_gradient(st, slot + 3, 1, vec3(g.dot(n), 0.0, 0.0))


@ti.func
def point_tangent(st: ti.template(), r, slot, X):
    """Forward mode: δX = ċ + n Ṙ of the point X of differentiable sphere r (its derived slot's tangent (ċ, Ṙ))."""
    n = (X - st.geo_c[r]).normalized()
    return vec3(st.tan_v[slot], st.tan_v[slot + 1], st.tan_v[slot + 2]) + n * st.tan_v[slot + 3]

