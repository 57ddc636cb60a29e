"""Stokes vectors and Mueller matrices (Mitsuba 2 §4.1, Mitsuba 3 ``mueller.h``): the light of the
``spectral_polarized`` variant.

A Stokes vector S = (S0, S1, S2, S3) is expressed in a reference frame: the direction of travel
``forward`` and a unit ``basis`` vector ⟂ forward (the x axis of the frame: S1 > 0 is light polarized along
it, S2 > 0 along basis rotated by +45° about forward, S3 > 0 right circular). Every Mueller matrix maps a
Stokes vector in an explicit incident frame to one in an explicit outgoing frame; ``rotate`` re-expresses
it in other frames (rotations about the direction of travel, ``basis_rotation``; ``rotator(θ)`` as a matrix). The implicit
frame of a world direction w is ``stokes_basis(w)`` (the first vector of ``coordinate_system(w)``), so that
consecutive path vertices agree on the frame of the segment between them.

A BSDF's Mueller matrix maps light arriving along −wo (frame ``stokes_basis(-wo)``) to light leaving along
wi (frame ``stokes_basis(wi)``), wi and wo local directions pointing away from the surface.

``MuellerLanes``: one 4×4 matrix per wavelength lane of the walk (m0 … m3). All functions are ``@ti.func``s in
Taichi's default float type; angles in radians.
"""
import taichi as ti

from .math import coordinate_system, vec2, vec3, vec4

mat4 = ti.types.matrix(4, 4, float)


LANES = 4     # wavelengths per path of spectral_polarized (variants.lanes()): one Mueller matrix each


@ti.dataclass
class MuellerLanes:
    """One Mueller matrix per wavelength lane of the walk (spectral_polarized: four)."""
    m0: mat4
    m1: mat4
    m2: mat4
    m3: mat4


@ti.func
def identity():
    return ti.Matrix.identity(float, 4)


@ti.func
def identity_lanes():
    return uniform_lanes(identity())


@ti.func
def uniform_lanes(m):
    """The same matrix in every lane."""
    return MuellerLanes(m0=m, m1=m, m2=m, m3=m)


@ti.func
def from_lanes(a, b, c, d):
    """Lanes 0..3 from four matrices."""
    return MuellerLanes(m0=a, m1=b, m2=c, m3=d)


@ti.func
def depolarizer(value):
    """Scatters into unpolarized light of S0 = value · S0_in."""
    m = mat4(0.0)
    m[0, 0] = value
    return m


