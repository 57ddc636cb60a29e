"""Volumetric path tracer (Mitsuba 3 ``volpath`` semantics): surfaces and participating media in
one path, written once for the primal and the PRB adjoint walk (``prbvolpath.py``).

Media fill shapes (``interior``/``exterior``, see tirender/media); the ray carries the index of
the medium it travels in (the camera sits in vacuum). Null-BSDF surfaces are index-matched
interfaces: they switch the medium and do not count as a bounce; a dielectric boundary
refracts into (or reflects off) its medium.

Per path segment inside a medium:
  * free-flight sampling (``free_flight``):
      - grid media: delta tracking with per-cell majorants mu (``st.med_majgrid``) on the segment
        clipped to the grid's bbox. At a tentative collision x, with P_s = sigma_t,h(x) / mu
        (h: the path's hero channel; detached): real scattering with probability P_s, weight
        sigma_s(x) / (mu P_s); null scattering otherwise, weight (mu - sigma_t(x)) / (mu (1 - P_s)).
      - homogeneous media: analytic sampling t ~ sigma_h exp(-sigma_h t) (media/homogeneous.py).
      - ``volpath_raymarch``: fixed-step ray marching instead (biased, Mitsuba 2; walk/media.py).
    RGB is exact: each path picks a hero channel h that drives distance sampling and the
    real/null choice; every event also yields the pdf ratios q_c = p_c / p_h of the other
    channels' strategies, r = prod q is kept renormalised to mean(r) = 1 and the throughput is
    divided by the same factor (balance heuristic over the three channels' path strategies,
    spectral MIS as in PBRT-v4). For a grey medium q = 1 and the weights are albedo and 1.
  * next-event estimation at every real scattering vertex (medium or non-delta surface): emitter
    sampling, shadow-ray transmittance through media and null interfaces (``transmittance``:
    ratio tracking in grids, analytic in homogeneous media), power-heuristic MIS with the phase
    function / BSDF; emitters hit by phase/BSDF sampling are MIS-weighted symmetrically.
  * phase-function (HG or isotropic) or BSDF sampling; Russian roulette from ``rr_depth`` with
    survival probability min(max(β) η², 0.99) (Mitsuba 3's volpath: long paths in bright media).
Depth: ``max_depth`` counts real scattering vertices + 1 like ``path`` (null interfaces and null
collisions are free): 1 = only directly visible emitters, 2 = single scattering.

REPLAY mode (detached PRB, Vicini et al. 2021, §4.1 and §4.4): the walk is replayed with the same
random numbers; L starts at the primal radiance and every emission/NEE term is subtracted when it
is met, so L is always the radiance that the vertices still to come contribute. Each weight w(pi)
of the walk contributes dL * L * (dw/dpi) / w (sampling decisions and pdfs detached):
  * delta tracking in grids: the marginal flight weights exp(-tau(t)) sigma_s(t) (collision) and
    exp(-tau) (escape) are differentiated (walk/media.py): attenuation -dL L d tau by a quadrature
    of the flight, albedo at the collision, and the in-scattering term dL T alpha Ls d sigma_t
    estimated along the whole flight at ``inscatter_points`` stratified points
    (``inscatter_adjoint``), Ls by an emitter sample (direct) plus, at one point per camera path
    (``IndirectPick``, weighted reservoir sampling over the flights), a primal path from the point
    whose first emitter is hidden (indirect), walked after the replay by the same inlined walk.
  * NEE transmittance (ratio tracking) by a nested replay of the shadow ray's geometry with the
    sampler state saved before it: d sigma_t += -dT * T * d tau, dT = dL * (NEE term without T).
  * phase functions: d g += (dL . L) (dp/dg) / p for sampled directions; NEE: (dL . term / p) dp/dg.
  * surfaces as in path.py (BSDF parameters, normal maps, emitters).
No per-vertex storage: memory is constant in path length.
"""
from types import SimpleNamespace

