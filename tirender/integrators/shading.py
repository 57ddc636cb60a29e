"""BSDF evaluation at a surface interaction: texture lookups into BsdfParams (and the adjoint
that scatters BsdfParams gradients back into the textures), two-sided flipping and normal maps."""
import taichi as ti

from ..bsdfs.common import BsdfParams
from ..bsdfs import dispatch as bsdf
from ..core.math import coordinate_system, to_local, vec3
from ..scene.description import SLOT_NORMALMAP, SLOT_REFLECTANCE, SLOT_ROUGHNESS, SLOT_SPECULAR, SLOT_TRANSMITTANCE
from ..textures import tex_eval, tex_eval_adjoint, tex_eval_scalar, tex_eval_scalar_adjoint


@ti.func
def bsdf_params(st: ti.template(), b, uv):
    p = BsdfParams()
    p.reflectance = tex_eval(st, st.bsdf_tex[b, SLOT_REFLECTANCE], uv)
    p.specular = tex_eval(st, st.bsdf_tex[b, SLOT_SPECULAR], uv)
    p.transmittance = tex_eval(st, st.bsdf_tex[b, SLOT_TRANSMITTANCE], uv)
    p.alpha = ti.max(tex_eval_scalar(st, st.bsdf_tex[b, SLOT_ROUGHNESS], uv), 1e-4)
    p.eta = st.bsdf_eta[b]
    p.cond_eta = st.bsdf_cond_eta[b]
    p.cond_k = st.bsdf_cond_k[b]
    p.cond_none = st.bsdf_cond_none[b]
    return p


@ti.func
def bsdf_params_adjoint(st: ti.template(), b, uv, g):
    """Scatter a BsdfParams gradient g (reflectance, specular, transmittance, alpha) into the pool."""
    tex_eval_adjoint(st, st.bsdf_tex[b, SLOT_REFLECTANCE], uv, g.reflectance)
    tex_eval_adjoint(st, st.bsdf_tex[b, SLOT_SPECULAR], uv, g.specular)
    tex_eval_adjoint(st, st.bsdf_tex[b, SLOT_TRANSMITTANCE], uv, g.transmittance)
    tex_eval_scalar_adjoint(st, st.bsdf_tex[b, SLOT_ROUGHNESS], uv, g.alpha)


@ti.func
def shading_frame(st: ti.template(), b, si, wi_world):
    """Shading frame (s, t, n) used by the BSDF at si: the normal map (if any) perturbs n;
    two-sided BSDFs flip the frame to the side of wi_world."""
    n = si.n
    s = si.ss
    t = si.ts
    nm = st.bsdf_tex[b, SLOT_NORMALMAP]
    if nm >= 0:
        c = tex_eval(st, nm, si.uv) * 2.0 - 1.0
        nw = (s * c[0] + t * c[1] + n * c[2])
        ln = nw.norm()
        if ln > 1e-12:
            n = nw / ln
            tp = si.dpdu - n * n.dot(si.dpdu)
            if tp.norm() > 1e-12:
                s = tp.normalized()
                t = n.cross(s)
            else:
                s, t = coordinate_system(n)
    if st.bsdf_twosided[b] == 1 and wi_world.dot(n) < 0.0:
        n = -n
        t = -t
    return s, t, n


@ti.func
def normalmap_frame_adjoint(st: ti.template(), b, si, d_n):
    """Adjoint of the normal-map frame w.r.t. the map's texels, given d_n = ∂(objective)/∂n
    (the perturbed world-space shading normal). n = normalize(S c'), c' = 2c - 1."""
    nm = st.bsdf_tex[b, SLOT_NORMALMAP]
    if nm >= 0:
        c = tex_eval(st, nm, si.uv) * 2.0 - 1.0
        nw = si.ss * c[0] + si.ts * c[1] + si.n * c[2]
        ln = nw.norm()
        if ln > 1e-12:
            n = nw / ln
            d_nw = (d_n - n * n.dot(d_n)) / ln
            d_c = vec3(d_nw.dot(si.ss), d_nw.dot(si.ts), d_nw.dot(si.n)) * 2.0
            tex_eval_adjoint(st, nm, si.uv, d_c)


@ti.func
def has_normalmap(st: ti.template(), b):
    return st.bsdf_tex[b, SLOT_NORMALMAP] >= 0


@ti.func
def _eval_about(bm: ti.template(), btype, p, n, wi_w, wo_w, wvec):
    s, t = coordinate_system(n)
    f = bsdf.bsdf_eval(bm, btype, p, to_local(s, t, n, wi_w), to_local(s, t, n, wo_w))
    return wvec.dot(f)


@ti.func
def eval_normal_grad(bm: ti.template(), btype, p, n, wi_w, wo_w, wvec):
    """∂<wvec, eval>/∂n for the shading normal n (isotropic BSDFs depend on the frame only through
    n): central differences along the two tangent directions (h = 1e-3; the BSDF's direction
    derivatives are not part of its hand-written adjoint). Used for normal-map gradients."""
    h = 1e-3
    s, t = coordinate_system(n)
    g = vec3(0.0)
    for k in ti.static(range(2)):
        e = s if k == 0 else t
        fp = _eval_about(bm, btype, p, (n + h * e).normalized(), wi_w, wo_w, wvec)
        fm = _eval_about(bm, btype, p, (n - h * e).normalized(), wi_w, wo_w, wvec)
        g += e * ((fp - fm) / (2.0 * h))
    return g


@ti.func
def normalmap_adjoint(st: ti.template(), bm: ti.template(), btype, p, b, si, fn, wi_w, wo_w, wvec):
    """Adjoint of a normal-mapped BSDF evaluation w.r.t. the normal map's texels (detached: only
    through the shading frame). fn: the frame normal used (possibly flipped for two-sided BSDFs)."""
    dn = eval_normal_grad(bm, btype, p, fn, wi_w, wo_w, wvec)
    c = tex_eval(st, st.bsdf_tex[b, SLOT_NORMALMAP], si.uv) * 2.0 - 1.0
    nw = si.ss * c[0] + si.ts * c[1] + si.n * c[2]
    sgn = 1.0 if nw.dot(fn) >= 0.0 else -1.0
    normalmap_frame_adjoint(st, b, si, dn * sgn)
