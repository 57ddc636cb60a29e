"""Mitsuba's ``sdfgrid`` on the device (host side: scene/sdfgrid.py; records and dispatch: core/implicit.py).

A grid of signed distances f over the object-space unit cube, trilinearly interpolated (values at the grid nodes,
clamped at the border: Mitsuba's linear/clamp texture); the surface is f = 0. Each voxel the surface crosses is a
primitive in a triangle row k with the voxel's integer coordinates in its uv slots: ``tri_uv0[k] = (x, y)``,
``tri_uv1[k] = (z, ·)``; the grid's record r holds its values' offset in ``sdf_val`` (x fastest:
off + (z H + y) W + x), ``geo_res[r]`` = (W, H, D) nodes, to_object, the normal matrix and the normal mode.

As Mitsuba's sdfgrid.cpp: the hit inside a voxel is the first root of the cubic the trilinear function is along
the ray (Hansson-Söderlund et al. 2022), bracketed by the roots of its derivative and refined by regula falsi
(|Δt| < 1e-5, at most 51 steps; Marmitt et al. 2004); the geometric normal is the trilinear function's gradient
in the voxel (finite differences across the voxel's faces at the hit), the smooth normal blends the normalised
gradients of the 8 voxels around the hit (Hansson-Söderlund et al.). No uv (0, 0), not an emitter. A hit's motion
with its ray (attached derivatives through a grid) and, for a differentiable grid (scene/sdf_body.py), with the grid's
values — the hit sliding along its ray to stay on f = 0, the normal turning with the voxel gradients — is hit_adjoint's
(Mitsuba's sdfgrid attaches the same motion: its ``grid`` parameter).
"""
import taichi as ti

from . import pool
from .math import BIG, affine_point, affine_vector, affine_vector_t, coordinate_system, solve_quadratic, vec3
from .optics import normalize_adjoint, surface_hit_adjoint

SMOOTH = 2           # geo_flags bit (scene/implicit.py)

ivec3 = ti.types.vector(3, ti.i32)
SOLVE_EPS = 1e-5          # regula falsi stops when the bracket is this short (ray units), as Mitsuba
SOLVE_STEPS = 51


@ti.func
def node_index(res, x, y, z):
    """The index of node (x, y, z), clamped to the grid, among the grid's values (x fastest)."""
    xi = ti.min(ti.max(x, 0), res[0] - 1)
    yi = ti.min(ti.max(y, 0), res[1] - 1)
    zi = ti.min(ti.max(z, 0), res[2] - 1)
    return (zi * res[1] + yi) * res[0] + xi


@ti.func
def node(st: ti.template(), g, res, x, y, z):
    """The grid value at node (x, y, z), clamped to the grid."""
    return st.sdf_val[st.geo_off[g] + node_index(res, x, y, z)]


@ti.func
def _bits(c):
    """Corner c of a voxel (0..7) as an offset (x, y, z) = (c & 1, c >> 1 & 1, c >> 2 & 1)."""
    return ivec3(c & 1, (c >> 1) & 1, (c >> 2) & 1)


@ti.func
def _value(st: ti.template(), g, res, q, g_f, slot, adjoint: ti.template()):
    """f at object-space point q (trilinear, clamped at the border); with `adjoint`, g_f ∂f/∂(node values) — the
    trilinear weights — added into the grid's parameter at pool offset `slot` (returns 0). Runtime loops here and
    below keep the code each call site inlines small."""
    x = ti.min(ti.max(q * (res - 1), 0.0), res - 1)
    i = ti.min(ti.cast(ti.floor(x), ti.i32), res - 2)
    w = x - i
    c_ = 0.0
    for c in range(8):
        b = _bits(c)
        wt = 1.0
        for a in ti.static(range(3)):
            wt *= w[a] if b[a] == 1 else 1.0 - w[a]
        if ti.static(adjoint):
            pool.add_gradient(st, slot + node_index(res, i[0] + b[0], i[1] + b[1], i[2] + b[2]), 1,
                              vec3(g_f * wt, 0.0, 0.0))
        else:
            c_ += wt * node(st, g, res, i[0] + b[0], i[1] + b[1], i[2] + b[2])
    return c_


