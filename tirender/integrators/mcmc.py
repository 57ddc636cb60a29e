"""Markov chain Monte Carlo path tracing: primary-sample-space Metropolis (``pssmlt``, Kelemen et al.
2002) and its coherent pseudo-marginal variant (``coherent_mcmc``, Nimier-David et al. 2019 §4.2),
both on the path tracer's walk (integrators/path.py), which reads its random numbers from the
chain's state (core/pss.py) instead of a PCG32 stream.

Target: f(u) = luminance of the film's RGB of the path of primary samples u (u_0, u_1: film
position; in the spectral variants u_2 draws the wavelengths and f is the luminance of |RGB|: one
wavelength's RGB has negative components, and the luminance of their absolute values bounds each
of them, so that a splat RGB / f stays within SPLAT_BOUND; it is rgb's f wherever the RGB is ≥ 0).
``pssmlt`` runs ``chains`` independent chains in parallel (one per thread), each proposing a small
step (a wrapped symmetric offset, std ``sigma`` per dimension) or, with probability ``large_step``, a fresh
uniform state, accepted with min(1, f'/f). ``coherent_mcmc`` replaces the point evaluation by a
bundle of B = ``bundle`` paths at u − δ_i, δ_i ~ N(0, ``kernel``² I) (one Gaussian offset per read):
the pseudo-marginal chain targets π(u) = (G ∗ f)(u) through the unbiased estimate
π̂ = (1/B) Σ_i f(u − δ_i), kept with the state (the paper's CPMMLT). The bundle's paths start from
nearby film positions with nearby random numbers, so they follow similar control flow (the lanes
of a wide walk, or neighbouring GPU threads); on the CPU today they run one after the other in the
chain's thread.

Normalisation: b = E_u[f(u)] from ``bootstrap`` independent paths; chains start from bootstrap
samples drawn ∝ f (little start-up bias). Every iteration splats the proposal's paths with weight
a · b / (B π̂') and the current state's with (1 − a) · b / (B π̂) (expected values, Veach 1997;
the current state's weights are summed and splatted once when it is replaced), so
the film holds Σ w·L over N iterations whose pixel weight is the expected Σ w of N uniform film
samples (launch.uniform_weight_sums): the image converges to the path tracer's.

``spp`` counts path evaluations per pixel, as for ``path``: N = spp · W · H / B iterations, shared
by the chains. Deterministic per seed. No gradients (refused with one line by the registry). Every
variant: the film receives the walk's RGB (variants.to_rgb; spectral_polarized: of S0, as ``path``).
"""
import math
from types import SimpleNamespace

import numpy as np
import taichi as ti

from .. import backend, launch, variants
from ..bsdfs.registry import dispatch
from ..core import film, pss
from ..sensors.registry import aperture_sample, camera_ray, camera_sample
from ..core.math import LUMINANCE, luminance, vec2
from ..errors import ConfigError
from ..progress import Progress
from ..schema import Choice, Integer, Number
from ..variants import spec
from ..walk.state import PRIMAL, camera_state
from . import path

NAMES = ("pssmlt", "coherent_mcmc")
VARIANTS = variants.NAMES   # the path tracer's walk; spectral: the target is the luminance of |RGB| (see ``target``)
KEYS = path.WALK_KEYS + (
    Integer("chains", default=0, lo=0, hi=1 << 22,
            doc="pssmlt / coherent_mcmc: Markov chains run in parallel (0: 32 per CPU thread, 16384 on a GPU; "
                "fewer, longer chains forget their correlated bootstrap starts sooner)"),
    Integer("bootstrap", default=100000, lo=1, hi=1 << 26,
            doc="pssmlt / coherent_mcmc: independent paths that estimate the normalisation and seed the chains"),
    Number("large_step", default=0.3, lo=0.0, hi=1.0,
           doc="pssmlt / coherent_mcmc: probability of a large step (a fresh uniform state)"),
    Number("sigma", default=0.01, lo=0.0, hi=1.0, strict_lo=True,
           doc="pssmlt / coherent_mcmc: std of a small step per primary-sample dimension"),
    Integer("bundle", default=4, lo=1, hi=pss.BUNDLE_MAX,
            doc="coherent_mcmc: paths per chain state (B, the lanes of a bundle)"),
    Number("kernel", default=0.01, lo=0.0, hi=0.5,
           doc="coherent_mcmc: std σ_G of the Gaussian offsets of a bundle's paths in primary sample space"),
    Choice("schedule", ("auto", "chain", "threads"), default="auto",
           doc="pssmlt / coherent_mcmc: `chain`: one thread per chain runs its bundle's paths in turn; `threads`: "
               "one thread per path, a bundle's paths in neighbouring threads (GPU warps), two launches per "
               "iteration; `auto`: chain on the CPU, threads on GPUs and Vulkan. Same image either way"))

