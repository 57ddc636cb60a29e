"""Bitmap textures stored in the parameter pool: lookup (nearest / bilinear; repeat / clamp / mirror) and
its adjoint, as Mitsuba 3's ``bitmap`` texture (Dr.Jit's texture: drjit/texture_impl.h).

A texture ``tid`` is a (H, W, C) slice of ``st.pool`` at ``st.tex_offset[tid]``, texel (row y, column x,
channel c) at offset + (y * W + x) * C + c, row 0 at the top of the image; uv (0, 0) is the image's
top-left corner (v grows downwards: Mitsuba 3's bitmap convention; OBJ files are flipped on load,
as Mitsuba's obj loader does). The lookup point is uv' = to_uv (u, v, 1) (``st.tex_uvm``), then per axis:

    nearest:   texel floor(u' W)                                      (no half-texel shift)
    bilinear:  p = u' W - 0.5, texels floor(p) and floor(p) + 1, weight of the upper one p - floor(p)

and integer texel indices outside [0, W) are wrapped (``wrap_index``): ``repeat`` i mod W, ``clamp`` to
[0, W - 1], ``mirror`` i mod 2W folded back (m < W ? m : 2W - 1 - m) — the bilinear footprint is wrapped
per texel, so a mirrored border interpolates between a texel and itself. Constants are 1x1 textures.
``st.tex_flags``: TEX_VOLUME (a 3D grid looked up at the world position, media/grid.py; BSDF slots
dispatch on it), TEX_RAW (BSDF colour slots return the value as is: no spectral upsampling; Mitsuba's
``rawconstant``).
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

REPEAT, CLAMP, MIRROR = 0, 1, 2          # st.tex_wrap
WRAP_MODES = {"repeat": REPEAT, "clamp": CLAMP, "mirror": MIRROR}
TEX_VOLUME, TEX_RAW = 1, 2               # st.tex_flags bits
_MAX_INDEX = 1.0e9                       # texel coordinates are clamped to ±this before the integer cast


@ti.func
def wrap_index(i, n, mode):
    """Integer texel index i wrapped into [0, n) as Dr.Jit's ``tex_wrap``: REPEAT i mod n, CLAMP to [0, n - 1],
    MIRROR m = i mod 2n, then m if m < n else 2n - 1 - m (…, 1, 0 | 0, 1, …, n - 1 | n - 1, …). (Taichi's %
    is Python's: non-negative for n > 0; min(m, 2n - 1 - m) leaves a repeated m < n unchanged.)"""
    r = ti.min(ti.max(i, 0), n - 1)
    if mode != CLAMP:
        m = i % (n + n * (mode // MIRROR))
        r = ti.min(m, 2 * n - 1 - m)
    return r


@ti.func
def texel_axis(x, n, mode, bilinear):
    """One axis of a lookup at x (texture coordinate, 1 = the extent) over n texels: (i0, i1, f) with the
    texels i0, i1 (wrapped) and f the weight of i1, as Dr.Jit's ``tex_eval``: bilinear p = x n - 0.5,
    i0 = floor(p), i1 = i0 + 1, f = p - floor(p); nearest i0 = i1 = floor(x n), f = 0."""
    lin = ti.cast(bilinear, ti.i32)
    p = ti.min(ti.max(x * ti.cast(n, float) - 0.5 * lin, -_MAX_INDEX), _MAX_INDEX)
    pf = ti.floor(p)
    i = ti.cast(pf, ti.i32)
    return wrap_index(i, n, mode), wrap_index(i + lin, n, mode), (p - pf) * lin


@ti.func
def texel_axes(x, n, mode, bilinear):
    """texel_axis on every axis of a lookup at x (vector, 2 or 3 axes) over n texels per axis (integer vector of the
    same length): (i0, i1, f) as vectors. The axes are a runtime loop: one texel_axis in the megakernel."""
    i0 = n * 0
    i1 = n * 0
    f = x * 0.0
    for a in range(ti.static(n.get_shape()[0])):
        a0, a1, fa = texel_axis(x[a], n[a], mode, bilinear)
        i0[a] = a0
        i1[a] = a1
        f[a] = fa
    return i0, i1, f


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
    the texture's to_uv transform); nearest filtering: x1 = x0, y1 = y0, fx = fy = 0."""
    uv = st.tex_uvm[tid] @ ti.Vector([uv_in[0], uv_in[1], 1.0])
    mode = st.tex_wrap[tid]
    lin = st.tex_bilinear[tid] == 1
    i0, i1, f = texel_axes(ti.Vector([uv[0], uv[1]]), ti.Vector([st.tex_w[tid], st.tex_h[tid]]), mode, lin)
    return i0[0], i0[1], i1[0], i1[1], f[0], f[1]


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
        else:   # nearest: x1 = x0, y1 = y0, weights (1, 0, 0, 0)
            x0, y0, x1, y1, fx, fy = _footprint(st, tid, uv)
            for k in range(4):         # a runtime loop: one texel read in the megakernel
                x, y, wt = _corner(x0, y0, x1, y1, fx, fy, k)
                res += wt * _texel(st, base, w, c, x, y, tangent)
    return res


@ti.func
def _corner(x0, y0, x1, y1, fx, fy, k):
    """Corner k (bit 0: the upper x texel, bit 1: the upper y one) of the footprint (_footprint): (x, y, bilinear
    weight)."""
    return (x1 if k & 1 else x0), (y1 if k & 2 else y0), (fx if k & 1 else 1.0 - fx) * (fy if k & 2 else 1.0 - fy)


@ti.func
def tex_corner(st: ti.template(), tid, uv, k):
    """Corner k (0..3; bit 0: the upper x texel, bit 1: the upper y one) of the lookup of bitmap tid (tid >= 0)
    at uv: (pool offset, weight); a 1x1 texture is its texel at k = 0 (weight 0 elsewhere). For lookups that
    transform each texel before interpolating (Mitsuba's spectral bitmaps: bsdfs/base.py)."""
    base = st.tex_offset[tid]
    w = st.tex_w[tid]
    c = st.tex_c[tid]
    off = base
    wt = 1.0 if k == 0 else 0.0
    if not (w == 1 and st.tex_h[tid] == 1):
        x0, y0, x1, y1, fx, fy = _footprint(st, tid, uv)
        x, y, wt_k = _corner(x0, y0, x1, y1, fx, fy, k)
        off = base + (y * w + x) * c
        wt = wt_k
    return off, wt


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
            for k in range(4):
                x, y, wt = _corner(x0, y0, x1, y1, fx, fy, k)
                _texel_add(st, base, w, c, x, y, wt * d_out)


@ti.func
def _uv_varying(st: ti.template(), tid):
    """Whether texture tid's value varies smoothly with uv (a bilinear bitmap larger than 1x1)."""
    res = False
    if tid >= 0:
        res = st.tex_bilinear[tid] == 1 and (st.tex_flags[tid] & TEX_VOLUME) == 0 and \
            not (st.tex_w[tid] == 1 and st.tex_h[tid] == 1)
    return res


@ti.func
def tex_grad_uv(st: ti.template(), tid, uv):
    """(∂/∂u, ∂/∂v) of tex_eval at uv (vec3 each, per channel): the derivative of the bilinear
    interpolation inside the texel cell (Mitsuba's ``eval_1_grad``, analytic; with (u', v') = A (u, v)
    + b the texture's to_uv, x = u' W - 0.5, y = v' H - 0.5, so ∂/∂u' = W ∂/∂x, ∂/∂v' = H ∂/∂y and
    (∂/∂u, ∂/∂v) = Aᵀ (∂/∂u', ∂/∂v')). 0 for constants, nearest filtering and tid < 0. Units:
    texture value per unit uv."""
    du = vec3(0.0)
    dv = vec3(0.0)
    if _uv_varying(st, tid):
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
    if _uv_varying(st, tid):
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


def bitmap_format(img, fmt, file=None, key=None, variant="rgb", stored=None):
    """Mitsuba's bitmap ``format`` (the texels' storage precision) applied to a linear (H, W, C) float32 image:
    ``auto`` / ``variant`` as read (float32; Mitsuba's auto keeps an 8-bit source's bytes, which is the same
    value, and stores a 16-bit source in half precision: within 2^-11 relative), ``float16`` (``fp16``) rounded
    to half precision, ``uint8`` as read when the file holds 8-bit values (``stored``: the values as the file
    stores them, before any sRGB decoding; default img) and refused otherwise (Mitsuba quantises other sources
    with dithering) and in the spectral variants (as Mitsuba)."""
    from .errors import ConfigError
    if fmt in ("auto", "variant"):
        return img
    if fmt in ("float16", "fp16"):
        return img.astype(np.float16).astype(np.float32)
    if fmt != "uint8":
        raise ConfigError(f"unknown format {fmt!r} (auto, variant, float16, uint8)", file, key)
    if variant in ("spectral", "spectral_polarized"):
        raise ConfigError("format uint8 is not available in the spectral variants (as Mitsuba's)", file, key)
    v = np.asarray(img if stored is None else stored, np.float64) * 255.0
    if not np.all(np.abs(v - np.round(v)) < 1e-4):
        raise ConfigError("format uint8 of an image that is not 8-bit: Mitsuba quantises it with dithering, which "
                          "tirender does not reproduce (use auto, variant or float16)", file, key)
    return img


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
    """Whether texture tid is a sampled spectrum (st.tex_lam >= 0; no table read for tid < 0)."""
    res = False
    if tid >= 0:
        res = st.tex_lam[tid] >= 0
    return res


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
    for i in range(ti.static(lanes())):   # a runtime loop over the lanes: one search in the megakernel
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
    for i in range(ti.static(lanes())):   # a runtime loop over the lanes: one search in the megakernel
        j, t, inside = _interval(st, o, lam[i])
        if inside and d[i] != 0.0:
            pool.add_gradient(st, base + j, 1, vec3((1.0 - t) * d[i], 0.0, 0.0))
            pool.add_gradient(st, base + j + 1, 1, vec3(t * d[i], 0.0, 0.0))


@ti.func
def table_eval(st: ti.template(), o, lam):
    """The constant spectrum at table offset o (N, N nodes, N values) at the wavelengths lam (Spectrum)."""
    n = ti.cast(st.spec_tab[o], ti.i32)
    out = spec(0.0)
    for i in range(ti.static(lanes())):   # a runtime loop over the lanes: one search in the megakernel
        j, t, inside = _interval(st, o, lam[i])
        if inside:
            y0 = st.spec_tab[o + 1 + n + j]
            out[i] = y0 + t * (st.spec_tab[o + 2 + n + j] - y0)
    return out
