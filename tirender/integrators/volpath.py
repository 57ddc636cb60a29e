"""Volumetric path tracer (Mitsuba 3 ``volpath`` semantics): surfaces and participating media in
one path, written once for the primal and the PRB adjoint walk (``prbvolpath.py``).

Media fill shapes (``interior``/``exterior``, see tirender/media); the ray carries the index of
the medium it travels in (the camera sits in vacuum). Null-BSDF surfaces are index-matched
interfaces: they switch the medium and do not count as a bounce; a dielectric boundary
refracts into (or reflects off) its medium.

Per path segment inside a medium:
  * free-flight sampling (``free_flight``):
      - grid media: delta tracking with the majorant mu (``st.med_majorant``) on the segment
        clipped to the grid's bbox. At a tentative collision x, with P_s = sigma_t,h(x) / mu
        (h: the path's hero channel; detached): real scattering with probability P_s, weight
        sigma_s(x) / (mu P_s); null scattering otherwise, weight (mu - sigma_t(x)) / (mu (1 - P_s)).
      - homogeneous media: analytic sampling t ~ sigma_h exp(-sigma_h t) (media/homogeneous.py).
      - ``march`` (volpath_raymarch.py): fixed-step ray marching instead (biased, Mitsuba 2).
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

ADJOINT mode (detached PRB, Vicini et al. 2021, §4.1 and §4.4): the walk is replayed with the same
random numbers; L starts at the primal radiance and every emission/NEE term is subtracted when it
is met, so L is always the radiance that the vertices still to come contribute. Each weight w(pi)
of the walk contributes dL * L * (dw/dpi) / w (sampling decisions and pdfs detached):
  * delta tracking: the particle proportions psi_s = sigma_s / mu (scatter) and psi_n =
    (mu - sigma_t) / mu (null) are differentiated once, the discrete choice (P_s) is not:
        null:    d sigma_t += dL L * (-1 / (mu - sigma_t))
        scatter: d sigma_t += dL L / sigma_t,  d albedo += dL L / albedo
  * NEE transmittance T (ratio tracking: T = prod_k (1 - sigma_t(x_k) / mu)) is differentiated by
    a nested replay: the sampler state is saved before the shadow ray, T is estimated, then the
    same shadow ray is walked again with the saved state and every factor gets
    d sigma_t(x_k) += dT * T / (1 - sigma_t(x_k)/mu) * (-1/mu), dT = dL * (NEE term without T).
  * phase functions: d g += (dL . L) (dp/dg) / p for sampled directions; NEE: (dL . term / p) dp/dg.
  * surfaces as in path.py (BSDF parameters, normal maps, emitters).
No per-vertex storage: memory is constant in path length.
"""
import taichi as ti

from .. import bsdfs as B
from ..bsdfs import dispatch as bsdf
from ..bsdfs.common import BsdfParams
from ..core import film
from ..core.camera import camera_ray
from ..core.interaction import make_interaction, spawn_origin
from ..core.intersect import intersect
from ..core.math import BIG, max3, mis_power, safe_div, to_local, to_world, vec2, vec3
from ..core.rng import PCG32, make_sampler
from ..emitters import area
from ..emitters import dispatch as emitters
from ..media import homogeneous as hom
from ..media import medium as med
from ..media.phase import phase_eval, phase_eval_adjoint, phase_sample
from . import volpath_raymarch as rm
from .shading import bsdf_params, bsdf_params_adjoint, has_normalmap, normalmap_adjoint, shading_frame

PRIMAL, ADJOINT = 0, 1
DELTA, MARCH = 0, 1          # free-flight / transmittance estimators in grid media
MAX_CROSSINGS = 256          # null interfaces crossed by one path segment chain (guard)
RR_MAX = 0.99                # Russian-roulette survival cap (Mitsuba 3 volpath: 0.99; path uses 0.95)


@ti.func
def target_medium(st: ti.template(), shape, d, ng, current):
    """Medium on the side of `shape`'s surface that direction d points into (Mitsuba's
    target_medium: interior against the geometric normal). Shapes without media keep `current`."""
    res = current
    mi = st.shape_med_int[shape]
    me = st.shape_med_ext[shape]
    if mi >= 0 or me >= 0:
        res = mi if d.dot(ng) < 0.0 else me
    return res


