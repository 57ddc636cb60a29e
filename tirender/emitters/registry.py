"""The emitter registry: one line per model, and the dispatch generated from it.

A model's tag is its index in ``MODELS``; kernels are specialised to the set a scene uses (a tag
bitmask passed as ``ti.template()``). Emitters are chosen uniformly for next-event estimation
(probability 1/N, as Mitsuba); the pdfs and weights returned by ``sample_emitter`` and
``pdf_hit`` include that selection probability.

    sample_emitter(st, em, ref_p, u) -> DirectionSample    (emitter = -1: none)
    pdf_hit(st, em, ref_p, q) -> float                      density of having sampled hit record q
    eval(st, em, q, lam) -> Spectrum / eval_adjoint(st, em, q, d_le, lam)
    emission(st, e, rgb, lam) / emission_adjoint(...)      an emitter's RGB value through its spectrum
                                                            (Row.spectrum: RGB, black body, uniform, or a
                                                            sampled spectrum: textures.spectrum_eval)
    eval_grad(st, em, q, w, lam) -> (vec2, vec3)            ∂<w, Le(q)>/∂(q.uv, q.d): the radiance
                                                            seen at a moving point or along a moving
                                                            direction (attached PRB); 0 for models
                                                            without ``eval_grad``
    sample_ray(st, em, u_sel, u_pos, u_dir, center, radius, lam) -> (e, o, d, n, uv, weight, pos_weight)
                                                            emitted light (light tracing; base.py)
"""
import taichi as ti

from .. import variants
from ..core.math import vec3
from ..registry import mask_of, refuse_wider, register
from ..textures import spectrum_eval, spectrum_eval_adjoint
from ..variants import spec
from .area import Area
from .base import DELTA, INFINITE, SURFACE, DirectionSample, cdf_search
from .beam import Beam
from .constant import Constant
from .directional import Directional
from .envmap import Envmap
from .point import Point
from .projector import Projector
from .spot import Spot

MODELS = (
    Area,
    Point,
    Directional,
    Constant,
    Envmap,
    Spot,
    Beam,
    Projector,
)


def _derive(models):
    """(BY_NAME, ALL, N_FLOAT, N_TEX) of ``models``."""
    by_name, all_ = register(models)
    n_float = max([5] + [getattr(m, "N_CONST", 0) for m in models])   # per-emitter constants (Row.floats -> st.em_f)
    n_tex = max(max(sum(1 for k in m.KEYS if k.kind == "texture") for m in models), 1)
    return by_name, all_, n_float, n_tex


BY_NAME, ALL, N_FLOAT, N_TEX = _derive(MODELS)
_widths_used = None     # (N_TEX, N_FLOAT) the first scene's arrays were built with
__all__ = ["MODELS", "BY_NAME", "ALL", "DELTA", "INFINITE", "SURFACE", "WEIGHTED", "select", "selection_pdf",
           "sample_emitter", "pdf_hit", "eval", "ref_grad",
           "eval_adjoint", "eval_grad", "mask_of", "sample_ray", "add", "table_widths"]


def table_widths():
    """(N_TEX, N_FLOAT): the widths of the per-emitter tables a scene's arrays are built with (scene/scene.py);
    from the first call on, ``add`` refuses models that would widen them."""
    global _widths_used
    _widths_used = (N_TEX, N_FLOAT)
    return _widths_used


def add(model):
    """Append ``model`` (a user model, tirender/plugins.py) as tag len(MODELS) and recompute the derived tables.
    ConfigError (one line) if it would widen the tables of scenes already built."""
    global MODELS, BY_NAME, ALL, N_FLOAT, N_TEX
    n_tex = sum(1 for k in model.KEYS if k.kind == "texture")
    refuse_wider(_widths_used, (("texture slots", n_tex), ("float constants", getattr(model, "N_CONST", 0))))
    MODELS = MODELS + (model,)
    BY_NAME, ALL, N_FLOAT, N_TEX = _derive(MODELS)


WEIGHTED = 1 << 30   # a flag of an emitter mask (above every model's tag): the scene's sampling weights differ


