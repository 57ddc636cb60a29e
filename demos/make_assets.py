"""Regenerate the small image assets used by the example configs (deterministic).

    python demos/make_assets.py
"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "configs", "textures")


def target_texture(n=256):
    """A smooth colourful pattern (blobs and a ring) with values in [0.05, 0.95]."""
    y, x = np.mgrid[0:n, 0:n] / n
    img = np.zeros((n, n, 3))
    blobs = [((0.3, 0.3), 0.12, (0.9, 0.2, 0.1)), ((0.7, 0.35), 0.15, (0.1, 0.6, 0.9)),
             ((0.45, 0.72), 0.18, (0.95, 0.85, 0.1)), ((0.8, 0.8), 0.1, (0.2, 0.9, 0.3))]
    for (cx, cy), r, col in blobs:
        g = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img += g[..., None] * np.array(col)
    ring = np.exp(-((np.sqrt((x - 0.5) ** 2 + (y - 0.5) ** 2) - 0.38) ** 2) / (2 * 0.02 ** 2))
    img += 0.6 * ring[..., None] * np.array([0.6, 0.2, 0.8])
    img = 0.1 + 0.8 * img / img.max()
    return np.clip(img, 0.05, 0.95)


def _blur(img, s):
    """Separable Gaussian blur (standard deviation s pixels, edges replicated)."""
    r = int(np.ceil(3 * s))
    t = np.arange(-r, r + 1)
    k = np.exp(-t * t / (2 * s * s))
    k /= k.sum()
    for axis in (0, 1):
        img = np.apply_along_axis(lambda m: np.convolve(np.pad(m, r, mode="edge"), k, "valid"), axis, img)
    return img


def grin_targets(n=32):
    """The two caustics of configs/grin.yaml (linear intensities in [0, 1], (n, n)): a ring "O" seen
    along +z and the same ring with its halves swapped, ")(", seen along +x. Two views of a cube
    from perpendicular directions share one image axis (world y, "up" in both): in the weak-lens
    limit both images' row sums are fixed by the same integral of n over the other two axes, so the
    targets have equal row sums (the swap moves mass only within rows)."""
    y, x = (np.mgrid[0:n, 0:n] + 0.5) / n - 0.5
    r = np.sqrt(x * x + y * y)
    ring = _blur((np.abs(r - 0.27) < 0.035).astype(np.float64), n / 32.0)
    ring /= ring.max()
    h = n // 2
    return ring, np.concatenate([ring[:, h:], ring[:, :h]], 1)


def envmap(w=64, h=32):
    """A small sky-like environment: bright sun spot, blue sky gradient, dark ground (linear HDR)."""
    v, u = np.mgrid[0:h, 0:w] + 0.5
    th = v / h * np.pi
    ph = u / w * 2 * np.pi
    d = np.stack([np.sin(ph) * np.sin(th), np.cos(th), -np.cos(ph) * np.sin(th)], -1)
    sky = np.where(d[..., 1:2] > 0, np.array([0.3, 0.5, 0.9]) * (0.5 + 0.5 * d[..., 1:2]), np.array([0.15, 0.12, 0.1]))
    sun = np.array([0.5, 0.6, 0.62])
    sun /= np.linalg.norm(sun)
    s = np.exp(((d * sun).sum(-1) - 1) * 60)[..., None] * np.array([20.0, 18.0, 14.0])
    return (sky + s).astype(np.float32)


def caustic_target(n=64):
    """A smiley (ring, two eyes, a smile) for caustic design: linear values in [0.02, 1], slightly
    blurred (a caustic cannot focus light into a hard edge with a smooth height field)."""
    y, x = (np.mgrid[0:n, 0:n] + 0.5) / n - 0.5
    r = np.hypot(x, y)
    img = np.exp(-((r - 0.36) / 0.035) ** 2)                                      # face
    for ex in (-0.13, 0.13):
        img += np.exp(-((x - ex) ** 2 + (y + 0.1) ** 2) / (2 * 0.045 ** 2))        # eyes (y down)
    smile = np.exp(-((np.hypot(x, y + 0.02) - 0.2) / 0.03) ** 2) * (y > 0.06)
    img += smile
    img = np.clip(img, 0, 1)
    return 0.02 + 0.98 * img


if __name__ == "__main__":
    import imageio.v3 as iio
    os.makedirs(OUT, exist_ok=True)
    tex = target_texture()
    srgb = np.where(tex <= 0.0031308, 12.92 * tex, 1.055 * tex ** (1 / 2.4) - 0.055)
    iio.imwrite(os.path.join(OUT, "target_texture.png"), np.round(srgb * 255).astype(np.uint8))
    np.save(os.path.join(OUT, "sky.npy"), envmap())
    c = caustic_target()
    iio.imwrite(os.path.join(OUT, "caustic_target.png"),
                np.round(np.where(c <= 0.0031308, 12.92 * c, 1.055 * c ** (1 / 2.4) - 0.055) * 255).astype(np.uint8))
    grin = os.path.join(HERE, "..", "configs", "grin")
    os.makedirs(grin, exist_ok=True)
    for name, img in zip(("target_ring", "target_arcs"), grin_targets()):
        s8 = np.where(img <= 0.0031308, 12.92 * img, 1.055 * img ** (1 / 2.4) - 0.055)
        iio.imwrite(os.path.join(grin, name + ".png"), np.round(np.clip(s8, 0, 1) * 255).astype(np.uint8))
    print("wrote", OUT, "and", os.path.normpath(grin))
