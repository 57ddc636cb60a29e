"""Attached path replay backpropagation (Vicini et al. 2021 §4.2) for the path tracer: gradient
method ``prb_attached``.

Detached PRB (prb.py) differentiates what a path carries, never where it goes, so a normal map on a
smooth mirror or glass surface gets no gradient: the direction a Dirac lobe sends the path along
depends on the perturbed normal, and what the path then finds (a textured emitter, an environment
map, the light behind a glass slab) depends on that direction. This method adds the *attached* part
— the change of the path's geometry — to detached PRB's gradient:

    ∂<δL, L>/∂π = detached PRB (fixed path)  +  Σ_k δL β_k ∂Le_k/∂x_k · ∂x_k/∂π     (x_k: the path)

Where the paper tracks forward Jacobians of consecutive rays and inverts them (which needs its
stochastic regularisation at vertices whose sampling ignores the previous ray), this carries the
reverse-mode adjoint of the ray backwards by replay, as the light tracer does (ptracer.py): after the
two PRB passes, one pass counts the path's segments n, then for j = n, n-1, ..., j0 the path is
replayed from its seed to segment j, where (λo, λd) = ∂loss/∂(origin, direction) of the ray leaving
vertex j (carried from pass j + 1) gains the vertex's own terms and is taken to the ray arriving at
it. Constant memory, no matrix inverse (so no regularisation), O(n²) ray casts per path and only
for paths that meet a Dirac or near-specular vertex (j0: the first one).

What moves, per vertex reached along a moving ray (walk/attached.py):
  * Dirac reflection and refraction (smooth conductors, dielectrics, plastics' specular lobe,
    thin dielectrics' reflection; normal maps on any of them): wo = reflect/refract(d, n_d) with the
    lobe normal n_d from the normal map's texels at the hit's uv, so ∂wo/∂(d, n_d) goes into the
    texels, into uv (the map seen at a moving point) and into the hit; pass-through lobes keep wo = d;
  * near-specular vertices (integrator key ``attached_roughness``: rough conductors and dielectrics
    with α at most that, also under normal maps): the sample is held as a microfacet normal of its
    lobe (bsdfs/halfwarp.py), so wo moves with d, the frame, the texels and α, and the weight carries
    the warp's Jacobian; detached PRB's terms of the vertex (∂f/∂π of the sample and of NEE) are
    replaced, and its direct light is estimated by the BSDF sample alone (MIS weight 1);
  * the Dirac lobe's value (a conductor's Fresnel reflectance, a dielectric's choice probability)
    through cos θi;
  * emission found at the hit (textured area lights: the radiance texture's slope in uv) or on
    escape (environment maps: ∂Le/∂d);
  * the hit itself: ∂(p, n, uv)/∂(o, d) by the ray-triangle solve's adjoint; moving triangles
    (height fields) also scatter into their heights.
Held fixed (documented limits): the radiance leaving a vertex sampled with a non-Dirac lobe (its
position and incident direction move, the value it sends towards the camera is treated as
constant — the terms the paper's regularised Jacobian inverse would carry), occlusion changes and
the discontinuities a moving sample crosses. Surfaces only (media are refused with one line).

Variants rgb, mono and spectral: the wavelengths are drawn as the render kernel draws them, δL enters
the lanes through the film's adjoint conversion, and a dielectric's IOR and Cauchy coefficient are
differentiated at its vertices (the refracted direction, the Fresnel lobes: bsdfs/dielectric.py; a thin
dielectric's IOR: its lobes' probabilities, bsdfs/thindielectric.py).
"""
import taichi as ti

from .. import launch, variants
from ..bsdfs.registry import dispatch
from ..core import film, implicit, pool
from ..sensors.registry import camera_ray, camera_sample
from ..core.rng import make_sampler
from ..core.math import BIG, safe_div, vec2, vec3
from ..emitters import registry as emitters
from ..emitters.base import direction_grad
from ..errors import ConfigError
from ..scene import triangles
from ..variants import spec
from ..walk import attached, steps, vertex
from ..walk.state import PRB, PRIMAL, camera_state, segment_end
from . import edges, path, shadow_edges