@ti.func
def free_flight(st: ti.template(), mode: ti.template(), march: ti.template(), m, o, d, tmax, hero,
                sampler: ti.template(), L, dL, step):
    """Sample a real collision on o + t d, t in [0, tmax), in medium m, with hero channel `hero`.
    Returns (scattered, t, w, q): w the throughput factor, q the pdf ratios p_c / p_hero (RGB; see
    media/homogeneous.py). In ADJOINT mode, also scatters dL * L * dw/w into the medium's
    parameters (L: the radiance the weight multiplies)."""
    scattered = 0
    ts = tmax
    w = vec3(1.0)
    q = vec3(1.0)
    if med.is_homogeneous(st, m):
        sig, alb = med.homogeneous_coefficients(st, m)
        t = hom.sample_distance(sig, hero, sampler.next_1d())
        g_s = vec3(0.0)
        g_a = vec3(0.0)
        if t < tmax:
            scattered = 1
            ts = t
            w, q = hom.collision(sig, alb, t, hero)
            if ti.static(mode == ADJOINT):
                g_s, g_a = hom.collision_grads(sig, alb, t, L, dL)
        else:
            w = hom.escape(sig, tmax, hero)
            q = w
            if ti.static(mode == ADJOINT):
                g_s = hom.escape_grads(tmax, L, dL)
        if ti.static(mode == ADJOINT):
            med.homogeneous_coefficients_adjoint(st, m, g_s, g_a)
    elif ti.static(march == MARCH):
        scattered, ts, w, q = rm.march_free_flight(st, mode, m, o, d, tmax, hero, sampler, L, dL, step)
    else:
        # ---- delta tracking with the majorant mu on the bbox-clipped segment ----
        t0, t1 = med.clip_bbox(st, m, o, d, tmax)
        mu = st.med_majorant[m]
        if t1 > t0 and mu > 0.0:
            t = t0
            tracking = True
            while tracking:
                t += -ti.log(1.0 - sampler.next_1d()) / mu
                if t >= t1:
                    tracking = False
                else:
                    x = o + t * d
                    sig, alb = med.coefficients(st, m, x)
                    s_h = hom.channel(sig, hero)
                    p_s = ti.min(ti.max(s_h / mu, 0.0), 1.0)   # the hero's scattering probability (detached)
                    g = dL * L
                    g_s = vec3(0.0)
                    g_a = vec3(0.0)
                    if sampler.next_1d() < p_s:
                        # real scattering: psi_s = sigma_s / mu, weighted by 1 / P_s;
                        # d w / w = d sigma_t / sigma_t + d albedo / albedo
                        w *= alb * sig / (mu * p_s)
                        q *= sig / (mu * p_s)
                        g_s = vec3(safe_div(g[0], sig[0]), safe_div(g[1], sig[1]), safe_div(g[2], sig[2]))
                        g_a = vec3(safe_div(g[0], alb[0]), safe_div(g[1], alb[1]), safe_div(g[2], alb[2]))
                        scattered = 1
                        ts = t
                        tracking = False
                    else:
                        # null scattering: psi_n = (mu - sigma_t) / mu, weighted by 1 / (1 - P_s);
                        # d w / w = -d sigma_t / (mu - sigma_t)
                        sn = mu - sig
                        w *= sn / (mu * (1.0 - p_s))
                        q *= sn / (mu * (1.0 - p_s))
                        g_s = -vec3(safe_div(g[0], sn[0]), safe_div(g[1], sn[1]), safe_div(g[2], sn[2]))
                    if ti.static(mode == ADJOINT):
                        med.coefficients_adjoint(st, m, x, g_s, g_a)
    return scattered, ts, w, q


