"""The steps of a walk, each with its adjoint beside it (selected by the compile-time ``mode``,
see state.py). All take the path state ``s`` by reference and update it.

    emitter_found(st, em, s, si) -> (q, mis)
        the record of the emitter the current ray found (surface hit or escape) and its MIS weight.
    first_hit(st, s, hide_emitters, tmax) -> (si, tmax)
        the interaction of the current ray's hit within tmax; on the camera segment with hide_emitters, past every
        area emitter. first_hit_record also returns the hit's barycentrics and instance record (attached replays).
    emission(st, em, mode, s, si, hide_emitters, dL) -> mis
        Le of the emitter the path found (surface hit or escape), MIS-weighted against NEE from the
        previous vertex (power heuristic); an environment seen directly is black with hide_emitters.
        Adjoint: δL β mis -> the emitter's radiance.
    nee(st, bsdf, em, mode, s, v, sampler, dL, vis, biased)
        next-event estimation at vertex v: an emitter sample, the shadow ray's transmittance from
        ``vis`` (SURFACE_VISIBILITY here, media in walk/media.py), MIS with the BSDF/phase pdf.
        Adjoint: the scattering function (weight δL β mis T Le/pdf; RB biased: Li := 1), the
        emitter's Le, and the transmittance by its nested replay. Returns (d, β mis T Le/pdf). The
        scattering function's adjoint waits in s (adj_*) for the vertex's bsdf_adjoints (biased RB: at once).
    scatter(st, bsdf, mode, s, v, sampler, dL) -> BsdfSample (wo in world space)
        samples the next direction and moves the state there (β, η, prev_*, the ray). REPLAY adds
        the indirect term L_ind · ∂f / detach(f) (L: the radiance still to come); after a
        pass-through (``null``) sample, L_ind · ∂ ln P_null / ∂π (a mask's opacity).
    bsdf_adjoints(st, bsdf, s, v, on, d, w)
        the vertex's BSDF adjoints, NEE's pending one and ∂<w, f(d)>/∂π, through one call (scatter's replay,
        unbiased RB's walk): each model's adjoint code is inlined once per kernel.
    forward_bsdf_tangents(st, bsdf, s, v, bs) -> dw
        FORWARD mode's counterpart (scatter): NEE's pending <∂f/∂π, v> and the sampled smooth lobe's weight tangent.
    russian_roulette(s, sampler, rr_depth, rr_max) -> 1/q (or 1)
        from depth >= rr_depth, survival q = min(max(β) η², rr_max); counts the vertex.
In spectral_polarized the path also carries its Mueller product ``s.P`` (state.py): emission and NEE deliver
the Stokes vector of unpolarized light through it, scatter multiplies it by the vertex's Mueller matrix; reverse-
mode adjoints weight each contribution by its S0 factor (state.s0_weight; Mueller matrices held fixed, integrators/prb.py).
FORWARD mode (state.py) adds beside each of these its tangent: <∂Le/∂π, v>, <∂f/∂π, v> per lane from the
models' adjoint code run into the thread's tangent sink (one run per lane, ``_lane``), ∂M/∂π v of the
vertex's Mueller matrix.
MIS weights, pdfs and RR probabilities are detached (treated as constants), as in the papers.
"""
import taichi as ti

from .. import variants
from ..core import mueller, pool
from ..core.interaction import make_interaction, no_interaction, spawn_origin
from ..core.intersect import intersect, occluded
from ..core.math import BIG, max_component, mis_power, safe_div, vec2, vec3
from ..emitters import registry as emitters
from ..emitters.base import DirectionSample, direction_record, env_record
from ..variants import spec
from . import vertex
from .state import (FORWARD, PRB, PRIMAL, RB, REPLAY, accumulate, adjoint_mode, adjoint_on, deliver, deliver_tangent,
                    replaying, s0_weight, throughput)


@ti.func
def _lane(c):
    """The unit vector of lane c (a runtime index)."""
    return ti.Vector([ti.select(c == i, 1.0, 0.0) for i in ti.static(range(variants.lanes()))], float)