SPLAT_BOUND = 1.0 / LUMINANCE[2] + 1e-3   # |w L_i / (B π̂)| <= 1 / Y_b per iteration (one channel over f)
LAUNCH_PATHS = 1 << 20              # path evaluations per kernel launch (progress bar granularity)


@ti.func
def target(rgb):
    """f of a path's film RGB: its luminance; in the spectral variants that of |RGB| (components may be
    negative there), which is >= Y_i |RGB_i| for every i (LUMINANCE), so |RGB_i| / f <= 1 / Y_b as in rgb."""
    res = 0.0
    if ti.static(variants.spectral()):
        res = luminance(ti.abs(rgb))
    else:
        res = luminance(rgb)
    return res


@ti.func
def evaluate(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam, smp: ti.template(), max_depth,
             rr_depth, hide_emitters):
    """One path from primary samples: (its film RGB, film position, vertices walked n); a thin lens draws
    its aperture sample next and the spectral variants the wavelengths, as the path tracer does."""
    smp.dim = 0
    u = smp.next_2d()
    pos = vec2(u[0] * st.cam_w[cam], u[1] * st.cam_h[cam])
    ap = aperture_sample(st, cam, smp)
    lam, lw = variants.sample_wavelengths(smp)
    o, d, tmax = camera_ray(st, cam, pos, ap)
    s = camera_state(o, d, tmax, spec(0.0), 0, lam)
    path.walk(st, bsdf, em, PRIMAL, s, smp, max_depth, rr_depth, hide_emitters, spec(0.0))
    return variants.to_rgb(film.nan_to_zero(s.L), lam, lw), pos, s.depth + 1


@ti.func
def _splat_bundle(st: ti.template(), cam, S: ti.template(), c, slot, bundle: ti.template(), weight, bound):
    """Splat the bundle of chain c at ``slot`` with its RGB times ``weight`` (clamped to ±bound: the
    spectral variants' components may be negative)."""
    for b in range(bundle):
        i = slot * pss.BUNDLE_MAX + b
        film.splat_radiance(st, cam, S.pos[c, i], ti.max(ti.min(S.L[c, i] * weight, bound), -bound))


@ti.func
def _member(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam, S: ti.template(), c, b, seed,
            large_step, sigma, kernel, max_depth, rr_depth, hide):
    """Path b of chain c's proposal (read-only on the chain's state) into the proposal's slot."""
    smp = pss.proposal(c, S.proposal[c] + 1, seed, large_step, sigma, kernel, b)
    L, pos, k = evaluate(st, bsdf, em, cam, smp, max_depth, rr_depth, hide)
    i = (1 - S.slot[c]) * pss.BUNDLE_MAX + b
    S.pos[c, i] = pos
    S.L[c, i] = L
    S.new_dims[c, b] = smp.dim
    S.new_n[c, b] = k


@ti.func
def _decide(st: ti.template(), cam, S: ti.template(), c, bundle: ti.template(), seed, large_step, sigma, kernel, norm,
            bound):
    """The Metropolis–Hastings step of chain c on the proposal's bundle: the current state's
    weight (1 − a) added to S.w_cur, accept (commit; S.f_cur := π̂'; the slots flip) or not; then
    the splats: the replaced state with its summed weight, the proposal with weight a. Every store
    precedes the film's atomics (on Vulkan/lavapipe, stores that followed them were lost)."""
    key = S.proposal[c] + 1
    S.proposal[c] = key
    f_cur = S.f_cur[c]
    cur = S.slot[c]
    nxt = 1 - cur
    fh = 0.0
    dims = 0
    longest = 0
    for b in range(bundle):
        fh += target(S.L[c, nxt * pss.BUNDLE_MAX + b])
        dims = ti.max(dims, S.new_dims[c, b])
        longest = ti.max(longest, S.new_n[c, b])
        S.lanes_busy[c] += S.new_n[c, b]
    S.lanes_total[c] += longest * bundle
    f_new = fh / bundle
    smp = pss.proposal(c, key, seed, large_step, sigma, kernel, 0)
    if smp.large:
        S.large_f[c] += f_new
        S.large_n[c] += 1
    a = pss.acceptance(f_cur, f_new)
    w = S.w_cur[c] + (1.0 - a)
    w_old = 0.0
    if pss.accept_draw(c, key, seed) < a:
        w_old = w
        w = 0.0
        pss.commit(smp, dims)
        S.f_cur[c] = f_new
        S.accepted[c] += 1
        S.slot[c] = nxt
    S.w_cur[c] = w
    if w_old > 0.0 and f_cur > 0.0:
        _splat_bundle(st, cam, S, c, cur, bundle, w_old * norm / f_cur, bound)
    if a > 0.0:
        _splat_bundle(st, cam, S, c, nxt, bundle, a * norm / f_new, bound)


