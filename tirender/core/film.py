"""Film with a reconstruction filter (Mitsuba's box, Gaussian or tent), splatting and its adjoint.

Each sample at continuous film position ``pos`` (pixels) adds w·L and w to every pixel whose
centre lies within the filter radius; the image is Σ w L / Σ w. Separable, w = w1(dx) w1(dy) with d
the distance (pixels) from the pixel centre: Gaussian w1(d) = max(0, exp(-d²/2σ²) - exp(-r²/2σ²)),
r = 4σ; tent w1(d) = max(0, 1 - |d|/r) (r: its ``radius``, default 1). Box: the pixel containing pos.
``st.film`` holds (Σ w L, Σ w) per pixel of the current launch in fixed point (core/fixed_point.py:
Σ w L at the launch's scale ``st.info_f[INFO_FILM_SCALE]``, chosen from the largest |L| of one sample,
which the splats and flushes record with ``track_max``; Σ w at WEIGHT_SCALE), row-major from the top-left
pixel; launch.py folds each launch into float64.

The local path (``local_zero`` / ``local_splat`` / ``local_flush``: a thread per pixel, its samples' footprints
summed in the pixel's 5 x 5 block, one flush per pixel; on the CPU a thread per tile of ``TILE`` x ``TILE`` pixels,
all its samples summed in the tile's block and flushed once, the tiles of one launch ``TILE`` pixels apart, so
that the flushes add without atomics) computes the filter's per-camera constants once per block and the
Gaussian's taps with 2 exps per axis (``_gauss_taps``): its weights equal ``_w1``'s to a few ulps (images within
float rounding of the per-weight form; tent and box weights are the same bits).

Adjoint: ∂y_p/∂L_s = w_ps / W_p (W_p the weight sum, treated as constant), so the adjoint radiance
of a sample is δL_s = Σ_p w_ps δy_p / W_p; ``st.adj`` holds δy_p / W_p after ``normalize_adjoint``.
"""
import taichi as ti

from .fixed_point import INFO_FILM_SCALE, SLOT_FILM, WEIGHT_SCALE, finite_or_zero, to_fixed, track_max
from .math import exp_inline, vec2, vec3

FILTER_BOX, FILTER_GAUSSIAN, FILTER_TENT = 0, 1, 2
FILTERS = {"box": FILTER_BOX, "gaussian": FILTER_GAUSSIAN, "tent": FILTER_TENT}   # name -> st.cam_filter tag


@ti.func
def _w1(kind, d, stddev, radius):
    """The 1D filter weight at distance d (pixels) from a pixel centre: Gaussian or tent (kind)."""
    res = 0.0
    if kind == FILTER_TENT:
        res = ti.max(0.0, 1.0 - ti.abs(d) / radius)
    else:
        a = 1.0 / (2.0 * stddev * stddev)
        res = ti.max(0.0, ti.exp(-d * d * a) - ti.exp(-radius * radius * a))
    return res


@ti.func
def _box_pixel(st: ti.template(), cam, pos):
    """Index of the pixel containing film position pos."""
    w = st.cam_w[cam]
    x = ti.min(ti.cast(pos[0], ti.i32), w - 1)
    y = ti.min(ti.cast(pos[1], ti.i32), st.cam_h[cam] - 1)
    return y * w + x


@ti.func
def _footprint(st: ti.template(), cam, pos):
    """(x0, x1, y0, y1, kind, stddev, radius): the pixels whose centres lie within the filter's radius of
    pos, and the filter (_w1's arguments)."""
    r = st.cam_radius[cam]
    x0 = ti.max(ti.cast(ti.ceil(pos[0] - 0.5 - r), ti.i32), 0)
    x1 = ti.min(ti.cast(ti.floor(pos[0] - 0.5 + r), ti.i32), st.cam_w[cam] - 1)
    y0 = ti.max(ti.cast(ti.ceil(pos[1] - 0.5 - r), ti.i32), 0)
    y1 = ti.min(ti.cast(ti.floor(pos[1] - 0.5 + r), ti.i32), st.cam_h[cam] - 1)
    return x0, x1, y0, y1, st.cam_filter[cam], st.cam_stddev[cam], r


