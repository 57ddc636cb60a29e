"""RGB → spectrum upsampling (Jakob & Hanika 2019): linear sRGB in [0,1]³ ↦ a smooth reflectance spectrum
s(λ) = S(c0 λ² + c1 λ + c2), S(x) = ½ + x / (2√(1+x²)), with c from the coefficient table that
``fit_srgb_table.py`` generates: on first use, once per machine (about 20 s on two cores), into
``table_path()`` ($TIRENDER_CACHE_DIR, else $XDG_CACHE_HOME/tirender or ~/.cache/tirender).

The lookup is the table's trilinear interpolation (largest channel picks the sub-table; z = that channel on
the table's smoothstep nodes, x and y the other two channels over z on its ``xy`` nodes), so s(λ) is a piecewise-smooth function
of the RGB input and differentiable almost everywhere: ``eval_adjoint`` gives ∂s(λ)/∂rgb for the gradient of
an RGB parameter through the upsampling.

Emitters (Mitsuba 3's ``d65`` convention): an RGB radiance L is L_s(λ) = S(c(L / k)) · k · D65(λ) with
k = 2 max(L), so the upsampled colour is a reflectance-like spectrum of maximum ½ (smooth) and white light is
D65.

Host: ``fetch_np(rgb)`` (..., 3) → coefficients, ``eval_np(c, λ)``. Device (after ``bind()``): the
coefficients and Jacobian (``lookup``), ``reflectance_lanes(rgb, λ)`` / ``reflectance_lanes_adjoint`` for a
path's wavelengths (one lookup for all lanes).
"""
import os

import numpy as np
import taichi as ti

from ..core.math import vec3
from .fit_srgb_table import table_path, write_table

_table = None


def _fit_once(path):
    """Fit the table into ``path`` unless another process is doing it (then wait for its file): processes
    starting together (test workers, Ray workers) fit it once."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        import fcntl
    except ImportError:              # no advisory locks (Windows): each process fits; the write is atomic
        write_table(path, progress=False)
        return
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not os.path.exists(path):
                write_table(path, progress=False)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def table():
    """(scale (res,) z nodes, xy (res,) x/y nodes, coeffs (3, res, res, res, 3)) float32, loaded once; fitted
    and cached on first use."""
    global _table
    if _table is None:
        path = table_path()
        if not os.path.exists(path):
            _fit_once(path)
        with np.load(path) as z:
            _table = (z["scale"].astype(np.float32), z["xy"].astype(np.float32), z["coeffs"].astype(np.float32))
    return _table


def _node(nodes, v):
    """(cell index, weight of the upper node) of v on the increasing nodes (clamped to the first/last cell)."""
    res = len(nodes)
    k = np.clip(np.searchsorted(nodes, v, side="right") - 1, 0, res - 2)
    return k, (v - nodes[k]) / (nodes[k + 1] - nodes[k])


def _cell(rgb, scale, xy):
    """Sub-table, cell indices and weights of rgb (N, 3) in [0,1]³ (rgb not all zero)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    i = np.where(rgb[:, 2] >= np.maximum(rgb[:, 0], rgb[:, 1]), 2, np.where(rgb[:, 1] >= rgb[:, 0], 1, 0))
    n = np.arange(len(rgb))
    z = rgb[n, i]
    xi, xw = _node(xy, rgb[n, (i + 1) % 3] / np.maximum(z, 1e-30))
    yi, yw = _node(xy, rgb[n, (i + 2) % 3] / np.maximum(z, 1e-30))
    zi, zw = _node(scale, z)
    return i, xi, yi, zi, xw, yw, zw


