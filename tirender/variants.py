"""The variant: how this process represents light (Mitsuba 2 §3, "one generic implementation, lifted to
variants"). The integrators and models are written once; the few places where light enters or leaves
the walk ask this module, at compile time (``ti.static``), what a colour means:

    rgb         the three channels are linear sRGB (the default).
    mono        one luminance channel (Y of the sRGB inputs): the walk's colour has one lane, and images are
                grey (R = G = B = Y).
    spectral    the walk's colour has four lanes: radiance at four wavelengths per path, sampled over
                360–830 nm with Mitsuba 3's sech² density for RGB content (the first λ by importance, the
                others shifted by 1/4 in sample space: hero-wavelength style, as Mitsuba's spectral
                variants); RGB reflectances become smooth spectra by
                Jakob & Hanika's sigmoid-polynomial model (spectra/upsample.py), RGB radiances are
                D65-scaled (Mitsuba's ``d65``); the film receives linear sRGB computed through the CIE 1931
                colour-matching functions (spectra/cie.py).
    spectral_polarized
                spectral, and each lane of a path also carries the product of the Mueller matrices of its
                vertices (core/mueller.py, Mitsuba 2 §4.1): polarizing models (conductors, dielectrics,
                polarizer, retarder) return Mueller matrices, the others depolarize (smooth lobes) or pass
                polarization unchanged (Dirac lobes); emitters are unpolarized; the film records S0, the
                ``stokes`` integrator all four Stokes components in the camera's frame.

A variant is fixed per process before any kernel that depends on it compiles (as ``mitsuba.set_variant``;
Taichi compiles a kernel once per specialisation): choose it with ``tirender.set_variant(name)``, the
``TIRENDER_VARIANT`` environment variable, a config's top-level ``variant:`` key or ``--variant`` on the
CLI. Asking for another variant after kernels consulted the current one is one ConfigError.

Models and integrators that have no meaning (or no implementation yet) in a variant are refused by
``require`` with one line naming them.

The walk's colour type (``Spectrum``) has ``lanes()`` channels: 3 in rgb, 1 in mono, 4 in the spectral variants.
It is picked when kernels compile: device code builds colours with ``spec(x)`` (every lane x), and structs with
Spectrum members are declared with ``struct(member=SPECTRUM, ...)`` (built on first
use for the current variant). Geometry stays ``vec3``; textures and parameters stay RGB (``vec3``): the functions
below lift an RGB value to the walk's colour and bring adjoints back to RGB.

Device functions (all inline, compiled for the current variant):
    spec(x) -> Spectrum                                            a colour with every lane x
    luminance_weights(λ) -> Spectrum                               Mitsuba's luminance(c, λ) = <weights, c>
    sample_wavelengths(sampler) -> (λ, w = 1/pdf), Spectrum nm      draws one number in ``spectral`` only
    secondary_terminated(λ) / terminate_secondary(λ)               dispersion: a path's secondary lanes ended
    to_rgb(L, λ, w) -> vec3                                        the film's value of a path's radiance
    adjoint_from_rgb(δrgb, λ, w) -> Spectrum                       ∂<δrgb, to_rgb(L)>/∂L
    reflectance(rgb, λ) / reflectance_adjoint(rgb, λ, d)           a texture's RGB as the walk's colour (vec3 → Spectrum;
                                                                   the adjoint Spectrum → vec3)
    emission(rgb, λ) / emission_adjoint(rgb, λ, d)                 an emitter's RGB radiance likewise
    unbounded(rgb, λ) / unbounded_adjoint(rgb, λ, d)               an RGB value outside [0,1] (IOR tables)
"""
import os

import taichi as ti

from . import backend
from .core.math import LUMINANCE, vec3
from .errors import ConfigError
from .spectra import blackbody, cie, conductors, upsample

NAMES = ("rgb", "mono", "spectral", "spectral_polarized")
PLANNED = ()

_name = None
_frozen = False


def _check(v, file=None, key="variant"):
    if v in PLANNED:
        raise ConfigError(f"variant '{v}' is not available yet (available: {', '.join(NAMES)})", file, key)
    if v not in NAMES:
        raise ConfigError(f"unknown variant '{v}' (expected one of: {', '.join(NAMES)})", file, key)
    return v


