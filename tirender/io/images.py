"""Image input/output: sRGB transfer curves, PNG output with a simple tonemap, and loading of every
image format Mitsuba 3 reads (tirender.io.bitmap, through OpenImageIO) and .npy arrays as float32
(H, W, C) arrays (row 0 at the top), with Mitsuba's colour rules."""
import io
import os

import numpy as np

from ..errors import ConfigError
from .atomic import atomic_write_bytes as _atomic_bytes
from .bitmap import read_bitmap, read_header
from .checkpoints import save_npy
from .exr import write_exr

__all__ = ["to_srgb", "from_srgb", "srgb_to_linear", "save_png", "save_image_set", "save_diverging_png",
           "load_image"]


def to_srgb(linear):
    """Linear values -> sRGB-encoded values (exact IEC 61966-2-1 curve; negatives -> 0).
    Values above 1 follow the same power curve (clip before calling if needed)."""
    x = np.asarray(linear)
    x = np.maximum(x.astype(x.dtype if x.dtype.kind == "f" else np.float32), 0)
    with np.errstate(invalid="ignore"):
        return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055
                        ).astype(x.dtype)


def from_srgb(srgb):
    """sRGB-encoded values -> linear values (exact inverse of :func:`to_srgb` on [0, 1];
    negatives -> 0)."""
    x = np.asarray(srgb)
    x = np.maximum(x.astype(x.dtype if x.dtype.kind == "f" else np.float32), 0)
    with np.errstate(invalid="ignore"):
        return np.where(x <= 0.04045, x / 12.92, np.power((x + 0.055) / 1.055, 2.4)
                        ).astype(x.dtype)


def _as_hwc(img):
    a = np.asarray(img)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 2, 3, 4) or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"image must be (H,W) or (H,W,C) with C in 1..4, got shape {a.shape}")
    return a


def _to_8bit(linear_img, exposure=0.0):
    a = _as_hwc(linear_img).astype(np.float32)
    C = a.shape[2]
    n_col = 3 if C >= 3 else 1                  # alpha (channel 3 or 1 of C=2) stays linear
    col = np.nan_to_num(a[:, :, :n_col], nan=0.0, posinf=1.0, neginf=0.0)
    col = to_srgb(np.clip(col * np.float32(2.0 ** exposure), 0, 1))
    out = np.concatenate([col, np.clip(np.nan_to_num(a[:, :, n_col:]), 0, 1)], axis=2)
    out = np.round(out * 255).astype(np.uint8)
    return out[:, :, 0] if C == 1 else out


def montage(folder, suffix, path, count=8):
    """Up to `count` of the PNGs in `folder` whose names end with `suffix` (sorted by name, evenly
    spaced, the last included) side by side, 2 px apart, written to `path` (e.g. an optimisation's
    intermediate renders as one strip). Nothing is written when there are none."""
    import imageio.v3 as iio
    if not os.path.isdir(folder):
        return None
    names = sorted(n for n in os.listdir(folder) if n.endswith(suffix))
    if not names:
        return None
    k = min(count, len(names))
    pick = [names[round(i * (len(names) - 1) / max(k - 1, 1))] for i in range(k)]
    imgs = [np.asarray(iio.imread(os.path.join(folder, n)))[..., :3] for n in dict.fromkeys(pick)]
    h = max(i.shape[0] for i in imgs)
    gap = np.full((h, 2, 3), 255, np.uint8)
    row = []
    for i in imgs:
        row += [np.pad(i, ((0, h - i.shape[0]), (0, 0), (0, 0))), gap]
    buf = io.BytesIO()
    iio.imwrite(buf, np.concatenate(row[:-1], axis=1).astype(np.uint8), extension=".png", plugin="pillow")
    _atomic_bytes(path, buf.getvalue())
    return path


def save_png(path, linear_img, exposure=0.0):
    """Tonemap a linear image (H,W[,C]) and write an 8-bit PNG atomically.

    Colour is multiplied by ``2**exposure``, clipped to [0, 1], sRGB-encoded and rounded
    to 8 bits (NaN -> 0, +Inf -> 1); an alpha channel is written linearly.
    """
    import imageio.v3 as iio

    buf = io.BytesIO()
    iio.imwrite(buf, _to_8bit(linear_img, exposure), extension=".png", plugin="pillow")
    _atomic_bytes(path, buf.getvalue())


def diverging(values, scale=None):
    """A signed image (H, W) as 8-bit RGB (H, W, 3): white at 0, pure red at +scale and beyond, pure
    blue at -scale and beyond, linear in between (so equal magnitudes look equally strong). scale:
    default the 99.5th percentile of |values| (a few fireflies do not wash the image out; 1 if all 0).
    Returns (rgb uint8, scale used). NaN shows as black."""
    v = np.asarray(values, np.float64)
    if scale is None:
        a = np.abs(v[np.isfinite(v)])
        scale = float(np.percentile(a, 99.5)) if a.size else 0.0
        if not scale > 0.0:
            scale = float(a.max()) if a.size and a.max() > 0 else 1.0
    t = np.clip(np.nan_to_num(v / scale, nan=0.0), -1.0, 1.0)
    pos, neg = np.maximum(t, 0.0), np.maximum(-t, 0.0)
    rgb = np.stack([1.0 - neg, 1.0 - pos - neg, 1.0 - pos], -1)
    rgb[~np.isfinite(v)] = 0.0
    return np.round(rgb * 255.0).astype(np.uint8), scale


