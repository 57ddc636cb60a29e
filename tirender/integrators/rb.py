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
Variants: rgb, mono and spectral (the path's wavelengths are drawn as ``render`` draws them, δL enters
the lanes through the film's adjoint conversion, the joint pass splats the film's RGB); not
spectral_polarized (δL scattered along one path is a scalar per lane, the light it meets a Stokes vector).
"""
from functools import partial

import taichi as ti

from .. import launch, variants
from ..bsdfs.registry import dispatch
from ..core import film
from ..sensors.registry import camera_ray, camera_sample
from ..core.math import BIG, max_component, vec3
from ..core.rng import make_sampler
from ..errors import ConfigError
from ..variants import spec
from ..walk import steps, vertex
from ..walk.state import PRIMAL, RB, adjoint_on, camera_state, segment_end
from . import path

RB_METHODS = ("rb", "rb_biased", "rb_pipelined", "rb_biased_pipelined")
NEST_SEED_XOR = 0xA511E9B3  # the nested Li estimates use their own stream (seed ^ this, pixel, sample)
INTEGRATES = path.NAMES
VARIANTS = ("rgb", "mono", "spectral")


def method_flags(method):
    """(biased, pipelined) for an RB method name."""
    if method not in RB_METHODS:
        raise ConfigError(f"unknown gradient method '{method}' (expected one of: prb, {', '.join(RB_METHODS)})",
                          key="method")
    return "biased" in method, "pipelined" in method


@ti.func
def li_estimate(st: ti.template(), bsdf: ti.template(), em: ti.template(), o, d, sampler: ti.template(), depth0,
                prev_p, prev_pdf, prev_delta, max_depth, rr_depth, lam):
    """Primal radiance arriving at prev_p from direction d: the path walk started at depth depth0,
    its first emitter hit MIS-weighted against the NEE of the vertex prev_p (pdf prev_pdf); lam: the
    path's wavelengths."""
    s = camera_state(o, d, BIG, spec(0.0), 0, lam)
    s.depth = depth0
    s.prev_p = prev_p
    s.prev_pdf = prev_pdf
    s.prev_delta = prev_delta
    path.walk(st, bsdf, em, PRIMAL, s, sampler, max_depth, rr_depth, 0, spec(0.0))
    return s.L


@ti.func
def rb_walk(st: ti.template(), bsdf: ti.template(), em: ti.template(), o, d, tmax, lam, sampler: ti.template(),
            nest: ti.template(), max_depth, rr_depth, hide_emitters, dL, biased: ti.template()):
    """One RB adjoint path of wavelengths lam (adjoint radiance dL per lane from the sensor along o, d; its
    first segment ends at tmax).
    Consumes ``sampler`` exactly like ``path.sample`` and returns the path's primal radiance L (the joint
    pass splats it); ``nest`` feeds the nested Li estimates (unbiased). dL = 0: primal only."""
    s = camera_state(o, d, tmax, spec(0.0), 0, lam)
    # biased I: the BSDF-sampled term of the previous vertex, applied once its MIS weight is known
    pend = 0
    pend_w = spec(0.0)
    pend_wo = vec3(0.0)
    pend_v = vertex.Vertex(medium_event=0)
    while s.active:
        si, _tmax = steps.first_hit(st, s, hide_emitters, segment_end(s))   # past hidden emitters, as path.walk
        mis_next = steps.emission(st, em, RB, s, si, hide_emitters, dL)
        if ti.static(biased):
            if pend == 1:
                vertex.adjoint(st, bsdf, pend_v, pend_wo, pend_w * mis_next)
                pend = 0
        if si.valid == 0 or s.depth + 1 >= max_depth:
            s.active = 0
        else:
            v = vertex.surface_vertex(st, si, s.d, s.lam)
            steps.nee(st, bsdf, em, RB, s, v, sampler, dL, steps.SURFACE_VISIBILITY, biased)
            beta_cur = s.beta
            depth_cur = s.depth
            bs = steps.scatter(st, bsdf, PRIMAL, s, v, sampler, dL)
            if ti.static(not biased):
                on = 0
                w = spec(0.0)
                if s.active and adjoint_on(RB, s, dL) and bs.delta == 0:
                    # unbiased: nested primal estimate of Li(wo) (quadratic time)
                    li = li_estimate(st, bsdf, em, s.o, bs.wo, nest, depth_cur + 1, v.p, bs.pdf, bs.delta,
                                     max_depth, rr_depth, s.lam)
                    if max_component(li) > 0.0:
                        on = 1
                        w = dL * beta_cur * li / bs.pdf
                steps.bsdf_adjoints(st, bsdf, s, v, on, bs.wo, w)      # with NEE's (pending since steps.nee)
            if s.active:
                rr_scale = steps.russian_roulette(s, sampler, rr_depth, path.RR_MAX)
                if ti.static(biased):
                    # Q_approx's BSDF term (Li := 1), RR-weighted so it can wait for the next hit's MIS
                    if adjoint_on(RB, s, dL) and s.active and bs.delta == 0:
                        pend = 1
                        pend_w = dL * beta_cur * (rr_scale / bs.pdf)
                        pend_wo = bs.wo
                        pend_v = v
    return s.L


@ti.kernel
def rb_kernel(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
              sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32,
              joint: ti.i32, biased: ti.template()):
    """One thread per (pixel, sample): gather δL from st.adj (normalised adjoint image) and walk an RB
    adjoint path. joint = 1: also splat the path's primal radiance into st.film (pipelining); a runtime
    flag so that the joint pass and the plain gradient share one compiled kernel."""
    for pix in range(st.cam_w[cam] * st.cam_h[cam]):
        for k in range(spp):
            sampler, pos, ap = camera_sample(st, cam, pix, seed, sample_offset + k)
            lam, lw = variants.sample_wavelengths(sampler)       # as the render kernel draws them
            dL = variants.adjoint_from_rgb(film.gather_adjoint(st, cam, pos), lam, lw)
            if joint == 1 or dL[0] != 0.0 or dL[1] != 0.0 or dL[2] != 0.0:
                o, d, tmax = camera_ray(st, cam, pos, ap)
                nest = make_sampler(seed ^ ti.u32(NEST_SEED_XOR), pix, sample_offset + k)
                L = rb_walk(st, bsdf, em, o, d, tmax, lam, sampler, nest, max_depth, rr_depth, hide_emitters, dL, biased)
                if joint == 1:
                    film.splat(st, cam, pos, variants.to_rgb(film.nan_to_zero(L), lam, lw))


def _gradient(scene, adjoint_image, spp, seed, sensor, accumulate, progress, method):
    biased, joint = method_flags(method)
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    if joint:
        launch.begin_film(scene, sensor, True)

    def run(st, cam, sd, off, k):
        rb_kernel(st, bsdf, scene.em_mask, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide, int(joint), biased)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, method, run,
                                film="splat" if joint else None)


def render_and_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress, method):
    """Pipelined RB (biased II): one joint pass that renders the image at the current parameters
    (identical to ``render(scene, spp, seed, sensor)``) and back-propagates ``adjoint_image`` (from
    the previous iteration) through them. Returns (image (H, W, 3) float32, gradients dict)."""
    if method in ("rb", "rb_biased"):
        method += "_pipelined"
    grads = _gradient(scene, adjoint_image, spp, seed, sensor, accumulate, progress, method)
    return launch.resolve_film(scene.bind(), scene.sensors[sensor]), grads


METHODS = {m: partial(_gradient, method=m) for m in RB_METHODS}
JOINT = {m: partial(render_and_grad, method=m) for m in RB_METHODS}