def name():
    """The current variant (``TIRENDER_VARIANT`` or ``rgb`` until ``set_variant``)."""
    global _name
    if _name is None:
        _name = _check(os.environ.get("TIRENDER_VARIANT", "rgb") or "rgb", key="TIRENDER_VARIANT")
    return _name


def set_variant(v, file=None, key="variant"):
    """Select the variant of this process. Refused (ConfigError) once compiled kernels depend on another."""
    global _name
    v = _check(str(v), file, key)
    if v == name():
        return
    if _frozen:
        raise ConfigError(f"this process already compiled kernels for variant '{_name}'; a variant is fixed per "
                          f"process (start a new one, or set TIRENDER_VARIANT)", file, key)
    _name = v
    os.environ["TIRENDER_VARIANT"] = v       # child processes (CLI workers) follow
    if backend.current_arch() is not None:
        prepare()                            # scenes built before the switch: the tables exist before kernels compile


def _static(which):
    """Compile-time test used by the device functions below: fixes the variant for this process."""
    global _frozen
    _frozen = True
    return name() == which


def rgb():
    return _static("rgb")


def spectral():
    """Whether paths carry sampled wavelengths (spectral and spectral_polarized)."""
    global _frozen
    _frozen = True
    return name() in ("spectral", "spectral_polarized")


def polarized():
    """Whether paths carry Mueller matrices (core/mueller.py; spectral_polarized)."""
    return _static("spectral_polarized")


def mono():
    return _static("mono")


def lanes():
    """Channels of the walk's colour (compile time): 4 wavelengths per path in the spectral variants, 1 in mono
    (luminance), 3 in rgb."""
    return 4 if spectral() else 1 if mono() else 3


_spectrum_types = {}


def spectrum_type():
    """The walk's colour type of the current variant: ``ti.types.vector(lanes(), float)``."""
    n = lanes()
    if n not in _spectrum_types:
        _spectrum_types[n] = ti.types.vector(n, float)
    return _spectrum_types[n]


SPECTRUM = "Spectrum"      # a struct member of the walk's colour type (``struct``)


class struct:
    """A Taichi struct type whose ``SPECTRUM`` members take the current variant's lane count, built on first use
    (a variant is chosen after import, before kernels compile). As a class attribute it resolves on access
    (``D.Params(...)`` in device code is the real struct type); elsewhere device code calls it like the type
    (``BsdfSample(wo=..., ...)``: the call runs at compile time and returns the struct value)."""

    _is_taichi_function = False     # Taichi's AST transformer: a compile-time callable, not an external function

    def __init__(self, **members):
        self.members = members
        self._types = {}

    def __call__(self, *args, **kwargs):
        return self.type()(*args, **kwargs)

    def type(self):
        n = lanes()
        if n not in self._types:
            self._types[n] = ti.types.struct(**{k: (spectrum_type() if v is SPECTRUM else
                                                    v.type() if isinstance(v, struct) else v)
                                                for k, v in self.members.items()})
        return self._types[n]

    def __get__(self, obj, owner=None):
        return self.type()


@ti.func
def spec(x):
    """The walk's colour with every lane x."""
    return ti.Vector([x] * ti.static(lanes()), float)


@ti.func
def luminance_weights(lam):
    """w with Y = <w, c> for a colour c of the walk at the path's wavelengths lam: Mitsuba's luminance(c, λ) —
    the sRGB luminance weights in rgb, 1 in mono (the lane is Y), ȳ(λ_i) / lanes() in the spectral variants
    (CIE 1931 ȳ, the 5 nm table interpolated linearly, as Mitsuba's cie1931_y: here <LUMINANCE, srgb̄(λ)> without
    the table's Y normalisation, the same table to the 6 digits of the sRGB matrices)."""
    w = spec(1.0)
    if ti.static(rgb()):
        w = vec3(LUMINANCE)
    elif ti.static(spectral()):
        srgb = ti.static(_srgb_bar())
        for i in ti.static(range(lanes())):
            w[i] = cie.table_lerp(srgb, lam[i]).dot(vec3(LUMINANCE)) * ti.static(cie.Y_INTEGRAL / lanes())
    return w


