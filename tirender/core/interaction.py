"""Surface interactions: hit point, geometric and shading frames, uv, from a BVH hit."""
import taichi as ti

from . import implicit
from .intersect import ray_triangle_adjoint
from .math import affine_point, affine_vector, coordinate_system, tangent_frame, vec2, vec3
from .optics import normalize_adjoint


@ti.dataclass
class SurfaceInteraction:
    """valid: 1 on a hit; p: position; ng: geometric normal (from the winding); n, ss, ts:
    shading frame (n interpolated from vertex normals when the shape has them; s along dp/du where
    the triangle has uvs); uv; dpdu, dpdv: the position's derivatives w.r.t. uv (world length per
    unit uv; without uvs, or for a degenerate uv triangle, coordinate_system(ng) as Mitsuba's mesh);
    tri, shape: indices; bary: the hit's barycentrics (b1, b2); t: ray distance."""
    valid: ti.i32
    t: float
    p: vec3
    ng: vec3
    n: vec3
    ss: vec3
    ts: vec3
    uv: vec2
    dpdu: vec3
    dpdv: vec3
    tri: ti.i32
    shape: ti.i32
    bary: vec2


@ti.func
def no_interaction():
    """The interaction of a miss (valid = 0)."""
    return SurfaceInteraction(valid=0, tri=-1, shape=-1)


@ti.func
def make_interaction(st: ti.template(), tri, t, b1, b2, o, d, inst):
    """The interaction at the hit (tri, t, b1, b2, inst) of the ray o + t d (core/intersect.intersect); tri = -1:
    none. On storages with quadrics or SDF grids, a primitive of theirs is core/implicit.py's; a hit inside an
    instance (inst >= 0) is made in its group's space and mapped to world space."""
    oo = o
    dd = d
    if ti.static(st.instances):
        if inst >= 0:
            oo = affine_point(st.geo_to_obj[inst], o)
            dd = affine_vector(st.geo_to_obj[inst], d)
    si = triangle_interaction(st, tri, t, b1, b2, -dd)
    if ti.static(st.sdf_grids or st.quadrics):
        if tri >= 0:
            r = implicit.geo_of(st, tri)
            if r >= 0:
                si = implicit_interaction(st, r, tri, t, oo, dd)
    if ti.static(st.instances):
        if inst >= 0:
            si = instance_interaction(st, inst, si)
    return si


@ti.func
def geometric_normal(st: ti.template(), tri, inst, o, d, t):
    """The geometric normal at the hit (tri, inst) t along o + t d (a triangle's from its winding)."""
    ng = vec3(0.0)
    if ti.static(st.sdf_grids or st.quadrics or st.instances):
        ng = make_interaction(st, tri, t, 0.0, 0.0, o, d, inst).ng
    else:
        ng = st.tri_e1[tri].cross(st.tri_e2[tri]).normalized()
    return ng


@ti.func
def instance_interaction(st: ti.template(), r, si):
    """si (in the group space of instance record r) mapped to world space: points and derivatives by to_world,
    normals by its normal matrix, the shading tangent kept orthogonal to the normal."""
    m = st.geo_to_world[r]
    nm = st.geo_nm[r]
    si.p = affine_point(m, si.p)
    si.ng = (nm @ si.ng).normalized()
    si.n = (nm @ si.n).normalized()
    si.dpdu = affine_vector(m, si.dpdu)
    si.dpdv = affine_vector(m, si.dpdv)
    si.ss, si.ts = tangent_frame(si.n, affine_vector(m, si.ss))
    return si


@ti.func
def implicit_interaction(st: ti.template(), r, tri, t, o, d):
    """The interaction on record r (primitive tri) at distance t along o + t d (core/implicit.py)."""
    p, ng, n, s, ts, uv, dpdu, dpdv = implicit.interaction(st, r, o + t * d)
    return SurfaceInteraction(valid=1, t=t, p=p, ng=ng, n=n, ss=s, ts=ts, uv=uv, dpdu=dpdu, dpdv=dpdv,
                              tri=tri, shape=st.tri_shape[tri], bary=vec2(0.0))


# Shapes whose interpolated normals turn towards the viewer at their shading horizon (storage shape_smooth)
FLAT, SMOOTH, SMOOTH_BENT = 0, 1, 2
HORIZON_EPS = 0.01      # cos θo of a bent shading normal (horizon_bend)


@ti.func
def horizon_bend(n, ng, wo):
    """The shading normal n (unit) bent towards wo (the direction back along the arriving ray) where it turns
    away from it on wo's side of the surface (geometric normal ng): with σ = sign(wo·ng) and c = σ n·wo, where
    c < ε (HORIZON_EPS), n' = normalize(m), m = n + σ (ε − c) wo = n − (n·wo) wo + σ ε wo (σ m·wo = ε |wo|²);
    else n. Continuous in n and wo, so a one-sided BSDF's cut-off (cos θo ≤ 0) no longer draws a line inside a
    smooth-shaded facet that moves with the vertices (docs/geometry.md, "Smooth shading near silhouettes"):
    the only discontinuities left are edges, which edge sampling sees. Used for curve tubes (SMOOTH_BENT), whose
    reference is Mitsuba's round tube, shaded up to its silhouette."""
    sgn = 1.0 if wo.dot(ng) >= 0.0 else -1.0
    c = sgn * n.dot(wo)
    out = n
    if c < HORIZON_EPS:
        out = (n + sgn * (HORIZON_EPS - c) * wo).normalized()
    return out