@ti.func
def footprint(st: ti.template(), cam, pos):
    """(x0, x1, y0, y1): the pixels a sample at film position pos (pixels) reaches — the pixel containing it
    (box), else those whose centres lie within the filter's radius; for splats into other buffers than
    st.film, with pixel_weight."""
    x0, x1, y0, y1 = 0, 0, 0, 0
    if st.cam_filter[cam] == FILTER_BOX:
        p = _box_pixel(st, cam, pos)
        x0 = p % st.cam_w[cam]
        x1 = x0
        y0 = p // st.cam_w[cam]
        y1 = y0
    else:
        a0, a1, b0, b1, _, _, _ = _footprint(st, cam, pos)
        x0, x1, y0, y1 = a0, a1, b0, b1
    return x0, x1, y0, y1


@ti.func
def pixel_weight(st: ti.template(), cam, pos, x, y):
    """The filter weight of pixel (x, y) for a sample at film position pos: w1(x + ½ − pos_x) w1(y + ½ − pos_y);
    box: 1 (footprint gives its one pixel)."""
    wt = 1.0
    if st.cam_filter[cam] != FILTER_BOX:
        kind, sd, r = st.cam_filter[cam], st.cam_stddev[cam], st.cam_radius[cam]
        wt = _w1(kind, x + 0.5 - pos[0], sd, r) * _w1(kind, y + 0.5 - pos[1], sd, r)
    return wt


@ti.func
def _add(st: ti.template(), p, wL, wt, weighted: ti.template(), plain: ti.template() = False, shared=0):
    """st.film[p] += (wL, wt) in fixed point (radiance at the launch's scale, weight at WEIGHT_SCALE;
    no weight add unless ``weighted``); ``plain``: without an atomic (no other thread adds to p meanwhile) unless
    ``shared`` (run time: a tile's samples split between threads, integrators/kernels.py)."""
    s = st.info_f[INFO_FILM_SCALE]
    if ti.static(plain):
        v = ti.Vector([to_fixed(wL[0], s), to_fixed(wL[1], s), to_fixed(wL[2], s), to_fixed(wt, WEIGHT_SCALE)])
        if shared:
            ti.atomic_add(st.film[p], v)
        else:
            st.film[p] = st.film[p] + v
    elif ti.static(weighted):
        ti.atomic_add(st.film[p], ti.Vector([to_fixed(wL[0], s), to_fixed(wL[1], s), to_fixed(wL[2], s),
                                             to_fixed(wt, WEIGHT_SCALE)]))
    else:
        for k in ti.static(range(3)):
            ti.atomic_add(st.film[p][k], to_fixed(wL[k], s))


@ti.func
def splat(st: ti.template(), cam, pos, L):
    """Add sample radiance L at film position pos into st.film (fixed point); one film add per
    covered pixel (launch.py: up to 25 per sample)."""
    _splat(st, cam, pos, L, True, True)


@ti.func
def splat_radiance(st: ti.template(), cam, pos, L):
    """Add w·L of a sample at pos into st.film but no filter weight: for estimators whose samples are
    not uniform over the film (MCMC), whose pixel weights the host adds (launch.add_uniform_weights)."""
    _splat(st, cam, pos, L, False, False)


@ti.func
def splat_light(st: ti.template(), cam, pos, L):
    """splat_radiance for light tracing: w·L without filter weight, its largest |L| recorded (the
    launch is repeatable, so launch.sweep fixes its scale as for splat)."""
    _splat(st, cam, pos, L, False, True)


@ti.func
def _splat(st: ti.template(), cam, pos, L, weighted: ti.template(), track: ti.template()):
    if ti.static(track):   # the launch's largest value (splat_radiance's caller fixes its scale by a bound)
        track_max(st.acc_max, SLOT_FILM, ti.cast(pos[0], ti.i32), ti.abs(L).max())
    if st.cam_filter[cam] == FILTER_BOX:
        _add(st, _box_pixel(st, cam, pos), L, 1.0, weighted)
    else:
        x0, x1, y0, y1, kind, sd, r = _footprint(st, cam, pos)
        n = ti.static(2 * LOCAL_HALF + 1)
        if x1 - x0 < n and y1 - y0 < n:
            # the footprint fits the n x n block: separable weights once, fixed-size loops (with
            # dynamic loop bounds, Vulkan on lavapipe lost some of these atomics)
            wx = ti.Vector([0.0] * n)
            wy = ti.Vector([0.0] * n)
            for j in ti.static(range(n)):
                if x0 + j <= x1:
                    wx[j] = _w1(kind, x0 + j + 0.5 - pos[0], sd, r)
                if y0 + j <= y1:
                    wy[j] = _w1(kind, y0 + j + 0.5 - pos[1], sd, r)
            for jy in ti.static(range(n)):
                if wy[jy] > 0.0:
                    for jx in ti.static(range(n)):
                        wt = wy[jy] * wx[jx]
                        if wt > 0.0:
                            _add(st, (y0 + jy) * st.cam_w[cam] + x0 + jx, wt * L, wt, weighted)
        else:
            for y in range(y0, y1 + 1):
                wy = _w1(kind, y + 0.5 - pos[1], sd, r)
                if wy > 0.0:
                    for x in range(x0, x1 + 1):
                        wt = wy * _w1(kind, x + 0.5 - pos[0], sd, r)
                        if wt > 0.0:
                            _add(st, y * st.cam_w[cam] + x, wt * L, wt, weighted)