@ti.func
def linear_polarizer(value):
    """An ideal linear polarizer transmitting along the frame's basis (x) axis, scaled by value."""
    a = 0.5 * value
    return mat4([[a, a, 0.0, 0.0], [a, a, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@ti.func
def linear_retarder(phase):
    """A linear retarder with its fast axis along the basis: the phase delay ``phase`` between the field
    components along and across it (π/2: a quarter-wave plate)."""
    s = ti.sin(phase)
    c = ti.cos(phase)
    return mat4([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, c, s], [0.0, 0.0, -s, c]])


@ti.func
def rotator(theta):
    """Re-expresses a Stokes vector in a frame rotated by theta about the direction of travel."""
    s = ti.sin(2.0 * theta)
    c = ti.cos(2.0 * theta)
    return mat4([[1.0, 0.0, 0.0, 0.0], [0.0, c, s, 0.0], [0.0, -s, c, 0.0], [0.0, 0.0, 0.0, 1.0]])


@ti.func
def rotated_element(theta, m):
    """An optical element m rotated by theta about the direction of travel: R(θ)ᵀ M R(θ) = R(−θ) M R(−θ)ᵀ."""
    cs = vec2(ti.cos(2.0 * theta), -ti.sin(2.0 * theta))
    return rotate(m, cs, cs)


# ---- complex arithmetic on vec2 (re, im) ----
@ti.func
def _cmul(a, b):
    return vec2(a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0])


@ti.func
def _cdiv(a, b):
    d = b[0] * b[0] + b[1] * b[1]
    r = vec2(0.0)
    if d > 0.0:
        r = vec2(a[0] * b[0] + a[1] * b[1], a[1] * b[0] - a[0] * b[1]) / d
    return r


@ti.func
def _csqrt(z):
    """Principal square root (re >= 0)."""
    n = ti.sqrt(z[0] * z[0] + z[1] * z[1])
    re = ti.sqrt(ti.max(0.5 * (n + z[0]), 0.0))
    im = ti.sqrt(ti.max(0.5 * (n - z[0]), 0.0))
    if z[1] < 0.0:
        im = -im
    return vec2(re, im)


@ti.func
def fresnel_amplitudes(cos_theta_i, eta, k):
    """(a_s, a_p, cos θt signed, η_it, η_ti): the complex reflection amplitudes (Verdet convention) of an
    interface of relative IOR η + i k (k = 0: dielectric; cos θi < 0: arriving from inside), as Mitsuba 3's
    ``fresnel_polarized``. η_it, η_ti are real parts (dielectrics)."""
    e = vec2(eta, -ti.abs(k))          # the polarized Fresnel equations take κ <= 0
    outside = cos_theta_i >= 0.0
    rcp = _cdiv(vec2(1.0, 0.0), e)
    e_it = e if outside else rcp
    e_ti = rcp if outside else e
    sin2 = 1.0 - cos_theta_i * cos_theta_i
    ct2 = vec2(1.0, 0.0) - _cmul(e_ti, e_ti) * sin2
    ci = ti.abs(cos_theta_i)
    ct = _csqrt(ct2)
    if ct[1] > 0.0:       # the root's sign (Clarke, "Stellar Polarimetry" A.2; total internal reflection)
        ct[1] = -ct[1]
    eci = e_it * ci
    a_s = _cdiv(vec2(ci, 0.0) - _cmul(e_it, ct), vec2(ci, 0.0) + _cmul(e_it, ct))
    a_p = _cdiv(eci - ct, eci + ct)
    if (eta == 1.0 and k == 0.0) or (eta == 0.0 and k == 0.0):
        a_s = vec2(0.0)
        a_p = vec2(0.0)
    cos_t = 0.0
    if ct2[0] >= 0.0:
        cos_t = -ct[0] if cos_theta_i >= 0.0 else ct[0]
    return a_s, a_p, cos_t, e_it[0], e_ti[0]


@ti.func
def specular_reflection(cos_theta_i, eta, k):
    """Mueller matrix of specular reflection off an interface η + i k, in the s/p frames (basis ⟂ the plane
    of incidence)."""
    a_s, a_p, _, _, _ = fresnel_amplitudes(cos_theta_i, eta, k)
    r_s = a_s.dot(a_s)
    r_p = a_p.dot(a_p)
    a = 0.5 * (r_s + r_p)
    b = 0.5 * (r_s - r_p)
    c = ti.sqrt(r_s * r_p)
    # phase delay δ = arg(a_p) − arg(a_s): sin and cos of it from a_p conj(a_s)
    z = _cmul(a_p, vec2(a_s[0], -a_s[1]))
    zn = ti.sqrt(z.dot(z))
    sd = 0.0
    cd = 0.0
    if c > 0.0 and zn > 0.0:
        sd = z[1] / zn
        cd = z[0] / zn
    return mat4([[a, b, 0.0, 0.0], [b, a, 0.0, 0.0], [0.0, 0.0, c * cd, -c * sd], [0.0, 0.0, c * sd, c * cd]])


@ti.func
def specular_transmission(cos_theta_i, eta):
    """Mueller matrix of refraction through a dielectric interface η (energy, without the η² radiance
    scaling), in the s/p frames."""
    a_s, a_p, cos_t, e_it, e_ti = fresnel_amplitudes(cos_theta_i, eta, 0.0)
    factor = 0.0
    if ti.abs(cos_theta_i) > 1e-8:
        factor = -e_it * cos_t / cos_theta_i
    t_s = (1.0 + a_s[0]) * (1.0 + a_s[0])
    tp_ = (1.0 + a_p[0]) * e_ti
    t_p = tp_ * tp_
    a = 0.5 * factor * (t_s + t_p)
    b = 0.5 * factor * (t_s - t_p)
    c = factor * ti.sqrt(t_s * t_p)
    return mat4([[a, b, 0.0, 0.0], [b, a, 0.0, 0.0], [0.0, 0.0, c, 0.0], [0.0, 0.0, 0.0, c]])


@ti.func
def stokes_basis(forward):
    """The implicit reference basis of a direction of travel."""
    s, t = coordinate_system(forward)
    return s


@ti.func
def basis_rotation(forward, basis_current, basis_target):
    """(cos 2θ, sin 2θ) of the rotator from basis_current to basis_target (both ⟂ forward), θ the angle between
    them signed about forward — no inverse trigonometry: cos θ = a·b, sin θ = forward·(a × b)."""
    a = basis_current.normalized()
    b = basis_target.normalized()
    c = a.dot(b)
    s = forward.dot(a.cross(b))
    n2 = c * c + s * s
    res = vec2(1.0, 0.0)
    if n2 > 0.0:
        res = vec2(c * c - s * s, 2.0 * c * s) / n2
    return res


@ti.func
def rotate(m, cs_out, cs_in):
    """R_out m R_inᵀ for rotators given as (cos 2θ, sin 2θ): rows then columns 1 and 2 mix."""
    r = m
    for j in ti.static(range(4)):
        a = m[1, j]
        b = m[2, j]
        r[1, j] = cs_out[0] * a + cs_out[1] * b
        r[2, j] = -cs_out[1] * a + cs_out[0] * b
    out = r
    for i in ti.static(range(4)):
        a = r[i, 1]
        b = r[i, 2]
        out[i, 1] = cs_in[0] * a + cs_in[1] * b
        out[i, 2] = -cs_in[1] * a + cs_in[0] * b
    return out


@ti.func
def _rotator_rows(m, cs, tangent: ti.template()):
    """R m for the rotator R of cs = (cos 2θ, sin 2θ); tangent: R' m with R' = ∂R/∂(cos 2θ, sin 2θ) · cs (cs then
    holds the tangent of (cos 2θ, sin 2θ)): rows 0 and 3 of R' are 0."""
    r = m
    if ti.static(tangent):
        r = mat4(0.0)
    for j in ti.static(range(4)):
        r[1, j] = cs[0] * m[1, j] + cs[1] * m[2, j]
        r[2, j] = -cs[1] * m[1, j] + cs[0] * m[2, j]
    return r


@ti.func
def rotate_tangent(m, dm, cs_out, cs_in, dcs_out, dcs_in):
    """The tangent of rotate(m, cs_out, cs_in) = R_out m R_inᵀ given the tangents dm, dcs_out, dcs_in:
    R'_out m R_inᵀ + R_out dm R_inᵀ + R_out m R'_inᵀ."""
    a = _rotator_rows(m, dcs_out, True) + _rotator_rows(dm, cs_out, False)
    b = _rotator_rows(m, cs_out, False)
    return _rotator_rows(a.transpose(), cs_in, False).transpose() + \
        _rotator_rows(b.transpose(), dcs_in, True).transpose()


@ti.func
def rotation_rate(cs, dtheta):
    """The tangent of (cos 2θ, sin 2θ) = cs when θ moves by dtheta."""
    return 2.0 * dtheta * vec2(-cs[1], cs[0])


@ti.func
def linear_retarder_tangent(phase, dphase):
    """The tangent of linear_retarder(phase) when the phase moves by dphase."""
    s = ti.sin(phase) * dphase
    c = ti.cos(phase) * dphase
    return mat4([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -s, c], [0.0, 0.0, -c, -s]])


