"""Generate the RGB → spectrum coefficient table of Jakob & Hanika 2019, "A Low-Dimensional Function Space
for Efficient Spectral Upsampling" (sRGB gamut, D65 white).

A reflectance spectrum is s(λ) = S(c0 λ² + c1 λ + c2) with the sigmoid S(x) = ½ + x / (2 √(1 + x²)). For
every cell of a 3 × res³ grid over RGB (for each largest channel l, z = that channel's value on a
smoothstep(smoothstep) scale, x and y the other two channels divided by z on the nodes ``xy_nodes``), the
three coefficients are
fitted so that the spectrum's colour under D65 (CIE 1931 2°, integrated by Simpson's 3/8 rule over the
5 nm table refined three times) matches the target in CIELAB, by Gauss–Newton with the analytic Jacobian.
Cells are solved by continuation along z from z = res/5 outwards (each fit starts at its neighbour's
solution), all (x, y) cells of a slice at once in numpy float64.

tirender fits it on first use and caches it (``table_path()``); ``python -m
tirender.spectra.fit_srgb_table [--res 64] [--out PATH]`` writes one by hand. The file holds the arrays ``scale`` (res,) (z nodes), ``xy`` (res,) (x and y nodes) and ``coeffs`` (3, res,
res, res, 3) float32 indexed [l, z, y, x], coefficients for λ in nm). A 64-resolution table takes about 20 s on this 2-core machine.
"""
import argparse
import os
import sys

import numpy as np

from . import cie

TABLE_NAME = "srgb_table_v2_64.npz"     # bump the version when the fit changes


def table_path():
    """Where the fitted table is cached: $TIRENDER_CACHE_DIR, else $XDG_CACHE_HOME/tirender or ~/.cache/tirender."""
    base = os.environ.get("TIRENDER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tirender")
    return os.path.join(base, TABLE_NAME)


def _smoothstep(x):
    return x * x * (3.0 - 2.0 * x)


def quadrature():
    """(λ01 (F,) normalised wavelengths in [0,1], T (3, F)): ∫ s(λ) D65(λ) rgb̄(λ) dλ ≈ T @ s(λ01),
    with D65 scaled so that s = 1 gives Y = 1."""
    n_fine = (cie.N_SAMPLES - 1) * 3 + 1
    lam = np.linspace(cie.LAMBDA_MIN, cie.LAMBDA_MAX, n_fine)
    h = (cie.LAMBDA_MAX - cie.LAMBDA_MIN) / (n_fine - 1)
    w = np.full(n_fine, 3.0 / 8.0 * h)
    inner = np.arange(1, n_fine - 1)
    w[inner] *= np.where((inner - 1) % 3 == 2, 2.0, 3.0)
    xyz = cie.cmf(lam)                                        # (F, 3)
    illum = cie.d65(lam)
    illum = illum / (w * illum * xyz[:, 1]).sum()             # white reflectance → Y = 1
    T = (cie.XYZ_TO_SRGB @ (xyz * (illum * w)[:, None]).T)    # (3, F)
    lam01 = (lam - cie.LAMBDA_MIN) / (cie.LAMBDA_MAX - cie.LAMBDA_MIN)
    return lam01, T


_WHITE = cie.SRGB_TO_XYZ @ np.ones(3)       # XYZ of sRGB white (D65, Y = 1)
_DELTA = 6.0 / 29.0


def _lab(rgb):
    """CIELAB of linear sRGB (..., 3) with the D65 white, and its Jacobian d lab / d rgb (..., 3, 3)."""
    xyz = rgb @ cie.SRGB_TO_XYZ.T / _WHITE
    cube = xyz > _DELTA ** 3
    f = np.where(cube, np.cbrt(np.maximum(xyz, 1e-30)), xyz / (3 * _DELTA ** 2) + 4.0 / 29.0)
    df = np.where(cube, 1.0 / (3.0 * np.cbrt(np.maximum(xyz, 1e-30)) ** 2), 1.0 / (3 * _DELTA ** 2))
    lab = np.stack([116.0 * f[..., 1] - 16.0, 500.0 * (f[..., 0] - f[..., 1]), 200.0 * (f[..., 1] - f[..., 2])], -1)
    dlab_df = np.array([[0.0, 116.0, 0.0], [500.0, -500.0, 0.0], [0.0, 200.0, -200.0]])
    dxyz_drgb = cie.SRGB_TO_XYZ / _WHITE[:, None]
    J = dlab_df[None] * df[..., None, :] if df.ndim == 1 else dlab_df * df[..., None, :]
    return lab, J @ dxyz_drgb