@ti.func
def gather_adjoint(st: ti.template(), cam, pos):
    """δL of a sample at pos: Σ_p w_p(pos) st.adj[p] (st.adj = δy / W after normalize_adjoint)."""
    res = vec3(0.0)
    if st.cam_filter[cam] == FILTER_BOX:
        res = st.adj[_box_pixel(st, cam, pos)]
    else:
        x0, x1, y0, y1, kind, sd, r = _footprint(st, cam, pos)
        if x1 - x0 < LOCAL:   # the usual filters (radius <= 2): the LOCAL column weights once (separable)
            wx = ti.Vector([0.0] * LOCAL, dt=float)
            for i in ti.static(range(LOCAL)):
                wx[i] = _w1(kind, x0 + i + 0.5 - pos[0], sd, r)
            for y in range(y0, y1 + 1):
                wy = _w1(kind, y + 0.5 - pos[1], sd, r)
                row = y * st.cam_w[cam]
                for i in ti.static(range(LOCAL)):
                    if x0 + i <= x1:
                        res += (wy * wx[i]) * st.adj[row + x0 + i]
        else:
            for y in range(y0, y1 + 1):
                wy = _w1(kind, y + 0.5 - pos[1], sd, r)
                for x in range(x0, x1 + 1):
                    res += (wy * _w1(kind, x + 0.5 - pos[0], sd, r)) * st.adj[y * st.cam_w[cam] + x]
    return res


@ti.func
def _dw1(kind, d, stddev, radius):
    """d/dd of _w1 (0 outside the radius, where _w1 is 0)."""
    res = 0.0
    if d * d < radius * radius:
        if kind == FILTER_TENT:
            res = -ti.math.sign(d) / radius
        else:
            a = 1.0 / (2.0 * stddev * stddev)
            res = -2.0 * a * d * ti.exp(-d * d * a)
    return res


@ti.func
def gather_adjoint_position(st: ti.template(), cam, pos, L):
    """∂/∂pos of <gather_adjoint(pos), L> = Σ_p w_p(pos) (st.adj[p] · L): the film's adjoint w.r.t.
    a splat's film position (pixels; vec2), for estimators whose splats move with the parameters
    (light tracing). Gaussian and tent filters: Σ_p ∇w_p(pos) (adj_p · L), with w_p(pos) = g(x_p + ½ - pos_x)
    g(y_p + ½ - pos_y); box filters: 0 (piecewise constant)."""
    res = vec2(0.0)
    if st.cam_filter[cam] != FILTER_BOX:
        x0, x1, y0, y1, kind, sd, r = _footprint(st, cam, pos)
        for y in range(y0, y1 + 1):
            dy = y + 0.5 - pos[1]
            wy = _w1(kind, dy, sd, r)
            gy = _dw1(kind, dy, sd, r)
            for x in range(x0, x1 + 1):
                dx = x + 0.5 - pos[0]
                a = st.adj[y * st.cam_w[cam] + x].dot(L)
                res += vec2(-_dw1(kind, dx, sd, r) * wy, -_w1(kind, dx, sd, r) * gy) * a
    return res


@ti.func
def nan_to_zero(L):
    """L, or 0 if any channel is NaN or infinite: never let such a sample poison a pixel."""
    return finite_or_zero(L)