@ti.func
def rotate_lanes(m3, cs_out, cs_in):
    return MuellerLanes(m0=rotate(m3.m0, cs_out, cs_in), m1=rotate(m3.m1, cs_out, cs_in),
                        m2=rotate(m3.m2, cs_out, cs_in), m3=rotate(m3.m3, cs_out, cs_in))


@ti.func
def rotate_stokes_basis(forward, basis_current, basis_target):
    """The rotator that re-expresses a Stokes vector from basis_current to basis_target (both ⟂ forward)."""
    cs = basis_rotation(forward, basis_current, basis_target)
    return mat4([[1.0, 0.0, 0.0, 0.0], [0.0, cs[0], cs[1], 0.0], [0.0, -cs[1], cs[0], 0.0], [0.0, 0.0, 0.0, 1.0]])


@ti.func
def rotate_mueller_basis_collinear(m, forward, current, target):
    cs = basis_rotation(forward, current, target)
    return rotate(m, cs, cs)


@ti.func
def plane_axes(n, wi, wo):
    """(s_in, s_out): the s axes (⟂ the plane of incidence about the normal n) of light arriving along −wo
    and leaving along wi; (1, 0, 0) at normal incidence."""
    s_in = n.cross(-wo)
    s_out = n.cross(wi)
    if s_in.norm_sqr() <= 1e-20 or s_out.norm_sqr() <= 1e-20:
        s_in = vec3(1.0, 0.0, 0.0)
        s_out = vec3(1.0, 0.0, 0.0)
    return s_in, s_out


