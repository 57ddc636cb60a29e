"""Image formation of the GRIN caustic task: collimated beams through the index grid onto screens.

A view (Mitsuba 2 §4.3, Fig. 9b) is a collimated beam of unit irradiance travelling along a unit
direction a, through a square aperture (half-size ``aperture``, scene units) centred on the box
centre, and a screen perpendicular to a at distance ``screen_distance`` beyond the box centre,
``screen_size`` wide (scene units), W × H pixels. Image axes, as seen looking along a: up = the
world +y axis projected onto the screen plane (world −z for beams along ±y), right = a × up; row 0
at the top.

Rays: the aperture is cut into R × R strata (``rays_per_side``), one ray per stratum at a jittered
position; the jitter is a hash of (seed, view, ray) — a seed fixes the rays, the image and the
gradient. Each ray starts upstream of the box, is transported by trace.py (entry refraction, RK4
through n, exit refraction; a ray that misses the box goes straight), travels straight to the
screen and deposits its power P = aperture area / R² there with a truncated Gaussian
reconstruction kernel of standard deviation σ pixels (``splat_stddev``), cut at r = 3σ and lowered
by its value there so that it reaches zero continuously:
    I[p] += P · g(c_x − p_x) · g(c_y − p_y) / (Z · A_pix),   g(t) = exp(−t²/2σ²) − exp(−r²/2σ²)
(c: pixel centre, p: hit position in pixels, Z = (∫g)², A_pix: pixel area). I is the irradiance
relative to the beam's: a beam passing straight through a homogeneous cube lights its footprint
with I ≈ 1. Rays lost to total internal reflection, to max_steps, or that leave away from the
screen deposit nothing. Images accumulate in 64-bit fixed point (deterministic). On software Vulkan
(lavapipe) integer atomics in the splat's loops lose additions (field.py's module doc): there the
image and the ray counts are float ndarrays added with float atomics (exact counts below 2²⁴ rays;
image sums not bit-reproducible run to run), and the gradient is float as well (field.py).

Adjoint (what is differentiable: the image w.r.t. every grid value): for an adjoint image Ī, each
ray's splat gives ∂/∂(hit position) = Σ_p Ī[p]·P·∇g…, which is carried to the screen hit y =
x_f + t·d_out (t = a·(c_s − x_f)/(a·d_out)), to the exit point x_f and direction d_out, and through
the replayed trace into the grid (trace.py). The forward pass is replayed inside the adjoint kernel
(the same rays, bit for bit); nothing is stored between the two launches.
"""
import math

import numpy as np
import taichi as ti

from ..core import fixed_point as fxp
from ..core.math import vec3
from ..core.rng import hash_u32
from .field import GridDesc, float_accumulation, ivec3
from .trace import OK, DROPPED, default_eps, default_max_steps, trace_ray, trace_ray_adjoint, trace_ray_ckpt, accumulate

NP = 20   # floats per view in the parameter table
NI = 4    # ints per view: rays per side R, W, H, first ray index


def screen_basis(a):
    """(right, up) unit vectors of the screen of a beam along unit a (see the module doc)."""
    a = np.asarray(a, np.float64) / np.linalg.norm(a)
    ref = np.array([0.0, 1.0, 0.0]) if abs(a[1]) < 0.9 else np.array([0.0, 0.0, -1.0])
    up = ref - (ref @ a) * a
    up /= np.linalg.norm(up)
    return np.cross(a, up), up


def splat_norm(sigma, radius):
    """Z = (∫ g)² of the truncated Gaussian kernel (pixel units)."""
    er = math.exp(-radius * radius / (2 * sigma * sigma))
    one = sigma * math.sqrt(2 * math.pi) * math.erf(radius / (sigma * math.sqrt(2))) - 2 * radius * er
    return one * one


@ti.func
def _uniform(seed, v, j, k):
    return ti.cast(hash_u32(seed, v, j, k) >> ti.u32(8), float) * (1.0 / 16777216.0)


@ti.func
def _ray(vp: ti.template(), vi: ti.template(), n_views, i, seed):
    """(view, o, d) of global ray index i."""
    v = 0
    for w in range(1, n_views):
        if i >= vi[w, 3]:
            v = w
    j = i - vi[v, 3]
    R = vi[v, 0]
    sx = j % R
    sy = j // R
    u1 = _uniform(seed, v, j, 0)
    u2 = _uniform(seed, v, j, 1)
    a = vec3(vp[v, 0], vp[v, 1], vp[v, 2])
    right = vec3(vp[v, 3], vp[v, 4], vp[v, 5])
    up = vec3(vp[v, 6], vp[v, 7], vp[v, 8])
    half = vp[v, 12]
    ax = (-1.0 + 2.0 * (ti.cast(sx, float) + u1) / ti.cast(R, float)) * half
    ay = (-1.0 + 2.0 * (ti.cast(sy, float) + u2) / ti.cast(R, float)) * half
    o = vec3(vp[v, 9], vp[v, 10], vp[v, 11]) + ax * right + ay * up - vp[v, 13] * a
    return v, o, a