# ---- local accumulation: a thread renders all samples of one pixel (or, on the CPU, of one tile of TILE x TILE
# pixels); every sample lands within ±2 pixels (radius <= 2), so the thread accumulates the block of pixels its
# samples reach (5 x 5 for a pixel, (TILE + 4)² for a tile) locally and flushes it once, with one add per pixel
# of the block instead of up to 25 per sample. A sample at offset u ∈ [-½, ½) from its pixel's centre reaches at
# most 4 pixel centres per axis (those at k - u, |k - u| < 2: k = -2..1 for u ≤ 0, -1..2 for u > 0). On the CPU
# each sample adds into that 4x4 window of the block (a local array indexed at run time, which stays in memory:
# 100 scalars carried through the path loop would otherwise be spilled and reloaded one by one); on GPUs into a
# pixel's whole 5x5 block at fixed indices (registers).
LOCAL = 5
LOCAL_HALF = 2
WINDOW = 4
Q_LOG_MAX = 40.0    # _gauss_taps: |2 a u| is clamped to this (q^±2 ≤ e^80 stays finite in float32)
TILE = 2 * LOCAL_HALF   # the CPU's tile schedule: tiles of TILE x TILE pixels 2 tiles apart have blocks that never meet
TILE_BLOCK = TILE + 2 * LOCAL_HALF


def _block_type(n):
    """The local accumulator of an n x n block of pixels whose top-left pixel is (ox, oy)."""
    return ti.types.struct(
        acc=ti.types.vector(n * n * 4, float),   # (Σ w L_r, Σ w L_g, Σ w L_b, Σ w) of the n x n block, row-major
        ox=ti.i32,                                # the block's top-left pixel (may lie outside the film)
        oy=ti.i32,
        m=float,                                  # the largest max-channel |L| of one sample added
        kind=ti.i32,                              # the filter (FILTER_*) and its per-camera constants:
        a=float,                                  # Gaussian 1/(2σ²)
        c=float,                                  # its truncation exp(-r² a)
        c1=float,                                 # exp(-a), exp(-4a): the Gaussian at 1 and 2 pixels
        c2=float,
        inv_r=float,                              # tent 1/r
        one=float)                                # 1, known only at run time (local_splat)


LocalFilm = _block_type(LOCAL)        # a pixel's block
TileFilm = _block_type(TILE_BLOCK)    # a tile's block (the CPU's tile schedule)


def _on_cpu():
    from .. import backend
    return backend.current_arch() == "cpu"


@ti.func
def _empty_block(tile: ti.template()):
    if ti.static(tile):
        return TileFilm(0)
    else:
        return LocalFilm(0)


@ti.func
def local_zero(st: ti.template(), cam, x, y, tile: ti.template() = False):
    """An empty local accumulator for camera cam: the block of pixel (x, y) or, ``tile`` (compile-time), of the
    tile whose top-left pixel is (x, y); the filter's per-camera constants computed once (not per sample)."""
    kind = st.cam_filter[cam]
    r = st.cam_radius[cam]
    a = c = c1 = c2 = 0.0
    if kind == FILTER_GAUSSIAN:
        sd = st.cam_stddev[cam]
        a = 1.0 / (2.0 * sd * sd)
        c = ti.exp(-r * r * a)
        c1 = ti.exp(-a)
        c2 = ti.exp(-4.0 * a)
    f = _empty_block(tile)
    f.ox, f.oy = x - LOCAL_HALF, y - LOCAL_HALF
    f.kind, f.a, f.c, f.c1, f.c2 = kind, a, c, c1, c2
    f.inv_r = 1.0 / r if r > 0.0 else 0.0
    f.one = ti.cast(st.cam_w[cam] > 0, float)     # 1 (a film has pixels), which LLVM cannot fold (local_splat)
    return f


def _side(f):
    """The side of local accumulator f's block (compile-time)."""
    return TILE_BLOCK if f.acc.n == TILE_BLOCK * TILE_BLOCK * 4 else LOCAL


@ti.func
def _gauss_taps(f: ti.template(), u):
    """exp(-a (k - u)²) for k = -2..2 as b q^k exp(-a k²), b = exp(-a u²), q = exp(2 a u): 2 exps instead of 5 (the
    same values to a few ulps, core/math.exp_inline). 2 a u is clamped to ±Q_LOG_MAX so that q^±2 stays finite; a
    clamp happens only where a > Q_LOG_MAX (|u| ≤ ½: σ < 0.11), where every tap but k = 0 (b, exact) lies beyond the
    radius r = 4σ, and it only lowers such a tap or raises it to at most e^-Q_LOG_MAX, below the truncation
    c = exp(-a r²) = e^-8: beyond the radius max(0, g - c) is 0, as it should be, with no test of the distance."""
    b = exp_inline(-f.a * u * u)
    q = exp_inline(ti.min(ti.max(2.0 * f.a * u, -Q_LOG_MAX), Q_LOG_MAX))
    iq = 1.0 / q
    return ti.Vector([b * iq * iq * f.c2, b * iq * f.c1, b, b * q * f.c1, b * q * q * f.c2], dt=float)


