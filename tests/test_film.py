"""The reconstruction filters (box, Gaussian, tent): a filter of any width is applied in full (not
truncated to the 5x5 pixel-local block), in the image and in the adjoint pass's weights."""
import os

import numpy as np
import pytest

import tirender
from scenes import camera


def _edge_scene(stddev, filt=None):
    """A one-sided emitter of radiance 1 covering x < 0 of the view, black elsewhere: the edge falls
    on the boundary between columns 15 and 16 of a 32-pixel-wide image. filt: the film's filter
    (default: Gaussian of that stddev)."""
    cam = camera([0, 0, 5], [0, 0, 0], fov=40, w=32, h=8)
    cam["film"]["filter"] = filt or {"type": "gaussian", "stddev": stddev}
    return tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 1},
        "sensors": [cam],
        "shapes": [{"type": "rectangle", "to_world": [{"scale": 10.0}, {"translate": [-10.0, 0, 0]}],
                    "emitter": {"type": "area", "radiance": 1.0}}]})


def _w1(filt, d):
    """Mitsuba's 1D filter weights (numpy): truncated Gaussian (r = 4σ) or tent max(0, 1 - |d|/r)."""
    if filt["type"] == "tent":
        return np.maximum(0.0, 1.0 - np.abs(d) / filt["radius"])
    sd = filt["stddev"]
    r = 4 * sd
    return np.where(np.abs(d) <= r, np.maximum(0, np.exp(-d * d / (2 * sd ** 2)) - np.exp(-r * r / (2 * sd ** 2))), 0.0)


def _profile(stddev, cols, filt=None):
    """Analytic column values: ∫_{u<16} w(c + 0.5 - u) du / ∫ w."""
    filt = filt or {"type": "gaussian", "stddev": stddev}
    r = filt.get("radius", 4 * stddev)
    d = np.linspace(-r, r, 20001)
    w = _w1(filt, d)
    return np.array([w[(c + 0.5 - d) < 16.0].sum() / w.sum() for c in cols])


@pytest.mark.parametrize("stddev", [0.5, 1.0])
def test_gaussian_edge_profile(stddev):
    sc = _edge_scene(stddev)
    img = tirender.render(sc, spp=256, seed=3, progress=False)
    cols = np.arange(10, 22)
    got = img[2:6, cols, 0].mean(0)
    want = _profile(stddev, cols)
    assert np.allclose(got, want, atol=0.02), (got, want)
    if stddev > 0.5:   # 2.5 pixels from the edge is still blurred (a 5x5 block would give exactly 0)
        assert 0.004 < got[np.where(cols == 18)[0][0]] < 0.01


@pytest.mark.parametrize("radius", [1.0, 2.6])
def test_tent_edge_profile(radius):
    """Mitsuba's tent filter, inside the pixel-local block (radius 1) and wider than it (2.6: splatted
    directly): the edge's column profile is the tent's integral."""
    filt = {"type": "tent", "radius": radius}
    img = tirender.render(_edge_scene(0.5, filt), spp=256, seed=3, progress=False)
    cols = np.arange(10, 22)
    got = img[2:6, cols, 0].mean(0)
    want = _profile(0.5, cols, filt)
    assert np.allclose(got, want, atol=0.02), (got, want)
    assert abs(got[np.where(cols == 17)[0][0]] - want[np.where(cols == 17)[0][0]]) < 0.01
    if radius < 2:   # the tent ends at its radius: nothing beyond (a Gaussian's tail would leak)
        assert got[np.where(cols == 17)[0][0]] == 0.0 and got[np.where(cols == 14)[0][0]] == 1.0


def test_filter_config_errors():
    """One clear line for a bad tent radius, an unknown filter or an unknown key; a key of another
    filter type is ignored (overriding only the type keeps a config valid)."""
    from tirender.errors import ConfigError
    assert _edge_scene(0.5, {"type": "box", "stddev": 0.5, "radius": 2.0}).sensors[0].filter == "box"
    for filt, word in (({"type": "tent", "radius": 0.0}, "radius"), ({"type": "tent", "radius": 9.0}, "radius"),
                       ({"type": "mitchell"}, "mitchell"), ({"type": "tent", "width": 1.0}, "width")):
        with pytest.raises(ConfigError) as e:
            _edge_scene(0.5, filt)
        assert word in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_wide_gaussian_adjoint_weights():
    """render_grad of a constant adjoint with a wide filter: the gradient of Σ y w.r.t. radiance equals
    Σ y / radiance (the image is linear in it), which needs the full filter weights W_p."""
    sc = _edge_scene(1.0)
    img = tirender.render(sc, spp=64, seed=3, progress=False)
    g = tirender.render_grad(sc, np.ones_like(img), spp=64, seed=4, progress=False)
    name = [k for k in sc.params.keys() if k.endswith("radiance")][0]
    assert abs(float(np.sum(g[name])) - float(img.sum())) < 0.03 * float(img.sum())


