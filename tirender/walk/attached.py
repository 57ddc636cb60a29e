"""Attached derivatives of a walk (issue 16): how a path's vertices move when the geometry moves.

A ray (o, d) hits a triangle at p with shading normal n; the next ray leaves p along a direction
that, for Dirac lobes, is a function of d and n. Reverse mode over one vertex: given ∂loss/∂(o', d')
of the ray leaving the vertex (and ∂/∂p of the vertex's own terms), ``scatter_adjoint`` takes the
outgoing direction's share to (∂/∂d, ∂/∂n) and ``hit_adjoint`` takes (∂/∂p, ∂/∂n) to the arriving
ray (∂/∂o, ∂/∂d) and — for triangles that move (height fields) — into the parameters that move
them. Integrators carry (λo, λd) backwards along a path by replaying it (integrators/ptracer.py).
"""
import taichi as ti

from ..core.interaction import interaction_adjoint
from ..core.math import vec2, vec3
from ..core.optics import reflect_adjoint, refract_adjoint
from ..scene import heightfield


@ti.dataclass
class Stop:
    """The vertex a replay stops at: valid (1: reached), its hit (tri, t, barycentrics b) of the ray
    (o, d) arriving at it, and the adjoints gathered there: g_p (its position: the next ray's origin,
    its own connections), g_n (its shading normal), g_d (the arriving direction, through the
    scattering)."""
    valid: ti.i32
    tri: ti.i32
    t: float
    b: vec2
    o: vec3
    d: vec3
    g_p: vec3
    g_n: vec3
    g_d: vec3


@ti.func
def stop_adjoint(st: ti.template(), s):
    """(λo, λd) of the ray arriving at the stop vertex s (zero if it was not reached)."""
    lo = vec3(0.0)
    ld = vec3(0.0)
    if s.valid == 1:
        lo, ld = hit_adjoint(st, s.tri, s.t, s.b[0], s.b[1], s.o, s.d, s.g_p, s.g_n)
        ld += s.g_d
    return lo, ld


@ti.func
def scatter_adjoint(v, d, bs, lam_d):
    """(∂/∂d, ∂/∂n) of <lam_d, wo> for the world direction wo sampled at v from direction of travel d:
    Dirac reflection (about the shading normal) and refraction (Snell, relative IOR 1 / bs.eta) move
    with d and n; a pass-through (null) lobe keeps wo = d; other lobes sample wo in the local frame,
    held fixed in world space (frames of static receivers)."""
    g_d = vec3(0.0)
    g_n = vec3(0.0)
    if bs.valid == 1 and bs.delta == 1:
        if bs.null == 1:
            g_d = lam_d
        elif bs.wo.dot(v.ng) * d.dot(v.ng) < 0.0:
            g_d, g_n = reflect_adjoint(d, v.n, lam_d)
        else:
            sgn = 1.0 if d.dot(v.n) < 0.0 else -1.0
            gd, gnf, _ge = refract_adjoint(d, v.n * sgn, 1.0 / bs.eta, lam_d)
            g_d = gd
            g_n = gnf * sgn
    return g_d, g_n


@ti.func
def hit_adjoint(st: ti.template(), tri, t, b1, b2, o, d, g_p, g_n):
    """(∂/∂o, ∂/∂d) of the incoming ray for <g_p, p> + <g_n, n> at a hit; a height-field triangle's
    corners scatter ∂/∂(heights) into the pool (scene/heightfield.py)."""
    g_o, g_d, gv0, gv1, gv2, gn0, gn1, gn2 = interaction_adjoint(st, tri, t, b1, b2, o, d, g_p, g_n)
    hf = st.tri_hf[tri]
    if hf >= 0:
        for k in range(3):       # a run-time loop: one inlined corner adjoint
            gv = gv0
            gn = gn0
            if k == 1:
                gv, gn = gv1, gn1
            elif k == 2:
                gv, gn = gv2, gn2
            heightfield.corner_adjoint(st, hf >> 1, st.tri_code[tri][k], hf & heightfield.TOP, gv, gn)
    return g_o, g_d