import taichi as ti

from .. import backend, launch, variants
from ..bsdfs.base import NULL, PASS
from ..bsdfs.registry import dispatch, mask_of
from ..core.interaction import spawn_origin
from ..core.math import BIG, max_component, vec3
from ..media import HOMOGENEOUS
from ..emitters import registry as emitter_registry
from ..media import medium as med
from ..errors import ConfigError
from ..schema import Bool, Integer, Number
from ..scene.storage import INFO_MARCH_STEP
from ..walk import steps, vertex
from ..walk.media import (DELTA, INSCATTER_RR, MARCH, MAX_CROSSINGS, MediumVisibility, free_flight,
                          indirect_stream, inscatter_adjoint, no_pick, target_medium, tracked)
from ..media.phase import phase_sample
from ..core.rng import PCG32
from ..variants import spec
from ..walk.state import PRB, PRIMAL, PathState, adjoint_on, camera_state, segment_end
from . import kernels, path

RR_MAX = 0.99                # Russian-roulette survival cap (Mitsuba 3 volpath: 0.99; path uses 0.95)
# volpathmis: Mitsuba's spectral-MIS volpath; tirender's volpath already weighs the channels' (lanes') distance
# sampling strategies by the balance heuristic (see above), so the two are one estimator here
NAMES = ("volpath", "prbvolpath", "volpath_raymarch", "volpathmis")
MOMENTS = True   # render(second_moment=True): the moment integrator can wrap these (integrators/moment.py)
# Mitsuba 3's defaults where they differ from tirender's YAML ones (volpath.cpp, volpathmis.cpp: max_depth -1;
# the Python prbvolpath: 6, ad/integrators/common.py)
MITSUBA_DEFAULTS = {"volpath": {"max_depth": -1}, "volpathmis": {"max_depth": -1}, "prbvolpath": {"max_depth": 6}}
VARIANTS = variants.NAMES   # media read at the path's wavelengths (media/medium.py); phase functions keep the
#                             Stokes vector (walk/vertex.mueller), as Mitsuba 3's
KEYS = path.WALK_KEYS + (Number("step_size", default=0.0, lo=0.0,
                           doc="volpath_raymarch: step in world units (0: half the smallest voxel)"),
                    Integer("inscatter_points", default=8, lo=0, hi=64,
                            doc="prbvolpath, grid media: points per flight segment at which the gradient "
                                "estimates the in-scattered light (0: at the collision alone)"),
                    Number("inscatter_rr", default=INSCATTER_RR, lo=0.0, hi=1.0,
                           doc="prbvolpath: Russian roulette on the transmittance at those points below this "
                               "value (0: off; unbiased either way, skips dense media's faint points)"),
                    Bool("use_spectral_mis", default=True,
                         doc="volpathmis (Mitsuba's): spectral MIS over the channels' distance sampling; tirender's "
                             "volume walk always uses it (false is refused)"))


def check(settings, file=None, where="integrator"):
    """Settings tirender cannot honour (registry.parse calls it): the volume walk always weighs the channels'
    distance sampling by spectral MIS."""
    if settings.get("use_spectral_mis") is False:
        raise ConfigError("tirender's volume walk always uses spectral MIS (false cannot be honoured)", file,
                          f"{where}.use_spectral_mis")


@ti.func
def _hero(sampler: ti.template()):
    """The path's hero channel (the lane whose σt samples distances), uniform over the lanes."""
    n = ti.static(variants.lanes())
    return ti.min(ti.cast(sampler.next_1d() * n, ti.i32), n - 1)


