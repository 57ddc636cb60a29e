"""3D grids (volumes) in the parameter pool: trilinear lookup and its hand-written adjoint.

A volume ``tid`` is a (D, H, W, C) slice of ``st.pool`` at ``st.tex_offset[tid]`` (C = 1 or 3),
voxel (z, y, x, c) at offset + ((z * H + y) * W + x) * C + c: x runs along local x, y along
local y, z along local z (Mitsuba's .vol order). Lookups take local coordinates u (the unit cube
[0, 1]^3 spans the grid): u = ``st.tex_vol[tid]`` (p, 1), the world -> local affine map of the volume
(``volume_local``; Mitsuba's gridvolume ``to_local`` = to_world⁻¹, preceded by the .vol bbox's
normalisation with use_grid_bbox; for tirender's own grids the medium's bbox). Voxel centres sit at
(i + 0.5) / res; per axis the lookup is Mitsuba's (Dr.Jit's tex_eval in 3D, textures.texel_axis):
``st.tex_bilinear`` trilinear or nearest, ``st.tex_wrap`` clamp (gridvolume's default), repeat or
mirror. Constants are 1x1x1 volumes. 1-channel volumes are replicated to RGB; their adjoint sums the
three channel gradients.

The adjoint scatters d_out with the eight trilinear weights into ``st.grad_fx`` (deterministic
fixed point, core/fixed_point.py) with ti.atomic_add, exactly like textures.py does in 2D.
"""
import numpy as np
import taichi as ti

from .. import variants
from ..core import pool
from ..core.math import vec3
from ..textures import texel_axes


PRIMAL, ADJOINT, TANGENT = 0, 1, 2      # _trilinear's compile-time mode


@ti.func
def _voxel(st: ti.template(), base, w, h, c, x, y, z, mode: ti.template()):
    o = base + ((z * h + y) * w + x) * c
    res = vec3(0.0)
    if ti.static(mode == TANGENT):
        res = pool.direction(st, o, c)
    else:
        res = pool.value(st, o, c)
    return res


@ti.func
def _voxel_add(st: ti.template(), base, w, h, c, x, y, z, d):
    pool.add_gradient(st, base + ((z * h + y) * w + x) * c, c, d)


@ti.func
def _trilinear(st: ti.template(), tid, u, d_out, mode: ti.template()):
    """The lookup of volume tid at local u: PRIMAL returns the value, TANGENT the same interpolation of forward
    mode's direction (st a core/pool.Tangent view), ADJOINT scatters the eight corner weights times d_out. A
    1x1x1 volume is a constant."""
    res = vec3(0.0)
    base = st.tex_offset[tid]
    w = st.tex_w[tid]
    h = st.tex_h[tid]
    d = st.tex_d[tid]
    c = st.tex_c[tid]
    if w * h * d == 1:
        if ti.static(mode == ADJOINT):
            _voxel_add(st, base, 1, 1, c, 0, 0, 0, d_out)
        else:
            res = _voxel(st, base, 1, 1, c, 0, 0, 0, mode)
    else:
        wrap = st.tex_wrap[tid]
        lin = st.tex_bilinear[tid] == 1
        i0, i1, f = texel_axes(u, ti.Vector([w, h, d]), wrap, lin)
        x0, y0, z0, x1, y1, z1, fx, fy, fz = i0[0], i0[1], i0[2], i1[0], i1[1], i1[2], f[0], f[1], f[2]
        for k in range(8):  # a runtime loop over the corners keeps the megakernels small
            wt = (fx if k & 1 else 1.0 - fx) * (fy if k & 2 else 1.0 - fy) * (fz if k & 4 else 1.0 - fz)
            x, y, z = x1 if k & 1 else x0, y1 if k & 2 else y0, z1 if k & 4 else z0
            if ti.static(mode == ADJOINT):
                if wt != 0.0:
                    _voxel_add(st, base, w, h, c, x, y, z, wt * d_out)
            elif wt != 0.0:
                res += wt * _voxel(st, base, w, h, c, x, y, z, mode)
    return res


