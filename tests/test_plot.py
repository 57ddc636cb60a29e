"""Headless PNG line plots drawn with ti.GUI."""
import os

import imageio.v3 as iio
import numpy as np

from tirender.io.plot import COLORS, _log_ticks, _nice_ticks, draw_line_plot_into, save_line_plot


def _has_colour(img, hexcol, min_pixels=20):
    rgb = np.array([(hexcol >> 16) & 255, (hexcol >> 8) & 255, hexcol & 255])
    return int(np.sum(np.all(np.abs(img[..., :3].astype(int) - rgb) <= 8, axis=-1))) >= min_pixels


def test_save_line_plot(tmp_path):
    it = np.arange(300)
    p = str(tmp_path / "sub" / "loss.png")
    save_line_plot(p, {"train": (it, np.exp(-it / 50.0) + 1e-3),
                       "val": (it[::10], np.exp(-it[::10] / 70.0))},
                   title="Loss", xlabel="iteration", ylabel="loss", logy=True, size=(500, 320))
    assert os.path.isfile(p)
    assert os.listdir(tmp_path / "sub") == ["loss.png"]
    img = iio.imread(p)
    assert img.shape[:2] == (320, 500)
    assert len(np.unique(img.reshape(-1, img.shape[-1]), axis=0)) > 10      # not blank
    assert (img[..., :3] > 250).all(axis=-1).mean() > 0.5                    # white background
    assert (img[..., :3] < 128).all(axis=-1).sum() > 400                     # axes and text
    assert _has_colour(img, COLORS[0]) and _has_colour(img, COLORS[1])       # one colour each


def test_edge_cases_do_not_crash(tmp_path):
    cases = [
        {},
        {"nan": ([0, 1, 2], [np.nan, np.nan, np.nan])},
        {"const": ([0, 1, 2], [3.0, 3.0, 3.0]), "one point": ([1.5], [2.0])},
        {"neg": ([0, 1, 2, 3], [-1.0, 0.0, 1.0, 10.0])},               # logy drops y <= 0
        {"y only": np.linspace(0, 1, 5) ** 2, "gap": ([0, 1, 2, 3], [1, np.inf, 2, 3])},
    ]
    for k, series in enumerate(cases):
        p = str(tmp_path / f"c{k}.png")
        save_line_plot(p, series, logy=(k == 3), size=(200, 150))
        img = iio.imread(p)
        assert img.shape[:2] == (150, 200)


def test_draw_into_existing_gui(tmp_path):
    import taichi as ti

    from tirender.backend import ensure_init

    ensure_init()
    gui = ti.GUI("live", res=(400, 200), show_gui=False, background_color=0x000000)
    draw_line_plot_into(gui, {"x": ([0, 1, 2], [0, 1, 4])}, title="t", region=(0.5, 0, 1, 1))
    p = str(tmp_path / "live.png")
    gui.show(p)
    img = iio.imread(p)[..., :3]
    assert img.shape == (200, 400, 3)
    assert (img[:, :195] < 10).all()                   # left half untouched (black)
    assert (img[:, 205:] > 250).all(axis=-1).mean() > 0.5
    assert _has_colour(img, COLORS[0])


def test_ticks():
    t, step = _nice_ticks(0.0, 1.0, 5)
    assert step == 0.2 and np.allclose(t, [0, 0.2, 0.4, 0.6, 0.8, 1.0])
    t, step = _nice_ticks(-3.3, 7.1, 5)
    assert step == 2.5 and t[0] == -2.5 and t[-1] == 5.0
    pos, labels = _log_ticks(-3.2, 0.5)
    assert pos == [-3.0, -2.0, -1.0, 0.0] and labels == ["1e-3", "0.01", "0.1", "1"]
    pos, labels = _log_ticks(0.1, 0.6)                  # less than a decade: linear ticks
    assert len(pos) >= 2 and all(0.1 <= p <= 0.6 for p in pos)
