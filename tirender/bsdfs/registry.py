"""The BSDF registry: one line per model, and the dispatch generated from it.

A model's tag is its index in ``MODELS``. Kernels are specialised to the models a scene uses at
each nesting depth (``levels``: a tuple of tag bitmasks, ``levels[0]`` the BSDFs that shapes
reference directly, ``levels[1]`` the children of composites, ...): ``dispatch(levels)`` returns
a (cached) class whose ``@ti.func``s branch on ``st.bsdf_type[ctx.b]`` over those models only,
composites calling the next depth's dispatcher. Pass it to kernels as a ``ti.template()``.

    D = dispatch(scene.bsdf_levels)
    D.eval(st, ctx, wi, wo) -> vec3            D.pdf(st, ctx, wi, wo) -> float
    D.eval_pdf(st, ctx, wi, wo) -> (vec3, float)
    D.sample(st, ctx, wi, u1, u2) -> BsdfSample
    D.adjoint(st, ctx, wi, wo, d_out)          scatter ∂<d_out, eval>/∂π into the gradient pool
    D.grad_dirs(st, ctx, wi, wo, d_out) -> (vec3, vec3)
    D.null_adjoint(st, ctx, d_log)             after a ``null`` sample: ∂ ln P_null/∂π · d_log
    D.dirac_value_adjoint(st, ctx, wi, wo, d_out)   after a Dirac sample: ∂<d_out, P w>/∂π (models with
                                               ``dirac_value_adjoint``, bsdfs/base.py; D.DIRAC_VALUE: any)
    D.mueller(st, ctx, wi, wo, delta, smooth) -> MuellerLanes
                                               spectral_polarized: the Mueller matrix per lane (local implicit
                                               frames, any scale; bsdfs/base.py ``mueller``); models without
                                               one depolarize (Mitsuba's diffuse, plastic, thindielectric);
                                               smooth (compile-time): only directions of smooth lobes (NEE)
    D.mueller_tangent(st, ctx, wi, wo, delta, smooth) -> MuellerLanes
                                               its tangent along forward mode's direction (models with
                                               MUELLER_KEYS, top level only: composites give 0)
    D.dirac_normal(st, ctx, wi) -> vec3        the normal (local shading frame) Dirac lobes reflect and
                                               refract about: a normal map's n', else (0, 0, 1)
    D.dirac_normal_adjoint(st, ctx, wi, g) -> vec2
                                               scatter ∂<g, n'>/∂π (normal-map texels) into the pool and
                                               return ∂<g, n'>/∂uv (the map seen at a moving point;
                                               attached PRB, integrators/prb_attached.py)
    D.dirac_ior_adjoint(st, ctx, wi, reflected, k, g_r)
                                               scatter ∂/∂π of k ln(P w) + g_r η_ti of the sampled Dirac
                                               lobe (P its probability, w its weight, η_ti its refraction
                                               ratio) into the pool: a dielectric's IOR parameters
    D.attached_alpha(st, ctx, wi) -> float     the lobe roughness of a model with attached sampling
                                               (microfacet models, under normal maps), else -1
    D.attached_record(st, ctx, wi, wo) -> HalfWarp    D.attached_warp(st, ctx, wi, hw) -> (wo, ln J)
    D.attached_adjoint(st, ctx, wi, wo, d_out, k, g_wo) -> (vec3, vec2)
                                               attached sampling's primal and adjoint (bsdfs/base.py,
                                               bsdfs/halfwarp.py): near-specular attached PRB
A tag outside the kernel's masks behaves as a black surface.
"""
import taichi as ti

from ..core import mueller as mu
from ..core.math import vec2, vec3
from ..registry import mask_of as _mask_of
from ..registry import refuse_wider, register
from ..variants import spec
from .base import SMOOTH, invalid_sample
from .halfwarp import HalfWarp
from .blendbsdf import BlendBsdf
from .bumpmap import BumpMap
from .conductor import Conductor
from .dielectric import Dielectric
from .diffuse import Diffuse
from .hair import Hair
from .mask import MaskBsdf
from .normalmap import NormalMap
from .null import Null
from .plastic import Plastic
from .polarizer import Polarizer, Retarder
from .pplastic import PPlastic
from .principled import Principled
from .principledthin import PrincipledThin
from .roughconductor import RoughConductor
from .roughdielectric import RoughDielectric
from .roughplastic import RoughPlastic
from .thindielectric import ThinDielectric
from .twosided import TwoSided