@ti.func
def emitter_found(st: ti.template(), em: ti.template(), s, si):
    """(q, mis): the record of the emitter found along the current ray (q.emitter = -1: none) and the
    MIS weight of the BSDF strategy for it (1 after a Dirac lobe)."""
    q = DirectionSample(emitter=-1)
    if si.valid == 1:
        e = st.shape_emitter[si.shape]
        if e >= 0:
            q = direction_record(e, si.p, si.n, si.uv, s.d, si.t)
    else:
        e = st.info_i[1]
        if e >= 0:
            q = env_record(e, s.o, s.d)
    mis = 1.0
    if q.emitter >= 0 and s.prev_delta == 0:
        mis = mis_power(s.prev_pdf, emitters.pdf_hit(st, em, s.prev_p, q))
    return q, mis


@ti.func
def emission(st: ti.template(), em: ti.template(), mode: ti.template(), s: ti.template(), si, hide_emitters, dL):
    """Emitted radiance found along the current ray (si: its surface interaction, or invalid on an
    escape). Returns the MIS weight of the BSDF strategy for this hit (1 without an emitter or after
    a Dirac lobe) — RB's biased estimator needs it for the previous vertex."""
    q, mis = emitter_found(st, em, s, si)
    if q.emitter >= 0:
        if s.depth > 0 or hide_emitters == 0:
            le = emitters.eval(st, em, q, s.lam)
            if max_component(le) > 0.0:
                if ti.static(variants.polarized()):
                    deliver(mode, s, s.beta * mis * le, mueller.column0(s.P))
                else:
                    accumulate(mode, s, s.beta * mis * le)
                if ti.static(mode == FORWARD):
                    dle = spec(0.0)
                    for c in range(ti.static(variants.lanes())):          # a runtime loop: the emitter's adjoint inlined once
                        pool.tangent_reset(st)
                        emitters.eval_adjoint(st, em, q, _lane(c), s.lam)
                        dle += _lane(c) * pool.tangent_value(st)
                    deliver_tangent(s, s.beta * mis * le, mis * (s.dbeta * le + s.beta * dle), mueller.column0(s.P),
                                    mueller.column0(s.dP))
                if ti.static(adjoint_mode(mode)):
                    if adjoint_on(mode, s, dL):
                        emitters.eval_adjoint(st, em, q, dL * s.beta * mis * s0_weight(mueller.column0(s.P)),
                                              s.lam)
    return mis


MAX_SKIPS = 64   # area emitters a hidden-emitter camera ray passes at most (a guard)


@ti.func
def first_hit(st: ti.template(), s: ti.template(), hide_emitters, tmax):
    """(si, tmax): first_hit_record's interaction and segment end."""
    si, tmax, _b, _inst = first_hit_record(st, s, hide_emitters, tmax)
    return si, tmax


@ti.func
def first_hit_record(st: ti.template(), s: ti.template(), hide_emitters, tmax):
    """(si, tmax, b, inst): the interaction (core.interaction.make_interaction; si.valid = 0 on a miss) of the path's
    current ray within tmax (the segment's end: state.segment_end), and the hit's barycentrics b = (b1, b2) and
    instance record inst (core/intersect.intersect's; with si.tri and si.t, what a replay needs to differentiate
    the hit: walk/attached.Stop). With hide_emitters on the camera's segment (depth 0), area emitters along it are
    passed through as if absent (Mitsuba 3's ``hide_emitters``: skip_area_emitters); s.o moves past them (si is
    made from the moved s.o) and tmax shrinks by the distance moved. One intersect and one make_interaction call
    in a loop: the traversal is the kernel's largest function, and a second call site would inline it twice (the
    Cornell box's render kernel: 27,731 → 24,386 LLVM instructions)."""
    si = no_interaction()
    b = vec2(0.0)
    inst = -1
    k = 0
    searching = True
    while searching:
        tri, t, b1, b2, inst_k = intersect(st, s.o, s.d, tmax)
        si = make_interaction(st, tri, t, b1, b2, s.o, s.d, inst_k)
        b = vec2(b1, b2)
        inst = inst_k
        searching = False
        if hide_emitters != 0 and s.depth == 0 and si.valid == 1 and k < MAX_SKIPS:
            if st.shape_emitter[si.shape] >= 0:
                o = spawn_origin(st, si, s.d)
                if tmax < BIG:
                    tmax -= (o - s.o).norm()
                s.o = o
                k += 1
                searching = True
    return si, tmax, b, inst


