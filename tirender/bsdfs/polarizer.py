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
frames of the direction of travel. ``theta`` and ``delta`` are scalar textures in degrees (as Mitsuba's), so
the pool parameters ``<id>.theta`` and ``<id>.delta`` (constants, or bitmaps: a spatially varying axis). They
change the Mueller matrix only (S0 of unpolarized light stays 0.5 T / T), so their derivatives live in the
Mueller product of the path: ``mueller_tangent`` is the hand-written tangent ∂M/∂θ dθ + ∂M/∂δ dδ that
forward mode in spectral_polarized carries (walk/state.py FORWARD; f64 test against central differences in
tests/test_polarization.py). T (``transmittance``) is an RGB texture; detached derivatives ignore it, as they
ignore every Dirac lobe's weight.
"""
import math

import taichi as ti

from ..core import mueller as mu
from ..core.math import vec2, vec3
from ..schema import Bool, Texture
from ..variants import SPECTRUM, spec, struct
from .base import (BOTH_SIDES, DELTA, TRANSMISSION, BsdfSample, const, dirac, invalid_sample, slot_float,
                   slot_float_tangent, slot_rgb)

_TRANS, _THETA, _DELTA = 0, 1, 2        # texture slots: transmittance, theta (degrees), delta (degrees)
POLARIZING = 0                          # constant: the polarizing switch
RAD = math.pi / 180.0


@ti.func
def _pass(wi, weight):
    s = invalid_sample()
    if wi[2] != 0.0:
        s = BsdfSample(wo=-wi, weight=weight, pdf=1.0, eta=1.0, delta=1, valid=1)
    return s


def _angle_key(name, doc, default=0.0):
    return Texture(name, 1, default=default, lo=-3600.0, hi=3600.0, raw=True, doc=doc)


@ti.func
def _polarizer_axis(theta, fwd):
    """(eff_t, rate): the polarizer's transmission frame for light travelling along fwd (Korger et al. 2013, as
    Mitsuba 3: the axis (sin θ, cos θ, 0) projected ⟂ fwd; eff_t = fwd × that axis) and dψ/dθ, the rate at which
    that frame turns about fwd as θ turns about the normal."""
    a_axis = vec3(ti.sin(theta), ti.cos(theta), 0.0)
    da = vec3(ti.cos(theta), -ti.sin(theta), 0.0)
    proj = a_axis - a_axis.dot(fwd) * fwd
    dproj = da - da.dot(fwd) * fwd
    n = proj.norm()
    eff_a = proj
    rate = 0.0
    if n > 0.0:
        eff_a = proj / n
        rate = fwd.dot(eff_a.cross(dproj)) / n
    return fwd.cross(eff_a), rate


@dirac
class Polarizer:
    NAME = "polarizer"
    KEYS = (Texture("transmittance", 3, default=1.0, lo=0.0, hi=1.0,
                    doc="transmittance T along the axis (unpolarized light keeps 0.5 T)"),
            _angle_key("theta", "rotation of the transmission axis about the normal, degrees (differentiable: "
                                "forward mode in spectral_polarized)"),
            Bool("polarizing", default=True, doc="false: a neutral 0.5 T absorber"))
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    MUELLER_COLOURLESS = True      # mueller reads theta and the switch only (bsdfs/base.py)
    MUELLER_KEYS = ("theta",)      # parameters that change the Mueller matrix (mueller_tangent differentiates them)
    Params = struct(transmittance=SPECTRUM, theta=float, polarizing=ti.i32)
    N_CONST = 1

    @staticmethod
    def constants(values, file, key):
        return [1.0 if values["polarizing"] else 0.0]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Polarizer.Params(transmittance=slot_rgb(st, ctx, _TRANS), theta=slot_float(st, ctx, _THETA) * RAD,
                                polarizing=ti.cast(const(st, ctx, POLARIZING), ti.i32))

    @staticmethod
    @ti.func
    def fetch_tangent(st: ti.template(), ctx):
        """The tangent of the differentiable Params along forward mode's direction (theta, radians)."""
        return Polarizer.Params(transmittance=spec(0.0), theta=slot_float_tangent(st, ctx, _THETA) * RAD,
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
            eff_t, rate = _polarizer_axis(p.theta, wi)     # wi: the direction light travels
            m = mu.rotate_mueller_basis_collinear(mu.linear_polarizer(1.0), wi, eff_t, mu.stokes_basis(wi))
        return mu.uniform_lanes(m)

    @staticmethod
    @ti.func
    def mueller_tangent(p, dp, wi, wo, delta):
        """∂mueller/∂θ · dp.theta: the frame's angle φ (eff_t → the implicit basis) turns by −rate dθ."""
        dm = mu.mat4(0.0)
        if p.polarizing != 0:
            eff_t, rate = _polarizer_axis(p.theta, wi)
            cs = mu.basis_rotation(wi, eff_t, mu.stokes_basis(wi))
            dcs = mu.rotation_rate(cs, -rate * dp.theta)
            lp = mu.linear_polarizer(1.0)
            dm = mu.rotate_tangent(lp, mu.mat4(0.0), cs, cs, dcs, dcs)
        return mu.uniform_lanes(dm)


@ti.func
def _retarder_parts(p, wi):
    """(element angle θ_e = ±θ, phase δ |cos θi|, sign of the side, outer rotator cs) of the retarder's matrix."""
    cos_t = wi[2]
    side = 1.0 if cos_t >= 0.0 else -1.0
    return side * p.theta, p.delta * ti.abs(cos_t), side, mu.basis_rotation(wi, vec3(1.0, 0.0, 0.0),
                                                                              mu.stokes_basis(wi))


@dirac
class Retarder:
    NAME = "retarder"
    KEYS = (Texture("transmittance", 3, default=1.0, lo=0.0, hi=1.0, doc="transmittance T"),
            _angle_key("theta", "rotation of the fast axis about the normal, degrees (differentiable: forward "
                                "mode in spectral_polarized)"),
            _angle_key("delta", "phase delay at normal incidence, degrees (90: quarter-wave, 180: half-wave "
                                "plate; differentiable like theta)", default=90.0))
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    MUELLER_COLOURLESS = True
    MUELLER_KEYS = ("theta", "delta")
    Params = struct(transmittance=SPECTRUM, theta=float, delta=float)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Retarder.Params(transmittance=slot_rgb(st, ctx, _TRANS), theta=slot_float(st, ctx, _THETA) * RAD,
                               delta=slot_float(st, ctx, _DELTA) * RAD)

    @staticmethod
    @ti.func
    def fetch_tangent(st: ti.template(), ctx):
        return Retarder.Params(transmittance=spec(0.0), theta=slot_float_tangent(st, ctx, _THETA) * RAD,
                               delta=slot_float_tangent(st, ctx, _DELTA) * RAD)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        return _pass(wi, p.transmittance)

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        theta_e, phase, side, cs = _retarder_parts(p, wi)
        m = mu.rotated_element(theta_e, mu.linear_retarder(phase))
        return mu.uniform_lanes(mu.rotate(m, cs, cs))

    @staticmethod
    @ti.func
    def mueller_tangent(p, dp, wi, wo, delta):
        """∂mueller/∂θ dθ + ∂mueller/∂δ dδ (rotated_element(θ_e, R) = rotate(R, c, c), c = (cos 2θ_e, −sin 2θ_e))."""
        theta_e, phase, side, cs = _retarder_parts(p, wi)
        ce = vec2(ti.cos(2.0 * theta_e), -ti.sin(2.0 * theta_e))
        dce = mu.rotation_rate(ce, -side * dp.theta)
        r = mu.linear_retarder(phase)
        dr = mu.linear_retarder_tangent(phase, dp.delta * ti.abs(wi[2]))
        dm = mu.rotate_tangent(r, dr, ce, ce, dce, dce)
        return mu.uniform_lanes(mu.rotate(dm, cs, cs))