def fetch_np(rgb):
    """Coefficients (..., 3) of the spectra of linear sRGB values rgb (..., 3), clamped to [0,1]; black gives
    c = (0, 0, −inf) (s ≡ 0) and white (1, 1, 1) gives (0, 0, +inf) (s ≡ 1), as Mitsuba 3."""
    scale, xy, coeffs = table()
    rgb = np.clip(np.asarray(rgb, dtype=np.float64), 0.0, 1.0)
    shape = rgb.shape
    flat = rgb.reshape(-1, 3)
    out = np.zeros((len(flat), 3))
    black = flat.max(-1) <= 0.0
    white = flat.min(-1) >= 1.0
    ok = ~(black | white)
    if ok.any():
        i, xi, yi, zi, xw, yw, zw = _cell(flat[ok], scale, xy)
        acc = 0.0
        for dz in (0, 1):
            for dy in (0, 1):
                for dx in (0, 1):
                    w = (zw if dz else 1 - zw) * (yw if dy else 1 - yw) * (xw if dx else 1 - xw)
                    acc = acc + w[:, None] * coeffs[i, zi + dz, yi + dy, xi + dx]
        out[ok] = acc
    out[black] = (0.0, 0.0, -np.inf)
    out[white] = (0.0, 0.0, np.inf)
    return out.reshape(shape)


