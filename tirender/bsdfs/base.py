"""What every BSDF model shares: flags, the sample record, the shading-point context, texture-slot
access, and the ``leaf`` decorator that lifts a model's pure functions to a shading point.

A BSDF model is a class in its own module that declares, in one place:

    NAME     its YAML ``type`` (and Mitsuba plugin name)
    KEYS     its keys (tirender.schema): Texture keys become pool parameters ``<id>.<param>`` and
             occupy texture slots 0, 1, ... in declaration order; other keys are parsed values
    FLAGS    SMOOTH / DELTA / BOTH_SIDES / TRANSMISSION / NULL (bitmask, see below)
    constants(values, file, key) -> [float]   (optional) the row's float constants from the parsed
             non-texture keys (and checks of their combination)
    complete(values, file, key, variant) -> values   (optional) the parsed values with the keys whose default
             depends on other keys filled in (pplastic's and hair's ``eta`` from int_ior / ext_ior: a texture key, so
             a pool parameter either way), checks of their combination for the scene's variant
    CHILDREN (composites) the keys naming nested BSDFs (rows of their own)

and the Taichi functions the dispatch (``registry.py``) calls at a shading point, all in the local
shading frame (z = shading normal; ``wi`` towards the previous vertex, ``wo`` the sampled or
evaluated direction, both pointing away from the surface; Mitsuba 3 conventions):

    eval_at(st, ctx, wi, wo, inner)            -> Spectrum f(wi, wo) |cos θo|
    pdf_at(st, ctx, wi, wo, inner)             -> float  solid-angle density of sample_at (0: Dirac)
    eval_pdf_at(st, ctx, wi, wo, inner)        -> (Spectrum, float)
    sample_at(st, ctx, wi, u1, u2, inner)      -> BsdfSample (weight = eval / pdf)
    adjoint_at(st, ctx, wi, wo, d_out, inner)  scatter ∂<d_out, eval_at>/∂π into the gradient pool
    grad_dirs_at(st, ctx, wi, wo, d_out, inner) -> (vec3, vec3)  ∂<d_out, eval_at>/∂wi, ∂/∂wo
    null_adjoint_at(st, ctx, d_log, inner)     (optional; models with a pass-through lobe: mask)
                                               scatter d_log ∂ ln(P_null)/∂π, P_null = the
                                               probability value of the lobe a ``null`` sample took

``inner`` is the dispatcher of the next nesting level (composites call their children through it).
A *leaf* model writes only pure functions of its own compact parameter record ``Params`` (a
``variants.struct`` holding just what it uses; colours are ``variants.SPECTRUM``, the walk's colour of the
variant) and ``@leaf`` generates the ``*_at`` functions:

    fetch(st, ctx) -> Params             texture lookups of its slots + its constants
    fetch_adjoint(st, ctx, g: Params)    scatter a Params gradient into its texture slots (``slot_adjoints(KEYS)``
                                         writes it for a model whose Params name its texture keys)
    f(p, wi, wo) / pdf(p, wi, wo) / sample(p, wi, u1, u2)
    f_adjoint(p, wi, wo, d_out) -> Params          ∂<d_out, f>/∂p (differentiable fields only)
    f_grad_dirs(p, wi, wo, d_out) -> (vec3, vec3)  ∂<d_out, f>/∂wi, ∂<d_out, f>/∂wo (analytic)

A microfacet model may also write ``warp(p) -> (signed α, η)`` (η = 1 for conductors); ``@leaf`` then
generates attached sampling (bsdfs/halfwarp.py; attached PRB's near-specular vertices):

    attached_alpha_at(st, ctx, wi, inner) -> float       max(α_u, α_v) (-1: not attachable, the default)
    attached_record_at(st, ctx, wi, wo, inner) -> HalfWarp   the sample (wi, wo) as a microfacet normal
    attached_warp_at(st, ctx, wi, hw, inner) -> (wo, ln J)   that sample at the current parameters
    attached_adjoint_at(st, ctx, wi, wo, d_out, k, g_wo, inner) -> (g_wi, g_uv)
        scatter the whole ∂/∂π (f's own and through the moving sample) of
        <d_out, f(wi, wo(π))> + k ln J(π) + <g_wo, wo(π)> into the pool; return its ∂/∂wi (and ∂/∂uv)

A model with Dirac lobes only writes ``fetch`` and ``sample``; ``@dirac`` generates the rest. Detached PRB
differentiates no Dirac lobe of the built-in models (as Mitsuba's prb); a Dirac model whose lobes' values depend
on its parameters may also write (and ``fetch_adjoint``)

    dirac_value_adjoint(p, wi, wo, d_out) -> Params   ∂<d_out, P w>/∂p of the Dirac lobe that took wi to wo
                                                     (P its probability, w its sample weight: P w is the
                                                     lobe's value), with P independent of the parameters or
                                                     differentiated too (the score ∂ ln P)

generating ``dirac_value_adjoint_at(st, ctx, wi, wo, d_out, inner)``: the PRB walk (walk/steps.py ``scatter``)
then scatters L · ∂ ln(P w)/∂π after such a sample (user models, tirender/plugins.py; docs/plugins.md).

A polarizing model (spectral_polarized, core/mueller.py) also writes

    mueller(p, wi, wo, delta) -> MuellerLanes    its Mueller matrix per lane for light arriving along −wo and
                                             leaving along wi, in the implicit frames (mueller.stokes_basis)
                                             of the local directions, at any scale (normalised to [0, 0] = 1
                                             by the walk: the scalar part is f); delta: a Dirac lobe's sample

and the decorators generate ``mueller_at(st, ctx, wi, wo, delta, inner)`` (composites write it themselves). A model
whose ``mueller`` reads no colour field of ``Params`` (a colour scales each lane's matrix, which the walk normalises
away) sets ``MUELLER_COLOURLESS = True``: its ``mueller_at`` then fetches through ``Colourless(st)``, where the colour
slots compile to 0 (a megakernel inlines a fetch per Mueller site; the colour lookups are most of it).
Models without it depolarize (as Mitsuba's diffuse, plastic, thindielectric and principled). A model whose
Mueller matrix depends on parameters lists their keys in ``MUELLER_KEYS`` and writes their tangent (forward
mode in spectral_polarized, walk/state.py FORWARD):

    fetch_tangent(st, ctx) -> Params                 the tangent of the differentiable fields (slot_*_tangent)
    mueller_tangent(p, dp, wi, wo, delta) -> MuellerLanes  Σ_k ∂mueller/∂p_k · dp_k

generating ``mueller_tangent_at(st, ctx, wi, wo, delta, inner)``.
"""
import taichi as ti

