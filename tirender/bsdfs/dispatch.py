"""Runtime dispatch over the BSDF type tags, specialised at compile time.

``types`` is a Python int bitmask (bit ``1 << tag`` set = that model is used by the scene),
passed as a compile-time constant (``ti.template()``); every model's branch is guarded by
``if ti.static(types & (1 << TAG))`` so only the used models are compiled. ``t`` is the
runtime integer tag (see ``tirender.bsdfs``: DIFFUSE=0, SMOOTH_CONDUCTOR=1,
ROUGH_CONDUCTOR=2, SMOOTH_DIELECTRIC=3, ROUGH_DIELECTRIC=4, ROUGH_PLASTIC=5, NULL=6).
A tag whose bit is not in ``types`` behaves as a black surface (eval/pdf 0, invalid sample).

Taichi funcs (local shading frame, z = normal, Mitsuba 3 conventions, see common.py):

    bsdf_eval(types: ti.template(), t, p: BsdfParams, wi, wo) -> vec3
        f(wi, wo) |cos θo|
    bsdf_pdf(types: ti.template(), t, p: BsdfParams, wi, wo) -> float
        solid-angle density of bsdf_sample (0 for Dirac lobes)
    bsdf_sample(types: ti.template(), t, p: BsdfParams, wi, u1: float, u2: vec2) -> BsdfSample
        u1 picks the lobe, u2 the direction; weight = eval / pdf
    bsdf_eval_adjoint(types: ti.template(), t, p: BsdfParams, wi, wo, d_out: vec3) -> BsdfParams
        gradient of <d_out, bsdf_eval(...)> w.r.t. reflectance, specular, transmittance, alpha
        (other fields 0)
    is_delta_only(t) -> i32        1 for models with Dirac lobes only (smooth conductor,
                                   smooth dielectric, null): skip emitter sampling / MIS
    has_smooth_lobes(t) -> i32     1 - is_delta_only(t)
    handles_both_sides(t) -> i32   1 for models that treat wi below the surface themselves
                                   (dielectrics, null): the renderer must not apply its
                                   ``twosided`` flip to them; the others are one-sided.

``eval``, ``pdf``, ``sample`` and ``eval_adjoint`` are aliases of the bsdf_* funcs.
NULL (tag 6) is an index-matched pass-through interface: eval/pdf 0, sample gives
wo = -wi, weight 1, pdf 1, delta = 1, eta = 1.

Python helpers: ``types_mask(tags)`` builds the bitmask from an iterable of tags;
``ALL_TYPES`` has every bit set; ``DELTA_ONLY_TYPES`` / ``BOTH_SIDES_TYPES`` are tag sets.
"""
import taichi as ti

from ..core.math import vec3
from . import (DIFFUSE, NULL, ROUGH_CONDUCTOR, ROUGH_DIELECTRIC, ROUGH_PLASTIC,
               SMOOTH_CONDUCTOR, SMOOTH_DIELECTRIC)
from . import diffuse as _diffuse
from . import rough_conductor as _rough_conductor
from . import rough_dielectric as _rough_dielectric
from . import rough_plastic as _rough_plastic
from . import smooth_conductor as _smooth_conductor
from . import smooth_dielectric as _smooth_dielectric
from .common import BsdfParams, BsdfSample

NUM_TYPES = 7
ALL_TYPES = (1 << NUM_TYPES) - 1
DELTA_ONLY_TYPES = frozenset((SMOOTH_CONDUCTOR, SMOOTH_DIELECTRIC, NULL))
BOTH_SIDES_TYPES = frozenset((SMOOTH_DIELECTRIC, ROUGH_DIELECTRIC, NULL))


def types_mask(tags):
    """Bitmask of an iterable of type tags (ints)."""
    mask = 0
    for t in tags:
        t = int(t)
        if not 0 <= t < NUM_TYPES:
            raise ValueError(f"unknown BSDF type tag {t}")
        mask |= 1 << t
    return mask


@ti.func
def bsdf_eval(types: ti.template(), t, p: BsdfParams, wi, wo):
    res = vec3(0.0)
    if ti.static(types & (1 << DIFFUSE)):
        if t == DIFFUSE:
            res = _diffuse.eval(p, wi, wo)
    if ti.static(types & (1 << ROUGH_CONDUCTOR)):
        if t == ROUGH_CONDUCTOR:
            res = _rough_conductor.eval(p, wi, wo)
    if ti.static(types & (1 << ROUGH_DIELECTRIC)):
        if t == ROUGH_DIELECTRIC:
            res = _rough_dielectric.eval(p, wi, wo)
    if ti.static(types & (1 << ROUGH_PLASTIC)):
        if t == ROUGH_PLASTIC:
            res = _rough_plastic.eval(p, wi, wo)
    # smooth conductor / smooth dielectric / null: Dirac lobes only, eval = 0
    return res


