"""Path Replay Backpropagation (Vicini et al. 2021), detached, for surfaces (``method: prb``).

Three-pass scheme (§5): the caller renders the primal image with seed s0 and computes the adjoint
image δy = ∂loss/∂y; ``render_grad`` then runs, with a decorrelated seed s1, the film-weight pass
(launch.prepare_adjoint) and one adjoint megakernel thread per (pixel, sample) that gathers
δL = Σ_p w_ps δy_p / W_p from the reconstruction filter, walks the path to get L (``path.sample``
PRIMAL), resets the RNG and replays the same path (REPLAY), which atomically adds ∂/∂π into the
gradient pool (integrators/kernels.py). Memory is constant in spp and path length: no per-path or
per-vertex storage.
"""
from .. import launch
from ..bsdfs.registry import dispatch
from . import kernels, path

INTEGRATES = path.NAMES


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every parameter (dict name -> array)."""
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    kernel = kernels.replay_kernel(path.sample)

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, scene.em_mask, 0, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run)


METHODS = {"prb": render_grad}