from .. import mesh_attribute as attr
from .. import variants
from ..core import pool
from ..core.math import vec2, vec3
from ..core.view import StorageView
from ..media.grid import volume_eval, volume_eval_adjoint, volume_eval_tangent, volume_spectrum
from ..textures import (TEX_RAW, TEX_VOLUME, is_spectrum, spectrum_eval, spectrum_eval_adjoint, tex_corner, tex_eval,
                        tex_eval_adjoint, tex_eval_tangent)
from ..variants import spec
from .halfwarp import half_warp, half_warp_adjoint, warp_record

# ---- flags (per model, combined for composites; stored per BSDF as st.bsdf_flags) ----
SMOOTH = 1         # has a non-Dirac lobe: emitter sampling (NEE) and MIS apply
DELTA = 2          # has a Dirac lobe (sampled only)
BOTH_SIDES = 4     # handles wi below the surface itself (dielectrics, null, twosided)
TRANSMISSION = 8   # can transmit through the surface
NULL = 16          # index-matched interface: the path passes unchanged (media boundaries)
PASS = 32          # has a straight pass-through lobe (Mitsuba's BSDFFlags::Null component: thindielectric's
                   # transmission, a mask's holes): volume integrators do not count it as a bounce, and their
                   # shadow rays cross the surface weighted by ``null_transmission`` (Mitsuba's eval_null_transmission)


# Result of BSDF sampling: wo (local), weight = eval/pdf (Spectrum, cosine included), pdf (solid angle;
# for Dirac lobes the discrete lobe probability), eta (relative IOR of the event, for Russian
# roulette), delta (1: a Dirac lobe, no MIS), valid (0: sampling failed, the path ends), null (1:
# a pass-through wo = -wi of a model's null lobe, e.g. a mask's 1 - opacity; also delta), disperse (1: a
# dispersive event ended the path's secondary wavelengths, weight × (n, 0, …, 0) for n lanes: the walk terminates
# them, variants.terminate_secondary), passthrough (1: the path went straight on through a PASS lobe — null,
# a mask's hole, thindielectric's transmission —, Mitsuba's sampled type Null: not a bounce for volume integrators).
BsdfSample = variants.struct(wo=vec3, weight=variants.SPECTRUM, pdf=float, eta=float, delta=ti.i32,
                             valid=ti.i32, null=ti.i32, disperse=ti.i32, passthrough=ti.i32)

