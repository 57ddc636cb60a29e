"""Arbitrary output variables (Mitsuba 3 ``aov``): depth, shading normal, albedo, position, uv —
the box-filtered mean over the pixel's samples. Albedo is Mitsuba's eval_diffuse_reflectance:
π · f(n, n) |cos| at normal incidence (ρ for a diffuse BSDF). In every variant: in mono the albedo is its
luminance; in spectral each sample evaluates it at the path's wavelengths under a unit white (D65) light
and the film's conversion gives its sRGB (the RGB input within the upsampling's round trip, plus
wavelength noise); the geometric outputs do not depend on the variant."""
import numpy as np
import taichi as ti

from .. import variants
from ..bsdfs.base import surface_ctx
from ..bsdfs.registry import dispatch
from ..sensors.registry import camera_ray, camera_sample
from ..core.interaction import make_interaction
from ..core.intersect import intersect
from ..core.math import PI, vec3
from ..schema import Choice

AOVS = {"depth": 0, "normal": 1, "albedo": 2, "position": 3, "uv": 4}
NAMES = ("aov",)
VARIANTS = variants.NAMES


class _Aovs(Choice):
    """A list of AOV names (or one name)."""
    kind = "list"

    def parse(self, v, file, key):
        vs = [v] if isinstance(v, str) else v
        if not isinstance(vs, list) or not vs:
            from ..errors import ConfigError
            raise ConfigError(f"expected an AOV name or a list of them ({', '.join(AOVS)})", file, key)
        return [super(_Aovs, self).parse(x, file, key) for x in vs]


KEYS = (_Aovs("aovs", tuple(AOVS), default=["albedo"], doc="the first one is rendered"),)


@ti.kernel
def aov_kernel(st: ti.template(), bsdf: ti.template(), cam: ti.i32, code: ti.i32, spp: ti.i32, seed: ti.u32):
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        acc = vec3(0.0)
        for s in range(spp):
            sampler, pos, ap = camera_sample(st, cam, pix, seed, s)
            lam, lw = variants.sample_wavelengths(sampler)
            o, d, tmax = camera_ray(st, cam, pos, ap)
            tri, t, b1, b2, inst = intersect(st, o, d, tmax)
            si = make_interaction(st, tri, t, b1, b2, o, d, inst)
            v = vec3(0.0)
            if si.valid == 1:
                if code == 0:
                    v = vec3(t)
                elif code == 1:
                    v = si.n
                elif code == 2:
                    n = vec3(0.0, 0.0, 1.0)
                    f = PI * bsdf.eval(st, surface_ctx(st.shape_bsdf[si.shape], si, lam), n, n)
                    v = variants.to_rgb(f * variants.emission(vec3(1.0), lam), lam, lw)
                elif code == 3:
                    v = si.p
                else:
                    v = vec3(si.uv[0], si.uv[1], 0.0)
            acc += v
        st.aux[pix] = ti.Vector([acc[0], acc[1], acc[2], 1.0])


def render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, clear=True):
    st = scene.bind()
    s = scene.sensors[sensor]
    aov_kernel(st, dispatch(scene.bsdf_levels), sensor, AOVS[scene.integrator.get("aovs", ["albedo"])[0]], spp,
               int(seed) & 0xFFFFFFFF)
    img = st.aux.to_numpy()[:s.width * s.height, :3] / max(spp, 1)
    return img.reshape(s.height, s.width, 3).astype(np.float32)
