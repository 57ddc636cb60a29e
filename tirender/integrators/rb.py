"""Radiative Backpropagation (Nimier-David et al. 2020), unbiased and biased, with pipelining.

Methods (``render_grad(method=...)``, ``optimize.method``):

``rb``                    unbiased RB (Listings 1-2 with NEE and MIS). Adjoint radiance δL is emitted
                          by the sensor (gathered through the film's reconstruction filter, as in PRB)
                          and scattered along one path; at each vertex the effective emission
                          Q = ∂Le + ∫ Li ∂fs dω⊥ is back-propagated:
                            * emitted radiance hit by the path (MIS-weighted)   -> emitter textures
                            * NEE term: Li = Le of the sampled emitter (known)   -> BSDF + emitter
                            * BSDF-sampled term: δL β ∂fs(wi, wo) Li(wo) / pdf, where Li(wo) is a
                              *nested* primal path-tracing estimate (NEE + MIS + RR, fresh random
                              numbers) started at the vertex in direction wo, its first emitter hit
                              MIS-weighted against this vertex's NEE. Time O(depth²), memory O(1).
``rb_biased``             biased RB I (§3.8, Q_approx): Li := 1 in both parts of Q - the BSDF-sampled
                          term uses δL β ∂fs / pdf and the NEE term replaces the emitter's radiance
                          by 1 (weight 1/pdf_em). The two strategies are combined with the same MIS
                          weights as the primal integrator (the BSDF term's weight needs the next
                          hit, so it is applied one vertex later); the estimator is then unbiased
                          for Q_approx. Linear time.
``rb_pipelined``,         biased RB II (§3.8, pipelining) over unbiased RB or biased I: ONE joint
``rb_biased_pipelined``   pass per (pixel, sample) walks a path that both accumulates the primal
                          radiance into the film (exactly the image ``render`` would produce with the
                          same seed) and back-propagates the *given* adjoint image (the previous
                          iteration's, in the optimisation driver) through the current parameters.
                          ``render_and_grad`` returns (image, gradients); ``render_grad`` with a
                          pipelined method returns only the gradients.

Detached like PRB: sampling densities, MIS weights and RR probabilities are constants. Dirac
lobes get no BSDF adjoint (RB does not support them), adjoint radiance passes through them.
"""
import taichi as ti

from ..bsdfs import dispatch as bsdf
from ..core import film
from ..core.camera import camera_ray
from ..core.interaction import SurfaceInteraction, make_interaction, spawn_origin
from ..core.intersect import intersect, occluded
from ..core.math import BIG, max3, mis_power, to_local, to_world, vec2, vec3
from ..core.rng import make_sampler
from ..emitters import area
from ..emitters import dispatch as emitters
from ..errors import ConfigError
from .shading import bsdf_params, bsdf_params_adjoint, has_normalmap, normalmap_adjoint, shading_frame

RB_METHODS = ("rb", "rb_biased", "rb_pipelined", "rb_biased_pipelined")
NEST_SEED_XOR = 0xA511E9B3  # the nested Li estimates use their own stream (seed ^ this, pixel, sample)


def method_flags(method):
    """(biased, pipelined) for an RB method name."""
    if method not in RB_METHODS:
        raise ConfigError(f"unknown gradient method '{method}' (expected one of: prb, {', '.join(RB_METHODS)})",
                          key="method")
    return "biased" in method, "pipelined" in method


