"""OpenEXR reading (through OpenImageIO, tirender.io.bitmap, like every image tirender reads) and
writing (through the OpenEXR library, the ``OpenEXR`` pip package, 3.x).

``read_exr`` reads single-part scanline or tiled files with any of the library's compressions
(NONE, RLE, ZIPS, ZIP, PIZ, PXR24, B44, DWA, ...) and HALF, FLOAT or UINT channels; ``write_exr``
writes a scanline file with FLOAT (or HALF) channels ``R, G, B`` (colour), ``R, G, B, A`` or ``Y``
(one channel). Pixel values are linear radiance, row 0 at the top. A missing, truncated or
corrupt file is a ConfigError of one line naming the file; the libraries' own diagnostics (which they
print on the process's stdout/stderr) are captured and folded into that line.
"""
import io

import numpy as np

from ..errors import ConfigError
from . import require
from .atomic import atomic_write_bytes as _atomic_write
from .bitmap import head_tail, read_header, read_raw

__all__ = ["write_exr", "read_exr", "read_exr_shape", "COMPRESSIONS"]

MAGIC = b"\x76\x2f\x31\x01"
COMPRESSIONS = ("none", "rle", "zips", "zip", "piz", "pxr24", "b44", "b44a", "dwaa", "dwab")


def _lib():
    return require("OpenEXR", "EXR images need")


def _channels_of(img):
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ValueError(f"write_exr: image must be (H,W), (H,W,1), (H,W,3) or (H,W,4), "
                         f"got shape {img.shape}")
    names = {1: ["Y"], 3: ["R", "G", "B"], 4: ["R", "G", "B", "A"]}[img.shape[2]]
    return img, names


def write_exr(path, img, half=False, compression="zip"):
    """Write a linear float image (H,W), (H,W,1), (H,W,3) or (H,W,4) as a scanline OpenEXR
    file with FLOAT (``half=False``, values kept bit for bit) or HALF pixels.

    compression: one of ``COMPRESSIONS`` (lossless: none, rle, zips, zip, piz; the others are
    lossy for some pixel types). Atomic write (temporary file, then rename).
    """
    img, names = _channels_of(img)
    H, W = img.shape[:2]
    if H == 0 or W == 0:
        raise ValueError("write_exr: empty image")
    if compression not in COMPRESSIONS:
        raise ValueError(f"write_exr: compression must be one of {', '.join(COMPRESSIONS)}, "
                         f"got {compression!r}")
    exr = _lib()
    dt = np.float16 if half else np.float32
    with np.errstate(over="ignore"):
        chans = {n: np.ascontiguousarray(img[:, :, k], dtype=dt) for k, n in enumerate(names)}
    comp = getattr(exr, compression.upper().replace("NONE", "NO") + "_COMPRESSION")
    header = {"compression": comp, "type": exr.scanlineimage}
    buf = io.BytesIO()
    exr.File(header, chans).write(buf)
    _atomic_write(path, buf.getvalue())


def _check_file(path):
    path, head, _ = head_tail(path)
    head = head[:4]
    if len(head) < 4:
        raise ConfigError("not an OpenEXR file (too short)", file=path)
    if head != MAGIC:
        raise ConfigError("not an OpenEXR file (bad magic number)", file=path)
    return path


def _multi_part(path, h):
    if h.parts > 1:
        raise ConfigError("multi-part OpenEXR files are not supported", file=path)


def read_exr_shape(path):
    """(H, W, C) of an OpenEXR file from its header alone (no pixel data is decoded)."""
    path = _check_file(path)
    h = read_header(path)
    _multi_part(path, h)
    return h.shape


def read_exr(path):
    """Read an OpenEXR file -> float32 (H, W, C), decoded by OpenImageIO (tirender.io.bitmap.read_raw).

    Channels come back as R, G, B(, A) when the file has them, then the others in alphabetical
    order; a one-channel file gives (H, W, 1); HALF and FLOAT samples exactly, UINT ones as their
    values. Any compression the library decodes is accepted; deep or multi-part files, and missing,
    truncated or corrupt ones, raise one ConfigError line naming the file.
    """
    path = _check_file(path)
    img, h = read_raw(path)
    _multi_part(path, h)
    names = sorted(h.names)
    if {"R", "G", "B"} <= set(names):
        want = ["R", "G", "B"] + (["A"] if "A" in names else [])
        want += [n for n in names if n not in want]
    else:
        want = names
    img = img[:, :, [h.names.index(n) for n in want]]
    return np.ascontiguousarray(img, np.float32)
