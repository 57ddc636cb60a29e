"""Voxel radiance field: density σ and spherical-harmonic colour c on a grid in a box.

Storage: one flat 1-D Taichi field ``x`` (Taichi's default float type) of R³·C values
(C = 1 + 3K, K = (deg+1)² SH functions), so that Adam runs over it directly. With the voxel
index v = (z·R + y)·R + x and N = R³:

    x[v]                    raw density s of voxel v            (a compact density plane)
    x[N + v·3K + 3k + rgb]  SH coefficient k of colour channel rgb

The compact density plane lets a lookup test for empty space (σ = 0) touching 8 floats of a
small array before it gathers the 8 × 3K colour coefficients. A twin field ``grad`` receives
∂ℒ/∂x in the same layout. numpy views (``to_numpy``) are (R, R, R, C) arrays [z, y, x, ch] with
channel 0 the density and 1 + 3k + rgb the coefficients. Values sit at voxel centres; lookups are
trilinear with clamp-to-edge: σ = act_σ(trilinear(s)), c = act_c(Σ_k Y_k(d) · trilinear(coef_k)).

The lookup (:func:`query_cell`) and its adjoints (:func:`query_adjoint`, :func:`flush_voxel`)
sit side by side.
"""
import numpy as np
import taichi as ti

from .. import backend
from ..errors import ConfigError

DENSITY_ACTIVATIONS = {"relu": 0, "softplus": 1}
COLOR_ACTIVATIONS = {"none": 0, "relu": 1, "sigmoid": 2}
COLOR_CLIP = 4   # added to a colour-activation id: clamp the emitted colour to [0, 1] after the activation


def color_code(activation, clip=False):
    """Compile-time colour id of the kernels: COLOR_ACTIVATIONS[activation] (+ COLOR_CLIP when clip)."""
    return COLOR_ACTIVATIONS[activation] + (COLOR_CLIP if clip else 0)

# Real spherical harmonics up to degree 2 (same constants and signs as Plenoxels / Mitsuba).
SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005,
         -1.0925484305920792, 0.5462742152960396)


def sh_count(degree):
    """Number of SH basis functions K = (degree+1)² (1, 4, 9)."""
    return (int(degree) + 1) ** 2


def channels(degree):
    """Values per voxel C = 1 + 3K (4, 13, 28)."""
    return 1 + 3 * sh_count(degree)


def np_float():
    """numpy dtype matching Taichi's default float type (f32 unless initialised with fp='f64')."""
    return backend.np_float()


def sh_basis_np(d, degree):
    """SH basis Y_k(d) for unit directions d (..., 3) → (..., K), float64 (reference implementation)."""
    d = np.asarray(d, np.float64)
    x, y, z = d[..., 0], d[..., 1], d[..., 2]
    out = [np.full_like(x, SH_C0)]
    if degree >= 1:
        out += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        out += [SH_C2[0] * x * y, SH_C2[1] * y * z, SH_C2[2] * (2 * z * z - x * x - y * y),
                SH_C2[3] * x * z, SH_C2[4] * (x * x - y * y)]
    return np.stack(out, -1)


@ti.func
def sh_basis(d, degree: ti.template()):
    """Y_k(d), k < (degree+1)², for a unit direction d (vec3) → ti.Vector of K floats."""
    x, y, z = d[0], d[1], d[2]
    Y = ti.Vector.zero(float, (degree + 1) ** 2)
    Y[0] = SH_C0
    if ti.static(degree >= 1):
        Y[1] = -SH_C1 * y
        Y[2] = SH_C1 * z
        Y[3] = -SH_C1 * x
    if ti.static(degree >= 2):
        Y[4] = SH_C2[0] * x * y
        Y[5] = SH_C2[1] * y * z
        Y[6] = SH_C2[2] * (2.0 * z * z - x * x - y * y)
        Y[7] = SH_C2[3] * x * z
        Y[8] = SH_C2[4] * (x * x - y * y)
    return Y


