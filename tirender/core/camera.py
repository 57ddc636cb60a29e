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
def camera_connect(st: ti.template(), cam, p):
    """The pinhole seen from world point p (light tracing): (valid, film position (pixels), unit
    direction p -> pinhole, distance, importance W = We cos θ_c / dist² = 1 / (A cos³θ_c dist²)) with
    We = 1 / (A cos⁴θ_c) the pinhole's importance normalised over its image plane of area
    A = 4 tx ty at distance 1 (θ_c: angle to the optical axis). valid = 0 outside the film."""
    v = st.cam_o[cam] - p
    dist = v.norm()
    to_cam = v / ti.max(dist, 1e-30)
    z = -to_cam.dot(st.cam_fwd[cam])
    valid = 0
    pos = vec2(0.0)
    imp = 0.0
    if z > 1e-7 and dist > 0.0:
        tx = st.cam_tx[cam]
        ty = st.cam_ty[cam]
        x = -to_cam.dot(st.cam_left[cam]) / z
        y = -to_cam.dot(st.cam_up[cam]) / z
        pos = vec2(0.5 * (1.0 - x / tx) * st.cam_w[cam], 0.5 * (1.0 - y / ty) * st.cam_h[cam])
        if 0.0 <= pos[0] < st.cam_w[cam] and 0.0 <= pos[1] < st.cam_h[cam]:
            valid = 1
            imp = 1.0 / (4.0 * tx * ty * z * z * z * dist * dist)
    return valid, pos, to_cam, dist, imp


@ti.func
def camera_connect_adjoint(st: ti.template(), cam, p, d_pos, d_imp):
    """∂/∂p of <d_pos, pos(p)> + d_imp · imp(p) for camera_connect's film position and importance
    (p inside the film; vec3). With r = p - o and c = r·fwd: x = r·left / c, y = r·up / c,
    pos = (½ W (1 - x / tx), ½ H (1 - y / ty)), imp = |r| / (4 tx ty c³)."""
    r = p - st.cam_o[cam]
    fwd = st.cam_fwd[cam]
    c = r.dot(fwd)
    x = r.dot(st.cam_left[cam]) / c
    y = r.dot(st.cam_up[cam]) / c
    dx = (st.cam_left[cam] - x * fwd) / c
    dy = (st.cam_up[cam] - y * fwd) / c
    tx = st.cam_tx[cam]
    ty = st.cam_ty[cam]
    g = d_pos[0] * (-0.5 * st.cam_w[cam] / tx) * dx + d_pos[1] * (-0.5 * st.cam_h[cam] / ty) * dy
    n = r.norm()
    imp = n / (4.0 * tx * ty * c * c * c)
    return g + d_imp * imp * (r / (n * n) - 3.0 * fwd / c)


@ti.func
def pixel_sample(st: ti.template(), cam, pix, seed, index):
    """(sampler, film position) of sample `index` of pixel `pix`: the PCG32 stream of (seed, pixel,
    index) — a replay re-derives the same path from it — and the pixel's corner plus a jitter."""
    sampler = make_sampler(seed, pix, index)
    w = st.cam_w[cam]
    pos = vec2(pix % w, pix // w) + sampler.next_2d()
    return sampler, pos