# A shading point as the BSDF sees it: the BSDF's row index ``b`` in the scene tables, the
# texture coordinates ``uv``, and, in the local shading frame, the surface's dp/du and dp/dv
# (world length per unit uv) and geometric normal ``ng`` (bump mapping); ``lam``: the path's wavelengths
# (nm, Spectrum, spectral variants; tirender/variants.py) at which colour slots are evaluated; ``tri`` and
# ``bary``: the triangle hit and its barycentrics (b1, b2) (mesh attribute textures, tirender/mesh_attribute.py);
# ``p``: the world position (volume textures, Mitsuba's ``volume`` texture).
BsdfCtx = variants.struct(b=ti.i32, uv=vec2, dpdu=vec3, dpdv=vec3, ng=vec3, lam=variants.SPECTRUM, tri=ti.i32,
                          bary=vec2, p=vec3)


@ti.func
def surface_ctx(b, si, lam):
    """The context of BSDF b at surface interaction si (core.interaction.SurfaceInteraction) for a path
    of wavelengths lam."""
    return BsdfCtx(b=b, uv=si.uv, dpdu=vec3(si.dpdu.dot(si.ss), si.dpdu.dot(si.ts), si.dpdu.dot(si.n)),
                   dpdv=vec3(si.dpdv.dot(si.ss), si.dpdv.dot(si.ts), si.dpdv.dot(si.n)),
                   ng=vec3(si.ng.dot(si.ss), si.ng.dot(si.ts), si.ng.dot(si.n)), lam=lam, tri=si.tri, bary=si.bary,
                   p=si.p)


@ti.func
def with_row(ctx, b):
    """ctx for BSDF row b (a composite's child): same shading point."""
    return BsdfCtx(b=b, uv=ctx.uv, dpdu=ctx.dpdu, dpdv=ctx.dpdv, ng=ctx.ng, lam=ctx.lam, tri=ctx.tri, bary=ctx.bary,
                   p=ctx.p)


@ti.func
def invalid_sample():
    return BsdfSample(eta=1.0, delta=0, valid=0)


@ti.func
def sample_of(model: ti.template(), p, wi, wo, eta):
    """The BsdfSample of direction wo, drawn with density model.pdf (per steradian): weight f / pdf (f includes
    |cos θo|), relative IOR eta; invalid where that density is 0. For models whose sampling density is their
    pdf's mixture (not a closed form of the drawn lobe)."""
    s = invalid_sample()
    pw = model.pdf(p, wi, wo)
    if pw > 0.0:
        s = BsdfSample(wo=wo, weight=model.f(p, wi, wo) / pw, pdf=pw, eta=eta, delta=0, valid=1)
    return s


# ---- texture slots and constants of a BSDF row -----------------------------------------------
class Colourless(StorageView):
    """The storage as the ``mueller`` fetch of a MUELLER_COLOURLESS model sees it: colour slots (slot_rgb,
    slot_unbounded) are 0 at compile time, everything else is st's."""

    COLOURLESS = True        # made per fetch site at compile time (not kept on st: views of views stay distinct)


def _colourless(st):
    """Compile time: whether st is a Colourless view (colour slots compile to nothing)."""
    return getattr(st, "COLOURLESS", False)


def _volumes(st):
    """Compile time: whether the kernel's scene has volume textures in BSDF slots (st a
    scene.storage.VolumeTextureView): only then do the slot lookups carry the 3D branch."""
    return getattr(st, "VOLUME_TEXTURES", False)


@ti.func
def _is_volume(st: ti.template(), tid):
    res = False
    if ti.static(_volumes(st)):
        if tid >= 0:
            res = (st.tex_flags[tid] & TEX_VOLUME) != 0
    return res


@ti.func
def _is_attribute(st: ti.template(), tid):
    res = False
    if ti.static(attr.enabled(st)):
        res = attr.is_attribute(tid)
    return res


