"""Two-sided BSDF (Mitsuba 3 ``twosided``): a one-sided (non-transmissive) BSDF on both sides of
the surface, or a different BSDF on the back (``bsdf_back``).

A direction is seen from the back when cos θi < 0; the BSDF of that side is evaluated in the
mirrored frame (the z components of wi and wo negated). Sugar: ``twosided: true`` on any BSDF.
Differentiable: through the nested BSDFs.
"""
import taichi as ti

from ..core import mueller as mu
from ..core.math import vec3
from ..schema import Child
from .base import BOTH_SIDES, TRANSMISSION, composite, with_row


@ti.func
def _side(st: ti.template(), ctx, wi):
    """(context of the BSDF of wi's side, z sign of that side's frame)."""
    s = 1.0
    k = 0
    if wi[2] < 0.0:
        s = -1.0
        k = 1
    return with_row(ctx, st.bsdf_child[ctx.b, k]), s


@ti.func
def _flip(v, s):
    return vec3(v[0], v[1], v[2] * s)


@composite
class TwoSided:
    NAME = "twosided"
    KEYS = (Child("bsdf", aliases=("brdf_0",), doc="BSDF of the front side (and of the back if no `bsdf_back`)"),
            Child("bsdf_back", default=None, aliases=("brdf_1",), doc="BSDF of the back side"))
    CHILDREN = ("bsdf", "bsdf_back")
    FLAGS = BOTH_SIDES
    SUGAR = "twosided"   # `twosided: true` on any BSDF wraps it

    @staticmethod
    def sugar(value, file, key):
        """``twosided: true`` -> the wrapper's own keys (none); false -> no wrapper."""
        from ..schema import boolean
        return {} if boolean(value, file, key) else None

    @staticmethod
    def combine_flags(child_flags):
        return child_flags[0] | child_flags[-1] | BOTH_SIDES

    @staticmethod
    def check_child(flags, file, key):
        from ..errors import ConfigError
        if flags & TRANSMISSION:
            raise ConfigError("twosided applies to BSDFs without transmission", file, key)

    @staticmethod
    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        c, s = _side(st, ctx, wi)
        return inner.eval_pdf(st, c, _flip(wi, s), _flip(wo, s))

    @staticmethod
    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        c, s = _side(st, ctx, wi)
        bs = inner.sample(st, c, _flip(wi, s), u1, u2)
        bs.wo = _flip(bs.wo, s)
        return bs

    @staticmethod
    @ti.func
    def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        c, s = _side(st, ctx, wi)
        inner.adjoint(st, c, _flip(wi, s), _flip(wo, s), d_out)

    @staticmethod
    @ti.func
    def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        c, s = _side(st, ctx, wi)
        gi, go = inner.grad_dirs(st, c, _flip(wi, s), _flip(wo, s), d_out)
        return _flip(gi, s), _flip(go, s)

    @staticmethod
    @ti.func
    def mueller_at(st: ti.template(), ctx, wi, wo, delta, inner: ti.template()):
        """The side's Mueller matrix; on the back, computed in the mirrored frame and mirrored back."""
        c, s = _side(st, ctx, wi)
        m = inner.mueller(st, c, _flip(wi, s), _flip(wo, s), delta, False)
        if s < 0.0:
            m = mu.mirror_z_lanes(m, wi, wo)
        return m

    @staticmethod
    @ti.func
    def null_transmission_at(st: ti.template(), ctx, wi, inner: ti.template()):
        c, s = _side(st, ctx, wi)
        return inner.null_transmission(st, c, _flip(wi, s))

    @staticmethod
    @ti.func
    def null_transmission_adjoint_at(st: ti.template(), ctx, wi, d, inner: ti.template()):
        c, s = _side(st, ctx, wi)
        inner.null_transmission_adjoint(st, c, _flip(wi, s), d)
