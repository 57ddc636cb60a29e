"""sRGB curves, PNG tonemapping, image sets and image loading."""
import os

import imageio.v3 as iio
import numpy as np
import pytest

from tirender.errors import ConfigError
from tirender.io.images import from_srgb, load_image, save_image_set, save_png, to_srgb


def test_srgb_curves():
    x = np.linspace(0, 1, 10001)
    assert np.allclose(from_srgb(to_srgb(x)), x, atol=1e-12)
    assert np.allclose(to_srgb(from_srgb(x)), x, atol=1e-12)
    # exact values of the piecewise definition
    assert to_srgb(0.0) == 0 and abs(to_srgb(1.0) - 1.0) < 1e-12
    assert abs(to_srgb(0.0031308) - 0.0031308 * 12.92) < 1e-12
    assert abs(to_srgb(0.5) - (1.055 * 0.5 ** (1 / 2.4) - 0.055)) < 1e-12
    assert abs(from_srgb(0.5) - ((0.5 + 0.055) / 1.055) ** 2.4) < 1e-12
    assert abs(from_srgb(0.04045) - 0.04045 / 12.92) < 1e-12
    # continuity at the knees, monotone, negatives clamp to 0
    assert abs(to_srgb(0.0031308 + 1e-9) - to_srgb(0.0031308)) < 1e-6
    assert np.all(np.diff(to_srgb(x)) > 0)
    assert to_srgb(-1.0) == 0 and from_srgb(-0.5) == 0
    assert to_srgb(np.float32(0.2)).dtype == np.float32


def test_save_png_tonemap(tmp_path):
    img = np.zeros((4, 6, 3), np.float32)
    img[0] = 0.5
    img[1] = 2.0                      # clipped to white
    img[2] = [0.25, 0.0, np.nan]      # NaN -> 0
    img[3] = 0.125
    p = str(tmp_path / "a.png")
    save_png(p, img)
    r = iio.imread(p)
    assert r.shape == (4, 6, 3) and r.dtype == np.uint8
    assert (r[0] == round(255 * float(to_srgb(0.5)))).all()
    assert (r[1] == 255).all()
    assert r[2, 0].tolist() == [round(255 * float(to_srgb(0.25))), 0, 0]
    save_png(p, img, exposure=2.0)    # x4: 0.125 -> 0.5
    r2 = iio.imread(p)
    assert (r2[3] == r[0]).all() and (r2[0] == 255).all()
    assert os.listdir(tmp_path) == ["a.png"]


def test_save_png_grey_and_alpha(tmp_path):
    g = np.full((3, 2), 0.5, np.float32)
    save_png(str(tmp_path / "g.png"), g)
    r = iio.imread(str(tmp_path / "g.png"))
    assert r.shape == (3, 2) and (r == round(255 * float(to_srgb(0.5)))).all()
    rgba = np.concatenate([np.full((2, 2, 3), 0.5), np.full((2, 2, 1), 0.5)], 2)
    save_png(str(tmp_path / "a.png"), rgba)
    r = iio.imread(str(tmp_path / "a.png"))
    assert r.shape == (2, 2, 4) and (r[..., 3] == 128).all()


def test_image_set_and_load(tmp_path):
    rng = np.random.default_rng(0)
    img = rng.random((5, 7, 3)).astype(np.float32) * 1.5
    img[0, 0] = [1, 0, 0]                       # row 0 at the top
    paths = save_image_set(str(tmp_path / "out"), img, stem="frame")
    assert sorted(os.listdir(tmp_path / "out")) == ["frame.exr", "frame.npy", "frame.png"]
    a = np.load(paths["npy"])
    assert a.dtype == np.float32 and a.shape == (5, 7, 3) and np.array_equal(a, img)
    assert np.array_equal(load_image(paths["npy"]), img)
    assert np.array_equal(load_image(paths["exr"]), img)
    png = load_image(paths["png"])
    assert png.shape == (5, 7, 3) and png.dtype == np.float32
    lim = np.minimum(img, 1)
    assert np.abs(png - lim).max() < 0.01      # sRGB 8-bit quantisation, linear units
    assert np.allclose(png[0, 0], [1, 0, 0])
    raw = load_image(paths["png"], srgb=False)
    assert np.allclose(raw, np.round(to_srgb(lim) * 255) / 255, atol=1e-6)
    # grey image -> RGB files
    p2 = save_image_set(str(tmp_path / "g"), img[:, :, 0])
    assert np.load(p2["npy"]).shape == (5, 7, 3)


def test_load_formats(tmp_path):
    rgb8 = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 10
    iio.imwrite(str(tmp_path / "a.png"), rgb8)
    iio.imwrite(str(tmp_path / "a.jpg"), np.full((8, 8, 3), 128, np.uint8), quality=100)
    iio.imwrite(str(tmp_path / "g16.png"), np.full((2, 2), 65535, np.uint16))
    ga = np.zeros((2, 2, 4), np.uint8)
    ga[..., 3] = 51
    iio.imwrite(str(tmp_path / "rgba.png"), ga)
    a = load_image(str(tmp_path / "a.png"))
    assert np.allclose(a, from_srgb(rgb8 / 255.0), atol=1e-6)
    assert np.allclose(load_image(str(tmp_path / "a.png"), srgb=False), rgb8 / 255.0)
    j = load_image(str(tmp_path / "a.jpg"))
    assert j.shape == (8, 8, 3) and np.allclose(j, from_srgb(128 / 255), atol=0.01)
    g = load_image(str(tmp_path / "g16.png"))
    assert g.shape == (2, 2, 1) and np.allclose(g, 1.0)
    r = load_image(str(tmp_path / "rgba.png"))
    assert r.shape == (2, 2, 4) and np.allclose(r[..., 3], 0.2)       # alpha stays linear
    np.save(str(tmp_path / "m.npy"), np.ones((3, 4)))
    m = load_image(str(tmp_path / "m.npy"))
    assert m.shape == (3, 4, 1) and m.dtype == np.float32
    assert np.allclose(load_image(str(tmp_path / "m.npy"), srgb=True), 1.0)


def test_load_errors(tmp_path):
    for name in ("nope.png", "nope.exr", "nope.npy"):
        with pytest.raises(ConfigError, match="not found") as e:
            load_image(str(tmp_path / name))
        assert name in str(e.value)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"this is not a png")
    with pytest.raises(ConfigError, match="cannot read") as e:
        load_image(str(bad))
    assert "bad.png" in str(e.value)
    badn = tmp_path / "bad.npy"
    badn.write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="bad.npy"):
        load_image(str(badn))
    other = tmp_path / "x.hdr2"
    other.write_bytes(b"1")
    with pytest.raises(ConfigError, match="unknown image format"):
        load_image(str(other))
