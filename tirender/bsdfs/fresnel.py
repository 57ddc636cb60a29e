"""Fresnel equations and reflection / refraction helpers (Mitsuba 3 ``fresnel.h``).

All functions are ``@ti.func``s working in the local shading frame (z = normal) with
Taichi's default float type.

fresnel_dielectric(cos_theta_i, eta) -> (F, cos_theta_t, eta_it, eta_ti)
    Unpolarized reflectance of a dielectric interface with relative IOR ``eta``
    (interior / exterior). ``cos_theta_i < 0`` means the ray arrives from the inside.
    cos_theta_t is signed (opposite side to cos_theta_i; 0 under total internal
    reflection, where F = 1), eta_it is the relative IOR in the direction of travel and
    eta_ti = 1 / eta_it the scale of the tangential components of the refracted direction.
fresnel_conductor(cos_theta_i, eta: vec3, k: vec3) -> vec3
    Unpolarized reflectance of a conductor with complex IOR eta + i k (per RGB channel),
    for cos_theta_i >= 0.
fresnel_dielectric_dcos / fresnel_dielectric_deta(cos_theta_i, eta) -> float
    ∂F/∂cos θi and ∂F/∂η of fresnel_dielectric's F (attached PRB).
fresnel_diffuse_reflectance(eta) -> float
    Mitsuba's fitted diffuse (hemispherically averaged, cosine weighted) Fresnel
    reflectance "Fdr" (Egan & Hilgeman 1973 for eta < 1, d'Eon & Irving 2011 otherwise).
reflect(wi) / reflect_m(wi, m), refract(wi, cos_theta_t, eta_ti) / refract_m(wi, m, cos_theta_t, eta_ti)
"""
import taichi as ti

from ..core.math import safe_sqrt, vec3


@ti.func
def _snell(cos_theta_i, eta):
    """(outside, eta_it, eta_ti, cos²θt (Snell; < 0 under total internal reflection), |cos θi|)."""
    outside = cos_theta_i >= 0.0
    rcp_eta = 1.0 / eta
    eta_it = eta if outside else rcp_eta
    eta_ti = rcp_eta if outside else eta
    return outside, eta_it, eta_ti, 1.0 - (1.0 - cos_theta_i * cos_theta_i) * (eta_ti * eta_ti), ti.abs(cos_theta_i)


@ti.func
def fresnel_dielectric(cos_theta_i, eta):
    outside, eta_it, eta_ti, cos_theta_t_sqr, cos_i = _snell(cos_theta_i, eta)
    cos_t = safe_sqrt(cos_theta_t_sqr)

    r = 0.0
    if eta == 1.0:
        r = 0.0
    elif cos_i == 0.0:
        r = 1.0
    else:
        # denominators are > 0 here (cos_i > 0, eta_it > 0)
        a_s = (cos_i - eta_it * cos_t) / (cos_i + eta_it * cos_t)
        a_p = (cos_t - eta_it * cos_i) / (cos_t + eta_it * cos_i)
        r = 0.5 * (a_s * a_s + a_p * a_p)

    # transmitted direction lies on the other side of the interface
    cos_theta_t = -cos_t if cos_theta_i >= 0.0 else cos_t
    return r, cos_theta_t, eta_it, eta_ti


@ti.func
def _conductor_terms(c, eta, k):
    """The intermediate terms of fresnel_conductor at cos θi = c (per channel): (sin²θi, η² - k² - sin²θi,
    a² + b², a, term 1, term 2, term 3, term 4) in Mitsuba 3's names."""
    c2 = c * c
    s2 = 1.0 - c2
    t1 = eta * eta - k * k - s2
    a22 = safe_sqrt(t1 * t1 + 4.0 * k * k * eta * eta)
    a = safe_sqrt(0.5 * (a22 + t1))
    term2 = 2.0 * c * a
    return s2, t1, a22, a, a22 + c2, term2, a22 * c2 + s2 * s2, term2 * s2


@ti.func
def fresnel_conductor(cos_theta_i, eta, k):
    """Per-channel conductor reflectance (K. D. Moeller, "Optics"), as Mitsuba 3."""
    s2, temp_1, a_2_pb_2, a, term_1, term_2, term_3, term_4 = _conductor_terms(cos_theta_i, eta, k)
    den_s = term_1 + term_2
    r_s = (term_1 - term_2) / ti.select(den_s > 0.0, den_s, 1.0)
    den_p = term_3 + term_4
    r_p = r_s * (term_3 - term_4) / ti.select(den_p > 0.0, den_p, 1.0)
    # den == 0 only for a vanishing IOR at grazing incidence: total reflection
    r_s = ti.select(den_s > 0.0, r_s, 1.0)
    r_p = ti.select(den_p > 0.0, r_p, 1.0)
    return 0.5 * (r_s + r_p)


