"""Smooth dielectric (Mitsuba 3 ``dielectric``): Dirac reflection + refraction, two-sided by nature
(wi below the surface means the ray is inside; η is inverted).

eval / pdf are 0 (Dirac lobes). sample picks reflection with probability F = Fresnel(cos θi):
    reflection: wo = reflect(wi), pdf = F,     weight = specular,                  eta = 1
    refraction: wo = refract(...), pdf = 1-F,  weight = transmittance * eta_ti²,   eta = eta_it
(radiance mode: the 1/η² solid-angle compression of radiance is in the weight); delta = 1.
Attached PRB: the lobe's probability moves with cos θi (``dlog``: ∂ ln F/∂cos or ∂ ln(1 - F)/∂cos), and with
η, as do the weight and the refracted direction (``dirac_ior_adjoint_at``: into the parameters ``int_ior`` and
``cauchy_b``, one-channel textures of ``dielectric`` and ``roughdielectric``; thindielectric's int_ior moves its
lobes' probabilities only, bsdfs/thindielectric.py). Detached PRB differentiates no Dirac lobe.

Dispersion (``cauchy_b`` given, spectral variants; docs/variants.md): η(λ) = (int_ior + B (1/λ² − 1/λ_D²)) / ext_ior
with λ in µm and λ_D = 0.5893 µm (``int_ior`` is the IOR at the sodium D line). Each lane of a path would
refract its own way, so the first such interface of a path scatters the first (hero) wavelength with its η and
ends the other lanes: weight × (n, 0, …, 0) for n lanes, which keeps the film's estimate Σ_i c(λ_i) L_i / n unbiased; the
sample says so (``BsdfSample.disperse``) and the walk terminates the secondary wavelengths (they become λ0:
variants.terminate_secondary), so later dispersive interfaces of the path scatter λ0 without the factor. In the rgb and mono
variants the IOR is η(λ_D). ``sellmeier`` (a named glass or six coefficients) gives η(λ) = n(λ) / ext_ior by
Sellmeier's formula instead, and its n(λ_D) is the rgb and mono variants' IOR.
"""
import taichi as ti

from .. import variants
from ..core import mueller as mu
from ..core.math import vec3
from ..errors import ConfigError
from ..schema import Ior, IorTexture, Key, Texture, number
from ..variants import SPECTRUM, spec, struct
from .base import (BOTH_SIDES, DELTA, TRANSMISSION, BsdfSample, const, dirac, invalid_sample, slot_float,
                   slot_float_adjoint, slot_rgb)
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_dielectric_deta, reflect, refract
from .ior import GLASSES
from .ior import sellmeier as sellmeier_np

_SPEC, _TRANS = 0, 1   # texture slots
ETA = 0                # constant: relative IOR int_ior / ext_ior
CAUCHY_B = 1           # constant: 1 when a cauchy_b texture is given (interface_constants)
SELLMEIER = 2          # constants 2..7 (dielectric): Sellmeier B1 B2 B3 C1 C2 C3 (all 0: none)
EXT_IOR = 8            # constant (dielectric): ext_ior
LAMBDA_D = 0.5893      # µm: the wavelength at which int_ior is given (sodium D line)


class Sellmeier(Key):
    """Sellmeier dispersion: a glass name (``bsdfs/ior.py GLASSES``) or six numbers [B1, B2, B3, C1, C2, C3]
    (C in µm²), n²(λ) = 1 + Σ B_i λ² / (λ² − C_i) with λ in µm; ``none``: no dispersion."""
    kind = "sellmeier"

    def parse(self, v, file, key):
        if isinstance(v, str):
            if v.lower() == "none":
                return None
            if v.lower() not in GLASSES:
                raise ConfigError(f"unknown glass '{v}' (six numbers B1 B2 B3 C1 C2 C3, or one of: "
                                  f"{', '.join(GLASSES)})", file, key)
            return tuple(GLASSES[v.lower()])
        if not isinstance(v, (list, tuple)) or len(v) != 6:
            raise ConfigError(f"expected a glass name or six numbers [B1, B2, B3, C1, C2, C3], got {v!r}", file, key)
        c = tuple(number(x, file, key, 0.0) for x in v)
        if not any(c[:3]):
            raise ConfigError("at least one B coefficient must be > 0", file, key)
        if any(0.36 ** 2 <= ci <= 0.83 ** 2 for ci in c[3:]):
            raise ConfigError("a C coefficient (µm²) lies in the visible range 0.36–0.83 µm: a pole of n(λ)", file, key)
        return c

    def describe(self):
        return "glass name or [B1, B2, B3, C1, C2, C3]"

