"""MCMC integrators (integrators/mcmc.py) and the primary-sample-space chains (core/pss.py): the
acceptance ratio, mutation / accept / reject of a chain's state, the bundle estimator's expectation
on a closed-form 1-D integrand, the film weights of uniform samples, convergence to the path
tracer's image, determinism per seed, and the refusal of gradients; the spectral variants (a child
process each: ``python tests/test_mcmc.py --variant-child spectral pssmlt`` runs one by hand)."""
import json
import math
import os
import sys

if __name__ == "__main__":     # a child process (run_child): this checkout's tirender, and tests/ for the helpers
    sys.path[:0] = [os.path.abspath(os.path.join(os.path.dirname(__file__), "..")), os.path.dirname(__file__)]

import numpy as np
import pytest
import taichi as ti

import tirender
from tirender import launch
from tirender.core import pss
from tirender.errors import ConfigError
from tirender.integrators import mcmc
from child_util import run_child

ROOT = os.path.join(os.path.dirname(__file__), "..")
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")


def cbox(size=32, hide=True, extra=()):
    return tirender.load_scene(CBOX, overrides=[f"sensors.0.film.width={size}", f"sensors.0.film.height={size}",
                                                f"integrator.hide_emitters={str(hide).lower()}", *extra])


def test_acceptance_ratio():
    out = ti.field(ti.f32, shape=6)
    pairs = [(1.0, 2.0), (2.0, 1.0), (0.0, 0.5), (0.5, 0.0), (0.0, 0.0), (3.0, 3.0)]

    @ti.kernel
    def k(a: ti.types.ndarray()):
        for i in range(6):
            out[i] = pss.acceptance(a[i, 0], a[i, 1])

    k(np.array(pairs, np.float32))
    np.testing.assert_allclose(out.to_numpy(), [1.0, 0.5, 1.0, 0.0, 0.0, 1.0], rtol=1e-6)


def _chain_kernels():
    pss.store(8)
    S = pss.current()
    prop = ti.field(ti.f32, shape=(8, 16))

    @ti.kernel
    def init(dims: ti.i32):
        for c in range(8):
            S.used[c] = 0
            S.iteration[c] = 0
            S.proposal[c] = 0
            S.last_large[c] = 0
            smp = pss.PssSampler(chain=c, mode=pss.INIT, key=c, seed=5)
            for _ in range(dims):
                smp.next_1d()

    @ti.kernel
    def step(dims: ti.i32, large_step: ti.f32, accept: ti.i32, sigma: ti.f32):
        """Read proposal values (twice: a proposal is a pure function), commit them if accept."""
        for c in range(8):
            smp = pss.proposal(c, S.proposal[c] + 1, 5, large_step, sigma, 0.0, 0)
            again = smp.copy()
            for d in range(dims):
                prop[c, d] = smp.next_1d()
                if again.next_1d() != prop[c, d]:
                    prop[c, d] = -1.0
            if accept:
                pss.commit(smp, dims)
            S.proposal[c] += 1

    @ti.kernel
    def hold(dims: ti.i32):
        for c in range(8):
            smp = pss.PssSampler(chain=c, mode=pss.HOLD, seed=5)
            for d in range(dims):
                prop[c, d] = smp.next_1d()
    return S, prop, init, step, hold


