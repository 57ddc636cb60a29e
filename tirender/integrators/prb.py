"""Path Replay Backpropagation (Vicini et al. 2021), detached, for surfaces (``method: prb``).

Three-pass scheme (§5): the caller renders the primal image with seed s0 and computes the adjoint
image δy = ∂loss/∂y; ``render_grad`` then runs, with a decorrelated seed s1, the film-weight pass
(launch.prepare_adjoint) and one adjoint megakernel thread per (pixel, sample) that gathers
δL = Σ_p w_ps δy_p / W_p from the reconstruction filter, walks the path to get L (``path.sample``
PRIMAL), resets the RNG and replays the same path (REPLAY), which atomically adds ∂/∂π into the
gradient pool. Memory is constant in spp and path length: no per-path or per-vertex storage.
"""
import taichi as ti

from .. import launch
from ..bsdfs.registry import dispatch
from ..core import film
from ..core.camera import camera_ray
from ..core.math import vec2, vec3
from ..core.rng import make_sampler
from ..walk.state import PRIMAL, REPLAY
from . import path

INTEGRATES = path.NAMES


@ti.kernel
def prb_kernel(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
               sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32):
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        for k in range(spp):
            sampler = make_sampler(seed, pix, sample_offset + k)
            pos = vec2(pix % w, pix // w) + sampler.next_2d()
            dL = film.gather_adjoint(st, cam, pos)
            if dL[0] != 0.0 or dL[1] != 0.0 or dL[2] != 0.0:
                o, d = camera_ray(st, cam, pos)
                # pass 2: primal walk -> L
                L = path.sample(st, bsdf, em, PRIMAL, o, d, sampler, max_depth, rr_depth, hide_emitters, vec3(0.0),
                                vec3(0.0))
                # pass 3: reset the RNG, replay the same path and back-propagate δL
                replay = make_sampler(seed, pix, sample_offset + k)
                replay.next_2d()
                path.sample(st, bsdf, em, REPLAY, o, d, replay, max_depth, rr_depth, hide_emitters, L, dL)


def render_grad(scene, adjoint_image, spp, seed, sensor, accumulate, progress):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every parameter (dict name -> array)."""
    a = path.args(scene)
    bsdf = dispatch(scene.bsdf_levels)

    def run(st, cam, sd, off, k):
        prb_kernel(st, bsdf, scene.em_mask, cam, k, off, sd, a.max_depth, a.rr_depth, a.hide)
    return launch.gradient_pass(scene, adjoint_image, spp, seed, sensor, accumulate, progress, "gradient", run)


METHODS = {"prb": render_grad}
