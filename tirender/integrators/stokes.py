"""Stokes output (Mitsuba 3 ``stokes``): the path tracer's radiance as its four Stokes components S0–S3,
each a linear-sRGB image, in the camera's frame.

The walk (integrators/path.py, or volpath.py with media) carries the Stokes vector of each lane in the implicit frame of the ray
(core/mueller.py); here it is rotated into the camera's frame — x axis ``d × up`` of the camera, as
Mitsuba's stokes integrator — and each component goes through the variant's film conversion (spectral:
CIE → sRGB). Outside ``spectral_polarized`` light is unpolarized: S1 = S2 = S3 = 0.

    render_stokes(scene, spp, seed, sensor, progress) -> float32 (4, H, W, 3): S0..S3 through the sensor's
    reconstruction filter (Σ w S / Σ w per pixel, as Mitsuba's film), row 0 at the top
    render(...) -> S0 (the image; ``integrator: {type: stokes}``)

Scenes with participating media are walked by volpath's walk (delta tracking; ``volpath_raymarch`` as the
measured integrator: ray marching); phase functions leave the Stokes vector unchanged (as Mitsuba 3's).

Keys: those of ``path``. Not differentiable (S1–S3; the image S0 is, with ``path`` and ``prb`` or ``forward``).
"""
import numpy as np
import taichi as ti

from .. import launch, variants
from ..bsdfs.registry import dispatch
from ..core import film, mueller
from ..sensors.registry import camera_ray, camera_sample
from ..variants import spec
from ..walk.state import PRIMAL, camera_state
from . import path, volpath

NAMES = ("stokes",)
KEYS = path.WALK_KEYS
VARIANTS = variants.NAMES


@ti.func
def _camera_rotation(st: ti.template(), cam, d):
    """(cos 2θ, sin 2θ) of the rotation from the implicit frame of −d to the camera's (x = d × up)."""
    r = mueller.rotate_stokes_basis(-d, mueller.stokes_basis(-d), d.cross(st.cam_up[cam]))
    return r[1, 1], r[1, 2]


@ti.kernel
def stokes_kernel(st: ti.template(), bsdf: ti.template(), em: ti.template(), vis: ti.template(), cam: ti.i32,
                  spp: ti.i32, sample_offset: ti.i32, seed: ti.u32, max_depth: ti.i32, rr_depth: ti.i32, hide: ti.i32,
                  out: ti.types.ndarray(dtype=ti.f64, ndim=2)):
    """out[p, 3 c + j] += Σ over the samples reaching pixel p of w · S_c's linear sRGB channel j, out[p, 12] += Σ w
    (w: the film's filter weight; vis: 0 for the path tracer's walk, else the volume walk's medium estimators,
    integrators/volpath.py)."""
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        for k in range(spp):
            sampler, pos, ap = camera_sample(st, cam, pix, seed, sample_offset + k)
            lam, lw = variants.sample_wavelengths(sampler)
            o, d, tmax = camera_ray(st, cam, pos, ap)
            s = camera_state(o, d, tmax, spec(0.0), 0, lam)
            if ti.static(isinstance(vis, int)):
                path.walk(st, bsdf, em, PRIMAL, s, sampler, max_depth, rr_depth, hide, spec(0.0))
            else:
                volpath.walk_primal(st, bsdf, em, vis, s, sampler, max_depth, rr_depth, hide)
            S1 = ti.Vector([s.S[0, i] for i in ti.static(range(variants.lanes()))], float)
            S2 = ti.Vector([s.S[1, i] for i in ti.static(range(variants.lanes()))], float)
            S3 = ti.Vector([s.S[2, i] for i in ti.static(range(variants.lanes()))], float)
            c2, s2 = _camera_rotation(st, cam, d)
            comps = [s.L, c2 * S1 + s2 * S2, c2 * S2 - s2 * S1, S3]
            rgb = [film.nan_to_zero(variants.to_rgb(comps[c], lam, lw)) for c in ti.static(range(4))]
            x0, x1, y0, y1 = film.footprint(st, cam, pos)
            for y in range(y0, y1 + 1):
                for x in range(x0, x1 + 1):
                    wt = film.pixel_weight(st, cam, pos, x, y)
                    if wt > 0.0:
                        p = y * w + x
                        for c in ti.static(range(4)):
                            for j in ti.static(range(3)):
                                out[p, 3 * c + j] += wt * rgb[c][j]
                        out[p, 12] += wt


def render_stokes(scene, spp, seed, sensor, progress=True, integrator=None):
    """S0..S3 of sensor ``sensor``: float32 (4, H, W, 3) linear sRGB (module doc)."""
    name = integrator or scene.integrator["type"]
    st = scene.bind()
    if scene.desc.media or name in volpath.NAMES:      # the volume walk (delta tracking or ray marching)
        a = volpath.args(scene, name if name in volpath.NAMES else "volpath")
        volpath.prepare(scene, st, a)
        bsdf, em = volpath.kernel_dispatch(scene)
        vis = a.vis
    else:
        a = path.args(scene, integrator if integrator != "stokes" else "path")
        bsdf, em, vis = dispatch(scene.bsdf_levels), scene.em_mask, 0
    s = scene.sensors[sensor]
    out = np.zeros((s.width * s.height, 13), np.float64)
    seed = int(seed) & 0xFFFFFFFF
    launch.sweep(scene, sensor, spp, "stokes", progress,
                 lambda off, k: stokes_kernel(st, bsdf, em, vis, sensor, k, off, seed, a.max_depth, a.rr_depth,
                                              a.hide, out))
    wsum = out[:, 12:13]
    out = np.where(wsum > 0, out[:, :12] / np.where(wsum > 0, wsum, 1.0), 0.0)
    img = out.reshape(s.height, s.width, 4, 3).transpose(2, 0, 1, 3)
    return np.ascontiguousarray(img, dtype=np.float32)


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True):
    """S0, the image (progressive rendering is not offered: every call renders spp samples afresh)."""
    return render_stokes(scene, spp, seed, sensor, progress, integrator)[0]