def eval_np(c, lam):
    """s(λ) for coefficients c (..., 3) at wavelengths lam (..., n) nm → (..., n)."""
    c = np.asarray(c, dtype=np.float64)
    lam = np.asarray(lam, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        x = (c[..., 0:1] * lam + c[..., 1:2]) * lam + c[..., 2:3]
        s = 0.5 * x / np.sqrt(1.0 + x * x) + 0.5
    inf = np.isinf(c[..., 2:3])
    return np.where(inf, np.where(c[..., 2:3] > 0, 1.0, 0.0), np.maximum(s, 0.0))


class Table:
    """The coefficient table as Taichi fields (one per process, created by ``bind()`` after ti.init, in Python
    scope; the device functions below read it at compile time): ``scale`` (res,) z nodes, ``xy`` (res,) x/y nodes,
    ``coeffs`` (3, res, res, res) of vec3, and per node
    set a uniform index (``scale_bin``, ``xy_bin``: BINS bins of [0, 1] → the node at or below each bin's start), so
    that a lookup's cell search is one load and a step or two instead of a binary search (same cells: the
    images are bit-identical; spectral cbox 256², 64 spp 3.93 → 3.15 s)."""

    def __init__(self):
        scale, xy, coeffs = table()
        self.res = len(scale)
        self.scale = ti.field(ti.f32, shape=self.res)
        self.scale.from_numpy(scale)
        self.xy = ti.field(ti.f32, shape=self.res)
        self.xy.from_numpy(xy)
        self.coeffs = ti.Vector.field(3, ti.f32, shape=coeffs.shape[:4])
        self.coeffs.from_numpy(coeffs)
        self.scale_bin = ti.field(ti.i32, shape=BINS)
        self.scale_bin.from_numpy(_bins(scale))
        self.xy_bin = ti.field(ti.i32, shape=BINS)
        self.xy_bin.from_numpy(_bins(xy))


BINS = 256   # the uniform index over [0, 1] each node search starts from (``_find``)


def _bins(nodes):
    """For bin b of [0, 1] (BINS bins): the largest k <= len(nodes) − 2 with nodes[k] <= b / BINS (int32)."""
    k = np.searchsorted(nodes, np.arange(BINS) / BINS, side="right") - 1
    return np.clip(k, 0, len(nodes) - 2).astype(np.int32)


_fields = None


def bind():
    """The device table (created on first call)."""
    global _fields
    if _fields is None:
        _fields = Table()
    return _fields


@ti.func
def _find(nodes: ti.template(), bins: ti.template(), v):
    """(k, weight of node k+1, node spacing): the cell of v ∈ [0, 1] on increasing nodes — the largest
    k <= res − 2 with nodes[k] <= v — from the uniform index ``bins`` (Table), then steps forward."""
    res = ti.static(nodes.shape[0])
    k = bins[ti.max(ti.min(ti.cast(v * ti.static(float(BINS)), ti.i32), ti.static(BINS - 1)), 0)]   # NaN-safe
    while k < res - 2 and nodes[k + 1] <= v:
        k += 1
    dn = nodes[k + 1] - nodes[k]
    return k, (v - nodes[k]) / dn, dn


@ti.func
def sigmoid_poly(c, lam):
    """s(λ) = S(c0 λ² + c1 λ + c2) and dS/dx."""
    x = (c[0] * lam + c[1]) * lam + c[2]
    q = 1.0 / ti.sqrt(1.0 + x * x)
    return ti.max(0.5 * x * q + 0.5, 0.0), 0.5 * q * q * q


@ti.func
def lookup(rgb, jacobian: ti.template()):
    """(coefficients, ∂c/∂rgb (3×3; zero unless ``jacobian``, compile-time), valid) at rgb clamped to [0,1]³ (the
    table's trilinear interpolation); rgb = 0 gives valid = 0 (the zero reflectance). The eight corners are a
    runtime loop and the primal compiles no Jacobian: one lookup is inlined at every colour slot of a megakernel."""
    scale, xy, coeffs = ti.static(bind().scale, bind().xy, bind().coeffs)
    scale_bin, xy_bin = ti.static(bind().scale_bin, bind().xy_bin)
    v = ti.math.clamp(rgb, 0.0, 1.0)
    i = 0
    if v[1] >= v[0]:
        i = 1
    if v[2] >= ti.max(v[0], v[1]):
        i = 2
    z = v[i]
    c = vec3(0.0)
    J = ti.Matrix.zero(float, 3, 3)
    valid = 0
    if z > 0.0:
        valid = 1
        i1 = (i + 1) % 3
        i2 = (i + 2) % 3
        xr = v[i1] / z
        yr = v[i2] / z
        xi, xw, dx = _find(xy, xy_bin, xr)
        yi, yw, dy = _find(xy, xy_bin, yr)
        zi, zw, dz = _find(scale, scale_bin, z)
        dcx = vec3(0.0)
        dcy = vec3(0.0)
        dcz = vec3(0.0)
        for n in range(8):             # corner (a, b, e) = the bits of n, in the order a, b, e of nested loops
            a = n >> 2
            b = (n >> 1) & 1
            e = n & 1
            k = coeffs[i, zi + a, yi + b, xi + e]
            wz = ti.select(a == 1, zw, 1.0 - zw)
            wy = ti.select(b == 1, yw, 1.0 - yw)
            wx = ti.select(e == 1, xw, 1.0 - xw)
            c += wz * wy * wx * k
            if ti.static(jacobian):
                dcx += (2.0 * e - 1.0) * wz * wy * k
                dcy += (2.0 * b - 1.0) * wz * wx * k
                dcz += (2.0 * a - 1.0) * wy * wx * k
        if ti.static(jacobian):
            # chain: xw = (v_i1 / z − x_k) / Δx, yw likewise, zw = (z − z_k) / Δz
            for r in ti.static(range(3)):
                J[r, i1] = dcx[r] / (z * dx)
                J[r, i2] = dcy[r] / (z * dy)
                J[r, i] = dcz[r] / dz - dcx[r] * xr / (z * dx) - dcy[r] * yr / (z * dy)
    return c, J, valid


@ti.func
def reflectance_lanes(rgb, lam):
    """s(λ_i) for the wavelengths of a path (lam: one per lane, any lane count): one table lookup, one sigmoid
    evaluation per lane."""
    out = lam * 0.0
    if ti.min(rgb[0], rgb[1], rgb[2]) >= 1.0:
        out = lam * 0.0 + 1.0
    else:
        c, _, valid = lookup(rgb, False)
        if valid:
            for i in ti.static(range(lam.get_shape()[0])):
                out[i], _ = sigmoid_poly(c, lam[i])
    return out


@ti.func
def reflectance_lanes_adjoint(rgb, lam, d):
    """∂<d, reflectance_lanes(rgb, λ)>/∂rgb (vec3)."""
    g = vec3(0.0)
    if ti.min(rgb[0], rgb[1], rgb[2]) < 1.0:
        c, J, valid = lookup(rgb, True)
        if valid:
            dc = vec3(0.0)
            for i in ti.static(range(lam.get_shape()[0])):
                _, ds = sigmoid_poly(c, lam[i])
                dc += d[i] * ds * vec3(lam[i] * lam[i], lam[i], 1.0)
            g = J.transpose() @ dc
            for k in ti.static(range(3)):
                if rgb[k] < 0.0 or rgb[k] > 1.0:
                    g[k] = 0.0
    return g
