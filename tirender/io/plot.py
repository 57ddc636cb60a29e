"""Line plots as PNG files without matplotlib, drawn on Taichi's ``ti.GUI`` canvas.

``ti.GUI(show_gui=False)`` works headless (no display needed): lines, rectangles,
triangles and text are rasterised on the CPU and ``gui.show(path)`` writes the image.
:func:`draw_line_plot_into` draws into any ``ti.GUI`` (e.g. a live view) inside a
sub-rectangle given in the GUI's normalised coordinates (origin bottom-left).
"""
import math
import os
import tempfile

import numpy as np

__all__ = ["save_line_plot", "draw_line_plot_into", "COLORS"]

COLORS = [0x1F77B4, 0xFF7F0E, 0x2CA02C, 0xD62728, 0x9467BD, 0x8C564B, 0xE377C2, 0x7F7F7F,
          0xBCBD22, 0x17BECF]
_BLACK, _GREY, _WHITE, _LIGHT = 0x000000, 0x555555, 0xFFFFFF, 0xE8E8E8
_FONT = 13                          # tick label / legend font size (pixels)


def _nice_step(span, n):
    raw = span / max(n, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * mag * (1 + 1e-9):
            return m * mag
    return 10 * mag


def _nice_ticks(lo, hi, n=5):
    """About n 'round' tick values inside [lo, hi]."""
    step = _nice_step(hi - lo, n)
    k0, k1 = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [k * step for k in range(k0, k1 + 1)], step


def _fmt(v, step):
    if abs(v) < abs(step) * 1e-6:
        v = 0.0
    s = f"{v:.6g}"
    if "e" in s:
        mant, ex = s.split("e")
        s = f"{float(mant):g}e{int(ex)}"
    return s


def _log_ticks(lo, hi):
    """Tick positions (log10 units) and labels for a log axis spanning [lo, hi] (log10)."""
    e0, e1 = math.ceil(lo - 1e-9), math.floor(hi + 1e-9)
    if e1 - e0 >= 1:
        stride = max(1, math.ceil((e1 - e0 + 1) / 7))
        es = list(range(e0, e1 + 1, stride))
        labels = [("%g" % 10.0 ** e) if -2 <= e <= 3 else f"1e{e}" for e in es]
        return [float(e) for e in es], labels
    vals, step = _nice_ticks(10.0 ** lo, 10.0 ** hi, 4)
    vals = [v for v in vals if v > 0]
    return [math.log10(v) for v in vals], [_fmt(v, step) for v in vals]


def _prepare(series, logy):
    out = []
    for name, xy in series.items():
        if isinstance(xy, (tuple, list)) and len(xy) == 2:
            x, y = xy
            x = np.asarray(x, np.float64).reshape(-1)
            y = np.asarray(y, np.float64).reshape(-1)
        else:                                    # just y values: x = 0, 1, 2, ...
            y = np.asarray(xy, np.float64).reshape(-1)
            x = np.arange(len(y), dtype=np.float64)
        n = min(len(x), len(y))
        x, y = x[:n], y[:n]
        with np.errstate(divide="ignore", invalid="ignore"):
            yy = np.log10(y) if logy else y
        ok = np.isfinite(x) & np.isfinite(yy)
        out.append((str(name), x, yy, ok))
    return out


def _range(vals, pad, default):
    if len(vals) == 0:
        return default
    lo, hi = float(np.min(vals)), float(np.max(vals))
    if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):
        d = 0.5 if lo == 0 else 0.1 * abs(lo)
        return lo - d, hi + d
    p = pad * (hi - lo)
    return lo - p, hi + p