@ti.func
def segment_transmittance(st: ti.template(), mode: ti.template(), march: ti.template(), m, o, d, s,
                          sampler: ti.template(), T_total, dT, step):
    """Transmittance factor of medium m along o + t d, t in [0, s) (RGB). ADJOINT: with the full
    shadow-ray transmittance T_total and its adjoint dT, scatter dT * dT_total/dsigma_t."""
    T = vec3(1.0)
    if med.is_homogeneous(st, m):
        sig, _ = med.homogeneous_coefficients(st, m)
        T = hom.transmittance(sig, s)
        if ti.static(mode == ADJOINT):
            med.homogeneous_coefficients_adjoint(st, m, hom.escape_grads(s, T_total, dT), vec3(0.0))
    elif ti.static(march == MARCH):
        T = rm.march_transmittance(st, mode, m, o, d, s, sampler, T_total, dT, step)
    else:
        # ---- ratio tracking: T = prod_k (1 - sigma_t(x_k) / mu) ----
        t0, t1 = med.clip_bbox(st, m, o, d, s)
        mu = st.med_majorant[m]
        if t1 > t0 and mu > 0.0:
            t = t0
            tracking = True
            while tracking:
                t += -ti.log(1.0 - sampler.next_1d()) / mu
                if t >= t1:
                    tracking = False
                else:
                    x = o + t * d
                    sig, _ = med.coefficients(st, m, x)
                    f = 1.0 - sig / mu
                    T *= f
                    if ti.static(mode == ADJOINT):
                        # nested replay: d T / d sigma_t(x) = -(T_total / f) / mu
                        g = dT * T_total
                        med.coefficients_adjoint(
                            st, m, x, -vec3(safe_div(g[0], f[0]), safe_div(g[1], f[1]), safe_div(g[2], f[2])) / mu,
                            vec3(0.0))
                    if max3(T) <= 0.0:
                        tracking = False
    return T


@ti.func
def transmittance(st: ti.template(), mode: ti.template(), march: ti.template(), o, d, dist, medium,
                  sampler: ti.template(), T_total, dT, step):
    """Transmittance (RGB) of the shadow ray o + t d, t in [0, dist), that starts in `medium`:
    media are crossed (ratio tracking / analytic), null interfaces switch the medium, any other
    surface blocks (T = 0). ADJOINT: the nested replay (call with a copy of the sampler state
    taken before the PRIMAL call, T_total its result and dT = d(objective)/dT)."""
    T = vec3(1.0)
    ray_o = o
    remaining = dist
    m = medium
    crossings = 0
    going = True
    while going:
        tri, t, b1, b2 = intersect(st, ray_o, d, remaining)
        seg = remaining
        if tri >= 0:
            seg = t
        if m >= 0:
            T *= segment_transmittance(st, mode, march, m, ray_o, d, seg, sampler, T_total, dT, step)
        if tri < 0:
            going = False
        else:
            shape = st.tri_shape[tri]
            if st.bsdf_type[st.shape_bsdf[shape]] != B.NULL or crossings >= MAX_CROSSINGS:
                T = vec3(0.0)
                going = False
            else:
                ng = st.tri_e1[tri].cross(st.tri_e2[tri]).normalized()
                m = target_medium(st, shape, d, ng, m)
                p = ray_o + t * d
                eps = st.info_f[0] * (1.0 + ti.abs(p).max())
                ray_o = p + ng * (eps if ng.dot(d) >= 0.0 else -eps)
                if remaining < BIG:
                    remaining -= t
                crossings += 1
        if max3(T) <= 0.0:
            going = False
    return T