@ti.func
def _lookup(st: ti.template(), ctx, tid):
    """Texture tid (vec3, raw data) at the shading point: a bitmap at ctx.uv (textures.py), a volume texture
    (TEX_VOLUME) at the world position ctx.p (media/grid.py), a mesh attribute at the hit (mesh_attribute.py);
    0 for tid = -1. The volume and attribute branches are compiled only for storages that have them."""
    return _by_texture_kind(st, ctx, tid, attr.eval_vec3, volume_eval, tex_eval)


@ti.func
def _lookup_tangent(st: ti.template(), ctx, tid):
    """The forward-mode tangent of _lookup (the same branches)."""
    return _by_texture_kind(st, ctx, tid, attr.eval_vec3_tangent, volume_eval_tangent, tex_eval_tangent)


@ti.func
def _by_texture_kind(st: ti.template(), ctx, tid, on_attribute: ti.template(), on_volume: ti.template(),
                     on_bitmap: ti.template()):
    """vec3 of texture tid by its kind: a mesh attribute at the hit, a volume at ctx.p, a bitmap at ctx.uv."""
    res = vec3(0.0)
    rest = True                        # the kinds the kernel's storage cannot hold compile to nothing
    if ti.static(attr.enabled(st)):
        if attr.is_attribute(tid):
            res = on_attribute(st, tid, ctx.tri, ctx.bary)
            rest = False
    if ti.static(_volumes(st)):
        if rest and _is_volume(st, tid):
            res = on_volume(st, tid, ctx.p)
            rest = False
    if rest:
        res = on_bitmap(st, tid, ctx.uv)
    return res


@ti.func
def _lookup_adjoint(st: ti.template(), ctx, tid, d):
    rest = True
    if ti.static(attr.enabled(st)):
        if attr.is_attribute(tid):
            attr.eval_vec3_adjoint(st, tid, ctx.tri, ctx.bary, d)
            rest = False
    if ti.static(_volumes(st)):
        if rest and _is_volume(st, tid):
            volume_eval_adjoint(st, tid, ctx.p, d)
            rest = False
    if rest:
        tex_eval_adjoint(st, tid, ctx.uv, d)


@ti.func
def _flat(st: ti.template(), tid):
    """Whether colour slot texture tid is one value at every wavelength outside rgb: 1 channel (Mitsuba's
    interpolate_1), or raw (rawconstant)."""
    res = True
    if tid >= 0:
        res = st.tex_c[tid] == 1 or (st.tex_flags[tid] & TEX_RAW) != 0
    return res


@ti.func
def _spectral_texels(st: ti.template(), ctx, tid, d, adjoint: ti.template()):
    """Mitsuba's spectral lookup of a 3-channel colour bitmap tid >= 0 (BitmapTexture's interpolate_spectral): the
    texels' upsampled reflectance spectra, interpolated (not the spectrum of the interpolated RGB). Returns it, or
    (adjoint) scatters ∂<d, ·>/∂texels into the pool."""
    A = variants.spec(0.0)
    for k in range(4):                 # a runtime loop: one upsampling in the megakernel
        off, wt = tex_corner(st, tid, ctx.uv, k)
        if wt != 0.0:
            rgb = pool.value(st, off, 3)
            if ti.static(adjoint):
                pool.add_gradient(st, off, 3, wt * variants.reflectance_adjoint(rgb, ctx.lam, d))
            else:
                A += wt * variants.reflectance(rgb, ctx.lam)
    return A


@ti.func
def _spectral(st: ti.template(), ctx, tid, d, adjoint: ti.template()):
    """A 3-channel colour texture in the spectral variants, lifted texel by texel as Mitsuba (volume textures only
    where the kernel's scene has them)."""
    res = variants.spec(0.0)
    if ti.static(_volumes(st)):
        if _is_volume(st, tid):
            res = volume_spectrum(st, tid, ctx.p, ctx.lam, d, adjoint)
        else:
            res = _spectral_texels(st, ctx, tid, d, adjoint)
    else:
        res = _spectral_texels(st, ctx, tid, d, adjoint)
    return res


