"""Minimal OpenEXR (scanline, uncompressed) writer and reader in pure numpy.

Files written here are single-part scanline images with ``compression = NO_COMPRESSION``
and FLOAT (32 bit) or HALF (16 bit) channels: ``B, G, R`` for colour images, ``Y`` for
one-channel images and ``A, B, G, R`` for RGBA (channels are stored in alphabetical
order, as the specification requires). Pixel values are linear radiance, row 0 at the top.
"""
import os
import struct

import numpy as np

from ..errors import ConfigError
from .atomic import atomic_write_bytes as _atomic_write

__all__ = ["write_exr", "read_exr"]

MAGIC = 20000630
_PIXEL_TYPES = {0: np.dtype("<u4"), 1: np.dtype("<f2"), 2: np.dtype("<f4")}
_COMPRESSION_NAMES = ["NO_COMPRESSION", "RLE", "ZIPS", "ZIP", "PIZ", "PXR24", "B44", "B44A",
                      "DWAA", "DWAB"]


def _attr(name, typ, payload):
    return name.encode() + b"\0" + typ.encode() + b"\0" + struct.pack("<i", len(payload)) + payload


def _channels_of(img):
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ValueError(f"write_exr: image must be (H,W), (H,W,1), (H,W,3) or (H,W,4), "
                         f"got shape {img.shape}")
    names = {1: ["Y"], 3: ["R", "G", "B"], 4: ["R", "G", "B", "A"]}[img.shape[2]]
    return img, names


def write_exr(path, img, half=False):
    """Write a linear float image (H,W), (H,W,1), (H,W,3) or (H,W,4) as an uncompressed
    scanline OpenEXR file with FLOAT (``half=False``) or HALF pixels. Atomic write."""
    img, names = _channels_of(img)
    H, W = img.shape[:2]
    if H == 0 or W == 0:
        raise ValueError("write_exr: empty image")
    order = sorted(range(len(names)), key=lambda i: names[i])     # alphabetical: A, B, G, R
    ptype, dt = (1, np.dtype("<f2")) if half else (2, np.dtype("<f4"))
    chlist = b"".join(names[i].encode() + b"\0" + struct.pack("<iB3xii", ptype, 0, 1, 1)
                      for i in order) + b"\0"
    box = struct.pack("<iiii", 0, 0, W - 1, H - 1)
    header = b"".join([
        struct.pack("<ii", MAGIC, 2),
        _attr("channels", "chlist", chlist),
        _attr("compression", "compression", bytes([0])),
        _attr("dataWindow", "box2i", box),
        _attr("displayWindow", "box2i", box),
        _attr("lineOrder", "lineOrder", bytes([0])),
        _attr("pixelAspectRatio", "float", struct.pack("<f", 1.0)),
        _attr("screenWindowCenter", "v2f", struct.pack("<ff", 0.0, 0.0)),
        _attr("screenWindowWidth", "float", struct.pack("<f", 1.0)),
        b"\0",
    ])
    C = len(names)
    line_bytes = C * W * dt.itemsize
    base = len(header) + 8 * H
    offsets = (base + np.arange(H, dtype=np.uint64) * np.uint64(8 + line_bytes)).astype("<u8")
    block = np.empty(H, dtype=[("y", "<i4"), ("n", "<i4"), ("px", dt, (C, W))])
    block["y"] = np.arange(H)
    block["n"] = line_bytes
    with np.errstate(over="ignore"):
        block["px"] = np.transpose(img[:, :, order], (0, 2, 1)).astype(dt)
    _atomic_write(path, header + offsets.tobytes() + block.tobytes())


def _read_header(data, path):
    if len(data) < 8:
        raise ConfigError("not an OpenEXR file (too short)", file=path)
    magic, version = struct.unpack_from("<ii", data, 0)
    if magic != MAGIC:
        raise ConfigError("not an OpenEXR file (bad magic number)", file=path)
    flags = version & ~0xFF
    if version & 0xFF != 2:
        raise ConfigError(f"unsupported OpenEXR version {version & 0xFF}", file=path)
    if flags & 0x200:
        raise ConfigError("tiled OpenEXR files are not supported (scanline only)", file=path)
    if flags & 0x1800:
        raise ConfigError("multi-part/deep OpenEXR files are not supported", file=path)
    pos, attrs = 8, {}
    try:
        while True:
            end = data.index(b"\0", pos)
            name = data[pos:end].decode("latin-1")
            pos = end + 1
            if not name:
                break
            end = data.index(b"\0", pos)
            typ = data[pos:end].decode("latin-1")
            (size,) = struct.unpack_from("<i", data, end + 1)
            pos = end + 5
            if size < 0 or pos + size > len(data):
                raise ValueError
            attrs[name] = (typ, data[pos:pos + size])
            pos += size
    except (ValueError, struct.error):
        raise ConfigError("truncated or corrupt OpenEXR header", file=path) from None
    return attrs, pos


