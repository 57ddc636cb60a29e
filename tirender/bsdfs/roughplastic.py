"""Rough plastic, exactly Mitsuba 3's ``roughplastic`` (Beckmann (default) or GGX, isotropic α as
Mitsuba, visible normal sampling).
One-sided: 0 unless cos θi > 0 and cos θo > 0.

    eval = specular * F(wi·h) D G / (4 cos θi)                                         (coat)
         + ρ' (1/π) (1/η²) cos θo t(cos θi) t(cos θo),   ρ' = ρ / (1 - R_int)   (nonlinear: ρ / (1 - ρ R_int))
with h = normalize(wi + wo), F = fresnel_dielectric(., η), ρ = diffuse_reflectance and, as
Mitsuba computes them at load time (``parameters_changed``, reproduced in numpy by
``microfacet.rough_plastic_tables``; matches Mitsuba 3.9 scalar_rgb's eval within 4e-6 relative):
    t(μ)   the rough interface's external transmittance, 64 entries over μ = linspace(0, 1),
           linearly interpolated (Mitsuba's lerp_gather), and
    R_int  its internal reflectance 2 ∫ R_{1/η}(μ) μ dμ (the 64-point mean).
Both depend on the row's α (the roughness value; a *textured* roughness — a tirender extension,
Mitsuba's α is a scalar — uses the texture's ``value``, else 0.1, for the tables) and are
constants: changing ``<id>.roughness`` at run time changes the coat only, and the α gradient is
the coat's (Mitsuba does not differentiate the tables either).

Sampling (as Mitsuba): the coat is chosen with probability
    P_s = (1 - t_i) w / ((1 - t_i) w + t_i (1 - w)),  t_i = t(cos θi),
    w = mean(specular) / (mean(diffuse_reflectance) + mean(specular))
(difference to Mitsuba: w from the point's texture values, Mitsuba uses the textures' means —
this changes only the variance), otherwise a cosine-weighted direction;
pdf = P_s D(h) G1(wi, h) / (4 cos θi) + (1 - P_s) cos θo / π, weight = eval / pdf.
Differentiable: diffuse_reflectance, specular_reflectance (RGB), roughness α (coat); analytic
direction derivatives (the tables are piecewise linear in cos θ: their derivative is the
segment's slope).
"""
import taichi as ti

from ..core.math import INV_PI, vec2, vec3
from ..core.warp import square_to_cosine_hemisphere
from ..schema import Bool, Ior, Texture
from ..variants import SPECTRUM, spec, struct
from .base import (SMOOTH, BsdfSample, const, invalid_sample, one_sided, slot_float, slot_float_adjoint, slot_rgb,
                   slot_rgb_adjoint)
from .dielectric import ior_constants
from .fresnel import fresnel_dielectric, reflect_m
from .microfacet import (ROUGH_TRANSMITTANCE_RES, coat_grad_dirs, coated_pdf, reflection_lobe, rough_plastic_tables,
                         sample_visible_normal)
from .microfacet import signed_alpha
from .roughconductor import DISTRIBUTION, ROUGHNESS, SAMPLE_VISIBLE, distribution_constant

_RHO, _SPEC, _ALPHA = 0, 1, 2   # texture slots
ETA, R_INT, NONLINEAR, DIST, TABLE = 0, 1, 2, 3, 4   # constants: η, internal reflectance, switch, distribution, t(μ)


def _table_alpha(values):
    a = values.get("roughness", 0.1)
    if isinstance(a, dict):
        a = a.get("value", 0.1)
    try:
        return float(sum(a) / len(a)) if isinstance(a, (list, tuple)) else float(a)
    except (TypeError, ValueError):
        return 0.1


@ti.func
def _lerp_gather(st: ti.template(), ctx, x):
    """(t(x), dt/dx): Mitsuba's lerp_gather over the transmittance table (x = cos θ in [0, 1])."""
    n = ROUGH_TRANSMITTANCE_RES
    xs = ti.max(x, 0.0) * (n - 1)
    i = ti.min(ti.cast(xs, ti.i32), n - 2)
    v0 = const(st, ctx, TABLE + i)
    v1 = const(st, ctx, TABLE + i + 1)
    return v0 + (v1 - v0) * (xs - i), (v1 - v0) * (n - 1)


