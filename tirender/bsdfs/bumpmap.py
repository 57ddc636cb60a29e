"""Bump mapping (Mitsuba 3 ``bumpmap``): a height texture perturbs the shading frame of a nested BSDF.

The height h(u, v) = luminance(tex(u, v)) (luminance weights 0.212671, 0.715160, 0.072169: a grey
texture is its own height, as Mitsuba's ``eval_1_grad`` of a bitmap) times ``scale``. Its
gradient (h_u, h_v) is the derivative of the bilinear interpolation inside the texel cell
(textures.tex_grad_uv, analytic; 0 for nearest filtering and constants), in height per unit uv.
As Mitsuba's ``frame()``, in the local shading frame (z = n, the BSDF context's dp/du, dp/dv, ng):
    dp/du' = dp/du + n (scale h_u - n·dp/du),   dp/dv' = dp/dv + n (scale h_v - n·dp/dv)
    n' = normalize(dp/du' × dp/dv'), negated if it faces away from the geometric normal ng
    with ``flip_invalid_normals`` (default): n' -> (-n'_x, -n'_y, n'_z) where cos θi (wi·n') <= 0
    s' = normalize(dp/du - n' (n'·dp/du)),   t' = n' × s'
and the nested BSDF is seen in that frame (perturbed.py: directions changing side get 0; with
``use_shadowing_function`` (default) Estevez et al.'s (2019) term S(n', wo)).
Units: heights are in world length when uv spans the surface as its dp/du, dp/dv say (a
rectangle scaled by k: dp/du = 2k, as Mitsuba's rectangle).

Differences from Mitsuba 3.9: its s' is Gram-Schmidt of the *world* dp/du against the *local* n'
(a coordinate mix); tirender uses the local dp/du. Both frames share n' and differ only by a
rotation about it: identical for isotropic nested BSDFs, the local one is the geometrically
meant tangent for anisotropic ones. The nested BSDF sees the unperturbed context (a bump map
nested in a bump map does not compose).

Differentiable: the height texels — through the bilinear derivative, n' and R (the nested BSDF's
analytic ``grad_dirs``) and S — and the nested BSDF's own parameters. ``scale`` is a constant.
Sampled directions are not differentiated (detached).
"""
import math

import taichi as ti

from ..core.math import vec3
from ..errors import ConfigError
from ..schema import Bool, Child, Number, Texture
from ..textures import tex_grad_uv, tex_grad_uv_adjoint
from . import perturbed
from .base import child, composite, const
from .microfacet import normalize_backprop

_H = 0                         # texture slot: the height
_SCALE, _FLIP, _SHADOW = 0, 1, 2   # constants
LUMINANCE = vec3(0.212671, 0.715160, 0.072169)


@ti.func
def _frame(st: ti.template(), ctx, wi):
    """(n', s', t', A = dp/du', B = dp/dv', c = A × B, |c|, σ (ng flip), fs (invalid-normal flip),
    |u|, u = dp/du - n' (n'·dp/du))."""
    du, dv = tex_grad_uv(st, st.bsdf_tex[ctx.b, _H], ctx.uv)
    k = const(st, ctx, _SCALE)
    A = vec3(ctx.dpdu[0], ctx.dpdu[1], k * du.dot(LUMINANCE))
    B = vec3(ctx.dpdv[0], ctx.dpdv[1], k * dv.dot(LUMINANCE))
    c = A.cross(B)
    cl = c.norm()
    n = vec3(0.0, 0.0, 1.0)
    if cl > 1e-30:
        n = c / cl
    else:
        cl = 1.0
    sg = 1.0
    if ctx.ng.dot(n) < 0.0:
        sg = -1.0
    n *= sg
    fs = 1.0
    if const(st, ctx, _FLIP) != 0.0 and wi[2] * wi.dot(n) <= 0.0:
        fs = -1.0
    n = vec3(n[0] * fs, n[1] * fs, n[2])
    u = ctx.dpdu - n * n.dot(ctx.dpdu)
    ul = u.norm()
    s = vec3(1.0, 0.0, 0.0) - n * n[0]
    if ul > 1e-30:
        s = u / ul
    else:
        ul = 1.0
        s = s / ti.max(s.norm(), 1e-20)
    t = n.cross(s)
    return n, s, t, A, B, c, cl, sg, fs, ul