@ti.func
def interface_rotations(n, wi, wo):
    """(cs_out, cs_in): the rotators taking an interface's s/p frames (normal or microfacet normal n) to the
    implicit frames of −wo (in) and wi (out)."""
    s_in, s_out = plane_axes(n, wi, wo)
    return (basis_rotation(wi, s_out, stokes_basis(wi)), basis_rotation(-wo, s_in, stokes_basis(-wo)))


@ti.func
def interface_to_implicit(m, n, wi, wo):
    """An interface's Mueller matrix m in its s/p frames -> the implicit frames of −wo (in) and wi (out)."""
    cs_out, cs_in = interface_rotations(n, wi, wo)
    return rotate(m, cs_out, cs_in)


@ti.func
def frame_change_lanes(m3, s, t, n, wi, wo):
    """Local Mueller matrices m3 (implicit frames of the local −wo and wi) -> the implicit frames of the same
    directions expressed in the parent frame (s, t, n) (Mitsuba's ``to_world_mueller``)."""
    cs_out, cs_in = _frame_rotations(s, t, n, wi, wo)
    return rotate_lanes(m3, cs_out, cs_in)


@ti.func
def frame_change_lanes_pair(m3, dm3, s, t, n, wi, wo):
    """frame_change_lanes of m3 and of its tangent dm3 (the change is linear and does not depend on parameters)."""
    cs_out, cs_in = _frame_rotations(s, t, n, wi, wo)
    return rotate_lanes(m3, cs_out, cs_in), rotate_lanes(dm3, cs_out, cs_in)


@ti.func
def _frame_rotations(s, t, n, wi, wo):
    from_w = -(s * wo[0] + t * wo[1] + n * wo[2])
    wi_w = s * wi[0] + t * wi[1] + n * wi[2]
    bi = stokes_basis(-wo)
    bo = stokes_basis(wi)
    cs_in = basis_rotation(from_w, s * bi[0] + t * bi[1] + n * bi[2], stokes_basis(from_w))
    cs_out = basis_rotation(wi_w, s * bo[0] + t * bo[1] + n * bo[2], stokes_basis(wi_w))
    return cs_out, cs_in


@ti.func
def _flip_s2s3(m):
    """D m D, D = diag(1, 1, −1, −1)."""
    r = m
    for i in ti.static(range(4)):
        for j in ti.static(range(4)):
            if ti.static((i >= 2) != (j >= 2)):
                r[i, j] = -m[i, j]
    return r