@ti.func
def li_estimate(st: ti.template(), bm: ti.template(), em: ti.template(), o, d, sampler: ti.template(), depth0,
                prev_p, prev_pdf, prev_delta, max_depth, rr_depth):
    """Primal radiance arriving at prev_p from direction d, by a path tracer whose first vertex has
    depth counter depth0 (same semantics as ``path.sample``: NEE, power-heuristic MIS, RR); the first
    emitter hit is MIS-weighted against the NEE of the vertex prev_p (pdf prev_pdf, delta flag)."""
    L = vec3(0.0)
    beta = vec3(1.0)
    eta = 1.0
    depth = depth0
    ray_o = o
    ray_d = d
    active = True
    while active:
        tri, t, b1, b2 = intersect(st, ray_o, ray_d, BIG)
        si = make_interaction(st, tri, t, b1, b2, ray_o, ray_d)
        if si.valid == 1:
            e = st.shape_emitter[si.shape]
            if e >= 0:
                le = area.eval(st, e, si.uv, si.n, -ray_d)
                if max3(le) > 0.0:
                    mis = 1.0
                    if prev_delta == 0:
                        mis = mis_power(prev_pdf, emitters.pdf_area_hit(st, e, prev_p, si.p, si.n))
                    L += beta * mis * le
        else:
            le = emitters.env_eval(st, em, ray_d)
            if max3(le) > 0.0:
                mis = 1.0
                if prev_delta == 0:
                    mis = mis_power(prev_pdf, emitters.env_pdf(st, em, ray_d))
                L += beta * mis * le
            active = False
        if active and depth + 1 >= max_depth:
            active = False
        if active:
            b = st.shape_bsdf[si.shape]
            btype = st.bsdf_type[b]
            p = bsdf_params(st, b, si.uv)
            fs, ft, fn = shading_frame(st, b, si, -ray_d)
            wi = to_local(fs, ft, fn, -ray_d)
            u_em = sampler.next_2d()
            if bsdf.has_smooth_lobes(btype):
                ds = emitters.sample_emitter_direction(st, em, si.p, u_em)
                if ds.emitter >= 0 and max3(ds.weight) > 0.0:
                    wo_em = to_local(fs, ft, fn, ds.d)
                    f_em = bsdf.bsdf_eval(bm, btype, p, wi, wo_em)
                    if max3(f_em) > 0.0:
                        so = spawn_origin(st, si, ds.d)
                        dist = ds.dist
                        if dist < BIG:
                            dist = (ds.p - so).norm() * (1.0 - 1e-4)
                        if not occluded(st, so, ds.d, dist):
                            mis_em = 1.0
                            if ds.delta == 0:
                                mis_em = mis_power(ds.pdf, bsdf.bsdf_pdf(bm, btype, p, wi, wo_em))
                            L += beta * mis_em * f_em * ds.weight
            u1 = sampler.next_1d()
            u2 = sampler.next_2d()
            bs = bsdf.bsdf_sample(bm, btype, p, wi, u1, u2)
            if bs.valid == 0 or max3(bs.weight) <= 0.0:
                active = False
            else:
                wo = to_world(fs, ft, fn, bs.wo)
                beta *= bs.weight
                eta *= bs.eta
                prev_p = si.p
                prev_pdf = bs.pdf
                prev_delta = bs.delta
                ray_o = spawn_origin(st, si, wo)
                ray_d = wo
                beta_max = max3(beta)
                rr_prob = ti.min(beta_max * eta * eta, 0.95)
                u_rr = sampler.next_1d()
                if beta_max <= 0.0:
                    active = False
                elif depth >= rr_depth:
                    beta /= rr_prob
                    if u_rr >= rr_prob:
                        active = False
                depth += 1
    return L


@ti.func
def _bsdf_adjoint(st: ti.template(), bm: ti.template(), btype, p, b, si, fn, wi, wo, wi_w, wo_w, wv):
    """Scatter ∂<wv, f(wi, wo)>/∂π into the pool (BSDF textures and the normal map)."""
    g = bsdf.bsdf_eval_adjoint(bm, btype, p, wi, wo, wv)
    bsdf_params_adjoint(st, b, si.uv, g)
    if has_normalmap(st, b):
        normalmap_adjoint(st, bm, btype, p, b, si, fn, wi_w, wo_w, wv)


