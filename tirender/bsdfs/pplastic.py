"""Polarized plastic, Mitsuba 3's ``pplastic`` (src/bsdfs/pplastic.cpp, after Baek et al. 2018): a rough specular
reflection off a dielectric interface added to a diffuse lobe attenuated by a smooth refraction in and out.
One-sided: 0 unless cos θi > 0 and cos θo > 0. With h = normalize(wi + wo), F(c) = fresnel_dielectric(c, η),
ρ = diffuse_reflectance, S = specular_reflectance and D, G the microfacet distribution (Beckmann (default) or GGX,
isotropic ``alpha`` or anisotropic ``alpha_u`` / ``alpha_v``, as roughconductor):

    rgb, mono, spectral (Mitsuba's unpolarized branch):
        eval = S F(wi·h) D(h) G(wi, wo, h) / (4 cos θi)  +  ρ (1 − F(cos θo)) (1 − F(cos θi)) cos θo / π
    spectral_polarized (``mueller``, the same lanes' [0, 0]): per wavelength
        M = S · R(wo·h) D G / (4 cos θi)  +  ρ · T_i Δ T_o cos θo / π
    R: the Mueller matrix of specular reflection about h (its s axes h × (−wo), h × wi), T_o = specular_transmission
    (cos θo, η) refracting the light in, Δ a depolarizer (subsurface scattering), T_i = specular_transmission(cos θt,
    1/η) refracting it out along wi (cos θt of the refracted wi), in the s/p frames of the plane of incidence
    about n; both rotated to the implicit Stokes frames of −wo and wi (Mitsuba's rotate_mueller_basis). The diffuse
    part is weakly polarized, at 90° to the specular part.

Sampling (Mitsuba's): the specular lobe with probability P_s = mean(S) / (mean(ρ) + mean(S)) (a visible normal m,
wo = reflect(wi, m), m as Mitsuba maps u2 to it), else a cosine-weighted direction; pdf = P_s D(h) G1(wi, h) / (4 cos θi) [wi·h > 0, wo·h > 0]
+ (1 − P_s) cos θo / π, weight = eval / pdf. Difference to Mitsuba: the means are the point's texture values (Mitsuba:
the textures' means; the same for constant textures; only the variance differs). ``sample_visible: false`` is
refused (tirender samples visible normals only).

η: ``eta`` (a scalar texture, Mitsuba's property) or int_ior / ext_ior (default polypropylene / air; Mitsuba refuses
eta with int_ior; with eta it ignores ext_ior, and so does this); either way the pool parameter ``<id>.eta`` (Mitsuba's
traverse name). Differentiable (Mitsuba's traverse): diffuse_reflectance, specular_reflectance (RGB), alpha (or
alpha_u, alpha_v), eta, by hand-written adjoints; analytic direction derivatives. In spectral_polarized the
parameters' derivatives are those of the unpolarized value (the Mueller matrix normalised to [0, 0] = 1 is held, as
for every model but polarizer and retarder; Mitsuba's prb refuses the polarized variants).
"""
import taichi as ti

from ..core import mueller as mu
from ..core.math import INV_PI, vec2, vec3
from ..core.warp import square_to_cosine_hemisphere
from ..errors import ConfigError
from ..schema import Ior, Texture
from ..variants import SPECTRUM, struct
from .base import (SMOOTH, BsdfSample, const, invalid_sample, one_sided, slot_float, slot_float_adjoint, slot_rgb,
                   slot_rgb_adjoint)
from .fresnel import fresnel_dielectric, fresnel_dielectric_dcos, fresnel_dielectric_deta, reflect_m
from .microfacet import coat_grad_dirs, coated_pdf, ggx_aniso_sample_visible, reflection_lobe, sample_visible_normal
from .roughconductor import (ANISO_KEYS, DISTRIBUTION, SAMPLE_VISIBLE, distribution_constant, fetch_alpha,
                             fetch_alpha_adjoint)