# A slot holds a texture index (textures.py), -1 (none: 0) or a mesh attribute (tirender/mesh_attribute.py: a
# negative index below -1).
@ti.func
def slot_rgb(st: ti.template(), ctx, k):
    """Colour texture slot k of BSDF ctx.b at the shading point, as the walk's colour: RGB in rgb; the luminance in
    mono; in the spectral variants a sampled spectrum at ctx.lam (textures.spectrum_eval), a 1-channel or raw
    texture flat (its value at every wavelength, no upsampling: Mitsuba's interpolate_1, rawconstant), a 3-channel
    one lifted texel by texel before interpolating (_spectral, as Mitsuba); a mesh attribute as mesh_attribute's
    eval_spectrum."""
    return _colour_slot(st, ctx, k, _slot_rgb)


@ti.func
def _colour_slot(st: ti.template(), ctx, k, read: ti.template()):
    """read(st, ctx, tid) of colour slot k, or 0 at compile time in a Colourless view."""
    out = variants.spec(0.0)
    if ti.static(not _colourless(st)):
        out = read(st, ctx, st.bsdf_tex[ctx.b, k])
    return out


@ti.func
def _slot_rgb(st: ti.template(), ctx, tid):
    out = variants.spec(0.0)
    if ti.static(variants.rgb()):
        out = _lookup(st, ctx, tid)
    else:
        rest = True
        if ti.static(attr.enabled(st)):
            if attr.is_attribute(tid):
                out = attr.eval_spectrum(st, tid, ctx.tri, ctx.bary, ctx.lam)
                rest = False
        if rest:
            if is_spectrum(st, tid):
                out = spectrum_eval(st, tid, ctx.lam)
            elif _flat(st, tid):
                out = variants.spec(_lookup(st, ctx, tid)[0])
            elif ti.static(variants.spectral()):
                out = _spectral(st, ctx, tid, variants.spec(0.0), False)
            else:
                out = variants.reflectance(_lookup(st, ctx, tid), ctx.lam)
    return out


@ti.func
def slot_rgb_adjoint(st: ti.template(), ctx, k, d):
    tid = st.bsdf_tex[ctx.b, k]
    if ti.static(variants.rgb()):
        _lookup_adjoint(st, ctx, tid, d)
    else:
        rest = True
        if ti.static(attr.enabled(st)):
            if attr.is_attribute(tid):
                attr.eval_spectrum_adjoint(st, tid, ctx.tri, ctx.bary, ctx.lam, d)
                rest = False
        if rest:
            if is_spectrum(st, tid):
                spectrum_eval_adjoint(st, tid, ctx.lam, d)
            elif _flat(st, tid):
                _lookup_adjoint(st, ctx, tid, vec3(d.sum(), 0.0, 0.0))   # channel 0 is read (1 channel: replicated)
            elif ti.static(variants.spectral()):
                _spectral(st, ctx, tid, d, True)
            else:
                _lookup_adjoint(st, ctx, tid, variants.reflectance_adjoint(_lookup(st, ctx, tid), ctx.lam, d))


@ti.func
def slot_unbounded(st: ti.template(), ctx, k):
    """Colour slot k as an unbounded quantity (Mitsuba's get_unbounded_texture: an absorption coefficient): RGB in
    rgb; in mono and the spectral variants variants.unbounded of the looked-up RGB (the luminance; 2 max(c) S(c / (2
    max c), λ), Mitsuba's unbounded srgb; mesh attributes likewise), a 1-channel or raw texture flat, a sampled
    spectrum at ctx.lam."""
    return _colour_slot(st, ctx, k, _slot_unbounded)


@ti.func
def _slot_unbounded(st: ti.template(), ctx, tid):
    out = variants.spec(0.0)
    if ti.static(variants.rgb()):
        out = _lookup(st, ctx, tid)
    elif is_spectrum(st, tid):
        out = spectrum_eval(st, tid, ctx.lam)
    elif _flat(st, tid) and not _is_attribute(st, tid):
        out = variants.spec(_lookup(st, ctx, tid)[0])
    else:
        out = variants.unbounded(_lookup(st, ctx, tid), ctx.lam)
    return out


@ti.func
def slot_unbounded_adjoint(st: ti.template(), ctx, k, d):
    tid = st.bsdf_tex[ctx.b, k]
    if ti.static(variants.rgb()):
        _lookup_adjoint(st, ctx, tid, d)
    elif is_spectrum(st, tid):
        spectrum_eval_adjoint(st, tid, ctx.lam, d)
    elif _flat(st, tid) and not _is_attribute(st, tid):
        _lookup_adjoint(st, ctx, tid, vec3(d.sum(), 0.0, 0.0))
    else:
        _lookup_adjoint(st, ctx, tid, variants.unbounded_adjoint(_lookup(st, ctx, tid), ctx.lam, d))