@ti.func
def density_act(s, kind: ti.template()):
    """σ = act(s) and dσ/ds (relu or softplus)."""
    v = 0.0
    dv = 0.0
    if ti.static(kind == 0):
        if s > 0.0:
            v = s
            dv = 1.0
    else:
        # softplus(s) = max(s, 0) + log(1 + exp(-|s|)), derivative sigmoid(s)
        e = ti.exp(-ti.abs(s))
        v = ti.max(s, 0.0) + ti.log(1.0 + e)
        dv = 1.0 / (1.0 + e) if s >= 0.0 else e / (1.0 + e)
    return v, dv


@ti.func
def color_act(p, kind: ti.template()):
    """c = act(p) and dc/dp per channel for p: vec3. kind (see :func:`color_code`): kind % 4 the
    activation (none, relu or sigmoid); kind ≥ COLOR_CLIP then clamps c to [0, 1] (Mitsuba's
    radiance-field tutorial clips its emission so), with dc/dp = 0 where the clamp is active."""
    c = p
    dc = ti.Vector([1.0, 1.0, 1.0], dt=float)
    if ti.static(kind % COLOR_CLIP == 1):
        for k in ti.static(range(3)):
            if p[k] <= 0.0:
                c[k] = 0.0
                dc[k] = 0.0
    elif ti.static(kind % COLOR_CLIP == 2):
        for k in ti.static(range(3)):
            e = ti.exp(-ti.abs(p[k]))
            s = 1.0 / (1.0 + e) if p[k] >= 0.0 else e / (1.0 + e)
            c[k] = s
            dc[k] = s * (1.0 - s)
    if ti.static(kind >= COLOR_CLIP):
        for k in ti.static(range(3)):
            if c[k] < 0.0:
                c[k] = 0.0
                dc[k] = 0.0
            elif c[k] > 1.0:
                c[k] = 1.0
                dc[k] = 0.0
    return c, dc


@ti.func
def trilinear_setup(p, bmin, bmax, R):
    """Base voxel index (x, y, z) and fractional weights f ∈ [0,1]³ of world point p (cell-centred, clamped)."""
    u = (p - bmin) / (bmax - bmin) * R - 0.5
    u = ti.min(ti.max(u, 0.0), R - 1.0)
    i0 = ti.min(ti.cast(ti.floor(u), ti.i32), R - 2)
    i0 = ti.max(i0, 0)
    f = u - ti.cast(i0, float)
    return i0, f


@ti.func
def _corner(i0, f, R, corner):
    """Trilinear weight and voxel index v of one of the 8 corners (bit 0: +x, 1: +y, 2: +z)."""
    cx = corner & 1
    cy = (corner >> 1) & 1
    cz = (corner >> 2) & 1
    w = (f[0] if cx else 1.0 - f[0]) * (f[1] if cy else 1.0 - f[1]) * (f[2] if cz else 1.0 - f[2])
    v = ((i0[2] + cz) * R + (i0[1] + cy)) * R + (i0[0] + cx)
    return w, v


@ti.func
def query_cell(x: ti.template(), i0, f, Y, R, degree: ti.template(), dact: ti.template(),
               cact: ti.template()):
    """Field in cell i0 at fractional position f, with the SH basis Y = Y_k(d) of the view direction.

    Returns (σ, c, dσ/ds, dc/dpre): σ ≥ 0 [1/world unit], c: vec3 colour, and the activation
    derivatives needed by the adjoint (s: interpolated raw density, pre: colour before activation).
    Where σ = 0 with a zero derivative (ReLU in empty space) the point contributes nothing to L or
    to any gradient, and the colour is not gathered (c = 0).
    """
    S = 3 * (degree + 1) ** 2
    N = R * R * R
    s = 0.0
    for corner in range(8):
        w, v = _corner(i0, f, R, corner)
        s += w * x[v]
    sigma, dsigma = density_act(s, dact)
    c = ti.Vector([0.0, 0.0, 0.0], dt=float)
    dc = ti.Vector([0.0, 0.0, 0.0], dt=float)
    if sigma != 0.0 or dsigma != 0.0:
        pre = ti.Vector([0.0, 0.0, 0.0], dt=float)
        for corner in range(8):
            w, v = _corner(i0, f, R, corner)
            base = N + v * S
            for k in ti.static(range((degree + 1) ** 2)):
                wy = w * Y[k]
                for ch in ti.static(range(3)):
                    pre[ch] += wy * x[base + 3 * k + ch]
        c, dc = color_act(pre, cact)
    return sigma, c, dsigma, dc