_RHO, _SPEC, _ALPHA, _AU, _AV, _ETA = 0, 1, 2, 3, 4, 5    # texture slots
DIST = 0                                                  # constant: the distribution (microfacet.signed_alpha)


class Defaulted(float):
    """A key's default value, recognisable by its type (was the key given, or defaulted?)."""


def eta_from_iors(values, file, key):
    """The values with ``eta`` filled in as int_ior / ext_ior where it is not given (a Defaulted int_ior: one
    ConfigError where eta and int_ior are both given, or where int_ior equals ext_ior: Mitsuba's checks)."""
    if values.get("eta") is not None:
        if not isinstance(values["int_ior"], Defaulted):
            raise ConfigError("give either eta or int_ior / ext_ior, not both (Mitsuba's rule)", file,
                              f"{key}.int_ior")
        return values
    i, e = values["int_ior"], values["ext_ior"]
    if i == e:
        raise ConfigError(f"int_ior and ext_ior must differ (both {i:g}; Mitsuba's rule)", file, f"{key}.int_ior")
    return dict(values, eta=i / e)


@ti.func
def _fresnel(c, eta):
    f, ct, ei, et = fresnel_dielectric(c, eta)
    return f


@ti.func
def prob_specular(p):
    """Mitsuba's m_specular_sampling_weight mean(S) / (mean(ρ) + mean(S)) at the point's values."""
    s = p.specular.sum()
    d = p.reflectance.sum()
    res = 0.5
    if s + d > 0.0:
        res = s / (s + d)
    return res


@ti.func
def _diffuse_terms(p, wi, wo):
    """(r_i, r_o, (1 − r_o)(1 − r_i) cos θo / π): the diffuse lobe is ρ times the last."""
    r_i = _fresnel(wi[2], p.eta)
    r_o = _fresnel(wo[2], p.eta)
    return r_i, r_o, (1.0 - r_o) * (1.0 - r_i) * wo[2] * INV_PI