@ti.func
def slot_vec3(st: ti.template(), ctx, k):
    """A 3-channel data slot (normal maps): the texture's raw value in every variant."""
    return _lookup(st, ctx, st.bsdf_tex[ctx.b, k])


@ti.func
def slot_vec3_adjoint(st: ti.template(), ctx, k, d):
    _lookup_adjoint(st, ctx, st.bsdf_tex[ctx.b, k], d)


@ti.func
def slot_float(st: ti.template(), ctx, k):
    """Scalar (1-channel) texture slot k."""
    return _lookup(st, ctx, st.bsdf_tex[ctx.b, k])[0]


@ti.func
def slot_unit(st: ti.template(), ctx, k):
    """slot_float clamped to [0, 1] (a blend weight, an opacity); its adjoint is slot_float_adjoint's inside."""
    return ti.min(ti.max(slot_float(st, ctx, k), 0.0), 1.0)


@ti.func
def slot_float_tangent(st: ti.template(), ctx, k):
    """The tangent of slot_float along forward mode's direction (st a core/pool.Tangent view)."""
    return _lookup_tangent(st, ctx, st.bsdf_tex[ctx.b, k])[0]


@ti.func
def slot_float_adjoint(st: ti.template(), ctx, k, d):
    _lookup_adjoint(st, ctx, st.bsdf_tex[ctx.b, k], vec3(d, 0.0, 0.0))


class _Member:
    """s.<name> of a Taichi struct, called at compile time (Taichi's frontend calls it as it is, as variants.struct)."""
    _is_taichi_function = False

    def __init__(self, name):
        self.name = name

    def __call__(self, s):
        return getattr(s, self.name)


def slot_adjoints(keys):
    """The ``fetch_adjoint`` of a model whose Params name its texture keys: g.<key> into texture slot i (the i-th
    Texture key), colours by slot_rgb_adjoint, scalars by slot_float_adjoint."""
    tex = tuple((_Member(k.name), k.channels) for k in keys if k.kind == "texture")

    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        for i in ti.static(range(len(tex))):
            if ti.static(tex[i][1] == 3):
                slot_rgb_adjoint(st, ctx, i, tex[i][0](g))
            else:
                slot_float_adjoint(st, ctx, i, tex[i][0](g))

    return fetch_adjoint


@ti.func
def const(st: ti.template(), ctx, k):
    """Float constant k of the row (IORs, conductor tables, switches)."""
    return st.bsdf_f[ctx.b, k]


@ti.func
def const_rgb(st: ti.template(), ctx, k):
    """An RGB constant of the row (a conductor's η, k) as the walk's colour (unbounded upsampling)."""
    return variants.unbounded(vec3(st.bsdf_f[ctx.b, k], st.bsdf_f[ctx.b, k + 1], st.bsdf_f[ctx.b, k + 2]), ctx.lam)


@ti.func
def child(st: ti.template(), ctx, k):
    """Context of nested BSDF k (composites), same shading point."""
    return with_row(ctx, st.bsdf_child[ctx.b, k])


def leaf(cls):
    """Generate the ``*_at`` functions of a leaf model from its pure functions (see module doc)."""
    fetch, fetch_adjoint = cls.fetch, cls.fetch_adjoint
    f, pdf, sample, f_adjoint, f_grad_dirs = cls.f, cls.pdf, cls.sample, cls.f_adjoint, cls.f_grad_dirs

    @ti.func
    def eval_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return f(fetch(st, ctx), wi, wo)

    @ti.func
    def pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return pdf(fetch(st, ctx), wi, wo)

    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        p = fetch(st, ctx)
        return f(p, wi, wo), pdf(p, wi, wo)

    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        return sample(fetch(st, ctx), wi, u1, u2)

    @ti.func
    def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        fetch_adjoint(st, ctx, f_adjoint(fetch(st, ctx), wi, wo, d_out))

    @ti.func
    def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        return f_grad_dirs(fetch(st, ctx), wi, wo, d_out)

    for name, fn in (("eval_at", eval_at), ("pdf_at", pdf_at), ("eval_pdf_at", eval_pdf_at),
                     ("sample_at", sample_at), ("adjoint_at", adjoint_at), ("grad_dirs_at", grad_dirs_at)):
        setattr(cls, name, staticmethod(fn))
    if hasattr(cls, "warp"):
        _attached(cls)
    _polarizing(cls)
    cls.COMPOSITE = False
    return cls


