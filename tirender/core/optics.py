"""Refraction of world-space directions (Snell's law) and its adjoint, for derivatives that move
paths (caustic design, attached derivatives: issue 16).

    refract(d, n, eta) -> (wt, valid)     d: unit direction of travel; n: unit normal on the side d
                                          comes from (d·n < 0); eta = η_i / η_t. wt = η d + (η c - √k) n,
                                          c = -d·n, k = 1 - η² (1 - c²); valid = 0 on total internal
                                          reflection (k ≤ 0)
    refract_adjoint(d, n, eta, g) -> (∂/∂d, ∂/∂n, ∂/∂η) of <g, wt>   (d, n held as given: callers
                                          chain normalisation through normalize_adjoint)
    reflect(d, n) -> d - 2 (d·n) n        mirror reflection of a direction of travel about unit n
    reflect_adjoint(d, n, g) -> (∂/∂d, ∂/∂n) of <g, reflect(d, n)>
    normalize_adjoint(v, g) -> ∂/∂v of <g, v / |v|>
"""
import taichi as ti

from .math import vec3


@ti.func
def refract(d, n, eta):
    c = -d.dot(n)
    k = 1.0 - eta * eta * (1.0 - c * c)
    wt = vec3(0.0)
    valid = 0
    if k > 0.0:
        wt = eta * d + (eta * c - ti.sqrt(k)) * n
        valid = 1
    return wt, valid


@ti.func
def refract_adjoint(d, n, eta, g):
    c = -d.dot(n)
    k = 1.0 - eta * eta * (1.0 - c * c)
    gd = vec3(0.0)
    gn = vec3(0.0)
    geta = 0.0
    if k > 0.0:
        s = ti.sqrt(k)
        gn_dot = g.dot(n)
        dc = gn_dot * (eta - eta * eta * c / s)     # ∂<g, wt>/∂c
        gd = eta * g - dc * n                      # c = -d·n
        gn = (eta * c - s) * g - dc * d
        geta = g.dot(d) + gn_dot * (c + eta * (1.0 - c * c) / s)
    return gd, gn, geta


@ti.func
def reflect(d, n):
    return d - 2.0 * d.dot(n) * n


@ti.func
def reflect_adjoint(d, n, g):
    gn_dot = g.dot(n)
    return g - 2.0 * gn_dot * n, -2.0 * (d.dot(n) * g + gn_dot * d)


@ti.func
def normalize_adjoint(v, g):
    n = v.norm()
    u = v / n
    return (g - u * u.dot(g)) / n


@ti.func
def surface_hit_adjoint(g_p, grad_f, d):
    """The hit p = o + t d of a ray on a surface F = 0 (∇F ∝ grad_f at p), t moving with the ray so that p stays on
    it: dt = -∇F·(do + t dd) / (∇F·d). Returns (∂/∂o of <g_p, p>, k = <g_p, d> / (∇F·d)); ∂/∂d is t times the
    first; a parameter π of F adds -k ∂F/∂π, with ∂F/∂π scaled as grad_f is (core/quadrics.hit_adjoint, core/sdf.hit_adjoint)."""
    den = grad_f.dot(d)
    k = 0.0
    if den != 0.0:
        k = g_p.dot(d) / den
    return g_p - k * grad_f, k