@ti.func
def select(st: ti.template(), em: ti.template(), u):
    """The scene's choice of an emitter with u in [0, 1): (e, inv, u'): emitter e, the inverse of its probability
    and u rescaled to [0, 1) within e's share (Mitsuba's DiscreteDistribution.sample_reuse_pmf). Uniform (inv = n)
    unless em holds WEIGHTED (compile time: only scenes whose emitters' sampling weights differ carry the CDF
    search); then Σw / w_e from the CDF at st.env_dist[st.info_i[3]:] (scene.py). Needs emitters (n > 0)."""
    n = st.info_i[0]
    e = 0
    inv = ti.cast(n, float)
    ur = 0.0
    if ti.static(em & WEIGHTED):
        base = st.info_i[3]
        e = cdf_search(st, base, n, u)           # (never a share of 0)
        inv = 1.0 / ti.max(selection_pdf(st, em, e), 1e-30)
        ur = ti.min(ti.max((u - st.env_dist[base + e]) * inv, 0.0), 0.99999994)
    else:
        x = u * n
        e = ti.min(ti.cast(x, ti.i32), n - 1)
        ur = ti.min(x - e, 0.99999994)
    return e, inv, ur


@ti.func
def selection_pdf(st: ti.template(), em: ti.template(), e):
    """The probability that ``select`` chooses emitter e: w_e / Σw (0 for a sampling weight of 0), 1 / n."""
    p = 1.0 / st.info_i[0]
    if ti.static(em & WEIGHTED):
        base = st.info_i[3]
        p = st.env_dist[base + e + 1] - st.env_dist[base + e]
    return p


@ti.func
def sample_emitter(st: ti.template(), em: ti.template(), ref_p, u, lam):
    """Choose an emitter with u[0] (``select``: by the sampling weights), then sample a direction towards it
    (weight and le as the walk's colour at wavelengths lam: tirender/variants.py; pdf with the choice's
    probability)."""
    n = st.info_i[0]
    ds = DirectionSample(emitter=-1)
    if n > 0:
        e, inv, u0 = select(st, em, u[0])
        ur = ti.Vector([u0, u[1]], dt=float)
        t = st.em_type[e]
        for i in ti.static(range(len(MODELS))):
            if ti.static(em & (1 << MODELS[i].TAG)):
                if t == MODELS[i].TAG:
                    ds = MODELS[i].sample_direction(st, e, ref_p, ur)
        ds.pdf = ds.pdf / inv
        for j in range(2):             # Le / pdf (the upsampling is 1-homogeneous), then Le: one emission() inlined
            out = emission(st, e, ds.weight_rgb * inv if j == 0 else ds.le_rgb, lam)
            if j == 0:
                ds.weight = out
            else:
                ds.le = out
        if ti.static(variants.spectral() and _any_lifts(em)):
            lift = _texel_spectra(st, em, ds.emitter)
            if lift >= 0:              # texels lifted to spectra: Le / pdf from the spectral Le
                ds.le = _eval_spectral(st, em, lift, ds.emitter, ds.d, lam)
                ds.weight = spec(0.0)
                if ds.pdf > 0.0:
                    ds.weight = ds.le / ds.pdf
    return ds


@ti.func
def emission(st: ti.template(), e, rgb, lam):
    """Emitter e's radiance value rgb (its texture's RGB: W m⁻² sr⁻¹, or the unit of its slot) as the
    walk's colour at wavelengths lam, through the emitter's spectrum (``Row.spectrum``: RGB, black body or
    uniform; the RGB and mono variants multiply by the spectrum's sRGB ``st.em_tint[e]``)."""
    out = spec(0.0)
    if ti.static(variants.spectral()):
        if st.em_spec[e] == variants.SPECTRUM_SAMPLED:   # rgb: the model's unit factor (base.slot) × scale
            out = spectrum_eval(st, st.em_tex[e, 0], lam) * rgb[0]
        else:
            out = variants.emission_spectrum(rgb, lam, st.em_spec[e], st.em_temp[e])
    else:
        out = variants.emission(rgb * st.em_tint[e], lam)
    return out


@ti.func
def emission_adjoint(st: ti.template(), e, rgb, lam, d):
    """∂<d, emission(st, e, rgb, λ)>/∂rgb (a sampled spectrum: ∂/∂ of its factor rgb[0]; the spectrum's own
    values are differentiated by eval_adjoint)."""
    g = vec3(0.0)
    if ti.static(variants.spectral()):
        if st.em_spec[e] == variants.SPECTRUM_SAMPLED:
            g[0] = d.dot(spectrum_eval(st, st.em_tex[e, 0], lam))
        else:
            g = variants.emission_spectrum_adjoint(rgb, lam, st.em_spec[e], st.em_temp[e], d)
    else:
        g = variants.emission_adjoint(rgb * st.em_tint[e], lam, d) * st.em_tint[e]
    return g