@ti.func
def bsdf_pdf(types: ti.template(), t, p: BsdfParams, wi, wo):
    res = 0.0
    if ti.static(types & (1 << DIFFUSE)):
        if t == DIFFUSE:
            res = _diffuse.pdf(p, wi, wo)
    if ti.static(types & (1 << ROUGH_CONDUCTOR)):
        if t == ROUGH_CONDUCTOR:
            res = _rough_conductor.pdf(p, wi, wo)
    if ti.static(types & (1 << ROUGH_DIELECTRIC)):
        if t == ROUGH_DIELECTRIC:
            res = _rough_dielectric.pdf(p, wi, wo)
    if ti.static(types & (1 << ROUGH_PLASTIC)):
        if t == ROUGH_PLASTIC:
            res = _rough_plastic.pdf(p, wi, wo)
    return res


@ti.func
def bsdf_sample(types: ti.template(), t, p: BsdfParams, wi, u1, u2):
    s = BsdfSample(eta=1.0, delta=0, valid=0)
    if ti.static(types & (1 << DIFFUSE)):
        if t == DIFFUSE:
            s = _diffuse.sample(p, wi, u1, u2)
    if ti.static(types & (1 << SMOOTH_CONDUCTOR)):
        if t == SMOOTH_CONDUCTOR:
            s = _smooth_conductor.sample(p, wi, u1, u2)
    if ti.static(types & (1 << ROUGH_CONDUCTOR)):
        if t == ROUGH_CONDUCTOR:
            s = _rough_conductor.sample(p, wi, u1, u2)
    if ti.static(types & (1 << SMOOTH_DIELECTRIC)):
        if t == SMOOTH_DIELECTRIC:
            s = _smooth_dielectric.sample(p, wi, u1, u2)
    if ti.static(types & (1 << ROUGH_DIELECTRIC)):
        if t == ROUGH_DIELECTRIC:
            s = _rough_dielectric.sample(p, wi, u1, u2)
    if ti.static(types & (1 << ROUGH_PLASTIC)):
        if t == ROUGH_PLASTIC:
            s = _rough_plastic.sample(p, wi, u1, u2)
    if ti.static(types & (1 << NULL)):
        if t == NULL:
            s.wo = -wi
            s.weight = vec3(1.0)
            s.pdf = 1.0
            s.eta = 1.0
            s.delta = 1
            s.valid = 1
    return s


@ti.func
def bsdf_eval_adjoint(types: ti.template(), t, p: BsdfParams, wi, wo, d_out):
    g = BsdfParams()
    if ti.static(types & (1 << DIFFUSE)):
        if t == DIFFUSE:
            g = _diffuse.eval_adjoint(p, wi, wo, d_out)
    if ti.static(types & (1 << ROUGH_CONDUCTOR)):
        if t == ROUGH_CONDUCTOR:
            g = _rough_conductor.eval_adjoint(p, wi, wo, d_out)
    if ti.static(types & (1 << ROUGH_DIELECTRIC)):
        if t == ROUGH_DIELECTRIC:
            g = _rough_dielectric.eval_adjoint(p, wi, wo, d_out)
    if ti.static(types & (1 << ROUGH_PLASTIC)):
        if t == ROUGH_PLASTIC:
            g = _rough_plastic.eval_adjoint(p, wi, wo, d_out)
    return g


@ti.func
def is_delta_only(t):
    res = 0
    if t == SMOOTH_CONDUCTOR or t == SMOOTH_DIELECTRIC or t == NULL:
        res = 1
    return res


@ti.func
def has_smooth_lobes(t):
    return 1 - is_delta_only(t)


@ti.func
def handles_both_sides(t):
    res = 0
    if t == SMOOTH_DIELECTRIC or t == ROUGH_DIELECTRIC or t == NULL:
        res = 1
    return res


eval = bsdf_eval
pdf = bsdf_pdf
sample = bsdf_sample
eval_adjoint = bsdf_eval_adjoint
