"""Measured complex IORs η + ik of the named conductors (``conductor`` / ``roughconductor`` ``material:``) for the
spectral variant: Mitsuba 3's data (resources/data/ior/*.spd), sampled at the CIE table's 95 wavelengths
(360–830 nm every 5 nm) by ``tools/mitsuba_conductor_spectra.py`` into ``conductors.npz`` beside this file, and
interpolated linearly per wavelength (0 outside each file's range, as Mitsuba's IrregularSpectrum).

Host: ``NAMES`` (tuple), ``index(name)`` -> row, ``eta_k_np(name, λ)`` -> (…, 2). Device: ``fields()`` (after
ti.init) and ``eta_k(table, row, λ)`` -> (η, k) at one wavelength. The RGB and mono variants keep the RGB fits
of bsdfs/ior.py (what Mitsuba's RGB variants use).
"""
import os

import numpy as np
import taichi as ti

from . import cie

_Z = np.load(os.path.join(os.path.dirname(__file__), "conductors.npz"))
NAMES = tuple(str(n) for n in _Z["names"])
ETA_K = _Z["eta_k"].astype(np.float64)          # (materials, 95, 2)
_ROW = {n: i for i, n in enumerate(NAMES)}


def index(name):
    """The table row of a named material (KeyError if unknown)."""
    return _ROW[name]


def eta_k_np(name, lam):
    """(η, k) of a named material at wavelengths lam (nm, any shape) -> (..., 2)."""
    return cie.interp(ETA_K[index(name)], lam)


_field = None


def fields():
    """The device table (materials × 95) of vec2 (η, k), created once after ti.init."""
    global _field
    if _field is None:
        _field = ti.Vector.field(2, ti.f32, shape=(len(NAMES), cie.N_SAMPLES))
        _field.from_numpy(ETA_K.astype(np.float32))
    return _field


@ti.func
def eta_k(table: ti.template(), row, lam):
    """(η, k) of material `row` at λ nm (linear in the 5 nm table; 0 outside 360–830 nm)."""
    i0, w1 = cie.lerp_index(lam)
    v = table[row, i0] * (1.0 - w1) + table[row, i0 + 1] * w1
    if lam < cie.LAMBDA_MIN or lam > cie.LAMBDA_MAX:
        v *= 0.0
    return v
