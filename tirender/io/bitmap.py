"""Raster image files read as Mitsuba 3's ``Bitmap`` reads them (src/core/bitmap.cpp), decoded by
OpenImageIO (the ``OpenImageIO`` pip package, 3.x).

The format is found from the file's first bytes, as ``Bitmap::detect_file_format`` does (the
extension is not consulted): PNG, JPEG, OpenEXR, Radiance RGBE (``.hdr``), PFM, PPM, BMP and TGA
(Mitsuba's formats), plus TIFF, GIF and the other PNM kinds, which tirender also reads (Mitsuba does
not). A TGA file has no magic number: it is found by its TGA 2.0 footer, as in Mitsuba (an original,
footerless TGA file is refused, as Mitsuba refuses it).

:func:`read_bitmap` gives what Mitsuba's bitmap holds, as float32 (H, W, C), row 0 at the top, with
C = 1 (Y), 2 (Y, A), 3 (R, G, B) or 4 (R, G, B, A), and whether the colour channels are sRGB-encoded:

* 8-, 16- (and TIFF's 32-) bit integer samples are scaled to [0, 1] (``v · (1/255)`` etc. in float32,
  as Mitsuba's texture does) and are sRGB-encoded (every integer reader of Mitsuba sets
  ``srgb_gamma``); alpha is never encoded, and is read as stored (not premultiplied);
* float files (EXR half/float, HDR, PFM) are linear; OpenEXR UINT channels are their integer values
  (linear, not scaled: Mitsuba's EXR struct has no ``Normalized`` flag);
* OpenEXR channels are laid out as Mitsuba's ``read_exr`` classifies them (the name after the last
  ``.``, any case): R, G, B[, A]; X, Y, Z[, A] (converted to linear sRGB with Mitsuba's XYZ→RGB
  matrix); Y[, A]. An RGB file whose ``chromaticities`` are not Rec. 709 is converted to Rec. 709
  primaries (Imf::RGBtoXYZ · Imf::XYZtoRGB, as Mitsuba); XYZ chromaticities mark an XYZ image;
* PFM samples are multiplied by |scale| (Mitsuba and OpenImageIO both do).

Where Mitsuba reads a file differently from its format's definition, the file is refused rather than
read another way: a P6 PPM whose maxval is not 255, a 16-bit BMP, an 8-bit BMP whose palette is not
the grey ramp (Mitsuba takes the indices for grey levels), a Radiance file in another orientation
than ``-Y H +X W``. Every problem (missing, unreadable, truncated or corrupt file, unknown content)
is one ConfigError line naming the file; the decoders' own messages never reach stdout/stderr.
"""
import os
import struct

import numpy as np

from ..errors import ConfigError
from . import require
from .native import captured_native_output, one_line

__all__ = ["FORMATS", "sniff", "read_header", "read_raw", "read_bitmap", "XYZ_TO_RGB"]

# tirender's name of each format -> the OpenImageIO plugin that decodes it (ImageInput.format_name())
FORMATS = {"PNG": "png", "JPEG": "jpeg", "OpenEXR": "openexr", "Radiance RGBE": "hdr", "PFM": "pnm",
           "PPM": "pnm", "BMP": "bmp", "TGA": "targa", "TIFF": "tiff", "GIF": "gif", "PNM": "pnm"}
_MAGIC_EXR = b"\x76\x2f\x31\x01"
_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_TGA_FOOTER = b"TRUEVISION-XFILE.\x00"

# Mitsuba's Bitmap::convert, XYZ -> linear sRGB (Rec. 709, D65): rows give R, G, B
XYZ_TO_RGB = np.array([[3.240479, -1.537150, -0.498535],
                       [-0.969256, 1.875991, 0.041556],
                       [0.055648, -0.204043, 1.057311]], np.float32)
_REC709 = ((0.64, 0.33), (0.30, 0.60), (0.15, 0.06), (0.3127, 0.3290))   # Imf::Chromaticities()
_XYZ_CHROMA = ((1.0, 0.0), (0.0, 1.0), (0.0, 0.0), (1 / 3, 1 / 3))


def _lib():
    return require("OpenImageIO", "reading images needs")