INTEGRATES = path.NAMES   # direct and the projective names: the path walk (direct: max_depth <= 2, path.args)


@ti.func
def replay_to(st: ti.template(), bsdf: ti.template(), em: ti.template(), geo: ti.template(), o, d, tmax,
              sampler: ti.template(), max_depth, rr_depth, hide_emitters, attached_alpha, dL, L_total, stop, lam_o,
              lam_d, le_next, ekey, lam):
    """Walk the camera path (o, d; its first segment ending at tmax) exactly as path.walk does (the same steps and random numbers, PRIMAL)
    to segment `stop` (0: the whole path) and, given (λo, λd) of the ray leaving the vertex it reaches,
    return (segments walked, first moving segment (0: none), λo, λd of the ray arriving there, le).
    L_total: the path's radiance (pass 0), so that L_total - L is the part still to come;
    attached_alpha: microfacet lobes with α <= this are sampled attached (0: none). After such a
    vertex the derivatives estimate direct light by its BSDF sample alone (MIS weight 1, its NEE
    term's BSDF derivative removed: MIS weights would move with the sample): le = (1 - mis) β Le of
    the emitter found at `stop`, the part the MIS-weighted L lacks (le_next: pass stop + 1's).
    geo: an edges.SecondaryTable when the scene has differentiable meshes (0: none, compiled out):
    then every non-Dirac vertex also carries (λo) back, its own terms' frame derivatives
    (walk/attached.local_adjoint) and its secondary-visibility boundary term (edges.secondary,
    random numbers from ekey = (seed, pixel, sample)). lam: the path's wavelengths (tirender/variants.py;
    sampler has drawn them already)."""
    s = camera_state(o, d, tmax, spec(0.0), 0, lam)
    seg = 0
    first = 0
    stop_at = attached.Stop(valid=0)
    lo_out = vec3(0.0)
    ld_out = vec3(0.0)
    le_out = spec(0.0)
    prev_rough = 0
    moving = 0           # a vertex so far lies on a differentiable mesh: the vertices from there on move
    while s.active:
        seg += 1
        si, _tmax, b, inst = steps.first_hit_record(st, s, hide_emitters, segment_end(s))   # as path.walk
        tri = si.tri
        at_stop = seg == stop
        g_uv = vec2(0.0)
        if at_stop:      # the emitter found here: its radiance at a moving point or along a moving direction
            q, mis = steps.emitter_found(st, em, s, si)
            if q.emitter >= 0 and (s.depth > 0 or hide_emitters == 0):
                if prev_rough == 1:
                    le_out = (1.0 - mis) * s.beta * emitters.eval(st, em, q, s.lam)
                    mis = 1.0
                gu, gd = emitters.eval_grad(st, em, q, dL * s.beta * mis, s.lam)
                g_uv = gu
                ld_out = gd          # an escape: the environment's slope along the ray
        steps.emission(st, em, PRIMAL, s, si, hide_emitters, dL)
        if si.valid == 0 or s.depth + 1 >= max_depth:
            s.active = 0
            if at_stop and si.valid == 1:
                stop_at = attached.Stop(valid=1, tri=tri, inst=inst, t=si.t, b=b, o=s.o, d=s.d, g_uv=g_uv)
        else:
            v = vertex.surface_vertex(st, si, s.d, s.lam)
            ftri = attached.frame_tri(st, tri, inst)
            if ti.static(not isinstance(geo, int)):
                if triangles.tri_dm(st, tri) >= 0 or implicit.moves(st, tri):
                    moving = 1
            nee_d, nee_w, nee_q, nee_wf = steps.nee(st, bsdf, em, PRIMAL, s, v, sampler, dL,
                                                    steps.SURFACE_VISIBILITY, False)
            o_in = s.o
            d_in = s.d
            beta_in = s.beta
            bs = steps.scatter(st, bsdf, PRIMAL, s, v, sampler, dL)
            rough = 0        # a near-specular vertex, sampled attached
            if attached_alpha > 0.0 and bs.valid == 1 and bs.delta == 0:
                a = bsdf.attached_alpha(st, v.ctx, v.wi)
                if a >= 0.0 and a <= attached_alpha:
                    rough = 1
            if bs.valid == 1 and (bs.delta == 1 or rough == 1 or triangles.tri_hf(st, tri) >= 0
                                   or triangles.tri_dm(st, tri) >= 0 or implicit.moves(st, tri)) \
                    and first == 0:
                first = seg
            prev_rough = rough
            if at_stop:
                g_p = vec3(0.0)
                g_n = vec3(0.0)
                g_d = vec3(0.0)
                if s.active and bs.delta == 1:     # the next ray leaves from p along wo(d, n_d)
                    nd = attached.lobe_normal(st, bsdf, v)
                    g_p = lam_o
                    g_d, g_nd, g_r = attached.scatter_adjoint(v, nd, d_in, bs, lam_d)
                    if bs.null == 0:
                        # the lobe's value (Fresnel weight or choice probability) moves with cos θi = -d·n_d:
                        # the radiance still to come times ∂ ln value/∂cos θi; a dielectric's IOR moves it and
                        # (g_r) the refracted direction
                        reflected = bs.wo.dot(v.ng) * d_in.dot(v.ng) < 0.0
                        K = dL * (L_total - s.L)
                        bsdf.dirac_ior_adjoint(st, v.ctx, v.wi, reflected, K.sum(), g_r)
                        g_cos = (K * bsdf.dirac_dlog(st, v.ctx, v.wi, reflected)).sum()
                        g_d -= g_cos * nd
                        g_nd -= g_cos * d_in
                    g_n, gu = attached.lobe_normal_adjoint(st, bsdf, v, ftri, g_nd)
                    g_uv += gu
                elif s.active and rough == 1:
                    # wo held as a microfacet normal of the lobe (bsdfs/halfwarp.py); K: δL times the
                    # radiance still to come, which is proportional to the weight f J / p
                    g_p = lam_o
                    K = dL * (L_total - s.L + le_next)
                    d_out = K * safe_div(spec(1.0), bs.weight * bs.pdf)
                    # these replace detached PRB's terms of this vertex: ∂f/∂π / f of the sample, and NEE's (a
                    # runtime loop around one call: the models' adjoint code inlined once)
                    for j in range(2):
                        dj, wj = bs.wo, -dL * (L_total - s.L) * safe_div(spec(1.0), bs.weight * bs.pdf)
                        if j == 1:      # (a Dirac emitter's NEE: detached PRB's term stays)
                            dj, wj = nee_d, -dL * nee_w * ti.select(nee_q.delta == 1, 0.0, 1.0)
                        vertex.adjoint(st, bsdf, v, dj, wj)
                    g_d, g_n, gu = attached.rough_scatter_adjoint(st, bsdf, v, ftri, d_in, bs.wo, d_out, K.sum(),
                                                                  lam_d)
                    g_uv += gu
                elif ti.static(not isinstance(geo, int)):
                    if bs.delta == 0 and v.flags & 1:
                        # ray-following (integrators/edges.py): the sampled world directions stay, the
                        # vertex moves: the next ray's origin, the frame and wi of f|cos| (BSDF sample
                        # and NEE), and the boundary of what the vertex sees
                        g_p = lam_o
                        for j in range(2):     # the sample's term, then NEE's: one inlined local_adjoint
                            on = bs.valid == 1
                            dj, wj = bs.wo, dL * (L_total - s.L) * safe_div(spec(1.0), bs.weight * bs.pdf)
                            if j == 1:
                                on = nee_w.max() != 0.0 or nee_w.min() != 0.0
                                dj, wj = nee_d, dL * nee_w
                            if on:
                                gdj, gnj, gwj = attached.local_adjoint(st, bsdf, v, ftri, d_in, dj, wj)
                                g_d += gdj
                                g_n += gnj
                                if j == 1 and nee_q.delta == 1 and nee_q.dist < BIG:
                                    # a light at a point: its position holds, not the direction to it, which
                                    # turns with the vertex (and Le/pdf moves: 1/r², a spot's falloff, ...)
                                    g_p += direction_grad(gwj, nee_q) + \
                                        emitters.ref_grad(st, em, nee_q, dL * nee_wf, s.lam)
                        es = make_sampler(ekey[0] ^ (ti.u32(edges.SEED_MIX2) + ti.u32(0x9E3779B9) * ti.cast(seg, ti.u32)),
                                          ekey[1], ekey[2])
                        g_p += edges.secondary(st, bsdf, em, geo, v, dL * beta_in, es, max_depth - seg,
                                               ti.max(rr_depth - seg, 1), moving, v.ctx.lam)
                stop_at = attached.Stop(valid=1, tri=tri, inst=inst, t=si.t, b=b, o=o_in, d=d_in, g_p=g_p,
                                        g_n=g_n, g_uv=g_uv, g_d=g_d)
                s.active = 0
            elif s.active:
                steps.russian_roulette(s, sampler, rr_depth, path.RR_MAX)
    if stop_at.valid == 1:
        lo_out, ld_out = attached.stop_adjoint(st, stop_at)
    return seg, first, lo_out, ld_out, le_out