@ti.func
def pdf_hit(st: ti.template(), em: ti.template(), ref_p, q):
    """Solid-angle density (incl. selection) that emitter sampling from ref_p produces hit record q."""
    res = 0.0
    t = st.em_type[q.emitter]
    for i in ti.static(range(len(MODELS))):
        if ti.static(em & (1 << MODELS[i].TAG)):
            if t == MODELS[i].TAG:
                res = MODELS[i].pdf_direction(st, q.emitter, ref_p, q)
    if ti.static(em & WEIGHTED):
        res = res * selection_pdf(st, em, q.emitter)
    else:
        res = res / st.info_i[0]
    return res


def _lifts_texels(m):
    """Whether model m lifts its texels to spectra before interpolating in the spectral variants (Envmap, as
    Mitsuba's envmap): ``eval_spectral(st, e, d, λ)`` / ``eval_spectral_adjoint(st, e, d, λ, d_le)``."""
    return hasattr(m, "eval_spectral")


def _any_lifts(em):
    """Whether emitter mask em holds a model that lifts its texels (compile time)."""
    return any(em & (1 << m.TAG) and _lifts_texels(m) for m in MODELS)


@ti.func
def _texel_spectra(st: ti.template(), em: ti.template(), e):
    """Model index i (in MODELS) whose eval_spectral serves emitter e at this point, or -1: the spectral
    variants, a model that lifts its texels (_lifts_texels), an RGB spectrum (not a sampled one)."""
    res = -1
    if ti.static(variants.spectral()):
        if e >= 0 and st.em_spec[e] != variants.SPECTRUM_SAMPLED:
            t = st.em_type[e]
            for i in ti.static(range(len(MODELS))):
                if ti.static(em & (1 << MODELS[i].TAG) and _lifts_texels(MODELS[i])):
                    if t == MODELS[i].TAG:
                        res = i
    return res


@ti.func
def _eval_spectral(st: ti.template(), em: ti.template(), i, e, d, lam):
    res = spec(0.0)
    for j in ti.static(range(len(MODELS))):
        if ti.static(em & (1 << MODELS[j].TAG) and _lifts_texels(MODELS[j])):
            if i == j:
                res = MODELS[j].eval_spectral(st, e, d, lam)
    return res


@ti.func
def eval(st: ti.template(), em: ti.template(), q, lam):
    """Le of record q (emitter q.emitter) as the walk's colour at wavelengths lam."""
    res = spec(0.0)
    if ti.static(variants.spectral() and _any_lifts(em)):
        lift = _texel_spectra(st, em, q.emitter)
        if lift >= 0:
            res = _eval_spectral(st, em, lift, q.emitter, q.d, lam)
        else:
            res = emission(st, q.emitter, eval_rgb(st, em, q), lam)
    else:
        res = emission(st, q.emitter, eval_rgb(st, em, q), lam)
    return res


@ti.func
def eval_rgb(st: ti.template(), em: ti.template(), q):
    """Le of record q in the emitter's own RGB (every variant)."""
    res = vec3(0.0)
    t = st.em_type[q.emitter]
    for i in ti.static(range(len(MODELS))):
        if ti.static(em & (1 << MODELS[i].TAG)):
            if t == MODELS[i].TAG:
                res = MODELS[i].eval(st, q.emitter, q)
    return res


@ti.func
def eval_adjoint(st: ti.template(), em: ti.template(), q, d_le, lam):
    """Scatter ∂<d_le, Le(q)>/∂π into the gradient pool (d_le: per lane of the walk's colour)."""
    lift = -1
    if ti.static(variants.spectral() and _any_lifts(em)):
        lift = _texel_spectra(st, em, q.emitter)
        for j in ti.static(range(len(MODELS))):
            if ti.static(em & (1 << MODELS[j].TAG) and _lifts_texels(MODELS[j])):
                if lift == j:
                    MODELS[j].eval_spectral_adjoint(st, q.emitter, q.d, lam, d_le)
    if lift < 0 and q.emitter >= 0:
        rgb = vec3(0.0)
        if ti.static(variants.spectral()):
            rgb = eval_rgb(st, em, q)
            if ti.max(rgb[0], rgb[1], rgb[2]) <= 0.0:
                rgb = q.le_rgb              # a Dirac emitter's sampled record
        d_rgb = emission_adjoint(st, q.emitter, rgb, lam, d_le)   # (rgb, mono: linear, rgb unused)
        sampled = False
        if ti.static(variants.spectral()):
            sampled = st.em_spec[q.emitter] == variants.SPECTRUM_SAMPLED
            if sampled:      # Le = rgb[0] S(λ): the spectrum's values (rgb[0]: the model's factor, 0 off its front)
                spectrum_eval_adjoint(st, st.em_tex[q.emitter, 0], lam, d_le * rgb[0])
        if not sampled:
            t = st.em_type[q.emitter]
            for i in ti.static(range(len(MODELS))):
                if ti.static(em & (1 << MODELS[i].TAG)):
                    if t == MODELS[i].TAG:
                        MODELS[i].eval_adjoint(st, q.emitter, q, d_rgb)


