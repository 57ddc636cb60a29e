"""Unidirectional path tracer with next-event estimation, power-heuristic MIS and Russian roulette
(Mitsuba 3 ``path`` semantics), written once for the primal walk, the PRB replay (prb.py) and RB's
nested radiance estimates (rb.py).

``walk(..., mode, s, ...)`` runs a path from state ``s`` (see tirender/walk): at every surface hit
it adds the emission found (MIS-weighted), stops at ``max_depth``, does next-event estimation,
samples the BSDF and plays Russian roulette. In REPLAY mode (detached PRB, Vicini et al. 2021
§4.1) the same path is walked again: L starts at the primal radiance, each term is subtracted
when met and δL is back-propagated through the emitters, the NEE terms and the indirect terms.
Depth semantics: ``max_depth`` counts path segments (1: only directly visible emitters, 2: direct
illumination; -1: unbounded); RR applies from ``depth >= rr_depth``.
"""
from types import SimpleNamespace

import taichi as ti

from .. import launch
from ..bsdfs.registry import dispatch
from ..errors import ConfigError
from ..schema import Bool, Choice, Integer, Number
from ..walk import steps, vertex
from ..walk.state import camera_state, result, segment_end
from . import kernels

RR_MAX = 0.95   # Mitsuba 3 path: survival probability cap
# `direct` = path with max_depth <= 2; `prb` renders like path; Mitsuba's projective-sampling integrators
# (prb_projective, direct_projective) render like path / direct (their settings concern gradients only)
NAMES = ("path", "direct", "prb", "prb_projective", "direct_projective")
MOMENTS = True   # render(second_moment=True): the moment integrator can wrap these (integrators/moment.py)
DIRECT = ("direct", "direct_projective")
# Mitsuba 3's defaults where they differ from tirender's YAML ones (its path: max_depth -1; the Python AD
# integrators prb, prb_projective: 6, common.py; direct ignores max_depth)
MITSUBA_DEFAULTS = {"path": {"max_depth": -1}, "prb": {"max_depth": 6}, "prb_projective": {"max_depth": 6}}
VARIANTS = ("rgb", "mono", "spectral", "spectral_polarized")   # tirender/variants.py (others: rgb only)
WALK_KEYS = (Integer("max_depth", default=6, lo=-1, hi=1 << 20,
                     exclude=((0, "it would render nothing, as in Mitsuba; 1: only directly visible emitters, "
                                  "-1: unbounded"),),
                     doc="longest path in segments (-1: unbounded; 0 is refused: it would render nothing)"),
             Integer("rr_depth", default=5, lo=1, hi=1 << 20, doc="Russian roulette from this depth"),
             Bool("hide_emitters", default=False,
                  doc="directly visible emitters are hidden: camera rays pass through area emitters, the environment "
                      "is black (Mitsuba 3's)"))
"""The keys every path-space walk shares (volpath, ptracer, mcmc add theirs)."""
KEYS = WALK_KEYS + (Number("attached_roughness", default=0.0, lo=0.0,
                           doc="method prb_attached: microfacet lobes (roughconductor, roughdielectric, also "
                               "under normal maps) with α <= this are sampled attached (near-specular; 0: "
                               "Dirac lobes only)"),
                          Integer("sppp", default=-1, lo=-1, hi=1 << 20,
                                  doc="method prb_attached with differentiable meshes: edge samples per pixel for "
                                      "the primary-visibility boundary term (integrators/edges.py; -1: the "
                                      "gradient pass's spp, 0: none)"),
                          Integer("emitter_samples", default=None, lo=0, hi=1 << 20,
                                  doc="direct: emitter samples per shading point (Mitsuba's; tirender takes one "
                                      "per camera sample: other counts are refused, raise spp instead)"),
                          Integer("bsdf_samples", default=None, lo=0, hi=1 << 20,
                                  doc="direct: BSDF samples per shading point (as emitter_samples)"),
                          Integer("shading_samples", default=None, lo=0, hi=1 << 20,
                                  doc="direct: emitter_samples and bsdf_samples at once (as emitter_samples)"),
                          Integer("sppc", default=None, lo=0, hi=1 << 20,
                                  doc="prb_projective / direct_projective (Mitsuba's): samples per pixel of the "
                                      "continuous derivative; the image does not depend on it"),
                          Integer("sppi", default=None, lo=0, hi=1 << 20,
                                  doc="prb_projective / direct_projective: samples per pixel of the indirect "
                                      "visibility derivative; the image does not depend on it"),
                          Choice("guiding", ("none", "grid", "octree"), default="octree",
                                 doc="prb_projective / direct_projective: Mitsuba's guiding of boundary samples; the "
                                     "image does not depend on it"),
                          Bool("guiding_proj", default=True, doc="prb_projective / direct_projective (Mitsuba's)"),
                          Integer("guiding_rounds", default=1, lo=1, hi=1 << 10,
                                  doc="prb_projective / direct_projective (Mitsuba's)"),
                          Choice("project_seed", ("both", "bsdf", "emitter"), default="both",
                                 doc="prb_projective / direct_projective (Mitsuba's)"))
