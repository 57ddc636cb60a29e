"""Environment map (latitude-longitude, Mitsuba 3's ``envmap`` convention), importance sampled by luminance.

Direction d (world) -> local v = R d (R = em_rot, world -> emitter); u = atan2(v.x, -v.z)/(2π) (wrapped
to [0,1)), v = θ/π with θ = acos(v.y). As in Mitsuba 3: columns are texel-centred and periodic (column x
at u = (x + 0.5)/W), rows are corner-aligned and clamped (row j at θ = πj/(H - 1): row 0 is the zenith
+y, row H-1 the nadir); radiance is bilinear between them. Maps smaller than 2 x 3 are padded by edge
replication (Mitsuba's ``pad_to``).

Sampling (Mitsuba's ``Hierarchical2D<0>`` density, not its warp): the luminance·sinθ of every texel is a
vertex of a (W + 1) x H grid (column W repeats column 0) over the unit square (u - 0.5/W, v); the density
is its bilinear interpolation, normalised, so pdf(d) = bilerp / (I · 2π² sinθ) follows the radiance's own
bilinear shape. ``st.env_dist`` at ``st.em_dist[e]`` holds [W, H, I], the marginal CDF over the H - 1
patch rows (H values), the conditional CDFs over the W patch columns (H - 1 rows of W + 1), and the
vertex weights (H rows of W + 1). A patch is picked discretely, then a point inside it from the bilinear
density. The distribution is a detached sampling density; differentiable: the texels (adjoint = bilinear
texture adjoint), and the radiance along a moving direction (``eval_grad``: attached PRB).
"""
import numpy as np
import taichi as ti

from .. import variants
from ..core import pool
from ..core.math import BIG, INV_PI, INV_TWO_PI, PI, vec2, vec3
from ..errors import ConfigError
from ..schema import Integer, Number, String, Transform, Vec3
from ..textures import tex_corner, tex_eval, tex_eval_adjoint, tex_grad_uv
from .base import INFINITE, DirectionSample, cdf_search, dist_header, infinite_ray

MIN_WIDTH, MIN_HEIGHT = 2, 3  # Mitsuba's Bitmap::pad_to in its envmap


@ti.func
def dir_to_uv(st: ti.template(), e, d):
    """World direction -> (u, v = θ/π) of emitter e."""
    v = st.em_rot[e] @ d
    u = ti.atan2(v[0], -v[2]) * INV_TWO_PI
    u = u - ti.floor(u)
    th = ti.acos(ti.min(ti.max(v[1], -1.0), 1.0))
    return vec2(u, th * INV_PI)


@ti.func
def _tex_uv(st: ti.template(), tid, uvm):
    """(u, v = θ/π) -> texture uv (textures.py: texel centres at (x + 0.5)/W, v = 0 the top row) so that
    row j sits at v = j/(H - 1) (corner-aligned, clamped)."""
    h = ti.cast(st.tex_h[tid], float)
    v = ti.min(ti.max(uvm[1], 0.0), 1.0)
    return vec2(uvm[0], (v * ti.max(h - 1.0, 0.0) + 0.5) / h)


@ti.func
def _lifted(st: ti.template(), tid, uv, lam):
    """(Σ_k w_k S_k (per lane), Σ_k w_k f_k) over the four texels of the lookup at uv: each texel's normalised
    spectrum S_k = S(c(rgb_k / f_k), λ) and scale f_k = 2 max(rgb_k) (Mitsuba's envmap in the spectral variants)."""
    S = variants.spec(0.0)
    F = 0.0
    for k in range(4):                 # a runtime loop: one upsampling in the megakernel
        off, wt = tex_corner(st, tid, uv, k)
        if wt != 0.0:
            s, f = variants.texel_spectrum(pool.value(st, off, st.tex_c[tid]), lam)
            S += wt * s
            F += wt * f
    return S, F


@ti.func
def _layout(st: ti.template(), e):
    """(base, W, H, marginal, conditional, vertex) offsets of emitter e's distribution."""
    base, w, h = dist_header(st, e)
    marg = base + 3
    cond = marg + h
    vert = cond + (h - 1) * (w + 1)
    return base, w, h, marg, cond, vert