@ti.func
def value(st: ti.template(), g, res, q):
    """f at object-space point q (trilinear, clamped at the border)."""
    return _value(st, g, res, q, 0.0, -1, False)


@ti.func
def voxel_gradient(st: ti.template(), g, res, p, v):
    """∇f of voxel v (integer coordinates) at object-space p: per axis, the difference of f across the voxel's
    two faces at p's other coordinates over the voxel size (Mitsuba's voxel_grad)."""
    size = 1.0 / (res - 1)
    lo = v * size
    grad = vec3(0.0)
    for a in range(3):
        e = vec3(float(a == 0), float(a == 1), float(a == 2))
        q0 = p * (1.0 - e) + lo * e
        q1 = q0 + size * e
        grad += e * ((value(st, g, res, q1) - value(st, g, res, q0)) / size.dot(e))
    return grad


@ti.func
def _voxel_gradient_values_adjoint(st: ti.template(), g, res, p, v, g_grad, slot):
    """∂/∂(node values) of <g_grad, voxel_gradient(p, v)> (linear in them: the face values' weights over the
    voxel size) added into the grid's parameter at pool offset `slot`."""
    size = 1.0 / (res - 1)
    lo = v * size
    for a in range(3):
        e = vec3(float(a == 0), float(a == 1), float(a == 2))
        q0 = p * (1.0 - e) + lo * e
        k = g_grad.dot(e) / size.dot(e)
        _value(st, g, res, q0 + size * e, k, slot, True)
        _value(st, g, res, q0, -k, slot, True)


@ti.func
def _blend(res, p):
    """The smooth normal's blend at object-space p: (v000, w, dw): the lowest of the 8 voxels around p, the
    trilinear weights' coordinates w (an axis whose lower (upper) voxels all have a negative coordinate takes the
    other side's only: w 1 (0)) and ∂w/∂p per axis (res - 1; 0 on such an axis)."""
    sp = p * (res - 1)
    v000 = ti.cast(ti.round(sp), ti.i32) - 1
    w = sp - (v000 + 1) + 0.5
    dw = ti.cast(res - 1, float)
    lo_ok = ivec3(0)
    hi_ok = ivec3(0)
    for c in range(8):
        b = _bits(c)
        if (v000 + b).min() >= 0:
            lo_ok += 1 - b
            hi_ok += b
    for a in ti.static(range(3)):
        if lo_ok[a] == 0:
            w[a] = 1.0
            dw[a] = 0.0
        if hi_ok[a] == 0:
            w[a] = 0.0
            dw[a] = 0.0
    return v000, w, dw


@ti.func
def smooth_normal(st: ti.template(), g, res, p):
    """Mitsuba's smooth shading normal (object space, not normalised): the normalised voxel gradients of the
    8 voxels around p blended trilinearly; voxels with a negative coordinate left out (an axis whose lower
    (upper) four are all out takes the other side's only)."""
    return _smooth(st, g, res, p, vec3(0.0), -1, False)


@ti.func
def _smooth(st: ti.template(), g, res, p, g_ns, slot, adjoint: ti.template()):
    """smooth_normal(p), or with `adjoint` ∂/∂p of <g_ns, smooth_normal(p)> (the blend's weights and each voxel's
    normalised gradient move with p: _gradient_adjoint), and where slot >= 0 its ∂/∂(node values) added into the
    grid's parameter at that pool offset."""
    v000, w, dw = _blend(res, p)
    out = vec3(0.0)
    for c in range(8):
        b = _bits(c)
        v = v000 + b
        if v.min() >= 0:
            gr = voxel_gradient(st, g, res, p, v)
            ln = gr.norm()
            if ln > 0.0:
                f = vec3(0.0)
                df = vec3(0.0)
                for a in ti.static(range(3)):
                    f[a] = w[a] if b[a] == 1 else 1.0 - w[a]
                    df[a] = dw[a] if b[a] == 1 else -dw[a]
                wt = f[0] * f[1] * f[2]
                if ti.static(adjoint):
                    gwt = vec3(df[0] * f[1] * f[2], f[0] * df[1] * f[2], f[0] * f[1] * df[2])
                    g_gr = wt * normalize_adjoint(gr, g_ns)
                    out += gwt * (gr.dot(g_ns) / ln) + _gradient_adjoint(st, g, res, p, v, g_gr)
                    if slot >= 0:
                        _voxel_gradient_values_adjoint(st, g, res, p, v, g_gr, slot)
                else:
                    out += wt / ln * gr
    return out