UNBOUNDED = 1 << 20


@ti.func
def walk(st: ti.template(), bsdf: ti.template(), em: ti.template(), mode: ti.template(), s: ti.template(),
         sampler: ti.template(), max_depth, rr_depth, hide_emitters, dL):
    """Continue path state s until it ends; s.L holds the result."""
    while s.active:
        si, _tmax = steps.first_hit(st, s, hide_emitters, segment_end(s))
        steps.emission(st, em, mode, s, si, hide_emitters, dL)
        if si.valid == 0 or s.depth + 1 >= max_depth:
            s.active = 0
        else:
            v = vertex.surface_vertex(st, si, s.d, s.lam)
            steps.nee(st, bsdf, em, mode, s, v, sampler, dL, steps.SURFACE_VISIBILITY, False)
            steps.scatter(st, bsdf, mode, s, v, sampler, dL)
            if s.active:
                steps.russian_roulette(s, sampler, rr_depth, RR_MAX)


@ti.func
def sample(st: ti.template(), bsdf: ti.template(), em: ti.template(), opts: ti.template(), mode: ti.template(), o, d,
           tmax, lam, sampler: ti.template(), max_depth, rr_depth, hide_emitters, L_in, dL, replay):
    """Radiance of one camera path, or its replay from the primal radiance L_in (REPLAY, or PRB with
    replay = 1), or in FORWARD mode the tangent of its radiance; o, d, tmax: the camera ray and its maxt; lam: the
    path's wavelengths (tirender/variants.py). (opts: unused; the signature of integrators/kernels.py)"""
    s = camera_state(o, d, tmax, L_in, replay, lam)
    walk(st, bsdf, em, mode, s, sampler, max_depth, rr_depth, hide_emitters, dL)
    return result(mode, s)


def check(settings, file=None, where="integrator"):
    """Settings tirender cannot honour (registry.parse calls it): Mitsuba's direct with other than one emitter and
    one BSDF sample per shading point (tirender's direct is the path tracer's first vertex: the same estimator at
    one sample each; more samples per point are more camera samples here)."""
    if settings.get("shading_samples") is not None and (settings.get("emitter_samples") is not None
                                                        or settings.get("bsdf_samples") is not None):
        raise ConfigError("give shading_samples or emitter_samples / bsdf_samples, not both (as Mitsuba)", file,
                          f"{where}.shading_samples")
    for k in ("shading_samples", "emitter_samples", "bsdf_samples"):
        v = settings.get(k)
        if v is not None and v != 1:
            raise ConfigError(f"tirender's direct takes one emitter and one BSDF sample per shading point; {k} = {v} "
                              f"cannot be honoured (raise spp instead)", file, f"{where}.{k}")


def args(scene, integrator=None):
    """Kernel arguments (max_depth, rr_depth, hide) of the scene's integrator section."""
    it = scene.integrator
    max_depth = it["max_depth"] if it["max_depth"] >= 0 else UNBOUNDED
    if (integrator or it["type"]) in DIRECT:
        max_depth = min(max_depth, 2)
    return SimpleNamespace(max_depth=max_depth, rr_depth=it["rr_depth"], hide=int(it["hide_emitters"]),
                           attached_roughness=float(it.get("attached_roughness", 0.0)), sppp=int(it.get("sppp", -1)))


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True, second_moment=False):
    """Add spp samples (indices sample_offset, ...) to the film of `sensor` (cleared first unless
    clear=False: progressive rendering) and return the image (second_moment: the same samples' per-pixel
    second moment in XYZ instead, integrators/moment.py)."""
    a = args(scene, integrator)
    st = launch.begin_film(scene, sensor, clear)
    bsdf = dispatch(scene.bsdf_levels)
    seed = int(seed) & 0xFFFFFFFF
    kernel = (kernels.moment_kernel if second_moment else kernels.render_kernel)(sample,
                                                                                 launch.wide_filter(scene, sensor))
    launch.sweep(scene, sensor, spp, "render", progress,
                 lambda off, k: kernel(st, bsdf, scene.em_mask, 0, sensor, k, sample_offset + off, seed, a.max_depth,
                                       a.rr_depth, a.hide), film="flush")
    return launch.resolve_film(st, scene.sensors[sensor])