@ti.func
def grid_eval(st: ti.template(), tid, u):
    """Value (vec3) of volume tid at local coordinates u (vec3 in [0, 1]^3). tid < 0 gives 0."""
    res = vec3(0.0)
    if tid >= 0:
        res = _trilinear(st, tid, u, vec3(0.0), PRIMAL)
    return res


@ti.func
def grid_eval_adjoint(st: ti.template(), tid, u, d_out):
    """Adjoint of grid_eval: grad[voxels] += trilinear weights * d_out (channels summed for C = 1).
    A zero d_out adds nothing (and touches no memory: no atomic contention on shared voxels)."""
    if tid >= 0 and (d_out[0] != 0.0 or d_out[1] != 0.0 or d_out[2] != 0.0):
        _trilinear(st, tid, u, d_out, ADJOINT)


@ti.func
def const_eval(st: ti.template(), tid):
    """Value of a 1x1x1 volume (homogeneous coefficients)."""
    res = vec3(0.0)
    if tid >= 0:
        res = _voxel(st, st.tex_offset[tid], 1, 1, st.tex_c[tid], 0, 0, 0, PRIMAL)
    return res


@ti.func
def const_eval_adjoint(st: ti.template(), tid, d_out):
    if tid >= 0 and (d_out[0] != 0.0 or d_out[1] != 0.0 or d_out[2] != 0.0):
        _voxel_add(st, st.tex_offset[tid], 1, 1, st.tex_c[tid], 0, 0, 0, d_out)


@ti.func
def grid_eval_scalar_adjoint(st: ti.template(), tid, u, d):
    """Adjoint of a 1-channel lookup's first component (d: scalar)."""
    grid_eval_adjoint(st, tid, u, vec3(d, 0.0, 0.0))


@ti.func
def volume_local(st: ti.template(), tid, p):
    """World position p -> volume tid's local coordinates (the unit cube spans the grid): tex_vol (p, 1)."""
    M = st.tex_vol[tid]
    return vec3(M[0, 0] * p[0] + M[0, 1] * p[1] + M[0, 2] * p[2] + M[0, 3],
                M[1, 0] * p[0] + M[1, 1] * p[1] + M[1, 2] * p[2] + M[1, 3],
                M[2, 0] * p[0] + M[2, 1] * p[1] + M[2, 2] * p[2] + M[2, 3])


@ti.func
def _volume_lookup(st: ti.template(), tid, p, mode: ti.template()):
    """_trilinear (PRIMAL or TANGENT) of volume tid at world position p; 0 for tid < 0."""
    res = vec3(0.0)
    if tid >= 0:
        res = _trilinear(st, tid, volume_local(st, tid, p), vec3(0.0), mode)
    return res


@ti.func
def volume_eval(st: ti.template(), tid, p):
    """Value (vec3) of volume tid at world position p (Mitsuba's Volume::eval at an interaction's p)."""
    return _volume_lookup(st, tid, p, PRIMAL)


@ti.func
def volume_corner(st: ti.template(), tid, p, k):
    """Corner k (0..7; bits 0, 1, 2: the upper x, y, z voxel) of the lookup of volume tid (tid >= 0) at world
    position p: (pool offset, weight); a 1x1x1 volume is its voxel at k = 0. For lookups that transform each
    voxel before interpolating (Mitsuba's spectral grids: bsdfs/base.py)."""
    base = st.tex_offset[tid]
    w = st.tex_w[tid]
    h = st.tex_h[tid]
    d = st.tex_d[tid]
    off = base
    wt = 1.0 if k == 0 else 0.0
    if w * h * d != 1:
        u = volume_local(st, tid, p)
        wrap = st.tex_wrap[tid]
        lin = st.tex_bilinear[tid] == 1
        i0, i1, f = texel_axes(u, ti.Vector([w, h, d]), wrap, lin)
        x0, y0, z0, x1, y1, z1, fx, fy, fz = i0[0], i0[1], i0[2], i1[0], i1[1], i1[2], f[0], f[1], f[2]
        off = base + (((z1 if k & 4 else z0) * h + (y1 if k & 2 else y0)) * w + (x1 if k & 1 else x0)) * \
            st.tex_c[tid]
        wt = (fx if k & 1 else 1.0 - fx) * (fy if k & 2 else 1.0 - fy) * (fz if k & 4 else 1.0 - fz)
    return off, wt


