"""Normal mapping (Mitsuba 3 ``normalmap``): perturbs the shading frame of a nested BSDF.

The texture encodes the perturbed normal in the local shading frame, c = 2 tex - 1 (raw values,
no sRGB curve, by default). With ``flip_invalid_normals`` (default) a normal facing away from the
incident direction (cos θi (wi·c) <= 0) is mirrored: (c_x, c_y) -> (-c_x, -c_y) (Schüssler 2017).
The perturbed frame (local coordinates) is
    n' = normalize(c),  s' = normalize(e_x - n' n'_x),  t' = n' × s'
and the nested BSDF is seen in it (perturbed.py: directions changing side get 0; with
``use_shadowing_function`` (default) Estevez et al.'s (2019) bump terminator term).
Sugar: ``normalmap: <texture>`` on any BSDF wraps it.

Differentiable: the normal map's texels — ∂<δ, f>/∂texel through R (the nested BSDF's analytic
``grad_dirs``) and through S — and the nested BSDF's own parameters. Detached PRB does not move
sampled directions; attached PRB (integrators/prb_attached.py) moves the directions of Dirac lobes
with n' (``dirac_normal_adjoint_at``: ∂n'/∂texel and ∂n'/∂uv, the map seen at a moving point), and
the samples of a nested microfacet BSDF (``attached_*_at``: its half-vector warp in the perturbed
frame, bsdfs/halfwarp.py).
"""
import taichi as ti

from ..core.math import to_local, to_world, vec2, vec3
from ..textures import tex_grad_uv
from ..schema import Bool, Child, Texture
from . import perturbed
from .base import child, composite, const, slot_vec3, slot_vec3_adjoint
from .microfacet import normalize_backprop

_NM = 0               # texture slot: the normal map
_FLIP, _SHADOW = 0, 1  # constants (0/1)


@ti.func
def _perturbed(st: ti.template(), ctx, wi):
    """(c' (the possibly flipped 2 tex - 1), flip sign, n', s', t', |c'|, |e_x - n' n'_x|)."""
    c = slot_vec3(st, ctx, _NM) * 2.0 - 1.0
    fs = 1.0
    if const(st, ctx, _FLIP) != 0.0 and wi[2] * wi.dot(c) <= 0.0:
        fs = -1.0
    c = vec3(c[0] * fs, c[1] * fs, c[2])
    cl = ti.max(c.norm(), 1e-20)
    n = c / cl
    u = vec3(1.0, 0.0, 0.0) - n * n[0]
    ul = ti.max(u.norm(), 1e-20)
    s = u / ul
    t = n.cross(s)
    return c, fs, n, s, t, cl, ul


@ti.func
def _backprop(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template(), texels: ti.template()):
    """The adjoint of E = <d_out, f_n(R wi, R wo)> S(n', wo) (f_n: the nested BSDF).
    texels = True: scatter into the nested BSDF's parameters (with d_out S) and into the texels, back
    through R = (s', t', n'), s' = normalize(e_x - n' n'_x), t' = n' × s', n' = normalize(c'),
    c' = flip(2 tex - 1). texels = False: return (∂E/∂wi, ∂E/∂wo) = (Rᵀ ∂E/∂wi', Rᵀ ∂E/∂wo' +
    <d_out, f_n> ∂S/∂wo) (the frame depends on wi only through the piecewise-constant flip)."""
    c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
    gi, go, g_s, g_n = perturbed.backprop(st, ctx, wi, wo, d_out, inner, n, s, t, const(st, ctx, _SHADOW) != 0.0,
                                          texels)
    if ti.static(texels):
        _texels_adjoint(st, ctx, g_s, g_n, n, s, fs, cl, ul)
    return gi, go


@ti.func
def _texels_adjoint(st: ti.template(), ctx, g_s, g_n, n, s, fs, cl, ul):
    """Scatter ∂/∂(s', n') into the texels, back through s' = normalize(e_x - n' n'_x),
    n' = normalize(c'), c' = flip(2 tex - 1); returns ∂/∂tex (for _uv_adjoint)."""
    g_u = normalize_backprop(g_s, s, ul)
    g_c = normalize_backprop(g_n - n[0] * g_u - vec3(g_u.dot(n), 0.0, 0.0), n, cl)
    g_tex = 2.0 * vec3(g_c[0] * fs, g_c[1] * fs, g_c[2])
    slot_vec3_adjoint(st, ctx, _NM, g_tex)
    return g_tex


@ti.func
def _uv_adjoint(st: ti.template(), ctx, g_tex):
    """∂/∂uv of <g_tex, tex(uv)>: the map seen at a moving point."""
    du, dv = tex_grad_uv(st, st.bsdf_tex[ctx.b, _NM], ctx.uv)
    return vec2(g_tex.dot(du), g_tex.dot(dv))


