"""Smooth plastic, Mitsuba 3's ``plastic``: a smooth dielectric coat (Dirac reflection) over a
diffuse base, interreflections between them accounted for by the diffuse Fresnel reflectance.
One-sided: 0 unless cos θi > 0 and cos θo > 0.

    eval (diffuse lobe only; the coat is a Dirac lobe) =
        ρ' (1/π) (1/η²) cos θo (1 - F(cos θi)) (1 - F(cos θo)),
    ρ' = ρ / (1 - Fdr_int)  (nonlinear: ρ / (1 - ρ Fdr_int)),  Fdr_int = fresnel_diffuse_reflectance(1/η)
with F = fresnel_dielectric(., η), η = int_ior / ext_ior, ρ = diffuse_reflectance.
Sampling (as Mitsuba): the coat with probability
    P_s = F_i w / (F_i w + (1 - F_i)(1 - w)),   w = mean(specular) / (mean(ρ) + mean(specular)),
returning wo = reflect(wi), pdf = P_s, delta = 1, weight = specular F_i / P_s; otherwise a
cosine-weighted wo with pdf (1 - P_s) cos θo / π and weight = eval / pdf.
Difference to Mitsuba: w comes from the point's texture values (Mitsuba: the textures' means);
this changes only the variance.
Differentiable: diffuse_reflectance (RGB) through the diffuse lobe, with analytic direction
derivatives; specular_reflectance only scales the Dirac coat, which detached PRB does not
differentiate (as Mitsuba's prb), so its gradient is 0.
"""
import taichi as ti

from ..core.math import INV_PI, vec3
from ..core.warp import square_to_cosine_hemisphere
from ..schema import Bool, Ior, Texture
from ..variants import SPECTRUM, spec, struct
from .base import DELTA, SMOOTH, BsdfSample, const, invalid_sample, one_sided, slot_rgb, slot_rgb_adjoint
from .dielectric import ior_constants
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, reflect

_RHO, _SPEC = 0, 1        # texture slots
ETA, FDR_INT, NONLINEAR = 0, 1, 2   # constants


@ti.func
def _rho_eff(p):
    """(ρ', ∂ρ'/∂ρ): ρ / (1 - Fdr_int), or ρ / (1 - ρ Fdr_int) when nonlinear."""
    den = 1.0 - p.fdr_int * ti.select(p.nonlinear > 0, p.reflectance, spec(1.0))
    den = ti.max(den, 1e-8)
    drho = ti.select(p.nonlinear > 0, 1.0 / (den * den), 1.0 / den)
    return p.reflectance / den, drho


@ti.func
def _prob_specular(p, f_i):
    s_mean = p.specular.sum() / 3.0
    d_mean = p.reflectance.sum() / 3.0
    w = 0.5
    if s_mean + d_mean > 0.0:
        w = s_mean / (s_mean + d_mean)
    ps = f_i * w
    pd = (1.0 - f_i) * (1.0 - w)
    res = w
    if ps + pd > 0.0:
        res = ps / (ps + pd)
    return res


@ti.func
def _fresnel(c, eta):
    f, ct, ei, et = fresnel_dielectric(c, eta)
    return f


@one_sided
class Plastic:
    NAME = "plastic"
    KEYS = (Texture("diffuse_reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo of the diffuse base"),
            Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the coat"),
            Ior("int_ior", default=1.49, doc="interior IOR (polypropylene)"),
            Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
            Bool("nonlinear", default=False, doc="Mitsuba's nonlinear color shift: ρ / (1 - ρ Fdr_int)"))
    FLAGS = SMOOTH | DELTA
    Params = struct(reflectance=SPECTRUM, specular=SPECTRUM, eta=float, fdr_int=float, nonlinear=ti.i32)

    @staticmethod
    def constants(values, file, key):
        eta = ior_constants(values, file, key)[0]
        return [eta, _fdr_host(1.0 / eta), 1.0 if values.get("nonlinear") else 0.0]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return Plastic.Params(reflectance=slot_rgb(st, ctx, _RHO), specular=slot_rgb(st, ctx, _SPEC),
                              eta=const(st, ctx, ETA), fdr_int=const(st, ctx, FDR_INT),
                              nonlinear=ti.cast(const(st, ctx, NONLINEAR), ti.i32))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _RHO, g.reflectance)

    @staticmethod
    @ti.func
    def _scale(p, wi, wo):
        """(1/π)(1/η²) cos θo (1 - F_i)(1 - F_o): the diffuse lobe is ρ' times this."""
        return INV_PI / (p.eta * p.eta) * wo[2] * (1.0 - _fresnel(wi[2], p.eta)) * (1.0 - _fresnel(wo[2], p.eta))

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        rho, drho = _rho_eff(p)
        return rho * Plastic._scale(p, wi, wo)

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return (1.0 - _prob_specular(p, _fresnel(wi[2], p.eta))) * wo[2] * INV_PI

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        f_i = _fresnel(wi[2], p.eta)
        ps = _prob_specular(p, f_i)
        if u1 < ps:
            if ps > 0.0:
                s = BsdfSample(wo=reflect(wi), weight=p.specular * (f_i / ps), pdf=ps, eta=1.0, delta=1, valid=1)
        else:
            wo = square_to_cosine_hemisphere(u2)
            pd = (1.0 - ps) * wo[2] * INV_PI
            if pd > 0.0 and wo[2] > 0.0:
                s = BsdfSample(wo=wo, weight=Plastic.f(p, wi, wo) / pd, pdf=pd, eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂diffuse_reflectance (the only parameter of the non-Dirac lobe)."""
        rho, drho = _rho_eff(p)
        g = Plastic.Params()
        g.reflectance = d_out * drho * Plastic._scale(p, wi, wo)
        return g

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        rho, drho = _rho_eff(p)
        c = d_out.dot(rho) * INV_PI / (p.eta * p.eta)
        f_i = _fresnel(wi[2], p.eta)
        f_o = _fresnel(wo[2], p.eta)
        gwi = vec3(0.0, 0.0, -c * wo[2] * fresnel_dielectric_dcos(wi[2], p.eta) * (1.0 - f_o))
        gwo = vec3(0.0, 0.0, c * (1.0 - f_i) * ((1.0 - f_o) - wo[2] * fresnel_dielectric_dcos(wo[2], p.eta)))
        return gwi, gwo


def _fdr_host(eta):
    """fresnel_diffuse_reflectance on the host (Mitsuba's fitted polynomials, fresnel.h)."""
    if eta < 1.0:
        return -1.4399 * eta * eta + 0.7099 * eta + 0.6681 + 0.0636 / eta
    inv = 1.0 / eta
    inv2 = inv * inv
    inv3 = inv2 * inv
    inv4 = inv3 * inv
    inv5 = inv4 * inv
    return 0.919317 - 3.4793 * inv + 6.75335 * inv2 - 7.80989 * inv3 + 4.98554 * inv4 - 1.36881 * inv5