def require(what, variants, file=None, key=None, variant=None):
    """One ConfigError unless ``variant`` (default: the current one) is in ``variants`` (what: e.g.
    "integrator 'volpath'")."""
    v = variant or name()
    if v not in variants:
        raise ConfigError(f"{what} is not available in variant '{v}' (it runs in: {', '.join(variants)})", file, key)


def check(v, file=None, key="variant"):
    """The variant name v, validated (ConfigError otherwise)."""
    return _check(str(v), file, key)


def prepare():
    """Create the device tables the current variant needs (Python scope, after ti.init; Scene does it)."""
    if name() in ("spectral", "spectral_polarized"):
        upsample.bind()
        cie.fields()
        conductors.fields()


def _srgb_bar():
    return cie.fields()[0]


def _d65():
    return cie.fields()[1]


@ti.func
def _lum(rgb):
    return LUMINANCE[0] * rgb[0] + LUMINANCE[1] * rgb[1] + LUMINANCE[2] * rgb[2]


@ti.func
def sample_wavelengths(sampler: ti.template()):
    """(λ, w): the lanes() wavelengths of one path (nm) and their weights 1/pdf (spectral; zeros / ones otherwise):
    one number u, lane i at u + i / lanes() (mod 1) through the importance density."""
    lam = spec(0.0)
    w = spec(1.0)
    if ti.static(spectral()):
        u = sampler.next_1d()
        for i in ti.static(range(lanes())):
            ui = u + i / ti.static(float(lanes()))
            if ui >= 1.0:
                ui -= 1.0
            lam[i], w[i] = cie.sample_wavelength(ti.min(ui, 0.99999994))
    return lam, w


@ti.func
def secondary_terminated(lam):
    """Whether a path's secondary wavelengths were terminated by a dispersive event (they then equal λ0; sampled
    wavelengths are distinct otherwise). Always False outside the spectral variants."""
    res = False
    if ti.static(spectral()):
        res = True
        for i in ti.static(range(1, lanes())):
            res = res and lam[i] == lam[0]
    return res


@ti.func
def terminate_secondary(lam):
    """The wavelengths of a path after a dispersive event: λ0 in every lane (the lanes' throughput is 0 but their
    lookups stay finite; the film converts with the wavelengths drawn at the camera)."""
    return spec(lam[0])


@ti.func
def to_rgb(L, lam, w):
    """Linear sRGB (vec3) of a path's radiance L: Σ_i srgb̄(λ_i) L_i w_i / n over its n = lanes() wavelengths
    (spectral), (Y, Y, Y) (mono), L (rgb)."""
    out = vec3(0.0)
    if ti.static(spectral()):
        srgb = ti.static(_srgb_bar())
        for i in ti.static(range(lanes())):
            out += cie.table_lerp(srgb, lam[i]) * (L[i] * w[i] / ti.static(float(lanes())))
    elif ti.static(mono()):
        out = vec3(L[0])
    else:
        out = L
    return out


@ti.func
def adjoint_from_rgb(d_rgb, lam, w):
    """δL_i = ∂<d_rgb, to_rgb(L)>/∂L_i (the adjoint radiance of each lane; d_rgb vec3 → Spectrum)."""
    out = spec(0.0)
    if ti.static(spectral()):
        srgb = ti.static(_srgb_bar())
        for i in ti.static(range(lanes())):
            out[i] = cie.table_lerp(srgb, lam[i]).dot(d_rgb) * w[i] / ti.static(float(lanes()))
    elif ti.static(mono()):
        out = spec(d_rgb.sum())
    else:
        out = d_rgb
    return out


@ti.func
def reflectance(rgb, lam):
    """A reflectance-like RGB value (texture, constant; vec3) as the walk's colour (Spectrum) at wavelengths lam."""
    out = spec(0.0)
    if ti.static(spectral()):
        out = upsample.reflectance_lanes(rgb, lam)
    elif ti.static(mono()):
        out = spec(_lum(rgb))
    else:
        out = rgb
    return out