@ti.func
def _static_view(view: ti.template(), st: ti.template()):
    """view(st), made at compile time: the storage object a fetch is traced against (inside a tuple: ti.static
    accepts containers, not arbitrary objects, and a plain call would draw Taichi's external-function warning)."""
    return ti.static((view(st),))[0]


def _polarizing(cls):
    """``mueller_at`` from a model's pure ``mueller(p, wi, wo, delta)`` (module doc), if it has one."""
    if not hasattr(cls, "mueller"):
        return
    fetch, mueller = cls.fetch, cls.mueller
    view = Colourless if getattr(cls, "MUELLER_COLOURLESS", False) else (lambda st: st)

    @ti.func
    def mueller_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
        return mueller(fetch(_static_view(view, st), ctx), wi, wo, delta)

    cls.mueller_at = staticmethod(mueller_at)
    if hasattr(cls, "mueller_tangent"):
        fetch_tangent, mueller_tangent = cls.fetch_tangent, cls.mueller_tangent

        @ti.func
        def mueller_tangent_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
            return mueller_tangent(fetch(_static_view(view, st), ctx), fetch_tangent(st, ctx), wi, wo, delta)

        cls.mueller_tangent_at = staticmethod(mueller_tangent_at)


def _attached(cls):
    """The attached-sampling functions of a leaf microfacet model with ``warp`` (module doc)."""
    fetch, fetch_adjoint, warp = cls.fetch, cls.fetch_adjoint, cls.warp
    f_adjoint, f_grad_dirs = cls.f_adjoint, cls.f_grad_dirs

    @ti.func
    def attached_alpha_at(st: ti.template(), ctx, wi, inner: ti.template()):
        a, eta = warp(fetch(st, ctx))
        return ti.max(ti.abs(a[0]), ti.abs(a[1]))

    @ti.func
    def attached_record_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        a, eta = warp(fetch(st, ctx))
        return warp_record(wi, wo, a, eta)

    @ti.func
    def attached_warp_at(st: ti.template(), ctx, wi, hw, inner: ti.template()):
        a, eta = warp(fetch(st, ctx))
        return half_warp(wi, hw, a, eta)

    @ti.func
    def attached_adjoint_at(st: ti.template(), ctx, wi, wo, d_out, k, g_wo, inner: ti.template()):
        p = fetch(st, ctx)
        a, eta = warp(p)
        gwi_f, gwo_f = f_grad_dirs(p, wi, wo, d_out)
        g_wi, g_a = half_warp_adjoint(wi, warp_record(wi, wo, a, eta), eta, gwi_f, gwo_f, k, g_wo)
        g = f_adjoint(p, wi, wo, d_out)
        g.alpha += g_a
        fetch_adjoint(st, ctx, g)
        return g_wi, vec2(0.0)

    for name, fn in (("attached_alpha_at", attached_alpha_at), ("attached_record_at", attached_record_at),
                     ("attached_warp_at", attached_warp_at), ("attached_adjoint_at", attached_adjoint_at)):
        setattr(cls, name, staticmethod(fn))


def composite(cls):
    """Complete a composite model (children through ``inner``): it writes ``eval_pdf_at``,
    ``sample_at``, ``adjoint_at`` and ``grad_dirs_at``; ``eval_at`` and ``pdf_at`` are the two halves
    of ``eval_pdf_at`` (the unused half is dead code the compiler drops)."""
    eval_pdf_at = cls.eval_pdf_at

    @ti.func
    def eval_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        f, p = eval_pdf_at(st, ctx, wi, wo, inner)
        return f

    @ti.func
    def pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        f, p = eval_pdf_at(st, ctx, wi, wo, inner)
        return p

    cls.eval_at = staticmethod(eval_at)
    cls.pdf_at = staticmethod(pdf_at)
    cls.COMPOSITE = True
    return cls