@composite
@perturbed.backprop_at(_backprop)
class NormalMap:
    NAME = "normalmap"
    KEYS = (Texture("normalmap", 3, lo=0.0, hi=1.0, raw=True,
                    doc="tangent-space normals, x ↦ (x + 1)/2 (read raw: no sRGB curve)"),
            Child("bsdf", doc="the BSDF whose shading frame is perturbed"),
            Bool("flip_invalid_normals", default=True, doc="mirror normals facing away from wi"),
            Bool("use_shadowing_function", default=True, doc="Estevez et al. 2019 bump terminator term"))
    CHILDREN = ("bsdf",)
    FLAGS = 0
    SUGAR = "normalmap"   # `normalmap: <texture>` on any BSDF wraps it

    @staticmethod
    def sugar(value, file, key):
        """``normalmap: <texture>`` -> the wrapper's own keys."""
        return {"normalmap": value}

    @staticmethod
    def combine_flags(child_flags):
        return child_flags[0]

    @staticmethod
    def constants(values, file, key):
        return [float(values["flip_invalid_normals"]), float(values["use_shadowing_function"])]

    @staticmethod
    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return perturbed.eval_pdf(st, ctx, wi, wo, inner, n, s, t, const(st, ctx, _SHADOW) != 0.0)

    @staticmethod
    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return perturbed.sample(st, ctx, wi, u1, u2, inner, n, s, t, const(st, ctx, _SHADOW) != 0.0)

    @staticmethod
    @ti.func
    def mueller_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return perturbed.mueller(st, ctx, wi, wo, delta, inner, n, s, t)

    @staticmethod
    @ti.func
    def dirac_normal_at(st: ti.template(), ctx, wi, inner: ti.template()):
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return n

    @staticmethod
    @ti.func
    def dirac_normal_adjoint_at(st: ti.template(), ctx, wi, g, inner: ti.template()):
        """∂<g, n'>/∂texel into the pool; returns ∂<g, n'>/∂uv (n' = normalize(flip(2 tex(uv) - 1)))."""
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return _uv_adjoint(st, ctx, _texels_adjoint(st, ctx, vec3(0.0), g, n, s, fs, cl, ul))

    @staticmethod
    @ti.func
    def dirac_dlog_at(st: ti.template(), ctx, wi, reflected, inner: ti.template()):
        """The nested BSDF's, at cos θi = wi · n' (the perturbed frame)."""
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return inner.dirac_dlog(st, child(st, ctx, 0), to_local(s, t, n, wi), reflected)

    @staticmethod
    @ti.func
    def dirac_ior_adjoint_at(st: ti.template(), ctx, wi, reflected, k, g_r, inner: ti.template()):
        """The nested BSDF's, at cos θi = wi · n' (the perturbed frame)."""
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        inner.dirac_ior_adjoint(st, child(st, ctx, 0), to_local(s, t, n, wi), reflected, k, g_r)

    @staticmethod
    @ti.func
    def attached_alpha_at(st: ti.template(), ctx, wi, inner: ti.template()):
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return inner.attached_alpha(st, child(st, ctx, 0), to_local(s, t, n, wi))

    @staticmethod
    @ti.func
    def attached_record_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        return inner.attached_record(st, child(st, ctx, 0), to_local(s, t, n, wi), to_local(s, t, n, wo))

    @staticmethod
    @ti.func
    def attached_warp_at(st: ti.template(), ctx, wi, hw, inner: ti.template()):
        """The nested BSDF's sample hw (in its own frame) moved with the perturbed frame."""
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        wop, lnj = inner.attached_warp(st, child(st, ctx, 0), to_local(s, t, n, wi), hw)
        return to_world(s, t, n, wop), lnj

    @staticmethod
    @ti.func
    def attached_adjoint_at(st: ti.template(), ctx, wi, wo, d_out, k, g_wo, inner: ti.template()):
        """The nested BSDF's attached adjoint seen through the perturbed frame R = (s', t', n'):
        wi' = R wi and wo = Rᵀ wo' both move with the texels; the bump terminator term S(n', wo)
        moves with n' and wo. Returns (∂/∂wi, ∂/∂uv)."""
        c, fs, n, s, t, cl, ul = _perturbed(st, ctx, wi)
        wip = to_local(s, t, n, wi)
        wop = to_local(s, t, n, wo)
        g_wi = vec3(0.0)
        g_uv = vec2(0.0)
        if wo[2] * wop[2] > 0.0:
            ch = child(st, ctx, 0)
            S, gsn, gsw, fd = perturbed.shadow_factors(st, ch, inner, wip, wop, d_out, n, wo,
                                                       const(st, ctx, _SHADOW) != 0.0)
            g_o = g_wo + fd * gsw
            g_wip, _ = inner.attached_adjoint(st, ch, wip, wop, d_out * S, k, to_local(s, t, n, g_o))
            g_wi = to_world(s, t, n, g_wip)
            g_s, g_n = perturbed.fold_t(g_wip[0] * wi + wop[0] * g_o, g_wip[1] * wi + wop[1] * g_o,
                                        g_wip[2] * wi + wop[2] * g_o + fd * gsn, s, n)
            g_uv = _uv_adjoint(st, ctx, _texels_adjoint(st, ctx, g_s, g_n, n, s, fs, cl, ul))
        return g_wi, g_uv

    @staticmethod
    @ti.func
    def null_adjoint_at(st: ti.template(), ctx, d_log, inner: ti.template()):
        inner.null_adjoint(st, child(st, ctx, 0), d_log)   # a pass-through of the nested BSDF (mask)