def draw_line_plot_into(gui, series, title="", xlabel="", ylabel="", logy=False,
                        region=(0.0, 0.0, 1.0, 1.0)):
    """Draw a line plot into ``gui`` (a ``ti.GUI``) inside ``region`` = (x0, y0, x1, y1) in
    the GUI's normalised coordinates (origin bottom-left), on a white background.

    series: {name: (x array, y array)} (or {name: y array}, x = 0..n-1); non-finite points
    (and y <= 0 with ``logy``) are skipped. One colour per series, legend top-right.
    """
    W, H = gui.res
    rx0, ry0, rx1, ry1 = [float(v) for v in region]
    rw, rh = (rx1 - rx0) * W, (ry1 - ry0) * H          # region size in pixels

    def P(px, py):                                     # region pixels -> normalised
        return (rx0 + px / W, ry0 + py / H)

    def text(s, px, py, size=_FONT, color=_BLACK, anchor="left"):
        """Text whose top-left corner is at (px, py) (pixels, y up); anchor moves it."""
        w = 0.55 * size * len(s)
        if anchor == "center":
            px -= w / 2
        elif anchor == "right":
            px -= w
        gui.text(s, P(px, py), font_size=size, color=color)

    # background
    a, b, c, d = P(0, 0), P(rw, 0), P(rw, rh), P(0, rh)
    gui.triangles(np.array([a, a]), np.array([b, c]), np.array([c, d]), color=_WHITE)

    left, right = 62.0, 14.0
    bottom = 40.0 + (16.0 if xlabel else 0.0)
    top = 12.0 + (22.0 if title else 0.0) + (16.0 if ylabel else 0.0)
    ax0, ay0, ax1, ay1 = left, bottom, max(rw - right, left + 10), max(rh - top, bottom + 10)
    aw, ah = ax1 - ax0, ay1 - ay0

    data = _prepare(series, logy)
    xs = np.concatenate([x[ok] for _, x, _, ok in data]) if data else np.zeros(0)
    ys = np.concatenate([y[ok] for _, _, y, ok in data]) if data else np.zeros(0)
    xlo, xhi = _range(xs, 0.0, (0.0, 1.0))
    ylo, yhi = _range(ys, 0.05, (0.0, 1.0))

    def to_px(x, y):
        return ax0 + (x - xlo) / (xhi - xlo) * aw, ay0 + (y - ylo) / (yhi - ylo) * ah

    # grid, ticks and tick labels
    xt, xstep = _nice_ticks(xlo, xhi, max(2, int(aw // 90)))
    if logy:
        yt, ylab = _log_ticks(ylo, yhi)
    else:
        yt, ystep = _nice_ticks(ylo, yhi, max(2, int(ah // 60)))
        ylab = [_fmt(v, ystep) for v in yt]
    seg_a, seg_b = [], []
    for v in xt:
        px, _ = to_px(v, ylo)
        seg_a.append(P(px, ay0))
        seg_b.append(P(px, ay1))
    for v in yt:
        _, py = to_px(xlo, v)
        seg_a.append(P(ax0, py))
        seg_b.append(P(ax1, py))
    if seg_a:
        gui.lines(np.array(seg_a), np.array(seg_b), radius=0.5, color=_LIGHT)
    for v in xt:
        px, _ = to_px(v, ylo)
        gui.line(P(px, ay0), P(px, ay0 - 5), radius=1, color=_BLACK)
        text(_fmt(v, xstep), px, ay0 - 8, anchor="center")
    for v, s in zip(yt, ylab):
        _, py = to_px(xlo, v)
        gui.line(P(ax0 - 5, py), P(ax0, py), radius=1, color=_BLACK)
        text(s, ax0 - 8, py + _FONT * 0.6, anchor="right")

    # data
    for k, (name, x, y, ok) in enumerate(data):
        col = COLORS[k % len(COLORS)]
        px, py = to_px(x, y)
        pts = np.stack([rx0 + px / W, ry0 + py / H], axis=1)
        seg = ok[:-1] & ok[1:]
        if seg.any():
            gui.lines(pts[:-1][seg], pts[1:][seg], radius=1.2, color=col)
        lone = ok.copy()
        lone[:-1] &= ~seg
        lone[1:] &= ~seg
        if lone.any():
            gui.circles(pts[lone], radius=2.0, color=col)

    # axes box, labels, title
    gui.rect(P(ax0, ay1), P(ax1, ay0), radius=1, color=_BLACK)
    if xlabel:
        text(xlabel, (ax0 + ax1) / 2, ay0 - 26, color=_GREY, anchor="center")
    if ylabel:
        text(ylabel + (" (log)" if logy else ""), 6, ay1 + 20, color=_GREY)
    if title:
        text(title, rw / 2, rh - 6, size=16, anchor="center")
    if not len(xs):
        text("no data", (ax0 + ax1) / 2, (ay0 + ay1) / 2 + 8, color=_GREY, anchor="center")

    # legend (top-right inside the axes)
    if data:
        lw = 34 + 0.55 * _FONT * max(len(n) for n, *_ in data)
        lh = 6 + 17 * len(data)
        lx0, ly1 = ax1 - 8 - lw, ay1 - 8
        la, lb, lc, ld = P(lx0, ly1 - lh), P(lx0 + lw, ly1 - lh), P(lx0 + lw, ly1), P(lx0, ly1)
        gui.triangles(np.array([la, la]), np.array([lb, lc]), np.array([lc, ld]), color=_WHITE)
        gui.rect(ld, lb, radius=1, color=0xAAAAAA)
        for k, (name, *_rest) in enumerate(data):
            cy = ly1 - 12 - 17 * k
            gui.line(P(lx0 + 6, cy), P(lx0 + 26, cy), radius=1.5, color=COLORS[k % len(COLORS)])
            text(name, lx0 + 30, cy + _FONT * 0.6)


def save_line_plot(path, series, title="", xlabel="", ylabel="", logy=False, size=(640, 400)):
    """Write a line plot PNG (``size`` = (width, height) pixels); see
    :func:`draw_line_plot_into` for ``series``. Headless; the file is written atomically."""
    import taichi as ti

    from ..backend import ensure_init

    ensure_init()
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    gui = ti.GUI(title or "plot", res=(int(size[0]), int(size[1])), show_gui=False,
                 background_color=_WHITE)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-plot-", suffix=".png", dir=d)
    os.close(fd)
    try:
        draw_line_plot_into(gui, series, title=title, xlabel=xlabel, ylabel=ylabel, logy=logy)
        gui.show(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        try:
            gui.close()
        except Exception:  # noqa: BLE001 - closing a headless GUI is best effort
            pass
    return path