class SurfaceVisibility:
    """Shadow rays between surfaces: transmittance 1 or 0 (no media)."""

    @staticmethod
    @ti.func
    def transmittance(st: ti.template(), bsdf: ti.template(), mode: ti.template(), v, s, so, d, dist,
                      sampler: ti.template(), T_total, dT):
        T = spec(1.0)
        if ti.static(mode == PRIMAL):
            if occluded(st, so, d, dist):
                T = spec(0.0)
        return T


@ti.func
def nee(st: ti.template(), bsdf: ti.template(), em: ti.template(), mode: ti.template(), s: ti.template(), v,
        sampler: ti.template(), dL, vis: ti.template(), biased: ti.template()):
    """Next-event estimation at vertex v (see the module doc). Always consumes two random numbers
    for the emitter sample (and whatever ``vis`` uses), so PRIMAL and REPLAY walks stay aligned.
    Returns (d, w, q, wf): the emitter sample's direction d and w = β mis T Le/pdf, the weight of ∂f(d)/∂π in
    its adjoint (0 without a contribution), the sample q itself (q.emitter -1 without one; q.delta: a Dirac
    emitter's) and wf = β mis T f, the weight of ∂(Le/pdf)/∂π (attached PRB moves the vertex under them)."""
    res_d = vec3(0.0)
    res_w = spec(0.0)
    res_wf = spec(0.0)
    res_q = DirectionSample(emitter=-1)
    u_em = sampler.next_2d()
    if v.medium_event == 1 or v.flags & 1:   # SMOOTH: the scattering function has a non-Dirac lobe
        ds = emitters.sample_emitter(st, em, v.p, u_em, s.lam)
        if ds.emitter >= 0 and max_component(ds.weight) > 0.0:
            f, pdf_dir = vertex.eval_pdf(st, bsdf, v, ds.d)
            if max_component(f) > 0.0:
                so = vertex.spawn(st, v, ds.d)
                dist = ds.dist
                if dist < BIG:
                    dist = (ds.p - so).norm() * (1.0 - 1e-4)
                saved = sampler.copy()   # for the transmittance replay
                T = vis.transmittance(st, bsdf, PRIMAL, v, s, so, ds.d, dist, sampler, spec(0.0), spec(0.0))
                if max_component(T) > 0.0:
                    mis = 1.0
                    if ds.delta == 0:
                        mis = mis_power(ds.pdf, pdf_dir)
                    s0 = spec(1.0)              # spectral_polarized: the S0 factor of the contribution
                    if ti.static(mode == FORWARD):
                        _nee_tangent(st, bsdf, em, s, v, ds, f, T, mis)
                    elif ti.static(variants.polarized()):
                        col = mueller.through_column0(s.P, vertex.mueller(st, bsdf, v, ds.d, 0, True))
                        deliver(mode, s, s.beta * mis * f * T * ds.weight, col)
                        s0 = s0_weight(col)
                    else:
                        accumulate(mode, s, s.beta * mis * f * T * ds.weight)
                    res_d = ds.d
                    res_w = s.beta * mis * T * ds.weight
                    res_wf = s.beta * mis * T * f
                    res_q = ds
                    if ti.static(adjoint_mode(mode)):
                        if adjoint_on(mode, s, dL):
                            li = ds.weight                 # Li / pdf with Li = Le of the sampled emitter
                            if ti.static(biased):
                                li = spec(1.0 / ds.pdf)    # RB biased I: Li := 1
                            if ti.static(mode == RB and biased):
                                vertex.adjoint(st, bsdf, v, ds.d, dL * s.beta * mis * T * li * s0)
                            else:   # run with the sampled direction's by bsdf_adjoints (scatter; unbiased RB's walk)
                                s.adj_on, s.adj_d, s.adj_w = 1, ds.d, dL * s.beta * mis * T * li * s0
                            emitters.eval_adjoint(st, em, ds, dL * s.beta * mis * f * T / ds.pdf * s0, s.lam)
                            vis.transmittance(st, bsdf, REPLAY, v, s, so, ds.d, dist, saved, T,
                                              dL * s.beta * mis * f * ds.weight * s0)
    return res_d, res_w, res_q, res_wf