DIELECTRIC_KEYS = (
    Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the reflected part"),
    Texture("specular_transmittance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the transmitted part"),
    Ior("int_ior", default=1.5046, doc="interior IOR (BK7 glass)"),
    Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
)


def ior_constants(values, file, key):
    """[η = int_ior / ext_ior]: the constants of the models with an interface."""
    eta = values["int_ior"] / values["ext_ior"]
    if not 1e-3 < eta < 1e3:
        raise ConfigError(f"relative IOR int_ior / ext_ior = {eta:g} is out of range", file, f"{key}.int_ior")
    return [eta]


class SmoothInterface:
    """Keys, parameter record and fetch shared by the smooth dielectric models (dielectric,
    thindielectric): reflectance and transmittance scales, the relative IOR."""
    KEYS = DIELECTRIC_KEYS
    FLAGS = DELTA | BOTH_SIDES | TRANSMISSION
    Params = struct(specular=SPECTRUM, transmittance=SPECTRUM, eta=float)
    constants = staticmethod(ior_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return SmoothInterface.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                      eta=const(st, ctx, ETA))


@ti.func
def sellmeier_eta(st: ti.template(), ctx, lam_nm):
    """n(λ) / ext_ior of the row's Sellmeier glass (λ in nm)."""
    l2 = (lam_nm * 1e-3) * (lam_nm * 1e-3)
    n2 = 1.0
    for i in ti.static(range(3)):
        n2 += const(st, ctx, SELLMEIER + i) * l2 / (l2 - const(st, ctx, SELLMEIER + 3 + i))
    return ti.sqrt(ti.max(n2, 1e-6)) / const(st, ctx, EXT_IOR)


@ti.func
def has_sellmeier(st: ti.template(), ctx):
    """Whether the row (laid out as ``interface_constants``) holds a Sellmeier glass."""
    return const(st, ctx, SELLMEIER) + const(st, ctx, SELLMEIER + 1) + const(st, ctx, SELLMEIER + 2) > 0.0


@ti.func
def dlog_lobe(P, dP, reflected):
    """d ln of the sampled lobe's probability, P (reflection) or 1 − P (transmission), for a change dP of P
    (0 where that probability is 0)."""
    res = 0.0
    if reflected:
        if P > 0.0:
            res = dP / P
    elif P < 1.0:
        res = -dP / (1.0 - P)
    return res


@ti.func
def hero_only():
    """A dispersive event's lane weights: the hero wavelength goes on alone, (n, 0, …, 0) for n lanes (module doc)."""
    n = ti.static(float(variants.lanes()))
    w = spec(0.0)
    w[0] = n
    return w


SELLMEIER_KEY = Sellmeier("sellmeier", default=None,
              doc="Sellmeier dispersion (spectral variants): a glass (bk7, baf10, f2, sf11, fused_silica, caf2, "
                  "sapphire) or [B1, B2, B3, C1, C2, C3], C in µm²; replaces int_ior (its value at 589.3 nm "
                  "is the IOR of the rgb and mono variants)")


@ti.func
def interface_mueller(eta, wi, wo, n):
    """spectral_polarized: a dielectric interface η about the (micro)normal n — reflection when wi and wo lie
    on the same side of it, else refraction — by the Fresnel amplitudes (Mitsuba 3's polarized dielectric),
    in the implicit frames of −wo (in) and wi (out); the same matrix in every lane (η is the path's)."""
    c = wo.dot(n)
    m = mu.specular_transmission(c, eta)
    if wi.dot(n) * c > 0.0:
        m = mu.specular_reflection(c, eta, 0.0)
    return mu.uniform_lanes(mu.interface_to_implicit(m, n, wi, wo))


