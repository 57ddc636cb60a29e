"""Path Replay Backpropagation for volumes (Vicini et al. 2021, §4.4): differentiable delta
tracking, detached variant.

The same three-pass scheme as prb.py: the caller renders the primal image (seed s0) and computes
δy; ``render_grad`` then runs, with a decorrelated seed s1, the film-weight pass and one adjoint
megakernel thread per (pixel, sample) that
  1. walks the path with ``volpath.sample`` PRIMAL to get its radiance L, then
  2. resets the RNG and replays the *same* path with ``volpath.sample`` REPLAY, which subtracts
     every emission / NEE term as it is met and atomically adds dL * L * (dw/dπ) / w for every
     weight w of the walk (null and real collisions of delta tracking, analytic homogeneous
     free flights, phase functions, BSDFs, emitters) into ``st.grad_fx``; NEE transmittances are
     differentiated by a nested replay of the shadow ray (see walk/media.py).
Distances are sampled with the (detached) majorant; only the particle proportions are
differentiated, never the discrete real/null choice. Memory is constant in spp and path length.

Gradients: density / sigma_t grids and constants, albedo (grids and constants), HG g, plus every
surface parameter path.py differentiates (BSDFs, normal maps, emitters).
"""
import taichi as ti

from .. import launch
from ..core import film
from ..core.camera import camera_ray
from ..core.math import vec2, vec3
from ..core.rng import make_sampler
from ..walk.state import PRIMAL, REPLAY
from . import volpath

INTEGRATES = volpath.NAMES


@ti.kernel
def prbvol_kernel(st: ti.template(), bsdf: ti.template(), em: ti.template(), march: ti.template(), cam: ti.i32,
                  spp: ti.i32, sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32,
                  hide_emitters: ti.i32):
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        for k in range(spp):
            sampler = make_sampler(seed, pix, sample_offset + k)
            pos = vec2(pix % w, pix // w) + sampler.next_2d()
            dL = film.gather_adjoint(st, cam, pos)
            if dL[0] != 0.0 or dL[1] != 0.0 or dL[2] != 0.0:
                o, d = camera_ray(st, cam, pos)
                # pass 2: primal walk -> L
                L, _ = volpath.sample(st, bsdf, em, PRIMAL, march, o, d, sampler, max_depth, rr_depth,
                                      hide_emitters, vec3(0.0), vec3(0.0))
                if L[0] == L[0] and L[1] == L[1] and L[2] == L[2]:
                    # pass 3: reset the RNG, replay the same path and back-propagate δL
                    replay = make_sampler(seed, pix, sample_offset + k)
                    replay.next_2d()
                    volpath.sample(st, bsdf, em, REPLAY, march, o, d, replay, max_depth, rr_depth, hide_emitters,
                                   L, dL)


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every scene parameter, for the volume
    integrators (volpath / prbvolpath: delta tracking; volpath_raymarch: the ray-marched estimator)."""
    a = volpath.args(scene)
    bsdf, em = volpath.kernel_dispatch(scene)
    volpath.prepare(scene, scene.bind(), a)

    def run(st, cam, sd, off, k):
        prbvol_kernel(st, bsdf, em, a.march, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run)


METHODS = {"prb": render_grad}