@ti.func
def _nee_tangent(st: ti.template(), bsdf: ti.template(), em: ti.template(), s: ti.template(), v, ds, f, T, mis):
    """FORWARD mode's NEE term c = β mis f T Le/pdf (through P N) and its tangent (T is constant: surfaces), but for
    the part β mis T Le/pdf <∂f/∂π, v>, which waits in s (adj_*, with the term's Stokes column) for the vertex's
    ``forward_bsdf_tangents``: the BSDF's adjoint code is inlined once per kernel."""
    c = s.beta * mis * f * T * ds.weight
    dw = spec(0.0)
    for k in range(ti.static(variants.lanes())):                  # runtime: the emitter's adjoint code inlined once
        e = _lane(k)
        pool.tangent_reset(st)
        emitters.eval_adjoint(st, em, ds, e / ds.pdf, s.lam)
        dw += e * pool.tangent_value(st)
    dc = mis * T * (s.dbeta * f * ds.weight + s.beta * f * dw)
    s.adj_on, s.adj_d, s.adj_w = 1, ds.d, s.beta * mis * T * ds.weight
    if ti.static(variants.polarized()):
        n, dn = vertex.mueller_tangent(st, bsdf, v, ds.d, 0, True)
        col = mueller.through_column0(s.P, n)
        deliver(FORWARD, s, c, col)
        dcol = col * 0.0                                # dP and dN are 0 without models of MUELLER_KEYS
        if ti.static(vertex.has_mueller_tangent(bsdf, False)):
            dcol = mueller.through_column0(s.dP, n)
            if ti.static(vertex.has_mueller_tangent(bsdf, True)):
                dcol += mueller.through_column0(s.P, dn)
        deliver_tangent(s, c, dc, col, dcol)
        s.adj_col = col
    else:
        accumulate(FORWARD, s, c)
        deliver_tangent(s, c, dc, c, c)


@ti.func
def forward_bsdf_tangents(st: ti.template(), bsdf: ti.template(), s: ti.template(), v, bs):
    """FORWARD mode at vertex v: the NEE term's pending <∂f/∂π, v> (delivered through its Stokes column) and, for a
    sampled smooth lobe bs, the tangent dw = <∂f/∂π, v> / pdf of its weight (returned), through one BSDF adjoint
    call in runtime loops (per term, per lane) — as ``bsdf_adjoints`` in reverse mode."""
    dw = spec(0.0)
    smooth = bs.valid != 0 and bs.delta == 0 and max_component(bs.weight) > 0.0
    for j in range(2):
        on, d, scale = s.adj_on, s.adj_d, 1.0
        if j == 1:
            on, d, scale = ti.select(smooth, 1, 0), bs.wo, safe_div(1.0, bs.pdf)
        if on != 0:
            dv = spec(0.0)
            for k in range(ti.static(variants.lanes())):
                e = _lane(k)
                pool.tangent_reset(st)
                vertex.adjoint(st, bsdf, v, d, e * scale)
                dv += e * pool.tangent_value(st)
            if j == 0:
                deliver_tangent(s, spec(0.0), s.adj_w * dv, s.adj_col, s.adj_col * 0.0)
            else:
                dw = dv
    s.adj_on = 0
    return dw


@ti.func
def bsdf_adjoints(st: ti.template(), bsdf: ti.template(), s: ti.template(), v, on, d, w):
    """The BSDF adjoints of vertex v: the NEE term's (pending in s since ``nee``) and, if on, ∂<w, f(d)>/∂π,
    through one call in a runtime loop: each model's adjoint code is inlined once, not at both places (a PRB
    kernel of a rough conductor and a rough plastic compiled in 27 s instead of 44 s). The pool's fixed-point
    sums make the order of the terms immaterial."""
    for j in range(2):
        oj, dj, wj = s.adj_on, s.adj_d, s.adj_w
        if j == 1:
            oj, dj, wj = on, d, w
        if oj != 0:
            vertex.adjoint(st, bsdf, v, dj, wj)
    s.adj_on = 0


