"""Attached derivatives of a walk (issue 16): how a path's vertices move when the geometry moves.

A ray (o, d) hits a triangle at p (texture coordinates uv) with shading frame (s, t, n); the next
ray leaves p along a direction that, for Dirac lobes, is a function of d and the lobe normal
n_d = s n'_x + t n'_y + n n'_z (n' = (0, 0, 1), or a normal map's perturbed normal, which depends on
its texels and on uv). Reverse mode over one vertex: given ∂loss/∂(o', d') of the ray leaving the
vertex (and ∂/∂p, ∂/∂uv of the vertex's own terms), ``scatter_adjoint`` takes the outgoing
direction's share to (∂/∂d, ∂/∂n_d), ``lobe_normal_adjoint`` takes ∂/∂n_d into the normal map's
texels and to (∂/∂n, ∂/∂uv), and ``hit_adjoint`` takes (∂/∂p, ∂/∂n, ∂/∂uv) to the arriving ray
(∂/∂o, ∂/∂d) and — for triangles that move (height fields, differentiable meshes) — into the
parameters that move them.
Near-specular (rough microfacet) vertices sampled attached: ``rough_scatter_adjoint``.
Integrators carry (λo, λd) backwards along a path by replaying it (integrators/ptracer.py,
integrators/prb_attached.py).
"""
import taichi as ti

from ..core.interaction import frame_adjoint, interaction_adjoint, make_interaction
from ..core.math import affine_point, affine_vector, affine_vector_t, to_local, to_world, vec2, vec3
from ..core.optics import normalize_adjoint, reflect_adjoint, refract_adjoint
from ..scene import deform, heightfield, triangles


@ti.dataclass
class Stop:
    """The vertex a replay stops at: valid (1: reached), its hit (tri, t, barycentrics b; inst: the instance
    record it lies in, -1 none) of the ray (o, d) arriving at it, and the adjoints gathered there: g_p (its
    position: the next ray's origin, its own connections), g_n (its shading normal), g_uv (its texture
    coordinates: textures seen at a moving point), g_d (the arriving direction, through the scattering)."""
    valid: ti.i32
    tri: ti.i32
    inst: ti.i32
    t: float
    b: vec2
    o: vec3
    d: vec3
    g_p: vec3
    g_n: vec3
    g_uv: vec2
    g_d: vec3


@ti.func
def stop_adjoint(st: ti.template(), s):
    """(λo, λd) of the ray arriving at the stop vertex s (zero if it was not reached). A hit inside instance record
    s.inst (a group stored once, static) is differentiated in the group's space: the ray and the adjoints are taken
    there (o' = A o + a, d' = A d; p = M p' + m; n = normalize(N n'), N the normal matrix) and the ray's adjoints
    back (Aᵀ); hit_adjoint is inlined once either way."""
    lo = vec3(0.0)
    ld = vec3(0.0)
    if s.valid == 1:
        o, d, g_p, g_n = s.o, s.d, s.g_p, s.g_n
        if ti.static(st.instances):
            if s.inst >= 0:
                a = st.geo_to_obj[s.inst]
                o = affine_point(a, s.o)
                d = affine_vector(a, s.d)
                nm = st.geo_nm[s.inst]
                n = make_interaction(st, s.tri, s.t, s.b[0], s.b[1], o, d, -1).n
                g_n = nm.transpose() @ normalize_adjoint(nm @ n, s.g_n)
                g_p = affine_vector_t(st.geo_to_world[s.inst], s.g_p)
        lo, ld = hit_adjoint(st, s.tri, s.t, s.b[0], s.b[1], o, d, g_p, g_n, s.g_uv)
        if ti.static(st.instances):
            if s.inst >= 0:
                a = st.geo_to_obj[s.inst]
                lo = affine_vector_t(a, lo)
                ld = affine_vector_t(a, ld)
        ld += s.g_d
    return lo, ld


@ti.func
def frame_tri(st: ti.template(), tri, inst):
    """The triangle whose uvs turn a vertex's shading frame (core.interaction.frame_adjoint): tri, or -1 for a hit
    inside an instance (its triangle lies in the group's space: the frame turns by the least rotation)."""
    res = tri
    if ti.static(st.instances):
        if inst >= 0:
            res = -1
    return res


@ti.func
def lobe_normal(st: ti.template(), bsdf: ti.template(), v):
    """The world normal n_d the Dirac lobes of surface vertex v reflect and refract about."""
    return to_world(v.s, v.t, v.n, bsdf.dirac_normal(st, v.ctx, v.wi))


@ti.func
def lobe_normal_adjoint(st: ti.template(), bsdf: ti.template(), v, tri, g_nd):
    """Scatter ∂<g_nd, n_d>/∂(normal-map texels) into the pool; returns (∂/∂n, ∂/∂uv) of <g_nd, n_d>
    for n_d = s n'_x + t n'_y + n n'_z (the frame through core.interaction.frame_adjoint)."""
    nl = bsdf.dirac_normal(st, v.ctx, v.wi)
    g_uv = bsdf.dirac_normal_adjoint(st, v.ctx, v.wi, vec3(g_nd.dot(v.s), g_nd.dot(v.t), g_nd.dot(v.n)))
    g_n = nl[2] * g_nd + frame_adjoint(st, tri, v.n, v.s, nl[0] * g_nd, nl[1] * g_nd)
    return g_n, g_uv


