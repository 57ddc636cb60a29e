"""The state of one path, declared up front (Mitsuba 3's loop state), and the walk modes.

Modes (compile-time, ``ti.template()``):
    PRIMAL  L accumulates the radiance of the path.
    REPLAY  detached PRB (Vicini et al. 2021 §4.1): the same path is walked again with the same
            random numbers; L starts at the primal radiance and each emission / NEE term is
            subtracted when met, so L is the radiance still to come; every differentiable weight
            back-propagates δL into the gradient pool.
    RB      radiative backpropagation (Nimier-David et al. 2020): L accumulates as in PRIMAL and
            adjoint radiance δL is scattered along the path (where δL is non-zero).
    PRB     PRIMAL or REPLAY as the runtime flag ``s.replay`` says: the PRB kernel walks each path
            twice through one inlined walk (the primal pass, then its replay), which keeps its
            megakernel about half the size of a PRIMAL walk followed by a REPLAY walk.
    FORWARD forward mode by tangent propagation (spectral_polarized, where no replay can recover the
            Stokes vector still to come): one walk carries beside β and P their tangents dβ and dP along
            the direction v of core/pool.Tangent, and accumulates the tangent dS of the path's Stokes
            vector. dβ takes each vertex's <∂f/∂π, v> per lane from the models' adjoint code run into the
            tangent sink; dP takes ∂M/∂π v of models with MUELLER_KEYS (polarizer, retarder). Detached
            as PRB: pdfs, MIS weights, RR probabilities and Dirac lobes' weights are constants.
Steps compile their adjoint code only for modes that have one (``ti.static(adjoint_mode(mode))``) and
run it where ``adjoint_on`` says so.
"""
import taichi as ti

from .. import variants
from ..core import mueller
from ..core.math import BIG, vec3
from ..variants import SPECTRUM, spec

PRIMAL, REPLAY, RB, PRB, FORWARD = 0, 1, 2, 3, 4
stokes_lanes = ti.types.matrix(3, mueller.LANES, float)     # S1–S3 (rows) per lane (columns)


def adjoint_mode(mode):
    """Whether walks in this mode back-propagate (compile-time: REPLAY, RB, PRB)."""
    return mode in (REPLAY, RB, PRB)


# PathState — L: radiance (accumulated, or still to come in REPLAY); beta: throughput β (detached);
# eta: product of relative IORs η (Russian roulette); depth: real scattering vertices so far;
# prev_p / prev_pdf / prev_delta: the previous real vertex, the sampling pdf of the direction that
# left it and whether it was a Dirac lobe (1: no MIS for the next emitter hit); o, d: the current
# ray; active; medium: the medium the ray travels in (-1: vacuum); hero / r: the hero channel and
# the renormalised per-channel pdf ratios of spectral MIS in media; tmax: the current ray's maxt (the camera
# ray's far clip, tirender/sensors; BIG once the first segment is traced); replay: 1 in the replay pass
# (mode PRB); P: per lane, the product of the (normalised) Mueller matrices of the vertices so far, in the
# implicit Stokes frames of world directions (core/mueller.py; spectral_polarized: the path's throughput is
# β_i P_i); S: Stokes S1–S3 (rows) per lane (columns) of L (spectral_polarized; L holds S0); FORWARD mode:
# dbeta, dP the tangents of β and P, dS the tangent of (S0..S3) (rows) per lane (columns); adj_on, adj_d, adj_w:
# the NEE term's BSDF adjoint (direction, weight) that the vertex's scatter step runs (replaying, and FORWARD mode's
# <∂f/∂π, v> of the NEE term, delivered through adj_col, its Stokes column: walk/steps.py).
PathState = variants.struct(L=SPECTRUM, beta=SPECTRUM, eta=float, depth=ti.i32, prev_p=vec3, prev_pdf=float,
                            prev_delta=ti.i32, o=vec3, d=vec3, tmax=float, active=ti.i32, medium=ti.i32, hero=ti.i32, r=SPECTRUM,
                            replay=ti.i32, lam=SPECTRUM, P=mueller.MuellerLanes, S=stokes_lanes, dbeta=SPECTRUM,
                            dP=mueller.MuellerLanes, dS=mueller.mat4, adj_on=ti.i32, adj_d=vec3, adj_w=SPECTRUM,
                            adj_col=mueller.mat4)