@ti.func
def sample(st: ti.template(), bm: ti.template(), em: ti.template(), mode: ti.template(), march: ti.template(),
           o, d, sampler: ti.template(), max_depth, rr_depth, hide_emitters, step, L_in, dL):
    """One path from o along d. Returns (L, number of real scattering vertices)."""
    L = vec3(0.0)                 # PRIMAL: accumulated radiance; ADJOINT: radiance still to come
    if ti.static(mode == ADJOINT):
        L = L_in
    beta = vec3(1.0)              # β: path throughput (detached), already divided by mean(r)
    hero = ti.min(ti.cast(sampler.next_1d() * 3.0, ti.i32), 2)   # channel that samples distances
    r = vec3(1.0)                 # path pdf ratios p_c / p_hero, renormalised to mean 1 (spectral MIS)
    eta = 1.0                     # η: product of relative IORs (for RR)
    depth = 0                     # real scattering vertices so far (media and non-null surfaces)
    medium = -1                   # medium the ray travels in (-1: vacuum; the camera is in vacuum)
    prev_p = o                    # previous real vertex (emitter pdf of phase/BSDF-sampled hits)
    prev_pdf = 1.0                # phase/BSDF pdf of the direction that led here
    prev_delta = 1                # 1: no MIS for the next emitter hit (camera or a Dirac lobe)
    crossings = 0                 # null interfaces crossed since the last real vertex (guard)
    ray_o = o
    ray_d = d
    active = True
    while active:
        tri, t, b1, b2 = intersect(st, ray_o, ray_d, BIG)
        si = make_interaction(st, tri, t, b1, b2, ray_o, ray_d)
        t_surf = BIG
        if si.valid == 1:
            t_surf = t
        # ------------------------- medium: free-flight sampling -------------------------
        scattered = 0
        xs = vec3(0.0)
        if medium >= 0:
            sc, ts, w, q = free_flight(st, mode, march, medium, ray_o, ray_d, t_surf, hero, sampler, L, dL, step)
            rq = r * q
            mr = rq.sum() / 3.0
            if mr > 0.0:
                beta *= w / mr
                r = rq / mr
            else:
                beta = vec3(0.0)
            scattered = sc
            if sc == 1:
                xs = ray_o + ts * ray_d
            if max3(beta) <= 0.0:
                active = False
        vertex = 0                # 1: a real vertex here (medium scattering or a non-null surface)
        b = 0
        btype = 0
        p = BsdfParams()
        fs = vec3(0.0)
        ft = vec3(0.0)
        fn = vec3(0.0)
        wi = vec3(0.0)
        if active and scattered == 1:
            vertex = 1
        elif active:
            # ---------------- surface hit or escape: emission found by phase/BSDF sampling -----------
            if si.valid == 1:
                e = st.shape_emitter[si.shape]
                if e >= 0 and (depth > 0 or hide_emitters == 0):
                    le = area.eval(st, e, si.uv, si.n, -ray_d)
                    if max3(le) > 0.0:
                        mis = 1.0
                        if prev_delta == 0:
                            mis = mis_power(prev_pdf, emitters.pdf_area_hit(st, e, prev_p, si.p, si.n))
                        contrib = beta * mis * le
                        if ti.static(mode == ADJOINT):
                            L -= contrib
                            area.eval_adjoint(st, e, si.uv, si.n, -ray_d, dL * beta * mis)
                        else:
                            L += contrib
            else:
                if depth > 0 or hide_emitters == 0:
                    le = emitters.env_eval(st, em, ray_d)
                    if max3(le) > 0.0:
                        mis = 1.0
                        if prev_delta == 0:
                            mis = mis_power(prev_pdf, emitters.env_pdf(st, em, ray_d))
                        contrib = beta * mis * le
                        if ti.static(mode == ADJOINT):
                            L -= contrib
                            emitters.env_eval_adjoint(st, em, ray_d, dL * beta * mis)
                        else:
                            L += contrib
                active = False
            if active:
                b = st.shape_bsdf[si.shape]
                btype = st.bsdf_type[b]
                if btype == B.NULL:
                    # index-matched interface: switch the medium, not a bounce
                    medium = target_medium(st, si.shape, ray_d, si.ng, medium)
                    ray_o = spawn_origin(st, si, ray_d)
                    crossings += 1
                    if crossings > MAX_CROSSINGS:
                        active = False
                else:
                    vertex = 1
                    p = bsdf_params(st, b, si.uv)
                    fs, ft, fn = shading_frame(st, b, si, -ray_d)
                    wi = to_local(fs, ft, fn, -ray_d)
        if vertex == 1 and depth + 1 >= max_depth:
            vertex = 0
            active = False
        if vertex == 1:
            crossings = 0
            ref_p = xs
            if scattered == 0:
                ref_p = si.p
            # ------------------------- emitter sampling (NEE) -------------------------
            u_em = sampler.next_2d()
            if scattered == 1 or bsdf.has_smooth_lobes(btype):
                ds = emitters.sample_emitter_direction(st, em, ref_p, u_em)
                if ds.emitter >= 0 and max3(ds.weight) > 0.0:
                    f_em = vec3(0.0)       # phase value or BSDF·cos
                    pdf_dir = 0.0
                    wo_em = vec3(0.0)
                    if scattered == 1:
                        ph = phase_eval(st, medium, ray_d, ds.d)
                        f_em = vec3(ph)
                        pdf_dir = ph
                    else:
                        wo_em = to_local(fs, ft, fn, ds.d)
                        f_em = bsdf.bsdf_eval(bm, btype, p, wi, wo_em)
                        pdf_dir = bsdf.bsdf_pdf(bm, btype, p, wi, wo_em)
                    if max3(f_em) > 0.0:
                        so = ref_p
                        m_em = medium
                        if scattered == 0:
                            so = spawn_origin(st, si, ds.d)
                            m_em = target_medium(st, si.shape, ds.d, si.ng, medium)
                        dist = ds.dist
                        if dist < BIG:
                            dist = (ds.p - so).norm() * (1.0 - 1e-4)
                        saved = PCG32(state=sampler.state, inc=sampler.inc)   # for the nested replay
                        T = transmittance(st, PRIMAL, march, so, ds.d, dist, m_em, sampler, vec3(0.0), vec3(0.0),
                                          step)
                        if max3(T) > 0.0:
                            mis_em = 1.0
                            if ds.delta == 0:
                                mis_em = mis_power(ds.pdf, pdf_dir)
                            contrib = beta * mis_em * f_em * T * ds.weight
                            if ti.static(mode == ADJOINT):
                                L -= contrib
                                wv = dL * beta * mis_em * T * ds.weight
                                if scattered == 1:
                                    phase_eval_adjoint(st, medium, ray_d, ds.d, wv.sum())
                                else:
                                    g = bsdf.bsdf_eval_adjoint(bm, btype, p, wi, wo_em, wv)
                                    bsdf_params_adjoint(st, b, si.uv, g)
                                    if has_normalmap(st, b):
                                        normalmap_adjoint(st, bm, btype, p, b, si, fn, -ray_d, ds.d, wv)
                                # ds.weight = Le / pdf (pdf incl. the 1/N selection)
                                emitters.sample_le_adjoint(st, em, ds, dL * beta * mis_em * f_em * T / ds.pdf)
                                transmittance(st, ADJOINT, march, so, ds.d, dist, m_em, saved, T,
                                              dL * beta * mis_em * f_em * ds.weight, step)
                            else:
                                L += contrib
            # -------------------------- phase / BSDF sampling ---------------------------
            if scattered == 1:
                wo, pdf = phase_sample(st, medium, ray_d, sampler.next_2d())
                if ti.static(mode == ADJOINT):
                    # weight p / detach(p): d g += (dL . L) (dp/dg) / p
                    phase_eval_adjoint(st, medium, ray_d, wo, safe_div(dL.dot(L), pdf))
                prev_p = xs
                prev_pdf = pdf
                prev_delta = 0
                ray_o = xs
                ray_d = wo
            else:
                u1 = sampler.next_1d()
                u2 = sampler.next_2d()
                bs = bsdf.bsdf_sample(bm, btype, p, wi, u1, u2)
                if bs.valid == 0 or max3(bs.weight) <= 0.0:
                    active = False
                else:
                    if ti.static(mode == ADJOINT):
                        if bs.delta == 0:
                            f_det = bs.weight * bs.pdf
                            inv_f = vec3(safe_div(1.0, f_det[0]), safe_div(1.0, f_det[1]), safe_div(1.0, f_det[2]))
                            wv = dL * L * inv_f
                            g = bsdf.bsdf_eval_adjoint(bm, btype, p, wi, bs.wo, wv)
                            bsdf_params_adjoint(st, b, si.uv, g)
                            if has_normalmap(st, b):
                                normalmap_adjoint(st, bm, btype, p, b, si, fn, -ray_d, to_world(fs, ft, fn, bs.wo),
                                                  wv)
                    wo = to_world(fs, ft, fn, bs.wo)
                    beta *= bs.weight
                    eta *= bs.eta
                    prev_p = si.p
                    prev_pdf = bs.pdf
                    prev_delta = bs.delta
                    medium = target_medium(st, si.shape, wo, si.ng, medium)
                    ray_o = spawn_origin(st, si, wo)
                    ray_d = wo
            # ------------------------------ Russian roulette ------------------------------
            if active:
                beta_max = max3(beta)
                rr_prob = ti.min(beta_max * eta * eta, RR_MAX)
                u_rr = sampler.next_1d()
                if beta_max <= 0.0:
                    active = False
                elif depth >= rr_depth:
                    beta /= rr_prob
                    if u_rr >= rr_prob:
                        active = False
                depth += 1
    return L, depth


