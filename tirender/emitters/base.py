"""What every emitter model shares: flags, the direction-sample record and texture-slot access.

An emitter model is a class in its own module that declares NAME (its YAML ``type``), KEYS
(tirender.schema; Texture keys become pool parameters ``<id>.<param>`` in slots 0, 1, ...),
FLAGS, an optional ``build(b, row, values, key)`` (Python: positions, frames, extra textures) and
the Taichi functions the dispatch (``registry.py``) calls:

    sample_direction(st, e, ref_p, u) -> DirectionSample   towards the emitter from ref_p; pdf in
                                          solid angle *without* the emitter-selection probability
    pdf_direction(st, e, ref_p, q) -> float   density of sampling record q (a hit found by a path)
    eval(st, e, q) -> vec3                    Le carried by record q (a hit, or a NEE sample)
    eval_adjoint(st, e, q, d_le)              scatter ∂<d_le, eval>/∂π into the gradient pool
    sample_ray(st, e, u_pos, u_dir, center, radius) -> (o, d, n, uv, weight, pos_weight)
                                          a ray of emitted light (light tracing): origin o, unit
                                          direction d, the emitter's normal n at o (0 off surfaces),
                                          uv, weight = Le |cos| / (pdf_pos pdf_dir) (RGB) and
                                          pos_weight = 1 / pdf_pos (area) for surface emitters, else
                                          0. center, radius: the scene's bounding sphere (emitters at
                                          infinity start their rays on a disk that covers it);
                                          uv: what ``eval`` of a record with this uv and scale 1
                                          looks up (the light tracer's replay scatters its adjoint)
    distribution(img) -> float32 array        optional (Python): a sampling distribution built on the
                                          host from the model's first texture img (H, W, C), stored
                                          in st.env_dist at st.em_dist[e] (rebuilt when it is set)

Records ``q`` are DirectionSamples; for a hit found by a path, ``direction_record`` builds one:
d is the direction of travel towards the emitter (the ray direction), p/n/uv the hit.

Every model also takes the COMMON_KEYS (``sampling_weight``: the scene's choice of an emitter, registry.py).
"""
import taichi as ti

from .. import variants
from ..core.math import BIG, PI, coordinate_system, vec2, vec3
from ..core.warp import square_to_uniform_disk_concentric
from ..schema import Number
from ..textures import is_spectrum, tex_eval, tex_eval_adjoint

SURFACE = 1     # attached to a shape; found by rays hitting it
DELTA = 2       # a Dirac in position or direction (point, directional): never hit, no MIS
INFINITE = 4    # the environment: found by rays that escape (at most one per scene)

# the keys of every emitter model, as Mitsuba's Emitter base class reads them
COMMON_KEYS = (Number("sampling_weight", default=1.0, lo=0.0,
                      doc="relative probability of choosing this emitter for next-event estimation and light "
                          "tracing (Mitsuba's sampling_weight; 0: never chosen, so a Dirac emitter adds nothing)"),)


# Emitter sample (or hit) seen from a reference point.
#
# p, n: point on the emitter and its normal; d: unit direction ref -> p (the direction of travel);
# dist: distance (BIG for infinite emitters); pdf: solid-angle density (incl. the emitter-selection
# probability once returned by the registry); delta: 1 for point/directional; weight_rgb: Le / pdf and le_rgb:
# the emitted radiance Le in the emitter's RGB (what models write; 0 if invalid); weight, le: the same as the
# walk's colour (Spectrum; filled by the registry's sample_emitter); emitter: index (-1: none); uv: texture
# coordinates of the radiance lookup; scale: factor between the radiance texture and Le (1/dist² for point
# lights, 1 otherwise).
DirectionSample = variants.struct(p=vec3, n=vec3, d=vec3, dist=float, pdf=float, delta=ti.i32,
                                  weight_rgb=vec3, le_rgb=vec3, weight=variants.SPECTRUM, le=variants.SPECTRUM,
                                  emitter=ti.i32, uv=vec2, scale=float)


@ti.func
def direction_record(e, p, n, uv, d, dist):
    """The record of a hit on emitter e at p (normal n, texture coordinates uv) by a ray along d."""
    return DirectionSample(p=p, n=n, d=d, dist=dist, uv=uv, emitter=e, scale=1.0, delta=0)


@ti.func
def env_record(e, ref_p, d):
    """The record of an escaped ray o + t d seen as a hit on the environment emitter e."""
    return DirectionSample(p=ref_p + d * 1e6, n=-d, d=d, dist=BIG, uv=vec2(0.5), emitter=e, scale=1.0, delta=0)


@ti.func
def infinite_ray(model: ti.template(), st: ti.template(), e, u_pos, u_dir, center, radius):
    """``sample_ray`` of an emitter at infinity (model: its class): a ray of light arriving along -ds.d, ds =
    model.sample_direction(st, e, center, u_dir) (delta = 1 for a directional light), origin on the disk of
    `radius` facing it, one radius before the centre. Returns (o, d, n = 0, uv = (0.5, 0.5),
    weight = Le / (pdf_dir · 1/(π r²)), pdf 0)."""
    ds = model.sample_direction(st, e, center, u_dir)
    d = -ds.d
    s, t = coordinate_system(d)
    q = square_to_uniform_disk_concentric(u_pos) * radius
    o = center - d * radius + s * q[0] + t * q[1]
    w = vec3(0.0)
    if ds.pdf > 0.0:
        w = ds.le_rgb * (PI * radius * radius / ds.pdf)
    return o, d, vec3(0.0), vec2(0.5), w, 0.0