@ti.func
def _rho_eff(p):
    """(ρ', ∂ρ'/∂ρ) of the diffuse base: ρ / (1 - R_int), or ρ / (1 - ρ R_int) when nonlinear."""
    den = 1.0 - p.r_int * ti.select(p.nonlinear > 0, p.reflectance, spec(1.0))
    den = ti.max(den, 1e-8)
    rho = p.reflectance / den
    drho = ti.select(p.nonlinear > 0, 1.0 / (den * den), 1.0 / den)
    return rho, drho


@ti.func
def _diffuse_scale(p, wo):
    """(1/π)(1/η²) cos θo t_i t_o: the diffuse lobe is ρ' times this."""
    return INV_PI / (p.eta * p.eta) * wo[2] * p.t_i * p.t_o


@ti.func
def prob_specular(p):
    """Probability of sampling the coat (Mitsuba's m_specular_sampling_weight scheme)."""
    s_mean = p.specular.sum() / 3.0
    d_mean = p.reflectance.sum() / 3.0
    tot = s_mean + d_mean
    w = 0.5
    if tot > 0.0:
        w = s_mean / tot
    ps = (1.0 - p.t_i) * w
    pd = p.t_i * (1.0 - w)
    res = w
    if ps + pd > 0.0:
        res = ps / (ps + pd)
    return res