def one_sided(cls):
    """``@leaf`` for a model that is 0 unless wi and wo lie above the surface (cos θ > 0, Mitsuba's
    one-sided BRDFs): its pure functions may assume so (``sample`` is called for cos θi > 0 and
    checks its own wo)."""
    f, pdf, sample, f_adjoint, f_grad_dirs = cls.f, cls.pdf, cls.sample, cls.f_adjoint, cls.f_grad_dirs
    params = next(c.__dict__["Params"] for c in cls.__mro__ if "Params" in c.__dict__)   # a variants.struct

    @ti.func
    def f_(p, wi, wo):
        res = spec(0.0)
        if wi[2] > 0.0 and wo[2] > 0.0:
            res = f(p, wi, wo)
        return res

    @ti.func
    def pdf_(p, wi, wo):
        res = 0.0
        if wi[2] > 0.0 and wo[2] > 0.0:
            res = pdf(p, wi, wo)
        return res

    @ti.func
    def sample_(p, wi, u1, u2):
        s = invalid_sample()
        if wi[2] > 0.0:
            s = sample(p, wi, u1, u2)
        return s

    @ti.func
    def f_adjoint_(p, wi, wo, d_out):
        g = params()
        if wi[2] > 0.0 and wo[2] > 0.0:
            g = f_adjoint(p, wi, wo, d_out)
        return g

    @ti.func
    def f_grad_dirs_(p, wi, wo, d_out):
        gwi = vec3(0.0)
        gwo = vec3(0.0)
        if wi[2] > 0.0 and wo[2] > 0.0:
            gwi, gwo = f_grad_dirs(p, wi, wo, d_out)
        return gwi, gwo

    for name, fn in (("f", f_), ("pdf", pdf_), ("sample", sample_), ("f_adjoint", f_adjoint_),
                     ("f_grad_dirs", f_grad_dirs_)):
        setattr(cls, name, staticmethod(fn))
    return leaf(cls)


def dirac(cls):
    """Generate the ``*_at`` functions of a model with Dirac lobes only (it writes ``fetch`` and
    ``sample``, optionally ``dlog(p, wi, reflected) -> vec3``): eval, pdf, the parameter adjoint and
    the direction derivatives are 0 — detached PRB does not differentiate Dirac lobes (as Mitsuba's
    prb); ``dirac_dlog_at`` is attached PRB's ∂ ln(weight · probability)/∂cos θi of the sampled lobe
    (per channel; 0 without ``dlog``)."""
    fetch, sample = cls.fetch, cls.sample
    dlog = getattr(cls, "dlog", None)
    has_dlog = dlog is not None
    if hasattr(cls, "dirac_value_adjoint"):
        fetch_adjoint, value_adjoint = cls.fetch_adjoint, cls.dirac_value_adjoint

        @ti.func
        def dirac_value_adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
            fetch_adjoint(st, ctx, value_adjoint(fetch(st, ctx), wi, wo, d_out))

        cls.dirac_value_adjoint_at = staticmethod(dirac_value_adjoint_at)

    @ti.func
    def dirac_dlog_at(st: ti.template(), ctx, wi, reflected, inner: ti.template()):
        res = spec(0.0)
        if ti.static(has_dlog):
            res = dlog(fetch(st, ctx), wi, reflected)
        return res

    @ti.func
    def eval_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return spec(0.0)

    @ti.func
    def pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return 0.0

    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return spec(0.0), 0.0

    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        return sample(fetch(st, ctx), wi, u1, u2)

    @ti.func
    def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        pass

    @ti.func
    def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        return vec3(0.0), vec3(0.0)

    for name, fn in (("eval_at", eval_at), ("pdf_at", pdf_at), ("eval_pdf_at", eval_pdf_at),
                     ("sample_at", sample_at), ("adjoint_at", adjoint_at), ("grad_dirs_at", grad_dirs_at),
                     ("dirac_dlog_at", dirac_dlog_at)):
        setattr(cls, name, staticmethod(fn))
    _polarizing(cls)
    cls.COMPOSITE = False
    return cls


class Row:
    """One BSDF of a scene as the builder fills it (Python side of the st.bsdf_* tables)."""

    def __init__(self, id, tag, model):
        self.id, self.tag, self.model = id, tag, model
        self.tex = []          # texture index per slot (declaration order of Texture keys)
        self.floats = []       # model constants
        self.children = []     # nested BSDF row indices
        self.flags = model.FLAGS