@one_sided
class PPlastic:
    NAME = "pplastic"
    KEYS = (Texture("diffuse_reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo ρ of the diffuse lobe"),
            Texture("specular_reflectance", 3, default=1.0, lo=0.0, hi=1.0,
                    doc="scale S of the specular lobe"),
            *ANISO_KEYS, DISTRIBUTION, SAMPLE_VISIBLE,
            Ior("int_ior", default=Defaulted(1.49), doc="interior IOR (polypropylene; not with eta)"),
            Ior("ext_ior", default=1.000277, doc="exterior IOR (air)"),
            Texture("eta", 1, default=None, lo=0.0, hi=100.0, strict_lo=True, raw=True,
                    doc="relative IOR interior / exterior (default int_ior / ext_ior; parameter `<id>.eta` either "
                        "way)"))
    FLAGS = SMOOTH
    N_CONST = 1
    Params = struct(reflectance=SPECTRUM, specular=SPECTRUM, alpha=vec2, eta=float)

    @staticmethod
    def complete(values, file, key, variant):
        return eta_from_iors(values, file, key)

    @staticmethod
    def constants(values, file, key):
        return [distribution_constant(values, file, key)]

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        return PPlastic.Params(reflectance=slot_rgb(st, ctx, _RHO), specular=slot_rgb(st, ctx, _SPEC),
                               alpha=fetch_alpha(st, ctx, _ALPHA, _AU, _AV, const(st, ctx, DIST)),
                               eta=slot_float(st, ctx, _ETA))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _RHO, g.reflectance)
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        fetch_alpha_adjoint(st, ctx, _ALPHA, _AU, _AV, g.alpha)
        slot_float_adjoint(st, ctx, _ETA, g.eta)

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        r_i, r_o, d = _diffuse_terms(p, wi, wo)
        return p.specular * (_fresnel(wi.dot(h), p.eta) * lobe) + p.reflectance * d

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return coated_pdf(prob_specular(p), wi, wo, p.alpha)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        wo = vec3(0.0)
        if u1 < prob_specular(p):
            m = vec3(0.0, 0.0, 1.0)
            if p.alpha[0] > 0.0:          # GGX: Mitsuba's mapping of u2 (the same normal for the same u2)
                m = ggx_aniso_sample_visible(wi, p.alpha[0], p.alpha[1], u2)
            else:
                m, pm = sample_visible_normal(wi, p.alpha, u2)
            wo = reflect_m(wi, m)
        else:
            wo = square_to_cosine_hemisphere(u2)
        s = invalid_sample()
        if wo[2] > 0.0:
            pd = PPlastic.pdf(p, wi, wo)
            if pd > 0.0:
                s = BsdfSample(wo=wo, weight=PPlastic.f(p, wi, wo) / pd, pdf=pd, eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂(ρ, S, (α_u, α_v), η)."""
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        c = wi.dot(h)
        F = _fresnel(c, p.eta)
        r_i, r_o, d = _diffuse_terms(p, wi, wo)
        cs = d_out.dot(p.specular)
        cd = d_out.dot(p.reflectance) * wo[2] * INV_PI
        g = p
        g.reflectance = d_out * d
        g.specular = d_out * (F * lobe)
        g.alpha = cs * F * dlobe
        g.eta = (cs * lobe * fresnel_dielectric_deta(c, p.eta)
                 - cd * (fresnel_dielectric_deta(wo[2], p.eta) * (1.0 - r_i)
                         + (1.0 - r_o) * fresnel_dielectric_deta(wi[2], p.eta)))
        return g

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """The specular lobe through h and wi·h (reflection_grad_dirs), the diffuse one through cos θi, cos θo."""
        gwi, gwo = coat_grad_dirs(wi, wo, p.alpha, p.eta, d_out.dot(p.specular))
        r_i, r_o, d = _diffuse_terms(p, wi, wo)
        cd = d_out.dot(p.reflectance) * INV_PI
        gwi[2] -= cd * (1.0 - r_o) * fresnel_dielectric_dcos(wi[2], p.eta) * wo[2]
        gwo[2] += cd * (1.0 - r_i) * ((1.0 - r_o) - fresnel_dielectric_dcos(wo[2], p.eta) * wo[2])
        return gwi, gwo

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        """The per-lane Mueller matrices of the module doc (Mitsuba's polarized eval in radiance mode: light arriving
        along −wo, leaving along wi), in the implicit frames of −wo and wi."""
        res = mu.zero_lanes()
        if wi[2] > 0.0 and wo[2] > 0.0:
            h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
            spec_m = mu.interface_to_implicit(mu.specular_reflection(wo.dot(h), p.eta, 0.0), h, wi, wo) * lobe
            t_o = mu.specular_transmission(wo[2], p.eta)                 # into the material along −wo
            r_i, cos_t, eta_it, eta_ti = fresnel_dielectric(wi[2], p.eta)
            t_i = mu.specular_transmission(-cos_t, 1.0 / p.eta)         # out of it along wi (from cos θt inside)
            diff = mu.mat4(0.0)                                          # T_i Δ T_o: Δ keeps S0 only
            for r in ti.static(range(4)):
                for c in ti.static(range(4)):
                    diff[r, c] = t_i[r, 0] * t_o[0, c]
            diff_m = mu.interface_to_implicit(diff, vec3(0.0, 0.0, 1.0), wi, wo) * (wo[2] * INV_PI)
            res = mu.from_lanes(p.specular[0] * spec_m + p.reflectance[0] * diff_m,
                                p.specular[1] * spec_m + p.reflectance[1] * diff_m,
                                p.specular[2] * spec_m + p.reflectance[2] * diff_m,
                                p.specular[3] * spec_m + p.reflectance[3] * diff_m)
        return res
