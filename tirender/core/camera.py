"""Pinhole perspective camera (Mitsuba 3 conventions).

Film position (x, y) in pixels, x to the right, y downwards, row 0 at the top. Camera space:
x to the image left, y up, z forward; d_cam = (tx (1 - 2 x/W), ty (1 - 2 y/H), 1).
"""
import taichi as ti

from .math import vec2
from .rng import make_sampler


@ti.func
def camera_ray(st: ti.template(), cam, pos):
    """World-space ray (origin, unit direction) through film position `pos` (pixels)."""
    sx = pos[0] / st.cam_w[cam]
    sy = pos[1] / st.cam_h[cam]
    dx = st.cam_tx[cam] * (1.0 - 2.0 * sx)
    dy = st.cam_ty[cam] * (1.0 - 2.0 * sy)
    d = (st.cam_left[cam] * dx + st.cam_up[cam] * dy + st.cam_fwd[cam]).normalized()
    return st.cam_o[cam], d


@ti.func
def pixel_sample(st: ti.template(), cam, pix, seed, index):
    """(sampler, film position) of sample `index` of pixel `pix`: the PCG32 stream of (seed, pixel,
    index) — a replay re-derives the same path from it — and the pixel's corner plus a jitter."""
    sampler = make_sampler(seed, pix, index)
    w = st.cam_w[cam]
    pos = vec2(pix % w, pix // w) + sampler.next_2d()
    return sampler, pos
