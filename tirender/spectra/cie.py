"""CIE colorimetry for the spectral variants: the 1931 2° colour-matching functions x̄ ȳ z̄, the D65
illuminant, wavelength sampling over the visible range and the conversion of sampled spectra to linear sRGB.

Tables: ``cie1931_d65.csv`` beside this file, 95 samples 360–830 nm every 5 nm, interpolated linearly
(the convention Mitsuba 3 uses, so that spectral renders are comparable sample for sample).

Host side (numpy, float64): ``cmf(λ)`` (…, 3), ``d65(λ)``, ``Y_NORMALIZATION``, ``XYZ_TO_SRGB``.
Device side (Taichi funcs, one wavelength at a time): ``cmf_srgb_ti(λ)`` → vec3 (the sRGB colour-matching
functions x̄ȳz̄ mapped by XYZ_TO_SRGB), ``d65_ti(λ)``, ``sample_wavelength(u)`` → (λ nm, 1/pdf per nm).
The device tables are Taichi fields created on first use (``fields()``), after ``ti.init``.
"""
import os

import numpy as np
import taichi as ti

LAMBDA_MIN, LAMBDA_MAX, N_SAMPLES = 360.0, 830.0, 95
_STEP = (LAMBDA_MAX - LAMBDA_MIN) / (N_SAMPLES - 1)

_DATA = np.loadtxt(os.path.join(os.path.dirname(__file__), "cie1931_d65.csv"), delimiter=",", comments="#")
LAMBDA = _DATA[:, 0]                       # (95,) nm
XYZ_BAR = _DATA[:, 1:4]                    # (95, 3) x̄ ȳ z̄
D65_RAW = _DATA[:, 4]                      # (95,) relative SPD, 100 at 560 nm

# ∫ ȳ dλ and ∫ D65 ȳ dλ / ∫ ȳ dλ by the trapezoidal rule on the 5 nm table (exact for the linear interpolant's
# integral against a constant up to the end-point halves): a unit spectrum has luminance Y = 1, D65 normalised
# to luminance 1. Tests compare them with Mitsuba 3's constants (106.7503 and 98.9974).
def _trapezoid(y):
    return float(_STEP * (y.sum(axis=0) - 0.5 * (y[0] + y[-1])))


Y_INTEGRAL = _trapezoid(XYZ_BAR[:, 1])
Y_NORMALIZATION = 1.0 / Y_INTEGRAL
D65_NORMALIZATION = Y_INTEGRAL / _trapezoid(D65_RAW * XYZ_BAR[:, 1])

# ITU-R BT.709 / sRGB primaries, D65 white (the matrices Mitsuba 3 uses)
XYZ_TO_SRGB = np.array([[3.240479, -1.537150, -0.498535],
                        [-0.969256, 1.875991, 0.041556],
                        [0.055648, -0.204043, 1.057311]])
SRGB_TO_XYZ = np.array([[0.412453, 0.357580, 0.180423],
                        [0.212671, 0.715160, 0.072169],
                        [0.019334, 0.119193, 0.950227]])
SRGB_BAR = XYZ_BAR @ XYZ_TO_SRGB.T         # (95, 3) sRGB colour-matching functions


def interp(table, lam):
    """A 95-sample table (95,) or (95, C) at wavelengths lam (nm, any shape), linearly; 0 outside 360–830 nm."""
    lam = np.asarray(lam, dtype=np.float64)
    t = (lam - LAMBDA_MIN) / _STEP
    i0 = np.clip(t.astype(np.int64), 0, N_SAMPLES - 2)
    w1 = (t - i0)[..., None] if table.ndim == 2 else t - i0
    v = table[i0] * (1.0 - w1) + table[i0 + 1] * w1
    inside = (lam >= LAMBDA_MIN) & (lam <= LAMBDA_MAX)
    return np.where(inside[..., None] if table.ndim == 2 else inside, v, 0.0)


def cmf(lam):
    """x̄ ȳ z̄ at wavelengths lam (nm, any shape) → (..., 3); 0 outside 360–830 nm."""
    return interp(XYZ_BAR, lam)


def d65(lam):
    """The D65 illuminant normalised to luminance 1 (so ∫ D65 ȳ dλ · Y_NORMALIZATION = 1)."""
    return interp(D65_RAW, lam) * D65_NORMALIZATION


# Wavelength sampling for RGB content (Radziszewski et al. 2009, as Mitsuba 3): pdf ∝ sech²(0.0072 (λ − 538))
# on 360–830 nm; the sample is inverted in closed form.
_A, _B, _C, _K = 0.8569106254698279, 1.8275019724092267, 538.0, 0.0072
PDF_SCALE = 0.003939804229326285


def sample_wavelength_np(u):
    """u ∈ [0,1) → (λ nm, 1/pdf) with pdf ∝ sech²."""
    u = np.asarray(u, dtype=np.float64)
    lam = _C - np.arctanh(_A - _B * u) / _K
    return lam, np.cosh(_K * (lam - _C)) ** 2 / PDF_SCALE


_fields = None


def fields():
    """The device tables (created once, after ti.init): srgb̄ (95, vec3) and D65 (95)."""
    global _fields
    if _fields is None:
        srgb = ti.Vector.field(3, ti.f32, shape=N_SAMPLES)
        srgb.from_numpy((SRGB_BAR * Y_NORMALIZATION).astype(np.float32))
        d = ti.field(ti.f32, shape=N_SAMPLES)
        d.from_numpy((D65_RAW * D65_NORMALIZATION).astype(np.float32))
        _fields = (srgb, d)
    return _fields


@ti.func
def lerp_index(lam):
    """(i0, w1): the 95-sample table's interval of λ (clamped to the table) and the weight of node i0 + 1."""
    t = (lam - LAMBDA_MIN) / _STEP
    i0 = ti.min(ti.max(ti.cast(t, ti.i32), 0), N_SAMPLES - 2)
    return i0, t - ti.cast(i0, ti.f32)


@ti.func
def table_lerp(table: ti.template(), lam):
    """Linear interpolation of a 95-sample table at λ (0 outside 360–830 nm)."""
    i0, w1 = lerp_index(lam)
    v = table[i0] * (1.0 - w1) + table[i0 + 1] * w1
    if lam < LAMBDA_MIN or lam > LAMBDA_MAX:
        v *= 0.0
    return v


@ti.func
def sample_wavelength(u):
    """u ∈ [0,1) → (λ nm, 1/pdf): Radziszewski's sech² importance spectrum (module doc)."""
    a = _A - _B * u
    lam = _C - 0.5 * ti.log((1.0 + a) / (1.0 - a)) / _K        # C − atanh(a)/K
    c = 0.5 * (ti.exp(_K * (lam - _C)) + ti.exp(-_K * (lam - _C)))
    return lam, c * c / PDF_SCALE