@ti.func
def scatter(st: ti.template(), bsdf: ti.template(), mode: ti.template(), s: ti.template(), v, sampler: ti.template(),
            dL):
    """Sample the next direction at v and move the state along it (deactivates the path when
    sampling fails). Returns the sample (wo in world space)."""
    bs = vertex.sample(st, bsdf, v, sampler)
    dw_smooth = spec(0.0)           # FORWARD mode: the tangent of a smooth lobe's weight
    if ti.static(mode == FORWARD):
        dw_smooth = forward_bsdf_tangents(st, bsdf, s, v, bs)
    if ti.static(mode == REPLAY or mode == PRB):
        # replaying a smooth lobe: L_ind · f / detach(f) (cancels the detached scattering value inside L), with NEE's
        sampled = 0
        w_sampled = spec(0.0)
        if bs.valid != 0 and max_component(bs.weight) > 0.0 and replaying(mode, s) and bs.delta == 0:
            sampled = 1
            w_sampled = dL * s.L * safe_div(spec(1.0), bs.weight * bs.pdf)
        bsdf_adjoints(st, bsdf, s, v, sampled, bs.wo, w_sampled)
    if bs.valid == 0 or max_component(bs.weight) <= 0.0:
        s.active = 0
    else:
        if ti.static(mode == REPLAY or mode == PRB):
            if replaying(mode, s) and bs.delta != 0:          # (a smooth lobe's term: bsdf_adjoints above)
                if bs.null == 1:
                    # a pass-through lobe (mask): L_ind · ∂ ln P_null/∂π (its value is its probability)
                    vertex.null_adjoint(st, bsdf, v, (dL * s.L).sum())
                elif ti.static(bsdf.DIRAC_VALUE):
                    # a Dirac lobe of value P w depending on π (user models): L_ind · ∂ ln(P w)/∂π
                    vertex.dirac_value_adjoint(st, bsdf, v, bs.wo, dL * s.L * safe_div(spec(1.0), bs.weight * bs.pdf))
        if ti.static(mode == FORWARD):
            # dβ' = dβ w + β dw: smooth lobes w = f / detach(pdf); a pass-through w ∝ P_null / detach(P_null)
            dw = spec(0.0)
            if bs.delta == 0:
                dw = dw_smooth
            elif bs.null == 1:
                pool.tangent_reset(st)
                vertex.null_adjoint(st, bsdf, v, 1.0)
                dw = bs.weight * pool.tangent_value(st)
            elif ti.static(bsdf.DIRAC_VALUE):
                for k in range(ti.static(variants.lanes())):    # dw = d(P w) / detach(P)
                    e = _lane(k)
                    pool.tangent_reset(st)
                    vertex.dirac_value_adjoint(st, bsdf, v, bs.wo, e * safe_div(1.0, bs.pdf))
                    dw += e * pool.tangent_value(st)
            s.dbeta = s.dbeta * bs.weight + s.beta * dw
            if ti.static(variants.polarized()):
                m, dm = vertex.mueller_tangent(st, bsdf, v, bs.wo, bs.delta, False)
                if ti.static(vertex.has_mueller_tangent(bsdf, False)):     # otherwise dP stays 0
                    s.dP = mueller.add_lanes(mueller.mul_lanes(s.dP, m), mueller.mul_lanes(s.P, dm))
                s.P = mueller.mul_lanes(s.P, m)
        elif ti.static(variants.polarized()):
            s.P = mueller.mul_lanes(s.P, vertex.mueller(st, bsdf, v, bs.wo, bs.delta, False))
        s.beta *= bs.weight
        if bs.disperse == 1:                 # a dispersive event ended the secondary lanes (bsdfs/dielectric.py)
            s.lam = variants.terminate_secondary(s.lam)
        s.eta *= bs.eta
        s.prev_p = v.p
        s.prev_pdf = bs.pdf
        s.prev_delta = bs.delta
        s.o = vertex.spawn(st, v, bs.wo)
        s.d = bs.wo
    return bs


@ti.func
def russian_roulette(s: ti.template(), sampler: ti.template(), rr_depth, rr_max):
    """Russian roulette after a vertex (Mitsuba 3): returns the survival weight 1/q applied to β."""
    beta_max = max_component(throughput(s))
    rr_prob = ti.min(beta_max * s.eta * s.eta, rr_max)
    u_rr = sampler.next_1d()
    scale = 1.0
    if beta_max <= 0.0:
        s.active = 0
    elif s.depth >= rr_depth:
        s.beta /= rr_prob
        s.dbeta /= rr_prob               # FORWARD mode's tangent (0 otherwise)
        scale = 1.0 / rr_prob
        if u_rr >= rr_prob:
            s.active = 0
    s.depth += 1
    return scale


SURFACE_VISIBILITY = SurfaceVisibility
