"""Sample warps (unit square -> domain) with their densities."""
import taichi as ti

from .math import INV_PI, INV_FOUR_PI, PI, safe_sqrt, vec2, vec3


@ti.func
def square_to_uniform_disk_concentric(u):
    r1 = 2.0 * u[0] - 1.0
    r2 = 2.0 * u[1] - 1.0
    r = 0.0
    phi = 0.0
    if r1 == 0.0 and r2 == 0.0:
        r = 0.0
    elif r1 * r1 > r2 * r2:
        r = r1
        phi = (PI / 4.0) * (r2 / r1)
    else:
        r = r2
        phi = (PI / 2.0) - (PI / 4.0) * (r1 / r2)
    return vec2(r * ti.cos(phi), r * ti.sin(phi))


@ti.func
def square_to_cosine_hemisphere(u):
    p = square_to_uniform_disk_concentric(u)
    z = safe_sqrt(1.0 - p.dot(p))
    return vec3(p[0], p[1], z)


@ti.func
def square_to_cosine_hemisphere_pdf(v):
    return ti.max(v[2], 0.0) * INV_PI


@ti.func
def square_to_uniform_sphere(u):
    z = 1.0 - 2.0 * u[1]
    r = safe_sqrt(1.0 - z * z)
    phi = 2.0 * PI * u[0]
    return vec3(r * ti.cos(phi), r * ti.sin(phi), z)


@ti.func
def square_to_uniform_sphere_pdf():
    return INV_FOUR_PI


@ti.func
def square_to_uniform_triangle(u):
    """Barycentrics (b1, b2) uniformly distributed over a triangle."""
    t = safe_sqrt(1.0 - u[0])
    return vec2(1.0 - t, t * u[1])