@ti.func
def horizon_bend_adjoint(n, ng, wo, g_out):
    """(∂/∂n, ∂/∂wo) of <g_out, horizon_bend(n, ng, wo)> (ng only chooses the side: held)."""
    sgn = 1.0 if wo.dot(ng) >= 0.0 else -1.0
    c = sgn * n.dot(wo)
    g_n = g_out
    g_wo = vec3(0.0)
    if c < HORIZON_EPS:
        m = n + sgn * (HORIZON_EPS - c) * wo
        g_m = normalize_adjoint(m, g_out)
        g_n = g_m - wo * wo.dot(g_m)
        g_wo = (sgn * HORIZON_EPS - n.dot(wo)) * g_m - n * wo.dot(g_m)
    return g_n, g_wo


@ti.func
def triangle_interaction(st: ti.template(), tri, t, b1, b2, wo):
    """The interaction on triangle tri at barycentrics (b1, b2), distance t (tri = -1: not valid), reached from
    direction wo (-d of the arriving ray: a SMOOTH_BENT shape's normal is bent towards it, horizon_bend)."""
    si = no_interaction()
    if tri >= 0:
        b0 = 1.0 - b1 - b2
        e1 = st.tri_e1[tri]
        e2 = st.tri_e2[tri]
        si.valid = 1
        si.t = t
        si.tri = tri
        si.bary = vec2(b1, b2)
        si.shape = st.tri_shape[tri]
        si.p = st.tri_p0[tri] + b1 * e1 + b2 * e2
        ng = e1.cross(e2).normalized()
        si.ng = ng
        n = ng
        smooth = st.shape_smooth[si.shape]
        if smooth != FLAT:
            nn = b0 * st.tri_n0[tri] + b1 * st.tri_n1[tri] + b2 * st.tri_n2[tri]
            ln = nn.norm()
            if ln > 1e-12:
                n = nn / ln
                if smooth == SMOOTH_BENT:
                    n = horizon_bend(n, ng, wo)
        uv0 = st.tri_uv0[tri]
        du1 = st.tri_uv1[tri] - uv0
        du2 = st.tri_uv2[tri] - uv0
        si.uv = uv0 + b1 * du1 + b2 * du2
        det = du1[0] * du2[1] - du1[1] * du2[0]
        dpdu = vec3(0.0)
        dpdv = vec3(0.0)
        has_uv = ti.abs(det) > 1e-20
        if has_uv:
            dpdu = (du2[1] * e1 - du1[1] * e2) / det
            dpdv = (du1[0] * e2 - du2[0] * e1) / det
        else:
            dpdu, dpdv = coordinate_system(ng)
        si.dpdu = dpdu
        si.dpdv = dpdv
        si.n = n
        # the shading tangent along dp/du where the triangle has uvs (Mitsuba's sh_frame for meshes with uv)
        si.ss, si.ts = tangent_frame(n, ti.select(has_uv, dpdu, vec3(0.0)))
    return si


@ti.func
def interaction_adjoint(st: ti.template(), tri, t, b1, b2, o, d, g_p, g_n, g_uv):
    """Adjoint of make_interaction's hit point, shading normal and uv w.r.t. the ray and the triangle (world-space
    hits: not inside an instance): returns (∂/∂o, ∂/∂d, ∂/∂(v0, v1, v2), ∂/∂(n0, n1, n2)) of <g_p, p> + <g_n, n>
    + <g_uv, uv> (triangle_adjoint; a quadric's or an SDF grid's hit: core/implicit.hit_adjoint, no vertices)."""
    z = vec3(0.0)
    g_o, g_d, gv0, gv1, gv2, gn0, gn1, gn2 = z, z, z, z, z, z, z, z
    if ti.static(st.sdf_grids or st.quadrics):
        r = implicit.geo_of(st, tri)
        if r >= 0:
            g_o, g_d = implicit.hit_adjoint(st, r, t, o, d, g_p, g_n, g_uv)
        else:
            g_o, g_d, gv0, gv1, gv2, gn0, gn1, gn2 = triangle_adjoint(st, tri, t, b1, b2, o, d, g_p, g_n, g_uv)
    else:
        g_o, g_d, gv0, gv1, gv2, gn0, gn1, gn2 = triangle_adjoint(st, tri, t, b1, b2, o, d, g_p, g_n, g_uv)
    return g_o, g_d, gv0, gv1, gv2, gn0, gn1, gn2