@ti.func
def eval_grad(st: ti.template(), em: ti.template(), q, w, lam):
    """(∂/∂uv, ∂/∂d) of <w, Le(q)> (textured area lights: the radiance texture's slope at q.uv;
    environment maps: its slope along the direction q.d); w per lane of the walk's colour at
    wavelengths lam (taken to the emitter's RGB through its spectrum's adjoint)."""
    return _model_grad(st, em, q, w, lam, "eval_grad")


@ti.func
def ref_grad(st: ti.template(), em: ti.template(), q, w, lam):
    """∂<w, Le/pdf>/∂ref_p of a sample q = sample_direction(ref_p) of an emitter at a point (point, spot,
    projector: their ``ref_grad``; the light held, the direction and distance from ref_p = q.p - q.dist q.d moving):
    the weight of next-event estimation at a vertex that moves (integrators/prb_attached.py). 0 for the others, whose
    samples are directions held fixed there (area, environment) or do not depend on ref_p (directional)."""
    _g_uv, g = _model_grad(st, em, q, w, lam, "ref_grad")
    return g / ti.max(q.pdf, 1e-30)           # the models' Le; q.pdf: the emitter's choice (a Dirac's pdf 1)


@ti.func
def _model_grad(st: ti.template(), em: ti.template(), q, w, lam, which: ti.template()):
    """The model's ``eval_grad`` ((∂/∂uv, ∂/∂d)) or ``ref_grad`` ((0, ∂/∂ref_p)) of <w, Le(q)>, w taken to the
    emitter's own RGB at record q (through its spectrum's adjoint: <w, Le> moves as <w_rgb, rgb> does)."""
    g_uv = ti.Vector([0.0, 0.0], dt=float)
    g = vec3(0.0)
    if q.emitter >= 0:
        w_rgb = vec3(0.0)
        if ti.static(variants.rgb()):
            w_rgb = w * st.em_tint[q.emitter]
        else:
            w_rgb = emission_adjoint(st, q.emitter, eval_rgb(st, em, q), lam, w)
        t = st.em_type[q.emitter]
        for i in ti.static(range(len(MODELS))):
            if ti.static(em & (1 << MODELS[i].TAG) and hasattr(MODELS[i], which)):
                if t == MODELS[i].TAG:
                    if ti.static(which == "eval_grad"):
                        g_uv, g = MODELS[i].eval_grad(st, q.emitter, q, w_rgb)
                    else:
                        g = MODELS[i].ref_grad(st, q.emitter, q, w_rgb)
    return g_uv, g


@ti.func
def sample_ray(st: ti.template(), em: ti.template(), u_sel, u_pos, u_dir, center, radius, lam):
    """Choose an emitter with u_sel (``select``), then a ray of its light (the model's sample_ray): (e,
    o, d, n, uv, weight, pos_weight) with the choice's probability in both weights (e = -1:
    the scene has no emitter); the weight Le |cos| / pdf as the walk's colour at wavelengths lam
    (through the emitter's spectrum: the models' RGB weights are Le times a scalar, and the conversion
    is 1-homogeneous)."""
    n_em = st.info_i[0]
    e = -1
    o = vec3(0.0)
    d = vec3(0.0, 0.0, 1.0)
    nrm = vec3(0.0)
    uv = ti.Vector([0.5, 0.5], dt=float)
    w = vec3(0.0)
    ws = spec(0.0)
    pw = 0.0
    if n_em > 0:
        e, inv, _u = select(st, em, u_sel)
        t = st.em_type[e]
        for i in ti.static(range(len(MODELS))):
            if ti.static(em & (1 << MODELS[i].TAG)):
                if t == MODELS[i].TAG:
                    o, d, nrm, uv, w, pw = MODELS[i].sample_ray(st, e, u_pos, u_dir, center, radius)
        ws = emission(st, e, w * inv, lam)
        pw = pw * inv
    return e, o, d, nrm, uv, ws, pw