@one_sided
class RoughPlastic:
    NAME = "roughplastic"
    KEYS = (Texture("diffuse_reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo of the diffuse base"),
            Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1.0, doc="scale of the coat"),
            ROUGHNESS, DISTRIBUTION, SAMPLE_VISIBLE,
            Ior("int_ior", default=1.49, doc="interior IOR (polypropylene)"),
            Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
            Bool("nonlinear", default=False, doc="Mitsuba's nonlinear color shift: ρ / (1 - ρ R_int)"))
    FLAGS = SMOOTH
    N_CONST = TABLE + ROUGH_TRANSMITTANCE_RES
    Params = struct(reflectance=SPECTRUM, specular=SPECTRUM, alpha=vec2, eta=float, r_int=float,
                             nonlinear=ti.i32, t_i=float, dt_i=float, t_o=float, dt_o=float)

    @staticmethod
    def constants(values, file, key):
        eta = ior_constants(values, file, key)[0]
        table, r_int = rough_plastic_tables(_table_alpha(values), eta,
                                            values.get("distribution", "beckmann") == "beckmann")
        return ([eta, r_int, 1.0 if values.get("nonlinear") else 0.0, distribution_constant(values, file, key)]
                + [float(v) for v in table])

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        """The row's values; t_i / t_o (the table at cos θi / cos θo) are filled by ``with_dirs``."""
        a = slot_float(st, ctx, _ALPHA)
        return RoughPlastic.Params(reflectance=slot_rgb(st, ctx, _RHO), specular=slot_rgb(st, ctx, _SPEC),
                                   alpha=signed_alpha(a, a, const(st, ctx, DIST)),
                                   eta=const(st, ctx, ETA),
                                   r_int=const(st, ctx, R_INT), nonlinear=ti.cast(const(st, ctx, NONLINEAR), ti.i32),
                                   t_i=0.0, dt_i=0.0, t_o=0.0, dt_o=0.0)

    @staticmethod
    @ti.func
    def with_dirs(st: ti.template(), ctx, p, wi, wo):
        p.t_i, p.dt_i = _lerp_gather(st, ctx, wi[2])
        p.t_o, p.dt_o = _lerp_gather(st, ctx, wo[2])
        return p

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _RHO, g.reflectance)
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        slot_float_adjoint(st, ctx, _ALPHA, g.alpha.sum())   # isotropic: α_u = α_v = α

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        F, ct, ei, et = fresnel_dielectric(wi.dot(h), p.eta)
        rho, drho = _rho_eff(p)
        return p.specular * (F * lobe) + rho * _diffuse_scale(p, wo)

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return coated_pdf(prob_specular(p), wi, wo, p.alpha)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        """The sampled direction only (in ``s.wo``); ``sample_at`` evaluates it."""
        s = invalid_sample()
        wo = vec3(0.0)
        if u1 < prob_specular(p):
            m, pm = sample_visible_normal(wi, p.alpha, u2)
            wo = reflect_m(wi, m)
        else:
            wo = square_to_cosine_hemisphere(u2)
        s.wo = wo
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂(diffuse_reflectance, specular_reflectance, α)."""
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        F, ct, ei, et = fresnel_dielectric(wi.dot(h), p.eta)
        rho, drho = _rho_eff(p)
        g = p
        g.reflectance = d_out * drho * _diffuse_scale(p, wo)
        g.specular = d_out * (F * lobe)
        g.alpha = (d_out * p.specular).sum() * (F * dlobe)
        return g

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """Coat: the reflection lobe with the dielectric F(wi·h); base: c wo_z t(wi_z) t(wo_z)."""
        gwi, gwo = coat_grad_dirs(wi, wo, p.alpha, p.eta, d_out.dot(p.specular))
        rho, drho = _rho_eff(p)
        cd = d_out.dot(rho) * INV_PI / (p.eta * p.eta)
        gwi[2] += cd * wo[2] * p.dt_i * p.t_o
        gwo[2] += cd * p.t_i * (p.t_o + wo[2] * p.dt_o)
        return gwi, gwo


def _tabulated(cls):
    """Replace the ``*_at`` functions @leaf generated by versions that look the transmittance
    table up at cos θi / cos θo (``with_dirs``) before calling the pure functions."""
    fetch, with_dirs, fetch_adjoint = cls.fetch, cls.with_dirs, cls.fetch_adjoint
    f, pdf, sample, f_adjoint, f_grad_dirs = cls.f, cls.pdf, cls.sample, cls.f_adjoint, cls.f_grad_dirs

    @ti.func
    def eval_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return f(with_dirs(st, ctx, fetch(st, ctx), wi, wo), wi, wo)

    @ti.func
    def pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        return pdf(with_dirs(st, ctx, fetch(st, ctx), wi, wo), wi, wo)

    @ti.func
    def eval_pdf_at(st: ti.template(), ctx, wi, wo, inner: ti.template()):
        p = with_dirs(st, ctx, fetch(st, ctx), wi, wo)
        return f(p, wi, wo), pdf(p, wi, wo)

    @ti.func
    def sample_at(st: ti.template(), ctx, wi, u1, u2, inner: ti.template()):
        p = with_dirs(st, ctx, fetch(st, ctx), wi, wi)
        s = sample(p, wi, u1, u2)
        wo = s.wo
        res = invalid_sample()
        if wi[2] > 0.0 and wo[2] > 0.0:
            p = with_dirs(st, ctx, p, wi, wo)
            pd = pdf(p, wi, wo)
            if pd > 0.0:
                res = BsdfSample(wo=wo, weight=f(p, wi, wo) / pd, pdf=pd, eta=1.0, delta=0, valid=1)
        return res

    @ti.func
    def adjoint_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        fetch_adjoint(st, ctx, f_adjoint(with_dirs(st, ctx, fetch(st, ctx), wi, wo), wi, wo, d_out))

    @ti.func
    def grad_dirs_at(st: ti.template(), ctx, wi, wo, d_out, inner: ti.template()):
        return f_grad_dirs(with_dirs(st, ctx, fetch(st, ctx), wi, wo), wi, wo, d_out)

    for name, fn in (("eval_at", eval_at), ("pdf_at", pdf_at), ("eval_pdf_at", eval_pdf_at),
                     ("sample_at", sample_at), ("adjoint_at", adjoint_at), ("grad_dirs_at", grad_dirs_at)):
        setattr(cls, name, staticmethod(fn))
    return cls


RoughPlastic = _tabulated(RoughPlastic)
