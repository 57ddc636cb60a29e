"""Planck's law: the emission spectrum of a black body (Mitsuba 3's ``blackbody`` spectrum, same units and
constants), on the host and on the device, and its linear sRGB for the RGB and mono variants.

    B(λ, T) = 2 h c² / (λ⁵ (exp(h c / (λ k T)) − 1))     W m⁻² sr⁻¹ per nm of wavelength, λ in nm, T in K

Host: ``planck(λ, T)`` (numpy, float64), ``srgb(T)`` → (3,) the film's value of a surface emitting B(·, T)
(∫ srgb̄(λ) B(λ, T) dλ / ∫ ȳ dλ, with the same linearly interpolated CIE tables the spectral film uses, so
that an RGB render of a black body equals the mean of a spectral one). Device: ``planck_ti(λ, T)`` (f32 safe
from 1 K to 10⁶ K over 360–830 nm: the constants are pre-scaled to nanometres).
The temperature is not differentiable (as in Mitsuba).
"""
import numpy as np
import taichi as ti

from . import cie

C_LIGHT = 2.99792458e8          # m/s
H_PLANCK = 6.62607004e-34       # J s
K_BOLTZMANN = 1.38064852e-23    # J/K
C0 = 2.0 * H_PLANCK * C_LIGHT ** 2          # W m²  (first radiation constant / π)
C1 = H_PLANCK * C_LIGHT / K_BOLTZMANN       # m K   (second radiation constant)
# λ in nm: B = 1e-9 C0 / ((λ 1e-9)⁵ (e − 1)) = C0 1e36 / (λ⁵ (e − 1)), exponent C1 1e9 / (λ T)
_C0_NM = C0 * 1e36
_C1_NM = C1 * 1e9
T_MIN, T_MAX = 1.0, 1e6


def planck(lam, T):
    """B(λ, T) in W m⁻² sr⁻¹ nm⁻¹ (λ in nm, any shape; T in K)."""
    lam = np.asarray(lam, np.float64)
    x = np.minimum(_C1_NM / (lam * float(T)), 700.0)
    return _C0_NM / (lam ** 5 * np.expm1(x))


def srgb(T, steps=4701):
    """(3,) linear sRGB of radiance B(·, T) as the spectral film records it (∫ srgb̄ B dλ / ∫ ȳ dλ)."""
    lam = np.linspace(cie.LAMBDA_MIN, cie.LAMBDA_MAX, steps)
    f = cie.interp(cie.SRGB_BAR, lam) * planck(lam, T)[:, None]
    h = lam[1] - lam[0]
    return h * (f.sum(axis=0) - 0.5 * (f[0] + f[-1])) * cie.Y_NORMALIZATION


@ti.func
def planck_ti(lam, T):
    """B(λ, T) (λ in nm, T in K) in W m⁻² sr⁻¹ nm⁻¹; 0 where exp overflows."""
    x = ti.min(_C1_NM / (lam * T), 80.0)
    e = ti.exp(x) - 1.0
    res = 0.0
    if x < 80.0 and e > 0.0:
        l2 = lam * lam
        res = _C0_NM / (l2 * l2 * lam * e)
    return res
