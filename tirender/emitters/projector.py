"""Projection light (Mitsuba 3 ``projector``, src/emitters/projector.cpp): a point light at the origin of
``to_world`` that projects its ``irradiance`` texture along +z through a pinhole, the reciprocal of the
perspective camera (the same uv <-> direction mapping, fov and fov_axis).

A point p with emitter-local coordinates (x, y, z) = to_world⁻¹ p, z > 0, sees the texture at

    u = 1/2 - x / (2 z tan(fov_x/2)),    v = 1/2 - y / (2 z tan(fov_y/2)),    tan(fov_y/2) = tan(fov_x/2) / aspect

(aspect = the texture's width / height; u grows to the image's right = local -x, v downwards = local -y;
black outside [0,1]²), and receives (Mitsuba's sample_direction; a Dirac in position, pdf 1, never hit)

    Le/pdf = π · scale · E(u, v) / (z² cos θ),   cos θ = z / dist,

so that a plane at z = 1 facing the light receives the irradiance π · scale · E(u, v) (W m⁻²). The
light tracer's ray (``sample_ray``): uv by the texture's luminance (the texel by a discrete 2D
distribution, with a floor of 1e-3 of the mean luminance so that no texel is left out; then a tent of
one texel's half-width about its centre for bilinear lookups, as Mitsuba's bitmap ``sample_position``;
reflected at clamped borders, wrapped at repeating ones), the direction through that point of the
image plane, weight π · scale · E(uv) · A / pdf(uv) with A = 4 tan(fov_x/2)
tan(fov_y/2) the image plane's area at z = 1. The distribution (``distribution``: detached, rebuilt
from the texture when it is set on the host) lives in st.env_dist at st.em_dist[e]: [W, H, marginal CDF
over the H rows (H + 1 values), conditional CDFs over each row's W texels (H rows of W + 1)].

Differentiable (Mitsuba's ``traverse``): the irradiance texture (RGB; its adjoint scatters through the
bilinear lookup) and scale (a scalar pool parameter). fov and to_world are constants. to_world: rotation
and translation only (under a scale, Mitsuba's NEE and light tracing disagree: refused).
Spectral variants (as Mitsuba's ``get_emissive_texture``): a number or RGB irradiance is a D65-scaled
emitter spectrum, a bitmap is upsampled without D65 (Mitsuba keeps a bitmap texture as it is: a grey
0.5 bitmap is a flat spectrum of 0.5).
"""
import numpy as np
import taichi as ti

from .. import variants
from ..core.math import LUMINANCE, PI, vec2, vec3
from ..errors import ConfigError
from ..sensors import base as sensor_base
from ..schema import Texture, Transform
from ..textures import tex_grad_uv
from .base import DeltaEmitter, cdf_search, dist_header, slot, slot_adjoint
from .point import lit, point_source

_IRRADIANCE, _SCALE = 0, 1
# st.em_f[e, k]: tan(fov_x / 2), tan(fov_y / 2), the image plane's area at z = 1
_TAN_X, _TAN_Y, _AREA = 0, 1, 2


@ti.func
def _interval_to_tent(u):
    """Mitsuba's warp::interval_to_tent: u in [0, 1] -> [-1, 1] with density 1 - |t|."""
    s = u - 0.5
    t = 1.0 - ti.sqrt(ti.max(1.0 - 2.0 * ti.abs(s), 0.0))
    return t if s >= 0.0 else -t


@ti.func
def _wrap(i, n, repeat):
    """Texel index i wrapped (repeat) or clamped into [0, n)."""
    r = ti.min(ti.max(i, 0), n - 1)
    if repeat:
        r = i % n
        if r < 0:
            r += n
    return r


