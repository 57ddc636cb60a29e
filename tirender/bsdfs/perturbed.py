"""A nested BSDF seen in a perturbed shading frame — what ``normalmap`` and ``bumpmap`` share.

Given the perturbed frame (s', t', n') in the local shading frame (a model computes it from its
texture), the nested BSDF f_n is evaluated with wi' = R wi, wo' = R wo (R's rows s', t', n'); a
direction whose side differs between the two frames (cos θo cos θo' <= 0) gets 0 (Mitsuba 3); with
``shadow`` the value is multiplied by Estevez et al.'s (2019) bump terminator term
    S(n', wo) = 2 / (1 + sqrt(1 + α² tan²θo)),   α² = min(tan²θ_n' / 8, 1)
(Mitsuba's ``eval_shadow_terminator``).

    eval_pdf(st, ctx, wi, wo, inner, n, s, t, shadow) -> (f, pdf)
    sample(st, ctx, wi, u1, u2, inner, n, s, t, shadow) -> BsdfSample (wo in the unperturbed frame)
    backprop(st, ctx, wi, wo, d_out, inner, n, s, t, shadow, texels) -> (gi, go, g_s, g_n)
        adjoint of E = <d_out, f_n(R wi, R wo)> S(n', wo). texels = True: scatters into the nested
        BSDF's parameters (with d_out S) and returns g_s = ∂E/∂s', g_n = ∂E/∂n' with t' = n' × s'
        already back-propagated (the model chains them to its texels). texels = False: returns
        gi, go = ∂E/∂wi, ∂E/∂wo = Rᵀ ∂E/∂wi', Rᵀ ∂E/∂wo' + <d_out, f_n> ∂S/∂wo (the frame depends on
        wi only through piecewise-constant flips).
    fold_t(g_s, g_t, g_n, s, n) -> (g_s, g_n)   the frame's t' = n' × s' back-propagated
    shadow_factors(...) -> (S, ∂S/∂n', ∂S/∂wo, <d_out, f>)   the bump terminator term and its slopes
"""
import taichi as ti

from ..core import mueller as mu

from ..core.math import to_local, to_world, vec3
from ..variants import spec
from .base import child


@ti.func
def _tan2(v):
    return (v[0] * v[0] + v[1] * v[1]) / (v[2] * v[2])


@ti.func
def shadow_term(n, wo):
    """Estevez et al. 2019 (Mitsuba's eval_shadow_terminator): n perturbed normal, wo (unperturbed local)."""
    a2 = ti.min(0.125 * _tan2(n), 1.0)
    return 2.0 / (1.0 + ti.sqrt(1.0 + a2 * _tan2(wo)))


@ti.func
def shadow_term_grads(n, wo):
    """(∂S/∂n, ∂S/∂wo) of shadow_term."""
    tn = _tan2(n)
    tw = _tan2(wo)
    a2 = ti.min(0.125 * tn, 1.0)
    q = ti.sqrt(1.0 + a2 * tw)
    dS_dq = -2.0 / ((1.0 + q) * (1.0 + q))
    dq_da2 = tw / (2.0 * q)
    dq_dtw = a2 / (2.0 * q)
    gn = vec3(0.0)
    if 0.125 * tn < 1.0:
        gn = (dS_dq * dq_da2 * 0.125) * vec3(2.0 * n[0] / (n[2] * n[2]), 2.0 * n[1] / (n[2] * n[2]),
                                               -2.0 * (n[0] * n[0] + n[1] * n[1]) / (n[2] * n[2] * n[2]))
    gw = (dS_dq * dq_dtw) * vec3(2.0 * wo[0] / (wo[2] * wo[2]), 2.0 * wo[1] / (wo[2] * wo[2]),
                                 -2.0 * (wo[0] * wo[0] + wo[1] * wo[1]) / (wo[2] * wo[2] * wo[2]))
    return gn, gw


@ti.func
def fold_t(g_s, g_t, g_n, s, n):
    """(∂/∂s', ∂/∂n') given ∂/∂(s', t', n') of a function of the frame with t' = n' × s'."""
    return g_s + g_t.cross(n), g_n + s.cross(g_t)


