"""The deterministic fixed-point accumulators cannot overflow silently (core/fixed_point.py).

Emitters scaled from 1e-6 to 1e12 render the scaled image and give scaled PRB gradients (relative
error <= 1e-5 against the unscaled result times the scale); adjoint images up to the float range
give finite, scaled gradients; the accepted fixed-point scale never depends on what was rendered
before (a seed fixes every bit); the scale choice itself is checked against its contract."""
import math

import numpy as np
import pytest

import tirender
from scenes import cornell_like
from tirender.core.fixed_point import BUCKET, HEADROOM_BITS, scale_for

SCALES = [1e-6, 1e-3, 1e3, 1e6, 1e8, 1e12]
LIGHT = "light.radiance"
RHO = ("white.reflectance", "red.reflectance")


def _scene(w=20, filt="gaussian"):
    d = cornell_like(w=w, max_depth=5)
    d["sensors"][0]["film"]["filter"] = {"type": filt}
    return tirender.load_scene(d)


def _adjoint(sc, seed=3):
    s = sc.sensors[0]
    return np.random.default_rng(seed).uniform(0.1, 1.0, (s.height, s.width, 3)).astype(np.float32)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


@pytest.fixture(scope="module")
def cbox():
    sc = _scene()
    base = np.asarray(sc.params[LIGHT]).copy()
    img0 = tirender.render(sc, spp=16, seed=5, progress=False)
    g0 = tirender.render_grad(sc, _adjoint(sc), spp=8, seed=6, progress=False)
    return sc, base, img0, g0


def test_scale_for_contract():
    for m in [1e-30, 1e-6, 0.37, 1.0, 17.0, 3e9, 1e30]:
        for adds in [1, 32, 2 ** 20, 2 ** 31]:
            s = scale_for(m, adds)
            assert math.log2(s) == int(math.log2(s))               # a power of two
            assert m * adds * s <= 2.0 ** HEADROOM_BITS             # no partial sum can wrap
            assert m * adds * s > 2.0 ** (HEADROOM_BITS - 9) or s == 2.0 ** 120   # and not coarse
    assert scale_for(0.0, 32) == scale_for(0.0, 1)


def test_scale_for_is_invariant_to_the_launch_size():
    """The add count enters the scale exactly and only the magnitude is bucketed: k times the adds of m
    give the scale of one launch divided by k's power of two (no bucket boundary crossed by the spp
    alone), and a magnitude m/spp normalised by per=spp (gradients) gives the same scale at every
    power-of-two spp; the contract (no wrap, at most BUCKET + 2 bits coarse) holds with per."""
    for m in [1e-6, 0.37, 1.0, 17.0, 3e9]:
        for adds in [1, 25, 32, 2 ** 20]:
            s = scale_for(m, adds)
            for k in [2, 4, 16, 64, 1024]:
                assert scale_for(m, adds * k) == s / k
                assert scale_for(m / k, adds * k, k) == s
            for spp in [1, 3, 4, 64, 100]:
                sg = scale_for(m / spp, adds * spp, spp)
                assert (m / spp) * (adds * spp) * sg <= 2.0 ** HEADROOM_BITS
                assert (m / spp) * (adds * spp) * sg > 2.0 ** (HEADROOM_BITS - BUCKET - 2)


@pytest.mark.parametrize("k", SCALES)
def test_scaled_emitter_image_and_gradients(cbox, k):
    sc, base, img0, g0 = cbox
    sc.params[LIGHT] = base * np.float32(k)
    try:
        img = tirender.render(sc, spp=16, seed=5, progress=False)
        g = tirender.render_grad(sc, _adjoint(sc), spp=8, seed=6, progress=False)
    finally:
        sc.params[LIGHT] = base
    assert np.all(np.isfinite(img)) and img.min() >= 0.0
    lit = img0 > 1e-4 * img0.max()
    assert _rel(img[lit], img0[lit] * np.float64(k)) <= 1e-5
    for name in RHO:
        assert np.all(np.isfinite(g[name]))
        assert _rel(g[name], g0[name] * np.float64(k)) <= 1e-5, name
        assert np.all(np.sign(g[name]) == np.sign(g0[name]))


@pytest.mark.parametrize("k", [1e-30, 1e20, 1e36])
def test_adjoint_image_up_to_the_float_range(cbox, k):
    sc, base, img0, g0 = cbox
    a = _adjoint(sc).astype(np.float64) * k
    assert np.all(np.isfinite(a.astype(np.float32)))
    g = tirender.render_grad(sc, a.astype(np.float32), spp=8, seed=6, progress=False)
    for name in RHO:
        assert np.all(np.isfinite(g[name]))
        assert _rel(g[name], g0[name] * k) <= 1e-5, name


def test_float_max_adjoint_gives_finite_gradients(cbox):
    sc = cbox[0]
    a = np.full((20, 20, 3), 3.0e38, np.float32)
    g = tirender.render_grad(sc, a, spp=4, seed=6, progress=False)
    for name in RHO:
        assert np.all(np.isfinite(g[name])) and np.all(g[name] > 0)