@ti.func
def dist_header(st: ti.template(), e):
    """(base, W, H): where emitter e's sampling distribution starts in st.env_dist and the texel grid
    its first two values give."""
    base = st.em_dist[e]
    return base, ti.cast(st.env_dist[base], ti.i32), ti.cast(st.env_dist[base + 1], ti.i32)


@ti.func
def cdf_search(st: ti.template(), base, n, u):
    """Largest i in [0, n) with cdf[base + i] <= u, for a CDF of n + 1 entries (cdf[0] = 0) stored at
    ``st.env_dist[base:]`` (the emitters' sampling distributions, ``distribution`` in the models)."""
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if st.env_dist[base + mid] <= u:
            lo = mid
        else:
            hi = mid - 1
    return lo


@ti.func
def slot(st: ti.template(), e, k, uv):
    """RGB texture slot k of emitter e at uv. A sampled spectrum (spectral variants, the emitter's spectrum
    kind SPECTRUM_SAMPLED) is a unit factor here: the registry's ``emission`` multiplies by its value at the
    path's wavelengths."""
    res = vec3(0.0)
    tid = st.em_tex[e, k]
    if ti.static(variants.spectral()):
        if is_spectrum(st, tid):
            res = vec3(1.0)
        else:
            res = tex_eval(st, tid, uv)
    else:
        res = tex_eval(st, tid, uv)
    return res


@ti.func
def slot_adjoint(st: ti.template(), e, k, uv, d):
    """Adjoint of slot (not called for a sampled spectrum: the registry's ``eval_adjoint`` differentiates its
    values)."""
    tex_eval_adjoint(st, st.em_tex[e, k], uv, d)


class AtPosition:
    """A light at the point its ``position`` key gives (Vec3): ``build`` sets the row's position (the built-in
    ``point``; a user's point-like lights, docs/plugins.md)."""

    @staticmethod
    def build(b, row, values, key):
        row.position = tuple(float(x) for x in values["position"])


class DeltaEmitter:
    """What the delta emitters (a Dirac in position or direction) share: never hit (pdf 0); the Le a
    sample carries is texture slot 0 times the sample's ``scale`` (1/dist² for a point light)."""
    FLAGS = DELTA

    @staticmethod
    @ti.func
    def pdf_direction(st: ti.template(), e, ref_p, q):
        return 0.0

    @staticmethod
    @ti.func
    def eval(st: ti.template(), e, q):
        return slot(st, e, 0, q.uv) * q.scale

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        slot_adjoint(st, e, 0, q.uv, d_le * q.scale)

    @staticmethod
    @ti.func
    def ref_grad(st: ti.template(), e, q, w):
        """∂<w, Le>/∂ref_p of a sample q of a light at a point that radiates alike in every direction (Le =
        slot 0 / r²; a light with a profile overrides it: spot, projector; a light at infinity is never asked)."""
        return distance_grad(slot(st, e, 0, q.uv) * q.scale, w, q)


@ti.func
def distance_grad(le, w, q):
    """∂/∂ref_p of <w, Le> through Le's 1/r² alone (Le of sample q of a light at a point, r = q.dist, d = q.d
    towards the light): <w, Le> 2 d / r."""
    return le.dot(w) * 2.0 * q.d / ti.max(q.dist, 1e-20)


@ti.func
def direction_grad(g_d, q):
    """∂/∂ref_p through the direction d = (p - ref_p) / r of sample q, from g_d = ∂/∂d (r = q.dist):
    -(I - d dᵀ) g_d / r."""
    return -(g_d - q.d * q.d.dot(g_d)) / ti.max(q.dist, 1e-20)


class Row:
    """One emitter of a scene as the builder fills it (Python side of the st.em_* tables)."""

    def __init__(self, id, tag, model, shape=-1):
        self.id, self.tag, self.model, self.shape = id, tag, model, shape
        self.tex = []
        self.position = (0.0, 0.0, 0.0)
        self.direction = (0.0, 0.0, -1.0)
        self.to_world = None
        self.floats = []            # model constants, st.em_f[e, 0:N_FLOAT] (e.g. a spot's falloff)
        self.sampling_weight = 1.0  # the relative probability of choosing it (COMMON_KEYS; registry.select)
        self.flags = model.FLAGS
        # the spectrum of its light (variants.SPECTRUM_*, st.em_spec): RGB (D65-scaled in the spectral
        # variant), a black body at `temperature` K (st.em_temp), uniform, or a sampled spectrum (spectral: the
        # radiance texture holds a wavelength list's values, textures.py); `tint` (st.em_tint) is the
        # spectrum's linear sRGB per unit texture value, by which the RGB and mono variants multiply
        self.spectrum = 0
        self.temperature = 0.0
        self.tint = (1.0, 1.0, 1.0)