MODELS = (
    Diffuse,
    Conductor,
    RoughConductor,
    Dielectric,
    RoughDielectric,
    RoughPlastic,
    Null,
    ThinDielectric,
    Plastic,
    BlendBsdf,
    TwoSided,
    NormalMap,
    MaskBsdf,
    BumpMap,
    Principled,
    Polarizer,
    Retarder,
    PrincipledThin,
    PPlastic,
    Hair,
)


def _derive(models):
    """The tables derived from ``models``: (BY_NAME, ALL, LEAVES, N_TEX, N_FLOAT, N_CHILD, SUGAR)."""
    by_name, all_ = register(models)
    leaves = sum(1 << m.TAG for m in models if not m.COMPOSITE)
    # sizes of the per-BSDF tables (texture slots, float constants, children)
    n_tex = max(sum(1 for k in m.KEYS if k.kind == "texture") for m in models)
    n_float = max([8] + [getattr(m, "N_CONST", 0) for m in models])
    n_child = max(len(getattr(m, "CHILDREN", ())) for m in models)
    sugar = tuple(m for m in models if getattr(m, "SUGAR", None))   # wrappers applied by a key on any BSDF
    return by_name, all_, leaves, n_tex, n_float, n_child, sugar


BY_NAME, ALL, LEAVES, N_TEX, N_FLOAT, N_CHILD, SUGAR = _derive(MODELS)
_widths_used = None     # the table widths (N_TEX, N_FLOAT, N_CHILD) the first scene's arrays were built with


def table_widths():
    """(N_TEX, N_FLOAT, max(N_CHILD, 1)): the widths of the per-BSDF tables a scene's arrays are built with
    (scene/scene.py); from the first call on, ``add`` refuses models that would widen them."""
    global _widths_used
    _widths_used = (N_TEX, N_FLOAT, max(N_CHILD, 1))
    return _widths_used


def add(model):
    """Append ``model`` (a user model: tirender/plugins.py checks its declaration) as tag len(MODELS) — the
    built-in tags keep their values — and recompute every derived table. ConfigError (one line, without the
    caller's prefix) if it would widen the tables of scenes already built."""
    global MODELS, BY_NAME, ALL, LEAVES, N_TEX, N_FLOAT, N_CHILD, SUGAR
    n_tex = sum(1 for k in model.KEYS if k.kind == "texture")
    n_float = getattr(model, "N_CONST", 0)
    n_child = len(getattr(model, "CHILDREN", ()))
    refuse_wider(_widths_used, (("texture slots", n_tex), ("float constants", n_float), ("nested BSDFs", n_child)))
    MODELS = MODELS + (model,)
    BY_NAME, ALL, LEAVES, N_TEX, N_FLOAT, N_CHILD, SUGAR = _derive(MODELS)


def mask_of(names):
    return _mask_of(BY_NAME, names)


_cache = {}


def dispatch(levels):
    """The dispatcher for per-depth model masks ``levels`` (tuple of ints), cached."""
    levels = tuple(int(x) for x in levels) or (1 << Diffuse.TAG,)
    if levels not in _cache:
        _cache[levels] = _make(levels)
    return _cache[levels]