@ti.func
def eval_pdf(st: ti.template(), ctx, wi, wo, inner: ti.template(), n, s, t, shadow):
    wop = to_local(s, t, n, wo)
    f = spec(0.0)
    p = 0.0
    if wo[2] * wop[2] > 0.0:
        f, p = inner.eval_pdf(st, child(st, ctx, 0), to_local(s, t, n, wi), wop)
        if shadow:
            f *= shadow_term(n, wo)
    return f, p


@ti.func
def sample(st: ti.template(), ctx, wi, u1, u2, inner: ti.template(), n, s, t, shadow):
    bs = inner.sample(st, child(st, ctx, 0), to_local(s, t, n, wi), u1, u2)
    wo = to_world(s, t, n, bs.wo)
    if bs.valid == 1 and bs.wo[2] * wo[2] > 0.0:
        bs.wo = wo
        if shadow:
            bs.weight *= shadow_term(n, wo)
    else:
        bs.valid = 0
    return bs


@ti.func
def shadow_factors(st: ti.template(), ch, inner: ti.template(), wip, wop, d_out, n, wo, shadow):
    """(S, ∂S/∂n', ∂S/∂wo, <d_out, f(wi', wo')>) of the bump terminator term S(n', wo) for the
    nested model ch; (1, 0, 0, 0) when the term is off."""
    S = 1.0
    gsn = vec3(0.0)
    gsw = vec3(0.0)
    fd = 0.0
    if shadow:
        S = shadow_term(n, wo)
        gsn, gsw = shadow_term_grads(n, wo)
        fd = d_out.dot(inner.eval(st, ch, wip, wop))
    return S, gsn, gsw, fd


def backprop_at(backprop):
    """Class decorator of a composite that perturbs the shading normal (bumpmap, normalmap): its ``adjoint_at``
    (scatter into the pool) and ``grad_dirs_at`` (return (∂/∂wi, ∂/∂wo)) are the two modes of its
    ``backprop(st, ctx, wi, wo, d_out, inner, texels)`` (texels, compile time: scatter into the texture)."""
    def decorate(cls):
        @ti.func
        def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
            backprop(st, ctx, wi, wo, d_out, inner, True)

        @ti.func
        def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
            return backprop(st, ctx, wi, wo, d_out, inner, False)

        cls.adjoint_at = staticmethod(adjoint_at)
        cls.grad_dirs_at = staticmethod(grad_dirs_at)
        return cls
    return decorate


@ti.func
def backprop(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template(), n, s, t, shadow, texels: ti.template()):
    wip = to_local(s, t, n, wi)
    wop = to_local(s, t, n, wo)
    gi = vec3(0.0)
    go = vec3(0.0)
    g_s = vec3(0.0)
    g_n = vec3(0.0)
    if wo[2] * wop[2] > 0.0:
        ch = child(st, ctx, 0)
        S, gsn, gsw, fd = shadow_factors(st, ch, inner, wip, wop, d_out, n, wo, shadow)
        gwi, gwo = inner.grad_dirs(st, ch, wip, wop, d_out * S)
        if ti.static(texels):
            inner.adjoint(st, ch, wip, wop, d_out * S)
            g_s = gwi[0] * wi + gwo[0] * wo
            g_t = gwi[1] * wi + gwo[1] * wo
            g_s, g_n = fold_t(g_s, g_t, fd * gsn + gwi[2] * wi + gwo[2] * wo, s, n)
        else:
            gi = to_world(s, t, n, gwi)
            go = to_world(s, t, n, gwo) + fd * gsw
    return gi, go, g_s, g_n


@ti.func
def mueller(st: ti.template(), ctx, wi, wo, delta, inner: ti.template(), n, s, t):
    """spectral_polarized: the nested BSDF's Mueller matrices, computed in the perturbed frame (s, t, n) and
    re-expressed in the implicit frames of the shading frame's directions."""
    wip = to_local(s, t, n, wi)
    wop = to_local(s, t, n, wo)
    m = inner.mueller(st, child(st, ctx, 0), wip, wop, delta, False)
    return mu.frame_change_lanes(mu.normalized_lanes(m), s, t, n, wip, wop)