@ti.func
def mirror_z_lanes(m3, wi, wo):
    """m3 computed for the z-mirrored directions (wi', wo') = (Fwi, Fwo), F = diag(1, 1, −1) (a two-sided model's
    back face) -> the implicit frames of wi, wo. A mirror swaps the frames' handedness: S2, S3 change sign."""
    fwi = vec3(wi[0], wi[1], -wi[2])
    fwo = vec3(wo[0], wo[1], -wo[2])
    bi = stokes_basis(-fwo)
    bo = stokes_basis(fwi)
    cs_in = basis_rotation(-wo, vec3(bi[0], bi[1], -bi[2]), stokes_basis(-wo))
    cs_out = basis_rotation(wi, vec3(bo[0], bo[1], -bo[2]), stokes_basis(wi))
    return MuellerLanes(m0=rotate(_flip_s2s3(m3.m0), cs_out, cs_in), m1=rotate(_flip_s2s3(m3.m1), cs_out, cs_in),
                        m2=rotate(_flip_s2s3(m3.m2), cs_out, cs_in), m3=rotate(_flip_s2s3(m3.m3), cs_out, cs_in))


@ti.func
def normalized_lanes(m3):
    """normalized of each lane."""
    return MuellerLanes(m0=normalized(m3.m0), m1=normalized(m3.m1), m2=normalized(m3.m2), m3=normalized(m3.m3))


@ti.func
def normalized_tangent_lanes(m3, dm3):
    """(normalized_lanes(m3), its tangent) given the tangent dm3 of m3: d(m / m00) = dm / m00 − m dm00 / m00²."""
    return normalized_lanes(m3), MuellerLanes(m0=_normalized_tangent(m3.m0, dm3.m0),
                                              m1=_normalized_tangent(m3.m1, dm3.m1),
                                              m2=_normalized_tangent(m3.m2, dm3.m2),
                                              m3=_normalized_tangent(m3.m3, dm3.m3))


@ti.func
def _normalized_tangent(m, dm):
    r = mat4(0.0)
    if m[0, 0] != 0.0:
        r = (dm - m * (dm[0, 0] / m[0, 0])) / m[0, 0]
    return r


@ti.func
def zero_lanes():
    return uniform_lanes(mat4(0.0))


@ti.func
def add_lanes(a, b):
    """Lane-wise a + b."""
    return MuellerLanes(m0=a.m0 + b.m0, m1=a.m1 + b.m1, m2=a.m2 + b.m2, m3=a.m3 + b.m3)


@ti.func
def normalized(m):
    """m / m[0, 0] (0 where m[0, 0] = 0): a Mueller matrix with unit unpolarized transmission."""
    r = mat4(0.0)
    if m[0, 0] != 0.0:
        r = m / m[0, 0]
    return r


@ti.func
def mul_lanes(a, b):
    """Lane-wise product a @ b."""
    return MuellerLanes(m0=a.m0 @ b.m0, m1=a.m1 @ b.m1, m2=a.m2 @ b.m2, m3=a.m3 @ b.m3)


@ti.func
def s00(a):
    """vec4 of each lane's [0, 0] (the unpolarized transmission)."""
    return vec4(a.m0[0, 0], a.m1[0, 0], a.m2[0, 0], a.m3[0, 0])


@ti.func
def column0(a):
    """(S0, S1, S2, S3) per lane of the light a path of Mueller product a delivers from a unit unpolarized
    source: a 4×4 matrix (rows: Stokes components, columns: lanes)."""
    return ti.Matrix([[a.m0[r, 0], a.m1[r, 0], a.m2[r, 0], a.m3[r, 0]] for r in ti.static(range(4))])


@ti.func
def through_column0(p, n):
    """column0(p @ n) without the full products (4×4: Stokes components × lanes)."""
    out = mat4(0.0)
    for r in ti.static(range(4)):
        for c in ti.static(range(4)):
            out[r, 0] += p.m0[r, c] * n.m0[c, 0]
            out[r, 1] += p.m1[r, c] * n.m1[c, 0]
            out[r, 2] += p.m2[r, c] * n.m2[c, 0]
            out[r, 3] += p.m3[r, c] * n.m3[c, 0]
    return out

