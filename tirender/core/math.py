"""Vector types and small numerical helpers (Taichi funcs).

All floats use Taichi's default float type (f32 unless ``tirender.init(fp="f64")``).
"""
import taichi as ti

vec2 = ti.types.vector(2, float)
vec3 = ti.types.vector(3, float)
vec4 = ti.types.vector(4, float)
mat3 = ti.types.matrix(3, 3, float)

PI = 3.14159265358979323846
INV_PI = 0.31830988618379067154
INV_TWO_PI = 0.15915494309189533577
INV_FOUR_PI = 0.07957747154594766788
FOUR_PI = 4.0 * PI
EPS = 1e-4          # ray offset scale (relative to scene extent, see scene.ray_eps)
BIG = 1e30


@ti.func
def safe_sqrt(x):
    return ti.sqrt(ti.max(x, 0.0))


@ti.func
def safe_div(a, b):
    """a / b, 0 where b == 0 (avoids NaN/Inf in adjoints)."""
    return ti.select(b != 0.0, a / ti.select(b != 0.0, b, 1.0), 0.0 * a)


@ti.func
def exp_inline(x):
    """e^x without a library call (a call inside a megakernel spills every live float register): in f32
    builds Cephes' expf (Cody–Waite reduction by ln 2, degree-5 polynomial; relative error ≤ 1.7e-7,
    ~1.5 ulp), x clamped to [-87, 88] (results 1.6e-38 … 1.7e38); in f64 builds ti.exp."""
    res = x
    if ti.static(vec3.dtype == ti.f32):
        y = ti.min(ti.max(x, -87.0), 88.0)
        n = ti.floor(y * 1.44269504088896341 + 0.5)
        r = y - n * 0.693359375 + n * 2.12194440e-4
        p = ((((1.9875691500e-4 * r + 1.3981999507e-3) * r + 8.3334519073e-3) * r + 4.1665795894e-2) * r
             + 1.6666665459e-1) * r + 5.0000001201e-1
        res = (p * (r * r) + r + 1.0) * ti.bit_cast((ti.cast(n, ti.i32) + 127) << 23, ti.f32)
    else:
        res = ti.exp(x)
    return res


LUMINANCE = (0.212671, 0.715160, 0.072169)      # Y of linear sRGB (ITU-R BT.709, as Mitsuba 3)


@ti.func
def luminance(c):
    """Y of a linear sRGB colour c (vec3)."""
    return LUMINANCE[0] * c[0] + LUMINANCE[1] * c[1] + LUMINANCE[2] * c[2]


@ti.func
def max_component(c):
    """The largest component of a vector (any size: a colour of any lane count)."""
    return c.max()


@ti.func
def coordinate_system(n):
    """Orthonormal (s, t) with (s, t, n) right-handed (Duff et al. 2017)."""
    sign = 1.0 if n[2] >= 0.0 else -1.0
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    s = vec3(1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0])
    t = vec3(b, sign + n[1] * n[1] * a, -n[1])
    return s, t


@ti.func
def to_local(s, t, n, v):
    return vec3(v.dot(s), v.dot(t), v.dot(n))


@ti.func
def to_world(s, t, n, v):
    return s * v[0] + t * v[1] + n * v[2]


@ti.func
def reflect(wi):
    """Mirror reflection about +z in the local frame."""
    return vec3(-wi[0], -wi[1], wi[2])


@ti.func
def mis_power(pdf_a, pdf_b):
    """Power heuristic (exponent 2) weight of strategy a; 0 when both pdfs are 0."""
    a2 = pdf_a * pdf_a
    b2 = pdf_b * pdf_b
    return safe_div(a2, a2 + b2)


@ti.func
def tangent_frame(n, v):
    """(s, t): the shading tangent s = v made orthogonal to the unit normal n and normalised (coordinate_system(n)
    where that vanishes, |.| <= 1e-12), t = n × s."""
    s, t = coordinate_system(n)
    u = v - n * n.dot(v)
    lu = u.norm()
    if lu > 1e-12:
        s = u / lu
        t = n.cross(s)
    return s, t


@ti.func
def solve_quadratic(a, b, c):
    """Roots of a x² + b x + c = 0 as Mitsuba's math::solve_quadratic: (found, x0, x1), x0 <= x1 (the larger root
    in magnitude from -(b ± sqrt(disc)) / 2, the other from x0 x1 = c / a); a = 0: the linear equation's root twice."""
    found = 0
    x0 = 0.0
    x1 = 0.0
    if a == 0.0:
        if b != 0.0:
            found = 1
            x0 = -c / b
            x1 = x0
    else:
        disc = b * b - 4.0 * a * c
        if disc >= 0.0:
            sq = ti.sqrt(disc)
            temp = -0.5 * (b + (sq if b >= 0.0 else -sq))
            r0 = temp / a
            r1 = c / temp if temp != 0.0 else r0
            found = 1
            x0 = ti.min(r0, r1)
            x1 = ti.max(r0, r1)
    return found, x0, x1


@ti.func
def affine_point(m, p):
    """The 3x4 affine map m applied to point p: m[:, :3] p + m[:, 3]."""
    return vec3(m[0, 0] * p[0] + m[0, 1] * p[1] + m[0, 2] * p[2] + m[0, 3],
                m[1, 0] * p[0] + m[1, 1] * p[1] + m[1, 2] * p[2] + m[1, 3],
                m[2, 0] * p[0] + m[2, 1] * p[1] + m[2, 2] * p[2] + m[2, 3])


@ti.func
def affine_vector(m, v):
    """The linear part of the 3x4 affine map m applied to vector v."""
    return vec3(m[0, 0] * v[0] + m[0, 1] * v[1] + m[0, 2] * v[2],
                m[1, 0] * v[0] + m[1, 1] * v[1] + m[1, 2] * v[2],
                m[2, 0] * v[0] + m[2, 1] * v[1] + m[2, 2] * v[2])


@ti.func
def affine_vector_t(m, v):
    """The transposed linear part of the 3x4 affine map m applied to v (the adjoint of affine_vector)."""
    return vec3(m[0, 0] * v[0] + m[1, 0] * v[1] + m[2, 0] * v[2],
                m[0, 1] * v[0] + m[1, 1] * v[1] + m[2, 1] * v[2],
                m[0, 2] * v[0] + m[1, 2] * v[1] + m[2, 2] * v[2])
