"""Path Replay Backpropagation for volumes (Vicini et al. 2021, §4.4): differentiable delta
tracking, detached variant.

The same three-pass scheme as prb.py: the caller renders the primal image (seed s0) and computes
δy; ``render_grad`` then runs, with a decorrelated seed s1, the film-weight pass and one adjoint
megakernel thread per (pixel, sample) that
  1. walks the path with ``volpath.sample`` PRIMAL to get its radiance L, then
  2. resets the RNG and replays the *same* path with ``volpath.sample`` REPLAY, which subtracts
     every emission / NEE term as it is met and atomically adds dL * L * (dw/dπ) / w for every
     weight w of the walk (the marginal free-flight weights of delta tracking with the direct
     in-scattering estimated along each flight, analytic homogeneous free flights, phase
     functions, BSDFs, emitters) into ``st.grad_fx``; NEE transmittances are differentiated by a
     nested replay of the shadow ray (see walk/media.py and docs/media.md).
Distances are sampled with the (detached) majorant and never differentiated. Memory is constant in
spp and path length.

Gradients: density / sigma_t grids and constants, albedo (grids and constants), HG g, plus every
surface parameter path.py differentiates (BSDFs, normal maps, emitters). spectral_polarized: as prb.py, every
parameter but the Mueller matrices' (phase functions keep the Stokes vector; the in-scattering adjoint's direct
light carries its S0 factor and its indirect path starts from the main path's Mueller product).
"""
from .. import launch
from . import kernels, volpath
from .prb import without_mueller_parameters

INTEGRATES = volpath.NAMES
VARIANTS = volpath.VARIANTS   # spectral_polarized: what the Mueller matrices leave alone (integrators/prb.py)
FORWARD_VARIANTS = ("rgb", "mono", "spectral")   # the tangent replay; polarized forward mode has no media steps


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every scene parameter, for the volume
    integrators (volpath / prbvolpath: delta tracking; volpath_raymarch: the ray-marched estimator)."""
    a = volpath.args(scene, gradient=True)
    bsdf, em = volpath.kernel_dispatch(scene)
    volpath.prepare(scene, scene.bind(), a)
    kernel = kernels.replay_kernel(volpath.sample)

    def run(st, cam, sd, off, k):
        kernel(st, bsdf, em, a.vis, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return without_mueller_parameters(scene, launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate,
                                                                  progress, "gradient", run))


def render_forward(scene, directions, spp, seed, sensor, progress):
    """Forward mode of the volume integrators: J v per pixel (integrators/prb.render_forward)."""
    a = volpath.args(scene, gradient=True)
    bsdf, em = volpath.kernel_dispatch(scene)
    volpath.prepare(scene, scene.bind(), a)
    kernel = kernels.tangent_kernel(volpath.sample, launch.wide_filter(scene, sensor))

    def run(tv, cam, sd, off, k):
        kernel(tv, bsdf, em, a.vis, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return launch.forward_pass(scene, directions, spp, seed, sensor, progress, run)


METHODS = {"prb": render_grad}
FORWARD = {"prb": render_forward}
