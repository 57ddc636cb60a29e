"""Rough conductor (Mitsuba 3 ``roughconductor``; Beckmann (default, as Mitsuba) or GGX, isotropic α
or anisotropic α_u / α_v, visible normal sampling; sample_visible: false is not supported).
One-sided: 0 unless cos θi > 0 and cos θo > 0.

Roughness: ``roughness`` (alias ``alpha``, default 0.1) sets α_u = α_v; ``alpha_u`` and ``alpha_v``
(both, and then not ``alpha``, as Mitsuba) set them apart. α_u is the roughness along the shading
frame's s axis, which is dp/du projected onto the shading normal (core/interaction.py, as
Mitsuba's sh_frame): on a mesh with uvs (rectangle: u along its local x, as Mitsuba's) the
highlight is oriented as in Mitsuba; on a mesh without uvs (or a degenerate uv triangle) s is
``coordinate_system(n)``'s first axis, an arbitrary but fixed direction around the normal.
With alpha_u / alpha_v the pool parameters are ``<id>.alpha_u``, ``<id>.alpha_v``; the isotropic
``<id>.roughness`` still exists (its default) but is unused (gradient 0).

    eval = specular * F(wi·h) D(h) G(wi, wo, h) / (4 cos θi),   h = normalize(wi + wo)
F = fresnel_conductor(wi·h, η, k), or 1 for ``material: none``. Sampling: h ~ D_wi (visible
normals), wo = reflect(wi, h); pdf = D_wi(h) / (4 wo·h); weight = specular F G1(wo, h).
Differentiable: specular_reflectance (RGB), roughness α (or α_u, α_v); analytic direction
derivatives for normal-map gradients; attached sampling (``warp``: bsdfs/halfwarp.py).
"""
import taichi as ti

from ..core.math import vec2, vec3
from ..errors import ConfigError
from ..schema import Bool, Choice, Texture
from ..variants import SPECTRUM, spec, struct
from .base import (SMOOTH, BsdfSample, const, invalid_sample, one_sided, slot_float,
                   slot_float_adjoint, slot_rgb, slot_rgb_adjoint)
from .conductor import CONDUCTOR_KEYS, N_CONDUCTOR, NONE, conductor_constants, conductor_ior, conductor_mueller
from .fresnel import fresnel_conductor, fresnel_conductor_dcos, reflect_m
from .microfacet import (ALPHA_MIN, half_vector, signed_alpha, signed_alpha_sign, reflection_grad_dirs, reflection_lobe, reflection_pdf, sample_visible_normal,
                         smith_g1)

_SPEC, _ALPHA, _AU, _AV = 0, 1, 2, 3  # texture slots
DIST = N_CONDUCTOR    # constant: the distribution (after the conductor's)

class _Default(float):
    """A default value recognisable by identity (was the key given, or defaulted?)."""


# α below microfacet.ALPHA_MIN = 1e-4 is raised to it where it is read (Mitsuba's MicrofacetDistribution::configure),
# with no derivative there
ROUGHNESS = Texture("roughness", 1, default=_Default(0.1), lo=0.0, hi=4.0, aliases=("alpha",),
                    doc="roughness α (parameter `<id>.roughness`; values below 1e-4 read as 1e-4, as Mitsuba)")
ALPHA_U = Texture("alpha_u", 1, default=None, lo=0.0, hi=4.0,
                  doc="anisotropic roughness along the shading tangent s = dp/du (with alpha_v; not with "
                      "alpha; parameter `<id>.alpha_u`)")
ALPHA_V = Texture("alpha_v", 1, default=None, lo=0.0, hi=4.0,
                  doc="anisotropic roughness along t = n × s (with alpha_u; parameter `<id>.alpha_v`)")
ANISO_KEYS = (ROUGHNESS, ALPHA_U, ALPHA_V)
DISTRIBUTION = Choice("distribution", ("beckmann", "ggx"), default="beckmann",
                      doc="microfacet distribution (Mitsuba's default: beckmann)")
SAMPLE_VISIBLE = Bool("sample_visible", default=True,
                      doc="visible normal sampling (only true is supported)")


def check_roughness(values, file, key):
    """Mitsuba's rule: alpha_u and alpha_v together, and then no alpha."""
    u, v = values.get("alpha_u") is not None, values.get("alpha_v") is not None
    if u != v:
        raise ConfigError("give both alpha_u and alpha_v (anisotropic roughness)", file,
                          f"{key}.{'alpha_v' if u else 'alpha_u'}")
    if u and values.get("roughness") is not ROUGHNESS.default:
        raise ConfigError("give either alpha (roughness) or alpha_u/alpha_v", file, f"{key}.roughness")


@ti.func
def fetch_alpha(st: ti.template(), ctx, iso, au, av, sign):
    """The row's signed (α_u, α_v): slots au, av when the row has them, else slot iso twice."""
    a = vec2(0.0)
    if st.bsdf_tex[ctx.b, au] != -1:    # -1: no alpha_u slot
        a = vec2(slot_float(st, ctx, au), slot_float(st, ctx, av))
    else:
        r = slot_float(st, ctx, iso)
        a = vec2(r, r)
    return signed_alpha(a[0], a[1], sign)


