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

from .math import BIG, PI, affine_point, affine_vector, affine_vector_t, coordinate_system, solve_quadratic, tangent_frame, vec2, vec3
from .optics import normalize_adjoint, surface_hit_adjoint
from .warp import square_to_uniform_disk_concentric, square_to_uniform_sphere

RAY_EPSILON = 89.0 * 2.0 ** -24    # Mitsuba's math::RayEpsilon<float>

SPHERE, DISK, CYLINDER = 2, 3, 4        # geo_kind (scene/implicit.py)
FLIP = 1                                # geo_flags bit


@ti.func
def ray(st: ti.template(), r, o, d):
    """t > 0 of the first hit of o + t d on quadric record r, BIG on a miss. In the record's canonical space
    (geo_ray: the unit sphere at the origin for a sphere, object space for the others; t is the same there) the
    sphere and the cylinder are one quadratic, |q|² = 1 with q's z counted for the sphere only."""
    m = st.geo_ray[r]
    lo = affine_point(m, o)
    ld = affine_vector(m, d)
    kind = st.geo_kind[r]
    t = BIG
    if kind == DISK:
        if ld[2] != 0.0:
            tt = -lo[2] / ld[2]
            q = lo + tt * ld
            if tt > 0.0 and q[0] * q[0] + q[1] * q[1] <= 1.0:
                t = tt
    else:
        w = vec3(1.0, 1.0, 1.0 if kind == SPHERE else 0.0)
        found, t0, t1 = solve_quadratic((ld * w).dot(ld), 2.0 * (lo * w).dot(ld), (lo * w).dot(lo) - 1.0)
        if found == 1:
            for root in ti.static(range(2)):
                tt = t0 if root == 0 else t1
                z = lo[2] + tt * ld[2]
                if t == BIG and tt > 0.0 and (kind == SPHERE or (z >= 0.0 and z <= 1.0)):
                    t = tt
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
def surface(st: ti.template(), r, p):
    """(p, n, uv, dp/du, dp/dv) of the world point p on quadric r: p re-projected onto the surface, n its normal
    (the object normal through the normal matrix; a sphere's p - centre; flip_normals applied)."""
    kind = st.geo_kind[r]
    m = st.geo_to_world[r]
    n = vec3(0.0)
    q = p
    if kind == SPHERE:
        c = st.geo_c[r]
        n = (p - c).normalized()
        q = c + st.geo_r[r] * n
    local = affine_point(st.geo_to_obj[r], q)
    if kind != SPHERE:
        cyl = 1.0 if kind == CYLINDER else 0.0
        lr = ti.sqrt(local[0] * local[0] + local[1] * local[1])
        if kind == CYLINDER and lr > 0.0:
            local[0] /= lr
            local[1] /= lr
        local[2] *= cyl                                        # a disk's points lie in z = 0
        q = affine_point(m, local)
        n = (st.geo_nm[r] @ vec3(cyl * local[0], cyl * local[1], 1.0 - cyl)).normalized()
    uv, du, dv = _frame(r, local, kind)
    if st.geo_flags[r] & FLIP:
        n = -n
    return q, n, uv, affine_vector(m, du), affine_vector(m, dv)


@ti.func
def _uv_adjoint(local, kind, g_uv):
    """∂/∂local of <g_uv, uv> for _frame's uv (sphere: local on the unit sphere, θ = atan2(r_xy, z) there)."""
    x = local[0]
    y = local[1]
    z = local[2]
    rd2 = x * x + y * y
    g = vec3(0.0)
    if rd2 > 0.0:
        rd = ti.sqrt(rd2)
        g_phi = (g_uv[1] if kind == DISK else g_uv[0]) / (2.0 * PI)
        g = vec3(-y, x, 0.0) * (g_phi / rd2)                    # φ = atan2(y, x)
        if kind == SPHERE:
            l2 = rd2 + z * z
            g += vec3(z * x / rd, z * y / rd, -rd) * (g_uv[1] / (PI * l2))
        elif kind == DISK:
            g += vec3(x, y, 0.0) * (g_uv[0] / rd)
    if kind == CYLINDER:
        g[2] += g_uv[1]
    return g


@ti.func
def surface_adjoint(st: ti.template(), r, p, g_q, g_n, g_uv):
    """Adjoint of surface(st, r, p)'s (q, n, uv): returns (∂/∂p, ∂/∂c, ∂/∂R) of <g_q, q> + <g_n, n> + <g_uv, uv>
    (c, R: a sphere's centre and radius; 0 for the others). The frame's dp/du is not differentiated (held, as a
    triangle's in core.interaction.frame_adjoint)."""
    kind = st.geo_kind[r]
    m = st.geo_to_world[r]
    mo = st.geo_to_obj[r]
    sgn = -1.0 if st.geo_flags[r] & FLIP else 1.0
    g_p = vec3(0.0)
    g_c = vec3(0.0)
    g_rad = 0.0
    if kind == SPHERE:
        c = st.geo_c[r]
        rad = st.geo_r[r]
        n0 = (p - c).normalized()
        local = affine_point(mo, c + rad * n0)
        # q = c + R n0, local = to_obj(q) = Qᵀ n0 (to_world = [R Q | c]: uv turns with n0 alone), n = ±n0
        g_n0 = sgn * g_n + rad * (g_q + affine_vector_t(mo, _uv_adjoint(local, kind, g_uv)))
        g_pc = normalize_adjoint(p - c, g_n0)                             # n0 = normalize(p - c)
        g_p = g_pc
        g_c = g_q - g_pc
        g_rad = n0.dot(g_q)
    else:
        local = affine_point(mo, p)
        g_l = vec3(0.0)
        if kind == DISK:
            local[2] = 0.0
            g_l = affine_vector_t(m, g_q) + _uv_adjoint(local, kind, g_uv)
            g_l[2] = 0.0                                                  # q = to_world(x, y, 0)
        else:
            lr = ti.sqrt(local[0] * local[0] + local[1] * local[1])
            w = vec3(local[0], local[1], 0.0) / ti.max(lr, 1e-30)
            lw = vec3(w[0], w[1], local[2])                               # q = to_world(w, z), n ∝ NM (w, 0)
            g_nu = normalize_adjoint(st.geo_nm[r] @ w, sgn * g_n)
            g_lw = affine_vector_t(m, g_q) + _uv_adjoint(lw, kind, g_uv)
            g_w = st.geo_nm[r].transpose() @ g_nu + vec3(g_lw[0], g_lw[1], 0.0)
            g_l = (g_w - w * w.dot(g_w)) / ti.max(lr, 1e-30)
            g_l[2] = g_lw[2]
        g_p = affine_vector_t(mo, g_l)
    return g_p, g_c, g_rad


