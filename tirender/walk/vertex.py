"""A real scattering vertex — on a surface (its BSDF) or in a medium (its phase function) — and the
three things a walk does with it: evaluate the scattering function towards a direction (value and
sampling pdf), sample a direction, and back-propagate into its parameters.

Surface vertices use the shading frame (s, t, n) of the hit; the BSDF sees local directions
(``wi`` towards the previous vertex). Medium vertices keep the world propagation direction d_in;
phase functions are sampled exactly (weight 1). ``bsdf`` is the scene's BSDF dispatcher
(tirender.bsdfs.registry.dispatch).
"""
import taichi as ti

from .. import variants
from ..bsdfs.base import SMOOTH, BsdfCtx, BsdfSample, surface_ctx
from ..core import mueller as mu
from ..core.interaction import spawn_origin
from ..core.math import to_local, to_world, vec3
from ..media.phase import phase_eval, phase_eval_adjoint, phase_sample
from ..variants import spec


# Vertex — medium_event: 1 in a medium, 0 on a surface; p: position; ng: geometric normal (surface);
# s, t, n: shading frame; wi: local incident direction (surface) or the world propagation
# direction d_in (medium); ctx: the BSDF, uv, dp/du, dp/dv, ng (bsdfs.base.BsdfCtx); flags: the BSDF's flags; shape; medium.
Vertex = variants.struct(medium_event=ti.i32, p=vec3, ng=vec3, s=vec3, t=vec3, n=vec3, wi=vec3, ctx=BsdfCtx,
                         flags=ti.i32, shape=ti.i32, medium=ti.i32)


def with_media(bsdf):
    """The scattering functions of a kernel whose walks also scatter in media (volume integrators): the BSDF
    dispatcher bsdf (bsdfs/registry.dispatch) with the phase functions of medium vertices. Every other kernel takes
    the plain dispatcher, and its vertex functions compile without the phase functions' branch (surface walks
    make no medium vertex). Cached: one class per dispatcher, so kernels compile once against it."""
    if bsdf not in _WITH_MEDIA:
        _WITH_MEDIA[bsdf] = type(bsdf.__name__ + "WithMedia", (bsdf,), {"MEDIA": True})
    return _WITH_MEDIA[bsdf]


_WITH_MEDIA = {}


def in_media(bsdf):
    """Compile-time: whether bsdf is a with_media dispatcher (its vertices may be medium vertices)."""
    return getattr(bsdf, "MEDIA", False)


@ti.func
def surface_vertex(st: ti.template(), si, ray_d, lam):
    """The vertex of surface interaction si reached along ray_d by a path of wavelengths lam."""
    b = st.shape_bsdf[si.shape]
    return Vertex(medium_event=0, p=si.p, ng=si.ng, s=si.ss, t=si.ts, n=si.n,
                  wi=to_local(si.ss, si.ts, si.n, -ray_d), ctx=surface_ctx(b, si, lam), flags=st.bsdf_flags[b],
                  shape=si.shape, medium=-1)


@ti.func
def medium_vertex(p, d_in, medium):
    """A scattering event in `medium` at p of a ray travelling along d_in."""
    return Vertex(medium_event=1, p=p, ng=vec3(0.0), s=vec3(0.0), t=vec3(0.0), n=vec3(0.0), wi=d_in,
                  ctx=BsdfCtx(b=-1), flags=SMOOTH, shape=-1, medium=medium)


@ti.func
def spawn(st: ti.template(), v, d):
    """Origin of a ray leaving v along d (offset off surfaces to the side of d)."""
    o = v.p
    if v.medium_event == 0:
        o = spawn_origin(st, v, d)
    return o


@ti.func
def eval_pdf(st: ti.template(), bsdf: ti.template(), v, d):
    """(f, pdf) towards world direction d: BSDF · |cos θo| and its sampling density, or the phase
    function (= its density) in every lane."""
    f = spec(0.0)
    pdf = 0.0
    surface = 1
    if ti.static(in_media(bsdf)):
        if v.medium_event == 1:
            ph = phase_eval(st, v.medium, v.wi, d)
            f = spec(ph)
            pdf = ph
            surface = 0
    if surface == 1:
        f, pdf = bsdf.eval_pdf(st, v.ctx, v.wi, to_local(v.s, v.t, v.n, d))
    return f, pdf