@ti.func
def scatter_adjoint(v, nd, d, bs, lam_d):
    """(∂/∂d, ∂/∂n_d, ∂/∂η_ti) of <lam_d, wo> for the world direction wo sampled at v from direction
    of travel d: Dirac reflection (about the lobe normal n_d, see lobe_normal) and refraction (Snell,
    IOR ratio η_ti = 1 / bs.eta) move with d and n_d (refraction also with η_ti: a dielectric's
    ``dirac_ior_adjoint`` takes it on); a pass-through (null) lobe keeps wo = d; other lobes sample wo
    in the local frame, held fixed in world space (detached)."""
    g_d = vec3(0.0)
    g_n = vec3(0.0)
    g_r = 0.0
    if bs.valid == 1 and bs.delta == 1:
        if bs.null == 1:
            g_d = lam_d
        elif bs.wo.dot(v.ng) * d.dot(v.ng) < 0.0:
            g_d, g_n = reflect_adjoint(d, nd, lam_d)
        else:
            sgn = 1.0 if d.dot(nd) < 0.0 else -1.0
            gd, gnf, g_r = refract_adjoint(d, nd * sgn, 1.0 / bs.eta, lam_d)
            g_d = gd
            g_n = gnf * sgn
    return g_d, g_n, g_r


@ti.func
def rough_scatter_adjoint(st: ti.template(), bsdf: ti.template(), v, tri, d, wo, d_out, k, lam_d):
    """Attached sampling at a near-specular vertex v (bsdfs/halfwarp.py): the sampled world wo
    (arriving direction of travel d) is held as a microfacet normal of its lobe, so it moves with
    d, with the shading frame (s, t, n), with a normal map's texels and with α. Scatters the whole
    ∂/∂π of <d_out, f> + k ln J + <lam_d, wo> into the pool (BSDF parameters, normal-map texels)
    and returns its (∂/∂d, ∂/∂n, ∂/∂uv); wi = -d and wo in the frame (s, t, n), which turns with n
    (core.interaction.frame_adjoint)."""
    wol = to_local(v.s, v.t, v.n, wo)
    g_wi, g_uv = bsdf.attached_adjoint(st, v.ctx, v.wi, wol, d_out, k, to_local(v.s, v.t, v.n, lam_d))
    g_d = -to_world(v.s, v.t, v.n, g_wi)
    # wi = (s·(-d), t·(-d), n·(-d)), wo = s wol_x + t wol_y + n wol_z
    g_s = wol[0] * lam_d - g_wi[0] * d
    g_t = wol[1] * lam_d - g_wi[1] * d
    g_n = wol[2] * lam_d - g_wi[2] * d + frame_adjoint(st, tri, v.n, v.s, g_s, g_t)
    return g_d, g_n, g_uv


@ti.func
def hit_adjoint(st: ti.template(), tri, t, b1, b2, o, d, g_p, g_n, g_uv):
    """(∂/∂o, ∂/∂d) of the incoming ray for <g_p, p> + <g_n, n> + <g_uv, uv> at a hit; a height-field
    triangle's corners scatter ∂/∂(heights) into the pool (scene/heightfield.py), a differentiable
    mesh's into its world vertices (scene/deform.py)."""
    g_o, g_d, gv0, gv1, gv2, gn0, gn1, gn2 = interaction_adjoint(st, tri, t, b1, b2, o, d, g_p, g_n, g_uv)
    hf = triangles.tri_hf(st, tri)
    if hf >= 0 or triangles.tri_dm(st, tri) >= 0:
        for k in range(3):       # a run-time loop: one inlined corner adjoint
            gv = gv0
            gn = gn0
            if k == 1:
                gv, gn = gv1, gn1
            elif k == 2:
                gv, gn = gv2, gn2
            if hf >= 0:
                heightfield.corner_adjoint(st, hf >> 1, st.tri_code[tri][k], hf & heightfield.TOP, gv, gn)
            else:
                deform.corner_adjoint(st, tri, k, gv, gn)
    return g_o, g_d


@ti.func
def local_adjoint(st: ti.template(), bsdf: ti.template(), v, tri, d, wo, d_out):
    """A non-Dirac vertex v reached along d, with its sampled world direction wo held fixed
    (ray-following, integrators/edges.py): (∂/∂d, ∂/∂n, ∂/∂wo) of <d_out, f(wi, wo) |cos θo|> with
    wi = to_local(-d), wo in the shading frame (s, t, n), which turns with n
    (core.interaction.frame_adjoint) — the BSDF's own direction derivatives (``grad_dirs``); ∂/∂wo (world, the
    frame held) for a wo that is not held: towards a light at a point (prb_attached)."""
    wi_w = -d
    gwi, gwo = bsdf.grad_dirs(st, v.ctx, v.wi, to_local(v.s, v.t, v.n, wo), d_out)
    g_d = -to_world(v.s, v.t, v.n, gwi)
    g_s = gwi[0] * wi_w + gwo[0] * wo
    g_t = gwi[1] * wi_w + gwo[1] * wo
    g_n = gwi[2] * wi_w + gwo[2] * wo + frame_adjoint(st, tri, v.n, v.s, g_s, g_t)
    return g_d, g_n, to_world(v.s, v.t, v.n, gwo)
