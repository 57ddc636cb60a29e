"""Image losses with their adjoints: value and δy = ∂loss/∂y (numpy, float64 accumulation).

All losses are means over pixels and channels, so their scale does not depend on resolution.
``y``: rendered image (H, W, 3); ``t``: target image of the same shape.
"""
import numpy as np

from ..errors import ConfigError
from ..params import as_float_array


def _pair(y, t):
    """(y, t) as float64 arrays of one shape, or one ConfigError line naming the argument."""
    y = as_float_array(y, "image").astype(np.float64)
    t = as_float_array(t, "target").astype(np.float64)
    if y.shape != t.shape:
        raise ConfigError(f"shape {t.shape} differs from the image's {y.shape}", key="target")
    return y, t


def l2(y, t):
    """Mean squared error: mean((y - t)²); δy = 2 (y - t) / N."""
    y, t = _pair(y, t)
    d = y - t
    return float((d * d).mean()), (2.0 * d / d.size).astype(np.float32)


def l1(y, t):
    """Mean absolute error: mean(|y - t|); δy = sign(y - t) / N."""
    y, t = _pair(y, t)
    d = y - t
    return float(np.abs(d).mean()), (np.sign(d) / d.size).astype(np.float32)


def relative_l2(y, t, eps=1e-2):
    """Relative MSE (Lehtinen et al. 2018): mean((y - t)² / (detach(y)² + eps)); the denominator is
    treated as a constant (as in Mitsuba's and Noise2Noise's use), δy = 2 (y - t) / (y² + eps) / N."""
    y, t = _pair(y, t)
    d = y - t
    den = y ** 2 + eps
    return float((d * d / den).mean()), (2.0 * d / den / d.size).astype(np.float32)


LOSSES = {"l2": l2, "mse": l2, "l1": l1, "relative_l2": relative_l2, "rel_l2": relative_l2}


def get(name):
    if name not in LOSSES:
        raise ConfigError(f"unknown loss '{name}' (expected one of: l1, l2, relative_l2)", key="optimize.loss")
    return LOSSES[name]
