"""Mitsuba's binary grid-volume format (``.vol``), for interchange with Mitsuba 0.6/2/3.

Layout (little endian): bytes 'V', 'O', 'L', version 3; int32 encoding (1 = float32, the only
one written; 3 = uint8 is read too); int32 xres, yres, zres; int32 channels; float32 bbox
(xmin, ymin, zmin, xmax, ymax, zmax); then the values, x fastest:
value[((z * yres + y) * xres + x) * channels + c]. As numpy: an array (zres, yres, xres, channels)
indexed [z, y, x, c], which is also tirender's grid layout (``grid.py``).
"""
import struct

import numpy as np

from ..errors import ConfigError


def read_vol(path):
    """-> (data float32 (D, H, W, C), bbox_min (3,), bbox_max (3,))."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read volume: {e}", path)
    if len(raw) < 48 or raw[:3] != b"VOL":
        raise ConfigError("not a Mitsuba .vol file (missing 'VOL' header)", path)
    if raw[3] != 3:
        raise ConfigError(f"unsupported .vol version {raw[3]} (expected 3)", path)
    enc, xr, yr, zr, ch = struct.unpack("<5i", raw[4:24])
    bbox = np.array(struct.unpack("<6f", raw[24:48]), np.float64)
    if min(xr, yr, zr, ch) <= 0:
        raise ConfigError(f"invalid .vol resolution {xr}x{yr}x{zr}x{ch}", path)
    n = xr * yr * zr * ch
    from ..limits import check
    check(n, f"volume of {xr}x{yr}x{zr}x{ch} values", path)
    if enc == 1:
        need = 48 + 4 * n
        dt = np.dtype("<f4")
    elif enc == 3:
        need = 48 + n
        dt = np.dtype("u1")
    else:
        raise ConfigError(f"unsupported .vol encoding {enc} (1 = float32, 3 = uint8)", path)
    if len(raw) < need:
        raise ConfigError(f"truncated .vol file ({len(raw)} bytes, expected {need})", path)
    data = np.frombuffer(raw, dt, count=n, offset=48).astype(np.float32)
    if enc == 3:
        data = data / 255.0
    return data.reshape(zr, yr, xr, ch), bbox[:3], bbox[3:]


def write_vol(path, data, bbox_min=(0.0, 0.0, 0.0), bbox_max=(1.0, 1.0, 1.0), encoding="float32"):
    """Write a (D, H, W) or (D, H, W, C) grid as a .vol file: float32, or uint8 (values in [0, 1],
    quantised to k / 255; a quarter of the size)."""
    a = np.asarray(data, np.float32)
    if a.ndim == 3:
        a = a[..., None]
    if a.ndim != 4:
        raise ValueError(f"expected a (D, H, W[, C]) array, got shape {a.shape}")
    if encoding not in ("float32", "uint8"):
        raise ValueError(f"unknown encoding '{encoding}' (float32, uint8)")
    zr, yr, xr, ch = a.shape
    head = b"VOL" + bytes([3]) + struct.pack("<5i", 1 if encoding == "float32" else 3, xr, yr, zr, ch)
    head += struct.pack("<6f", *[float(v) for v in bbox_min], *[float(v) for v in bbox_max])
    if encoding == "uint8":
        body = np.clip(np.round(a * 255.0), 0, 255).astype(np.uint8).tobytes()
    else:
        body = np.ascontiguousarray(a, "<f4").tobytes()
    with open(path, "wb") as f:
        f.write(head)
        f.write(body)