@ti.func
def query(x: ti.template(), p, d, bmin, bmax, R, degree: ti.template(), dact: ti.template(),
          cact: ti.template()):
    """Field at world point p seen along unit direction d: (σ, c, dσ/ds, dc/dpre), see query_cell."""
    i0, f = trilinear_setup(p, bmin, bmax, R)
    return query_cell(x, i0, f, sh_basis(d, degree), R, degree, dact, cact)


@ti.func
def scatter_add(g: ti.template(), i, v, expand: ti.template(), off):
    """g[i] += v. expand=False: ``ti.atomic_add`` (any number of threads). expand=True: plain
    read-add-write into the caller's private slice ``g[off + i]`` (one slice per CPU worker,
    race-free by construction, summed afterwards: Dr.Jit's ``ReduceMode.Expand``)."""
    if ti.static(expand):
        g[off + i] = g[off + i] + v
    else:
        ti.atomic_add(g[i], v)


@ti.func
def query_adjoint(g: ti.template(), i0, f, Y, R, degree: ti.template(), g_s, g_pre,
                  expand: ti.template(), off):
    """Adjoint of :func:`query_cell`: scatter ∂ℒ/∂s (scalar, through the density activation already)
    and ∂ℒ/∂pre (vec3, pre-activation colour) through the trilinear weights w and the SH basis Y_k:
    ∂ℒ/∂s[v] += w_v·∂ℒ/∂s, ∂ℒ/∂coef[v, k, rgb] += w_v·Y_k(d)·∂ℒ/∂pre_rgb."""
    for corner in range(8):
        w, v = _corner(i0, f, R, corner)
        a = ti.Vector([w * g_s, w * g_pre[0], w * g_pre[1], w * g_pre[2]], dt=float)
        flush_voxel(g, v, a, Y, R, degree, expand, off)


@ti.func
def flush_voxel(g: ti.template(), v, a, Y, R, degree: ti.template(), expand: ti.template(), off):
    """Scatter into voxel v the adjoint a = (w·∂ℒ/∂s, w·∂ℒ/∂pre) — one point's, or a ray's sum over
    the points near v: the SH basis is constant along a ray, so ∂ℒ/∂coef[k, rgb] = Y_k · a[1 + rgb]."""
    S = 3 * (degree + 1) ** 2
    if a[0] != 0.0:
        scatter_add(g, v, a[0], expand, off)
    if a[1] != 0.0 or a[2] != 0.0 or a[3] != 0.0:
        base = R * R * R + v * S
        for k in ti.static(range((degree + 1) ** 2)):
            for ch in ti.static(range(3)):
                scatter_add(g, base + 3 * k + ch, Y[k] * a[1 + ch], expand, off)