@ti.func
def reflectance_adjoint(rgb, lam, d):
    """∂<d, reflectance(rgb, λ)>/∂rgb (d Spectrum → vec3)."""
    g = vec3(0.0)
    if ti.static(spectral()):
        g = upsample.reflectance_lanes_adjoint(rgb, lam, d)
    elif ti.static(mono()):
        g = vec3(LUMINANCE) * d.sum()
    else:
        g = d
    return g


@ti.func
def _scaled(rgb, lam, d65: ti.template()):
    """k S(c(rgb/k), λ) [D65(λ)] per lane, with k = 2 max(rgb) (Mitsuba's d65 convention; 1-homogeneous in rgb)."""
    d65t = ti.static(_d65())
    out = spec(0.0)
    k = 2.0 * ti.max(rgb[0], rgb[1], rgb[2])
    if k > 0.0:
        out = upsample.reflectance_lanes(rgb / k, lam) * k
        if ti.static(d65):
            for i in ti.static(range(lanes())):
                out[i] *= cie.table_lerp(d65t, lam[i])
    return out


@ti.func
def texel_spectrum(rgb, lam):
    """(S, f): an RGB texel's (or voxel's) normalised spectrum S = S(c(rgb / f), λ) per lane and its scale
    f = 2 max(rgb) (spectral variants; (0, 0) for black). Mitsuba's spectral bitmaps and grids interpolate S and f
    of neighbouring texels apart and multiply (emitters/envmap.py, media/grid.py)."""
    f = 2.0 * ti.max(rgb[0], rgb[1], rgb[2])
    S = spec(0.0)
    if f > 0.0:
        S = reflectance(rgb / f, lam)
    return S, f


@ti.func
def texel_spectrum_adjoint(rgb, lam, dS, df):
    """∂(<dS, S> + df f)/∂rgb for (S, f) = texel_spectrum(rgb, λ): with u = rgb / f, ∂u_a/∂rgb_b = δ_ab / f −
    2 u_a δ_bm / f and ∂f/∂rgb_b = 2 δ_bm (m = max_channel; at black, f's one-sided derivative)."""
    f = 2.0 * ti.max(rgb[0], rgb[1], rgb[2])
    g = vec3(0.0)
    gu_u = 0.0
    if f > 0.0:
        u = rgb / f
        gu = reflectance_adjoint(u, lam, dS)
        g = gu / f
        gu_u = gu.dot(u) / f
    g[max_channel(rgb)] += 2.0 * (df - gu_u)
    return g


@ti.func
def nonzero(c):
    """Whether any lane of a colour of the walk (any lane count) is not 0."""
    res = False
    for i in ti.static(range(c.n)):
        res = res or c[i] != 0.0
    return res


@ti.func
def max_channel(rgb):
    """The index of rgb's largest channel (the last of equal ones): the channel k = 2 max(rgb) moves with."""
    m = 0
    if rgb[1] >= rgb[0]:
        m = 1
    if rgb[2] >= ti.max(rgb[0], rgb[1]):
        m = 2
    return m


@ti.func
def _scaled_adjoint(rgb, lam, d, d65: ti.template()):
    """∂<d, _scaled(rgb, λ)>/∂rgb: f = k s(u) D, u = rgb/k, k = 2 rgb_m → ∂f/∂rgb = D (s ∂k + k J_s ∂u)."""
    d65t = ti.static(_d65())
    g = vec3(0.0)
    k = 2.0 * ti.max(rgb[0], rgb[1], rgb[2])
    if k > 0.0:
        m = max_channel(rgb)
        u = rgb / k
        dd = d
        if ti.static(d65):
            for i in ti.static(range(lanes())):
                dd[i] *= cie.table_lerp(d65t, lam[i])
        s = upsample.reflectance_lanes(u, lam)
        gu = upsample.reflectance_lanes_adjoint(u, lam, dd)      # ∂<dd, s(u)>/∂u
        # ∂u_a/∂rgb_b = δ_ab / k − 2 u_a δ_bm / k ;  ∂k/∂rgb_b = 2 δ_bm
        g = gu
        g[m] += 2.0 * (dd.dot(s) - gu.dot(u))
    return g