@ti.func
def volume_spectrum(st: ti.template(), tid, p, lam, d, adjoint: ti.template()):
    """Mitsuba's spectral lookup of a 3-channel volume tid (GridVolume's interpolate_spectral; spectral variants) at
    world position p and wavelengths lam: the voxels' spectra S_i = S(c(rgb_i / k_i)) and, apart, their scales
    k_i = 2 max(rgb_i), each interpolated, then multiplied: (Σ w_i S_i)(Σ w_i k_i) (not the spectrum of the
    interpolated RGB). Returns it (Spectrum), or (adjoint) scatters ∂<d, ·>/∂voxels into the pool:
    w_i [B ∂<d, S_i>/∂rgb_i + <d, A> ∂k_i/∂rgb_i] with A = Σ w S, B = Σ w k (a second pass over the corners).
    Each pass is a runtime loop: one upsampling in the megakernel."""
    A = variants.spec(0.0)
    B = 0.0
    for k in range(8):
        off, wt = volume_corner(st, tid, p, k)
        if wt != 0.0:
            s, f = variants.texel_spectrum(pool.value(st, off, 3), lam)
            A += wt * s
            B += wt * f
    if ti.static(adjoint):
        dA = d.dot(A)
        for k in range(8):
            off, wt = volume_corner(st, tid, p, k)
            if wt != 0.0:
                g = variants.texel_spectrum_adjoint(pool.value(st, off, 3), lam, (wt * B) * d, wt * dA)
                pool.add_gradient(st, off, 3, g)
    return A * B


@ti.func
def volume_eval_tangent(st: ti.template(), tid, p):
    """The tangent of volume_eval along forward mode's direction (st a core/pool.Tangent view)."""
    return _volume_lookup(st, tid, p, TANGENT)


@ti.func
def volume_eval_adjoint(st: ti.template(), tid, p, d_out):
    """Adjoint of volume_eval w.r.t. the voxel values."""
    grid_eval_adjoint(st, tid, volume_local(st, tid, p), d_out)


@ti.func
def clip_bbox(st: ti.template(), m, o, d, tmax):
    """Parametric interval [t0, t1] of ray o + t d inside medium m's bbox, within [0, tmax]
    (t1 <= t0: no overlap)."""
    bmin = st.med_bmin[m]
    bmax = st.med_bmax[m]
    t0 = 0.0
    t1 = tmax
    for k in ti.static(range(3)):
        if ti.abs(d[k]) > 1e-20:
            inv = 1.0 / d[k]
            ta = (bmin[k] - o[k]) * inv
            tb = (bmax[k] - o[k]) * inv
            t0 = ti.max(t0, ti.min(ta, tb))
            t1 = ti.min(t1, ti.max(ta, tb))
        elif o[k] < bmin[k] or o[k] > bmax[k]:
            t1 = -1.0
    return t0, t1