@ti.func
def camera_state(o, d, tmax, L_in, replay, lam):
    """A path of wavelengths lam (spectral variant; unused otherwise) leaving the camera at o along d, its
    first segment ending at tmax (the far clip plane; BIG: unclipped) (L_in: the primal radiance when
    replaying)."""
    return PathState(L=L_in, beta=spec(1.0), eta=1.0, depth=0, prev_p=o, prev_pdf=1.0, prev_delta=1, o=o, d=d,
                     tmax=tmax, active=1, medium=-1, hero=0, r=spec(1.0), replay=replay, lam=lam, P=mueller.identity_lanes(),
                     S=stokes_lanes(0.0), dbeta=spec(0.0), dP=mueller.zero_lanes(), dS=mueller.mat4(0.0), adj_on=0,
                     adj_d=vec3(0.0), adj_w=spec(0.0), adj_col=mueller.mat4(0.0))


@ti.func
def segment_end(s: ti.template()):
    """The maxt of the segment about to be traced (the camera ray's far clip on the first), after which
    every segment is unclipped."""
    tmax = s.tmax
    s.tmax = BIG
    return tmax


@ti.func
def replaying(mode: ti.template(), s):
    """Whether the walk is a replay here (REPLAY, or PRB's second pass)."""
    res = False
    if ti.static(mode == REPLAY):
        res = True
    elif ti.static(mode == PRB):
        res = s.replay != 0
    return res


@ti.func
def accumulate(mode: ti.template(), s: ti.template(), c):
    """L += c (PRIMAL, RB, PRB's first pass) or L -= c (replaying: the radiance still to come)."""
    if ti.static(mode == REPLAY):
        s.L -= c
    elif ti.static(mode == PRB):
        if s.replay != 0:
            s.L -= c
        else:
            s.L += c
    else:
        s.L += c


@ti.func
def s0_weight(col):
    """Row 0 of col (4×4: the Stokes vector per lane of a unit unpolarized source seen through the path's Mueller
    product, mueller.column0 / through_column0): the camera's S0 factor of a contribution in spectral_polarized,
    which ``deliver`` adds to L and reverse-mode adjoints carry (Mueller matrices held fixed); 1 elsewhere."""
    w = spec(1.0)
    if ti.static(variants.polarized()):
        w = ti.Vector([col[0, i] for i in ti.static(range(variants.lanes()))], float)
    return w


@ti.func
def deliver(mode: ti.template(), s: ti.template(), c, col):
    """Add light c (per lane) from an unpolarized source: L += c, or in spectral_polarized L += c · S0 and
    S += c · (S1, S2, S3) with col (4×4: Stokes components × lanes) the Stokes vector per lane of a unit
    unpolarized source seen through the path's Mueller product (mueller.column0 / through_column0; a dummy
    elsewhere)."""
    if ti.static(variants.polarized()):
        accumulate(mode, s, c * s0_weight(col))
        if ti.static(mode == PRIMAL or mode == FORWARD):
            for k in ti.static(range(3)):
                for i in ti.static(range(variants.lanes())):
                    s.S[k, i] += c[i] * col[k + 1, i]
    else:
        accumulate(mode, s, c)


@ti.func
def deliver_tangent(s: ti.template(), c, dc, col, dcol):
    """FORWARD mode: the tangent of deliver(c, col) given dc (per lane) and dcol (4×4, the tangent of col):
    dS += dc · col + c · dcol (spectral_polarized), else dS[0] += dc."""
    if ti.static(variants.polarized()):
        for k in ti.static(range(4)):
            for i in ti.static(range(variants.lanes())):
                s.dS[k, i] += dc[i] * col[k, i] + c[i] * dcol[k, i]
    else:
        for i in ti.static(range(variants.lanes())):
            s.dS[0, i] += dc[i]


@ti.func
def result(mode: ti.template(), s):
    """What a camera path returns: its radiance L (still to come, replaying), or in FORWARD mode the tangent
    of its radiance (S0)."""
    res = s.L
    if ti.static(mode == FORWARD):
        res = ti.Vector([s.dS[0, i] for i in ti.static(range(variants.lanes()))], float)
    return res


@ti.func
def throughput(s):
    """The path's unpolarized throughput per lane: β, times each lane's Mueller [0, 0] in spectral_polarized
    (what Russian roulette weighs)."""
    b = s.beta
    if ti.static(variants.polarized()):
        b = b * mueller.s00(s.P)
    return b


@ti.func
def adjoint_on(mode: ti.template(), s, dL):
    """Whether the walk back-propagates here: when replaying, and where δL != 0 in RB. (Callers
    compile the adjoint code only for ti.static(mode != PRIMAL).)"""
    res = replaying(mode, s)
    if ti.static(mode == RB):
        res = dL.max() != 0.0 or dL.min() != 0.0
    return res
