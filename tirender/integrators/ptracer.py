"""Light tracer (Mitsuba 3 ``ptracer``): paths start at the emitters and every vertex is connected
to the camera, splatting through the film's reconstruction filter.

One light path per (pixel, sample) index — spp · W · H paths for ``spp`` — so that its cost and its
noise are comparable to the path tracer's at the same spp. A path: an emitter picked uniformly, a
ray of its light (``emitters.registry.sample_ray``: β = Le |cos| / (p_sel pdf_pos pdf_dir)); at
each surface vertex with a non-Dirac lobe, the camera connection (``core.camera.camera_connect``)
adds β f*(ω_L → ω_C) |cos θ_C| W_cam into the film at the connection's film position (``film.
splat_light``: w·L, no filter weight); then the adjoint BSDF is sampled and Russian roulette is
played as in the path tracer. Importance transport: f*(ω_L → ω_C) = f(ω_C, ω_L) (the BSDF's
arguments swapped), refraction without the radiance compression 1/η² (sampled weights times
η²), and shading normals corrected as in pbrt (|ω_L·n_s| |ω_C·n_g| / (|ω_L·n_g| |ω_C·n_s|)).
Surface emitters seen by the camera: their position sample is connected too; emitters at
infinity seen by the camera: one camera ray per path index that escapes (a one-segment camera
path). The film's pixel weights are those of spp · W · H uniform film samples
(``launch.add_uniform_weights``), so the image converges to the path tracer's.

``max_depth`` counts segments of the whole path, camera connection included (2: direct
illumination), as Mitsuba's; ``rr_depth``; ``hide_emitters``. Surfaces only (participating media
are refused with one line); no gradients (refused by the registry).
"""
import math

import taichi as ti

from .. import launch
from ..bsdfs.base import SMOOTH
from ..bsdfs.registry import dispatch
from ..core import film
from ..core.camera import camera_connect, camera_ray
from ..core.interaction import make_interaction
from ..core.intersect import intersect, occluded
from ..core.math import BIG, max3, to_local, vec2
from ..core.rng import make_sampler
from ..emitters import registry as emitters
from ..emitters.base import direction_record, env_record
from ..errors import ConfigError
from ..walk import vertex
from . import path

NAMES = ("ptracer",)
KEYS = path.KEYS
RR_MAX = path.RR_MAX


@ti.func
def _offset(st: ti.template(), p, n, d):
    """p moved off its surface (normal n) to the side of direction d."""
    eps = st.info_f[0] * (1.0 + ti.abs(p).max())
    sgn = 1.0 if n.dot(d) >= 0.0 else -1.0
    return p + n * (eps * sgn)


