"""Environment map (latitude-longitude, Mitsuba 3 convention), importance sampled by luminance.

Direction d (world) -> local v = R d (R = em_rot, world -> emitter); u = atan2(v.x, -v.z)/(2π)
(wrapped to [0,1)), θ = acos(v.y), image row = θ/π·H (row 0 at the top = +y). Sampling uses a
piecewise-constant 2D distribution over texels with weights luminance·sinθ, stored in
``st.env_dist`` at ``st.em_dist[e]``: marginal CDF over rows (H+1 values), then one conditional
CDF over columns per row (W+1 values each). The distribution is a detached sampling density;
differentiable: the texels (adjoint = bilinear texture adjoint).
"""
import numpy as np
import taichi as ti

from ..core.math import BIG, INV_PI, INV_TWO_PI, PI, vec2, vec3
from ..errors import ConfigError
from ..schema import Integer, Number, String, Transform, Vec3
from ..textures import tex_eval, tex_eval_adjoint
from .base import INFINITE, DirectionSample


@ti.func
def _search(st: ti.template(), base, n, u):
    """Largest i in [0, n) with cdf[base + i] <= u (cdf has n + 1 entries, cdf[0] = 0)."""
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if st.env_dist[base + mid] <= u:
            lo = mid
        else:
            hi = mid - 1
    return lo


@ti.func
def dir_to_uv(st: ti.template(), e, d):
    v = st.em_rot[e] @ d
    u = ti.atan2(v[0], -v[2]) * INV_TWO_PI
    u = u - ti.floor(u)
    th = ti.acos(ti.min(ti.max(v[1], -1.0), 1.0))
    return vec2(u, th * INV_PI)


@ti.func
def _tex_uv(uvm):
    """(u, v = θ/π) -> texture uv (v = 0 is the top row, textures.py): row j centred at θ = π(j + 0.5)/H.
    (Mitsuba 3 places row j at θ = πj/(H-1) and clamps at the poles; see docs/mitsuba.md.)"""
    return uvm


@ti.func
def _pdf_uv(st: ti.template(), e, uvm):
    tid = st.em_tex[e, 0]
    w = st.tex_w[tid]
    h = st.tex_h[tid]
    base = st.em_dist[e]
    row = ti.min(ti.cast(uvm[1] * h, ti.i32), h - 1)
    col = ti.min(ti.cast(uvm[0] * w, ti.i32), w - 1)
    pm = st.env_dist[base + row + 1] - st.env_dist[base + row]
    cb = base + h + 1 + row * (w + 1)
    pc = st.env_dist[cb + col + 1] - st.env_dist[cb + col]
    return pm * pc * w * h


class Envmap:
    NAME = "envmap"
    KEYS = (String("filename", default=None, doc="latitude-longitude image (EXR/PNG/...; `<id>.radiance`)"),
            String("data", default=None, doc="or a .npy array (H, W, 3) of radiance"),
            Integer("width", default=None, lo=1, hi=1 << 15, doc="or a constant map of this size"),
            Integer("height", default=None, lo=1, hi=1 << 15, doc="its height (default width / 2)"),
            Vec3("radiance", default=None, lo=0.0, doc="value of a constant map (RGB)"),
            Number("scale", default=1.0, lo=0.0, doc="multiplies the radiance"),
            Transform("to_world", default=None, doc="orientation of the map"))
    FLAGS = INFINITE

    @staticmethod
    def build(b, row, values, key):
        if "filename" in values:
            low = values["filename"].lower()
            tspec = {"filename": values["filename"], "srgb": low.endswith((".png", ".jpg", ".jpeg")), "wrap": "repeat"}
        elif "data" in values:
            tspec = {"data": values["data"]}
        elif "width" in values:
            tspec = {"width": values["width"], "height": values.get("height", max(values["width"] // 2, 1)),
                     "value": [float(x) for x in values["radiance"]] if values.get("radiance") is not None else 1.0}
        else:
            raise ConfigError("an envmap needs 'filename', 'data' or 'width'/'height'", b.file, key)
        tex = b.texture(tspec, f"{row.id}.radiance", 3, 0.0, np.inf, key)
        b.textures[tex].data = b.textures[tex].data * np.float32(values["scale"])
        row.tex = [tex]
        row.to_world = values.get("to_world")

    @staticmethod
    @ti.func
    def pdf_direction(st: ti.template(), e, ref_p, q):
        d = q.d
        uvm = dir_to_uv(st, e, d)
        s = ti.sin(uvm[1] * PI)
        res = 0.0
        if s > 1e-7:
            res = _pdf_uv(st, e, uvm) / (2.0 * PI * PI * s)
        return res

    @staticmethod
    @ti.func
    def eval(st: ti.template(), e, q):
        d = q.d
        return tex_eval(st, st.em_tex[e, 0], _tex_uv(dir_to_uv(st, e, d)))

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        d = q.d
        tex_eval_adjoint(st, st.em_tex[e, 0], _tex_uv(dir_to_uv(st, e, d)), d_le)

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds = DirectionSample(delta=0, emitter=e, scale=1.0, dist=BIG)
        tid = st.em_tex[e, 0]
        w = st.tex_w[tid]
        h = st.tex_h[tid]
        base = st.em_dist[e]
        row = _search(st, base, h, u[1])
        c0 = st.env_dist[base + row]
        c1 = st.env_dist[base + row + 1]
        fv = (u[1] - c0) / ti.max(c1 - c0, 1e-20)
        cb = base + h + 1 + row * (w + 1)
        col = _search(st, cb, w, u[0])
        d0 = st.env_dist[cb + col]
        d1 = st.env_dist[cb + col + 1]
        fu = (u[0] - d0) / ti.max(d1 - d0, 1e-20)
        uvm = vec2((col + ti.min(fu, 0.99999)) / w, (row + ti.min(fv, 0.99999)) / h)
        th = uvm[1] * PI
        ph = uvm[0] * 2.0 * PI
        st_ = ti.sin(th)
        vloc = vec3(ti.sin(ph) * st_, ti.cos(th), -ti.cos(ph) * st_)
        d = st.em_rot[e].transpose() @ vloc
        ds.d = d
        ds.n = -d
        ds.p = ref_p + d * 1e6
        ds.uv = _tex_uv(uvm)
        if st_ > 1e-7:
            ds.pdf = _pdf_uv(st, e, uvm) / (2.0 * PI * PI * st_)
        if ds.pdf > 0.0:
            ds.le = tex_eval(st, tid, ds.uv)
            ds.weight = ds.le / ds.pdf
        return ds


def build_distribution(img):
    """numpy (H, W, 3) radiance -> flat float32 array [marginal CDF (H+1), conditional CDFs H*(W+1)]."""
    h, w = img.shape[:2]
    lum = 0.212671 * img[..., 0] + 0.715160 * img[..., 1] + 0.072169 * img[..., 2]
    sin_t = np.sin((np.arange(h) + 0.5) / h * np.pi)[:, None]
    wgt = np.maximum(lum, 0) * sin_t
    wgt = wgt + 1e-3 * max(wgt.mean(), 1e-12) * sin_t  # keep every direction sampleable
    row_sum = wgt.sum(axis=1)
    cond = np.zeros((h, w + 1))
    cond[:, 1:] = np.cumsum(wgt, axis=1) / row_sum[:, None]
    cond[:, -1] = 1.0
    marg = np.zeros(h + 1)
    marg[1:] = np.cumsum(row_sum) / row_sum.sum()
    marg[-1] = 1.0
    return np.concatenate([marg, cond.ravel()]).astype(np.float32)
