"""The host layer: everything between the public API and the integrators' kernels.

Argument checks, batching of samples into kernel launches (with the progress bar), the film
resolve, the adjoint-image preparation and the gradient accumulator of the three-pass PRB scheme
(Vicini et al. 2021 §5), and the gradient readout. Integrator drivers call these; nothing here
knows an integrator.

Adjoint image: ∂y_p/∂L_s = w_ps / W_p (W_p = Σ_s w_ps, the adjoint pass's own filter-weight sums,
treated as constant), so a sample's adjoint radiance is δL_s = Σ_p w_ps δy_p / W_p;
``prepare_adjoint`` computes W_p with the adjoint seed and stores δy_p / W_p in ``st.adj``.
Film and gradients accumulate per launch in 64-bit fixed point (``st.film``, ``st.grad_fx``) at a
scale chosen from the launch's own largest value (core/fixed_point.py: redone with the canonical
scale when the guess was off, so nothing can wrap and a seed still fixes every bit); each launch is
then folded into float64 on the host (``st.host_film``, ``st.host_grad``). The adjoint image is
normalised by a power of two 2^e ≥ max|δy| before the kernels see it (any finite δy, up to the
float range) and the gradients are multiplied back by 2^e in float64.
"""
import math

import numpy as np
import taichi as ti

from .core import film, pool
from .core.film import LOCAL_HALF
from .sensors.registry import pixel_sample
from .core.fixed_point import (F32_MAX, INFO_FILM_SCALE, INFO_GRAD_SCALE, N_SLOTS, WEIGHT_SCALE, scale_for,
                                slots_max)
from .core.math import vec3
from .errors import ConfigError, TirenderError
from .progress import Progress
from .scene.storage import padded

DEFAULT_SPP = 64
FLUSH_ADDS = 32                # film adds into one pixel per sample per pixel, pixel-local accumulation (5x5 <= 32)
GRAD_ADDS_PER_SAMPLE = 1024    # assumed bound on the adds of one sample into one gradient entry
STATS = {"launches": 0, "redone": 0}   # kernel launches, and those redone with the canonical scale
FOLD_IN_KERNEL = ("cpu",)      # backends whose launches fold into the float64 film in a kernel, in place (_fold_kernel;
                               # elsewhere the film is read out as int64 and folded by numpy: a GPU would copy the
                               # float64 film both ways, and Vulkan devices may lack float64)


def check_args(scene, spp, sensor):
    """Validated (spp, sensor) as ints: spp >= 1, 0 <= sensor < number of sensors."""
    if isinstance(spp, bool) or not isinstance(spp, (int, np.integer)) or spp < 1:
        raise ConfigError(f"spp must be an integer >= 1, got {spp!r}", key="spp")
    if isinstance(sensor, bool) or not isinstance(sensor, (int, np.integer)) or not 0 <= sensor < len(scene.sensors):
        raise ConfigError(f"sensor must be an index in [0, {len(scene.sensors)}), got {sensor!r}", key="sensor")
    return int(spp), int(sensor)