@ti.kernel
def render_kernel(st: ti.template(), bm: ti.template(), em: ti.template(), march: ti.template(), cam: ti.i32,
                  spp: ti.i32, sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32,
                  hide_emitters: ti.i32, step: float):
    """Primal render of `spp` samples per pixel (indices sample_offset..) splatted into st.film.
    One thread per pixel; its samples' filter footprints are gathered locally, then flushed."""
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        px = pix % w
        py = pix // w
        acc = film.local_zero()
        for s in range(spp):
            sampler = make_sampler(seed, pix, sample_offset + s)
            pos = vec2(px, py) + sampler.next_2d()
            o, d = camera_ray(st, cam, pos)
            L, _ = sample(st, bm, em, PRIMAL, march, o, d, sampler, max_depth, rr_depth, hide_emitters, step,
                          vec3(0.0), vec3(0.0))
            if not (L[0] == L[0] and L[1] == L[1] and L[2] == L[2]):
                L = vec3(0.0)  # never let a NaN sample poison a pixel
            film.local_splat(st, cam, px, py, pos, L, acc)
        film.local_flush(st, cam, px, py, acc, False)


# ---------------------------------------------------------------------------------- host side
# Volume kernels are specialised to a fixed superset of the BSDF / emitter models that volume
# scenes typically use, so that different test and optimisation scenes share one compiled kernel
# (each megakernel costs tens of seconds to compile); other models are added when present.
VOLUME_BSDFS = (1 << B.NULL) | (1 << B.DIFFUSE) | (1 << B.SMOOTH_DIELECTRIC)


