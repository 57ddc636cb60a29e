"""Arbitrary output variables: depth, shading normal, albedo, position, uv (box-filtered mean)."""
import taichi as ti

from ..core.camera import camera_ray
from ..core.interaction import make_interaction
from ..core.intersect import intersect
from ..core.math import BIG, vec2, vec3
from ..core.rng import make_sampler
from .shading import bsdf_params

AOVS = {"depth": 0, "normal": 1, "albedo": 2, "position": 3, "uv": 4}


def aov_code(name):
    return AOVS[name]


@ti.kernel
def aov_kernel(st: ti.template(), bm: ti.template(), cam: ti.i32, code: ti.i32, spp: ti.i32, seed: ti.u32):
    w = st.cam_w[cam]
    for pix in range(w * st.cam_h[cam]):
        acc = vec3(0.0)
        for s in range(spp):
            sampler = make_sampler(seed, pix, s)
            pos = vec2(pix % w, pix // w) + sampler.next_2d()
            o, d = camera_ray(st, cam, pos)
            tri, t, b1, b2 = intersect(st, o, d, BIG)
            si = make_interaction(st, tri, t, b1, b2, o, d)
            v = vec3(0.0)
            if si.valid == 1:
                if code == 0:
                    v = vec3(t)
                elif code == 1:
                    v = si.n
                elif code == 2:
                    p = bsdf_params(st, st.shape_bsdf[si.shape], si.uv)
                    v = p.reflectance + p.specular * 0.0
                    if st.bsdf_type[st.shape_bsdf[si.shape]] != 0 and st.bsdf_type[st.shape_bsdf[si.shape]] != 5:
                        v = p.specular
                elif code == 3:
                    v = si.p
                else:
                    v = vec3(si.uv[0], si.uv[1], 0.0)
            acc += v
        st.aux[pix] = ti.Vector([acc[0], acc[1], acc[2], 1.0])