@ti.func
def backprop_sample(st: ti.template(), bsdf: ti.template(), em: ti.template(), geo: ti.template(), cam, pix, seed,
                    index, o, d, tmax, lam, dL, max_depth, rr_depth, hide_emitters, attached_alpha):
    """Back-propagate adjoint radiance dL (per lane) through camera sample `index` of pixel `pix` (ray o, d, tmax,
    wavelengths lam): detached PRB's primal walk and replay, then the attached passes (module doc; geo: see
    replay_to)."""
    # passes 0, 1: detached PRB (the primal walk -> L, then its replay)
    L = spec(0.0)
    L_total = spec(0.0)
    for replay in range(2):
        sampler_p, _pos_p, _ap_p = camera_sample(st, cam, pix, seed, index)
        variants.sample_wavelengths(sampler_p)
        L = path.sample(st, bsdf, em, 0, PRB, o, d, tmax, lam, sampler_p, max_depth, rr_depth, hide_emitters, L, dL, replay)
        if replay == 0:
            L_total = L
    # pass 2: count the segments; passes 3, ...: segment n, n - 1, ..., first Dirac
    n_seg = 0
    first = 0
    lam_o = vec3(0.0)
    lam_d = vec3(0.0)
    le_next = spec(0.0)
    j = 0
    while j >= 0:
        sampler_a, _pos_a, _ap_a = camera_sample(st, cam, pix, seed, index)
        variants.sample_wavelengths(sampler_a)
        ns, fs, lo, ld, le = replay_to(st, bsdf, em, geo, o, d, tmax, sampler_a, max_depth, rr_depth, hide_emitters,
                                       attached_alpha, dL, L_total, j, lam_o, lam_d, le_next,
                                       ti.Vector([ti.cast(seed, ti.u32), ti.cast(pix, ti.u32), ti.cast(index, ti.u32)], dt=ti.u32),
                                       lam)
        if j == 0:
            n_seg = ns
            first = fs
            if ti.static(not isinstance(geo, int)):
                first = 1             # every vertex: its boundary term and the chain back to the camera
            j = n_seg if first > 0 else -1
        else:
            lam_o = lo
            lam_d = ld
            le_next = le
            j = j - 1 if j > first else -1