def _parse_channels(payload, path):
    chans, pos = [], 0
    while pos < len(payload) and payload[pos] != 0:
        end = payload.index(b"\0", pos)
        name = payload[pos:end].decode("latin-1")
        ptype, _, xs, ys = struct.unpack_from("<iB3xii", payload, end + 1)
        pos = end + 17
        if ptype not in _PIXEL_TYPES:
            raise ConfigError(f"unknown OpenEXR pixel type {ptype} in channel '{name}'", file=path)
        if xs != 1 or ys != 1:
            raise ConfigError(f"subsampled OpenEXR channel '{name}' is not supported", file=path)
        chans.append((name, _PIXEL_TYPES[ptype]))
    return chans


def read_exr(path):
    """Read an uncompressed scanline OpenEXR file -> float32 (H, W, C).

    Channels come back as R, G, B(, A) when the file has them, otherwise in file
    (alphabetical) order; a one-channel file gives (H, W, 1). Compressed, tiled, deep or
    multi-part files raise ConfigError, as do missing or truncated files.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError("image file not found", file=path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read image file ({e.strerror})", file=path) from None
    attrs, pos = _read_header(data, path)
    for key in ("channels", "compression", "dataWindow"):
        if key not in attrs:
            raise ConfigError(f"OpenEXR header lacks the '{key}' attribute", file=path)
    comp = attrs["compression"][1][0]
    if comp != 0:
        name = _COMPRESSION_NAMES[comp] if comp < len(_COMPRESSION_NAMES) else str(comp)
        raise ConfigError(f"compressed OpenEXR files are not supported (compression {name}); "
                          f"re-save it with NO_COMPRESSION", file=path)
    chans = _parse_channels(attrs["channels"][1], path)
    if not chans:
        raise ConfigError("OpenEXR file has no channels", file=path)
    x0, y0, x1, y1 = struct.unpack("<iiii", attrs["dataWindow"][1])
    W, H = x1 - x0 + 1, y1 - y0 + 1
    if W <= 0 or H <= 0:
        raise ConfigError("OpenEXR file has an empty data window", file=path)
    line_bytes = W * sum(dt.itemsize for _, dt in chans)
    try:
        offsets = np.frombuffer(data, dtype="<u8", count=H, offset=pos).astype(np.int64)
    except ValueError:
        raise ConfigError("truncated OpenEXR file (line offset table)", file=path) from None
    if offsets.max() + 8 + line_bytes > len(data) or offsets.min() < pos + 8 * H:
        raise ConfigError("truncated or corrupt OpenEXR file (scanline data out of the file)",
                          file=path)
    fields = [("y", "<i4"), ("n", "<i4")] + [(f"c{i}", dt, (W,)) for i, (_, dt) in
                                             enumerate(chans)]
    bdt = np.dtype(fields)
    if np.all(np.diff(offsets) == bdt.itemsize):
        blocks = np.frombuffer(data, dtype=bdt, count=H, offset=int(offsets[0]))
    else:                                   # scanlines in another order / with gaps
        blocks = np.empty(H, dtype=bdt)
        for i, off in enumerate(offsets.tolist()):
            blocks[i] = np.frombuffer(data, dtype=bdt, count=1, offset=off)[0]
    if np.any(blocks["n"] != line_bytes):
        raise ConfigError("corrupt OpenEXR file (unexpected scanline size)", file=path)
    rows = blocks["y"].astype(np.int64) - y0
    if np.any(rows < 0) or np.any(rows >= H) or len(np.unique(rows)) != H:
        raise ConfigError("corrupt OpenEXR file (bad scanline numbers)", file=path)
    names = [n for n, _ in chans]
    if {"R", "G", "B"} <= set(names):
        want = ["R", "G", "B"] + (["A"] if "A" in names else [])
        want += [n for n in names if n not in want]
    else:
        want = names
    img = np.empty((H, W, len(want)), np.float32)
    for k, n in enumerate(want):
        img[rows, :, k] = blocks[f"c{names.index(n)}"].astype(np.float32)
    return img