@ti.func
def _cubic(c3, c2, c1, c0, t):
    return -(((c3 * t + c2) * t + c1) * t + c0)


@ti.func
def _first_root(t_end, c3, c2, c1, c0):
    """The root of the cubic in [0, t_end] Mitsuba's sdf_solve_cubic finds (BIG: none)."""
    found, r0, r1 = solve_quadratic(3.0 * c3, 2.0 * c2, c1)
    t_near = 0.0
    t_far = t_end
    if found == 1 and t_near <= r0 and r0 <= t_far:
        if _cubic(c3, c2, c1, c0, 0.0) * _cubic(c3, c2, c1, c0, r0) <= 0.0:
            t_far = r0
        else:
            t_near = r0
    if found == 1 and t_near <= r1 and r1 <= t_far:
        if _cubic(c3, c2, c1, c0, t_near) * _cubic(c3, c2, c1, c0, r1) <= 0.0:
            t_far = r1
        else:
            t_near = r1
    f_near = _cubic(c3, c2, c1, c0, t_near)
    f_far = _cubic(c3, c2, c1, c0, t_far)
    t = BIG
    if f_near * f_far <= 0.0:
        for _ in range(SOLVE_STEPS):
            den = f_far - f_near
            t = t_near if den == 0.0 else t_near + (t_far - t_near) * (-f_near / den)
            f_t = _cubic(c3, c2, c1, c0, t)
            if f_t * f_near <= 0.0:
                t_far = t
                f_far = f_t
            else:
                t_near = t
                f_near = f_t
            if ti.abs(t_near - t_far) < SOLVE_EPS:
                break
    return t


@ti.func
def ray_voxel(st: ti.template(), k, g, o, d):
    """t of the ray o + t d (world) against the surface in voxel primitive k of grid g; BIG on a miss. t is the
    same in every space the affine to_world relates."""
    m = st.geo_to_obj[g]
    res = st.geo_res[g]
    n = ti.cast(res - 1, float)
    v = ivec3(ti.cast(st.tri_uv0[k][0], ti.i32), ti.cast(st.tri_uv0[k][1], ti.i32), ti.cast(st.tri_uv1[k][0], ti.i32))
    ro = affine_point(m, o) * n - v                         # voxel space [0, 1]^3
    rd = affine_vector(m, d) * n
    t0 = 0.0
    t1 = BIG
    for a in ti.static(range(3)):
        if rd[a] != 0.0:
            ta = -ro[a] / rd[a]
            tb = (1.0 - ro[a]) / rd[a]
            t0 = ti.max(t0, ti.min(ta, tb))
            t1 = ti.min(t1, ti.max(ta, tb))
        elif ro[a] < 0.0 or ro[a] > 1.0:
            t1 = -1.0
    t = BIG
    if t0 < t1:
        s = ti.Vector([node(st, g, res, v[0] + (c & 1), v[1] + ((c >> 1) & 1), v[2] + ((c >> 2) & 1))
                       for c in ti.static(range(8))])
        q = ro + t0 * rd
        a_ = s[5] - s[4]
        k0 = s[0]
        k1 = s[1] - s[0]
        k2 = s[2] - s[0]
        k3 = s[3] - s[2] - k1
        k4 = k0 - s[4]
        k5 = k1 - a_
        k6 = k2 - (s[6] - s[4])
        k7 = k3 - (s[7] - s[6] - a_)
        m0 = q[0] * q[1]
        m1 = rd[0] * rd[1]
        m2 = q[0] * rd[1] + q[1] * rd[0]
        m3 = k5 * q[2] - k1
        m4 = k6 * q[2] - k2
        m5 = k7 * q[2] - k3
        c0 = (k4 * q[2] - k0) + (q[0] * m3 + (q[1] * m4 + m0 * m5))
        c1 = (rd[0] * m3 + rd[1] * m4) + m2 * m5 + rd[2] * (k4 + (k5 * q[0] + (k6 * q[1] + k7 * m0)))
        c2 = m1 * m5 + rd[2] * (k5 * rd[0] + (k6 * rd[1] + k7 * m2))
        c3 = k7 * m1 * rd[2]
        tt = _first_root(t1 - t0, c3, c2, c1, c0)
        if tt < BIG and t0 + tt > 0.0:
            t = t0 + tt
    return t