@ti.kernel
def _tv_grad(x: ti.template(), g: ti.template(), R: ti.i32, start: ti.i32, S: ti.template(),
             weight: float, want_value: ti.template()) -> float:
    """Add ∇ of TV = weight/N · Σ_v Σ_axes Σ_j (y[v+axis, j] − y[v, j])² into g, where
    y[v, j] = x[start + v·S + j] (density plane: start 0, S 1; SH block: start N, S 3K); returns TV
    when want_value. Gather form (each element reads its ≤ 6 neighbours and writes only its own
    gradient): no atomics."""
    tv = 0.0
    k = 2.0 * weight / ti.cast(R * R * R, float)
    for v in range(R * R * R):
        vx = v % R
        vy = (v // R) % R
        vz = v // (R * R)
        for j in ti.static(range(S)):
            a = start + v * S + j
            xa = x[a]
            acc = 0.0
            for axis in ti.static(range(3)):
                coord = vx if axis == 0 else (vy if axis == 1 else vz)
                stride = 1 if axis == 0 else (R if axis == 1 else R * R)
                if coord < R - 1:
                    diff = x[a + stride * S] - xa
                    acc -= diff
                    if ti.static(want_value):
                        tv += 0.5 * k * diff * diff
                if coord > 0:
                    acc += xa - x[a - stride * S]
            g[a] = g[a] + k * acc  # each element is written by one thread: no atomic needed
    return tv


@ti.kernel
def _sparsity_grad(x: ti.template(), g: ti.template(), R: ti.i32, weight: float) -> float:
    """Add ∇ of weight/N · Σ_v max(s_v, 0) (an L1 prior on the raw density) into g; returns its value."""
    tot = 0.0
    inv_n = 1.0 / ti.cast(R * R * R, float)
    for v in range(R * R * R):
        s = x[v]
        if s > 0.0:
            tot += weight * inv_n * s
            g[v] = g[v] + weight * inv_n
    return tot


@ti.kernel
def _zero(g: ti.template(), n: ti.i32):
    for i in range(n):
        g[i] = 0.0


class RadianceField:
    """A voxel radiance field (Taichi storage + metadata).

    res: R (voxels per axis, ≥ 2); sh_degree: 0…2; bbox_min/bbox_max: world box (3,);
    density_activation: "relu" | "softplus"; color_activation: "none" | "relu" | "sigmoid";
    color_clip: clamp the emitted colour c to [0, 1] after the activation (zero gradient where clamped);
    step: ray-march step as a fraction of a voxel (δ = step · max(extent) / R, world units);
    background: RGB added with the final transmittance; t_min: early termination once T < t_min.
    Fields: ``x`` (R³·C parameters, layout in the module docstring) and ``grad`` (∂ℒ/∂x, same layout).
    capacity: number of values to allocate (default R³·C). A larger capacity lets :meth:`resize`
    change R in place (the parameters occupy the first R³·C values), so that one set of fields —
    and one compilation of every kernel — serves all the stages of a coarse-to-fine schedule.
    """

    def __init__(self, res, sh_degree=2, bbox_min=(-1, -1, -1), bbox_max=(1, 1, 1),
                 density_activation="relu", color_activation="none", step=1.0,
                 background=(0.0, 0.0, 0.0), t_min=1e-4, init_density=0.01, init_color=0.0,
                 params=None, capacity=None, color_clip=False):
        backend.ensure_init()
        res = int(res)
        if res < 2:
            raise ConfigError(f"grid resolution must be at least 2, got {res}", key="res")
        if int(sh_degree) not in (0, 1, 2):
            raise ConfigError(f"sh_degree must be 0, 1 or 2, got {sh_degree}", key="sh_degree")
        if density_activation not in DENSITY_ACTIVATIONS:
            raise ConfigError(f"unknown density activation '{density_activation}' "
                              f"({', '.join(DENSITY_ACTIVATIONS)})", key="density_activation")
        if color_activation not in COLOR_ACTIVATIONS:
            raise ConfigError(f"unknown colour activation '{color_activation}' "
                              f"({', '.join(COLOR_ACTIVATIONS)})", key="color_activation")
        self.bbox_min = np.asarray(bbox_min, np.float64).reshape(3)
        self.bbox_max = np.asarray(bbox_max, np.float64).reshape(3)
        if not np.all(self.bbox_max > self.bbox_min):
            raise ConfigError("bbox max must exceed bbox min on every axis", key="bbox")
        if not float(step) > 0:
            raise ConfigError(f"step must be positive, got {step}", key="step")
        self.res, self.sh_degree = res, int(sh_degree)
        self.K, self.C = sh_count(sh_degree), channels(sh_degree)
        self.density_activation, self.color_activation = density_activation, color_activation
        self.color_clip = bool(color_clip)
        self.step = float(step)
        self.background = np.asarray(background, np.float64).reshape(3)
        self.t_min = float(t_min)
        self.capacity = max(int(capacity or 0), res ** 3 * self.C)
        self.x = ti.field(float, self.capacity)
        self.grad = ti.field(float, self.capacity)
        self._lanes = None
        if params is None:
            params = np.zeros((res, res, res, self.C))
            params[..., 0] = init_density
            params[..., 1:4] = init_color / SH_C0
        self.from_numpy(params)

    @property
    def delta(self):
        """Ray-march step δ in world units."""
        return self.step * float(np.max(self.bbox_max - self.bbox_min)) / self.res

    @property
    def n_params(self):
        return self.res ** 3 * self.C

    def flat_to_grid(self, flat):
        """Flat storage layout (n_params,) → (R, R, R, C) array [z, y, x, ch]."""
        R, N = self.res, self.res ** 3
        flat = np.asarray(flat)
        return np.concatenate([flat[:N].reshape(R, R, R, 1), flat[N:].reshape(R, R, R, self.C - 1)], -1)

    def grid_to_flat(self, arr):
        """(R, R, R, C) array [z, y, x, ch] → flat storage layout (n_params,)."""
        a = np.asarray(arr).reshape(-1, self.C)
        return np.concatenate([a[:, 0], a[:, 1:].reshape(-1)])

    def channel_of_flat(self):
        """(n_params,) int array: the channel (0 density, 1.. SH) of every flat storage index."""
        N = self.res ** 3
        return np.concatenate([np.zeros(N, int), np.tile(np.arange(1, self.C), N)])

    def to_numpy(self):
        """Parameters as a (R, R, R, C) array indexed [z, y, x, channel]."""
        return self.flat_to_grid(self.x.to_numpy()[:self.n_params])

    def from_numpy(self, arr):
        """Set the parameters from a (R, R, R, C) array [z, y, x, channel] (or R³·C values in that order)."""
        arr = np.asarray(arr, np_float())
        if arr.size != self.n_params:
            raise ConfigError(f"parameter array has {arr.size} values, expected {self.n_params} "
                              f"({self.res}³ × {self.C})", key="params")
        flat = self.grid_to_flat(arr)
        if self.capacity > flat.size:
            flat = np.concatenate([flat, np.zeros(self.capacity - flat.size, flat.dtype)])
        self.x.from_numpy(np.ascontiguousarray(flat, np_float()))

    def grad_numpy(self):
        """∂ℒ/∂x as a (R, R, R, C) array [z, y, x, channel]."""
        return self.flat_to_grid(self.grad.to_numpy()[:self.n_params])

    def set_resolution(self, res):
        """Change R in place (no resampling; the values are reinterpreted): R³·C ≤ capacity."""
        res = int(res)
        if res < 2 or res ** 3 * self.C > self.capacity:
            raise ConfigError(f"resolution {res} does not fit the field's capacity of {self.capacity} values",
                              key="res")
        self.res = res

    def resize(self, res, method="cubic"):
        """Resample the grid to resolution res in place (needs capacity ≥ res³·C); method: see
        :mod:`.resample` ("cubic" or "trilinear")."""
        data = self._resample_to(res, method)
        self.set_resolution(res)
        self.from_numpy(data)

    def grad_lanes(self):
        """(G, P): P private gradient copies (one per CPU worker thread) for the "expand" backward,
        allocated on first use and kept zeroed between uses."""
        if self._lanes is None:
            P = max(1, int(ti.lang.impl.current_cfg().cpu_max_num_threads))
            self._lanes = (ti.field(float, P * self.capacity), P)
        return self._lanes

    def zero_grad(self):
        """grad[:R³·C] ← 0."""
        _zero(self.grad, self.n_params)

    def meta(self):
        return dict(res=self.res, sh_degree=self.sh_degree, bbox_min=self.bbox_min, bbox_max=self.bbox_max,
                    density_activation=self.density_activation, color_activation=self.color_activation,
                    step=self.step, background=self.background, t_min=self.t_min, color_clip=self.color_clip)

    def _resample_to(self, new_res, method="cubic"):
        from .resample import resample_field_params
        return resample_field_params(self.to_numpy(), int(new_res), method, self.density_activation)

    def resampled(self, new_res, method="cubic"):
        """A new field of resolution new_res (the raw parameters resampled by ``method``, see :mod:`.resample`)."""
        m = self.meta()
        m["res"] = int(new_res)
        return RadianceField(params=self._resample_to(new_res, method), **m)

    def resample_into(self, dst, method="cubic"):
        """Write this grid, resampled by ``method``, into the existing field ``dst`` (same SH degree)."""
        if dst.C != self.C:
            raise ConfigError(f"cannot resample SH degree {self.sh_degree} into degree {dst.sh_degree}",
                              key="sh_degree")
        dst.from_numpy(self._resample_to(dst.res, method))

    def lanes_bytes(self):
        """Bytes the private gradient copies of the "expand" backward would take."""
        P = max(1, int(ti.lang.impl.current_cfg().cpu_max_num_threads))
        return P * self.capacity * np.dtype(np_float()).itemsize

    def tv_grad(self, weight_density, weight_color=0.0, value=False):
        """Add the gradient of the squared-difference TV regulariser
        weight/N · Σ_v Σ_axes (x[v+axis] − x[v])² (density: channel 0; colour: the SH channels) to
        ``grad``; returns its value when ``value`` (a reduction that costs as much again), else 0."""
        tv = 0.0
        if weight_density > 0:
            tv += _tv_grad(self.x, self.grad, self.res, 0, 1, float(weight_density), bool(value))
        if weight_color > 0:
            tv += _tv_grad(self.x, self.grad, self.res, self.res ** 3, self.C - 1, float(weight_color),
                           bool(value))
        return tv

    def sparsity_grad(self, weight):
        """Add the gradient of the L1 density prior weight·mean(max(raw, 0)) to ``grad``; returns its value."""
        return _sparsity_grad(self.x, self.grad, self.res, float(weight)) if weight > 0 else 0.0

    def save(self, path, **extra):
        """Write the field (and extra metadata such as camera info) to an .npz, atomically."""
        import os
        tmp = str(path) + ".tmp.npz"
        np.savez_compressed(tmp, params=self.to_numpy().astype(np.float32),
                            density_activation=np.array(self.density_activation),
                            color_activation=np.array(self.color_activation),
                            **{k: np.asarray(v) for k, v in self.meta().items()
                               if k not in ("density_activation", "color_activation")},
                            **{k: np.asarray(v) for k, v in extra.items()})
        os.replace(tmp, path)

    @staticmethod
    def load(path):
        """Load a field saved by :meth:`save`; returns (field, extra metadata dict)."""
        try:
            z = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise ConfigError("file not found", file=path)
        except Exception as e:  # noqa: BLE001
            raise ConfigError(f"not a radiance-field .npz ({type(e).__name__})", file=path)
        need = ("params", "res", "sh_degree", "bbox_min", "bbox_max")
        for k in need:
            if k not in z.files:
                raise ConfigError(f"missing '{k}' (not a radiance field saved by tirender)", file=path, key=k)
        known = {"params", "res", "sh_degree", "bbox_min", "bbox_max", "density_activation",
                 "color_activation", "step", "background", "t_min", "color_clip"}
        kw = {k: z[k] for k in known if k in z.files}
        for k in ("density_activation", "color_activation"):
            if k in kw:
                kw[k] = str(kw[k])
        for k in ("res", "sh_degree"):
            kw[k] = int(kw[k])
        for k in ("step", "t_min"):
            if k in kw:
                kw[k] = float(kw[k])
        if "color_clip" in kw:
            kw["color_clip"] = bool(kw["color_clip"])
        extra = {k: z[k] for k in z.files if k not in known}
        return RadianceField(**kw), extra