@ti.func
def walk(st: ti.template(), bsdf: ti.template(), em: ti.template(), mode: ti.template(), vis: ti.template(),
         s: ti.template(), sampler: ti.template(), max_depth, rr_depth, hide_emitters, dL, pick: ti.template()):
    """Continue path state s through surfaces and media until it ends (vis: MediumVisibility.of(march),
    which also names the free-flight estimator; pick: the replay's IndirectPick, see trace)."""
    crossings = 0                 # null interfaces crossed since the last real vertex (guard)
    while s.active:
        # the camera ray's far clip limits its flight too (Mitsuba's ray.maxt)
        si, t_surf = steps.first_hit(st, s, hide_emitters, segment_end(s))
        if si.valid == 1:
            t_surf = si.t
        # ------------------------- medium: free-flight sampling -------------------------
        scattered = 0
        xs = vec3(0.0)
        if s.medium >= 0:
            if ti.static(mode != PRIMAL):
                if adjoint_on(mode, s, dL) and s.depth + 1 < max_depth and tracked(st, vis, s.medium):
                    inscatter_adjoint(st, bsdf, em, vis, pick, s.medium, s.o,
                                      s.d, t_surf, s.beta, sampler, dL, max_depth - s.depth - 1,
                                      rr_depth - s.depth - 1, s.hero, s.lam, s.P)
            sc, ts, w, q = free_flight(st, mode, vis, s.medium, s.o, s.d, t_surf, s.hero, s.lam, sampler, s.L, dL,
                                       adjoint_on(mode, s, dL))
            rq = s.r * q
            mr = rq.sum() / ti.static(float(variants.lanes()))
            if mr > 0.0:
                s.beta *= w / mr
                s.r = rq / mr
            else:
                s.beta = spec(0.0)
            scattered = sc
            if sc == 1:
                xs = s.o + ts * s.d
            if max_component(s.beta) <= 0.0:
                s.active = 0
        real = 0                 # 1: a real vertex here (medium scattering or a non-null surface)
        if s.active and scattered == 1:
            real = 1
        elif s.active:
            # surface hit or escape: emission found by phase/BSDF sampling
            steps.emission(st, em, mode, s, si, hide_emitters, dL)
            if si.valid == 0:
                s.active = 0
            elif st.bsdf_flags[st.shape_bsdf[si.shape]] & NULL:   # index-matched interface: switch the medium
                s.medium = target_medium(st, si.shape, s.d, si.ng, s.medium)
                s.o = spawn_origin(st, si, s.d)
                crossings += 1
                if crossings > MAX_CROSSINGS:
                    s.active = 0
            else:
                real = 1
        last = real == 1 and s.depth + 1 >= max_depth     # a bounce here would exceed max_depth
        if last and (scattered == 1 or (st.bsdf_flags[st.shape_bsdf[si.shape]] & PASS) == 0):
            real = 0
            s.active = 0
        if real == 1:
            v = vertex.medium_vertex(xs, s.d, s.medium)
            if scattered == 0:
                v = vertex.surface_vertex(st, si, s.d, s.lam)
            if not last:
                steps.nee(st, bsdf, em, mode, s, v, sampler, dL, vis, False)
            prev_p, prev_pdf, prev_delta = s.prev_p, s.prev_pdf, s.prev_delta
            bs = steps.scatter(st, bsdf, mode, s, v, sampler, dL)
            if s.active and scattered == 0:
                s.medium = target_medium(st, si.shape, bs.wo, si.ng, s.medium)
            if s.active and scattered == 0 and bs.passthrough == 1:
                # a pass-through lobe (Mitsuba's null component: thindielectric's transmission, a mask's holes) is
                # not a bounce: depth, roulette and the MIS reference (the last real vertex) stay as they were
                s.prev_p, s.prev_pdf, s.prev_delta = prev_p, prev_pdf, prev_delta
                crossings += 1
                if crossings > MAX_CROSSINGS:
                    s.active = 0
            elif s.active and last:
                s.active = 0
            elif s.active:
                crossings = 0
                steps.russian_roulette(s, sampler, rr_depth, RR_MAX)