@ti.func
def _backprop(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template(), texels: ti.template()):
    """The adjoint of E = <d_out, f_n(R wi, R wo)> S(n', wo) (f_n: the nested BSDF).
    texels = True: scatter into the nested BSDF's parameters (with d_out S) and into the height
    texels, back through R = (s', t', n'), s' = normalize(dp/du - n' (n'·dp/du)), t' = n' × s',
    n' = flip(σ normalize(A × B)), A_z = scale h_u, B_z = scale h_v, (h_u, h_v) = luminance of
    the bilinear derivative. texels = False: (∂E/∂wi, ∂E/∂wo) = (Rᵀ ∂E/∂wi', Rᵀ ∂E/∂wo' +
    <d_out, f_n> ∂S/∂wo) (the frame depends on wi only through the piecewise-constant flip)."""
    n, s, t, A, B, c, cl, sg, fs, ul = _frame(st, ctx, wi)
    gi, go, g_s, g_n = perturbed.backprop(st, ctx, wi, wo, d_out, inner, n, s, t, const(st, ctx, _SHADOW) != 0.0,
                                          texels)
    if ti.static(texels):
        g_u = normalize_backprop(g_s, s, ul)                   # s' = normalize(u)
        d = ctx.dpdu
        g_n += -n.dot(d) * g_u - d * n.dot(g_u)                # u = dp/du - n' (n'·dp/du)
        g_n = vec3(g_n[0] * fs, g_n[1] * fs, g_n[2])           # the invalid-normal flip
        g_c = sg * normalize_backprop(g_n, c / cl, cl)         # n' = σ c / |c|
        k = const(st, ctx, _SCALE)
        g_hu = B.cross(g_c)[2] * k                             # c = A × B
        g_hv = g_c.cross(A)[2] * k
        tex_grad_uv_adjoint(st, st.bsdf_tex[ctx.b, _H], ctx.uv, g_hu * LUMINANCE, g_hv * LUMINANCE)
    return gi, go


@composite
@perturbed.backprop_at(_backprop)
class BumpMap:
    NAME = "bumpmap"
    KEYS = (Texture("height", 3, lo=-math.inf, hi=math.inf, aliases=("arbitrary",),
                    doc="the height field (its luminance; bitmaps: bilinear for a non-zero gradient; "
                        "Mitsuba: the nested texture, named e.g. `arbitrary`; parameter `<id>.height`)"),
            Child("bsdf", doc="the BSDF whose shading frame is perturbed"),
            Number("scale", default=1.0, doc="multiplier of the height gradient (Mitsuba's scale)"),
            Bool("flip_invalid_normals", default=True, doc="mirror normals facing away from wi"),
            Bool("use_shadowing_function", default=True, doc="Estevez et al. 2019 bump terminator term"))
    CHILDREN = ("bsdf",)
    FLAGS = 0
    XML_TEXTURE = "height"   # Mitsuba: the single nested texture, whatever its name
    UV_DERIVATIVE = ("height",)   # read through its uv derivative: no mesh attribute (Mitsuba: no eval_1_grad)

    @staticmethod
    def combine_flags(child_flags):
        return child_flags[0]

    @staticmethod
    def constants(values, file, key):
        h = values.get("height")
        if isinstance(h, dict) and h.get("type") in ("volume", "rawconstant"):
            # Mitsuba's bumpmap needs the texture's eval_1_grad, which these lack
            raise ConfigError(f"a {h['type']} texture has no uv gradient to bump-map with", file, f"{key}.height")
        return [float(values["scale"]), float(values["flip_invalid_normals"]),
                float(values["use_shadowing_function"])]

    @staticmethod
    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        n, s, t, A, B, c, cl, sg, fs, ul = _frame(st, ctx, wi)
        return perturbed.eval_pdf(st, ctx, wi, wo, inner, n, s, t, const(st, ctx, _SHADOW) != 0.0)

    @staticmethod
    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        n, s, t, A, B, c, cl, sg, fs, ul = _frame(st, ctx, wi)
        return perturbed.sample(st, ctx, wi, u1, u2, inner, n, s, t, const(st, ctx, _SHADOW) != 0.0)

    @staticmethod
    @ti.func
    def mueller_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
        n, s, t, A, B, c, cl, sg, fs, ul = _frame(st, ctx, wi)
        return perturbed.mueller(st, ctx, wi, wo, delta, inner, n, s, t)

    @staticmethod
    @ti.func
    def null_adjoint_at(st: ti.template(), ctx, d_log, inner: ti.template()):
        inner.null_adjoint(st, child(st, ctx, 0), d_log)   # a pass-through of the nested BSDF (mask)