@ti.func
def rb_walk(st: ti.template(), bm: ti.template(), em: ti.template(), o, d, sampler: ti.template(),
            nest: ti.template(), max_depth, rr_depth, hide_emitters, dL, adj_on, biased: ti.template()):
    """One RB adjoint path (adjoint radiance dL from the sensor along o, d). Consumes ``sampler``
    exactly like ``path.sample`` and returns the path's primal radiance L (the joint pass splats it);
    ``nest`` feeds the nested Li estimates (unbiased). adj_on = 0: primal only."""
    L = vec3(0.0)
    beta = vec3(1.0)
    eta = 1.0
    depth = 0
    prev_p = o
    prev_pdf = 1.0
    prev_delta = 1
    ray_o = o
    ray_d = d
    active = True
    # biased I: BSDF-sampled term of the previous vertex, applied once its MIS weight is known
    pend = 0
    pend_w = vec3(0.0)
    pend_wi = vec3(0.0)
    pend_wo = vec3(0.0)
    pend_wiw = vec3(0.0)
    pend_wow = vec3(0.0)
    pend_fn = vec3(0.0)
    pend_si = SurfaceInteraction(valid=0, tri=-1, shape=-1)
    while active:
        tri, t, b1, b2 = intersect(st, ray_o, ray_d, BIG)
        si = make_interaction(st, tri, t, b1, b2, ray_o, ray_d)
        mis_next = 1.0  # MIS weight of the BSDF strategy for the direction that led here
        if si.valid == 1:
            e = st.shape_emitter[si.shape]
            if e >= 0:
                if prev_delta == 0:
                    mis_next = mis_power(prev_pdf, emitters.pdf_area_hit(st, e, prev_p, si.p, si.n))
                if depth > 0 or hide_emitters == 0:
                    le = area.eval(st, e, si.uv, si.n, -ray_d)
                    if max3(le) > 0.0:
                        L += beta * mis_next * le
                        if adj_on:
                            area.eval_adjoint(st, e, si.uv, si.n, -ray_d, dL * beta * mis_next)
        else:
            if prev_delta == 0:
                mis_next = mis_power(prev_pdf, emitters.env_pdf(st, em, ray_d))
            if depth > 0 or hide_emitters == 0:
                le = emitters.env_eval(st, em, ray_d)
                if max3(le) > 0.0:
                    L += beta * mis_next * le
                    if adj_on:
                        emitters.env_eval_adjoint(st, em, ray_d, dL * beta * mis_next)
            active = False
        if ti.static(biased):
            if pend == 1:
                pb = st.shape_bsdf[pend_si.shape]
                pp = bsdf_params(st, pb, pend_si.uv)
                _bsdf_adjoint(st, bm, st.bsdf_type[pb], pp, pb, pend_si, pend_fn, pend_wi, pend_wo, pend_wiw,
                              pend_wow, pend_w * mis_next)
                pend = 0
        if active and depth + 1 >= max_depth:
            active = False
        if active:
            b = st.shape_bsdf[si.shape]
            btype = st.bsdf_type[b]
            p = bsdf_params(st, b, si.uv)
            wi_w = -ray_d
            fs, ft, fn = shading_frame(st, b, si, wi_w)
            wi = to_local(fs, ft, fn, wi_w)
            # ------------------------- emitter sampling (NEE) -------------------------
            u_em = sampler.next_2d()
            if bsdf.has_smooth_lobes(btype):
                ds = emitters.sample_emitter_direction(st, em, si.p, u_em)
                if ds.emitter >= 0 and max3(ds.weight) > 0.0:
                    wo_em = to_local(fs, ft, fn, ds.d)
                    f_em = bsdf.bsdf_eval(bm, btype, p, wi, wo_em)
                    if max3(f_em) > 0.0:
                        so = spawn_origin(st, si, ds.d)
                        dist = ds.dist
                        if dist < BIG:
                            dist = (ds.p - so).norm() * (1.0 - 1e-4)
                        if not occluded(st, so, ds.d, dist):
                            mis_em = 1.0
                            if ds.delta == 0:
                                mis_em = mis_power(ds.pdf, bsdf.bsdf_pdf(bm, btype, p, wi, wo_em))
                            L += beta * mis_em * f_em * ds.weight
                            if adj_on:
                                li = ds.weight  # Li / pdf with Li = Le of the sampled emitter
                                if ti.static(biased):
                                    li = vec3(1.0 / ds.pdf)  # Q_approx: Li := 1
                                _bsdf_adjoint(st, bm, btype, p, b, si, fn, wi, wo_em, wi_w, ds.d,
                                              dL * beta * mis_em * li)
                                # ∂Le at the sampled emitter point (no Li involved)
                                emitters.sample_le_adjoint(st, em, ds, dL * beta * mis_em * f_em / ds.pdf)
            # ------------------------------ BSDF sampling ------------------------------
            u1 = sampler.next_1d()
            u2 = sampler.next_2d()
            bs = bsdf.bsdf_sample(bm, btype, p, wi, u1, u2)
            if bs.valid == 0 or max3(bs.weight) <= 0.0:
                active = False
            else:
                wo = to_world(fs, ft, fn, bs.wo)
                so = spawn_origin(st, si, wo)
                if ti.static(not biased):
                    if adj_on and bs.delta == 0:
                        # unbiased: nested primal estimate of Li(wo) (quadratic time)
                        li = li_estimate(st, bm, em, so, wo, nest, depth + 1, si.p, bs.pdf, bs.delta, max_depth,
                                         rr_depth)
                        if max3(li) > 0.0:
                            _bsdf_adjoint(st, bm, btype, p, b, si, fn, wi, bs.wo, wi_w, wo,
                                          dL * beta * li / bs.pdf)
                beta_cur = beta
                beta *= bs.weight
                eta *= bs.eta
                prev_p = si.p
                prev_pdf = bs.pdf
                prev_delta = bs.delta
                ray_o = so
                ray_d = wo
                # -------------------------- Russian roulette ---------------------------
                beta_max = max3(beta)
                rr_prob = ti.min(beta_max * eta * eta, 0.95)
                u_rr = sampler.next_1d()
                rr_scale = 1.0
                if beta_max <= 0.0:
                    active = False
                elif depth >= rr_depth:
                    beta /= rr_prob
                    rr_scale = 1.0 / rr_prob
                    if u_rr >= rr_prob:
                        active = False
                if ti.static(biased):
                    # Q_approx's BSDF term (Li := 1), RR-weighted so it can wait for the next hit's MIS
                    if adj_on and active and bs.delta == 0:
                        pend = 1
                        pend_w = dL * beta_cur * (rr_scale / bs.pdf)
                        pend_wi = wi
                        pend_wo = bs.wo
                        pend_wiw = wi_w
                        pend_wow = wo
                        pend_fn = fn
                        pend_si = si
                depth += 1
    return L