def _spectrum_rgb(c, lam01, T):
    """RGB (N, 3) of the spectra with normalised coefficients c (N, 3), and d rgb / d c (N, 3, 3)."""
    basis = np.stack([lam01 ** 2, lam01, np.ones_like(lam01)], -1)   # (F, 3)
    x = c @ basis.T                                                  # (N, F) the polynomial
    q = np.multiply(x, x)
    q += 1.0
    np.sqrt(q, out=q)
    np.divide(1.0, q, out=q)                                         # 1 / sqrt(1 + x²)
    s = np.multiply(x, q, out=x)
    s *= 0.5
    s += 0.5                                                         # the sigmoid
    rgb = s @ T.T
    ds = q * q
    ds *= q
    ds *= 0.5                                                        # its derivative
    jb = (T.T[:, :, None] * basis[:, None, :]).reshape(len(lam01), 9)  # T[k, f] λ01^(2-c) at 3k + c
    d = (ds @ jb).reshape(-1, 3, 3)
    return rgb, d


def gauss_newton(target, c, lam01, T, iters=30):
    """Fit normalised coefficients c (N, 3) (updated from the given start) to target linear sRGB (N, 3) in
    CIELAB; returns (c, residual norm (N,)). Converged cells (|r|² < 1e-6) drop out of the iteration."""
    lab_t, _ = _lab(target)
    c = c.copy()
    r = np.full(len(c), np.inf)
    idx = np.arange(len(c))
    for _ in range(iters):
        rgb, drgb = _spectrum_rgb(c[idx], lam01, T)
        lab, dlab = _lab(rgb)
        res = lab_t[idx] - lab
        r[idx] = (res * res).sum(-1)
        keep = r[idx] >= 1e-6
        idx, res, J = idx[keep], res[keep], (dlab @ drgb)[keep]
        if len(idx) == 0:
            break
        det_ok = np.abs(np.linalg.det(J)) > 1e-300
        step = np.zeros((len(idx), 3))
        if det_ok.any():
            step[det_ok] = np.linalg.solve(J[det_ok], res[det_ok][..., None])[..., 0]
        ci = c[idx] + step
        big = ci.max(-1)
        c[idx] = np.where((big > 200.0)[:, None], ci * (200.0 / np.maximum(big, 1e-30))[:, None], ci)
    return c, np.sqrt(np.where(np.isfinite(r), r, 0.0))


def to_nm(c):
    """Coefficients for λ ∈ [0,1] on 360–830 → coefficients for λ in nm."""
    c0, c1 = cie.LAMBDA_MIN, 1.0 / (cie.LAMBDA_MAX - cie.LAMBDA_MIN)
    A, B, C = c[..., 0], c[..., 1], c[..., 2]
    return np.stack([A * c1 * c1, B * c1 - 2.0 * A * c0 * c1 * c1, C - B * c0 * c1 + A * (c0 * c1) ** 2], -1)


def xy_nodes(res):
    """The table's nodes along x and y (the two smaller channels over the largest): k/(res−1), uniform, as in
    Mitsuba 3's rgb2spec_opt. The interpolation between nodes is part of what an RGB colour means in the
    spectral variants: with other nodes (v1 of this table had them twice as dense towards 0 and 1) the same
    RGB gives a spectrum up to ~1e-3 away from Mitsuba's, which its 32k-spp references resolve."""
    return np.arange(res) / (res - 1.0)


def fit(res=64, progress=True):
    """(scale (res,) z nodes, xy (res,) x and y nodes, coeffs (3, res, res, res, 3)) float32, λ in nm."""
    lam01, T = quadrature()
    scale = _smoothstep(_smoothstep(np.arange(res) / (res - 1.0)))
    g = xy_nodes(res)
    yy, xx = np.meshgrid(g, g, indexing="ij")             # [y, x]
    x, y = xx.ravel(), yy.ravel()
    out = np.zeros((3, res, res * res, 3))
    worst = 0.0
    start = res // 5
    for l in range(3):
        for ks in (range(start, res), range(start, -1, -1)):
            c = np.zeros((res * res, 3))
            for k in ks:
                b = scale[k]
                rgb = np.zeros((res * res, 3))
                rgb[:, l] = b
                rgb[:, (l + 1) % 3] = x * b
                rgb[:, (l + 2) % 3] = y * b
                c, r = gauss_newton(rgb, c, lam01, T)
                out[l, k] = to_nm(c)
                worst = max(worst, float(r.max()))
            if progress:
                sys.stderr.write(".")
                sys.stderr.flush()
    if progress:
        sys.stderr.write(f" worst CIELAB residual {worst:.3g}\n")
    return scale.astype(np.float32), g.astype(np.float32), out.reshape(3, res, res, res, 3).astype(np.float32)


def write_table(path, res=64, progress=True):
    """Fit the table and write it to ``path`` atomically (a temporary file renamed: concurrent writers and an
    interrupted fit leave no partial table)."""
    sys.stderr.write(f"tirender: fitting the RGB-to-spectrum table once (about 20 s) -> {path}\n")
    scale, xy, coeffs = fit(res, progress)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez_compressed(tmp, scale=scale, xy=xy, coeffs=coeffs)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--out", default=None, help="default: the cache path tirender reads")
    a = ap.parse_args(argv)
    out = a.out or table_path()
    write_table(out, a.res)
    print(f"wrote {out}: resolution {a.res}")


if __name__ == "__main__":
    main()