@ti.func
def trace(st: ti.template(), bsdf: ti.template(), em: ti.template(), vis: ti.template(), mode: ti.template(), o, d,
          tmax, lam, sampler: ti.template(), max_depth, rr_depth, hide_emitters, L_in, dL, replay):
    """One path from o along d, its first segment ending at tmax (vis: MediumVisibility.of(march)). Returns
    (L, real scattering vertices).

    When replaying (PRB), the flights offer points to an IndirectPick (walk/media.py:
    inscatter_adjoint); after the replay, a second round of the *same* inlined walk (one walk
    body per kernel: compile time and code size as without it) walks a primal path from the
    picked point along a phase sample, its first emitter hidden (that light is the direct part),
    depth and roulette counted from the main path, and adds c / w * W * Ls,indirect to the
    density gradient at the point."""
    ti.static_assert(mode == PRIMAL or mode == PRB, "volpath walks in mode PRIMAL or PRB (walk/state.py)")
    s = camera_state(o, d, tmax, L_in, replay, lam)
    s.hero = _hero(sampler)   # the channel that samples distances
    pick = no_pick()
    smp = PCG32(state=sampler.state, inc=sampler.inc)
    L, depth = spec(0.0), 0
    md, rd, hide = max_depth, rr_depth, hide_emitters
    rounds = 1
    r = 0
    while r < rounds:
        walk(st, bsdf, em, mode, vis, s, smp, md, rd, hide, dL, pick)
        if r == 0:
            L, depth = s.L, s.depth
            sampler.state = smp.state
            if ti.static(mode == PRB):
                if s.replay != 0 and pick.W > 0.0:     # the indirect path from the picked point
                    smp = indirect_stream(pick)
                    wo, pdf = phase_sample(st, pick.m, pick.d, smp.next_2d())
                    s = PathState(L=spec(0.0), beta=spec(1.0), eta=1.0, depth=0, prev_p=pick.x, prev_pdf=pdf,
                                  prev_delta=0, o=pick.x, d=wo, tmax=BIG, active=1, medium=pick.m, hero=pick.hero,
                                  r=spec(1.0), replay=0, lam=pick.lam, P=pick.P)
                    md, rd, hide = pick.depth_left, pick.rr_left, 1
                    rounds = 2
        else:
            if max_component(s.L) > 0.0:
                med.sigma_t_adjoint(st, pick.m, pick.x, pick.lam, pick.c * (pick.W / pick.w) * s.L)
        r += 1
    return L, depth


@ti.func
def walk_primal(st: ti.template(), bsdf: ti.template(), em: ti.template(), vis: ti.template(), s: ti.template(),
                sampler: ti.template(), max_depth, rr_depth, hide_emitters):
    """Continue camera state s as ``trace`` does in mode PRIMAL (the same random numbers): the walk for
    integrators that read the state itself (integrators/stokes.py: the Stokes vector)."""
    s.hero = _hero(sampler)
    pick = no_pick()
    walk(st, bsdf, em, PRIMAL, vis, s, sampler, max_depth, rr_depth, hide_emitters, spec(0.0), pick)


@ti.func
def sample(st: ti.template(), bsdf: ti.template(), em: ti.template(), vis: ti.template(), mode: ti.template(), o, d,
           tmax, lam, sampler: ti.template(), max_depth, rr_depth, hide_emitters, L_in, dL, replay):
    """Radiance of one camera path (the signature of integrators/kernels.py; opts = the visibility)."""
    L, _ = trace(st, bsdf, em, vis, mode, o, d, tmax, lam, sampler, max_depth, rr_depth, hide_emitters, L_in, dL, replay)
    return L