@ti.func
def _flush_chain(st: ti.template(), cam, S: ti.template(), c, bundle: ti.template(), norm, bound):
    """Splat chain c's current bundle with its summed weight (end of a launch)."""
    w = S.w_cur[c]
    S.w_cur[c] = 0.0
    f_cur = S.f_cur[c]
    if w > 0.0 and f_cur > 0.0:
        _splat_bundle(st, cam, S, c, S.slot[c], bundle, w * norm / f_cur, bound)


def _kernels(cache={}):
    """The chain kernels, built once per chain-store generation (they read its fields)."""
    key = pss.generation()
    if key not in cache:
        cache.clear()
        S = pss.current()

        @ti.kernel
        def start(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, n: ti.i32, seed: ti.u32,
                  phase: ti.i32, first: ti.types.ndarray(), f: ti.types.ndarray(), max_depth: ti.i32,
                  rr_depth: ti.i32, hide: ti.i32, bundle: ti.template(), kernel: ti.f32):
            """phase BOOTSTRAP: f[i] = f(u_i) of n independent uniform states (bootstrap sample i: key i).
            phase INIT: chain c starts at bootstrap state first[c] (its numbers replayed and stored), with the
            estimate π̂ of a fresh bundle around it. One kernel and one path evaluation in it (the path
            sampler is the bulk of the compile): thread i walks 1 path, or 1 + bundle for a chain."""
            for i in range(n):
                m = 1
                if phase == pss.INIT:
                    m = bundle + 1
                    S.used[i] = 0
                    S.iteration[i] = 0
                    S.proposal[i] = 0
                    S.last_large[i] = 0
                fh = 0.0
                for j in range(m):
                    chain, mode, key, member, kern = -1, pss.BOOTSTRAP, i, 0, 0.0
                    if phase == pss.INIT:
                        chain = i
                        if j == 0:
                            mode, key = pss.INIT, first[i]
                        else:
                            mode, key, member, kern = pss.HOLD, 0, j - 1, kernel
                    smp = pss.PssSampler(chain=chain, dim=0, mode=mode, key=key, member=member, kernel=kern,
                                         seed=seed)
                    L, pos, k = evaluate(st, bsdf, em, cam, smp, max_depth, rr_depth, hide)
                    if phase != pss.INIT:
                        f[i] = target(L)
                    elif j > 0:
                        S.pos[i, j - 1] = pos
                        S.L[i, j - 1] = L
                        fh += target(L)
                if phase == pss.INIT:
                    S.slot[i] = 0
                    S.f_cur[i] = fh / bundle
                    S.w_cur[i] = 0.0
                    S.accepted[i] = 0
                    S.large_f[i] = 0.0
                    S.large_n[i] = 0
                    S.lanes_busy[i] = 0
                    S.lanes_total[i] = 0

        @ti.kernel
        def chains(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, n: ti.i32, iters: ti.i32,
                   seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide: ti.i32, bundle: ti.template(),
                   kernel: ti.f32, sigma: ti.f32, large_step: ti.f32, norm: ti.f32, bound: ti.f32, spread: ti.i32):
            """Schedule `chain`: iters Metropolis–Hastings iterations of chains 0..n-1, one thread per
            chain evaluating its bundle's paths in turn; the current states' weights flushed at the end."""
            for i in range(n * spread):      # backend.spread: a few long chains still use every thread
                if i % spread != 0:
                    continue
                c = i // spread
                for _ in range(iters):
                    for b in range(bundle):
                        _member(st, bsdf, em, cam, S, c, b, seed, large_step, sigma, kernel, max_depth, rr_depth,
                                hide)
                    _decide(st, cam, S, c, bundle, seed, large_step, sigma, kernel, norm, bound)
                _flush_chain(st, cam, S, c, bundle, norm, bound)

        @ti.kernel
        def members(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, n: ti.i32, seed: ti.u32,
                    max_depth: ti.i32, rr_depth: ti.i32, hide: ti.i32, bundle: ti.template(), kernel: ti.f32,
                    sigma: ti.f32, large_step: ti.f32, spread: ti.i32):
            """Schedule `threads`, part 1: one thread per path of every chain's proposal; a bundle's
            paths are neighbouring threads (a GPU warp runs them together)."""
            for i in range(n * bundle * spread):
                if i % spread == 0:
                    j = i // spread
                    _member(st, bsdf, em, cam, S, j // bundle, j % bundle, seed, large_step, sigma, kernel, max_depth,
                            rr_depth, hide)

        @ti.kernel
        def decide(st: ti.template(), cam: ti.i32, n: ti.i32, seed: ti.u32, bundle: ti.template(), kernel: ti.f32,
                   sigma: ti.f32, large_step: ti.f32, norm: ti.f32, bound: ti.f32, last: ti.i32):
            """Schedule `threads`, part 2: every chain's Metropolis–Hastings step (flushing the current
            states' weights after the last iteration of a launch, as `chains` does)."""
            for c in range(n):
                _decide(st, cam, S, c, bundle, seed, large_step, sigma, kernel, norm, bound)
                if last:
                    _flush_chain(st, cam, S, c, bundle, norm, bound)

        cache[key] = SimpleNamespace(start=start, chains=chains, members=members, decide=decide)
    return cache[key]