@ti.kernel
def rb_kernel(st: ti.template(), bm: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
              sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32,
              joint: ti.i32, biased: ti.template()):
    """One thread per (pixel, sample): gather δL from st.adj (normalised adjoint image) and walk an RB
    adjoint path. joint = 1: also splat the path's primal radiance into st.film (pipelining); a runtime
    flag so that the joint pass and the plain gradient share one compiled kernel."""
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        for s in range(spp):
            sampler = make_sampler(seed, pix, sample_offset + s)
            pos = vec2(pix % w, pix // w) + sampler.next_2d()
            dL = film.gather_adjoint(st, cam, pos)
            adj_on = dL[0] != 0.0 or dL[1] != 0.0 or dL[2] != 0.0
            if joint == 1 or adj_on:
                o, d = camera_ray(st, cam, pos)
                nest = make_sampler(seed ^ ti.u32(NEST_SEED_XOR), pix, sample_offset + s)
                L = rb_walk(st, bm, em, o, d, sampler, nest, max_depth, rr_depth, hide_emitters, dL, adj_on, biased)
                if joint == 1:
                    if not (L[0] == L[0] and L[1] == L[1] and L[2] == L[2]):
                        L = vec3(0.0)
                    film.splat(st, cam, pos, L, False)


def _run(scene, adjoint_image, spp, seed, sensor, method, accumulate, progress):
    from ..progress import Progress
    from ..renderer import _batches, _integrator_args, _NoBar
    from .prb import begin_gradient, prepare_adjoint
    biased, joint = method_flags(method)
    spp = int(spp)
    if spp < 1:
        raise ConfigError(f"spp must be >= 1, got {spp}", key="spp")
    if not 0 <= sensor < len(scene.sensors):
        raise ConfigError(f"sensor index {sensor} out of range (scene has {len(scene.sensors)})", key="sensor")
    st = scene.bind()
    seed = int(seed) & 0xFFFFFFFF
    prepare_adjoint(scene, st, adjoint_image, sensor, spp, seed)
    begin_gradient(st, scene, accumulate)
    _, max_depth, rr_depth, hide = _integrator_args(scene, None)
    s = scene.sensors[sensor]
    if joint:
        st.film.fill(0)
    with Progress(spp, method, unit="spp") if progress else _NoBar() as bar:
        for off, k in _batches(spp, s.width * s.height):
            rb_kernel(st, scene.bsdf_mask, scene.em_mask, sensor, k, off, seed, max_depth, rr_depth, hide,
                      int(joint), biased)
            bar.update(k)
    return st, s


def render_grad_rb(scene, adjoint_image, spp=64, seed=1, sensor=0, method="rb", accumulate=False, progress=False):
    """Gradient of <adjoint_image, render(scene)> by radiative backpropagation (``method`` one of
    rb, rb_biased, rb_pipelined, rb_biased_pipelined; the pipelined ones run the joint pass and
    return its gradients - use ``render_and_grad`` to get its image too). Same conventions as
    ``prb.render_grad``: dict name -> array, ``accumulate`` adds into the current gradients."""
    from .prb import read_gradients
    st, _ = _run(scene, adjoint_image, spp, seed, sensor, method, accumulate, progress)
    return read_gradients(scene, st)


def render_and_grad(scene, adjoint_image, spp=16, seed=0, sensor=0, method="rb_biased_pipelined", accumulate=False,
                    progress=False):
    """Pipelined RB (biased II): one joint pass that renders the image at the current parameters
    (identical to ``render(scene, spp, seed, sensor)``) and back-propagates ``adjoint_image`` (from
    the previous iteration) through them. Returns (image (H, W, 3) float32, gradients dict)."""
    from ..renderer import resolve_film
    from .prb import read_gradients
    if method in ("rb", "rb_biased"):
        method += "_pipelined"
    st, s = _run(scene, adjoint_image, spp, seed, sensor, method, accumulate, progress)
    return resolve_film(st, s), read_gradients(scene, st)