def batches(spp, npix):
    """Split spp into kernel launches of roughly 2M samples each (for the progress bar)."""
    per = max(1, min(spp, (1 << 21) // max(npix, 1)))
    out, done = [], 0
    while done < spp:
        k = min(per, spp - done)
        out.append((done, k))
        done += k
    return out


class NoBar:
    """A progress bar that shows nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *a):
        pass

    def update(self, *a, **k):
        pass


def sweep(scene, sensor, spp, label, progress, launch, film=None, grad=False, film_adds=None):
    """Call launch(sample_offset, count) over batches covering spp samples per pixel, each launch a
    transaction of the accumulators it writes: film = "flush" (pixel-local accumulation) or
    "splat" (film.splat per sample) or None; grad: it adds gradients (core/pool.py). film_adds(k):
    the most values a launch of k samples per pixel adds into one film pixel, where a splat
    estimator's samples do not stay near their pixel (light tracing; default: a filter footprint
    per sample)."""
    s = scene.sensors[sensor]
    st = scene.bind()
    npix = s.width * s.height
    with Progress(spp, label, unit="spp") if progress else NoBar() as bar:
        for off, k in batches(spp, npix):
            _transaction(scene, st, npix, k, lambda: launch(off, k), film, grad, s.radius,
                         None if film_adds is None else film_adds(k), spp)
            bar.update(k)


def _guess(st, name, default):
    v = getattr(st, name, None)
    return v if v else default


def _transaction(scene, st, npix, k, run, film, grad, radius, adds=None, spp=1):
    """One launch of k samples per pixel (of spp in the pass) with fixed-point scales from a guess,
    redone with the canonical scales of the values it actually added when they differ
    (core/fixed_point.py); then folded into float64.

    The recorded maxima are per add (one sample's |L| before the filter weight, one gradient add)
    and the launch's size enters the scale only through its add counts (core/fixed_point.scale_for),
    so the guess — the previous launch's maxima — holds across launches of other sizes. Gradient
    adds scale as 1/spp (the adjoint image is divided by the pass's filter-weight sums W_p ∝ spp),
    so their magnitude is bucketed as max·spp."""
    from . import backend
    soft = backend.software_vulkan()
    footprint = (2 * math.ceil(radius) + 1) ** 2   # pixels one splat touches
    if film == "flush" and radius > LOCAL_HALF:
        film = "splat"                              # wide filters splat directly (core/film.py)
    fa = FLUSH_ADDS * k if film == "flush" else footprint * k if adds is None else adds
    ga = GRAD_ADDS_PER_SAMPLE * npix * k
    gname = f"film_guess_{film}"
    sf = scale_for(_guess(st, gname, 1.0), fa)
    sg = scale_for(_guess(st, "grad_guess", 1.0) / spp, ga, spp)   # the guess is stored as max·spp
    mf = mg = 0.0
    maxes = np.zeros(2 * N_SLOTS, np.int32)
    fold_here = film and backend.current_arch() in FOLD_IN_KERNEL
    rows = npix if film and not fold_here else 0    # the int64 readout, only where numpy folds (a 4K film: 265 MB)
    fx = getattr(st, "film_readout", None)          # reused: (rows, 4) int64
    if fx is None or fx.shape[0] != max(rows, 1):
        fx = st.film_readout = np.zeros((max(rows, 1), 4), np.int64)
    for _attempt in range(3):
        if grad:
            st.grad_fx.fill(0)
            if soft:
                st.grad.fill(0)
        _begin_kernel(st, npix if film else 0, sf, sg)
        run()
        STATS["launches" if _attempt == 0 else "redone"] += 1
        _end_kernel(st, rows, maxes, fx)
        mf, mg = slots_max(maxes[:N_SLOTS]), slots_max(maxes[N_SLOTS:])
        if not (math.isfinite(mf) and math.isfinite(mg)):
            raise TirenderError("a pixel's radiance or a gradient exceeds the float32 range "
                                f"(largest value {max(mf, mg):g}); scale the emitters or the loss down")
        want_f = scale_for(mf, fa) if (film and mf > 0) else sf
        want_g = scale_for(mg, ga, spp) if (grad and mg > 0 and not soft) else sg
        if want_f == sf and want_g == sg:
            break
        sf, sg = want_f, want_g
    if mf > 0:
        setattr(st, gname, mf)
    if mg > 0:
        st.grad_guess = mg * spp       # exact (an f32 times a small integer in f64)
    if fold_here:
        _fold_kernel(st, npix, st.host_film, 1.0 / sf)
    elif film:
        st.host_film += fx * np.array([1.0 / sf, 1.0 / sf, 1.0 / sf, 1.0 / WEIGHT_SCALE])
    if grad:
        fold_gradients(scene, st)


@ti.kernel
def _begin_kernel(st: ti.template(), npix: ti.i32, sf: ti.f32, sg: ti.f32):
    """A launch's start in one kernel: the film's first npix pixels and the max slots zeroed, the scales set."""
    st.info_f[INFO_FILM_SCALE] = sf
    st.info_f[INFO_GRAD_SCALE] = sg
    for i in range(2 * N_SLOTS):
        st.acc_max[i] = 0
    for p in range(npix):
        st.film[p] = ti.Vector([0, 0, 0, 0], ti.i64)


@ti.kernel
def _end_kernel(st: ti.template(), npix: ti.i32, maxes: ti.types.ndarray(), fx: ti.types.ndarray()):
    """A launch's results in one kernel: the max slots into maxes (int32), the film's first npix pixels
    into fx (int64 (npix, 4))."""
    for i in range(2 * N_SLOTS):
        maxes[i] = st.acc_max[i]
    for p in range(npix):
        for c in ti.static(range(4)):
            fx[p, c] = st.film[p][c]


@ti.kernel
def _fold_kernel(st: ti.template(), npix: ti.i32, host: ti.types.ndarray(dtype=ti.f64, ndim=2), inv_sf: ti.f64):
    """The CPU's fold of a launch into the float64 film in place: host[p] += (Σ w L / sf, Σ w / WEIGHT_SCALE)
    for the first npix pixels (host: (npix, 4) float64, the numpy array itself): the same values as numpy's
    fx * (1/sf, ..., 1/WEIGHT_SCALE) added, without the int64 readout."""
    for p in range(npix):
        v = st.film[p]
        for c in ti.static(range(3)):
            host[p, c] += ti.cast(v[c], ti.f64) * inv_sf
        host[p, 3] += ti.cast(v[3], ti.f64) * (1.0 / WEIGHT_SCALE)


def splat_pass(scene, st, bound, adds, run):
    """One launch run() of an estimator that splats with film.splat_radiance values |w L| ≤ bound,
    at most `adds` of them into one pixel: a fixed-point scale fixed by the bound (the launch is not
    repeatable, e.g. it advances Markov chains, so it is never redone), folded into float64."""
    st.film.fill(0)
    sf = scale_for(bound, adds)
    st.info_f[INFO_FILM_SCALE] = sf
    run()
    STATS["launches"] += 1
    npix = st.host_film.shape[0]
    st.host_film[:, :3] += st.film.to_numpy()[:npix, :3].astype(np.float64) * (1.0 / sf)


def uniform_weight_sums(s, n):
    """The expected filter-weight sum Σ w per pixel of n samples uniform over the film of sensor
    description s: (H·W,) float64. Gaussian: the separable integral of Mitsuba's truncated Gaussian
    w(d) = exp(-d²/2σ²) - exp(-r²/2σ²) over the film (closed form with erf); tent: of
    w(d) = 1 - |d|/r (antiderivative d - d|d|/2r); box: 1 per pixel."""
    def axis(size):
        c = np.arange(size) + 0.5
        if s.filter == "box":
            return np.ones(size)
        sd, r = s.stddev, s.radius
        lo = np.maximum(-r, -c)
        hi = np.minimum(r, size - c)
        if s.filter == "tent":
            return (hi - hi * np.abs(hi) / (2 * r)) - (lo - lo * np.abs(lo) / (2 * r))
        k = sd * math.sqrt(2.0)
        erf = np.vectorize(math.erf)
        g = sd * math.sqrt(math.pi / 2.0) * (erf(hi / k) - erf(lo / k)) - math.exp(-r * r / (2 * sd * sd)) * (hi - lo)
        return np.maximum(g, 0.0)
    w = np.outer(axis(s.height), axis(s.width)).reshape(-1)
    return w * (float(n) / (s.width * s.height))


def add_uniform_weights(st, s, n):
    """Add the pixel weights of n uniform film samples (``uniform_weight_sums``) to the host film."""
    st.host_film[:, 3] += uniform_weight_sums(s, n)


def begin_film(scene, sensor, clear):
    """Start (clear) or continue the float64 film of `sensor` (progressive rendering); returns st."""
    st = scene.bind()
    s = scene.sensors[sensor]
    npix = s.width * s.height
    h = getattr(st, "host_film", None)
    if clear or h is None or h.shape[0] != npix:
        st.host_film = np.zeros((npix, 4), np.float64)
    return st


def resolve_film(st, s):
    """Film (Σ w L, Σ w) of sensor description s -> float32 (H, W, 3), row 0 at the top."""
    acc = st.host_film
    w = acc[:, 3]
    img = np.empty((acc.shape[0], 3), np.float32)
    with np.errstate(over="ignore"):    # pixels without weight: Σ w L / ∞ = 0; in float64, rounded once
        np.divide(acc[:, :3], np.where(w > 0, w, np.inf)[:, None], out=img, casting="unsafe")
    if not np.isfinite(img).all():
        raise TirenderError("the image exceeds the float32 range; scale the emitters down")
    return img.reshape(s.height, s.width, 3)


# ------------------------------------------------------------------ adjoint image and gradients
def wide_filter(scene, sensor):
    """Whether the sensor's filter is wider than the film's pixel-local block (core/film.py)."""
    return scene.sensors[sensor].radius > LOCAL_HALF


@ti.kernel
def film_weights_kernel(st: ti.template(), cam: ti.i32, spp: ti.i32, sample_offset: ti.i32, seed: ti.u32,
                        wide: ti.template()):
    """W_p: filter-weight sums of the adjoint pass's samples (same positions as the gradient kernels)."""
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        acc = film.local_zero(st, cam, pix % w, pix // w)
        for s in range(spp):
            _, pos = pixel_sample(st, cam, pix, seed, sample_offset + s)
            film.local_splat(st, cam, pix % w, pix // w, pos, vec3(0.0), acc, True, wide)
        film.local_flush(st, cam, acc, True)


@ti.kernel
def normalize_adjoint_kernel(st: ti.template(), n: ti.i32):
    for p in range(n):
        wp = ti.cast(st.adj_w[p], float) * (1.0 / WEIGHT_SCALE)
        st.adj[p] = st.adj[p] / wp if wp > 0.0 else vec3(0.0)


def prepare_adjoint(scene, st, adjoint_image, sensor, spp, seed, weights=None):
    """Upload δy · 2^-e (2^e ≥ max|δy|, so any finite δy fits), compute W_p with the adjoint seed
    (or take weights(sensor description, spp): (H·W,) for estimators whose pixel weights are known,
    e.g. the light tracer's uniform ones), store δy 2^-e / W_p in st.adj; st.adj_exp = e."""
    s = scene.sensors[sensor]
    a = np.asarray(adjoint_image, np.float64)
    if a.shape != (s.height, s.width, 3):
        raise ConfigError(f"adjoint image has shape {a.shape}, expected {(s.height, s.width, 3)}",
                          key="adjoint_image")
    if not np.all(np.isfinite(a)):
        raise ConfigError("adjoint image contains NaN or Inf", key="adjoint_image")
    amax = float(np.abs(a).max(initial=0.0))
    e = math.frexp(amax)[1] if amax > 0 else 0
    st.adj_exp = e
    st.adj.from_numpy(padded(np.ldexp(a, -e).astype(np.float32).reshape(-1, 3), st.caps["pixels"]))
    if weights is None:
        st.adj_w.fill(0)
        film_weights_kernel(st, sensor, spp, 0, seed, wide_filter(scene, sensor))
    else:
        w = np.rint(np.asarray(weights(s, spp), np.float64) * WEIGHT_SCALE).astype(np.int64)   # fixed point, as the kernel's
        st.adj_w.from_numpy(padded(w, st.caps["pixels"], np.int64))
    normalize_adjoint_kernel(st, s.width * s.height)


def _host_grad(scene, st):
    n = scene.params.data.size
    h = getattr(st, "host_grad", None)
    if h is None or h.shape[0] != n:
        st.host_grad = h = np.zeros(n, np.float64)
    return h


def reset_gradients(st, scale):
    """Empty the gradient accumulators (device and host) and set the fixed-point scale (for kernels
    that add gradients outside ``sweep``, e.g. tests of a model's adjoint)."""
    st.grad_fx.fill(0)
    st.grad.fill(0)
    st.info_f[INFO_GRAD_SCALE] = scale
    st.adj_exp = 0
    st.host_grad = None
    st.grad_is_total = False


def fold_gradients(scene, st):
    """Fold what the kernels added since the last fold (st.grad_fx at the current scale; on software
    Vulkan the float twin st.grad) into the float64 host accumulator, times 2^adj_exp."""
    from . import backend
    h = _host_grad(scene, st)
    n = h.shape[0]
    f = math.ldexp(1.0, getattr(st, "adj_exp", 0))
    q = np.zeros(n, np.int64)
    if n:
        pool.fold_copies(st, q, n)   # the sum of the accumulator's copies (core/pool.py)
    if q.any():
        h += q.astype(np.float64) * (f / float(st.info_f[INFO_GRAD_SCALE]))
        st.grad_fx.fill(0)
    if backend.software_vulkan() and not getattr(st, "grad_is_total", False):
        h += st.grad.to_numpy()[:n].astype(np.float64) * f
        st.grad.fill(0)


def begin_gradient(st, scene, accumulate):
    """Start a gradient evaluation: empty the host accumulator unless accumulating (multi-view)."""
    st.grad_fx.fill(0)
    st.grad_is_total = False
    if not accumulate:
        st.host_grad = None
    _host_grad(scene, st)


def read_gradients(scene, st):
    """The accumulated gradients as a dict parameter name -> float64 array shaped like the parameter.
    st.grad holds them afterwards as float32 (clamped to the float range), for the optimiser."""
    fold_gradients(scene, st)
    h = _host_grad(scene, st)
    if scene.deformables:
        scene.deform_gradients(h)       # world vertices -> mesh parameters (scene/deform.py)
    _publish_total(st, h)
    return scene.params.split(h.copy())


def _publish_total(st, h):
    """The float64 total h becomes st.grad (float32, clamped to the float range) for the optimiser."""
    st.grad.from_numpy(padded(np.clip(h, -F32_MAX, F32_MAX).astype(np.float32), st.caps["pool"]))
    st.grad_is_total = True


def write_gradients(scene, st, grads):
    """Make ``grads`` (name -> array shaped like the parameter; other parameters 0) the scene's
    accumulated gradients, as read_gradients leaves them: float64 on the host, float32 in st.grad."""
    h = np.zeros(scene.params.data.size, np.float64)
    for name, g in grads.items():
        i = scene.params.info(name)
        h[i.offset:i.offset + i.size] = np.asarray(g, np.float64).ravel()
    st.grad_fx.fill(0)
    st.host_grad = h
    _publish_total(st, h)


def gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, label, launch, film=None,
                  weights=None):
    """The adjoint passes of the three-pass scheme: δy / W_p into st.adj, launch(st, sensor, seed,
    sample_offset, count) over the batches (film: also renders, see ``sweep``), read the gradients."""
    spp, sensor = check_args(scene, spp, sensor)
    st = scene.bind()
    seed = int(seed) & 0xFFFFFFFF
    prepare_adjoint(scene, st, adjoint_image, sensor, spp, seed, weights)
    begin_gradient(st, scene, accumulate)
    sweep(scene, sensor, spp, label, progress, lambda off, k: launch(st, sensor, seed, off, k), film=film,
          grad=True)
    return read_gradients(scene, st)


# ------------------------------------------------------------------ forward mode (tangents)
def tangent_vector(scene, directions):
    """The direction v of forward mode in the pool's layout: float64 (pool size,) from a dict
    name -> array shaped like the parameter (or a scalar: every element of it); parameters left out
    are 0. Unknown names, wrong shapes and non-finite values are a ConfigError naming the key."""
    if not isinstance(directions, dict) or not directions:
        raise ConfigError("expected a non-empty dict parameter name -> direction", key="directions")
    v = np.zeros(scene.params.data.size, np.float64)
    for name, dv in directions.items():
        i = scene.params.info(name)
        a = np.asarray(dv, np.float64)
        if a.ndim == 0:
            a = np.full(i.size, float(a))
        elif a.size != i.size:
            raise ConfigError(f"direction has {a.size} values, the parameter {i.size} (shape {i.shape})", key=name)
        if not np.all(np.isfinite(a)):
            raise ConfigError("direction has non-finite values", key=name)
        v[i.offset:i.offset + i.size] = a.ravel()
    if scene.deformables:
        scene.deform_tangents(v)         # mesh parameters -> world vertices (scene/deform.py)
    return v


def check_forward_arch():
    """ConfigError unless the running backend can run forward mode (CPU, CUDA)."""
    from . import backend
    if backend.current_arch() == "vulkan":
        raise ConfigError("forward mode needs the CPU or CUDA backend (its per-thread tangent accumulators use "
                          "ti.global_thread_idx(), which Taichi's Vulkan backend lacks); use --arch cpu", key="arch")


def forward_pass(scene, directions, spp, seed, sensor, progress, launch, after=None):
    """Forward mode's passes: v (``tangent_vector``) into the storage's Tangent view tv, then
    launch(tv, sensor, seed, sample_offset, count) over the batches (a tangent kernel splatting
    <∂L/∂π, v> per sample, integrators/kernels.py), then after(tv, sensor, seed) if given (terms
    splatted in passes of their own); returns the resolved J v image (H, W, 3)."""
    from . import backend
    check_forward_arch()
    spp, sensor = check_args(scene, spp, sensor)
    v = tangent_vector(scene, directions)
    st = begin_film(scene, sensor, True)
    tv = pool.Tangent.of(st)
    tv.tan_v.from_numpy(padded(v.astype(backend.np_float()), st.caps["pool"]))
    seed = int(seed) & 0xFFFFFFFF
    sweep(scene, sensor, spp, "forward", progress, lambda off, k: launch(tv, sensor, seed, off, k), film="flush")
    if after is not None:
        after(tv, sensor, seed)
    return resolve_film(st, scene.sensors[sensor])