def settings(scene, integrator=None):
    """The chain settings of the scene's integrator section (defaults where it names another type)."""
    t = integrator or scene.integrator["type"]
    it = scene.integrator
    get = {k.name: it.get(k.name, k.default) for k in KEYS}
    bundle = int(get["bundle"]) if t == "coherent_mcmc" else 1
    kernel = float(get["kernel"]) if t == "coherent_mcmc" else 0.0
    chains = int(get["chains"]) or (32 * backend.cpu_threads() if backend.current_arch() == "cpu" else 16384)
    return SimpleNamespace(chains=chains, bootstrap=int(get["bootstrap"]),
                           large_step=float(get["large_step"]), sigma=float(get["sigma"]), bundle=bundle, kernel=kernel)


def schedule(scene):
    """`chain` or `threads` (see the `schedule` key)."""
    v = scene.integrator.get("schedule", "auto")
    if v == "auto":
        v = "chain" if backend.current_arch() == "cpu" else "threads"
    elif v == "chain" and backend.current_arch() == "vulkan":
        # measured on lavapipe: the same decisions as the CPU, but an image 0.75 % off — a long loop
        # of film atomics per thread is not exact there; `threads` matches the CPU to 1e-7
        raise ConfigError("schedule 'chain' is not supported on the Vulkan backend (use 'auto' or 'threads')",
                          key="integrator.schedule")
    return v


