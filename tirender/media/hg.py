"""Henyey-Greenstein phase function (Mitsuba 3 ``hg``) with the adjoint w.r.t. its asymmetry g.

Directions are *propagation* directions: d_in before the scattering event, d_out after it;
mu = d_in · d_out (mu = 1: forward). p(mu) = (1 - g²) / (4π (1 + g² - 2 g mu)^{3/2}); g > 0 scatters
forward and the mean cosine is g (Mitsuba's wi = -d_in convention gives the same function).
Sampling is exact (weight p / pdf = 1). Differentiable: g (parameter ``<medium>.g``).
"""
import taichi as ti

from ..core.math import INV_FOUR_PI, PI, coordinate_system, safe_sqrt, vec3
from ..schema import Texture
from .grid import grid_eval, grid_eval_scalar_adjoint

G_EPS = 1e-3  # |g| below this samples uniformly (the HG inversion is ill-conditioned at g = 0)


@ti.func
def hg_eval(g, mu):
    t = 1.0 + g * g - 2.0 * g * mu
    return INV_FOUR_PI * (1.0 - g * g) / (t * ti.sqrt(t))


@ti.func
def hg_eval_dg(g, mu):
    """d hg_eval / d g = (-2 g T - 3 (1 - g^2)(g - mu)) / (4 pi T^{5/2}), T = 1 + g^2 - 2 g mu."""
    t = 1.0 + g * g - 2.0 * g * mu
    return INV_FOUR_PI * (-2.0 * g * t - 3.0 * (1.0 - g * g) * (g - mu)) / (t * t * ti.sqrt(t))


@ti.func
def hg_sample_mu(g, u):
    mu = 2.0 * u - 1.0
    if ti.abs(g) >= G_EPS:
        s = (1.0 - g * g) / (1.0 - g + 2.0 * g * u)
        mu = (1.0 + g * g - s * s) / (2.0 * g)
    return ti.min(ti.max(mu, -1.0), 1.0)


@ti.func
def direction_about(d_in, mu, u_phi):
    """Unit direction at angle acos(mu) from d_in, azimuth 2 pi u_phi."""
    s, t = coordinate_system(d_in)
    sin_t = safe_sqrt(1.0 - mu * mu)
    phi = 2.0 * PI * u_phi
    return (s * (sin_t * ti.cos(phi)) + t * (sin_t * ti.sin(phi)) + d_in * mu).normalized()


@ti.func
def _g(st: ti.template(), m):
    return ti.min(ti.max(grid_eval(st, st.med_g[m], vec3(0.5))[0], -0.999), 0.999)


class HenyeyGreenstein:
    NAME = "hg"
    KEYS = (Texture("g", 1, default=0.0, lo=-0.999, hi=0.999, doc="asymmetry (mean cosine)"),)
    MITSUBA_DEFAULTS = {"g": 0.8}     # Mitsuba 3's hg.cpp (tirender's YAML default: 0, isotropic)

    @staticmethod
    @ti.func
    def eval(st: ti.template(), m, d_in, d_out):
        return hg_eval(_g(st, m), d_in.dot(d_out))

    @staticmethod
    @ti.func
    def sample(st: ti.template(), m, d_in, u):
        g = _g(st, m)
        mu = hg_sample_mu(g, u[0])
        return direction_about(d_in, mu, u[1]), hg_eval(g, mu)

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), m, d_in, d_out, d_val):
        """grad[g] += d_val * ∂p/∂g."""
        grid_eval_scalar_adjoint(st, st.med_g[m], vec3(0.5), d_val * hg_eval_dg(_g(st, m), d_in.dot(d_out)))
