"""Mitsuba's analytic sphere, disk and cylinder on the device (host side and conventions: scene/implicit.py;
records and dispatch: core/implicit.py). Each is one BVH primitive; record r holds its kind, to_world / to_object
(3x4), the normal matrix, and the sphere's centre and radius.

Formulas as Mitsuba 3's src/shapes/{sphere,disk,cylinder}.cpp: the sphere is intersected in world space (centre c,
radius R) and its hit re-projected onto it; the disk and the cylinder in object space (t is the same under the affine
map); uv, dp/du, dp/dv as Mitsuba's (sphere: (φ / 2π, θ / π); disk: (r, φ / 2π); cylinder: (φ / 2π, z)). Emitters
sample positions uniformly by area (pdf 1 / A, emitters/area.py), a sphere seen from outside the cone it subtends
(Mitsuba's sample_direction: uniform in solid angle over the visible cap).
"""
import taichi as ti

from .math import BIG, PI, affine_point, affine_vector, coordinate_system, solve_quadratic, vec2, vec3
from .warp import square_to_uniform_disk_concentric, square_to_uniform_sphere

RAY_EPSILON = 89.0 * 2.0 ** -24    # Mitsuba's math::RayEpsilon<float>

SPHERE, DISK, CYLINDER = 2, 3, 4        # geo_kind (scene/implicit.py)
FLIP = 1                                # geo_flags bit


@ti.func
def ray(st: ti.template(), r, o, d):
    """t > 0 of the first hit of o + t d on quadric record r, BIG on a miss."""
    kind = st.geo_kind[r]
    t = BIG
    if kind == SPHERE:
        oc = o - st.geo_c[r]
        rad = st.geo_r[r]
        found, t0, t1 = solve_quadratic(d.dot(d), 2.0 * oc.dot(d), oc.dot(oc) - rad * rad)
        if found == 1:
            t = t0 if t0 > 0.0 else (t1 if t1 > 0.0 else BIG)
    else:
        m = st.geo_to_obj[r]
        lo = affine_point(m, o)
        ld = affine_vector(m, d)
        if kind == DISK:
            if ld[2] != 0.0:
                tt = -lo[2] / ld[2]
                x = lo[0] + tt * ld[0]
                y = lo[1] + tt * ld[1]
                if tt > 0.0 and x * x + y * y <= 1.0:
                    t = tt
        else:
            found, t0, t1 = solve_quadratic(ld[0] * ld[0] + ld[1] * ld[1], 2.0 * (ld[0] * lo[0] + ld[1] * lo[1]),
                                            lo[0] * lo[0] + lo[1] * lo[1] - 1.0)
            if found == 1:
                z0 = lo[2] + t0 * ld[2]
                z1 = lo[2] + t1 * ld[2]
                if t0 > 0.0 and z0 >= 0.0 and z0 <= 1.0:
                    t = t0
                elif t1 > 0.0 and z1 >= 0.0 and z1 <= 1.0:
                    t = t1
    return t


@ti.func
def unit_angle_z(v):
    """Mitsuba's unit_angle_z: the angle between v and +z, 2 asin(|v - (0, 0, ±1)| / 2) (accurate near the poles;
    for a v that is not unit length, as a sphere under a non-uniform to_world gives, Mitsuba's value too)."""
    zs = 1.0 if v[2] >= 0.0 else -1.0
    h = 0.5 * ti.sqrt(v[0] * v[0] + v[1] * v[1] + (v[2] - zs) * (v[2] - zs))
    a = 2.0 * ti.asin(ti.min(h, 1.0))
    return PI - a if v[2] < 0.0 else a


@ti.func
def _frame(r, local, kind):
    """(uv, dp/du, dp/dv) in object space at the object-space point `local` of a quadric (Mitsuba's
    parameterisations; the caller maps the derivatives by to_world)."""
    x = local[0]
    y = local[1]
    rd = ti.sqrt(x * x + y * y)
    phi = ti.atan2(y, x)
    if phi < 0.0:
        phi += 2.0 * PI
    cos_phi = 1.0
    sin_phi = 0.0
    if rd > 0.0:
        cos_phi = x / rd
        sin_phi = y / rd
    uv = vec2(0.0)
    du = vec3(0.0)
    dv = vec3(0.0)
    if kind == SPHERE:
        uv = vec2(phi / (2.0 * PI), unit_angle_z(local) / PI)
        du = vec3(-y, x, 0.0) * (2.0 * PI)
        dv = vec3(1.0, 0.0, 0.0)
        if rd > 0.0:
            dv = vec3(local[2] * cos_phi, local[2] * sin_phi, -rd) * PI
    elif kind == DISK:
        uv = vec2(rd, phi / (2.0 * PI))
        du = vec3(cos_phi, sin_phi, 0.0)
        dv = vec3(-sin_phi, cos_phi, 0.0) * (2.0 * PI * rd)
    else:
        uv = vec2(phi / (2.0 * PI), local[2])
        du = vec3(-y, x, 0.0) * (2.0 * PI)
        dv = vec3(0.0, 0.0, 1.0)
    return uv, du, dv