_run = {}   # the chains of the last render: continued by a progressive render (clear=False)


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True):
    """Add spp path evaluations per pixel to the film of `sensor` by MCMC (cleared first unless
    clear=False, which continues the chains of the previous call) and return the image."""
    a = path.args(scene, "path")
    c = settings(scene, integrator)
    st = launch.begin_film(scene, sensor, clear)
    bsdf = dispatch(scene.bsdf_levels)
    s = scene.sensors[sensor]
    npix = s.width * s.height
    seed = int(seed) & 0xFFFFFFFF
    iterations = max(1, round(spp * npix / c.bundle))
    chains = min(c.chains, iterations)
    iters = max(1, round(iterations / chains))
    pss.store(chains)
    k = _kernels()
    key = (id(scene), sensor, seed, chains, c.bundle, c.kernel, c.sigma, c.large_step, a.max_depth, a.rr_depth,
           a.hide, pss.generation())
    args = (st, bsdf, scene.em_mask, sensor)
    depth = (a.max_depth, a.rr_depth, a.hide)
    if clear or _run.get("key") != key:
        _run.clear()
        f = np.zeros(c.bootstrap, np.float32)
        k.start(*args, c.bootstrap, seed, pss.BOOTSTRAP, np.zeros(1, np.int32), f, *depth, c.bundle, c.kernel)
        fsum = float(np.sum(f, dtype=np.float64))
        if not fsum > 0.0 or not math.isfinite(fsum):
            if not math.isfinite(fsum):
                raise ConfigError("the scene's radiance is not finite (bootstrap)", key="integrator")
            return launch.resolve_film(st, s)          # a black image: nothing to explore
        cdf = np.cumsum(f, dtype=np.float64)
        u = (np.arange(chains) + np.random.default_rng(seed).random(chains)) / chains   # stratified
        first = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), c.bootstrap - 1).astype(np.int32)
        k.start(*args, chains, seed, pss.INIT, first, np.zeros(1, np.float32), *depth, c.bundle, c.kernel)
        _run.update(key=key, fsum=fsum, fn=c.bootstrap, chains=chains, iterations=0)
    per_launch = max(1, LAUNCH_PATHS // (chains * c.bundle))
    footprint = (2 * math.ceil(s.radius) + 1) ** 2
    threads = schedule(scene) == "threads"
    with Progress(iters, integrator or scene.integrator["type"], unit="it") if progress else launch.NoBar() as bar:
        done = 0
        while done < iters:
            m = min(per_launch, iters - done)
            bound = SPLAT_BOUND * (m + 1)    # a current state's summed weight: at most m iterations

            def run(m=m, bound=bound):
                if threads:
                    sp = backend.spread(chains * c.bundle)
                    for j in range(m):
                        k.members(*args, chains, seed, *depth, c.bundle, c.kernel, c.sigma, c.large_step, sp)
                        k.decide(st, sensor, chains, seed, c.bundle, c.kernel, c.sigma, c.large_step,
                                 1.0 / c.bundle, bound, int(j == m - 1))
                else:
                    k.chains(*args, chains, m, seed, *depth, c.bundle, c.kernel, c.sigma, c.large_step,
                             1.0 / c.bundle, bound, backend.spread(chains))
            launch.splat_pass(scene, st, bound, 2 * chains * m * c.bundle * footprint, run)
            launch.add_uniform_weights(st, s, chains * m)
            done += m
            _run["iterations"] += chains * m
            bar.update(m)
    return launch.resolve_film(st, s) * np.float32(normalisation())


def normalisation():
    """b = E_u[f(u)]: the mean f of the bootstrap paths and of every large-step proposal so far
    (uniform states; Kelemen et al. 2002 §4) — the scale of the film of the current chains."""
    S = pss.current()
    n = _run["chains"]
    fsum = _run["fsum"] + float(S.large_f.to_numpy()[:n].sum(dtype=np.float64))
    count = _run["fn"] + int(S.large_n.to_numpy()[:n].sum())
    return fsum / count


def statistics():
    """Of the chains' iterations since they started: acceptance rate, and lane utilisation
    Σ_b n_b / (B · max_b n_b) (n_b: vertices walked by path b of a bundle; 1 for bundles of one)."""
    S = pss.current()
    if S is None or "chains" not in _run:
        return {}
    n = _run["chains"]
    acc = int(S.accepted.to_numpy()[:n].sum())
    busy = int(S.lanes_busy.to_numpy()[:n].sum())
    total = int(S.lanes_total.to_numpy()[:n].sum())
    its = _run["iterations"]
    return {"iterations": its, "acceptance": acc / its if its else float("nan"),
            "lane_utilisation": busy / total if total else float("nan")}


@ti.kernel
def _walk_lengths(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32, width: ti.i32,
                  seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide: ti.i32, out: ti.types.ndarray()):
    """out[pix] = (Σ n, Σ_groups width · max n) over groups of `width` consecutive samples of a pixel."""
    for pix in range(st.cam_w[cam] * st.cam_h[cam]):
        busy = 0
        total = 0
        for g in range(spp // width):
            longest = 0
            for j in range(width):
                sampler, pos, ap = camera_sample(st, cam, pix, seed, g * width + j)
                lam, lw = variants.sample_wavelengths(sampler)
                o, d, tmax = camera_ray(st, cam, pos, ap)
                s = camera_state(o, d, tmax, spec(0.0), 0, lam)
                path.walk(st, bsdf, em, PRIMAL, s, sampler, max_depth, rr_depth, hide, spec(0.0))
                busy += s.depth + 1
                longest = ti.max(longest, s.depth + 1)
            total += longest * width
        out[pix, 0] = busy
        out[pix, 1] = total


def walk_utilisation(scene, spp, width, seed=0, sensor=0):
    """Lane utilisation of the plain path tracer if it ran `width` samples of a pixel as the lanes
    of a wide walk in lock step (no refill): Σ n / (width · max n) per group, n the vertices walked
    by a path — the figure ``statistics()`` reports for coherent bundles."""
    a = path.args(scene, "path")
    st = scene.bind()
    s = scene.sensors[sensor]
    out = np.zeros((s.width * s.height, 2), np.int64)
    _walk_lengths(st, dispatch(scene.bsdf_levels), scene.em_mask, sensor, max(spp, width), width,
                  int(seed) & 0xFFFFFFFF, a.max_depth, a.rr_depth, a.hide, out)
    return float(out[:, 0].sum()) / max(float(out[:, 1].sum()), 1.0)
