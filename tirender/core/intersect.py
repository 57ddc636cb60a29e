"""Ray queries against the scene BVH (Möller–Trumbore triangles, stack traversal).

The BVH layout is the one of ``scene/bvh.py``: node 0 is the root; an internal node
(count 0) has children ``first`` and ``first + 1``; a leaf holds triangles
``first .. first + count - 1`` (triangles are stored in BVH order).
"""
import taichi as ti

from .math import BIG, vec2, vec3

STACK = 64


@ti.func
def _ray_box(bmin, bmax, o, inv_d, tmax):
    t0 = (bmin - o) * inv_d
    t1 = (bmax - o) * inv_d
    tn = ti.min(t0, t1)
    tf = ti.max(t0, t1)
    tnear = ti.max(ti.max(tn[0], tn[1]), ti.max(tn[2], 0.0))
    tfar = ti.min(ti.min(tf[0], tf[1]), ti.min(tf[2], tmax))
    return tnear, tnear <= tfar * 1.00000024


@ti.func
def ray_triangle(st: ti.template(), i, o, d):
    """(t, b1, b2) of ray o + t d against triangle i; t = BIG on a miss."""
    e1 = st.tri_e1[i]
    e2 = st.tri_e2[i]
    pv = d.cross(e2)
    det = e1.dot(pv)
    t = BIG
    b1 = 0.0
    b2 = 0.0
    if det != 0.0:
        inv = 1.0 / det
        tv = o - st.tri_p0[i]
        b1 = tv.dot(pv) * inv
        if b1 >= 0.0 and b1 <= 1.0:
            qv = tv.cross(e1)
            b2 = d.dot(qv) * inv
            if b2 >= 0.0 and b1 + b2 <= 1.0:
                tt = e2.dot(qv) * inv
                if tt > 0.0:
                    t = tt
    return t, b1, b2


@ti.func
def _safe_inv(d):
    r = vec3(0.0)
    for k in ti.static(range(3)):
        r[k] = 1.0 / d[k] if ti.abs(d[k]) > 1e-30 else (1e30 if d[k] >= 0.0 else -1e30)
    return r


@ti.func
def traverse(st: ti.template(), o, d, tmax, any_hit: ti.template()):
    """Stack traversal of the BVH, nearer child first. Closest hit (tri, t, b1, b2) along o + t d,
    t in (0, tmax); with any_hit, stops at the first hit found. tri = -1 on a miss."""
    inv_d = _safe_inv(d)
    best_t = tmax
    best = -1
    bb = vec2(0.0)
    stack = ti.Vector([0] * STACK, dt=ti.i32)
    sp = 1
    stack[0] = 0
    while sp > 0:
        sp -= 1
        n = stack[sp]
        tnear, ok = _ray_box(st.node_min[n], st.node_max[n], o, inv_d, best_t)
        if ok:
            cnt = st.node_count[n]
            first = st.node_first[n]
            if cnt > 0:
                for k in range(first, first + cnt):
                    t, b1, b2 = ray_triangle(st, k, o, d)
                    if t < best_t:
                        best_t = t
                        best = k
                        bb = vec2(b1, b2)
                if ti.static(any_hit):
                    if best >= 0:
                        sp = 0
            else:
                # visit the nearer child first (pushed last)
                c0 = first
                c1 = first + 1
                ax = 0
                if ti.abs(d[1]) > ti.abs(d[ax]):
                    ax = 1
                if ti.abs(d[2]) > ti.abs(d[ax]):
                    ax = 2
                m0 = st.node_min[c0][ax] + st.node_max[c0][ax]
                m1 = st.node_min[c1][ax] + st.node_max[c1][ax]
                if (m0 > m1) == (d[ax] > 0.0):
                    c0, c1 = c1, c0
                if sp < STACK - 1:
                    stack[sp] = c1
                    stack[sp + 1] = c0
                    sp += 2
    return best, best_t, bb[0], bb[1]


@ti.func
def intersect(st: ti.template(), o, d, tmax):
    """Closest hit along o + t d, t in (0, tmax). Returns (tri, t, b1, b2); tri = -1 on a miss."""
    return traverse(st, o, d, tmax, False)


@ti.func
def occluded(st: ti.template(), o, d, tmax):
    """True if anything is hit along o + t d for t in (0, tmax) (any-hit traversal)."""
    tri, t, b1, b2 = traverse(st, o, d, tmax, True)
    return tri >= 0