_IOR, _CAUCHY = 2, 3   # texture slots of ``dielectric``: int_ior, cauchy_b (-1: not given)


def interface_constants(values, file, key):
    """[η at λ_D, Cauchy switch, Sellmeier B1 B2 B3 C1 C2 C3, ext_ior] of the models with DIELECTRIC_IOR_KEYS. The
    switch (CAUCHY_B) is 1 when the ``cauchy_b`` texture is given (its value, 0 included, then makes η depend on λ
    in the spectral variants: a coefficient that can be optimised from 0). With ``sellmeier``, η at λ_D comes from
    the glass (the rgb and mono variants' IOR), so ``int_ior`` must not also be given."""
    b, s, ext = values.get("cauchy_b"), values.get("sellmeier"), values["ext_ior"]
    ior = values["int_ior"] if not isinstance(values["int_ior"], dict) else ext   # a bitmap: checked per texel
    if s is None:
        return ior_constants(dict(values, int_ior=ior), file, key) + [0.0 if b is None else 1.0] + [0.0] * 6 + [ext]
    if b is not None:
        raise ConfigError("give either cauchy_b or sellmeier, not both", file, f"{key}.sellmeier")
    if values["int_ior"] != DIELECTRIC_KEYS[2].default:
        raise ConfigError("with sellmeier the IOR comes from the glass: leave int_ior out", file, f"{key}.int_ior")
    eta_d = float(sellmeier_np(s, LAMBDA_D * 1e3))     # the rgb and mono variants' IOR
    return ior_constants(dict(values, int_ior=eta_d), file, key) + [0.0] + list(s) + [ext]


@ti.func
def interface_eta(st: ti.template(), ctx, ior_slot: ti.template(), cauchy_slot: ti.template()):
    """(η, disperse, ∂η/∂B) of a row laid out as ``interface_constants`` whose int_ior and cauchy_b are texture
    slots ior_slot and cauchy_slot: η = int_ior / ext_ior, + B (1/λ0² − 1/λ_D²) / ext_ior with a Cauchy texture in
    the spectral variants (∂η/∂B: that factor, else 0); a Sellmeier glass's n(λ0) / ext_ior (n(λ_D) in rgb and
    mono; not differentiable: int_ior unused). λ0 is the path's hero wavelength; disperse = 1 when this event ends
    the secondary wavelengths (a λ-dependent η and a path whose secondaries still live: the walk then terminates
    them, so that a path through a prism's two faces is weighted (n, 0, …, 0) once)."""
    ext = const(st, ctx, EXT_IOR)
    eta = slot_float(st, ctx, ior_slot) / ext
    db = 0.0
    disperse = 0
    if has_sellmeier(st, ctx):
        eta = const(st, ctx, ETA)
        if ti.static(variants.spectral()):
            eta = sellmeier_eta(st, ctx, ctx.lam[0])
            disperse = 1
    elif ti.static(variants.spectral()):
        if const(st, ctx, CAUCHY_B) > 0.0:
            lam_um = ctx.lam[0] * 1e-3
            db = (1.0 / (lam_um * lam_um) - 1.0 / (LAMBDA_D * LAMBDA_D)) / ext
            eta += slot_float(st, ctx, cauchy_slot) * db
            disperse = 1
    if variants.secondary_terminated(ctx.lam):      # the path's secondary wavelengths already ended
        disperse = 0
    return eta, disperse, db


@ti.func
def interface_eta_adjoint(st: ti.template(), ctx, ior_slot: ti.template(), cauchy_slot: ti.template(), g):
    """Scatter g ∂η/∂(int_ior, cauchy_b) into the pool (g = ∂loss/∂η; nothing for a Sellmeier glass)."""
    if not has_sellmeier(st, ctx):
        eta, disperse, db = interface_eta(st, ctx, ior_slot, cauchy_slot)
        slot_float_adjoint(st, ctx, ior_slot, g / const(st, ctx, EXT_IOR))
        if ti.static(variants.spectral()):
            if const(st, ctx, CAUCHY_B) > 0.0:
                slot_float_adjoint(st, ctx, cauchy_slot, g * db)