# ---------------------------------------------------------------------------- numpy helpers
def trilinear_np(data, u):
    """Reference lookup (numpy, float64): data (D, H, W, C), u (N, 3) in [0, 1]^3 -> (N, C)."""
    data = np.asarray(data, np.float64)
    D, H, W, C = data.shape
    u = np.atleast_2d(np.asarray(u, np.float64))

    def axis(x, n):
        p = x * n - 0.5
        pf = np.floor(p)
        i = pf.astype(int)
        return np.clip(i, 0, n - 1), np.clip(i + 1, 0, n - 1), p - pf

    x0, x1, fx = axis(u[:, 0], W)
    y0, y1, fy = axis(u[:, 1], H)
    z0, z1, fz = axis(u[:, 2], D)
    if W * H * D == 1:
        return np.repeat(data.reshape(1, C), len(u), 0)
    out = np.zeros((len(u), C))
    for k in range(8):
        wx = fx if k & 1 else 1 - fx
        wy = fy if k & 2 else 1 - fy
        wz = fz if k & 4 else 1 - fz
        out += (wx * wy * wz)[:, None] * data[np.where(k & 4, z1, z0), np.where(k & 2, y1, y0),
                                              np.where(k & 1, x1, x0)]
    return out


def resample_grid(data, resolution):
    """Trilinear resampling of a (D, H, W, C) grid to `resolution` (n or (D, H, W)); voxel centres
    aligned (the same convention as the lookup), used for coarse-to-fine optimisation."""
    data = np.asarray(data, np.float32)
    r = (int(resolution),) * 3 if np.isscalar(resolution) else tuple(int(x) for x in resolution)
    if data.shape[:3] == r:
        return data.copy()
    zs, ys, xs = ((np.arange(n) + 0.5) / n for n in r)
    Z, Y, X = np.meshgrid(zs, ys, xs, indexing="ij")
    u = np.stack([X.ravel(), Y.ravel(), Z.ravel()], -1)
    return trilinear_np(data, u).reshape(r + (data.shape[3],)).astype(np.float32)


def grid_slices(data, n=8, vmax=None):
    """A PNG-ready montage (linear RGB, values in [0, 1]) of n evenly spaced z-slices of a
    (D, H, W, C) grid, side by side, each flipped so that +y is up; normalised by vmax (default:
    the grid's max)."""
    data = np.asarray(data, np.float32)
    D = data.shape[0]
    vmax = float(data.max()) if vmax is None else float(vmax)
    zs = np.linspace(0, D - 1, min(n, D)).round().astype(int)
    tiles = []
    for z in zs:
        s = data[z][::-1]
        s = s if s.shape[2] == 3 else np.repeat(s[..., :1], 3, axis=2)
        tiles.append(np.pad(np.clip(s / max(vmax, 1e-12), 0, 1), ((1, 1), (1, 1), (0, 0)), constant_values=0.25))
    return np.concatenate(tiles, axis=1)


def tv_grid(data, eps=1e-4):
    """Smoothed isotropic total variation of a (D, H, W, C) grid: mean over voxels of
    sqrt(dx^2 + dy^2 + dz^2 + eps) - sqrt(eps) (forward differences). Returns (value, gradient
    shaped like data); the optimiser's ``tv`` option uses it for 3D grids."""
    x = np.asarray(data, np.float64)
    d = [np.zeros_like(x) for _ in range(3)]
    d[0][:-1] = x[1:] - x[:-1]
    d[1][:, :-1] = x[:, 1:] - x[:, :-1]
    d[2][:, :, :-1] = x[:, :, 1:] - x[:, :, :-1]
    mag = np.sqrt(d[0] ** 2 + d[1] ** 2 + d[2] ** 2 + eps)
    n = x.size
    val = float((mag - np.sqrt(eps)).sum() / n)
    g = np.zeros_like(x)
    gz, gy, gx = (di / mag / n for di in d)
    g[:-1] -= gz[:-1]
    g[1:] += gz[:-1]
    g[:, :-1] -= gy[:, :-1]
    g[:, 1:] += gy[:, :-1]
    g[:, :, :-1] -= gx[:, :, :-1]
    g[:, :, 1:] += gx[:, :, :-1]
    return val, g.astype(np.float32)
