"""OpenEXR reading and writing through the OpenEXR library (the ``OpenEXR`` pip package, 3.x).

``read_exr`` reads single-part scanline or tiled files with any of the library's compressions
(NONE, RLE, ZIPS, ZIP, PIZ, PXR24, B44, DWA, ...) and HALF, FLOAT or UINT channels; ``write_exr``
writes a scanline file with FLOAT (or HALF) channels ``R, G, B`` (colour), ``R, G, B, A`` or ``Y``
(one channel). Pixel values are linear radiance, row 0 at the top. A missing, truncated or
corrupt file is a ConfigError of one line naming the file; the library's own diagnostics (which it
prints on the process's stdout/stderr) are captured and folded into that line.
"""
import contextlib
import io
import os
import sys
import tempfile

import numpy as np

from ..errors import ConfigError
from .atomic import atomic_write_bytes as _atomic_write

__all__ = ["write_exr", "read_exr", "read_exr_shape", "COMPRESSIONS"]

MAGIC = b"\x76\x2f\x31\x01"
COMPRESSIONS = ("none", "rle", "zips", "zip", "piz", "pxr24", "b44", "b44a", "dwaa", "dwab")


def _lib():
    try:
        import OpenEXR
    except ImportError:                                  # pragma: no cover - a dependency
        raise ConfigError("EXR images need the OpenEXR package (pip install OpenEXR)") from None
    return OpenEXR


def _flush_c_stdio():
    """fflush(NULL): the library's C++ streams write through C stdio buffers."""
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no libc handle (not Linux/macOS): nothing to flush
        pass


@contextlib.contextmanager
def _captured_native_output(sink):
    """Redirect file descriptors 1 and 2 (where the C++ library prints its diagnostics) into a
    temporary file, and sys.stdout/sys.stderr into a string, for the duration of the block; the
    text is appended to ``sink`` (a list)."""
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:  # noqa: BLE001 - a closed/odd stream: nothing to flush
            pass
    saved = []
    with tempfile.TemporaryFile() as tmp:
        try:
            for fd in (1, 2):
                saved.append((fd, os.dup(fd)))
                os.dup2(tmp.fileno(), fd)
        except OSError:                                   # no such descriptors: don't redirect
            pass
        py_out = io.StringIO()          # pybind11's py::print writes to sys.stdout
        try:
            with contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_out):
                yield
        finally:
            _flush_c_stdio()
            for fd, old in saved:
                os.dup2(old, fd)
                os.close(old)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace") + py_out.getvalue())


def _reason(exc, native):
    """A short one-line reason from the library's exception and printed diagnostics."""
    lines = [ln.strip() for ln in (native or "").splitlines() if ln.strip()]
    errs = [ln for ln in lines if "(EXR_ERR_" in ln]
    text = errs[0] if errs else (lines[-1] if lines else str(exc))
    if "(EXR_ERR_" in text:                                # "<file>: (EXR_ERR_X) message"
        text = text[text.index("(EXR_ERR_"):]
    return " ".join(text.split())[:200]


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
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError("image file not found", file=path)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ConfigError(f"cannot read image file ({e.strerror})", file=path) from None
    if len(head) < 4:
        raise ConfigError("not an OpenEXR file (too short)", file=path)
    if head != MAGIC:
        raise ConfigError("not an OpenEXR file (bad magic number)", file=path)
    return path


def _open(path, header_only):
    exr = _lib()
    native = []
    try:
        with _captured_native_output(native):
            f = exr.File(path, separate_channels=True, header_only=header_only)
            parts = f.parts
            if not parts:
                raise ValueError("no readable part")
            header = f.header(0)
            chans = None if header_only else f.channels(0)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any library failure is a bad file
        raise ConfigError(f"truncated or corrupt OpenEXR file ({_reason(e, native[0] if native else '')})",
                          file=path) from None
    kind = str(header.get("type", ""))
    if "deep" in kind:
        raise ConfigError("deep OpenEXR files are not supported", file=path)
    if len(parts) > 1:
        raise ConfigError("multi-part OpenEXR files are not supported", file=path)
    return header, chans


def read_exr_shape(path):
    """(H, W, C) of an OpenEXR file from its header alone (no pixel data is decoded)."""
    path = _check_file(path)
    header, _ = _open(path, True)
    (x0, y0), (x1, y1) = header["dataWindow"]
    return int(y1 - y0 + 1), int(x1 - x0 + 1), len(header.get("channels", ()))


def read_exr(path):
    """Read an OpenEXR file -> float32 (H, W, C).

    Channels come back as R, G, B(, A) when the file has them, otherwise in file
    (alphabetical) order; a one-channel file gives (H, W, 1). Any compression the library
    decodes is accepted; deep, multi-part or subsampled files, and missing, truncated or
    corrupt ones, raise ConfigError.
    """
    path = _check_file(path)
    _, chans = _open(path, False)
    if not chans:
        raise ConfigError("OpenEXR file has no channels", file=path)
    names = sorted(chans)
    for n in names:
        c = chans[n]
        if c.xSampling != 1 or c.ySampling != 1:
            raise ConfigError(f"subsampled OpenEXR channel '{n}' is not supported", file=path)
    if {"R", "G", "B"} <= set(names):
        want = ["R", "G", "B"] + (["A"] if "A" in names else [])
        want += [n for n in names if n not in want]
    else:
        want = names
    planes = [np.asarray(chans[n].pixels) for n in want]
    shape = planes[0].shape
    if any(p.ndim != 2 or p.shape != shape for p in planes) or 0 in shape:
        raise ConfigError("corrupt OpenEXR file (channel planes of different shapes)", file=path)
    img = np.empty(shape + (len(want),), np.float32)
    for k, p in enumerate(planes):
        img[:, :, k] = p.astype(np.float32)
    return img