@ti.func
def fresnel_diffuse_reflectance(eta):
    res = 0.0
    if eta < 1.0:
        res = -1.4399 * (eta * eta) + 0.7099 * eta + 0.6681 + 0.0636 / eta
    else:
        x = 1.0 / eta
        res = 0.919317 + x * (-3.4793 + x * (6.75335 + x * (-7.80989 + x * (4.98554 + x * (-1.36881)))))
    return res


@ti.func
def reflect(wi):
    """Mirror reflection about +z (local frame)."""
    return vec3(-wi[0], -wi[1], wi[2])


@ti.func
def reflect_m(wi, m):
    """Reflection of wi about the (micro)normal m."""
    return 2.0 * wi.dot(m) * m - wi


@ti.func
def refract(wi, cos_theta_t, eta_ti):
    """Refraction about +z; cos_theta_t and eta_ti from fresnel_dielectric."""
    return vec3(-eta_ti * wi[0], -eta_ti * wi[1], cos_theta_t)


@ti.func
def refract_m(wi, m, cos_theta_t, eta_ti):
    """Refraction of wi about the microfacet normal m (cos_theta_t relative to m)."""
    return m * (wi.dot(m) * eta_ti + cos_theta_t) - wi * eta_ti


@ti.func
def fresnel_dielectric_dcos(cos_theta_i, eta):
    """∂F/∂cos θi of fresnel_dielectric's F (0 under total internal reflection and for η = 1)."""
    outside, eta_it, eta_ti, ct2, ci = _snell(cos_theta_i, eta)
    res = 0.0
    if ct2 > 0.0 and ci > 0.0 and eta != 1.0:
        ct = ti.sqrt(ct2)
        dci = 1.0 if outside else -1.0
        dct = cos_theta_i * eta_ti * eta_ti / ct
        e = eta_it
        ds = ci + e * ct
        dp = ct + e * ci
        a_s = (ci - e * ct) / ds
        a_p = (ct - e * ci) / dp
        da_s = 2.0 * e * (ct * dci - ci * dct) / (ds * ds)
        da_p = 2.0 * e * (ci * dct - ct * dci) / (dp * dp)
        res = a_s * da_s + a_p * da_p
    return res


@ti.func
def fresnel_dielectric_deta(cos_theta_i, eta):
    """∂F/∂η of fresnel_dielectric's F w.r.t. the relative IOR η (interior / exterior); 0 under total
    internal reflection and at grazing incidence."""
    outside, eta_it, eta_ti, ct2, ci = _snell(cos_theta_i, eta)
    res = 0.0
    if ct2 > 0.0 and ci > 0.0:
        ct = ti.sqrt(ct2)
        e = eta_it
        dct = (1.0 - ci * ci) / (e * e * e * ct)      # ∂cos θt/∂η_it (cos²θt = 1 − sin²θi / η_it²)
        ds = ci + e * ct
        dp = ct + e * ci
        a_s = (ci - e * ct) / ds
        a_p = (ct - e * ci) / dp
        da_s = -2.0 * ci * (ct + e * dct) / (ds * ds)
        da_p = 2.0 * ci * (e * dct - ct) / (dp * dp)
        de = 1.0 if outside else -1.0 / (eta * eta)   # ∂η_it/∂η
        res = (a_s * da_s + a_p * da_p) * de
    return res


@ti.func
def fresnel_conductor_dcos(cos_theta_i, eta, k):
    """∂F/∂cos θi (RGB) of fresnel_conductor, differentiated term by term."""
    c = cos_theta_i
    c2 = c * c
    s2, t1, a22, a, term1, term2, term3, term4 = _conductor_terms(c, eta, k)
    # derivatives w.r.t. c (ds2 = -2c, dt1 = 2c)
    da22 = 2.0 * c * t1 / ti.select(a22 > 0.0, a22, 1.0)
    da = 0.25 * (da22 + 2.0 * c) / ti.select(a > 0.0, a, 1.0)
    dterm1 = da22 + 2.0 * c
    dterm2 = 2.0 * a + 2.0 * c * da
    dterm3 = da22 * c2 + 2.0 * c * a22 - 4.0 * c * s2
    dterm4 = dterm2 * s2 - 2.0 * c * term2
    den_s = term1 + term2
    den_p = term3 + term4
    ok_s = den_s > 0.0
    ok_p = den_p > 0.0
    ds_ = ti.select(ok_s, den_s, 1.0)
    dp_ = ti.select(ok_p, den_p, 1.0)
    r_s = (term1 - term2) / ds_
    dr_s = 2.0 * (dterm1 * term2 - term1 * dterm2) / (ds_ * ds_)
    q = (term3 - term4) / dp_
    dq = 2.0 * (dterm3 * term4 - term3 * dterm4) / (dp_ * dp_)
    dr_s = ti.select(ok_s, dr_s, 0.0)
    dq = ti.select(ok_p, dq, 0.0)
    q = ti.select(ok_p, q, 1.0)
    r_s = ti.select(ok_s, r_s, 1.0)
    return 0.5 * (dr_s + dr_s * q + r_s * dq)