@ti.func
def _screen(vp: ti.template(), vi: ti.template(), v, xf, dout):
    """(ok, px, py, t): the screen hit of the ray x_f + t·d_out in pixel coordinates."""
    a = vec3(vp[v, 0], vp[v, 1], vp[v, 2])
    sc = vec3(vp[v, 14], vp[v, 15], vp[v, 16])
    den = a.dot(dout)
    ok = den > 1e-6
    t = a.dot(sc - xf) / ti.select(ok, den, 1.0)
    ok = ok and t > 0.0
    q = xf + t * dout - sc
    ps = vp[v, 17]
    px = q.dot(vec3(vp[v, 3], vp[v, 4], vp[v, 5])) / ps + 0.5 * ti.cast(vi[v, 1], float)
    py = 0.5 * ti.cast(vi[v, 2], float) - q.dot(vec3(vp[v, 6], vp[v, 7], vp[v, 8])) / ps
    return ok, px, py, t


@ti.func
def _window(vp: ti.template(), vi: ti.template(), v, px, py, radius):
    """(W, H, splat weight, x0, y0, span): view v's screen size and the pixels a splat at (px, py)
    may touch (span × span from (x0, y0))."""
    x0 = ti.cast(ti.floor(px - radius), ti.i32)
    y0 = ti.cast(ti.floor(py - radius), ti.i32)
    span = ti.cast(ti.ceil(2.0 * radius), ti.i32) + 1
    return vi[v, 1], vi[v, 2], vp[v, 18], x0, y0, span


@ti.func
def _g(t, sigma, radius, er):
    """(g(t), e(t) = exp(−t²/2σ²)) of the truncated kernel (0 beyond the radius)."""
    e = ti.exp(-t * t / (2.0 * sigma * sigma))
    inside = ti.abs(t) < radius
    return ti.select(inside, e - er, 0.0), ti.select(inside, e, 0.0)


@ti.func
def _tap(i0, k, n, p, sigma, radius, er):
    """Pixel i = i0 + k along one axis of a splat window (n pixels, splat centre p): (i, t = i + ½ − p, g(t), e(t)),
    g = e = 0 outside the image."""
    i = i0 + k
    t = ti.cast(i, float) + 0.5 - p
    g, e = _g(t, sigma, radius, er)
    inside = 0 <= i and i < n
    return i, t, ti.select(inside, g, 0.0), ti.select(inside, e, 0.0)


@ti.kernel
def _k_project(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float,
               vp: ti.types.ndarray(), vi: ti.types.ndarray(), n_views: ti.i32, n_rays: ti.i32, seed: ti.i32,
               h: float, max_steps: ti.i32, eps: float, sigma: float, radius: float, img: ti.types.ndarray(),
               img_scale: float, stats: ti.types.ndarray()):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    er = ti.exp(-radius * radius / (2.0 * sigma * sigma))
    for i in range(n_rays):
        v, o, d = _ray(vp, vi, n_views, i, seed)
        status, xf, dout, _k = trace_ray(vals, G, o, d, h, max_steps, eps)
        ok, px, py, _t = _screen(vp, vi, v, xf, dout)
        if ti.static(float_accumulation()):   # float counts: no integer atomic on lavapipe (module doc)
            ti.atomic_add(stats[v, status], 1.0)
        else:
            ti.atomic_add(stats[v, status], 1)
        if status != DROPPED and ok:
            W, H, wgt, x0, y0, span = _window(vp, vi, v, px, py, radius)
            for yy in range(span):
                iy = y0 + yy
                if 0 <= iy and iy < H:
                    gy, _ey = _g(ti.cast(iy, float) + 0.5 - py, sigma, radius, er)
                    if gy > 0.0:
                        for xx in range(span):
                            ix = x0 + xx
                            if 0 <= ix and ix < W:
                                gx, _ex = _g(ti.cast(ix, float) + 0.5 - px, sigma, radius, er)
                                if gx > 0.0:
                                    if ti.static(float_accumulation()):
                                        ti.atomic_add(img[v, iy, ix], wgt * gx * gy)
                                    else:
                                        ti.atomic_add(img[v, iy, ix], fxp.to_fixed(wgt * gx * gy, img_scale))
        else:
            if ti.static(float_accumulation()):
                ti.atomic_add(stats[v, 3], 1.0)
            else:
                ti.atomic_add(stats[v, 3], 1)