@ti.func
def _taps(f: ti.template(), u, s, n: ti.template()):
    """The 1D weights of the n pixel centres k = s - 2 .. s - 3 + n for a sample at offset u (pixels from its pixel's
    centre), d = k - u: tent max(0, 1 - |d| / r) (1/r per camera: exact for r a power of two); Gaussian
    max(0, g(d) - c), the truncated Gaussian, its taps from _gauss_taps (n = WINDOW: the window's 4 of the 5, by s).
    Only the camera's own filter is computed (the kind is a camera's: no sample pays for the other's weights)."""
    w = ti.Vector([0.0] * n, dt=float)
    if f.kind == FILTER_TENT:
        for i in ti.static(range(n)):
            w[i] = ti.max(0.0, 1.0 - ti.abs((i - LOCAL_HALF + s) - u) * f.inv_r)
    else:
        g = _gauss_taps(f, u)
        for i in ti.static(range(n)):
            gi = g[i]
            if ti.static(n < LOCAL):
                gi = ti.select(s == 1, g[i + 1], g[i])
            w[i] = ti.max(0.0, gi - f.c)
    return w


@ti.func
def _local_weights(f: ti.template(), u):
    """The 1D weights of the block's 5 pixel centres (k = -2..2) for a sample at offset u from its pixel's centre."""
    return _taps(f, u, 0, LOCAL)


@ti.func
def _window_weights(f: ti.template(), u):
    """(w, s): the 1D weights of the WINDOW pixel centres k = s - 2 .. s + 1 a sample at offset u reaches
    (s = 1 if u > 0, else 0)."""
    s = ti.select(u > 0.0, 1, 0)
    return _taps(f, u, s, WINDOW), s


@ti.func
def splat_weight(st: ti.template(), cam, pos):
    """Add the filter weights of a sample at pos into st.adj_w (the adjoint pass's W_p)."""
    if st.cam_filter[cam] == FILTER_BOX:
        ti.atomic_add(st.adj_w[_box_pixel(st, cam, pos)], to_fixed(1.0, WEIGHT_SCALE))
    else:
        x0, x1, y0, y1, kind, sd, r = _footprint(st, cam, pos)
        for y in range(y0, y1 + 1):
            wy = _w1(kind, y + 0.5 - pos[1], sd, r)
            for x in range(x0, x1 + 1):
                wt = wy * _w1(kind, x + 0.5 - pos[0], sd, r)
                if wt > 0.0:
                    ti.atomic_add(st.adj_w[y * st.cam_w[cam] + x], to_fixed(wt, WEIGHT_SCALE))