@ti.func
def sample(st: ti.template(), bsdf: ti.template(), v, sampler: ti.template()):
    """A scattered direction: BsdfSample with wo in *world* space (weight 1 for phase functions)."""
    bs = BsdfSample(eta=1.0, delta=0, valid=0)
    surface = 1
    if ti.static(in_media(bsdf)):
        if v.medium_event == 1:
            wo, pdf = phase_sample(st, v.medium, v.wi, sampler.next_2d())
            bs = BsdfSample(wo=wo, weight=spec(1.0), pdf=pdf, eta=1.0, delta=0, valid=1)
            surface = 0
    if surface == 1:
        u1 = sampler.next_1d()
        u2 = sampler.next_2d()
        bs = bsdf.sample(st, v.ctx, v.wi, u1, u2)
        bs.wo = to_world(v.s, v.t, v.n, bs.wo)
    return bs


@ti.func
def null_adjoint(st: ti.template(), bsdf: ti.template(), v, d_log):
    """After a pass-through sample at a surface vertex: scatter d_log · ∂ ln P_null/∂π (the BSDF's
    null-lobe probability, e.g. a mask's 1 - opacity)."""
    if v.medium_event == 0:
        bsdf.null_adjoint(st, v.ctx, d_log)


@ti.func
def dirac_value_adjoint(st: ti.template(), bsdf: ti.template(), v, d, weight):
    """After a Dirac sample towards world direction d at a surface vertex: scatter ∂<weight, P w>/∂π (the
    lobe's value, models with ``dirac_value_adjoint``: bsdfs/base.py)."""
    if v.medium_event == 0:
        bsdf.dirac_value_adjoint(st, v.ctx, v.wi, to_local(v.s, v.t, v.n, d), weight)


@ti.func
def adjoint(st: ti.template(), bsdf: ti.template(), v, d, weight):
    """Scatter ∂<weight, f(d)>/∂π into the gradient pool (BSDF parameters, normal maps, phase g)."""
    surface = 1
    if ti.static(in_media(bsdf)):
        if v.medium_event == 1:
            phase_eval_adjoint(st, v.medium, v.wi, d, weight.sum())
            surface = 0
    if surface == 1:
        bsdf.adjoint(st, v.ctx, v.wi, to_local(v.s, v.t, v.n, d), weight)


@ti.func
def mueller(st: ti.template(), bsdf: ti.template(), v, d, delta, smooth: ti.template()):
    """The vertex's Mueller matrix per lane (core/mueller.MuellerLanes) for light arriving along −d and leaving
    towards the previous vertex, in the implicit Stokes frames of the world directions, normalised to
    [0, 0] = 1 (the unpolarized value is the walk's f or weight); delta: the lobe was a Dirac one; smooth
    (compile-time): d is an emitter sample (NEE), so only models with smooth lobes matter. Phase
    functions: identity (their value is a scalar, as Mitsuba 3's unpolarized phase functions: the Stokes
    vector passes unchanged)."""
    res = mu.identity_lanes()
    if v.medium_event == 0:
        res = mu.uniform_lanes(mu.depolarizer(1.0))   # a depolarizer stays one in every frame (bsdf.polarizing)
        if bsdf.polarizing(st, v.ctx, smooth):
            wo = to_local(v.s, v.t, v.n, d)
            res = mu.frame_change_lanes(mu.normalized_lanes(bsdf.mueller(st, v.ctx, v.wi, wo, delta, smooth)),
                                        v.s, v.t, v.n, v.wi, wo)
    return res


@ti.func
def mueller_tangent(st: ti.template(), bsdf: ti.template(), v, d, delta, smooth: ti.template()):
    """(M, dM): ``mueller`` and its tangent along forward mode's direction (the parameters of models with
    MUELLER_KEYS, bsdfs/base.py), both normalised and in the world's implicit frames (frame_change_lanes is linear).
    Without such models (``has_mueller_tangent``, compile-time) dM is 0 and no tangent code is compiled."""
    res = mu.identity_lanes()
    dres = mu.zero_lanes()
    if ti.static(has_mueller_tangent(bsdf, smooth)):
        if v.medium_event == 0:
            wo = to_local(v.s, v.t, v.n, d)
            m, dm = mu.normalized_tangent_lanes(bsdf.mueller(st, v.ctx, v.wi, wo, delta, smooth),
                                           bsdf.mueller_tangent(st, v.ctx, v.wi, wo, delta, smooth))
            res, dres = mu.frame_change_lanes_pair(m, dm, v.s, v.t, v.n, v.wi, wo)
    else:
        res = mueller(st, bsdf, v, d, delta, smooth)
    return res, dres


def has_mueller_tangent(bsdf, smooth):
    """Compile-time: whether mueller_tangent can be non-zero for the dispatcher's models (smooth: NEE's
    directions only); the walk skips the tangent's algebra where it cannot."""
    return bsdf.SMOOTH_MUELLER_TANGENT if smooth else bsdf.MUELLER_TANGENT