@ti.kernel
def _k_project_adjoint(vals: ti.types.ndarray(), bmin: vec3, bmax: vec3, res: ivec3, n_out: float,
                       vp: ti.types.ndarray(), vi: ti.types.ndarray(), n_views: ti.i32, n_rays: ti.i32,
                       seed: ti.i32, h: float, max_steps: ti.i32, eps: float, sigma: float, radius: float,
                       dimg: ti.types.ndarray(), acc: ti.types.ndarray(), mx: ti.types.ndarray(), scale: float):
    G = GridDesc(bmin=bmin, bmax=bmax, res=res, n_out=n_out)
    er = ti.exp(-radius * radius / (2.0 * sigma * sigma))
    inv_s2 = 1.0 / (sigma * sigma)
    for i in range(n_rays):
        v, o, d = _ray(vp, vi, n_views, i, seed)
        rec, ck = trace_ray_ckpt(vals, G, o, d, h, max_steps, eps)
        ok, px, py, t = _screen(vp, vi, v, rec.xf, rec.dout)
        if rec.status == OK and ok:
            W, H, wgt, x0, y0, span = _window(vp, vi, v, px, py, radius)
            pxb = 0.0
            pyb = 0.0
            for yy in range(span):
                iy, ty, gy, ey = _tap(y0, yy, H, py, sigma, radius, er)
                if gy > 0.0:
                    for xx in range(span):
                        ix, tx, gx, ex = _tap(x0, xx, W, px, sigma, radius, er)
                        if gx > 0.0:
                            b = dimg[v, iy, ix] * wgt
                            pxb += b * tx * inv_s2 * ex * gy     # ∂g(c − p)/∂p = (t/σ²)·e
                            pyb += b * gx * ty * inv_s2 * ey
            if pxb != 0.0 or pyb != 0.0:
                a = vec3(vp[v, 0], vp[v, 1], vp[v, 2])
                ps = vp[v, 17]
                yb = (pxb / ps) * vec3(vp[v, 3], vp[v, 4], vp[v, 5]) - (pyb / ps) * vec3(vp[v, 6], vp[v, 7], vp[v, 8])
                den = a.dot(rec.dout)
                tb = yb.dot(rec.dout)
                xfb = yb - (tb / den) * a
                dob = t * yb - (tb * t / den) * a
                trace_ray_adjoint(vals, G, o, d, rec, ck, h, max_steps, eps, xfb, dob, acc, mx, scale)


class View:
    """One illumination direction and its screen (see the module doc). ``target``: (H, W) image or
    None (then ``width``/``height`` give the size)."""

    def __init__(self, direction, screen_distance, screen_size, aperture, rays_per_side, target=None, width=None,
                 height=None, name="view"):
        a = np.asarray(direction, np.float64)
        self.a = a / np.linalg.norm(a)
        self.right, self.up = screen_basis(self.a)
        self.screen_distance, self.screen_size = float(screen_distance), float(screen_size)
        self.aperture, self.rays_per_side = float(aperture), int(rays_per_side)
        self.target = None if target is None else np.asarray(target, np.float64)
        self.height, self.width = (self.target.shape if self.target is not None else (int(height), int(width)))
        self.name = name

    @property
    def n_rays(self):
        return self.rays_per_side ** 2