def test_chain_proposals_and_commit():
    S, prop, init, step, hold = _chain_kernels()
    init(6)
    u0 = S.value.to_numpy()[:8, :6].copy()
    assert np.all((u0 >= 0) & (u0 < 1)) and len(np.unique(u0)) == u0.size
    step(6, 0.0, 0, 0.01)                    # a rejected small step: nothing written, nothing to undo
    p1 = prop.to_numpy()[:8, :6].copy()
    np.testing.assert_array_equal(S.value.to_numpy()[:8, :6], u0)
    assert np.all(S.iteration.to_numpy()[:8] == 0)
    d = np.abs(p1 - u0)
    d = np.minimum(d, 1 - d)                 # wrapped distance
    assert np.all(d > 0) and np.all(d <= 0.01 * math.sqrt(6) + 1e-6)   # triangular offsets: |x| <= σ√6
    step(4, 0.0, 1, 0.01)                    # an accepted small step: the 4 dims read take their proposal
    p2 = prop.to_numpy()[:8, :4].copy()
    u1 = S.value.to_numpy()[:8, :6]
    np.testing.assert_array_equal(u1[:, :4], p2)
    assert not np.array_equal(p2, p1[:, :4])  # a new proposal: new numbers
    np.testing.assert_array_equal(u1[:, 4:], u0[:, 4:])               # lazy: dims not read are untouched
    assert np.all(S.iteration.to_numpy()[:8] == 1) and np.all(S.proposal.to_numpy()[:8] == 2)
    hold(6)                                  # dims 4, 5 mutate lazily: 2 small steps' worth when read next
    np.testing.assert_array_equal(prop.to_numpy()[:8, :6], u1)
    step(6, 0.0, 0, 0.01)
    d = np.abs(prop.to_numpy()[:8, 4:6] - u0[:, 4:])
    d = np.minimum(d, 1 - d)
    assert np.all(d <= 0.01 * math.sqrt(6) * math.sqrt(2) + 1e-6) and np.all(d > 0)
    step(3, 1.0, 1, 0.01)                    # an accepted large step: fresh uniform numbers ...
    u2 = S.value.to_numpy()[:8, :6].copy()
    assert np.all(u2[:, :3] != u1[:, :3]) and np.all(S.last_large.to_numpy()[:8] == 2)
    hold(6)                                  # ... and the dims it did not read are resampled too (lazily)
    h = prop.to_numpy()[:8, :6].copy()
    np.testing.assert_array_equal(h[:, :3], u2[:, :3])
    assert np.all(h[:, 3:] != u1[:, 3:])
    hold(6)
    np.testing.assert_array_equal(prop.to_numpy()[:8, :6], h)          # and stay put until changed
    step(10, 0.0, 1, 0.01)                   # dims beyond those stored are stored once accepted
    assert np.all(S.used.to_numpy()[:8] == 10)
    assert np.all(prop.to_numpy()[:8, :10] >= 0)                       # every read was reproducible