def save_diverging_png(path, values, scale=None):
    """Write ``diverging(values, scale)`` as a PNG atomically; returns the scale used."""
    import imageio.v3 as iio
    rgb, scale = diverging(values, scale)
    buf = io.BytesIO()
    iio.imwrite(buf, rgb, extension=".png", plugin="pillow")
    _atomic_bytes(path, buf.getvalue())
    return scale


def save_image_set(dir, img, stem="image", exposure=0.0, png=True):
    """Write ``<stem>.png`` (tonemapped; png=False: none), ``<stem>.exr`` (float) and ``<stem>.npy``
    (linear float32 H×W×3, row 0 at the top) into ``dir`` (created if needed).

    img: linear (H,W), (H,W,1) (grey, repeated to RGB), (H,W,3) or (H,W,4) (alpha dropped).
    Returns a dict {"png": path, "exr": path, "npy": path}.
    """
    a = _as_hwc(img).astype(np.float32)
    if a.shape[2] in (1, 2):
        a = np.repeat(a[:, :, :1], 3, axis=2)
    rgb = np.ascontiguousarray(a[:, :, :3])
    os.makedirs(dir, exist_ok=True)
    paths = {ext: os.path.join(dir, f"{stem}.{ext}") for ext in ("png", "exr", "npy")}
    if png:
        save_png(paths["png"], rgb, exposure=exposure)
    write_exr(paths["exr"], rgb)
    save_npy(paths["npy"], rgb)
    return paths


def _fma32(a, b, c):
    """float32 a·b + c rounded once (the product of two float32 is exact in float64)."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


def _estrin32(x, coeffs):
    """Dr.Jit's estrin(x, c0, c1, ...) polynomial in float32 with fused multiply-adds."""
    c = [np.float32(k) for k in coeffs]
    while len(c) > 1:
        nxt = [_fma32(x, np.float64(c[2 * i + 1]), np.float64(c[2 * i])) for i in range(len(c) // 2)]
        if len(c) % 2:
            nxt.append(c[-1])
        c, x = nxt, (x * x).astype(np.float32)
    return c[0]


def srgb_to_linear(srgb):
    """sRGB-encoded values -> linear, exactly as Mitsuba decodes its bitmaps (Dr.Jit's float32
    ``srgb_to_linear``, drjit/color.h: x/12.92 up to 0.04045, above it x·p(x)/q(x), a rational fit of the
    IEC 61966-2-1 curve within ~3e-6 relative). float32 in, float32 out, shape kept."""
    x = np.asarray(srgb, np.float32)
    p = _estrin32(x, (-0.0163933279112946, -0.7386328024653209, -11.199318357635072,
                      -47.46726633009393, -36.04572663838034))
    q = _estrin32(x, (-0.004261480793199332, -19.140923959601675, -59.096406619244426,
                      -18.225745396846637, 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(x > np.float32(0.04045), p / q, np.float32(1.0 / 12.92)).astype(np.float32)
    return (r * x).astype(np.float32)


def load_image(path, srgb=None):
    """Load an image as float32 (H, W, C), row 0 at the top, as Mitsuba 3 reads it (tirender.io.bitmap:
    PNG, JPEG, OpenEXR, Radiance .hdr, PFM, PPM, BMP, TGA, and TIFF/GIF; the format from the content).

    C = 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA); integer samples (8/16 bit) are scaled to
    [0, 1], float samples kept. srgb: None (Mitsuba's rule, ``raw="false"``): integer formats are
    decoded from sRGB to linear (:func:`srgb_to_linear`, Mitsuba's decode), float formats are linear;
    False (``raw="true"``): nothing is decoded; True: float files are decoded too. Alpha stays linear.
    ``.npy`` arrays (2-D or 3-D, numeric) are read as stored (decoded only when ``srgb`` is True).
    A missing, unreadable, truncated or corrupt file raises one ConfigError line naming it.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if not os.path.isfile(path):
        raise ConfigError("image file not found", file=path)
    from ..limits import check
    if ext == ".npy":
        try:
            img = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - any numpy load failure is bad input
            raise ConfigError(f"cannot read .npy image ({e})", file=path) from None
        if img.dtype.kind not in "fiub" or img.ndim not in (2, 3):
            raise ConfigError(f".npy image must be a 2-D or 3-D numeric array, got "
                              f"{img.dtype} {img.shape}", file=path)
        check(img.size, f"image of shape {img.shape}", path)
        img = np.array(img, np.float32)
        encoded = False
    else:
        h = read_header(path)         # the size check reads the header, not the (compressed) file
        check(h.height * h.width * len(h.names),
              f"image of {h.width}x{h.height} pixels x {len(h.names)} channels", path)
        img, encoded = read_bitmap(path, h)
    if img.ndim == 2:
        img = img[:, :, None]
    if srgb or (srgb is None and encoded):
        n_col = 3 if img.shape[2] >= 3 else 1
        img = np.concatenate([srgb_to_linear(img[:, :, :n_col]), img[:, :, n_col:]], axis=2)
    return np.ascontiguousarray(img, dtype=np.float32)
