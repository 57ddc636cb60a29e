"""The host layer: everything between the public API and the integrators' kernels.

Argument checks, batching of samples into kernel launches (with the progress bar), the film
resolve, the adjoint-image preparation and the gradient accumulator of the three-pass PRB scheme
(Vicini et al. 2021 §5), and the gradient readout. Integrator drivers call these; nothing here
knows an integrator.

Adjoint image: ∂y_p/∂L_s = w_ps / W_p (W_p = Σ_s w_ps, the adjoint pass's own filter-weight sums,
treated as constant), so a sample's adjoint radiance is δL_s = Σ_p w_ps δy_p / W_p;
``prepare_adjoint`` computes W_p with the adjoint seed and stores δy_p / W_p in ``st.adj``.
Gradients accumulate in 64-bit fixed point (``st.grad_fx``, core/fixed_point.py): a seed fixes
them bit for bit.
"""
import numpy as np
import taichi as ti

from .core import film
from .core.camera import pixel_sample
from .core.fixed_point import FILM_SCALE, grad_scale_for
from .core.math import vec3
from .errors import ConfigError
from .progress import Progress
from .scene.storage import padded

DEFAULT_SPP = 64


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


def sweep(scene, sensor, spp, label, progress, launch):
    """Call launch(sample_offset, count) over batches covering spp samples per pixel."""
    s = scene.sensors[sensor]
    with Progress(spp, label, unit="spp") if progress else NoBar() as bar:
        for off, k in batches(spp, s.width * s.height):
            launch(off, k)
            bar.update(k)


def resolve_film(st, s):
    """Film (Σ w L, Σ w) of sensor description s -> float32 (H, W, 3), row 0 at the top."""
    acc = st.film.to_numpy()[:s.width * s.height].astype(np.float64)  # fixed point: the scale cancels
    w = acc[:, 3:4]
    img = np.where(w > 0, acc[:, :3] / np.where(w > 0, w, 1), 0.0)
    return img.reshape(s.height, s.width, 3).astype(np.float32)


# ------------------------------------------------------------------ adjoint image and gradients
@ti.kernel
def film_weights_kernel(st: ti.template(), cam: ti.i32, spp: ti.i32, sample_offset: ti.i32, seed: ti.u32):
    """W_p: filter-weight sums of the adjoint pass's samples (same positions as the gradient kernels)."""
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        acc = film.local_zero()
        for s in range(spp):
            _, pos = pixel_sample(st, cam, pix, seed, sample_offset + s)
            film.local_splat(st, cam, pix % w, pix // w, pos, vec3(0.0), acc)
        film.local_flush(st, cam, pix % w, pix // w, acc, True)


@ti.kernel
def normalize_adjoint_kernel(st: ti.template(), n: ti.i32):
    for p in range(n):
        wp = ti.cast(st.adj_w[p], float) * (1.0 / FILM_SCALE)
        st.adj[p] = st.adj[p] / wp if wp > 0.0 else vec3(0.0)


@ti.kernel
def finalize_grad_kernel(st: ti.template(), n: ti.i32):
    """st.grad += st.grad_fx / scale (fixed-point accumulator -> float gradients; st.grad holds
    what was accumulated in float, only on software Vulkan, see core/pool.py)."""
    inv = 1.0 / st.info_f[2]
    for i in range(n):
        st.grad[i] += ti.cast(ti.cast(st.grad_fx[i], ti.f64) * ti.cast(inv, ti.f64), float)


def prepare_adjoint(scene, st, adjoint_image, sensor, spp, seed):
    """Upload δy, compute W_p with the adjoint seed, store δy / W_p in st.adj."""
    s = scene.sensors[sensor]
    a = np.asarray(adjoint_image, np.float32)
    if a.shape != (s.height, s.width, 3):
        raise ConfigError(f"adjoint image has shape {a.shape}, expected {(s.height, s.width, 3)}",
                          key="adjoint_image")
    if not np.all(np.isfinite(a)):
        raise ConfigError("adjoint image contains NaN or Inf", key="adjoint_image")
    npix = s.width * s.height
    st.adj.from_numpy(padded(a.reshape(-1, 3), st.caps["pixels"]))
    st.adj_w.fill(0)
    film_weights_kernel(st, sensor, spp, 0, seed)
    normalize_adjoint_kernel(st, npix)


def reset_gradients(st, scale):
    """Empty the gradient accumulators and set the fixed-point scale."""
    st.grad_fx.fill(0)
    st.grad.fill(0)
    st.info_f[2] = scale


def begin_gradient(st, scene, accumulate):
    """Reset the fixed-point gradient accumulator (unless accumulating views) and pick its scale
    from the normalised adjoint image st.adj (a sample's δL is at most ~ the filter's weight sum
    times max |δy / W|)."""
    if not accumulate or st.info_f[2] <= 0:
        s = scene.sensors[0]
        npix = max(sc.width * sc.height for sc in scene.sensors)
        m = float(np.abs(st.adj.to_numpy()[:npix]).max()) * (4.0 if s.filter == "gaussian" else 1.0)
        reset_gradients(st, grad_scale_for(m))


def read_gradients(scene, st):
    """The accumulated gradients as a dict parameter name -> array shaped like the parameter
    (st.grad holds them afterwards, for the optimiser; st.grad_fx is emptied)."""
    n = scene.params.data.size
    finalize_grad_kernel(st, n)
    st.grad_fx.fill(0)
    return scene.params.split(st.grad.to_numpy()[:n])


def gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, label, launch):
    """The adjoint passes of the three-pass scheme: δy / W_p into st.adj, reset the accumulator,
    launch(st, sample_offset, count) over the batches, read the gradients back."""
    spp, sensor = check_args(scene, spp, sensor)
    st = scene.bind()
    seed = int(seed) & 0xFFFFFFFF
    prepare_adjoint(scene, st, adjoint_image, sensor, spp, seed)
    begin_gradient(st, scene, accumulate)
    sweep(scene, sensor, spp, label, progress, lambda off, k: launch(st, sensor, seed, off, k))
    return read_gradients(scene, st)