def head_tail(path):
    """(path as str, its first 64 bytes, its last 18 bytes); ConfigError where the file is missing or unreadable."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigError("image file not found", file=path)
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - 18, 0))
            tail = f.read(18)
    except OSError as e:
        raise ConfigError(f"cannot read image file ({e.strerror})", file=path) from None
    return path, head, tail


def sniff(path):
    """The format of an image file from its content (Mitsuba's Bitmap::detect_file_format, plus TIFF,
    GIF and the other PNM kinds): a key of :data:`FORMATS`. ConfigError when it is none of them."""
    path, h, tail = head_tail(path)
    if h[:2] == b"BM":
        return "BMP"
    if h[:2] == b"#?":
        return "Radiance RGBE"
    if h[:2] in (b"PF", b"Pf"):
        return "PFM"
    if h[:2] == b"P6":
        return "PPM"
    if h[:2] == b"\xff\xd8":
        return "JPEG"
    if h[:8] == _PNG_SIG:
        return "PNG"
    if h[:4] == _MAGIC_EXR:
        return "OpenEXR"
    if tail == _TGA_FOOTER:
        return "TGA"
    if h[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "TIFF"
    if h[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if len(h) > 2 and h[:1] == b"P" and h[1:2] in b"12345" and h[2:3].isspace():
        return "PNM"
    if path.lower().endswith((".tga", ".tpic")) and h:
        raise ConfigError("cannot read TGA file: no TGA 2.0 footer (Mitsuba finds TGA files by it): truncated, "
                          "or an original-TGA file (save it again as TGA 2.0 or PNG)", file=path)
    if not h:
        raise ConfigError("cannot read image: the file is empty", file=path)
    raise ConfigError("cannot read image: unknown image format (the content is none of PNG, JPEG, OpenEXR, "
                      "Radiance RGBE, PFM, PPM, BMP, TGA, TIFF, GIF)", file=path)


class Header:
    """An image file's header: ``kind`` (a key of FORMATS), ``height``, ``width``, ``names`` (channel
    names), ``formats`` (per-channel OpenImageIO sample types: 'uint8', 'uint16', 'uint', 'half',
    'float', ...), ``attrs`` (OpenImageIO's metadata as a dict), ``deep``, ``parts``."""

    def __init__(self, kind, spec, attrs, parts):
        self.kind, self.height, self.width = kind, int(spec.height), int(spec.width)
        self.names = tuple(spec.channelnames)
        fmts = [str(f) for f in spec.channelformats] or [str(spec.format)] * spec.nchannels
        self.formats = tuple(fmts)
        self.attrs, self.deep, self.parts = attrs, bool(spec.deep), parts

    @property
    def shape(self):
        return self.height, self.width, len(self.names)


def _fail(path, problem, errors, native=""):
    lines = [ln for ln in (errors + "\n" + native).splitlines() if ln.strip()]
    detail = one_line(lines[-1] if lines else "", path) if lines else ""
    return ConfigError(f"{problem} ({detail})" if detail else problem, file=path)


def _open(path, kind):
    """(ImageInput, Header) for `path`, whose content `sniff` found to be `kind`."""
    oiio = _lib()
    cfg = oiio.ImageSpec()
    cfg.attribute("oiio:UnassociatedAlpha", 1)     # alpha as stored (Mitsuba does not premultiply)
    native = []
    with captured_native_output(native):
        inp = oiio.ImageInput.open(path, cfg)
        err = oiio.geterror()
        if inp is not None:
            spec = inp.spec()
            attrs = {}
            for p in spec.extra_attribs:
                try:
                    attrs[p.name] = p.value
                except Exception:  # noqa: BLE001 - a metadata type the binding cannot convert
                    pass
            parts = 1
            while inp.seek_subimage(parts, 0):
                parts += 1
            inp.seek_subimage(0, 0)
            inp.geterror()                           # (seeking past the last part sets an error)
            oiio.geterror()
    if inp is None:
        raise _fail(path, f"cannot read {kind} file: truncated, corrupt or unsupported", err,
                    native[0] if native else "")
    got = inp.format_name()
    if got != FORMATS[kind]:
        inp.close()
        raise ConfigError(f"cannot read image: the content looks like {kind} but decodes as {got}", file=path)
    return inp, Header(kind, spec, attrs, parts)


def read_header(path):
    """The file's :class:`Header` (nothing but the header is decoded)."""
    kind = sniff(path)
    inp, h = _open(os.fspath(path), kind)
    inp.close()
    return h


def read_raw(path, header=None):
    """(pixels, Header): the first image of the file as OpenImageIO decodes it, (H, W, C), row 0 at the
    top, in its own sample types (uint8 / uint16 / uint32 arrays; half and float as float32; channels
    of different types are each read in their own type and widened to float32), alpha as stored.
    ``header`` (from :func:`read_header`) is checked against the file (size limits are the caller's)."""
    path = os.fspath(path)
    kind = sniff(path)
    inp, h = _open(path, kind)
    if header is not None and header.shape != h.shape:
        inp.close()
        raise ConfigError("the image file changed while it was read", file=path)
    if h.deep:
        inp.close()
        raise ConfigError(f"deep {kind} files are not supported", file=path)
    oiio = _lib()
    native = []
    planes = []
    with captured_native_output(native):
        uniform = len(set(h.formats)) == 1
        groups = [(0, len(h.names), h.formats[0])] if uniform else \
            [(c, c + 1, h.formats[c]) for c in range(len(h.names))]
        err = ""
        for c0, c1, fmt in groups:
            a = inp.read_image(0, 0, c0, c1, fmt)
            err += inp.geterror()
            if a is None or err:
                planes = None
                break
            a = np.asarray(a)
            if a.ndim == 2:
                a = a[:, :, None]
            planes.append(a)
        err += oiio.geterror()
        inp.close()
        err += oiio.geterror()
    if planes is None:
        raise _fail(path, f"cannot read {kind} file: truncated or corrupt", err, native[0] if native else "")
    if uniform:
        img = planes[0]
    else:
        img = np.concatenate([p.astype(np.float32) for p in planes], axis=2)
    if img.dtype == np.float16:
        img = img.astype(np.float32)
    if img.shape != h.shape:
        raise ConfigError(f"corrupt {kind} file (decoded {img.shape[:2]}, header says {h.shape[:2]})", file=path)
    return img, h


def _chroma_matrix(c):
    """Imf::RGBtoXYZ(c, 1): linear RGB with primaries/white point c -> CIE XYZ (float64 3x3)."""
    (rx, ry), (gx, gy), (bx, by), (wx, wy) = c
    P = np.array([[rx / ry, gx / gy, bx / by], [1.0, 1.0, 1.0],
                  [(1 - rx - ry) / ry, (1 - gx - gy) / gy, (1 - bx - by) / by]])
    W = np.array([wx / wy, 1.0, (1 - wx - wy) / wy])
    return P * np.linalg.solve(P, W)[None, :]


def _close(a, b):
    """Mitsuba's chroma_eq: summed squared differences of the four points below 1e-6."""
    return sum((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 for p, q in zip(a, b)) < 1e-6


def _exr_layout(img, h, path):
    """Mitsuba's read_exr channel classification -> (float32 H x W x C as Y/YA/RGB/RGBA, is_xyz)."""
    def cls(n):
        return n.rsplit(".", 1)[-1].lower()
    classes = [cls(n) for n in h.names]
    found = set(classes)
    n = len(classes)

    def take(order):
        return np.stack([img[:, :, classes.index(c)] for c in order], axis=2).astype(np.float32)
    if {"r", "g", "b"} <= found and n == 3 + ("a" in found):
        out, xyz = take(["r", "g", "b"] + (["a"] if "a" in found else [])), False
    elif {"x", "y", "z"} <= found and n == 3 + ("a" in found):
        out, xyz = take(["x", "y", "z"] + (["a"] if "a" in found else [])), True
    elif {"y", "ry", "by"} <= found:
        raise ConfigError("luminance/chroma (Y, RY, BY) OpenEXR files are not supported", file=path)
    elif "y" in found and n == 1 + ("a" in found):
        out, xyz = take(["y"] + (["a"] if "a" in found else [])), False
    else:
        raise ConfigError(f"OpenEXR channels {', '.join(h.names)} are none of the layouts Mitsuba reads "
                          "(Y, YA, RGB, RGBA, XYZ, XYZA)", file=path)
    chroma = h.attrs.get("chromaticities")
    if chroma is not None and not xyz and out.shape[2] >= 3:
        c = tuple(zip(chroma[0::2], chroma[1::2]))
        if _close(c, _XYZ_CHROMA):
            xyz = True
        elif not _close(c, _REC709):
            # Imf: rgb' = rgb * (RGBtoXYZ(file) * XYZtoRGB(709)) with row vectors
            M = (np.linalg.inv(_chroma_matrix(_REC709)) @ _chroma_matrix(c)).astype(np.float32)
            out[:, :, :3] = np.einsum("ij,hwj->hwi", M, out[:, :, :3])
    return out, xyz


def _check_mitsuba_reading(path, kind, h):
    """Refuse the files that Mitsuba reads differently from their format's definition."""
    if kind == "PPM":
        with open(path, "rb") as f:
            tokens = f.read(64).split()
        maxval = tokens[3] if len(tokens) > 3 else b""
        if maxval != b"255":
            raise ConfigError(f"a PPM file with maxval {maxval.decode('ascii', 'replace')}: Mitsuba reads its "
                              "samples as plain 8-bit (16-bit: byte-swapped) numbers whatever the maxval; "
                              "save it with maxval 255 or as PNG", file=path)
    elif kind == "BMP":
        with open(path, "rb") as f:
            head = f.read(14 + 124 + 1024)          # file header, the largest info header, 256 colours
        bpp = struct.unpack("<H", head[28:30])[0] if len(head) >= 30 else 0
        if bpp == 16:
            raise ConfigError("a 16-bit BMP file: Mitsuba reads its samples as grey and alpha; save it as "
                              "24/32-bit BMP or PNG", file=path)
        if bpp == 8 and len(head) >= 50:            # Mitsuba: the palette indices are the grey levels
            info, ncol = struct.unpack("<I", head[14:18])[0], struct.unpack("<I", head[46:50])[0] or 256
            pal = np.frombuffer(head[14 + info:14 + info + 4 * ncol], np.uint8)
            if pal.size != 4 * ncol or not np.array_equal(pal.reshape(-1, 4)[:, :3],
                                                          np.repeat(np.arange(ncol, dtype=np.uint8)[:, None], 3, 1)):
                raise ConfigError("an 8-bit BMP file whose palette is not the grey ramp 0..255: Mitsuba reads its "
                                  "palette indices as grey levels; save it as 24-bit BMP or PNG", file=path)
    elif kind == "Radiance RGBE" and int(h.attrs.get("Orientation", 1)) != 1:
        raise ConfigError("a Radiance file in another orientation than '-Y H +X W' (Mitsuba reads only "
                          "that one)", file=path)


_INT_MAX = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0, np.dtype(np.uint32): 4294967295.0}


def read_bitmap(path, header=None):
    """What Mitsuba's ``Bitmap(path)`` holds, converted to float32: (img (H, W, C), srgb).

    img: C = 1 (Y), 2 (Y, A), 3 (R, G, B) or 4 (R, G, B, A), row 0 at the top; integer samples scaled
    to [0, 1], float samples as stored, OpenEXR XYZ / non-Rec.709 RGB converted to linear sRGB.
    srgb: True when the colour channels are sRGB-encoded (integer formats), False when linear."""
    path = os.fspath(path)
    raw, h = read_raw(path, header)
    _check_mitsuba_reading(path, h.kind, h)
    if h.kind == "OpenEXR":
        img, xyz = _exr_layout(raw.astype(np.float32) if raw.dtype != np.float32 else raw, h, path)
        if xyz:
            img[:, :, :3] = np.einsum("ij,hwj->hwi", XYZ_TO_RGB, img[:, :, :3])
        return np.ascontiguousarray(img, np.float32), False
    if raw.shape[2] not in (1, 2, 3, 4):
        raise ConfigError(f"an image of {raw.shape[2]} channels (Mitsuba reads 1 to 4)", file=path)
    scale = _INT_MAX.get(raw.dtype)
    if scale is not None:                 # Mitsuba: Float(v) * Float(1 / max), in float32
        return raw.astype(np.float32) * np.float32(1.0 / scale), True
    if raw.dtype.kind in "iu":            # signed or other integer TIFF samples: not a Mitsuba format
        raise ConfigError(f"{raw.dtype} image samples are not supported (8/16/32-bit unsigned or float)",
                          file=path)
    return np.ascontiguousarray(raw, np.float32), False
