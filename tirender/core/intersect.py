"""Ray queries against the scene BVH (Möller–Trumbore triangles, stack traversal; quadrics and SDF voxels as box
primitives, core/implicit.py).

The BVH is the 4-wide one of ``scene/bvh.py`` (``collapse``): node 0 is the root; child slot j of a
node is an inner node (count 0) or a leaf holding triangles ``child .. child + count - 1``
(triangles are stored in BVH order). One ray is tested against the 4 child boxes as vector lanes:
1.4x (Cornell box) to 1.9x (1M-triangle mesh) faster than the binary tree it is collapsed from on
the CPU (benchmarks/breakdown.py).
"""
import taichi as ti

from ..scene.bvh import WIDTH
from . import implicit
from .math import BIG, affine_point, affine_vector, vec2, vec3

STACK = 64
vec4 = ti.types.vector(WIDTH, float)
_SORT4 = ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2))   # descending network over 4 keys


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
def ray_triangle_adjoint(v0, v1, v2, o, d, t, b1, b2, g):
    """Adjoint of the hit (t, b1, b2) of ray o + t d on triangle (v0, v1, v2), defined by
    o + t d = v0 + b1 (v1 - v0) + b2 (v2 - v0): ∂/∂(v0, v1, v2, o, d) of <g, (t, b1, b2)>. With
    A = [d, -e1, -e2], A (dt, db1, db2) = b0 dv0 + b1 dv1 + b2 dv2 - do - t dd, so λ = A⁻ᵀ g gives
    (b0 λ, b1 λ, b2 λ, -λ, -t λ)."""
    e1 = v1 - v0
    e2 = v2 - v0
    A = ti.Matrix.cols([d, -e1, -e2])
    lam = vec3(0.0)
    det = A.determinant()
    if det != 0.0:
        lam = A.transpose().inverse() @ g
    b0 = 1.0 - b1 - b2
    return b0 * lam, b1 * lam, b2 * lam, -lam, -t * lam


@ti.func
def safe_inv(d):
    """1/d per component, ±1e30 where |d| ≤ 1e-30 (slab tests of axis-parallel rays)."""
    r = vec3(0.0)
    for k in ti.static(range(3)):
        r[k] = 1.0 / d[k] if ti.abs(d[k]) > 1e-30 else (1e30 if d[k] >= 0.0 else -1e30)
    return r


@ti.func
def child_entries(st: ti.template(), e, o, inv_d, tmax, sort: ti.template()):
    """The ray o + t d (inv_d = safe_inv(d)) against the 4 child boxes of wide node e at once (vector
    lanes): (key, slot), key[j] the entry distance of child slot[j]'s box within (0, tmax], BIG where the
    ray misses it; with sort, ordered far to near (a sorting network), so that pushing them in order
    pops the nearest first."""
    bmin = st.wnode_min[e]
    bmax = st.wnode_max[e]
    tnear = vec4(0.0)
    tfar = vec4(tmax)
    for a in ti.static(range(3)):
        lo = vec4([bmin[a * WIDTH + j] for j in ti.static(range(WIDTH))])
        hi = vec4([bmax[a * WIDTH + j] for j in ti.static(range(WIDTH))])
        t0 = (lo - o[a]) * inv_d[a]
        t1 = (hi - o[a]) * inv_d[a]
        tnear = ti.max(tnear, ti.min(t0, t1))
        tfar = ti.min(tfar, ti.max(t0, t1))
    key = vec4(BIG)
    for j in ti.static(range(WIDTH)):
        if tnear[j] <= tfar[j] * 1.00000024:
            key[j] = tnear[j]
    slot = ti.Vector([j for j in ti.static(range(WIDTH))], dt=ti.i32)
    if ti.static(sort):
        for i, j in ti.static(_SORT4):
            if key[i] < key[j]:
                key[i], key[j] = key[j], key[i]
                slot[i], slot[j] = slot[j], slot[i]
    return key, slot


