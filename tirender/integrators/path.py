"""Unidirectional path tracer with next-event estimation, power-heuristic MIS and Russian roulette
(Mitsuba 3 ``path`` semantics), written once for the primal and the PRB adjoint walk.

``sample(..., mode)`` follows Mitsuba 3's prb.py: in PRIMAL mode it returns the radiance L of one
path; in ADJOINT mode it replays the *same* path (same random numbers), starts from the primal L,
subtracts each vertex's emission and NEE term, and back-propagates δL into the parameter pool
(``st.grad``) with hand-written adjoints (detached PRB, Vicini et al. 2021, §4.1):
  * emitted radiance Le (MIS-weighted)         -> emitter radiance textures
  * NEE term  β·mis·f(wi, wo_em)·Le/pdf_em      -> BSDF parameters and emitter radiance
  * indirect  L_ind·f(wi, wo)/f_detached        -> BSDF parameters (L_ind: reconstructed radiance)
MIS weights, sampling densities and the Russian-roulette probability are treated as constants
(detached), which keeps the estimator unbiased. Depth semantics: ``max_depth`` counts path
segments (1: only directly visible emitters, 2: direct illumination); RR applies from
``depth >= rr_depth``.

Loop state: L (radiance, accumulated or remaining), β (throughput), η (relative IOR product),
depth, the previous vertex's position, BSDF pdf and delta flag (for MIS of emitter hits).
"""
import taichi as ti

from ..bsdfs import dispatch as bsdf
from ..core import film
from ..core.camera import camera_ray
from ..core.interaction import make_interaction, spawn_origin
from ..core.intersect import intersect, occluded
from ..core.math import BIG, max3, mis_power, safe_div, to_local, to_world, vec2, vec3  # noqa: F401
from ..core.rng import make_sampler
from ..emitters import area
from ..emitters import dispatch as emitters
from .shading import bsdf_params, bsdf_params_adjoint, has_normalmap, normalmap_adjoint, shading_frame

PRIMAL, ADJOINT = 0, 1


@ti.func
def sample(st: ti.template(), bm: ti.template(), em: ti.template(), mode: ti.template(), o, d, sampler: ti.template(),
           max_depth, rr_depth, hide_emitters, L_in, dL):
    L = vec3(0.0)                 # PRIMAL: accumulated radiance; ADJOINT: radiance still to come
    if ti.static(mode == ADJOINT):
        L = L_in
    beta = vec3(1.0)              # β: path throughput (detached)
    eta = 1.0                     # η: product of relative IORs (for RR)
    depth = 0
    prev_p = o                    # previous vertex (for the emitter pdf of BSDF-sampled hits)
    prev_pdf = 1.0                # BSDF pdf of the direction that led here
    prev_delta = 1                # 1: no MIS for the next emitter hit (camera or a Dirac lobe)
    ray_o = o
    ray_d = d
    active = True
    while active:
        tri, t, b1, b2 = intersect(st, ray_o, ray_d, BIG)
        si = make_interaction(st, tri, t, b1, b2, ray_o, ray_d)
        # ---------------------- emission (found by BSDF sampling) ----------------------
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
        if active and depth + 1 >= max_depth:
            active = False
        if active:
            b = st.shape_bsdf[si.shape]
            btype = st.bsdf_type[b]
            p = bsdf_params(st, b, si.uv)
            fs, ft, fn = shading_frame(st, b, si, -ray_d)
            wi = to_local(fs, ft, fn, -ray_d)
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
                            contrib = beta * mis_em * f_em * ds.weight
                            if ti.static(mode == ADJOINT):
                                L -= contrib
                                wv = dL * beta * mis_em * ds.weight
                                g = bsdf.bsdf_eval_adjoint(bm, btype, p, wi, wo_em, wv)
                                bsdf_params_adjoint(st, b, si.uv, g)
                                if has_normalmap(st, b):
                                    normalmap_adjoint(st, bm, btype, p, b, si, fn, -ray_d, ds.d, wv)
                                # ds.weight = Le / pdf (pdf incl. the 1/N selection, also for delta emitters)
                                emitters.sample_le_adjoint(st, em, ds, dL * beta * mis_em * f_em / ds.pdf)
                            else:
                                L += contrib
            # ------------------------------ BSDF sampling ------------------------------
            u1 = sampler.next_1d()
            u2 = sampler.next_2d()
            bs = bsdf.bsdf_sample(bm, btype, p, wi, u1, u2)
            if bs.valid == 0 or max3(bs.weight) <= 0.0:
                active = False
            else:
                if ti.static(mode == ADJOINT):
                    if bs.delta == 0:
                        # L_ind · f / detach(f): cancels the detached BSDF value inside L
                        f_det = bs.weight * bs.pdf
                        inv_f = vec3(safe_div(1.0, f_det[0]), safe_div(1.0, f_det[1]), safe_div(1.0, f_det[2]))
                        wv = dL * L * inv_f
                        g = bsdf.bsdf_eval_adjoint(bm, btype, p, wi, bs.wo, wv)
                        bsdf_params_adjoint(st, b, si.uv, g)
                        if has_normalmap(st, b):
                            normalmap_adjoint(st, bm, btype, p, b, si, fn, -ray_d, to_world(fs, ft, fn, bs.wo), wv)
                wo = to_world(fs, ft, fn, bs.wo)
                beta *= bs.weight
                eta *= bs.eta
                prev_p = si.p
                prev_pdf = bs.pdf
                prev_delta = bs.delta
                ray_o = spawn_origin(st, si, wo)
                ray_d = wo
                # -------------------------- Russian roulette ---------------------------
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


@ti.kernel
def render_kernel(st: ti.template(), bm: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
                  sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32):
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
            L = sample(st, bm, em, PRIMAL, o, d, sampler, max_depth, rr_depth, hide_emitters, vec3(0.0), vec3(0.0))
            if not (L[0] == L[0] and L[1] == L[1] and L[2] == L[2]):
                L = vec3(0.0)  # never let a NaN sample poison a pixel
            film.local_splat(st, cam, px, py, pos, L, acc)
        film.local_flush(st, cam, px, py, acc, False)
