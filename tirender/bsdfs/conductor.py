"""Smooth conductor (Mitsuba 3 ``conductor``): a Dirac mirror, one-sided.

eval / pdf are 0 (Dirac lobe); sample returns wo = reflect(wi), pdf = 1, delta = 1 and
weight = specular * F, F = fresnel_conductor(cos θi, η, k) with the complex IOR η + ik (RGB; in the spectral variant a named
material's measured spectrum, spectra/conductors.py), or F = 1 for ``material: none`` (a perfect mirror, Mitsuba's default). Detached PRB does not
differentiate Dirac lobes (as Mitsuba's prb): eval is 0, so is its adjoint.
"""
import taichi as ti

from .. import variants
from ..core import mueller as mu
from ..core.math import vec3
from ..errors import ConfigError
from ..schema import Choice, Texture, Vec3
from ..spectra import conductors
from ..spectra.sampled import UNBOUNDED
from ..textures import table_eval
from ..variants import SPECTRUM, spec, struct
from .base import DELTA, BsdfSample, const, const_rgb, dirac, invalid_sample, slot_rgb
from .fresnel import fresnel_conductor, fresnel_conductor_dcos, reflect
from .ior import CONDUCTORS

_SPEC = 0                  # texture slot: specular_reflectance
ETA, K, NONE = 0, 3, 6     # constants: η (3), k (3), 1 = perfect mirror
MATERIAL = 7               # constant: row of the named material's measured spectrum (spectra/conductors.py), -1: none
ETA_TABLE, K_TABLE = 8, 9  # constants: η, k given as wavelength lists (spectral variants): their offsets in the
N_CONDUCTOR = 10           # scene's spectrum table (textures.table_eval), -1: none

CONDUCTOR_KEYS = (
    Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1e3, doc="scale of the reflectance"),
    Choice("material", ("none",) + tuple(CONDUCTORS), default="none",
           doc="named complex IOR, any of Mitsuba 3's (bsdfs/ior.py; `none`: perfect mirror, F = 1)"),
    Vec3("eta", default=None, lo=0.0, spectrum=UNBOUNDED,
         doc="real part of the complex IOR (RGB or a spectrum); with `k` overrides `material`"),
    Vec3("k", default=None, lo=0.0, spectrum=UNBOUNDED, doc="imaginary part of the complex IOR (RGB or a spectrum)"),
)


def conductor_constants(values, file, key):
    """[η (3), k (3), none, material, η table, k table] from the parsed keys (explicit eta/k — RGB, or wavelength
    lists in the spectral variants: spectrum-table references —, a named material, or none)."""
    if values.get("eta") is not None or values.get("k") is not None:
        eta = values.get("eta", (0.0, 0.0, 0.0)) if values.get("eta") is not None else (0.0, 0.0, 0.0)
        k = values.get("k") if values.get("k") is not None else (0.0, 0.0, 0.0)
        tables = [float(getattr(v, "table_offset", -1)) for v in (eta, k)]
        eta, k = ((1.0,) * 3 if hasattr(v, "table_offset") else v for v in (eta, k))
        if min(eta) <= 0.0:
            raise ConfigError("conductor eta must be > 0", file, f"{key}.eta")
        return list(eta) + list(k) + [0.0, -1.0] + tables
    if values["material"] == "none":
        return [0.0] * 6 + [1.0, -1.0, -1.0, -1.0]
    eta, k = CONDUCTORS[values["material"]]
    return list(eta) + list(k) + [0.0, float(conductors.index(values["material"])), -1.0, -1.0]


@ti.func
def conductor_ior(st: ti.template(), ctx):
    """(η, k) as the walk's colour: the named material's measured spectrum at the path's wavelengths (spectral
    variant), else the RGB constants through the variant (explicit eta/k are upsampled in spectral; given as
    wavelength lists, the lists at the path's wavelengths)."""
    eta = const_rgb(st, ctx, ETA)
    k = const_rgb(st, ctx, K)
    if ti.static(variants.spectral()):
        table = ti.static(conductors.fields())
        row = ti.cast(const(st, ctx, MATERIAL), ti.i32)
        if row >= 0:
            for i in range(ti.static(variants.lanes())):     # a runtime loop: one table read in the megakernel
                ek = conductors.eta_k(table, row, ctx.lam[i])
                eta[i] = ek[0]
                k[i] = ek[1]
        te = ti.cast(const(st, ctx, ETA_TABLE), ti.i32)
        if te >= 0:
            eta = table_eval(st, te, ctx.lam)
        tk = ti.cast(const(st, ctx, K_TABLE), ti.i32)
        if tk >= 0:
            k = table_eval(st, tk, ctx.lam)
    return eta, k


@ti.func
def _reflection(cos_i, eta, k, none):
    """One lane's Mueller matrix of reflection in the s/p frames (a perfect mirror, none = 1: η = 0, k = 1, as
    Mitsuba's ``none``)."""
    e = eta
    kk = k
    if none != 0:
        e = 0.0
        kk = 1.0
    return mu.specular_reflection(cos_i, e, kk)


@ti.func
def conductor_mueller(p, wi, wo, n):
    """spectral_polarized: reflection about the (micro)normal n by the complex Fresnel equations per lane
    (Mitsuba 3's polarized conductor / roughconductor), light arriving along −wo and leaving along wi."""
    c = wo.dot(n)
    cs_out, cs_in = mu.interface_rotations(n, wi, wo)
    return mu.rotate_lanes(mu.from_lanes(_reflection(c, p.eta[0], p.k[0], p.none),
                                         _reflection(c, p.eta[1], p.k[1], p.none),
                                         _reflection(c, p.eta[2], p.k[2], p.none),
                                         _reflection(c, p.eta[3], p.k[3], p.none)), cs_out, cs_in)


@dirac
class Conductor:
    NAME = "conductor"
    KEYS = CONDUCTOR_KEYS
    FLAGS = DELTA
    N_CONST = N_CONDUCTOR
    Params = struct(specular=SPECTRUM, eta=SPECTRUM, k=SPECTRUM, none=ti.i32)
    MUELLER_COLOURLESS = True      # mueller reads the IOR only (bsdfs/base.py)

    constants = staticmethod(conductor_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        eta, k = conductor_ior(st, ctx)
        return Conductor.Params(specular=slot_rgb(st, ctx, _SPEC), eta=eta, k=k,
                                none=ti.cast(const(st, ctx, NONE), ti.i32))

    @staticmethod
    @ti.func
    def dlog(p, wi, reflected):
        """∂ ln F/∂cos θi per channel (0 for ``material: none``: F = 1)."""
        res = spec(0.0)
        if p.none == 0 and wi[2] > 0.0:
            res = fresnel_conductor_dcos(wi[2], p.eta, p.k) / ti.max(fresnel_conductor(wi[2], p.eta, p.k), 1e-20)
        return res

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        if wi[2] > 0.0:
            F = spec(1.0)
            if p.none == 0:
                F = fresnel_conductor(wi[2], p.eta, p.k)
            s = BsdfSample(wo=reflect(wi), weight=p.specular * F, pdf=1.0, eta=1.0, delta=1, valid=1)
        return s

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        return conductor_mueller(p, wi, wo, vec3(0.0, 0.0, 1.0))
