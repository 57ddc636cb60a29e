"""Opacity mask (Mitsuba 3 ``mask``): a nested BSDF seen with probability ``opacity``, otherwise the
surface is absent (a null interaction: the path passes unchanged).

    eval = o f_nested,   pdf = o pdf_nested,   o = opacity (scalar texture in [0, 1])
Sampling (as Mitsuba): with probability 1 - o a pass-through sample wo = -wi, weight 1,
pdf 1 - o, delta, eta 1; otherwise the nested BSDF is sampled with u1 / o, keeping its weight,
its pdf multiplied by o. Both sides pass (flag BOTH_SIDES); the nested BSDF sees wi as it is.
Integrators: in ``path`` a pass-through counts as a bounce and emitter-sampling shadow rays are blocked by a
masked surface, as in Mitsuba's ``path``; the pass-through is Mitsuba's null component (flag PASS): volume
integrators do not count it, and their shadow rays cross the surface weighted by its null transmission
1 − o (1 − n), n the nested BSDF's (as Mitsuba's ``volpath``).
Differentiable: the nested BSDF's parameters, and the opacity through both lobes: the nested one
(∂<δ, eval>/∂o = <δ, f_nested>, i.e. L_nested / o in PRB) and the pass-through (``null_adjoint_at``:
∂ ln(1 - o)/∂o = -1/(1 - o) times the radiance that came through, -L_through / (1 - o)), so the
opacity gradient is unbiased. Difference to Mitsuba 3: its ``prb`` differentiates BSDF values only,
so its opacity gradient lacks the pass-through term (it is biased by -L_through/(1 - o): the light
seen through the holes); RB in tirender lacks it too (it has no Dirac-lobe adjoint), and so does a
mask nested inside a blend (the blend's sampled child is not known afterwards); normal and bump maps
forward it to their nested BSDF.
Image difference to Mitsuba's ``path`` (not its ``prb``): Mitsuba's ``path`` returns 0 for a camera
path whose every interaction was a pass-through and that ends in the void (``valid_ray``), dropping
the emitter samples gathered on the masked surface on the way; tirender keeps them, as Mitsuba's
``prb`` does (parity scene, opacity 0.5 in front of an empty background: card region +9 %, image
+1.8 % relative to ``path``; equal to ``prb``).
"""
import taichi as ti

from ..core import mueller as mu
from ..schema import Child, Texture
from ..variants import spec
from .base import (BOTH_SIDES, DELTA, PASS, TRANSMISSION, BsdfSample, child, composite, slot_float_adjoint,
                   slot_unit)

_O = 0  # texture slot: opacity


@composite
class MaskBsdf:
    NAME = "mask"
    KEYS = (Texture("opacity", 1, default=0.5, lo=0.0, hi=1.0, doc="probability o that the surface is there"),
            Child("bsdf", doc="the BSDF seen with probability o"))
    CHILDREN = ("bsdf",)
    FLAGS = 0

    @staticmethod
    def combine_flags(child_flags):
        return child_flags[0] | DELTA | TRANSMISSION | BOTH_SIDES | PASS

    @staticmethod
    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        o = slot_unit(st, ctx, _O)
        f, p = inner.eval_pdf(st, child(st, ctx, 0), wi, wo)
        return o * f, o * p

    @staticmethod
    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        o = slot_unit(st, ctx, _O)
        bs = BsdfSample(wo=-wi, weight=spec(1.0), pdf=1.0 - o, eta=1.0, delta=1, valid=1, null=1, passthrough=1)
        if u1 < o:
            bs = inner.sample(st, child(st, ctx, 0), wi, ti.min(u1 / o, 0.99999994), u2)
            bs.pdf *= o
        return bs

    @staticmethod
    @ti.func
    def mueller_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
        """The pass-through (wo = −wi, a Dirac sample) keeps the light's polarization; the material's lobes have
        the nested BSDF's Mueller matrix."""
        res = mu.identity_lanes()
        if delta == 0 or wi.dot(wo) > -0.9999999:
            res = inner.mueller(st, child(st, ctx, 0), wi, wo, delta, False)
        return res

    @staticmethod
    @ti.func
    def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        o = slot_unit(st, ctx, _O)
        c = child(st, ctx, 0)
        slot_float_adjoint(st, ctx, _O, d_out.dot(inner.eval(st, c, wi, wo)))
        inner.adjoint(st, c, wi, wo, d_out * o)

    @staticmethod
    @ti.func
    def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        return inner.grad_dirs(st, child(st, ctx, 0), wi, wo, d_out * slot_unit(st, ctx, _O))

    @staticmethod
    @ti.func
    def null_adjoint_at(st: ti.template(), ctx, d_log, inner: ti.template()):
        o = slot_unit(st, ctx, _O)
        if o < 1.0:
            slot_float_adjoint(st, ctx, _O, -d_log / (1.0 - o))

    @staticmethod
    @ti.func
    def null_transmission_at(st: ti.template(), ctx, wi, inner: ti.template()):
        """1 − o (1 − n): the holes, and what the nested BSDF lets through (Mitsuba's eval_null_transmission)."""
        return 1.0 - slot_unit(st, ctx, _O) * (1.0 - inner.null_transmission(st, child(st, ctx, 0), wi))

    @staticmethod
    @ti.func
    def null_transmission_adjoint_at(st: ti.template(), ctx, wi, d, inner: ti.template()):
        c = child(st, ctx, 0)
        n = inner.null_transmission(st, c, wi)
        slot_float_adjoint(st, ctx, _O, -(d * (1.0 - n)).sum())
        inner.null_transmission_adjoint(st, c, wi, d * slot_unit(st, ctx, _O))
