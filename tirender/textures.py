"""Bitmap textures stored in the parameter pool: lookup (nearest / bilinear) and its adjoint.

A texture ``tid`` is a (H, W, C) slice of ``st.pool`` at ``st.tex_offset[tid]``, texel (row y, column x,
channel c) at offset + (y * W + x) * C + c, row 0 at the top of the image; uv (0, 0) is the image's
top-left corner (v grows downwards: Mitsuba 3's bitmap convention; OBJ files are flipped on load,
as Mitsuba's obj loader does). Texel centres at ((x + 0.5) / W, (y + 0.5) / H). Constants are 1x1
textures.
Differentiable: the texel values. The adjoint scatters ``d_out`` with the bilinear weights into
``st.grad_fx`` (deterministic fixed point, see core/fixed_point.py) with ti.atomic_add (four texels per lookup).

A *sampled spectrum* (spectra/sampled.py; the spectral variants) is a texture of its N values (a 1x1 texture of
N channels, the differentiable parameter (N,), Mitsuba's ``regular`` / ``irregular`` ``values``) whose nodes
lie in the scene's spectrum table ``st.spec_tab`` at ``st.tex_lam[tid]`` (N, then the N wavelengths in nm;
-1: an RGB texture). ``spectrum_eval`` reads it at the path's wavelengths; its adjoint adds into the two
samples around each wavelength. ``table_eval`` reads a constant spectrum of the table (N, N wavelengths, N
values: a conductor's η and k).
"""
import numpy as np
import taichi as ti

from .core import pool
from .core.math import vec3
from .variants import lanes, spec


@ti.func
def _wrap(i, n, mode):
    r = i
    if mode == 0:
        r = i % n
        if r < 0:
            r += n
    else:
        r = ti.min(ti.max(i, 0), n - 1)
    return r


@ti.func
def _texel(st: ti.template(), base, w, c, x, y, tangent: ti.template()):
    res = vec3(0.0)
    if ti.static(tangent):
        res = pool.direction(st, base + (y * w + x) * c, c)
    else:
        res = pool.value(st, base + (y * w + x) * c, c)
    return res


@ti.func
def _texel_add(st: ti.template(), base, w, c, x, y, d):
    pool.add_gradient(st, base + (y * w + x) * c, c, d)


@ti.func
def _footprint(st: ti.template(), tid, uv_in):
    """Texel coordinates (x0, y0, x1, y1) and bilinear fractions (fx, fy) of a lookup at uv (after
    the texture's to_uv transform)."""
    uv = st.tex_uvm[tid] @ ti.Vector([uv_in[0], uv_in[1], 1.0])
    w = st.tex_w[tid]
    h = st.tex_h[tid]
    mode = st.tex_wrap[tid]
    x = uv[0] * w - 0.5
    y = uv[1] * h - 0.5
    x0 = 0
    y0 = 0
    fx = 0.0
    fy = 0.0
    if st.tex_bilinear[tid] == 1:
        xf = ti.floor(x)
        yf = ti.floor(y)
        fx = x - xf
        fy = y - yf
        x0 = ti.cast(xf, ti.i32)
        y0 = ti.cast(yf, ti.i32)
    else:
        x0 = ti.cast(ti.floor(x + 0.5), ti.i32)
        y0 = ti.cast(ti.floor(y + 0.5), ti.i32)
    x1 = _wrap(x0 + 1, w, mode)
    y1 = _wrap(y0 + 1, h, mode)
    x0 = _wrap(x0, w, mode)
    y0 = _wrap(y0, h, mode)
    return x0, y0, x1, y1, fx, fy


@ti.func
def tex_eval(st: ti.template(), tid, uv):
    """Texture value at uv (vec3; 1-channel textures are replicated). tid < 0 gives 0."""
    return _lookup(st, tid, uv, False)


@ti.func
def tex_eval_tangent(st: ti.template(), tid, uv):
    """The tangent of tex_eval along forward mode's direction (st a core/pool.Tangent view): the same
    interpolation of the direction's texels (the lookup is linear in them)."""
    return _lookup(st, tid, uv, True)