def _make(levels):
    inner = dispatch(levels[1:]) if len(levels) > 1 else None
    models = tuple(m for m in MODELS if levels[0] & (1 << m.TAG) and (inner is not None or not m.COMPOSITE))

    class Dispatch:
        LEVELS = levels
        MODELS = models
        # whether mueller_tangent can be non-zero (any lobe / smooth lobes): compile-time, for the walk
        MUELLER_TANGENT = any(hasattr(m, "mueller_tangent_at") for m in models)
        SMOOTH_MUELLER_TANGENT = any(hasattr(m, "mueller_tangent_at") and m.FLAGS & SMOOTH for m in models)
        # whether a model's Dirac lobes have a differentiable value (``dirac_value_adjoint``): compile-time
        DIRAC_VALUE = any(hasattr(m, "dirac_value_adjoint_at") for m in models)

        @staticmethod
        @ti.func
        def eval(st: ti.template(), ctx, wi, wo):
            res = spec(0.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if t == models[i].TAG:
                    res = models[i].eval_at(st, ctx, wi, wo, inner)
            return res

        @staticmethod
        @ti.func
        def pdf(st: ti.template(), ctx, wi, wo):
            res = 0.0
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if t == models[i].TAG:
                    res = models[i].pdf_at(st, ctx, wi, wo, inner)
            return res

        @staticmethod
        @ti.func
        def eval_pdf(st: ti.template(), ctx, wi, wo):
            f = spec(0.0)
            p = 0.0
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if t == models[i].TAG:
                    f, p = models[i].eval_pdf_at(st, ctx, wi, wo, inner)
            return f, p

        @staticmethod
        @ti.func
        def sample(st: ti.template(), ctx, wi, u1, u2):
            s = invalid_sample()
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if t == models[i].TAG:
                    s = models[i].sample_at(st, ctx, wi, u1, u2, inner)
            return s

        @staticmethod
        @ti.func
        def adjoint(st: ti.template(), ctx, wi, wo, d_out):
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if t == models[i].TAG:
                    models[i].adjoint_at(st, ctx, wi, wo, d_out, inner)

        @staticmethod
        @ti.func
        def dirac_value_adjoint(st: ti.template(), ctx, wi, wo, d_out):
            """After a Dirac sample wi -> wo: scatter ∂<d_out, P w>/∂π (models with ``dirac_value_adjoint``)."""
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "dirac_value_adjoint_at")):
                    if t == models[i].TAG:
                        models[i].dirac_value_adjoint_at(st, ctx, wi, wo, d_out, inner)

        @staticmethod
        @ti.func
        def grad_dirs(st: ti.template(), ctx, wi, wo, d_out):
            gi = vec3(0.0)
            go = vec3(0.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if t == models[i].TAG:
                    gi, go = models[i].grad_dirs_at(st, ctx, wi, wo, d_out, inner)
            return gi, go

        @staticmethod
        @ti.func
        def null_adjoint(st: ti.template(), ctx, d_log):
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "null_adjoint_at")):
                    if t == models[i].TAG:
                        models[i].null_adjoint_at(st, ctx, d_log, inner)

        @staticmethod
        @ti.func
        def null_transmission(st: ti.template(), ctx, wi):
            """The fraction of light that passes straight through the surface (Mitsuba's eval_null_transmission:
            a shadow ray's weight across a PASS surface; 0 for models without a pass-through lobe)."""
            res = spec(0.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "null_transmission_at")):
                    if t == models[i].TAG:
                        res = models[i].null_transmission_at(st, ctx, wi, inner)
            return res

        @staticmethod
        @ti.func
        def null_transmission_adjoint(st: ti.template(), ctx, wi, d):
            """Scatter ∂<d, null_transmission>/∂π into the pool (d: per lane)."""
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "null_transmission_adjoint_at")):
                    if t == models[i].TAG:
                        models[i].null_transmission_adjoint_at(st, ctx, wi, d, inner)

        @staticmethod
        @ti.func
        def mueller(st: ti.template(), ctx, wi, wo, delta, smooth: ti.template()):
            res = mu.uniform_lanes(mu.depolarizer(1.0))     # models without a Mueller matrix (as Mitsuba's)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(_has_mueller(models[i], smooth)):
                    if t == models[i].TAG:
                        res = models[i].mueller_at(st, ctx, wi, wo, delta, inner)
            return res

        @staticmethod
        @ti.func
        def polarizing(st: ti.template(), ctx, smooth: ti.template()):
            """Whether ``mueller`` can differ from a depolarizer here (the model at ctx has a Mueller matrix of
            its own for this query): 0 lets the walk skip the Stokes frame changes, which leave a depolarizer
            unchanged."""
            res = 0
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(_has_mueller(models[i], smooth)):
                    if t == models[i].TAG:
                        res = 1
            return res

        @staticmethod
        @ti.func
        def mueller_tangent(st: ti.template(), ctx, wi, wo, delta, smooth: ti.template()):
            res = mu.zero_lanes()                          # models whose Mueller matrix has no parameters
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "mueller_tangent_at") and (not smooth or models[i].FLAGS & SMOOTH)):
                    if t == models[i].TAG:
                        res = models[i].mueller_tangent_at(st, ctx, wi, wo, delta, inner)
            return res

        @staticmethod
        @ti.func
        def dirac_normal(st: ti.template(), ctx, wi):
            res = vec3(0.0, 0.0, 1.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "dirac_normal_at")):
                    if t == models[i].TAG:
                        res = models[i].dirac_normal_at(st, ctx, wi, inner)
            return res

        @staticmethod
        @ti.func
        def dirac_normal_adjoint(st: ti.template(), ctx, wi, g):
            res = vec2(0.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "dirac_normal_adjoint_at")):
                    if t == models[i].TAG:
                        res = models[i].dirac_normal_adjoint_at(st, ctx, wi, g, inner)
            return res

        @staticmethod
        @ti.func
        def dirac_dlog(st: ti.template(), ctx, wi, reflected):
            res = spec(0.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "dirac_dlog_at")):
                    if t == models[i].TAG:
                        res = models[i].dirac_dlog_at(st, ctx, wi, reflected, inner)
            return res

        @staticmethod
        @ti.func
        def dirac_ior_adjoint(st: ti.template(), ctx, wi, reflected, k, g_r):
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "dirac_ior_adjoint_at")):
                    if t == models[i].TAG:
                        models[i].dirac_ior_adjoint_at(st, ctx, wi, reflected, k, g_r, inner)

        @staticmethod
        @ti.func
        def attached_alpha(st: ti.template(), ctx, wi):
            res = -1.0
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "attached_alpha_at")):
                    if t == models[i].TAG:
                        res = models[i].attached_alpha_at(st, ctx, wi, inner)
            return res

        @staticmethod
        @ti.func
        def attached_record(st: ti.template(), ctx, wi, wo):
            res = HalfWarp(m=vec3(0.0, 0.0, 1.0), reflect=1)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "attached_record_at")):
                    if t == models[i].TAG:
                        res = models[i].attached_record_at(st, ctx, wi, wo, inner)
            return res

        @staticmethod
        @ti.func
        def attached_warp(st: ti.template(), ctx, wi, hw):
            wo = vec3(0.0)
            lnj = 0.0
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "attached_warp_at")):
                    if t == models[i].TAG:
                        wo, lnj = models[i].attached_warp_at(st, ctx, wi, hw, inner)
            return wo, lnj

        @staticmethod
        @ti.func
        def attached_adjoint(st: ti.template(), ctx, wi, wo, d_out, k, g_wo):
            g_wi = vec3(0.0)
            g_uv = vec2(0.0)
            t = st.bsdf_type[ctx.b]
            for i in ti.static(range(len(models))):
                if ti.static(hasattr(models[i], "attached_adjoint_at")):
                    if t == models[i].TAG:
                        g_wi, g_uv = models[i].attached_adjoint_at(st, ctx, wi, wo, d_out, k, g_wo, inner)
            return g_wi, g_uv

    Dispatch.__name__ = f"BsdfDispatch{levels}"
    return Dispatch


def _has_mueller(model, smooth):
    """Compile-time: whether the dispatcher's ``mueller`` asks model for its Mueller matrix (smooth: NEE's
    directions, where models without smooth lobes are skipped); the others are depolarizers."""
    return hasattr(model, "mueller_at") and (not smooth or model.COMPOSITE or model.FLAGS & SMOOTH)


def mueller_parameters(rows, textures):
    """Pool parameter name -> (BSDF id, key, nested) of every texture that changes a Mueller matrix (the keys a model
    lists in MUELLER_KEYS; rows: bsdfs.base.Row, textures: the scene description's, nested: under a composite)."""
    nested = {c for r in rows for c in r.children}
    out = {}
    for i, r in enumerate(rows):
        keys = [k for k in r.model.KEYS if getattr(k, "kind", None) == "texture"]
        for k, t in zip(keys, r.tex):
            if k.name in getattr(r.model, "MUELLER_KEYS", ()) and t >= 0:
                out[textures[t].name] = (r.id, k.name, i in nested)
    return out