@ti.func
def push_children(st: ti.template(), e, key, slot, stack: ti.template(), leaf_n: ti.template(), near: ti.template(),
                  sp):
    """Push the children of wide node e that a ray enters (key[j] < BIG, at entry distance key[j], in the order of
    slot) onto the traversal stack at depth sp: an inner child as its node id, a leaf as -1 - its first row with its
    row count in leaf_n; near: the entry distances. Returns the new depth (at most STACK)."""
    child = st.wnode_child[e]
    count = st.wnode_count[e]
    for j in ti.static(range(WIDTH)):
        if key[j] < BIG and sp < STACK:
            c = slot[j]
            near[sp] = key[j]
            if count[c] > 0:
                stack[sp] = -1 - child[c]
                leaf_n[sp] = count[c]
            else:
                stack[sp] = child[c]
            sp += 1
    return sp


@ti.func
def traverse(st: ti.template(), root, o, d, tmax, any_hit: ti.template(), top: ti.template()):
    """Stack traversal of the 4-wide BVH from wide node `root`: the ray is tested against a node's 4 child boxes
    at once (vector lanes), the children hit are pushed far to near (in any order for any-hit queries, which visit
    every overlapping child unless they stop), leaves are tested when popped. Closest hit (tri, t, b1, b2, inst)
    along o + t d, t in (0, tmax); with any_hit, stops at the first hit found. tri = -1 on a miss.

    top: the scene's top-level tree, whose instance primitives (core/implicit.py) are entered by traversing their
    group's tree (root geo_off) with the ray in the group's space (t is the same); inst is the instance's record
    for a hit inside one, else -1. Groups hold no instances (as in Mitsuba), so the nested traversal stops there."""
    inv_d = safe_inv(d)
    best_t = tmax
    best = -1
    inst = -1
    bb = vec2(0.0)
    # stack entries: a wide node (>= 0) or a leaf ~first (< 0) with its triangle count in `leaf_n`,
    # and the entry distance of its box (skipped when popped behind a hit found meanwhile)
    stack = ti.Vector([0] * STACK, dt=ti.i32)
    leaf_n = ti.Vector([0] * STACK, dt=ti.i32)
    near = ti.Vector([0.0] * STACK)
    stack[0] = root
    sp = 1
    while sp > 0:
        sp -= 1
        e = stack[sp]
        if near[sp] > best_t * 1.00000024:
            pass
        elif e >= 0:
            key, slot = child_entries(st, e, o, inv_d, best_t, not any_hit)   # any hit: every overlapping child
            sp = push_children(st, e, key, slot, stack, leaf_n, near, sp)    # is visited anyway, unsorted
        else:
            first = -1 - e
            for k in range(first, first + leaf_n[sp]):
                t, b1, b2 = ray_triangle(st, k, o, d)
                if ti.static(st.sdf_grids or st.quadrics or (top and st.instances)):
                    if t == BIG:                      # a box primitive (core/implicit.py)
                        r = implicit.geo_of(st, k)
                        if r >= 0:
                            if ti.static(top and st.instances):
                                if st.geo_kind[r] == implicit.INSTANCE:
                                    m = st.geo_to_obj[r]
                                    k2, t2, c1, c2, _ = traverse(st, st.geo_off[r], affine_point(m, o),
                                                                 affine_vector(m, d), best_t, any_hit, False)
                                    if k2 >= 0 and t2 < best_t:
                                        best_t = t2
                                        best = k2
                                        bb = vec2(c1, c2)
                                        inst = r
                                else:
                                    t = implicit.ray_prim(st, k, r, o, d)
                            else:
                                t = implicit.ray_prim(st, k, r, o, d)
                if t < best_t:
                    best_t = t
                    best = k
                    bb = vec2(b1, b2)
                    inst = -1
            if ti.static(any_hit):
                if best >= 0:
                    sp = 0
    return best, best_t, bb[0], bb[1], inst


@ti.func
def intersect(st: ti.template(), o, d, tmax):
    """Closest hit along o + t d, t in (0, tmax). Returns (tri, t, b1, b2, inst); tri = -1 on a miss; inst: the
    instance record of a hit inside an instance (core/implicit.py), else -1 (make_interaction takes it)."""
    return traverse(st, 0, o, d, tmax, False, True)


@ti.func
def occluded(st: ti.template(), o, d, tmax):
    """True if anything is hit along o + t d for t in (0, tmax) (any-hit traversal)."""
    tri, t, b1, b2, inst = traverse(st, 0, o, d, tmax, True, True)
    return tri >= 0