@pytest.mark.parametrize("filt", [{"type": "gaussian", "stddev": 0.5}, {"type": "gaussian", "stddev": 0.8},
                                  {"type": "tent", "radius": 1.5}, {"type": "tent", "radius": 2.6}])
def test_gather_adjoint_matches_the_filter_weights(filt):
    """film.gather_adjoint (δL = Σ_p w_p(pos) adj_p) against numpy, at random film positions including
    the image borders: radius ≤ 2 (Gaussian stddev 0.5, tent 1.5: the separable 5-column path) and
    wider (stddev 0.8, i.e. radius 3.2, and tent 2.6: the general loop)."""
    import taichi as ti
    from tirender.core import film
    from tirender.scene.storage import padded

    @ti.kernel
    def gather(st: ti.template(), pos: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(pos.shape[0]):
            v = film.gather_adjoint(st, 0, ti.Vector([pos[i, 0], pos[i, 1]]))
            for k in ti.static(range(3)):
                out[i, k] = v[k]

    sc = _edge_scene(0.5, filt)
    st = sc.bind()
    w, h = 32, 8
    rng = np.random.default_rng(7)
    adj = rng.normal(size=(h * w, 3)).astype(np.float32)
    st.adj.from_numpy(padded(adj, st.caps["pixels"]))
    pos = np.concatenate([rng.random((200, 2)) * [w, h], [[0.01, 0.02], [w - 0.01, h - 0.01], [3.5, 0.5]]])
    pos = pos.astype(np.float32)
    out = np.zeros((len(pos), 3), np.float32)
    gather(st, pos, out)
    xs, ys = np.arange(w) + 0.5, np.arange(h) + 0.5
    want = np.array([(np.outer(_w1(filt, ys - p[1]), _w1(filt, xs - p[0])).reshape(-1, 1) * adj).sum(0)
                     for p in pos])
    assert np.allclose(out, want, rtol=1e-4, atol=1e-5), np.abs(out - want).max()


@pytest.mark.parametrize("tile", [False, True])
@pytest.mark.parametrize("filt", [{"type": "gaussian", "stddev": 0.5}, {"type": "gaussian", "stddev": 0.3},
                                  {"type": "gaussian", "stddev": 0.05},
                                  {"type": "tent", "radius": 1.5}, {"type": "tent", "radius": 1.0}, {"type": "box"}])
def test_pixel_local_block_matches_the_filter_weights(filt, tile):
    """film.local_splat / local_flush (a pixel's samples summed in its local block, or a tile's pixels' samples in
    the tile's block; on the CPU each into the 4x4 window its offset reaches) give Σ_s w(pos_s) L_s and Σ_s w(pos_s)
    per pixel as numpy does, for samples anywhere in the pixel (offsets 0 and ±½ included), inside the image and at
    its corner, from every pixel of a tile."""
    import taichi as ti
    from tirender.core import film
    from tirender.core.fixed_point import INFO_FILM_SCALE, WEIGHT_SCALE

    @ti.kernel
    def block(st: ti.template(), x0: ti.i32, y0: ti.i32, pix: ti.types.ndarray(), pos: ti.types.ndarray(),
              rad: ti.types.ndarray(), tiled: ti.template()):
        for _ in range(1):
            f = film.local_zero(st, 0, x0, y0, tiled)
            for i in range(pos.shape[0]):
                film.local_splat(st, 0, pix[i, 0], pix[i, 1], ti.Vector([pos[i, 0], pos[i, 1]]),
                                 ti.Vector([rad[i, 0], rad[i, 1], rad[i, 2]]), f, False, False)
            film.local_flush(st, 0, f, False)

    st = _edge_scene(0.5, filt).bind()
    w, h, scale = 32, 8, 2.0 ** 30
    rng = np.random.default_rng(3)
    for x0, y0 in ((10, 4), (0, 0), (28, 4)):
        pixels = [(x0 + i, y0 + j) for j in range(film.TILE) for i in range(film.TILE)
                  if x0 + i < w and y0 + j < h] if tile else [(x0, y0)]
        pix, pos = [], []
        for p in pixels:
            off = np.concatenate([rng.random((12 if tile else 40, 2)), [[0.5, 0.5], [0.0, 0.0], [0.5, 0.999],
                                                                        [1e-6, 0.25]]])
            pix += [p] * len(off)
            pos.append(off + p)
        pix, pos = np.array(pix, np.int32), np.concatenate(pos).astype(np.float32)
        rad = rng.random((len(pos), 3)).astype(np.float32)
        st.film.fill(0)
        st.info_f[INFO_FILM_SCALE] = scale
        block(st, x0, y0, pix, pos, rad, tile)
        got = st.film.to_numpy()[:w * h].astype(np.float64) / [scale, scale, scale, WEIGHT_SCALE]
        xs, ys = np.arange(w) + 0.5, np.arange(h) + 0.5
        want = np.zeros((h * w, 4))
        for p, L in zip(pos.astype(np.float64), rad):
            if filt["type"] == "box":
                wt = np.zeros((h, w))
                wt[int(p[1]), int(p[0])] = 1.0
            else:
                wt = np.outer(_w1(filt, ys - p[1]), _w1(filt, xs - p[0]))
            want += wt.reshape(-1, 1) * np.append(L, 1.0)
        assert want[:, 3].sum() > 0 and np.count_nonzero(want[:, 3]) == np.count_nonzero(got[:, 3])
        assert np.allclose(got, want, rtol=2e-5, atol=1e-6), np.abs(got - want).max()


def test_exp_inline_matches_exp():
    """core/math.exp_inline (Cephes' expf, no library call) within 2 ulp-ish (relative 3e-7) of e^x over
    the f32 range it clamps to, exact at 0."""
    import taichi as ti
    from tirender.core.math import exp_inline

    @ti.kernel
    def ev(x: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(x.shape[0]):
            out[i] = exp_inline(x[i])

    x = np.concatenate([np.linspace(-87.0, 88.0, 20001), [0.0, -1e-8, 1e-8, -0.5, 0.5]]).astype(np.float32)
    out = np.zeros_like(x)
    ev(x, out)
    want = np.exp(x.astype(np.float64))
    assert np.all(np.abs(out / want - 1.0) < 3e-7), np.abs(out / want - 1.0).max()
    assert out[-5] == 1.0


@pytest.mark.parametrize("size,spp", [((13, 7), 5), ((9, 1), 5), ((6, 9), 5), ((13, 7), 48), ((6, 9), 40)])
def test_tile_schedule_gives_the_atomic_schedules_image(size, spp, monkeypatch):
    """On the CPU the render kernels run a thread per tile of film.TILE² pixels, in four phases, the tile's samples
    summed in one block flushed without atomics (integrators/kernels.py): the image is the per-pixel atomic
    schedule's to float rounding (the blocks' float sums group the samples otherwise; 5e-6 relative), whatever the
    size (partial tiles, a single row, one tile per phase), for the render kernel and the forward-mode (tangent)
    kernel; and each schedule gives the same bits when run again. At 40 and 48 spp these small films split each
    tile's samples into several items (kernels.tile_chunks), whose flushes add atomically."""
    from tirender.core import film
    from tirender.integrators import kernels
    if tirender.current_arch() != "cpu":
        pytest.skip("the tile schedule is the CPU's")
    w, h = size
    chunks = kernels.tile_chunks(max(film.tiles(w, h, 0)[0] * film.tiles(w, h, 0)[1], 1), spp)
    assert (chunks > 1) == (spp >= 16), chunks
    cbox = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "cbox.yaml")
    sc = tirender.load_scene(cbox, overrides=[f"sensors.0.film.width={w}", f"sensors.0.film.height={h}"])
    name = [n for n in sc.params.keys() if n.endswith("reflectance")][0]
    out = {}
    for tiled in (True, False, True):
        monkeypatch.setattr(kernels, "_on_cpu", lambda b=tiled: b)
        got = (tirender.render(sc, spp=spp, seed=2), tirender.render_forward(sc, {name: 0.1}, spp=spp, seed=4))
        if tiled in out:
            assert all(np.array_equal(a, b) for a, b in zip(got, out[tiled]))
        out[tiled] = got
    for a, b in zip(out[True], out[False]):
        assert a.shape == (h, w, 3)
        assert np.allclose(a, b, rtol=5e-6, atol=1e-7 * np.abs(b).max()), np.abs(a - b).max()
    assert np.abs(out[True][0]).sum() > 0