@ti.func
def _lookup(st: ti.template(), tid, uv, tangent: ti.template()):
    res = vec3(0.0)
    if tid >= 0:
        base = st.tex_offset[tid]
        w = st.tex_w[tid]
        c = st.tex_c[tid]
        if w == 1 and st.tex_h[tid] == 1:
            res = _texel(st, base, w, c, 0, 0, tangent)
        else:
            x0, y0, x1, y1, fx, fy = _footprint(st, tid, uv)
            res = ((1.0 - fx) * (1.0 - fy)) * _texel(st, base, w, c, x0, y0, tangent) \
                + (fx * (1.0 - fy)) * _texel(st, base, w, c, x1, y0, tangent) \
                + ((1.0 - fx) * fy) * _texel(st, base, w, c, x0, y1, tangent) \
                + (fx * fy) * _texel(st, base, w, c, x1, y1, tangent)
    return res


@ti.func
def tex_eval_adjoint(st: ti.template(), tid, uv, d_out):
    """Adjoint of tex_eval: st.grad[texels] += bilinear weights * d_out (summed over channels for C=1)."""
    if tid >= 0:
        base = st.tex_offset[tid]
        w = st.tex_w[tid]
        c = st.tex_c[tid]
        if w == 1 and st.tex_h[tid] == 1:
            _texel_add(st, base, w, c, 0, 0, d_out)
        else:
            x0, y0, x1, y1, fx, fy = _footprint(st, tid, uv)
            _texel_add(st, base, w, c, x0, y0, ((1.0 - fx) * (1.0 - fy)) * d_out)
            _texel_add(st, base, w, c, x1, y0, (fx * (1.0 - fy)) * d_out)
            _texel_add(st, base, w, c, x0, y1, ((1.0 - fx) * fy) * d_out)
            _texel_add(st, base, w, c, x1, y1, (fx * fy) * d_out)


@ti.func
def tex_grad_uv(st: ti.template(), tid, uv):
    """(∂/∂u, ∂/∂v) of tex_eval at uv (vec3 each, per channel): the derivative of the bilinear
    interpolation inside the texel cell (Mitsuba's ``eval_1_grad``, analytic; with (u', v') = A (u, v)
    + b the texture's to_uv, x = u' W - 0.5, y = v' H - 0.5, so ∂/∂u' = W ∂/∂x, ∂/∂v' = H ∂/∂y and
    (∂/∂u, ∂/∂v) = Aᵀ (∂/∂u', ∂/∂v')). 0 for constants, nearest filtering and tid < 0. Units:
    texture value per unit uv."""
    du = vec3(0.0)
    dv = vec3(0.0)
    if tid >= 0 and st.tex_bilinear[tid] == 1 and not (st.tex_w[tid] == 1 and st.tex_h[tid] == 1):
        base = st.tex_offset[tid]
        w = st.tex_w[tid]
        c = st.tex_c[tid]
        x0, y0, x1, y1, fx, fy = _footprint(st, tid, uv)
        f00 = _texel(st, base, w, c, x0, y0, False)
        f10 = _texel(st, base, w, c, x1, y0, False)
        f01 = _texel(st, base, w, c, x0, y1, False)
        f11 = _texel(st, base, w, c, x1, y1, False)
        dup = ti.cast(w, float) * ((1.0 - fy) * (f10 - f00) + fy * (f11 - f01))
        dvp = ti.cast(st.tex_h[tid], float) * ((1.0 - fx) * (f01 - f00) + fx * (f11 - f10))
        A = st.tex_uvm[tid]
        du = A[0, 0] * dup + A[1, 0] * dvp
        dv = A[0, 1] * dup + A[1, 1] * dvp
    return du, dv


@ti.func
def tex_grad_uv_adjoint(st: ti.template(), tid, uv, g_du, g_dv):
    """Adjoint of tex_grad_uv: scatter <g_du, ∂/∂u> + <g_dv, ∂/∂v> into the four texels of the cell."""
    if tid >= 0 and st.tex_bilinear[tid] == 1 and not (st.tex_w[tid] == 1 and st.tex_h[tid] == 1):
        base = st.tex_offset[tid]
        w = st.tex_w[tid]
        c = st.tex_c[tid]
        x0, y0, x1, y1, fx, fy = _footprint(st, tid, uv)
        A = st.tex_uvm[tid]
        a = (A[0, 0] * g_du + A[0, 1] * g_dv) * ti.cast(w, float)
        b = (A[1, 0] * g_du + A[1, 1] * g_dv) * ti.cast(st.tex_h[tid], float)
        _texel_add(st, base, w, c, x0, y0, -(1.0 - fy) * a - (1.0 - fx) * b)
        _texel_add(st, base, w, c, x1, y0, (1.0 - fy) * a - fx * b)
        _texel_add(st, base, w, c, x0, y1, -fy * a + (1.0 - fx) * b)
        _texel_add(st, base, w, c, x1, y1, fy * a + fx * b)