@ti.func
def hit_adjoint(st: ti.template(), r, t, o, d, g_p, g_n, g_uv):
    """Adjoint of the hit p = o + t d of the ray (o, d) on quadric r and of its surface(p): returns (∂/∂o, ∂/∂d,
    ∂/∂c, ∂/∂R) of <g_p, q> + <g_n, n> + <g_uv, uv>. t moves with the ray so that p stays on the surface F = 0:
    dt = -∇F·(do + t dd) / (∇F·d) (a sphere's F = |p - c|² - R² also with c and R)."""
    p = o + t * d
    gp, g_c, g_rad = surface_adjoint(st, r, p, g_p, g_n, g_uv)
    kind = st.geo_kind[r]
    grad_f = vec3(0.0)                                    # ∇F at p, up to its scale
    if kind == SPHERE:
        grad_f = p - st.geo_c[r]
    elif kind == DISK:
        grad_f = st.geo_nm[r] @ vec3(0.0, 0.0, 1.0)
    else:
        local = affine_point(st.geo_to_obj[r], p)
        grad_f = st.geo_nm[r] @ vec3(local[0], local[1], 0.0)
    g_o, k = surface_hit_adjoint(gp, grad_f, d)           # <gp, d> dt = -k ∇F·(do + t dd) (+ the sphere's terms)
    if kind == SPHERE:
        g_c += k * grad_f
        g_rad += k * st.geo_r[r]
    return g_o, t * g_o, g_c, g_rad


@ti.func
def interaction(st: ti.template(), r, p):
    """(p, ng, n, s, t, uv, dp/du, dp/dv) at the world hit point p on quadric r: the shading normal is the
    geometric one, the tangent s along dp/du (Mitsuba's sh_frame.s), t = n × s."""
    q, n, uv, dpdu, dpdv = surface(st, r, p)
    s, ts = tangent_frame(n, dpdu)
    return q, n, n, s, ts, uv, dpdu, dpdv


@ti.func
def of_emitter(st: ti.template(), e):
    """The quadric record of emitter e's shape, -1 when its shape is a mesh (or e is not a shape's)."""
    r = -1
    shape = st.em_shape[e]
    if shape >= 0:
        r = st.shape_geo[shape]
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
def sample_point(st: ti.template(), r, ref_p, u, cone: ti.template()):
    """(p, pdf): a world point of quadric r for u in [0, 1)², uniform by area (pdf 0: the caller's 1 / A), or, with
    `cone` for a sphere with outward normals seen from outside, uniform in the solid angle of its visible cap from
    ref_p (Mitsuba's sphere sample_direction, https://www.akalin.com/sampling-visible-sphere; pdf per steradian).
    surface() gives the point's normal and uv."""
    kind = st.geo_kind[r]
    c = st.geo_c[r]
    rad = st.geo_r[r]
    cos_max = 2.0
    if ti.static(cone):
        if kind == SPHERE and (st.geo_flags[r] & FLIP) == 0:
            cos_max = cone_cos(st, r, ref_p)
    p = vec3(0.0)
    pdf = 0.0
    if cos_max < 1.0:
        dc = c - ref_p
        inv_dc = 1.0 / dc.norm()
        sin_max = rad * inv_dc
        sin_max2 = sin_max * sin_max
        sin2 = sin_max2 * u[0]                               # small cones: the Taylor expansion (Mitsuba's)
        if sin_max2 > 0.00068523:
            sin2 = 1.0 - ((cos_max - 1.0) * u[0] + 1.0) ** 2
        cos_t = ti.sqrt(ti.max(1.0 - sin2, 0.0))
        cos_a = sin2 / sin_max + cos_t * ti.sqrt(ti.max(1.0 - sin2 / sin_max2, 0.0))
        sin_a = ti.sqrt(ti.max(1.0 - cos_a * cos_a, 0.0))
        phi = 2.0 * PI * u[1]
        w = -dc * inv_dc
        s, t = coordinate_system(w)
        p = c + rad * (s * (ti.cos(phi) * sin_a) + t * (ti.sin(phi) * sin_a) + w * cos_a)
        pdf = 1.0 / (2.0 * PI * (1.0 - cos_max))
    else:
        local = square_to_uniform_sphere(u)
        if kind == DISK:
            q = square_to_uniform_disk_concentric(u)
            local = vec3(q[0], q[1], 0.0)
        elif kind == CYLINDER:
            phi = 2.0 * PI * u[1]
            local = vec3(ti.cos(phi), ti.sin(phi), u[0])
        p = affine_point(st.geo_to_world[r], local)
        if kind == SPHERE:                                  # the sphere's own centre and radius (Mitsuba's)
            p = c + rad * (p - c).normalized()
    return p, pdf
