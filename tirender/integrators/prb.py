"""Path Replay Backpropagation (Vicini et al. 2021), detached variant, for surfaces.

Three-pass scheme (§5): the caller renders the primal image with seed s0 and computes the
adjoint image δy = ∂loss/∂y; ``render_grad`` then runs, with a decorrelated seed s1,
  1. a film-weight pass (the normalisation W_p = Σ_s w_ps of the adjoint samples),
  2. one adjoint megakernel thread per (pixel, sample): gather δL = Σ_p w_ps δy_p / W_p from the
     reconstruction filter, walk the path to get L (``path.sample`` PRIMAL), reset the RNG and
     replay the same path (``path.sample`` ADJOINT), which atomically adds ∂/∂π into ``st.grad``.
Memory is constant in spp and path length: no per-path or per-vertex storage.
"""
import numpy as np
import taichi as ti

from ..core import film
from ..core.camera import camera_ray
from ..core.fixed_point import FILM_SCALE, grad_scale_for
from ..core.math import vec2, vec3
from ..core.rng import make_sampler
from ..errors import ConfigError
from ..progress import Progress
from ..scene.storage import padded
from . import path


@ti.kernel
def film_weights_kernel(st: ti.template(), cam: ti.i32, spp: ti.i32, sample_offset: ti.i32, seed: ti.u32):
    """W_p: filter-weight sums of the adjoint pass's samples (same positions as prb_kernel)."""
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        px = pix % w
        py = pix // w
        acc = film.local_zero()
        for s in range(spp):
            sampler = make_sampler(seed, pix, sample_offset + s)
            pos = vec2(px, py) + sampler.next_2d()
            film.local_splat(st, cam, px, py, pos, vec3(0.0), acc)
        film.local_flush(st, cam, px, py, acc, True)


@ti.kernel
def normalize_adjoint_kernel(st: ti.template(), n: ti.i32):
    for p in range(n):
        wp = ti.cast(st.adj_w[p], float) * (1.0 / FILM_SCALE)
        st.adj[p] = st.adj[p] / wp if wp > 0.0 else vec3(0.0)


@ti.kernel
def finalize_grad_kernel(st: ti.template(), n: ti.i32):
    """st.grad = st.grad_fx / scale (fixed-point accumulator -> float gradients)."""
    inv = 1.0 / st.info_f[2]
    for i in range(n):
        st.grad[i] = ti.cast(ti.cast(st.grad_fx[i], ti.f64) * ti.cast(inv, ti.f64), float)


@ti.kernel
def prb_kernel(st: ti.template(), bm: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
               sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32):
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        for s in range(spp):
            sampler = make_sampler(seed, pix, sample_offset + s)
            pos = vec2(pix % w, pix // w) + sampler.next_2d()
            dL = film.gather_adjoint(st, cam, pos)
            if dL[0] != 0.0 or dL[1] != 0.0 or dL[2] != 0.0:
                o, d = camera_ray(st, cam, pos)
                # pass 2: primal walk -> L
                L = path.sample(st, bm, em, path.PRIMAL, o, d, sampler, max_depth, rr_depth, hide_emitters,
                                vec3(0.0), vec3(0.0))
                # pass 3: reset the RNG, replay the same path and back-propagate δL
                replay = make_sampler(seed, pix, sample_offset + s)
                replay.next_2d()
                path.sample(st, bm, em, path.ADJOINT, o, d, replay, max_depth, rr_depth, hide_emitters, L, dL)


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


def render_grad(scene, adjoint_image, spp=64, seed=1, sensor=0, method="prb", accumulate=False, progress=True):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every scene parameter (PRB).

    adjoint_image: (H, W, 3) float δy = ∂loss/∂image of the primal image. seed: the adjoint
    pass's seed (use one different from the primal render's). Returns dict name -> numpy array
    shaped like the parameter. ``accumulate=True`` adds into the existing st.grad (multi-view).
    """
    from ..renderer import _batches, _integrator_args
    if scene.integrator["type"] in ("volpath", "prbvolpath", "volpath_raymarch"):  # media: prbvolpath.py
        if method != "prb":
            raise ConfigError(f"method '{method}' does not support participating media (use prb)", key="method")
        from .prbvolpath import render_grad as render_grad_volume
        return render_grad_volume(scene, adjoint_image, spp=spp, seed=seed, sensor=sensor, accumulate=accumulate,
                                  progress=progress)
    if method != "prb":
        from .rb import render_grad_rb
        return render_grad_rb(scene, adjoint_image, spp=spp, seed=seed, sensor=sensor, method=method,
                              accumulate=accumulate)
    st = scene.bind()
    seed = int(seed) & 0xFFFFFFFF
    prepare_adjoint(scene, st, adjoint_image, sensor, spp, seed)
    begin_gradient(st, scene, accumulate)
    t, max_depth, rr_depth, hide = _integrator_args(scene, None)
    s = scene.sensors[sensor]
    from ..renderer import _NoBar
    with Progress(spp, "gradient", unit="spp") if progress else _NoBar() as bar:
        for off, k in _batches(spp, s.width * s.height):
            prb_kernel(st, scene.bsdf_mask, scene.em_mask, sensor, k, off, seed, max_depth, rr_depth, hide)
            bar.update(k)
    return read_gradients(scene, st)


def begin_gradient(st, scene, accumulate):
    """Reset the fixed-point gradient accumulator (unless accumulating views) and pick its scale
    from the normalised adjoint image st.adj (a sample's δL is at most ~ the filter's weight sum
    times max |δy / W|)."""
    if not accumulate or st.info_f[2] <= 0:
        st.grad_fx.fill(0)
        s = scene.sensors[0]
        npix = max(sc.width * sc.height for sc in scene.sensors)
        m = float(np.abs(st.adj.to_numpy()[:npix]).max()) * (4.0 if s.filter == "gaussian" else 1.0)
        st.info_f[2] = grad_scale_for(m)


def read_gradients(scene, st):
    n = scene.params.data.size
    finalize_grad_kernel(st, n)
    return scene.params.split(st.grad.to_numpy()[:n])