@ti.func
def tex_eval_scalar(st: ti.template(), tid, uv):
    return tex_eval(st, tid, uv)[0]


@ti.func
def tex_eval_scalar_adjoint(st: ti.template(), tid, uv, d):
    """Adjoint of a 1-channel lookup: d is a scalar."""
    tex_eval_adjoint(st, tid, uv, vec3(d, 0.0, 0.0))


def resample_texture(tex, h, w):
    """Bilinear resampling of a texture (H, W, C) to (h, w, C) (texel centres aligned)."""
    H, W, C = tex.shape
    if (H, W) == (h, w):
        return tex.copy()
    ys = (np.arange(h) + 0.5) * H / h - 0.5
    xs = (np.arange(w) + 0.5) * W / w - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, H - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, W - 1)
    y1 = np.clip(y0 + 1, 0, H - 1)
    x1 = np.clip(x0 + 1, 0, W - 1)
    fy = np.clip(ys - np.floor(ys), 0, 1)[:, None, None]
    fx = np.clip(xs - np.floor(xs), 0, 1)[None, :, None]
    a = tex[y0][:, x0]
    b = tex[y0][:, x1]
    c = tex[y1][:, x0]
    d = tex[y1][:, x1]
    return ((1 - fy) * ((1 - fx) * a + fx * b) + fy * ((1 - fx) * c + fx * d)).astype(np.float32)


# ---------------------------------------------------------------------------------------- sampled spectra
@ti.func
def is_spectrum(st: ti.template(), tid):
    """Whether texture tid is a sampled spectrum (st.tex_lam >= 0)."""
    return tid >= 0 and st.tex_lam[tid] >= 0


@ti.func
def _interval(st: ti.template(), o, x):
    """(j, t, inside) of wavelength x in the spectrum at table offset o (N = st.spec_tab[o], nodes after it):
    Mitsuba's IrregularContinuousDistribution::eval_pdf — j the interval whose upper node is the first node ≥ x
    (clamped to [0, N - 2]), t the fraction along it, inside: x within [first node, last node] (else 0)."""
    n = ti.cast(st.spec_tab[o], ti.i32)
    a = 0
    b = n
    while a < b:                         # the first node >= x
        m = (a + b) // 2
        if st.spec_tab[o + 1 + m] < x:
            a = m + 1
        else:
            b = m
    j = ti.min(ti.max(a, 1), n - 1) - 1
    x0 = st.spec_tab[o + 1 + j]
    x1 = st.spec_tab[o + 2 + j]
    inside = x >= st.spec_tab[o + 1] and x <= st.spec_tab[o + n]
    return j, (x - x0) / (x1 - x0), inside


@ti.func
def spectrum_eval(st: ti.template(), tid, lam):
    """Sampled spectrum tid at the wavelengths lam (nm, Spectrum): per lane y_j + t (y_{j+1} − y_j), 0 outside
    its nodes' range (Mitsuba's regular / irregular eval)."""
    o = st.tex_lam[tid]
    base = st.tex_offset[tid]
    out = spec(0.0)
    for i in ti.static(range(lanes())):
        j, t, inside = _interval(st, o, lam[i])
        if inside:
            y0 = st.pool[base + j]
            out[i] = y0 + t * (st.pool[base + j + 1] - y0)
    return out


@ti.func
def spectrum_eval_adjoint(st: ti.template(), tid, lam, d):
    """Adjoint of spectrum_eval: per lane (1 − t) d_i into value j and t d_i into value j + 1."""
    o = st.tex_lam[tid]
    base = st.tex_offset[tid]
    for i in ti.static(range(lanes())):
        j, t, inside = _interval(st, o, lam[i])
        if inside and d[i] != 0.0:
            pool.add_gradient(st, base + j, 1, vec3((1.0 - t) * d[i], 0.0, 0.0))
            pool.add_gradient(st, base + j + 1, 1, vec3(t * d[i], 0.0, 0.0))


@ti.func
def table_eval(st: ti.template(), o, lam):
    """The constant spectrum at table offset o (N, N nodes, N values) at the wavelengths lam (Spectrum)."""
    n = ti.cast(st.spec_tab[o], ti.i32)
    out = spec(0.0)
    for i in ti.static(range(lanes())):
        j, t, inside = _interval(st, o, lam[i])
        if inside:
            y0 = st.spec_tab[o + 1 + n + j]
            out[i] = y0 + t * (st.spec_tab[o + 2 + n + j] - y0)
    return out