@ti.func
def fetch_alpha_adjoint(st: ti.template(), ctx, iso, au, av, g):
    """Adjoint of fetch_alpha: g = (∂/∂α_u, ∂/∂α_v) (0 where α was raised to ALPHA_MIN)."""
    if st.bsdf_tex[ctx.b, au] != -1:    # -1: no alpha_u slot
        slot_float_adjoint(st, ctx, au, ti.select(slot_float(st, ctx, au) > ALPHA_MIN, g[0], 0.0))
        slot_float_adjoint(st, ctx, av, ti.select(slot_float(st, ctx, av) > ALPHA_MIN, g[1], 0.0))
    elif slot_float(st, ctx, iso) > ALPHA_MIN:
        slot_float_adjoint(st, ctx, iso, g[0] + g[1])


def distribution_constant(values, file, key):
    """The row's distribution constant: the sign of its signed roughness (microfacet.signed_alpha)."""
    check_roughness(values, file, key)
    if values.get("sample_visible") is False:
        raise ConfigError("sample_visible: false is not supported", file, f"{key}.sample_visible")
    return signed_alpha_sign(values.get("distribution", "beckmann"))


def rough_conductor_constants(values, file, key):
    return list(conductor_constants(values, file, key)) + [distribution_constant(values, file, key)]


@one_sided
class RoughConductor:
    NAME = "roughconductor"
    KEYS = CONDUCTOR_KEYS[:1] + ANISO_KEYS + (DISTRIBUTION, SAMPLE_VISIBLE) + CONDUCTOR_KEYS[1:]
    FLAGS = SMOOTH
    N_CONST = DIST + 1
    Params = struct(specular=SPECTRUM, alpha=vec2, eta=SPECTRUM, k=SPECTRUM, none=ti.i32)
    MUELLER_COLOURLESS = True      # mueller reads the IOR only (bsdfs/base.py)

    constants = staticmethod(rough_conductor_constants)

    @staticmethod
    @ti.func
    def fetch(st: ti.template(), ctx):
        eta, k = conductor_ior(st, ctx)
        return RoughConductor.Params(specular=slot_rgb(st, ctx, _SPEC), alpha=fetch_alpha(st, ctx, _ALPHA, _AU, _AV, const(st, ctx, DIST)),
                                     eta=eta, k=k, none=ti.cast(const(st, ctx, NONE), ti.i32))

    @staticmethod
    @ti.func
    def fetch_adjoint(st: ti.template(), ctx, g):
        slot_rgb_adjoint(st, ctx, _SPEC, g.specular)
        fetch_alpha_adjoint(st, ctx, _ALPHA, _AU, _AV, g.alpha)

    @staticmethod
    @ti.func
    def fresnel(p, c):
        F = spec(1.0)
        if p.none == 0:
            F = fresnel_conductor(c, p.eta, p.k)
        return F

    @staticmethod
    @ti.func
    def f(p, wi, wo):
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        return p.specular * RoughConductor.fresnel(p, wi.dot(h)) * lobe

    @staticmethod
    @ti.func
    def pdf(p, wi, wo):
        return reflection_pdf(wi, wo, p.alpha)

    @staticmethod
    @ti.func
    def sample(p, wi, u1, u2):
        s = invalid_sample()
        m, pm = sample_visible_normal(wi, p.alpha, u2)
        wo = reflect_m(wi, m)
        dot_wo_m = wo.dot(m)
        if pm > 0.0 and wo[2] > 0.0 and dot_wo_m > 0.0:
            s = BsdfSample(wo=wo, weight=p.specular * RoughConductor.fresnel(p, wi.dot(m)) * smith_g1(wo, m, p.alpha),
                           pdf=pm / (4.0 * dot_wo_m), eta=1.0, delta=0, valid=1)
        return s

    @staticmethod
    @ti.func
    def warp(p):
        """(signed α, η) of the half-vector warp (attached sampling, base.py): reflection only."""
        return p.alpha, 1.0

    @staticmethod
    @ti.func
    def f_adjoint(p, wi, wo, d_out):
        """∂<d_out, f>/∂(specular, (α_u, α_v))."""
        h, hl, lobe, dlobe = reflection_lobe(wi, wo, p.alpha)
        F = RoughConductor.fresnel(p, wi.dot(h))
        return RoughConductor.Params(specular=d_out * F * lobe, alpha=(d_out * p.specular * F).sum() * dlobe)

    @staticmethod
    @ti.func
    def f_grad_dirs(p, wi, wo, d_out):
        """∂<d_out, f>/∂wi, ∂/∂wo: the reflection lobe with Φ = <d_out, S F(c)>."""
        h, hl, _ = half_vector(wi, wo)
        c = wi.dot(h)
        dS = d_out * p.specular
        dphi = 0.0
        if p.none == 0:
            dphi = dS.dot(fresnel_conductor_dcos(c, p.eta, p.k))
        return reflection_grad_dirs(wi, wo, h, hl, p.alpha, dS.dot(RoughConductor.fresnel(p, c)), dphi)

    @staticmethod
    @ti.func
    def mueller(p, wi, wo, delta):
        """Reflection about the half vector by the complex Fresnel equations (Mitsuba 3's polarized
        roughconductor)."""
        h = wi + wo
        if h.norm_sqr() > 0.0:
            h = h.normalized()
        else:
            h = vec3(0.0, 0.0, 1.0)
        return conductor_mueller(p, wi, wo, h)