DIELECTRIC_IOR_KEYS = (
    IorTexture("int_ior", default=1.5046, doc="interior IOR (BK7 glass; at 589.3 nm where dispersive); a "
                                              "differentiable parameter (dielectric: attached PRB; roughdielectric: "
                                              "PRB)"),
    DIELECTRIC_KEYS[3],
    Texture("cauchy_b", 1, default=None, lo=0.0, hi=1.0, raw=True,
            doc="Cauchy dispersion B in µm²: η(λ) = int_ior + B (1/λ² − 1/0.5893²), λ in µm (spectral variants; "
                "e.g. BK7 0.0042, dense flint 0.0135; given, even 0, the IOR depends on λ); a differentiable "
                "parameter"),
    SELLMEIER_KEY)


@dirac
class Dielectric(SmoothInterface):
    NAME = "dielectric"
    KEYS = DIELECTRIC_KEYS[:2] + DIELECTRIC_IOR_KEYS
    Params = struct(specular=SPECTRUM, transmittance=SPECTRUM, eta=float, disperse=ti.i32)
    MUELLER_COLOURLESS = True      # mueller reads the IOR only (bsdfs/base.py)
    constants = staticmethod(interface_constants)
    N_CONST = EXT_IOR + 1

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        eta, disperse, db = interface_eta(st, ctx, _IOR, _CAUCHY)
        return Dielectric.Params(specular=slot_rgb(st, ctx, _SPEC), transmittance=slot_rgb(st, ctx, _TRANS),
                                 eta=eta, disperse=disperse)

    @staticmethod
    @ti.func
    def dlog(p, wi, reflected):
        """∂ ln P/∂cos θi of the sampled lobe's probability P = F (reflection) or 1 - F."""
        r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(wi[2], p.eta)
        return spec(dlog_lobe(r_i, fresnel_dielectric_dcos(wi[2], p.eta), reflected))

    @staticmethod
    @ti.func
    def dlog_eta(eta, wi, reflected):
        """(∂ ln(P w)/∂η, ∂η_ti/∂η) of the sampled lobe: P = F, w = 1 (reflection) or P = 1 − F,
        w ∝ η_ti² (refraction, radiance compression); η_ti is the refracted direction's IOR ratio."""
        cos_i = wi[2]
        r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(cos_i, eta)
        dlw = dlog_lobe(r_i, fresnel_dielectric_deta(cos_i, eta), reflected)
        dr = 0.0
        if not reflected and r_i < 1.0:
            outside = cos_i >= 0.0
            dlw += -2.0 / eta if outside else 2.0 / eta
            dr = -eta_ti * eta_ti if outside else 1.0
        return dlw, dr

    @staticmethod
    @ti.func
    def dirac_ior_adjoint_at(st: ti.template(), ctx, wi, reflected, k, g_r, inner: ti.template()):
        """Attached PRB: scatter into int_ior and cauchy_b the derivative of k ln(P w) + g_r η_ti of the sampled
        lobe (k: δL times the radiance still to come, summed over lanes; g_r: ∂loss/∂η_ti of the refracted
        direction, walk/attached.scatter_adjoint)."""
        eta, disperse, db = interface_eta(st, ctx, _IOR, _CAUCHY)
        dlw, dr = Dielectric.dlog_eta(eta, wi, reflected)
        interface_eta_adjoint(st, ctx, _IOR, _CAUCHY, k * dlw + g_r * dr)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        cos_i = wi[2]
        if cos_i != 0.0:
            r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(cos_i, p.eta)
            if u1 <= r_i:
                s = BsdfSample(wo=reflect(wi), weight=p.specular, pdf=r_i, eta=1.0, delta=1, valid=1)
            else:
                s = BsdfSample(wo=refract(wi, cos_t, eta_ti), weight=p.transmittance * (eta_ti * eta_ti),
                               pdf=1.0 - r_i, eta=eta_it, delta=1, valid=1)
            if s.pdf <= 0.0:
                s.valid = 0
            if p.disperse:
                s.weight *= hero_only()
                s.disperse = 1
        return s

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        return interface_mueller(p.eta, wi, wo, vec3(0.0, 0.0, 1.0))