@ti.func
def local_splat(st: ti.template(), cam, px, py, pos, L, f: ti.template(), weight_only: ti.template(),
                wide: ti.template()):
    """Add sample (pos, L) of pixel (px, py) into the local accumulator f (``local_zero``: the pixel's block, or
    its tile's). wide (a filter wider than the block: radius > 2 px, e.g. a Gaussian of stddev > 0.5; compile-time,
    so kernels for the usual filters carry no atomics in loops, which software Vulkan mishandles): splat directly
    instead (splat / splat_weight), so the filter is never truncated."""
    n = ti.static(_side(f))
    if ti.static(not weight_only):
        f.m = ti.max(f.m, ti.abs(L).max())
    bx = px - f.ox          # the pixel's place in the block
    by = py - f.oy
    if f.kind == FILTER_BOX:
        k = (by * n + bx) * 4
        f.acc[k] += L[0]
        f.acc[k + 1] += L[1]
        f.acc[k + 2] += L[2]
        f.acc[k + 3] += 1.0
    else:
        if ti.static(wide):
            if ti.static(weight_only):
                splat_weight(st, cam, pos)
            else:
                splat(st, cam, pos, L)
        else:
            if ti.static(_on_cpu() or n != LOCAL):
                # separable: 8 weights per sample, 16 adds of 4 lanes each. The lanes' 1 (the weight's own lane)
                # is a run-time 1 (f.one): with a literal 1 that product folds away and LLVM's SLP vectoriser
                # no longer sees four alike products, so it builds every add's vector lane by lane
                L1 = ti.Vector([L[0], L[1], L[2], f.one], dt=float)
                wx, sx = _window_weights(f, pos[0] - (px + 0.5))
                wy, sy = _window_weights(f, pos[1] - (py + 0.5))
                o = ((by - LOCAL_HALF + sy) * n + bx - LOCAL_HALF + sx) * 4
                for j in ti.static(range(WINDOW)):
                    r = wy[j] * L1
                    for i in ti.static(range(WINDOW)):
                        v = wx[i] * r
                        for ch in ti.static(range(4)):
                            f.acc[o + (j * n + i) * 4 + ch] += v[ch]
            else:   # a pixel's block (bx = by = LOCAL_HALF) at fixed indices
                L1 = ti.Vector([L[0], L[1], L[2], 1.0], dt=float)
                wx = _local_weights(f, pos[0] - (px + 0.5))   # separable: 10 weights per sample, 25 adds
                wy = _local_weights(f, pos[1] - (py + 0.5))
                for j in ti.static(range(LOCAL)):
                    for i in ti.static(range(LOCAL)):
                        v = (wy[j] * wx[i]) * L1
                        for ch in ti.static(range(4)):
                            f.acc[(j * LOCAL + i) * 4 + ch] += v[ch]


@ti.pyfunc
def tiles(w, h, phase):
    """(tiles across, tiles down) of TILE x TILE pixels of a w x h film in ``phase`` (0..3): the tiles (tx, ty) with
    tx % 2 = phase % 2 and ty % 2 = phase // 2 — TILE pixels apart, so their blocks never meet (local_flush)."""
    return ((w + TILE - 1) // TILE + 1 - phase % 2) // 2, ((h + TILE - 1) // TILE + 1 - phase // 2) // 2


@ti.func
def local_flush(st: ti.template(), cam, f: ti.template(), weight_only: ti.template(),
                plain: ti.template() = False, shared=0):
    """Atomically add the local accumulator's block into st.film (or its weights into st.adj_w), in fixed point
    (one add per pixel of the block inside the film; the largest |L| of one sample is recorded with track_max:
    the launch's scale bounds k samples' sums by that, core/fixed_point.py). ``plain`` (compile-time): film adds
    without atomics, for pixels whose blocks no other thread adds to meanwhile (a tile schedule: ``tiles``,
    integrators/kernels.py), unless ``shared`` (run time: the tile's samples are split between threads, which
    add with atomics); the fixed-point sums are the same in any order."""
    n = ti.static(_side(f))
    w = st.cam_w[cam]
    h = st.cam_h[cam]
    if ti.static(not weight_only):
        track_max(st.acc_max, SLOT_FILM, f.ox + LOCAL_HALF + (f.oy + LOCAL_HALF) * w, f.m)
    if ti.static(n == LOCAL):   # a pixel's block, unrolled (on GPUs its indices must be compile-time: registers)
        for j in ti.static(range(n)):
            for i in ti.static(range(n)):
                _flush_one(st, f, i, j, w, h, weight_only, plain, shared)
    else:                       # a tile's block (the CPU's): loops, so that the megakernel's code stays small
        for j in range(n):
            for i in range(n):
                _flush_one(st, f, i, j, w, h, weight_only, plain, shared)


@ti.func
def _flush_one(st: ti.template(), f: ti.template(), i, j, w, h, weight_only: ti.template(), plain: ti.template(),
               shared):
    """local_flush's add of the block's pixel (i, j)."""
    n = ti.static(_side(f))
    x = f.ox + i
    y = f.oy + j
    q = (j * n + i) * 4
    v = ti.Vector([f.acc[q], f.acc[q + 1], f.acc[q + 2], f.acc[q + 3]], dt=float)
    if x >= 0 and x < w and y >= 0 and y < h and v[3] > 0.0:
        if ti.static(weight_only):
            ti.atomic_add(st.adj_w[y * w + x], to_fixed(v[3], WEIGHT_SCALE))
        else:
            _add(st, y * w + x, vec3(v[0], v[1], v[2]), v[3], True, plain, shared)
