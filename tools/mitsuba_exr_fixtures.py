"""Writes the small OpenEXR fixtures of tests/test_exr.py with Mitsuba 3 (``mi.Bitmap.write``,
PIZ compression): tests/data/mitsuba_{rgb_f32,rgb_f16,rgba_f32,y_f32}.exr. Their pixel values are
``fixture_values(shape)`` below (tests/test_exr.py recomputes them). Run once:
``python3 tools/mitsuba_exr_fixtures.py``; the files are committed."""
import os

import numpy as np


def fixture_values(shape):
    """Deterministic test values: spread over several decades, some negative, one huge."""
    n = int(np.prod(shape))
    v = (np.arange(n, dtype=np.float64) * 0.37 - 3.0) * 10.0 ** ((np.arange(n) % 7) - 3)
    v[-1] = 6.0e4
    return v.reshape(shape).astype(np.float32)


FIXTURES = {"rgb_f32": ((4, 5, 3), False), "rgb_f16": ((4, 5, 3), True),
            "rgba_f32": ((3, 2, 4), False), "y_f32": ((2, 6, 1), False)}


def main():
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "data")
    for name, (shape, half) in FIXTURES.items():
        v = fixture_values(shape)
        fmt = {1: mi.Bitmap.PixelFormat.Y, 3: mi.Bitmap.PixelFormat.RGB,
               4: mi.Bitmap.PixelFormat.RGBA}[shape[2]]
        bmp = mi.Bitmap(v.astype(np.float16) if half else v, fmt)
        bmp.write(os.path.join(out, f"mitsuba_{name}.exr"))


if __name__ == "__main__":
    main()