def test_bundle_estimator_expectation():
    """E_δ[f(u − δ)] for f(u) = sin²(2πu) and δ ~ N(0, σ²) wrapped: 1/2 − cos(4πu) e^(−8π²σ²) / 2."""
    pss.store(8)
    S = pss.current()
    n = 200000
    out = ti.field(ti.f64, shape=4)

    @ti.kernel
    def k(u0: ti.f32, sigma: ti.f32, n: ti.i32):
        for c in range(4):
            S.used[c] = 1
            S.value[c, 0] = u0
            S.mod[c, 0] = 0
            S.last_large[c] = 0
            acc = 0.0
            for j in range(n):      # member j % 16 of bundle j // 16: fresh offsets each
                smp = pss.PssSampler(chain=c, mode=pss.HOLD, kernel=sigma, key=j // 16, member=j % 16, seed=9)
                x = smp.next_1d()
                acc += ti.sin(2.0 * math.pi * x) ** 2
            out[c] = acc / n

    for u0, sigma in ((0.1, 0.05), (0.37, 0.2), (0.5, 0.01)):
        k(u0, sigma, n)
        want = 0.5 - 0.5 * math.cos(4 * math.pi * u0) * math.exp(-8 * math.pi ** 2 * sigma ** 2)
        got = out.to_numpy()
        assert np.all(np.abs(got - want) < 4 * 0.36 / math.sqrt(n)), (u0, sigma, got, want)
        assert S.value.to_numpy()[0, 0] == np.float32(u0)      # HOLD never mutates the centre


def test_uniform_weight_sums_match_film_weights():
    """The analytic pixel weights of n uniform film samples: equal to a dense quadrature of Mitsuba's
    truncated Gaussian over the film (borders included), and to the film kernel's own weight sums of
    jittered samples within their noise (Gaussian and box filters)."""
    from tirender.core.fixed_point import WEIGHT_SCALE
    for filt in ("gaussian", "box"):
        sc = tirender.load_scene(CBOX, overrides=["sensors.0.film.width=12", "sensors.0.film.height=9",
                                                  f"sensors.0.film.filter.type={filt}"])
        s = sc.sensors[0]
        want = launch.uniform_weight_sums(s, 108)
        if filt == "gaussian":
            q = 64                                             # midpoints of q x q sub-cells per pixel
            def axis(size):
                x = (np.arange(size * q) + 0.5) / q            # sample positions
                d = (np.arange(size) + 0.5)[:, None] - x[None, :]
                a = 1.0 / (2 * s.stddev ** 2)
                w = np.maximum(0.0, np.exp(-d * d * a) - math.exp(-s.radius ** 2 * a)) * (np.abs(d) <= s.radius)
                return w.sum(axis=1) / q
            quad = np.outer(axis(9), axis(12)).reshape(-1)     # n = W·H samples: one per unit area
            np.testing.assert_allclose(want, quad, rtol=1e-4)
        else:
            np.testing.assert_allclose(want, np.ones(108))
        st = sc.bind()
        st.adj_w.fill(0)
        spp = 2048
        launch.film_weights_kernel(st, 0, spp, 0, 3, launch.wide_filter(sc, 0))
        measured = st.adj_w.to_numpy()[:108].astype(np.float64) / WEIGHT_SCALE / spp
        np.testing.assert_allclose(measured, want, rtol=0.03)
        assert abs(measured.sum() / want.sum() - 1) < 3e-3


@pytest.fixture(scope="module")
def converge_scene():
    """The Cornell box with 2M bootstrap paths and its path-traced reference (4096 spp), shared by both chains."""
    sc = cbox(extra=("integrator.type=pssmlt", "integrator.bootstrap=2000000"))
    return sc, tirender.render(sc, spp=4096, seed=7, integrator="path", progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("integrator", ["pssmlt", "coherent_mcmc"])
def test_converges_to_path_tracer(integrator, converge_scene):
    """Same image as the path tracer: every channel's mean within 0.5 %, and the RMSE against a
    path-traced reference falls as the chains run longer. (2M bootstrap paths: the normalisation's
    own error, ~0.4 % with the default 100k for the bundles, stays well inside the tolerance.)"""
    sc, ref = converge_scene
    short = tirender.render(sc, spp=64, seed=1, integrator=integrator, progress=False)
    img = tirender.render(sc, spp=2048, seed=2, integrator=integrator, progress=False)
    rel = img.mean(axis=(0, 1)) / ref.mean(axis=(0, 1)) - 1
    assert np.all(np.abs(rel) < 0.005), rel
    e_short = np.sqrt(np.mean((short - ref) ** 2))
    e_long = np.sqrt(np.mean((img - ref) ** 2))
    assert e_long < 0.6 * e_short, (e_short, e_long)
    st = mcmc.statistics()
    assert 0.05 < st["acceptance"] < 0.95
    if integrator == "coherent_mcmc":
        assert 0.5 < st["lane_utilisation"] <= 1.0


def test_deterministic_and_continues():
    sc = cbox(16)
    a = tirender.render(sc, spp=32, seed=3, integrator="coherent_mcmc", progress=False)
    b = tirender.render(sc, spp=32, seed=3, integrator="coherent_mcmc", progress=False)
    c = tirender.render(sc, spp=32, seed=4, integrator="coherent_mcmc", progress=False)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # progressive: clear=False continues the chains (more samples, the same image in expectation)
    p1 = tirender.render_progressive(sc, spp=32, seed=3, integrator="pssmlt", clear=True)
    p2 = tirender.render_progressive(sc, spp=32, seed=3, integrator="pssmlt", clear=False)
    assert not np.array_equal(p1, p2)
    assert abs(p2.mean() / p1.mean() - 1) < 0.05


@pytest.mark.parametrize("integrator", ["pssmlt", "coherent_mcmc"])
def test_schedules_give_the_same_image(integrator):
    """One thread per chain, or one per path with a bundle in neighbouring threads (the GPU
    schedule, run here on the CPU): the same proposals and decisions (identical statistics) and
    the same splats (the image to float rounding: fast math may contract a weight differently in
    the two kernels)."""
    a = tirender.render(cbox(16, extra=("integrator.type=pssmlt", "integrator.schedule=chain")), spp=16, seed=2,
                        integrator=integrator, progress=False)
    sa = mcmc.statistics()
    b = tirender.render(cbox(16, extra=("integrator.type=pssmlt", "integrator.schedule=threads")), spp=16, seed=2,
                        integrator=integrator, progress=False)
    assert mcmc.statistics() == sa
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7 * a.max())
    assert a.mean() > 0


def test_walk_utilisation():
    sc = cbox(16, hide=False)
    assert mcmc.walk_utilisation(sc, 8, 1) == 1.0
    u = mcmc.walk_utilisation(sc, 16, 8)
    assert 0.3 < u < 1.0


def test_chain_schedule_refused_on_vulkan(monkeypatch):
    from tirender import backend
    sc = cbox(16, extra=("integrator.type=pssmlt", "integrator.schedule=chain"))
    monkeypatch.setitem(backend._state, "arch", "vulkan")
    with pytest.raises(ConfigError, match="schedule 'chain'"):
        mcmc.schedule(sc)
    sc = cbox(16, extra=("integrator.type=pssmlt",))
    assert mcmc.schedule(sc) == "threads"


def test_gradients_refused_and_keys_checked():
    sc = cbox(16, extra=("integrator.type=pssmlt",))
    with pytest.raises(ConfigError, match="pssmlt"):
        tirender.render_grad(sc, np.zeros((16, 16, 3), np.float32), spp=4)
    with pytest.raises(ConfigError, match="bundle"):
        tirender.load_scene(CBOX, overrides=["integrator.type=coherent_mcmc", "integrator.bundle=17"])



def variant_checks(variant, integrators, spp, seeds, gold=False):
    """Child: the coloured box (tests/scenes.py; gold: its side walls gold mirrors, which polarize) in `variant`
    by path and `integrators`, each `seeds` renders of `spp`: per-channel image means, their standard error,
    whether every image is finite, the smallest pixel."""
    import scenes
    tirender.set_variant(variant)
    spec = scenes.cornell_like(w=16, max_depth=4)
    if gold:
        spec["bsdfs"]["gold"] = {"type": "conductor", "material": "Au"}
        for sh in spec["shapes"]:
            if sh["id"] in ("left", "right"):   # paths between them meet two polarizing reflections
                sh["bsdf"] = "gold"
    sc = tirender.load_scene(spec)
    out = {}
    for integ in ("path",) + tuple(integrators):
        imgs = [tirender.render(sc, spp=spp, seed=s, integrator=integ, progress=False) for s in range(seeds)]
        m = np.array([i.reshape(-1, 3).mean(0) for i in imgs])
        out[integ] = {"mean": m.mean(0).tolist(), "se": (m.std(0, ddof=1) / math.sqrt(seeds)).tolist(),
                      "finite": bool(all(np.isfinite(i).all() for i in imgs)),
                      "min": float(min(i.min() for i in imgs))}
    return out


def _agrees_with_path(rep, integrators):
    """Per channel, each MCMC image mean within 4 standard errors (and 1 %) of the path tracer's; all finite."""
    ref = rep["path"]
    assert ref["finite"], ref
    for integ in integrators:
        r = rep[integ]
        assert r["finite"], (integ, r)
        se = np.hypot(r["se"], ref["se"])
        tol = 4 * se + 0.01 * np.array(ref["mean"])
        assert np.all(np.abs(np.subtract(r["mean"], ref["mean"])) <= tol), (integ, r, ref, tol.tolist())


@pytest.mark.slow           # a spectral child compiling the Markov-chain kernels (about 55 s of a cold cache)
@pytest.mark.extended       # a variant more of the default lane's MCMC checks (rgb: both integrators; mono: coherent)
def test_spectral_pssmlt_matches_path(tmp_path):
    """pssmlt in spectral, whose target is the luminance of |RGB| (one wavelength's sRGB has negative
    components): the box's per-channel image means agree with the spectral path tracer's (tolerance about 3-5 %
    of the mean: a normalisation off by a factor 2 fails by far); no NaN or inf."""
    rep = run_child(__file__, ["--variant-child", "spectral", "pssmlt", "256", "8"], tmp_path)
    _agrees_with_path(rep, ("pssmlt",))


@pytest.mark.slow
@pytest.mark.extended       # a child per variant compiling both integrators' chain kernels
@pytest.mark.parametrize("variant", ["spectral", "spectral_polarized"])
def test_mcmc_in_spectral_variants(tmp_path, variant):
    """pssmlt and coherent_mcmc in spectral and spectral_polarized (the film's S0), the box with gold side walls:
    per-channel image means agree with the path tracer's; no NaN or inf."""
    rep = run_child(__file__, ["--variant-child", variant, "pssmlt,coherent_mcmc", "512", "8", "gold"], tmp_path)
    _agrees_with_path(rep, ("pssmlt", "coherent_mcmc"))


if __name__ == "__main__" and "--variant-child" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu")
    v, integs, spp, seeds, *scene = sys.argv[sys.argv.index("--variant-child") + 1:]
    print(json.dumps(variant_checks(v, integs.split(","), int(spp), int(seeds), gold=scene == ["gold"])))