@ti.func
def _bilerp(st: ti.template(), vert, w, x, y, fx, fy):
    f00 = st.env_dist[vert + y * (w + 1) + x]
    f10 = st.env_dist[vert + y * (w + 1) + x + 1]
    f01 = st.env_dist[vert + (y + 1) * (w + 1) + x]
    f11 = st.env_dist[vert + (y + 1) * (w + 1) + x + 1]
    return (1.0 - fy) * ((1.0 - fx) * f00 + fx * f10) + fy * ((1.0 - fx) * f01 + fx * f11)


@ti.func
def _pdf_uv(st: ti.template(), e, uvm):
    """Density of the sampling distribution over (u, v) in [0,1]² (bilinear over the vertex grid)."""
    base, w, h, marg, cond, vert = _layout(st, e)
    wf = ti.cast(w, float)
    uw = uvm[0] - 0.5 / wf
    uw = uw - ti.floor(uw)
    px = uw * wf
    py = ti.min(ti.max(uvm[1], 0.0), 1.0) * ti.cast(h - 1, float)
    x = ti.min(ti.cast(ti.floor(px), ti.i32), w - 1)
    y = ti.min(ti.cast(ti.floor(py), ti.i32), h - 2)
    return _bilerp(st, vert, w, x, y, px - x, py - y) / ti.max(st.env_dist[base + 2], 1e-30)


@ti.func
def _sample_linear(a, b, u):
    """t in [0,1] with density ∝ (1 - t)·a + t·b (a, b >= 0)."""
    t = u
    if a + b > 0.0:
        t = u * (a + b) / (a + ti.sqrt(ti.max((1.0 - u) * a * a + u * b * b, 0.0)))
    return ti.min(ti.max(t, 0.0), 1.0)


