"""Blend of two BSDFs (Mitsuba 3 ``blendbsdf``): f = (1 - w) f_0 + w f_1 with a weight texture w.

Sampling picks child 1 with probability w (child 0 otherwise), samples it, and returns the
mixture's weight and pdf (one-sample MIS over the two children, as Mitsuba 3):
    pdf = (1 - w) pdf_0 + w pdf_1,   weight = ((1 - w) f_0 + w f_1) / pdf.
A Dirac lobe keeps its own weight (the selection probability cancels) and pdf (1 - w | w) p_delta.
Differentiable: weight (scalar texture, gradient <δ, f_1 - f_0>) and both children's parameters.
"""
import taichi as ti

from ..core import mueller as mu
from ..schema import Child, Texture
from ..variants import spec
from .base import DELTA, child, composite, invalid_sample, slot_float_adjoint, slot_unit

_W = 0  # texture slot: weight


@composite
class BlendBsdf:
    NAME = "blendbsdf"
    KEYS = (Texture("weight", 1, default=0.5, lo=0.0, hi=1.0, doc="blend weight w (0: bsdf_0, 1: bsdf_1)"),
            Child("bsdf_0", doc="first BSDF (weight 1 - w)"), Child("bsdf_1", doc="second BSDF (weight w)"))
    CHILDREN = ("bsdf_0", "bsdf_1")
    FLAGS = 0

    @staticmethod
    def combine_flags(child_flags):
        return child_flags[0] | child_flags[1]

    @staticmethod
    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        w = slot_unit(st, ctx, _W)
        f0, p0 = inner.eval_pdf(st, child(st, ctx, 0), wi, wo)
        f1, p1 = inner.eval_pdf(st, child(st, ctx, 1), wi, wo)
        return (1.0 - w) * f0 + w * f1, (1.0 - w) * p0 + w * p1

    @staticmethod
    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        w = slot_unit(st, ctx, _W)
        pick = 1 if u1 < w else 0
        # reuse u1 within the chosen interval
        u = u1 / w if pick == 1 else (u1 - w) / (1.0 - w)
        pw = w if pick == 1 else 1.0 - w          # probability of the chosen child
        c = child(st, ctx, pick)
        o = child(st, ctx, 1 - pick)
        bs = inner.sample(st, c, wi, ti.min(u, 0.99999994), u2)
        if bs.valid == 1:
            if bs.delta == 1:
                bs.pdf *= pw
            else:
                fo, po = inner.eval_pdf(st, o, wi, bs.wo)
                f_mix = pw * bs.weight * bs.pdf + (1.0 - pw) * fo
                p_mix = pw * bs.pdf + (1.0 - pw) * po
                if p_mix > 0.0:
                    bs.weight = f_mix / p_mix
                    bs.pdf = p_mix
                else:
                    bs = invalid_sample()
        return bs

    @staticmethod
    @ti.func
    def mueller_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
        """The mixture's Mueller matrix per lane, Σ_k w_k f_k N_k (N_k: child k's, normalised), as Mitsuba's
        blendbsdf; for a Dirac sample (f = 0) the children with a Dirac lobe, weighted by w_k."""
        w = slot_unit(st, ctx, _W)
        c0 = child(st, ctx, 0)
        c1 = child(st, ctx, 1)
        a0 = spec(1.0 - w)
        a1 = spec(w)
        if delta == 0:
            a0 *= inner.eval(st, c0, wi, wo)
            a1 *= inner.eval(st, c1, wi, wo)
        else:
            if st.bsdf_flags[c0.b] & DELTA == 0:
                a0 = spec(0.0)
            if st.bsdf_flags[c1.b] & DELTA == 0:
                a1 = spec(0.0)
        n0 = mu.normalized_lanes(inner.mueller(st, c0, wi, wo, delta, False))
        n1 = mu.normalized_lanes(inner.mueller(st, c1, wi, wo, delta, False))
        return mu.from_lanes(a0[0] * n0.m0 + a1[0] * n1.m0, a0[1] * n0.m1 + a1[1] * n1.m1,
                             a0[2] * n0.m2 + a1[2] * n1.m2, a0[3] * n0.m3 + a1[3] * n1.m3)

    @staticmethod
    @ti.func
    def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        w = slot_unit(st, ctx, _W)
        c0 = child(st, ctx, 0)
        c1 = child(st, ctx, 1)
        dw = d_out.dot(inner.eval(st, c1, wi, wo) - inner.eval(st, c0, wi, wo))
        slot_float_adjoint(st, ctx, _W, dw)
        inner.adjoint(st, c0, wi, wo, d_out * (1.0 - w))
        inner.adjoint(st, c1, wi, wo, d_out * w)

    @staticmethod
    @ti.func
    def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        w = slot_unit(st, ctx, _W)
        gi0, go0 = inner.grad_dirs(st, child(st, ctx, 0), wi, wo, d_out * (1.0 - w))
        gi1, go1 = inner.grad_dirs(st, child(st, ctx, 1), wi, wo, d_out * w)
        return gi0 + gi1, go0 + go1

    @staticmethod
    @ti.func
    def null_transmission_at(st: ti.template(), ctx, wi, inner: ti.template()):
        """(1 − w) n_0 + w n_1 (Mitsuba's eval_null_transmission)."""
        w = slot_unit(st, ctx, _W)
        return (1.0 - w) * inner.null_transmission(st, child(st, ctx, 0), wi) + \
            w * inner.null_transmission(st, child(st, ctx, 1), wi)

    @staticmethod
    @ti.func
    def null_transmission_adjoint_at(st: ti.template(), ctx, wi, d, inner: ti.template()):
        w = slot_unit(st, ctx, _W)
        c0 = child(st, ctx, 0)
        c1 = child(st, ctx, 1)
        slot_float_adjoint(st, ctx, _W, (d * (inner.null_transmission(st, c1, wi) -
                                              inner.null_transmission(st, c0, wi))).sum())
        inner.null_transmission_adjoint(st, c0, wi, d * (1.0 - w))
        inner.null_transmission_adjoint(st, c1, wi, d * w)