class Projector:
    """Renders the views of a GRIN task and back-propagates image adjoints into an IndexGrid.

    box: (bmin, bmax) of the grid (the beams are centred on it); step: RK4 step h (scene units);
    splat_stddev: σ in pixels. The fields it needs (images, adjoint images, view tables) are
    allocated here, once; render/backward create nothing. Images and ray counts are i64 / i32, or
    float where ``float_acc`` (software Vulkan, see the module doc).
    """

    RADIUS = 3.0   # kernel radius in standard deviations

    def __init__(self, views, box, step, splat_stddev=0.75, max_steps=None, n_out=1.0):
        from ..backend import ensure_init, np_float
        ensure_init()
        self.views = list(views)
        self.bmin, self.bmax = (np.asarray(b, np.float64) for b in box)
        self.step = float(step)
        self.sigma = float(splat_stddev)
        self.radius = self.RADIUS * self.sigma
        self.max_steps = max_steps
        self.dtype = np_float()
        V = len(self.views)
        self.Hm = max(v.height for v in self.views)
        self.Wm = max(v.width for v in self.views)
        centre = (self.bmin + self.bmax) / 2
        back = float(np.linalg.norm(self.bmax - self.bmin)) + 1.0
        Z = splat_norm(self.sigma, self.radius)
        vp = np.zeros((V, NP))
        vi = np.zeros((V, NI), np.int32)
        start = 0
        for k, v in enumerate(self.views):
            ps = v.screen_size / v.width
            P = (2 * v.aperture) ** 2 / v.n_rays
            vp[k, 0:3], vp[k, 3:6], vp[k, 6:9] = v.a, v.right, v.up
            vp[k, 9:12] = centre
            vp[k, 12], vp[k, 13] = v.aperture, back
            vp[k, 14:17] = centre + v.screen_distance * v.a
            vp[k, 17] = ps
            vp[k, 18] = P / (Z * ps * ps)
            vi[k] = (v.rays_per_side, v.width, v.height, start)
            start += v.n_rays
        self.n_rays = start
        self.vp = ti.ndarray(float, (V, NP))
        self.vp.from_numpy(vp.astype(self.dtype))
        self.vi = ti.ndarray(ti.i32, (V, NI))
        self.vi.from_numpy(vi)
        self.float_acc = float_accumulation()
        self.img = ti.ndarray(float if self.float_acc else ti.i64, (V, self.Hm, self.Wm))
        self.dimg = ti.ndarray(float, (V, self.Hm, self.Wm))
        self.stats = ti.ndarray(float if self.float_acc else ti.i32, (V, 4))
        er = math.exp(-self.RADIUS ** 2 / 2)
        max_add = float(vp[:, 18].max()) * (1.0 - er) ** 2
        self.img_scale = fxp.scale_for(max_add, max(v.n_rays for v in self.views))
        self.last_stats = None

    def _common(self, grid, seed):
        ms = int(self.max_steps or default_max_steps(grid, self.step))
        return (*grid.args(), self.vp, self.vi, len(self.views), self.n_rays, int(seed) & 0x7FFFFFFF, self.step, ms,
                float(default_eps(grid)), self.sigma, self.radius), ms

    def render(self, grid, seed=0):
        """The views' images [(H, W) float64 irradiance] for the grid and seed. ``last_stats``: per
        view the ray counts (missed the box, exited, dropped, deposited nothing)."""
        args, _ms = self._common(grid, seed)
        self.img.fill(0)
        self.stats.fill(0)
        _k_project(*args, self.img, self.img_scale, self.stats)
        q = self.img.to_numpy().astype(np.float64)
        if not self.float_acc:
            q = q / self.img_scale
        st = self.stats.to_numpy()
        self.last_stats = [{"missed": int(s[0]), "exited": int(s[1]), "dropped": int(s[2]), "lost": int(s[3])}
                           for s in st]
        return [q[k, :v.height, :v.width] for k, v in enumerate(self.views)]

    def backward(self, grid, dimgs, seed=0):
        """Scatter Σ_views <Ī_v, ∂I_v/∂grid> into the grid's gradient (read it with grid.grad_numpy()); the
        rays are those of render(grid, seed). dimgs: one (H, W) adjoint image per view."""
        args, ms = self._common(grid, seed)
        d = np.zeros((len(self.views), self.Hm, self.Wm), self.dtype)
        for k, (v, di) in enumerate(zip(self.views, dimgs)):
            d[k, :v.height, :v.width] = di
        self.dimg.from_numpy(d)
        adds = self.n_rays * (ms + 2) * 33
        return accumulate(grid, lambda s: _k_project_adjoint(*args, self.dimg, grid.acc, grid.slots, s), adds)


def l2_loss(images, targets, weights=None):
    """(total loss, per-view MSE list, adjoint images): loss = Σ_v w_v·mean((I_v − T_v)²)."""
    weights = weights or [1.0] * len(images)
    total, per, adj = 0.0, [], []
    for im, t, w in zip(images, targets, weights):
        r = im - t
        mse = float(np.mean(r * r))
        per.append(mse)
        total += w * mse
        adj.append(2.0 * w * r / r.size)
    return total, per, adj


def relative_l2(image, target):
    """‖I − T‖ / ‖T‖."""
    return float(np.linalg.norm(image - target) / max(np.linalg.norm(target), 1e-30))
