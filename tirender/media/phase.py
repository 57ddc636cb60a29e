"""Phase functions: isotropic and Henyey-Greenstein, with the adjoint w.r.t. the asymmetry g.

Directions are *propagation* directions: d_in is the direction the light travels before the
scattering event, d_out after it; mu = d_in . d_out (mu = 1: forward scattering). In Mitsuba's
convention (wi = -d_in pointing back to the previous vertex) this is mu = -wi . wo, the same
function. HG: p(mu) = (1 - g^2) / (4 pi (1 + g^2 - 2 g mu)^{3/2}); g > 0 scatters forward and
the mean cosine is g. Sampling is exact (weight p / pdf = 1), so ``sample`` returns (wo, pdf).

Medium-level dispatch reads g from the medium's pool slice (``st.med_g[m]``, a 1x1x1 volume);
``st.med_g[m] < 0`` means isotropic.
"""
import taichi as ti

from ..core.math import INV_FOUR_PI, PI, coordinate_system, safe_sqrt, vec3
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
def medium_g(st: ti.template(), m):
    tid = st.med_g[m]
    g = 0.0
    if tid >= 0:
        g = ti.min(ti.max(grid_eval(st, tid, vec3(0.5))[0], -0.999), 0.999)
    return g


@ti.func
def phase_eval(st: ti.template(), m, d_in, d_out):
    """Phase function value (= its sampling pdf) of medium m."""
    res = INV_FOUR_PI
    if st.med_g[m] >= 0:
        res = hg_eval(medium_g(st, m), d_in.dot(d_out))
    return res


@ti.func
def phase_sample(st: ti.template(), m, d_in, u):
    """Sample d_out ~ p(d_in, .) with u (vec2). Returns (d_out, pdf); the weight p / pdf is 1."""
    g = medium_g(st, m)
    mu = hg_sample_mu(g, u[0])
    wo = direction_about(d_in, mu, u[1])
    pdf = INV_FOUR_PI
    if st.med_g[m] >= 0:
        pdf = hg_eval(g, mu)
    return wo, pdf


@ti.func
def phase_eval_adjoint(st: ti.template(), m, d_in, d_out, d_val):
    """grad[g] += d_val * d p / d g (d_val: scalar adjoint of the phase value)."""
    tid = st.med_g[m]
    if tid >= 0:
        grid_eval_scalar_adjoint(st, tid, vec3(0.5), d_val * hg_eval_dg(medium_g(st, m), d_in.dot(d_out)))
