"""Types shared by all BSDF models.

Conventions (Mitsuba 3): directions are in the local shading frame (z = shading normal),
both ``wi`` (towards the previous vertex) and ``wo`` (sampled/evaluated direction) point
away from the surface. ``eval`` returns f(wi, wo) * |cos θo| (the cosine is included),
``pdf`` is a solid-angle density, ``sample`` returns the weight eval/pdf.
"""
import taichi as ti

from ..core.math import vec3


@ti.dataclass
class BsdfParams:
    """BSDF inputs at one surface point, after texture lookups.

    reflectance   diffuse albedo (diffuse; rough plastic's diffuse_reflectance), RGB in [0, 1]
    specular      specular_reflectance (conductors, dielectrics, plastic), RGB scale
    transmittance specular_transmittance (dielectrics), RGB scale
    alpha         GGX roughness α > 0 (rough models)
    eta           relative index of refraction int_ior / ext_ior (dielectric, plastic)
    cond_eta, cond_k  complex IOR of a conductor (used when cond_none == 0)
    cond_none     1: perfect mirror Fresnel F = 1 (Mitsuba's material "none")
    The same struct type holds gradients (adjoint outputs) w.r.t. the differentiable fields
    reflectance, specular, alpha.
    """
    reflectance: vec3
    specular: vec3
    transmittance: vec3
    alpha: float
    eta: float
    cond_eta: vec3
    cond_k: vec3
    cond_none: ti.i32


@ti.dataclass
class BsdfSample:
    """Result of BSDF sampling.

    wo      sampled direction (local frame); weight = eval / pdf (cosine included);
    pdf     solid-angle density (for delta lobes: the discrete lobe probability);
    eta     relative IOR of the sampled event (1 for reflection) for Russian roulette;
    delta   1 if a Dirac lobe was sampled (no MIS with emitter sampling);
    valid   0 if sampling failed (path terminates).
    """
    wo: vec3
    weight: vec3
    pdf: float
    eta: float
    delta: ti.i32
    valid: ti.i32


@ti.func
def cos_theta(w):
    return w[2]