@ti.func
def interaction(st: ti.template(), g, p):
    """(ng, n, s, t) at the world hit point p on grid g: the geometric normal (the voxel's gradient), the shading
    normal (smooth or analytic) and coordinate_system(n) as its tangents (world, unit)."""
    res = st.geo_res[g]
    q = affine_point(st.geo_to_obj[g], p)
    nm = st.geo_nm[g]
    v = ti.cast(q * (res - 1), ti.i32)
    ng = (nm @ voxel_gradient(st, g, res, q, v)).normalized()
    n = ng
    if st.geo_flags[g] & SMOOTH:
        ns = nm @ smooth_normal(st, g, res, q)
        if ns.norm() > 0.0:
            n = ns.normalized()
    s, t = coordinate_system(n)
    return ng, n, s, t


@ti.func
def _gradient_adjoint(st: ti.template(), g, res, q, v, g_grad):
    """∂/∂q of <g_grad, voxel_gradient(q, v)>: with q's coordinate a in the cell [i, i + 1] of the grid, each
    component of voxel v's gradient is affine in it there (a trilinear function's, or constant), so its derivative
    along axis a is the difference of the gradients at the cell's two faces (exact; v need not hold q)."""
    size = 1.0 / (res - 1)
    x = ti.min(ti.max(q * (res - 1), 0.0), res - 1)
    lo = ti.min(ti.cast(ti.floor(x), ti.i32), res - 2) * size
    out = vec3(0.0)
    for a in range(3):
        e = vec3(float(a == 0), float(a == 1), float(a == 2))
        q0 = q * (1.0 - e) + lo * e
        dg = voxel_gradient(st, g, res, q0 + size * e, v) - voxel_gradient(st, g, res, q0, v)
        out += e * (dg.dot(g_grad) / size.dot(e))
    return out


@ti.func
def hit_adjoint(st: ti.template(), g, t, o, d, g_p, g_n):
    """(∂/∂o, ∂/∂d) of <g_p, p> + <g_n, n> at the hit p = o + t d of the ray (o, d) on grid g (as interaction(p):
    the analytic or smooth normal); the hit stays on f = 0: dt = -(∇f·(do + t dd) + Σ_j w_j dv_j) / (∇f·d). A
    differentiable grid's (geo_slot >= 0: scene/sdf_body.py) ∂/∂(node values v_j) go into its parameter: the hit's
    motion (w_j: the trilinear weights at p) and the normal's (the voxel gradients are linear in the values)."""
    p = o + t * d
    res = st.geo_res[g]
    slot = st.geo_slot[g]
    mo = st.geo_to_obj[g]
    q = affine_point(mo, p)
    nm = st.geo_nm[g]
    v = ti.cast(q * (res - 1), ti.i32)
    grad = voxel_gradient(st, g, res, q, v)
    g_q = vec3(0.0)
    smooth = False
    if st.geo_flags[g] & SMOOTH:
        ns = nm @ smooth_normal(st, g, res, q)
        if ns.norm() > 0.0:
            smooth = True
            g_q = _smooth(st, g, res, q, nm.transpose() @ normalize_adjoint(ns, g_n), slot, True)
    if not smooth:
        g_grad = nm.transpose() @ normalize_adjoint(nm @ grad, g_n)
        g_q = _gradient_adjoint(st, g, res, q, v, g_grad)
        if slot >= 0:
            _voxel_gradient_values_adjoint(st, g, res, q, v, g_grad, slot)
    gp = g_p + affine_vector_t(mo, g_q)
    g_o, k = surface_hit_adjoint(gp, nm @ grad, d)
    if slot >= 0:
        _value(st, g, res, q, -k, slot, True)             # ∂f/∂v_j = w_j (f in the units of nm @ grad's)
    return g_o, t * g_o