@ti.func
def _lift(rgb, lam, d65: ti.template()):
    """An unbounded RGB value as the walk's colour: k S(c(rgb/k), λ) [D65(λ)] (spectral), Y (mono), rgb."""
    out = spec(0.0)
    if ti.static(spectral()):
        out = _scaled(rgb, lam, d65)
    elif ti.static(mono()):
        out = spec(_lum(rgb))
    else:
        out = rgb
    return out


@ti.func
def _lift_adjoint(rgb, lam, d, d65: ti.template()):
    """∂<d, _lift(rgb, λ)>/∂rgb."""
    g = vec3(0.0)
    if ti.static(spectral()):
        g = _scaled_adjoint(rgb, lam, d, d65)
    elif ti.static(mono()):
        g = vec3(LUMINANCE) * d.sum()
    else:
        g = d
    return g


@ti.func
def emission(rgb, lam):
    """An emitter's RGB radiance as the walk's colour (spectral: D65-scaled upsampling)."""
    return _lift(rgb, lam, True)


@ti.func
def emission_adjoint(rgb, lam, d):
    return _lift_adjoint(rgb, lam, d, True)


@ti.func
def unbounded(rgb, lam):
    """An RGB value that may exceed 1 (a conductor's η, k): 2 max(rgb) S(c(rgb / (2 max)), λ)."""
    return _lift(rgb, lam, False)


@ti.func
def unbounded_adjoint(rgb, lam, d):
    return _lift_adjoint(rgb, lam, d, False)


# An emitter's spectrum (emitters/base.py Row.spectrum): what its RGB value means in the spectral variant
SPECTRUM_RGB = 0          # rgb × D65 by upsampling (Mitsuba's d65 convention; also the ``d65`` type)
SPECTRUM_BLACKBODY = 1    # rgb (a factor, usually grey) × Planck's B(λ, T)
SPECTRUM_UNIFORM = 2      # rgb upsampled without D65 (``uniform``: a flat spectrum for grey values)
SPECTRUM_SAMPLED = 3      # rgb[0] (a factor) × the emitter's sampled spectrum (textures.spectrum_eval)


@ti.func
def _planck(lam, T):
    return ti.Vector([blackbody.planck_ti(lam[i], T) for i in ti.static(range(lanes()))], float)


@ti.func
def emission_spectrum(rgb, lam, kind, T):
    """An emitter's value rgb as radiance at wavelengths lam under its spectrum kind (SPECTRUM_*; T: the
    black body's temperature in K). Spectral variant only."""
    out = spec(0.0)
    if kind == SPECTRUM_BLACKBODY:
        out = _scaled(rgb, lam, False) * _planck(lam, T)
    elif kind == SPECTRUM_UNIFORM:
        out = _scaled(rgb, lam, False)
    else:
        out = _scaled(rgb, lam, True)
    return out


@ti.func
def emission_white(lam, kind, T):
    """The per-lane factor W(λ) of an emitter's spectrum kind, emission_spectrum(rgb, λ) = k S(c(rgb/k), λ) W(λ)
    with k = 2 max(rgb): D65(λ) (SPECTRUM_RGB), Planck's B(λ, T) (black body), 1 (uniform). Spectral variants
    (for models that interpolate k and S separately, as Mitsuba's envmap: emitters/envmap.py)."""
    out = spec(1.0)
    if kind == SPECTRUM_BLACKBODY:
        out = _planck(lam, T)
    elif kind != SPECTRUM_UNIFORM:
        d65t = ti.static(_d65())
        for i in ti.static(range(lanes())):
            out[i] = cie.table_lerp(d65t, lam[i])
    return out


@ti.func
def emission_spectrum_adjoint(rgb, lam, kind, T, d):
    """∂<d, emission_spectrum(rgb, λ, kind, T)>/∂rgb."""
    g = vec3(0.0)
    if kind == SPECTRUM_BLACKBODY:
        g = _scaled_adjoint(rgb, lam, d * _planck(lam, T), False)
    elif kind == SPECTRUM_UNIFORM:
        g = _scaled_adjoint(rgb, lam, d, False)
    else:
        g = _scaled_adjoint(rgb, lam, d, True)
    return g

