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
VARIANTS = variants.NAMES           # spectral_polarized: parameters that leave Mueller matrices alone (below)
FORWARD_VARIANTS = variants.NAMES   # spectral_polarized: tangent propagation (walk/state.py FORWARD)


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every parameter (dict name -> array).

    spectral_polarized: the camera records S0, and a contribution's S0 is its scalar value (β f Le, what the
    parameters of every model but the polarizing elements' angles scale) times row 0 of the path's Mueller
    product, so the replay's L_ind ∂f/f holds with L_ind the S0 still to come and each adjoint weighted by its
    contribution's S0 factor (walk/steps.py). Parameters that change a Mueller matrix (models' MUELLER_KEYS:
    polarizer and retarder angles) would need the Stokes vector still to come, which a replay cannot recover
    (Mueller products are not invertible after a polarizer; Mitsuba 3's prb refuses the variant): they are left
    out of the result (``check_params`` refuses asking for them; method ``forward`` differentiates them)."""
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    kernel = kernels.replay_kernel(path.sample)

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, scene.em_mask, 0, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return without_mueller_parameters(scene, launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate,
                                                                  progress, "gradient", run))


def without_mueller_parameters(scene, g):
    """A reverse-mode result g (dict name -> array) without the parameters that change Mueller matrices, which it
    does not differentiate (spectral_polarized; unchanged elsewhere)."""
    if variants.polarized():
        for name in mueller_parameters(scene.desc.bsdfs, scene.desc.textures):
            g.pop(name, None)
    return g


def check_params(scene, params):
    """Reverse mode in spectral_polarized: refuse (one line) parameters that change a Mueller matrix."""
    if not variants.polarized() or params is None:
        return
    mp = mueller_parameters(scene.desc.bsdfs, scene.desc.textures)
    for name in params:
        hit = mp.get(scene.params.resolve(name))
        if hit is not None:
            raise ConfigError(f"'{name}' changes the Mueller matrix of BSDF '{hit[0]}': reverse-mode gradients in "
                              f"spectral_polarized hold Mueller matrices fixed; use method 'forward' for it", key=name)


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