@ti.func
def triangle_adjoint(st: ti.template(), tri, t, b1, b2, o, d, g_p, g_n, g_uv):
    """Adjoint of make_interaction's hit point p = o + t d, shading normal n (the normalised
    interpolated vertex normals, or the geometric normal normalize(e1 × e2)) and texture coordinates
    uv (interpolated) w.r.t. the ray and the triangle: returns (∂/∂o, ∂/∂d, ∂/∂(v0, v1, v2),
    ∂/∂(n0, n1, n2)) of <g_p, p> + <g_n, n> + <g_uv, uv> (the triangle's vertex positions and normals
    in world space; attached derivatives, issue 16). A SMOOTH_BENT normal's bend moves with n and d."""
    e1 = st.tri_e1[tri]
    e2 = st.tri_e2[tri]
    v0 = st.tri_p0[tri]
    b0 = 1.0 - b1 - b2
    g_t = g_p.dot(d)
    uv0 = st.tri_uv0[tri]
    g_b1 = g_uv.dot(st.tri_uv1[tri] - uv0)
    g_b2 = g_uv.dot(st.tri_uv2[tri] - uv0)
    gv0 = vec3(0.0)
    gv1 = vec3(0.0)
    gv2 = vec3(0.0)
    gn0 = vec3(0.0)
    gn1 = vec3(0.0)
    gn2 = vec3(0.0)
    g_db = vec3(0.0)
    smooth = False
    kind = st.shape_smooth[st.tri_shape[tri]]
    if kind != FLAT:
        n0 = st.tri_n0[tri]
        n1 = st.tri_n1[tri]
        n2 = st.tri_n2[tri]
        nn = b0 * n0 + b1 * n1 + b2 * n2
        if nn.norm() > 1e-12:
            smooth = True
            g_ni = g_n
            if kind == SMOOTH_BENT:
                g_ni, g_wo = horizon_bend_adjoint(nn.normalized(), e1.cross(e2).normalized(), -d, g_n)
                g_db = -g_wo
            g_nn = normalize_adjoint(nn, g_ni)
            gn0 = b0 * g_nn
            gn1 = b1 * g_nn
            gn2 = b2 * g_nn
            g_b1 += g_nn.dot(n1 - n0)
            g_b2 += g_nn.dot(n2 - n0)
    if not smooth:
        g_c = normalize_adjoint(e1.cross(e2), g_n)
        g_e1 = e2.cross(g_c)
        g_e2 = g_c.cross(e1)
        gv1 = g_e1
        gv2 = g_e2
        gv0 = -g_e1 - g_e2
    a0, a1, a2, g_o, g_d = ray_triangle_adjoint(v0, v0 + e1, v0 + e2, o, d, t, b1, b2, vec3(g_t, g_b1, g_b2))
    return g_o + g_p, g_d + t * g_p + g_db, gv0 + a0, gv1 + a1, gv2 + a2, gn0, gn1, gn2


@ti.func
def frame_adjoint(st: ti.template(), tri, n, s, g_s, g_t):
    """∂/∂n of <g_s, s> + <g_t, t> for make_interaction's shading tangents s = normalize(dp/du -
    n (n·dp/du)), t = n × s, dp/du held (triangles with uvs: the triangle's; a quadric's or an SDF grid's hit:
    s itself, which is orthogonal to n there: the frame turns with n by the least rotation; so too for tri = -1,
    a hit inside an instance, whose triangle is in its group's space). Triangles without uvs (tangents from
    coordinate_system(n)) return 0: their frame's rotation about n is arbitrary."""
    g_n = vec3(0.0)
    dpdu = vec3(0.0)
    if tri < 0:
        dpdu = s
    elif ti.static(st.sdf_grids or st.quadrics):
        if implicit.geo_of(st, tri) >= 0:
            dpdu = s
    if dpdu.norm_sqr() == 0.0 and tri >= 0:
        uv0 = st.tri_uv0[tri]
        du1 = st.tri_uv1[tri] - uv0
        du2 = st.tri_uv2[tri] - uv0
        det = du1[0] * du2[1] - du1[1] * du2[0]
        if ti.abs(det) > 1e-20:
            dpdu = (du2[1] * st.tri_e1[tri] - du1[1] * st.tri_e2[tri]) / det
    u = dpdu - n * n.dot(dpdu)
    lu = u.norm()
    if lu > 1e-12:
        su = u / lu
        g_n += su.cross(g_t)                        # t = n × s
        gs = g_s + g_t.cross(n)
        g_u = normalize_adjoint(u, gs)
        g_n += -n.dot(dpdu) * g_u - dpdu * n.dot(g_u)
    return g_n


@ti.func
def to_local(si, v):
    return vec3(v.dot(si.ss), v.dot(si.ts), v.dot(si.n))


@ti.func
def to_world(si, v):
    return si.ss * v[0] + si.ts * v[1] + si.n * v[2]


@ti.func
def spawn_origin(st: ti.template(), si, d):
    """Ray origin offset off the surface along the geometric normal, on the side of d."""
    eps = st.info_f[0] * (1.0 + ti.max(ti.abs(si.p).max(), 0.0))
    sgn = 1.0 if si.ng.dot(d) >= 0.0 else -1.0
    return si.p + si.ng * (eps * sgn)
