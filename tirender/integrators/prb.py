"""Path Replay Backpropagation (Vicini et al. 2021), detached, for surfaces (``method: prb``).

Three-pass scheme (§5): the caller renders the primal image with seed s0 and computes the adjoint
image δy = ∂loss/∂y; ``render_grad`` then runs, with a decorrelated seed s1, the film-weight pass
(launch.prepare_adjoint) and one adjoint megakernel thread per (pixel, sample) that gathers
δL = Σ_p w_ps δy_p / W_p from the reconstruction filter, walks the path to get L (``path.sample``
PRIMAL), resets the RNG and replays the same path (REPLAY), which atomically adds ∂/∂π into the
gradient pool (integrators/kernels.py). Memory is constant in spp and path length: no per-path or
per-vertex storage. ``render_forward`` lifts the same replay to forward mode (J v per pixel).
"""
import numpy as np

from .. import launch, variants
from ..bsdfs.registry import dispatch, mueller_parameters
from ..errors import ConfigError
from . import kernels, path

INTEGRATES = path.NAMES
VARIANTS = ("rgb", "mono", "spectral")   # not spectral_polarized: the replay's L_ind ∂f/f assumes scalar
                                         # weights, Mueller products are not (Mitsuba 3's prb refuses it too)
FORWARD_VARIANTS = variants.NAMES        # spectral_polarized: tangent propagation (walk/state.py FORWARD)


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every parameter (dict name -> array)."""
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    kernel = kernels.replay_kernel(path.sample)

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, scene.em_mask, 0, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run)


def render_forward(scene, directions, spp, seed, sensor, progress):
    """Forward mode: the image's derivative along ``directions`` (dict name -> direction), J v, by
    the same replay with a tangent sink (integrators/kernels.tangent_kernel, core/pool.Tangent)."""
    if variants.polarized():
        _check_mueller_directions(scene, directions)
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    kernel = kernels.tangent_kernel(path.sample, launch.wide_filter(scene, sensor))

    def run(tv, cam, sd, off, k):
        kernel(tv, bsdf, scene.em_mask, 0, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return launch.forward_pass(scene, directions, spp, seed, sensor, progress, run)


def _check_mueller_directions(scene, directions):
    """Forward mode differentiates the Mueller matrices of top-level BSDFs only (composites' mueller_tangent is 0):
    a direction on such a parameter of a nested BSDF is refused rather than silently lost."""
    if not isinstance(directions, dict):
        return
    params = mueller_parameters(scene.desc.bsdfs, scene.desc.textures)
    for name, v in directions.items():
        hit = params.get(scene.params.resolve(name))
        if hit is not None and hit[2] and np.any(np.asarray(v, np.float64) != 0.0):
            raise ConfigError(f"'{name}' changes the Mueller matrix of BSDF '{hit[0]}' nested in a composite; forward "
                              f"mode in spectral_polarized differentiates Mueller matrices of top-level BSDFs only",
                              key=name)


METHODS = {"prb": render_grad}
FORWARD = {"prb": render_forward}