class Envmap:
    NAME = "envmap"
    KEYS = (String("filename", default=None, doc="lat-long image (EXR, HDR, PFM, PNG, ...; `<id>.radiance`)"),
            String("data", default=None, doc="or a .npy array (H, W, 3) of radiance"),
            Integer("width", default=None, lo=1, hi=1 << 15, doc="or a constant map of this size"),
            Integer("height", default=None, lo=1, hi=1 << 15, doc="its height (default width / 2)"),
            Vec3("radiance", default=None, lo=0.0, doc="value of a constant map (RGB)"),
            Number("scale", default=1.0, lo=0.0, doc="multiplies the radiance"),
            Transform("to_world", default=None, doc="orientation of the map"))
    FLAGS = INFINITE

    @staticmethod
    def distribution(img):
        """The sampling distribution of radiance map img (H, W, 3), stored in st.env_dist at st.em_dist[e]."""
        return build_distribution(img)

    @staticmethod
    def build(b, row, values, key):
        if "filename" in values:
            # Mitsuba's envmap: Bitmap(filename).convert(RGB, float, srgb_gamma=false): integer files
            # decoded from sRGB, float files (EXR, HDR, PFM) linear, alpha dropped (tirender.io.images)
            tspec = {"filename": values["filename"], "wrap": "repeat"}
        elif "data" in values:
            tspec = {"data": values["data"]}
        elif "width" in values:
            tspec = {"width": values["width"], "height": values.get("height", max(values["width"] // 2, 1)),
                     "value": [float(x) for x in values["radiance"]] if values.get("radiance") is not None else 1.0}
        else:
            raise ConfigError("an envmap needs 'filename', 'data' or 'width'/'height'", b.file, key)
        tex = b.texture(tspec, f"{row.id}.radiance", 3, 0.0, np.inf, key)
        b.textures[tex].data = pad(b.textures[tex].data * np.float32(values["scale"]))
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
        return tex_eval(st, st.em_tex[e, 0], _tex_uv(st, st.em_tex[e, 0], dir_to_uv(st, e, d)))

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        d = q.d
        tex_eval_adjoint(st, st.em_tex[e, 0], _tex_uv(st, st.em_tex[e, 0], dir_to_uv(st, e, d)), d_le)

    # The spectral variants (emitters/registry.py uses these instead of upsampling the interpolated RGB), as
    # Mitsuba's envmap (eval_spectrum): every texel stores its normalised spectrum S_k = S(c(rgb_k / f_k), λ) and
    # scale f_k = 2 max(rgb_k); the lookup interpolates the spectra and the scales separately and multiplies,
    # Le(λ) = (Σ w_k S_k)(Σ w_k f_k) W(λ) (W: D65 for an RGB emitter), which differs from the spectrum of the
    # interpolated RGB wherever neighbouring texels' colours differ. (The light tracer's emission and attached PRB's
    # ∂Le/∂direction still take the interpolated RGB's spectrum: emitters/registry.py sample_ray, eval_grad.)
    @staticmethod
    @ti.func
    def eval_spectral(st: ti.template(), e, d, lam):
        """Le along direction d at wavelengths lam (per lane)."""
        tid = st.em_tex[e, 0]
        S, F = _lifted(st, tid, _tex_uv(st, tid, dir_to_uv(st, e, d)), lam)
        return S * F * variants.emission_white(lam, st.em_spec[e], st.em_temp[e])

    @staticmethod
    @ti.func
    def eval_spectral_adjoint(st: ti.template(), e, d, lam, d_le):
        """Scatter ∂<d_le, eval_spectral(d, λ)>/∂texels into the pool (forward mode: its tangent, core/pool.py):
        with dd = d_le W, ∂/∂S_k = w_k F dd and ∂/∂f_k = w_k <dd, S> (variants.texel_spectrum_adjoint)."""
        tid = st.em_tex[e, 0]
        uv = _tex_uv(st, tid, dir_to_uv(st, e, d))
        c = st.tex_c[tid]
        S, F = _lifted(st, tid, uv, lam)
        dd = d_le * variants.emission_white(lam, st.em_spec[e], st.em_temp[e])
        dS = dd.dot(S)
        for k in range(4):
            off, wt = tex_corner(st, tid, uv, k)
            if wt != 0.0:
                g = variants.texel_spectrum_adjoint(pool.value(st, off, c), lam, wt * F * dd, wt * dS)
                pool.add_gradient(st, off, c, g)

    @staticmethod
    @ti.func
    def eval_grad(st: ti.template(), e, q, w):
        """(0, ∂<w, Le>/∂d): the bilinear texture's slope chained through (u, v) = (atan2(x, -z)/2π,
        acos(y)/π) of the local direction R d and the row mapping (v (H - 1) + 0.5)/H."""
        tid = st.em_tex[e, 0]
        R = st.em_rot[e]
        v = R @ q.d
        uvm = dir_to_uv(st, e, q.d)
        du, dv = tex_grad_uv(st, tid, _tex_uv(st, tid, uvm))
        gu = w.dot(du)
        gv = 0.0
        if 0.0 < uvm[1] < 1.0:
            h = ti.cast(st.tex_h[tid], float)
            gv = w.dot(dv) * ti.max(h - 1.0, 0.0) / h
        g_loc = vec3(0.0)
        r2 = v[0] * v[0] + v[2] * v[2]
        if r2 > 1e-20:
            g_loc += (gu * INV_TWO_PI / r2) * vec3(-v[2], 0.0, v[0])
        sy = 1.0 - v[1] * v[1]
        if sy > 1e-20:
            g_loc[1] += -gv * INV_PI / ti.sqrt(sy)
        g_d = R.transpose() @ g_loc
        return vec2(0.0), g_d - q.d * q.d.dot(g_d)      # Le depends on the direction only

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        ds = DirectionSample(delta=0, emitter=e, scale=1.0, dist=BIG)
        tid = st.em_tex[e, 0]
        base, w, h, marg, cond, vert = _layout(st, e)
        row = cdf_search(st, marg, h - 1, u[1])
        c0 = st.env_dist[marg + row]
        c1 = st.env_dist[marg + row + 1]
        fv = ti.min(ti.max((u[1] - c0) / ti.max(c1 - c0, 1e-20), 0.0), 0.99999)
        cb = cond + row * (w + 1)
        col = cdf_search(st, cb, w, u[0])
        d0 = st.env_dist[cb + col]
        d1 = st.env_dist[cb + col + 1]
        fu = ti.min(ti.max((u[0] - d0) / ti.max(d1 - d0, 1e-20), 0.0), 0.99999)
        f00 = st.env_dist[vert + row * (w + 1) + col]
        f10 = st.env_dist[vert + row * (w + 1) + col + 1]
        f01 = st.env_dist[vert + (row + 1) * (w + 1) + col]
        f11 = st.env_dist[vert + (row + 1) * (w + 1) + col + 1]
        ty = _sample_linear(f00 + f10, f01 + f11, fv)
        tx = _sample_linear((1.0 - ty) * f00 + ty * f01, (1.0 - ty) * f10 + ty * f11, fu)
        wf = ti.cast(w, float)
        uu = (col + tx + 0.5) / wf
        uvm = vec2(uu - ti.floor(uu), (row + ty) / ti.cast(h - 1, float))
        th = uvm[1] * PI
        ph = uvm[0] * 2.0 * PI
        st_ = ti.sin(th)
        vloc = vec3(ti.sin(ph) * st_, ti.cos(th), -ti.cos(ph) * st_)
        d = st.em_rot[e].transpose() @ vloc
        ds.d = d
        ds.n = -d
        ds.p = ref_p + d * 1e6
        ds.uv = _tex_uv(st, tid, uvm)
        if st_ > 1e-7:
            pdf_uv = _bilerp(st, vert, w, col, row, tx, ty) / ti.max(st.env_dist[base + 2], 1e-30)
            ds.pdf = pdf_uv / (2.0 * PI * PI * st_)
        if ds.pdf > 0.0:
            ds.le_rgb = tex_eval(st, tid, ds.uv)
            ds.weight_rgb = ds.le_rgb / ds.pdf
        return ds

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A direction by the map's luminance, from a disk covering the scene's bounding sphere
        (base.infinite_ray)."""
        return infinite_ray(Envmap, st, e, u_pos, u_dir, center, radius)


def pad(img):
    """Mitsuba's envmap padding: at least MIN_WIDTH columns and MIN_HEIGHT rows, by edge replication."""
    h, w = img.shape[:2]
    if h >= MIN_HEIGHT and w >= MIN_WIDTH:
        return img
    img = np.concatenate([img, np.repeat(img[:, -1:], max(MIN_WIDTH - w, 0), axis=1)], axis=1)
    return np.concatenate([img, np.repeat(img[-1:], max(MIN_HEIGHT - h, 0), axis=0)], axis=0)


def build_distribution(img):
    """numpy (H, W, 3) radiance -> flat float32 array (layout in the module docstring)."""
    img = pad(np.asarray(img, np.float64).reshape(img.shape[0], img.shape[1], -1))
    h, w = img.shape[:2]
    if img.shape[2] >= 3:
        lum = 0.212671 * img[..., 0] + 0.715160 * img[..., 1] + 0.072169 * img[..., 2]
    else:
        lum = img[..., 0]
    sin_t = np.sin(np.arange(h) / (h - 1) * np.pi)[:, None]
    vert = np.maximum(lum, 0) * sin_t
    vert = vert + 1e-3 * max(vert.mean(), 1e-12) * sin_t  # keep every direction sampleable
    vert = np.concatenate([vert, vert[:, :1]], axis=1)    # column W repeats column 0 (periodic)
    patch = 0.25 * (vert[:-1, :-1] + vert[:-1, 1:] + vert[1:, :-1] + vert[1:, 1:])  # (H-1, W)
    row_sum = patch.sum(axis=1)
    cond = np.zeros((h - 1, w + 1))
    cond[:, 1:] = np.cumsum(patch, axis=1) / np.maximum(row_sum, 1e-300)[:, None]
    cond[:, -1] = 1.0
    marg = np.zeros(h)
    marg[1:] = np.cumsum(row_sum) / row_sum.sum()
    marg[-1] = 1.0
    integral = patch.sum() / (w * (h - 1))  # ∫ bilerp over the unit square
    return np.concatenate([[w, h, integral], marg, cond.ravel(), vert.ravel()]).astype(np.float32)