# ---------------------------------------------------------------------------------- host side
# With backend.share_kernels() (the test suite), CPU volume kernels are specialised to a superset of
# the models that volume scenes typically use, so that different scenes share one compiled kernel;
# other models are added when present. Otherwise each kernel holds exactly its scene's models.
VOLUME_BSDFS = mask_of(("null", "diffuse", "dielectric"))
# ... and of the emitters they light with (the suite's volume scenes and Mitsuba's media scenes). Not every
# emitter: each Dirac one (point, spot, projector, beam) adds 3-5 s to the gradient kernel's cold compile of
# ~22 s, all of them 17 s; area and envmap cost no time of their own
VOLUME_EMITTERS = emitter_registry.mask_of(emitter_registry.BY_NAME, ("area", "constant", "directional", "envmap"))


def _shared():
    return backend.current_arch() == "cpu" and backend.share_kernels()


def kernel_dispatch(scene):
    """(scattering functions, emitter mask) of a volume kernel for this scene: the BSDF dispatcher with the phase
    functions (walk/vertex.with_media) of exactly the scene's models
    (the smallest kernel: fastest to compile), or with backend.share_kernels() on the CPU a superset
    of the models volume scenes use (kernels shared between scenes; GPU and software-Vulkan drivers
    compile the megakernel again in every process, so they always get the exact one). A scene with models
    outside the superset (or nested ones) gets the exact kernel too: the superset grown by its models would be
    its own kernel anyway, and a larger one (a compile of 117 s instead of 66 s for a thin dielectric and a
    mask in prbvolpath, measured cold)."""
    if not _shared() or len(scene.bsdf_levels) > 1 or scene.bsdf_levels[0] & ~VOLUME_BSDFS:
        return vertex.with_media(dispatch(scene.bsdf_levels)), scene.em_mask
    levels = list(scene.bsdf_levels)
    levels[0] |= VOLUME_BSDFS
    return vertex.with_media(dispatch(tuple(levels))), scene.em_mask | VOLUME_EMITTERS


def args(scene, integrator=None, gradient=False):
    """Kernel arguments of a volume integrator: vis (the shadow-ray / free-flight estimators for DELTA
    tracking or ray MARCHing; for the gradient kernel of delta tracking, also the points of the
    in-scattering quadrature), max_depth, rr_depth, hide, step."""
    a = path.args(scene, integrator)
    t = integrator or scene.integrator["type"]
    kinds = {bool(m.flags & HOMOGENEOUS) for m in scene.desc.media}
    if _shared():   # the superset (see kernel_dispatch)
        kinds = {True, False}
    split = int(scene.integrator.get("inscatter_points", 8)) if gradient and t != "volpath_raymarch" else 0
    rr = float(scene.integrator.get("inscatter_rr", INSCATTER_RR)) if split else 0.0
    vis = MediumVisibility.of(MARCH if t == "volpath_raymarch" else DELTA, True in kinds, False in kinds, split, rr)
    return SimpleNamespace(vis=vis, max_depth=a.max_depth, rr_depth=a.rr_depth, hide=a.hide,
                           step=float(scene.integrator.get("step_size", 0.0)))


def prepare(scene, st, a):
    """Per-render device state of the media: majorants (the pool may have changed) and the march step."""
    med.update_majorants(scene, st)
    st.info_f[INFO_MARCH_STEP] = a.step


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True, second_moment=False):
    """Primal render with volpath (delta tracking) or volpath_raymarch (second_moment: the samples' per-pixel
    second moment in XYZ instead, integrators/moment.py)."""
    a = args(scene, integrator)
    st = launch.begin_film(scene, sensor, clear)
    prepare(scene, st, a)
    bsdf, em = kernel_dispatch(scene)
    seed = int(seed) & 0xFFFFFFFF
    kernel = (kernels.moment_kernel if second_moment else kernels.render_kernel)(sample,
                                                                                 launch.wide_filter(scene, sensor))
    launch.sweep(scene, sensor, spp, "render", progress,
                 lambda off, k: kernel(st, bsdf, em, a.vis, sensor, k, sample_offset + off, seed, a.max_depth,
                                       a.rr_depth, a.hide), film="flush")
    return launch.resolve_film(st, scene.sensors[sensor])