def test_result_does_not_depend_on_history(cbox):
    """The accepted scale is a function of the launch's own values: rendering something 1e12 times
    brighter in between (which moves the scale guess) changes no bit."""
    sc, base, img0, g0 = cbox
    sc.params[LIGHT] = base * np.float32(1e12)
    tirender.render(sc, spp=4, seed=1, progress=False)
    tirender.render_grad(sc, _adjoint(sc) * 1e30, spp=4, seed=1, progress=False)
    sc.params[LIGHT] = base
    img = tirender.render(sc, spp=16, seed=5, progress=False)
    g = tirender.render_grad(sc, _adjoint(sc), spp=8, seed=6, progress=False)
    assert np.array_equal(img, img0)
    for name in g0:
        assert np.array_equal(g[name], g0[name]), name


def test_multi_launch_render_equals_itself_and_progressive(cbox):
    """Many launches (each with its own scale) fold into float64: a render split into progressive
    calls matches the one-call render to float rounding."""
    sc = cbox[0]
    from tirender.api import render_progressive
    img = tirender.render(sc, spp=16, seed=5, progress=False)
    render_progressive(sc, spp=8, sample_offset=0, seed=5, clear=True)
    img2 = render_progressive(sc, spp=8, sample_offset=8, seed=5)
    assert np.allclose(img, img2, rtol=1e-5, atol=1e-7)


def test_no_redo_when_the_spp_changes(cbox):
    """The fixed-point scales come from per-add maxima with the launch's add count entered exactly
    (core/fixed_point.scale_for), so a launch of another size guesses right: no launch is redone in a
    4-spp preview then a 64-spp render, an optimisation's doubling spp schedule (primal and PRB
    gradient), or progressive passes (launch.STATS counts the redos); and the 64-spp image after the
    preview is the one rendered without it, bit for bit."""
    from tirender import launch
    from tirender.api import render_progressive
    sc, base, img0, g0 = cbox
    first = tirender.render(sc, spp=64, seed=11, progress=False)
    target = tirender.render(sc, spp=4, seed=12, progress=False)
    tirender.render_grad(sc, 2 * (first - target), spp=4, seed=13, progress=False)
    redone, launches = launch.STATS["redone"], launch.STATS["launches"]
    for spp in (4, 64, 4, 64):                                  # previews and final renders
        img = tirender.render(sc, spp=spp, seed=11, progress=False)
    assert np.array_equal(img, first)
    for spp in (2, 4, 8, 16, 32, 64):                           # spp_schedule: {double_every, max: 64}
        img = tirender.render(sc, spp=spp, seed=20 + spp, progress=False)
        tirender.render_grad(sc, 2 * (img - target), spp=spp, seed=40 + spp, progress=False)
    done = 0
    for k, spp in enumerate((1, 1, 2, 4, 8, 16, 32)):          # the viewer's progressive passes
        render_progressive(sc, spp=spp, sample_offset=done, seed=7, clear=k == 0)
        done += spp
    assert launch.STATS["launches"] - launches >= 4 + 12 + 7
    assert launch.STATS["redone"] == redone


def test_an_interrupted_launch_leaves_no_trace(cbox):
    """A launch that wrote into the fixed-point film and then failed (an error, Ctrl-C) leaves nothing behind:
    the next render is the one rendered without it, bit for bit (every launch zeroes the film first)."""
    from tirender import launch
    sc, base, img0, g0 = cbox
    st = sc.bind()

    def fails(off, k):
        st.film.fill(123456789)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        launch.sweep(sc, 0, 4, "render", False, fails, film="flush")
    assert np.array_equal(tirender.render(sc, spp=16, seed=5, progress=False), img0)


def test_the_kernel_fold_is_numpys(cbox, monkeypatch):
    """The CPU folds each launch into the float64 film in a kernel (launch.FOLD_IN_KERNEL); the int64 readout
    folded by numpy (the GPUs' way) gives the same image to float64 rounding, and the same float32 image."""
    from tirender import launch
    sc = cbox[0]
    st = sc.bind()
    tirender.render(sc, spp=8, seed=9, progress=False)
    ours = st.host_film.copy()
    img = tirender.render(sc, spp=8, seed=9, progress=False)
    monkeypatch.setattr(launch, "FOLD_IN_KERNEL", ())
    img2 = tirender.render(sc, spp=8, seed=9, progress=False)
    assert np.allclose(st.host_film, ours, rtol=1e-15, atol=0.0)
    assert np.array_equal(img, img2)
    tirender.render(sc, spp=8, seed=9, progress=False)   # and back: the numpy fold left no film behind
    monkeypatch.setattr(launch, "FOLD_IN_KERNEL", ("cpu",))
    assert np.array_equal(tirender.render(sc, spp=8, seed=9, progress=False), img)