def kernel_masks(scene):
    from ..emitters import AREA, CONSTANT, DIRECTIONAL, ENVMAP, POINT
    em = (1 << AREA) | (1 << POINT) | (1 << DIRECTIONAL) | (1 << CONSTANT) | (1 << ENVMAP)
    return scene.bsdf_mask | VOLUME_BSDFS, scene.em_mask | em


def integrator_args(scene, integrator=None):
    """(march, max_depth, rr_depth, hide_emitters, step) for a volume integrator type."""
    from ..renderer import _integrator_args
    t, max_depth, rr_depth, hide = _integrator_args(scene, integrator)
    march = MARCH if t == "volpath_raymarch" else DELTA
    step = float(scene.integrator.get("step_size", 0.0))
    return march, max_depth, rr_depth, hide, step


def render(scene, spp=64, seed=0, sensor=0, integrator=None, progress=True):
    """Primal render with volpath (or volpath_raymarch); called by tirender.render."""
    from ..progress import Progress
    from ..renderer import _batches, _NoBar, resolve_film
    march, max_depth, rr_depth, hide, step = integrator_args(scene, integrator)
    st = scene.bind()
    med.update_majorants(scene, st)
    s = scene.sensors[sensor]
    st.film.fill(0)
    bm, em = kernel_masks(scene)
    with Progress(spp, "render", unit="spp", force=False) if progress else _NoBar() as bar:
        for off, k in _batches(spp, s.width * s.height):
            render_kernel(st, bm, em, march, sensor, k, off, int(seed) & 0xFFFFFFFF, max_depth, rr_depth, hide,
                          step)
            bar.update(k)
    return resolve_film(st, s)