_kernels = {}


def _kernel(kind="replay", wide=False):
    """kind "replay": δL gathered from the adjoint image (reverse mode); "tangent": forward mode,
    δL = e_r, e_g, e_b into a core/pool.Tangent view's accumulators, the tangent splatted."""
    if (kind, wide) not in _kernels:
        @ti.kernel
        def pixels(st: ti.template(), bsdf: ti.template(), em: ti.template(), geo: ti.template(), cam: ti.i32,
                   spp: ti.i32,
                   sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32,
                   attached_alpha: float):
            w = st.cam_w[cam]
            for pix in range(w * st.cam_h[cam]):
                acc = film.local_zero(st, cam, pix % w, pix // w)
                for k in range(spp):
                    sampler, pos, ap = camera_sample(st, cam, pix, seed, sample_offset + k)
                    lam, lw = variants.sample_wavelengths(sampler)       # as the render kernel draws them
                    o, d, tmax = camera_ray(st, cam, pos, ap)
                    if ti.static(kind == "tangent"):
                        tan = spec(0.0)
                        for c in range(ti.static(variants.lanes())):     # a runtime loop: one inlined body per lane
                            dL = ti.Vector([ti.select(c == i, 1.0, 0.0) for i in ti.static(range(variants.lanes()))],
                                           float)
                            pool.tangent_reset(st)
                            backprop_sample(st, bsdf, em, geo, cam, pix, seed, sample_offset + k, o, d, tmax, lam, dL,
                                            max_depth, rr_depth, hide_emitters, attached_alpha)
                            tan += dL * pool.tangent_value(st)
                        tan_rgb = variants.to_rgb(film.nan_to_zero(tan), lam, lw)    # J v of the lanes -> the film's RGB
                        film.local_splat(st, cam, pix % w, pix // w, pos, tan_rgb, acc, False, wide)
                    else:
                        dL = variants.adjoint_from_rgb(film.gather_adjoint(st, cam, pos), lam, lw)
                        if dL.max() != 0.0 or dL.min() != 0.0:
                            backprop_sample(st, bsdf, em, geo, cam, pix, seed, sample_offset + k, o, d, tmax, lam, dL,
                                            max_depth, rr_depth, hide_emitters, attached_alpha)
                if ti.static(kind == "tangent"):
                    film.local_flush(st, cam, acc, False)
        _kernels[kind, wide] = pixels
    return _kernels[kind, wide]


def _check(scene):
    if scene.desc.media:
        raise ConfigError("method 'prb_attached' differentiates surfaces only; this scene has participating "
                          "media (use method 'prb' with prbvolpath)", key="method")


def _geometry(scene):
    """The secondary-visibility edge table of a scene with differentiable meshes (its current
    geometry), else 0 (geometry terms compiled out)."""
    if not scene.deformables:
        return 0
    scene.bind()
    rows, n_mov = edges.secondary_edges(scene)
    return edges.SecondaryTable.holding(rows, n_mov, shadow_edges.light_triangles(scene))


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every parameter: detached PRB plus the
    attached terms of paths that Dirac lobes move (dict name -> array)."""
    _check(scene)
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    scene.bind()
    kernel = _kernel()
    sppp = spp if a.sppp < 0 else a.sppp
    geo = _geometry(scene)

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, scene.em_mask, geo, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide, a.attached_roughness)
        if off == 0 and scene.deformables:      # the boundary term, once per pass (in its first launch)
            s = scene.sensors[cam]
            edges.primary_pass(scene, st, bsdf, cam, spp, sd, sppp * s.width * s.height, a)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run)


def render_forward(scene, directions, spp, seed, sensor, progress):
    """Forward mode: J v with the attached terms (integrators/prb.render_forward)."""
    _check(scene)
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    kernel = _kernel("tangent", launch.wide_filter(scene, sensor))
    geo = _geometry(scene)

    def run(tv, cam, sd, off, k):
        kernel(tv, bsdf, scene.em_mask, geo, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide, a.attached_roughness)

    def boundary(tv, cam, sd):
        s = scene.sensors[cam]
        sppp = spp if a.sppp < 0 else a.sppp
        edges.primary_tangent(scene, tv, bsdf, cam, spp, sd, sppp * s.width * s.height, a)
    return launch.forward_pass(scene, directions, spp, seed, sensor, progress, run,
                               boundary if scene.deformables else None)


VARIANTS = ("rgb", "mono", "spectral")   # not spectral_polarized: the attached terms would move Mueller frames too

METHODS = {"prb_attached": render_grad}
FORWARD = {"prb_attached": render_forward}