@ti.func
def _visible_env(st: ti.template(), em: ti.template(), cam, pix, sampler: ti.template()):
    """An emitter at infinity seen directly: a camera ray through a uniform film position that
    escapes splats its Le (the one-segment paths a light path cannot reach the pinhole with)."""
    w = st.cam_w[cam]
    pos = vec2(pix % w, pix // w) + sampler.next_2d()
    e = st.info_i[1]
    if e >= 0:
        o, d = camera_ray(st, cam, pos)
        if not occluded(st, o, d, BIG):
            film.splat_light(st, cam, pos, film.nan_to_zero(emitters.eval(st, em, env_record(e, o, d))))


@ti.func
def _connect(st: ti.template(), cam, p, to_cam, dist, pos, value):
    """Splat value at film position pos if the segment p -> pinhole (length dist) is unoccluded."""
    if max3(value) > 0.0 and not occluded(st, p, to_cam, dist * (1.0 - 1e-4)):
        film.splat_light(st, cam, pos, film.nan_to_zero(value))


@ti.func
def light_path(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam, sampler: ti.template(), center,
               radius, max_depth, rr_depth, hide_emitters):
    """Trace one light path and splat its camera connections (see the module doc)."""
    u_sel = sampler.next_1d()
    u_pos = sampler.next_2d()
    u_dir = sampler.next_2d()
    e, o, d, n, uv, beta, pos_w = emitters.sample_ray(st, em, u_sel, u_pos, u_dir, center, radius)
    if e >= 0 and max3(beta) > 0.0:
        if pos_w > 0.0:
            if hide_emitters == 0:   # the surface emitter's point seen by the camera (one segment)
                valid, pos, to_cam, dist, imp = camera_connect(st, cam, o)
                if valid == 1:
                    le = emitters.eval(st, em, direction_record(e, o, n, uv, -to_cam, dist))
                    so = _offset(st, o, n, to_cam)
                    _connect(st, cam, so, to_cam, (st.cam_o[cam] - so).norm(), pos,
                             le * (ti.abs(n.dot(to_cam)) * imp * pos_w))
            o = _offset(st, o, n, d)
        depth = 1          # segments from the emitter to the next vertex
        active = True
        while active:
            tri, t, b1, b2 = intersect(st, o, d, BIG)
            si = make_interaction(st, tri, t, b1, b2, o, d)
            if si.valid == 0:
                active = False
            else:
                v = vertex.surface_vertex(st, si, d)        # v.wi: towards the light (local)
                wl = -d
                cos_lg = ti.abs(wl.dot(v.ng))
                if (v.flags & SMOOTH) != 0 and depth + 1 <= max_depth and cos_lg > 0.0:
                    valid, pos, to_cam, dist, imp = camera_connect(st, cam, v.p)
                    if valid == 1:
                        wc = to_local(v.s, v.t, v.n, to_cam)
                        f, _pdf = bsdf.eval_pdf(st, v.ctx, wc, v.wi)   # f(ω_C, ω_L) |cos θ_L| = f* |cos θ_L|
                        # f* |ω_C·n_s| with pbrt's shading-normal correction = f* |ω_L·n_s| |ω_C·n_g| / |ω_L·n_g|
                        so = vertex.spawn(st, v, to_cam)
                        _connect(st, cam, so, to_cam, (st.cam_o[cam] - so).norm(), pos,
                                 beta * f * (ti.abs(to_cam.dot(v.ng)) / cos_lg * imp))
                if depth + 1 >= max_depth:
                    active = False
                else:
                    bs = vertex.sample(st, bsdf, v, sampler)
                    cos_os = ti.abs(to_local(v.s, v.t, v.n, bs.wo)[2])
                    cos_ls = ti.abs(v.wi[2])
                    if bs.valid == 0 or max3(bs.weight) <= 0.0 or cos_os <= 0.0:
                        active = False
                    else:
                        # importance: no radiance compression at refraction (× η²); shading normals
                        corr = cos_ls * ti.abs(bs.wo.dot(v.ng)) / (cos_lg * cos_os)
                        beta *= bs.weight * (bs.eta * bs.eta * corr)
                        o = vertex.spawn(st, v, bs.wo)
                        d = bs.wo
                        depth += 1
                        u_rr = sampler.next_1d()
                        bmax = max3(beta)
                        if not bmax > 0.0:
                            active = False
                        elif depth >= rr_depth:
                            q = ti.min(bmax, RR_MAX)
                            if u_rr >= q:
                                active = False
                            else:
                                beta /= q


_kernel = {}


def _make_kernel():
    if "k" not in _kernel:
        @ti.kernel
        def trace(st: ti.template(), bsdf: ti.template(), em: ti.template(), cam: ti.i32, spp: ti.i32,
                  sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide_emitters: ti.i32,
                  center: ti.types.vector(3, float), radius: float):
            npix = st.cam_w[cam] * st.cam_h[cam]
            for i in range(npix * spp):
                pix = i % npix
                sampler = make_sampler(seed, pix, sample_offset + i // npix)
                if hide_emitters == 0:
                    _visible_env(st, em, cam, pix, sampler)
                light_path(st, bsdf, em, cam, sampler, center, radius, max_depth, rr_depth, hide_emitters)
        _kernel["k"] = trace
    return _kernel["k"]


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True):
    """Trace spp · W · H light paths (indices sample_offset, ... per pixel index) into the film of
    `sensor` (cleared first unless clear=False) and return the image."""
    if scene.desc.media:
        raise ConfigError("the light tracer renders surfaces only; this scene has participating media "
                          "(use volpath)", key="integrator.type")
    a = path.args(scene, integrator)
    st = launch.begin_film(scene, sensor, clear)
    bsdf = dispatch(scene.bsdf_levels)
    s = scene.sensors[sensor]
    npix = s.width * s.height
    center, radius = scene.bounding_sphere
    seed = int(seed) & 0xFFFFFFFF
    kernel = _make_kernel()
    footprint = (2 * math.ceil(s.radius) + 1) ** 2
    # a launch of k samples per pixel adds at most (k·npix paths) · (max_depth connections + the
    # visible emitters) · footprint values into one pixel
    depth = min(a.max_depth, 64) + 2
    launch.sweep(scene, sensor, spp, "ptracer", progress,
                 lambda off, k: kernel(st, bsdf, scene.em_mask, sensor, k, sample_offset + off, seed, a.max_depth,
                                       a.rr_depth, a.hide, ti.Vector(center), float(radius) * 1.001),
                 film="splat", film_adds=lambda k: k * npix * depth * footprint)
    launch.add_uniform_weights(st, s, spp * npix)
    return launch.resolve_film(st, s)
