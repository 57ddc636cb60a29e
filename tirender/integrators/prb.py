"""Path Replay Backpropagation (Vicini et al. 2021), detached, for surfaces (``method: prb``).

Three-pass scheme (§5): the caller renders the primal image with seed s0 and computes the adjoint
image δy = ∂loss/∂y; ``render_grad`` then runs, with a decorrelated seed s1, the film-weight pass
(launch.prepare_adjoint) and one adjoint megakernel thread per (pixel, sample) that gathers
δL = Σ_p w_ps δy_p / W_p from the reconstruction filter, walks the path to get L (``path.sample``
PRIMAL), resets the RNG and replays the same path (REPLAY), which atomically adds ∂/∂π into the
gradient pool (integrators/kernels.py). Memory is constant in spp and path length: no per-path or
per-vertex storage. ``render_forward`` lifts the same replay to forward mode (J v per pixel).

spectral_polarized: the replay differentiates every parameter that leaves Mueller matrices alone. The Mueller
parameters (models' MUELLER_KEYS: polarizer and retarder angles) of top-level BSDFs with at most
``MUELLER_MAX_ELEMENTS`` elements get their gradient <δy, J e_k> from one forward-mode pass per element, with
the replay's seed, spp and sensor: what a reverse pass would give for that seed (forward mode and PRB agree to
rounding). Larger ones (a bitmap of angles) and those of BSDFs nested in a composite are left out of the result
and refused in ``params`` (one line; ``render_forward`` takes a direction for the former).
"""
import numpy as np

from .. import launch, variants
from ..bsdfs.registry import dispatch, mueller_parameters
from ..errors import ConfigError
from . import kernels, path
from .forward_gradient import element_gradients

INTEGRATES = path.NAMES
VARIANTS = variants.NAMES           # spectral_polarized: the Mueller parameters by forward passes (above)
FORWARD_VARIANTS = variants.NAMES   # spectral_polarized: tangent propagation (walk/state.py FORWARD)
PARAMS = ("prb",)                   # render_grad takes params= (the Mueller parameters to differentiate)
MUELLER_MAX_ELEMENTS = 64           # reverse mode's Mueller parameters: elements each (one forward pass per element)


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress, params=None):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every parameter (dict name -> array).

    spectral_polarized: the camera records S0, and a contribution's S0 is its scalar value (β f Le, what the
    parameters of every model but the polarizing elements' angles scale) times row 0 of the path's Mueller
    product, so the replay's L_ind ∂f/f holds with L_ind the S0 still to come and each adjoint weighted by its
    contribution's S0 factor (walk/steps.py). Parameters that change a Mueller matrix (models' MUELLER_KEYS:
    polarizer and retarder angles) would need the Stokes vector still to come, which a replay cannot recover
    (Mueller products are not invertible after a polarizer; Mitsuba 3's prb refuses the variant): those of
    ``mueller_targets`` (among ``params`` if given) come from forward-mode passes, one per element, with the same
    seed, spp and sensor; the others are left out of the result (``check_params`` refuses asking for them).
    accumulate: the forward passes' gradients add to the accumulated ones as the replay's do."""
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)
    kernel = kernels.replay_kernel(path.sample)
    names = mueller_targets(scene, params) if variants.polarized() else []
    st = scene.bind()
    before = launch.read_gradients(scene, st) if (names and accumulate) else {}

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, scene.em_mask, 0, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    g = launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run)
    if names:
        fwd = element_gradients(render_forward, scene, adjoint_image, spp, seed, sensor, names, progress,
                                "Mueller gradients")
        for n, v in fwd.items():       # the forward passes hold the whole derivative of these parameters
            g[n] = before.get(n, 0.0) + v
        launch.write_gradients(scene, st, g)
    return without_mueller_parameters(scene, g, keep=names)


def mueller_targets(scene, params=None):
    """The pool names of the Mueller parameters that reverse mode differentiates by forward passes in
    spectral_polarized: those of top-level BSDFs with at most MUELLER_MAX_ELEMENTS elements (among ``params``,
    names or Mitsuba-style aliases, if given)."""
    want = None if params is None else {scene.params.resolve(n) for n in params}
    return [n for n, (_, _, nested) in mueller_parameters(scene.desc.bsdfs, scene.desc.textures).items()
            if not nested and scene.params.info(n).size <= MUELLER_MAX_ELEMENTS and (want is None or n in want)]


def without_mueller_parameters(scene, g, keep=()):
    """A reverse-mode result g (dict name -> array) without the parameters that change Mueller matrices, which the
    replay does not differentiate, but those in ``keep`` (spectral_polarized; unchanged elsewhere)."""
    if variants.polarized():
        for name in mueller_parameters(scene.desc.bsdfs, scene.desc.textures):
            if name not in keep:
                g.pop(name, None)
    return g


def check_params(scene, params):
    """Reverse mode in spectral_polarized: refuse (one line) the parameters in ``params`` that change a Mueller
    matrix and that it does not differentiate: every one for the volume integrators (polarized forward mode has
    no media steps), those of BSDFs nested in a composite, those of more than MUELLER_MAX_ELEMENTS elements."""
    if not variants.polarized() or params is None:
        return
    mp = mueller_parameters(scene.desc.bsdfs, scene.desc.textures)
    for name in params:
        hit = mp.get(scene.params.resolve(name))
        if hit is None:
            continue
        what = f"'{name}' changes the Mueller matrix of BSDF '{hit[0]}'"
        if scene.integrator["type"] not in INTEGRATES:
            raise ConfigError(f"{what}: reverse-mode gradients of the volume integrators in spectral_polarized hold "
                              f"Mueller matrices fixed (polarized forward mode has no media steps)", key=name)
        if hit[2]:
            raise ConfigError(f"{what} nested in a composite; gradients in spectral_polarized differentiate Mueller "
                              f"matrices of top-level BSDFs only", key=name)
        size = scene.params.info(name).size
        if size > MUELLER_MAX_ELEMENTS:
            raise ConfigError(f"{what} and has {size} elements: reverse mode in spectral_polarized differentiates a "
                              f"Mueller parameter by one forward-mode pass per element, at most "
                              f"{MUELLER_MAX_ELEMENTS}; forward mode (render_forward) takes a direction for it",
                              key=name)


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