@ti.func
def _surface(st: ti.template(), r, p):
    """(p, n, uv, dp/du, dp/dv) of the point p (world) on quadric r: p re-projected onto the surface, n its
    normal (flip_normals applied)."""
    kind = st.geo_kind[r]
    m = st.geo_to_world[r]
    n = vec3(0.0, 0.0, 1.0)
    if kind == SPHERE:
        c = st.geo_c[r]
        n = (p - c).normalized()
        p = c + st.geo_r[r] * n
    local = affine_point(st.geo_to_obj[r], p)
    if kind == CYLINDER:
        lr = ti.sqrt(local[0] * local[0] + local[1] * local[1])
        if lr > 0.0:
            local[0] /= lr
            local[1] /= lr
        p = affine_point(m, local)
    elif kind == DISK:
        local[2] = 0.0
        p = affine_point(m, local)
        n = (st.geo_nm[r] @ vec3(0.0, 0.0, 1.0)).normalized()
    uv, du, dv = _frame(r, local, kind)
    dpdu = affine_vector(m, du)
    dpdv = affine_vector(m, dv)
    if kind == CYLINDER:
        n = (st.geo_nm[r] @ vec3(local[0], local[1], 0.0)).normalized()
    if st.geo_flags[r] & FLIP:
        n = -n
    return p, n, uv, dpdu, dpdv


@ti.func
def interaction(st: ti.template(), r, p):
    """(p, ng, n, s, t, uv, dp/du, dp/dv) at the world hit point p on quadric r: the shading normal is the
    geometric one, the tangent s along dp/du (Mitsuba's sh_frame.s), t = n × s."""
    q, n, uv, dpdu, dpdv = _surface(st, r, p)
    s = dpdu - n * n.dot(dpdu)
    ls = s.norm()
    ts = vec3(0.0)
    if ls > 0.0:
        s = s / ls
        ts = n.cross(s)
    else:
        s, ts = coordinate_system(n)
    return q, n, n, s, ts, uv, dpdu, dpdv


@ti.func
def sample_position(st: ti.template(), r, u):
    """(p, n, uv): a point uniform by area on quadric r (u in [0, 1)²), its normal and uv."""
    kind = st.geo_kind[r]
    local = vec3(0.0)
    if kind == SPHERE:
        local = square_to_uniform_sphere(u)
    elif kind == DISK:
        q = square_to_uniform_disk_concentric(u)
        local = vec3(q[0], q[1], 0.0)
    else:
        phi = 2.0 * PI * u[1]
        local = vec3(ti.cos(phi), ti.sin(phi), u[0])
    p = vec3(0.0)
    if kind == SPHERE:
        p = st.geo_c[r] + st.geo_r[r] * affine_vector(st.geo_to_world[r], local).normalized()
    else:
        p = affine_point(st.geo_to_world[r], local)
    q, n, uv, dpdu, dpdv = _surface(st, r, p)
    return q, n, uv


@ti.func
def sphere_of(st: ti.template(), e):
    """The record of emitter e's shape if it is an analytic sphere whose normals point outwards, else -1."""
    r = -1
    shape = st.em_shape[e]
    if shape >= 0:
        g = st.shape_geo[shape]
        if g >= 0:
            if st.geo_kind[g] == SPHERE and (st.geo_flags[g] & FLIP) == 0:
                r = g
    return r


@ti.func
def cone_cos(st: ti.template(), r, ref_p):
    """cos θmax of the cone sphere r subtends at ref_p; 2 when ref_p is inside it (sample by area then)."""
    dc = st.geo_c[r] - ref_p
    dc2 = dc.dot(dc)
    rad = st.geo_r[r]
    res = 2.0
    if dc2 > (rad * (1.0 - RAY_EPSILON)) ** 2:
        res = ti.sqrt(ti.max(1.0 - rad * rad / dc2, 0.0))
    return res


@ti.func
def sample_cone(st: ti.template(), r, ref_p, cos_max, u):
    """(p, n, uv, pdf): a point of sphere r uniform in the solid angle of its visible cap from ref_p (Mitsuba's
    sphere sample_direction, https://www.akalin.com/sampling-visible-sphere), pdf per steradian."""
    c = st.geo_c[r]
    rad = st.geo_r[r]
    dc = c - ref_p
    inv_dc = 1.0 / dc.norm()
    sin_max = rad * inv_dc
    sin_max2 = sin_max * sin_max
    sin2 = sin_max2 * u[0]                                   # small cones: the Taylor expansion (Mitsuba's)
    if sin_max2 > 0.00068523:
        sin2 = 1.0 - ((cos_max - 1.0) * u[0] + 1.0) ** 2
    cos_t = ti.sqrt(ti.max(1.0 - sin2, 0.0))
    cos_a = sin2 / sin_max + cos_t * ti.sqrt(ti.max(1.0 - sin2 / sin_max2, 0.0))
    sin_a = ti.sqrt(ti.max(1.0 - cos_a * cos_a, 0.0))
    phi = 2.0 * PI * u[1]
    w = -dc * inv_dc
    s, t = coordinate_system(w)
    d = s * (ti.cos(phi) * sin_a) + t * (ti.sin(phi) * sin_a) + w * cos_a
    q, n, uv, dpdu, dpdv = _surface(st, r, c + rad * d)
    return q, n, uv, 1.0 / (2.0 * PI * (1.0 - cos_max))
