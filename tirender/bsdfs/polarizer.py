"""Linear polarizer and linear retarder (Mitsuba 3 ``polarizer`` and ``retarder``): thin optical elements
the path crosses straight through (wo = −wi, pdf 1, a Dirac lobe), two-sided.

    polarizer  transmits the field component along its axis, rotated by ``theta`` (degrees) about the
               surface normal: Mueller matrix T · linear_polarizer, its effective axis projected
               perpendicular to the direction of travel (Korger et al. 2013, as Mitsuba 3); unpolarized
               light keeps half its power, so the rgb, mono and spectral variants transmit 0.5 T.
               ``polarizing: false`` makes it a neutral 0.5 T absorber (a reference for comparisons).
    retarder   delays the field component along its fast axis (``theta``) by ``delta`` degrees (90: a
               quarter-wave plate, 180: a half-wave plate), the delay scaled by |cos θi| (Mitsuba 3);
               transmits T in every variant.

Their Mueller matrices (spectral_polarized, core/mueller.py) are those of Mitsuba 3's plugins in the implicit
frames of the direction of travel. ``theta`` and ``delta`` are constants (not differentiable: detached PRB
does not differentiate Dirac lobes); T (``transmittance``) is an RGB texture.
"""
import math

import taichi as ti

from ..core import mueller as mu
from ..core.math import vec3
from ..schema import Bool, Number, Texture
from .base import BOTH_SIDES, DELTA, TRANSMISSION, BsdfSample, const, dirac, invalid_sample, slot_rgb

_TRANS = 0                    # texture slot: transmittance
THETA, DELTA_PHASE, POLARIZING = 0, 1, 2   # constants: angles in radians, polarizing switch


@ti.func
def _pass(wi, weight):
    s = invalid_sample()
    if wi[2] != 0.0:
        s = BsdfSample(wo=-wi, weight=weight, pdf=1.0, eta=1.0, delta=1, valid=1)
    return s


@dirac
class Polarizer:
    NAME = "polarizer"
    KEYS = (Texture("transmittance", 3, default=1.0, lo=0.0, hi=1.0,
                    doc="transmittance T along the axis (unpolarized light keeps 0.5 T)"),
            Number("theta", default=0.0, lo=-3600.0, hi=3600.0,
                   doc="rotation of the transmission axis about the normal, degrees"),
            Bool("polarizing", default=True, doc="false: a neutral 0.5 T absorber"))
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    Params = ti.types.struct(transmittance=vec3, theta=float, polarizing=ti.i32)
    N_CONST = 3

    @staticmethod
    def constants(values, file, key):
        return [math.radians(values["theta"]), 0.0, 1.0 if values["polarizing"] else 0.0]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Polarizer.Params(transmittance=slot_rgb(st, ctx, _TRANS), theta=const(st, ctx, THETA),
                                polarizing=ti.cast(const(st, ctx, POLARIZING), ti.i32))

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        return _pass(wi, 0.5 * p.transmittance)

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        m = mu.identity()
        if p.polarizing != 0:
            fwd = wi                                      # the direction light travels
            a_axis = vec3(ti.sin(p.theta), ti.cos(p.theta), 0.0)
            eff_a = a_axis - a_axis.dot(fwd) * fwd
            if eff_a.norm_sqr() > 0.0:
                eff_a = eff_a.normalized()
            eff_t = fwd.cross(eff_a)
            m = mu.rotate_mueller_basis_collinear(mu.linear_polarizer(1.0), fwd, eff_t, mu.stokes_basis(fwd))
        return mu.uniform3(m)


@dirac
class Retarder:
    NAME = "retarder"
    KEYS = (Texture("transmittance", 3, default=1.0, lo=0.0, hi=1.0, doc="transmittance T"),
            Number("theta", default=0.0, lo=-3600.0, hi=3600.0,
                   doc="rotation of the fast axis about the normal, degrees"),
            Number("delta", default=90.0, lo=-3600.0, hi=3600.0,
                   doc="phase delay at normal incidence, degrees (90: quarter-wave, 180: half-wave plate)"))
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    Params = ti.types.struct(transmittance=vec3, theta=float, delta=float)
    N_CONST = 3

    @staticmethod
    def constants(values, file, key):
        return [math.radians(values["theta"]), math.radians(values["delta"]), 0.0]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Retarder.Params(transmittance=slot_rgb(st, ctx, _TRANS), theta=const(st, ctx, THETA),
                               delta=const(st, ctx, DELTA_PHASE))

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        return _pass(wi, p.transmittance)

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        cos_t = wi[2]
        m = mu.linear_retarder(p.delta * ti.abs(cos_t))
        m = mu.rotated_element((1.0 if cos_t >= 0.0 else -1.0) * p.theta, m)
        m = mu.rotate_mueller_basis_collinear(m, wi, vec3(1.0, 0.0, 0.0), mu.stokes_basis(wi))
        return mu.uniform3(m)