class Projector(DeltaEmitter):
    NAME = "projector"
    KEYS = (Texture("irradiance", 3, default=1.0, lo=0.0,
                    doc="irradiance E on the image plane at z = 1 (a plane there receives π · scale · E, W m⁻²): "
                        "RGB, a number or a bitmap (its aspect ratio is the projection's)"),
            Texture("scale", 1, default=1.0, lo=0.0, doc="factor on the irradiance (a differentiable scalar)"),
            *sensor_base.FOV_KEYS,     # Mitsuba's parse_fov, as its perspective camera (neither given: 50mm here)
            Transform("to_world", default=None,
                      doc="position (origin) and orientation (+z the optical axis, +y the image's up; e.g. "
                          "look_at); rotation and translation only"))

    @staticmethod
    def build(b, row, values, key):
        tex = b.textures[row.tex[_IRRADIANCE]]
        h, w = tex.data.shape[-3:-1]
        if tex.to_uv is not None:
            a = np.asarray(tex.to_uv, np.float64)
            corners = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], np.float64)
            img = corners @ a[:, :2].T + a[:, 2]
            if not all(np.abs(img - c).sum(1).min() < 1e-6 for c in corners):
                raise ConfigError("a projector's irradiance texture may only flip, transpose or rotate by "
                                  "multiples of 90 degrees in to_uv (as Mitsuba: its texels are sampled)", b.file,
                                  f"{key}.irradiance.to_uv")
        fov = dict(values)
        if fov.get("fov") is None and fov.get("focal_length") is None:
            fov["focal_length"] = 50.0                 # Mitsuba's parse_fov default (YAML and XML alike)
        tan_x, tan_y = sensor_base.tan_half(sensor_base.parse_fov(fov, w / h, b.file, key), w / h)
        m = values.get("to_world")
        m = np.eye(4) if m is None else np.asarray(m, np.float64)
        lin = m[:3, :3]
        if np.abs(lin.T @ lin - np.eye(3)).max() > 1e-5:
            raise ConfigError("a projector's to_world must be a rotation and translation (no scale or shear)",
                              b.file, f"{key}.to_world")
        row.to_world = m
        row.position = tuple(float(x) for x in m[:3, 3])
        row.direction = tuple(float(x) for x in lin[:, 2] / np.linalg.norm(lin[:, 2]))
        row.floats = [tan_x, tan_y, 4.0 * tan_x * tan_y]
        if isinstance(values["irradiance"], dict) and row.spectrum == variants.SPECTRUM_RGB:
            # Mitsuba takes a bitmap as it is (its own spectral upsampling, no D65; a number or an RGB
            # value becomes a d65 spectrum): the uniform kind, rgb upsampled without D65
            row.spectrum = variants.SPECTRUM_UNIFORM

    @staticmethod
    def distribution(img):
        """The texels' sampling distribution (luminance, as Mitsuba's bitmap, plus 1e-3 of its mean) of
        irradiance img (H, W, C): float32 [W, H, marginal CDF (H + 1), conditional CDFs (H x (W + 1))]."""
        img = np.asarray(img, np.float64)
        img = img.reshape(img.shape[0], img.shape[1], -1)
        h, w = img.shape[:2]
        lum = np.maximum(img[..., :3] @ np.asarray(LUMINANCE, np.float64) if img.shape[2] >= 3 else img[..., 0],
                         0.0)
        # every texel keeps a little probability (as the envmap's distribution): an optimiser that writes
        # the texels on the device leaves this distribution stale, and stale stays unbiased
        lum = lum + 1e-3 * max(lum.mean(), 1e-12)
        rows = lum.sum(1)
        cond = np.zeros((h, w + 1))
        cond[:, 1:] = np.cumsum(lum, 1) / rows[:, None]
        cond[:, -1] = 1.0
        marg = np.concatenate([[0.0], np.cumsum(rows) / rows.sum()])
        marg[-1] = 1.0
        return np.concatenate([[w, h], marg, cond.ravel()]).astype(np.float32)

    @staticmethod
    @ti.func
    def _layout(st: ti.template(), e):
        """(W, H, marginal CDF, conditional CDFs) offsets of emitter e's distribution."""
        base, w, h = dist_header(st, e)
        return w, h, base + 2, base + 3 + h

    @staticmethod
    @ti.func
    def _pmf(st: ti.template(), marg, cond, w, x, y):
        """Probability of texel (x, y) (the CDFs' differences: exactly what the sampler picks)."""
        cb = cond + y * (w + 1)
        return (st.env_dist[marg + y + 1] - st.env_dist[marg + y]) * (st.env_dist[cb + x + 1] - st.env_dist[cb + x])

    @staticmethod
    @ti.func
    def pdf_texture(st: ti.template(), e, s):
        """Density (per unit texture-space area) of Projector.sample_texture producing s: the bilinear
        interpolation of the texel probabilities (nearest: the texel's) times W·H (Mitsuba's pdf_texture)."""
        w, h, marg, cond = Projector._layout(st, e)
        tid = st.em_tex[e, _IRRADIANCE]
        repeat = st.tex_wrap[tid] == 0
        res = 0.0
        if st.tex_bilinear[tid] == 1:
            px = s[0] * w - 0.5
            py = s[1] * h - 0.5
            x = ti.cast(ti.floor(px), ti.i32)
            y = ti.cast(ti.floor(py), ti.i32)
            fx = px - x
            fy = py - y
            x0 = _wrap(x, w, repeat)
            x1 = _wrap(x + 1, w, repeat)
            y0 = _wrap(y, h, repeat)
            y1 = _wrap(y + 1, h, repeat)
            res = (1.0 - fy) * ((1.0 - fx) * Projector._pmf(st, marg, cond, w, x0, y0)
                                + fx * Projector._pmf(st, marg, cond, w, x1, y0)) \
                + fy * ((1.0 - fx) * Projector._pmf(st, marg, cond, w, x0, y1)
                        + fx * Projector._pmf(st, marg, cond, w, x1, y1))
        else:
            x = _wrap(ti.cast(ti.floor(s[0] * w), ti.i32), w, repeat)
            y = _wrap(ti.cast(ti.floor(s[1] * h), ti.i32), h, repeat)
            res = Projector._pmf(st, marg, cond, w, x, y)
        return res * ti.cast(w * h, float)

    @staticmethod
    @ti.func
    def sample_texture(st: ti.template(), e, u):
        """(uv, pdf): a lookup position of the irradiance texture by its luminance (Mitsuba's bitmap
        sample_position): the row by the marginal CDF (u[1]), the texel by its row's CDF (u[0]), the
        remainders placed by a tent about the texel's centre (bilinear) or uniformly in it (nearest).
        pdf per unit uv area (to_uv only permutes the unit square's corners: Jacobian 1)."""
        w, h, marg, cond = Projector._layout(st, e)
        tid = st.em_tex[e, _IRRADIANCE]
        y = cdf_search(st, marg, h, u[1])
        c0 = st.env_dist[marg + y]
        fv = ti.min(ti.max((u[1] - c0) / ti.max(st.env_dist[marg + y + 1] - c0, 1e-20), 0.0), 0.99999994)
        cb = cond + y * (w + 1)
        x = cdf_search(st, cb, w, u[0])
        d0 = st.env_dist[cb + x]
        fu = ti.min(ti.max((u[0] - d0) / ti.max(st.env_dist[cb + x + 1] - d0, 1e-20), 0.0), 0.99999994)
        res = vec2(ti.cast(w, float), ti.cast(h, float))
        s = vec2(0.0)
        if st.tex_bilinear[tid] == 1:
            s = (vec2(x + 0.5, y + 0.5) + vec2(_interval_to_tent(fu), _interval_to_tent(fv))) / res
            for k in ti.static(range(2)):
                if st.tex_wrap[tid] == 0:
                    if s[k] < 0.0:
                        s[k] += 1.0
                    elif s[k] > 1.0:
                        s[k] -= 1.0
                else:
                    if s[k] < 0.0:
                        s[k] = -s[k]
                    elif s[k] > 1.0:
                        s[k] = 2.0 - s[k]
        else:
            s = (vec2(x, y) + vec2(fu, fv)) / res
        pdf = Projector.pdf_texture(st, e, s)
        A = st.tex_uvm[tid]                      # texture space s = A (uv, 1): uv = A₂⁻¹ (s - b)
        det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
        r = s - vec2(A[0, 2], A[1, 2])
        uv = vec2(A[1, 1] * r[0] - A[0, 1] * r[1], -A[1, 0] * r[0] + A[0, 0] * r[1]) / det
        return uv, pdf

    @staticmethod
    @ti.func
    def uv_of(st: ti.template(), e, loc):
        """(uv, inside) of the emitter-local point loc (the perspective projection)."""
        z = loc[2]
        uv = vec2(0.5)
        inside = False
        if z > 0.0:
            uv = vec2(0.5 - 0.5 * loc[0] / (z * st.em_f[e, _TAN_X]), 0.5 - 0.5 * loc[1] / (z * st.em_f[e, _TAN_Y]))
            inside = uv[0] >= 0.0 and uv[0] <= 1.0 and uv[1] >= 0.0 and uv[1] <= 1.0
        return uv, inside

    @staticmethod
    @ti.func
    def sample_direction(st: ti.template(), e, ref_p, u):
        """Towards the light from ref_p: Le/pdf = π scale E(uv) / (z² cos θ) (0 outside the frustum)."""
        ds, dist2 = point_source(st, e, ref_p)
        if ds.dist > 0.0:
            loc = st.em_rot[e] @ (ref_p - st.em_pos[e])
            uv, inside = Projector.uv_of(st, e, loc)
            if inside:
                ds.uv = uv
                ds.scale = PI * ds.dist / (loc[2] * loc[2] * loc[2])      # π / (z² cos θ), cos θ = z / dist
                ds = lit(ds, Projector.eval(st, e, ds))
        return ds

    @staticmethod
    @ti.func
    def eval(st: ti.template(), e, q):
        """E(q.uv) · scale · q.scale (q.scale: the sample's geometric factor; 1 for a light-tracing ray)."""
        return slot(st, e, _IRRADIANCE, q.uv) * (slot(st, e, _SCALE, q.uv)[0] * q.scale)

    @staticmethod
    @ti.func
    def ref_grad(st: ti.template(), e, q, w):
        """∂<w, Le>/∂ref_p of sample q inside the frustum, Le = E(uv(ℓ)) scale π dist / z³ with ℓ = R (ref_p - o)
        the point in the projector's frame, z = ℓ_z: the geometric factor's and the texture's (through uv_of)."""
        g = vec3(0.0)
        if q.scale > 0.0:
            R = st.em_rot[e]
            loc = R @ (-q.dist * q.d)                # ref_p - the light's position
            z = ti.max(loc[2], 1e-20)
            s = slot(st, e, _SCALE, q.uv)[0]
            G = PI * q.dist / (z * z * z)
            ez = R.transpose() @ vec3(0.0, 0.0, 1.0)
            g = w.dot(slot(st, e, _IRRADIANCE, q.uv)) * s * PI * (-q.d / (z * z * z) - 3.0 * q.dist / (z * z * z * z) * ez)
            du, dv = tex_grad_uv(st, st.em_tex[e, _IRRADIANCE], q.uv)
            gu = w.dot(du) * s * G
            gv = w.dot(dv) * s * G
            tx = st.em_f[e, _TAN_X]
            ty = st.em_f[e, _TAN_Y]
            g += R.transpose() @ vec3(-0.5 * gu / (z * tx), -0.5 * gv / (z * ty),
                                      0.5 * (gu * loc[0] / tx + gv * loc[1] / ty) / (z * z))
        return g

    @staticmethod
    @ti.func
    def eval_adjoint(st: ti.template(), e, q, d_le):
        s = slot(st, e, _SCALE, q.uv)[0]
        slot_adjoint(st, e, _IRRADIANCE, q.uv, d_le * (s * q.scale))
        slot_adjoint(st, e, _SCALE, q.uv, vec3(d_le.dot(slot(st, e, _IRRADIANCE, q.uv)) * q.scale, 0.0, 0.0))

    @staticmethod
    @ti.func
    def sample_ray(st: ti.template(), e, u_pos, u_dir, center, radius):
        """A texture position by luminance (sample_texture) and the direction through it: weight
        π scale E(uv) A / pdf(uv)."""
        uv, pdf = Projector.sample_texture(st, e, u_dir)
        loc = vec3((1.0 - 2.0 * uv[0]) * st.em_f[e, _TAN_X], (1.0 - 2.0 * uv[1]) * st.em_f[e, _TAN_Y], 1.0)
        d = (st.em_rot[e].transpose() @ loc).normalized()
        w = vec3(0.0)
        if pdf > 0.0:
            w = slot(st, e, _IRRADIANCE, uv) * (slot(st, e, _SCALE, uv)[0] * PI * st.em_f[e, _AREA] / pdf)
        return st.em_pos[e], d, vec3(0.0), uv, w, 0.0

