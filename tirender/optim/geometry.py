"""Shape optimisation in `tirender optimize` (issue 17): what the driver does for the parameters of
differentiable meshes (scene/deform.py).

* ``init: sphere`` for ``<id>.vertex_positions``: every vertex moved radially onto the sphere around
  the mesh's pivot whose radius is the mean distance of the vertices to it (a star-shaped mesh
  becomes a sphere of the same topology: the usual starting point of shape recovery).
* ``large_steps: λ``: the Laplacian reparameterisation of Nicolet et al. 2021 (optim/large_steps.py),
  stepped by their "uniform Adam" (Mitsuba's ``mi.ad.Adam(uniform=True)``): Adam on u with the
  *largest* second moment of the parameter in the denominator, so that every vertex's step is
  proportional to its gradient (per-element Adam would turn the noise of a few silhouette pixels
  into full-size steps). The host runs it (float64) and the device optimiser leaves these
  parameters alone (learning rate 0 there); its moments are checkpointed like the device's.
* Outputs: the mesh as ``meshes/iterNNNN_<id>.ply`` with every save, ``params/<id>.ply`` at the end,
  a turntable of the final shape (``turntable_<id>.png``: 8 views around the first view's up axis),
  and the symmetric Chamfer distance to the truth (synthetic targets) at the start and the end.
"""
import os

import numpy as np

from ..errors import ConfigError
from .large_steps import LargeSteps

TURNTABLE_FRAMES = 8
CHAMFER_POINTS = 4096


def mesh_of(scene, name):
    """The Deformable whose parameter is `name` (None for other parameters)."""
    for d in scene.deformables:
        if name in d.names().values():
            return d
    return None


def sphere_init(scene, name):
    """Rest positions for ``init: sphere`` of parameter `name` (see module doc)."""
    d = mesh_of(scene, name)
    V = scene.params[name].astype(np.float64)
    q = V - d.pivot
    r = np.linalg.norm(q, axis=1, keepdims=True)
    if not np.all(r > 0):
        raise ConfigError("init: sphere needs every vertex away from the mesh's centre", key=name)
    return (d.pivot + q / r * float(r.mean())).astype(np.float32)


class GeometryOptions:
    """The driver's geometry side: large-step reparameterisations, mesh outputs and errors."""

    def __init__(self, scene, popts, file):
        self.scene = scene
        self.steps = {}
        for name, po in popts.items():
            lam = po.get("large_steps")
            d = mesh_of(scene, name)
            if lam is not None and (d is None or not name.endswith(".vertex_positions")):
                raise ConfigError("large_steps applies to the vertex_positions of differentiable meshes", file,
                                  f"optimize.params.{name}.large_steps")
            if lam:
                self.steps[name] = LargeSteps(d.faces, scene.params[name], lam)
        self.meshes = [d for d in scene.deformables if not d.analytic and any(n in popts for n in d.names().values())]
        self.truth = {d.name: d.positions(scene.params.__getitem__) for d in self.meshes}
        self.lr = {name: np.asarray(popts[name]["lr"], np.float64) for name in self.steps}   # a number, or per column
        self.beta1, self.beta2 = 0.9, 0.999
        self.reset()

    def reset(self, state=None):
        """Zero the uniform-Adam moments, or load them from a checkpoint's arrays (m:<name>, v:<name>,
        t: the step count)."""
        self.m, self.v, self.t = {}, {}, 0
        for name in self.steps:
            shape = self.scene.params[name].shape
            self.m[name], self.v[name] = np.zeros(shape), np.zeros(shape)
            if state is not None and f"m:{name}" in state and state[f"m:{name}"].shape == shape:
                self.m[name] = state[f"m:{name}"].astype(np.float64)
                self.v[name] = state[f"v:{name}"].astype(np.float64)
                self.t = int(state["t"])

    def device_lr_mask(self, name):
        """Whether the device optimiser should leave `name` alone (a large-step parameter)."""
        return name in self.steps

    def step(self, grads, lr_mult=1.0):
        """The large-step parameters' update from their gradients ∂/∂x (grads: name -> array, read):
        uniform Adam on u = (I + λL) x, then x ← x - (I + λL)⁻¹ Δu (see module doc)."""
        if not self.steps:
            return
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        for name, ls in self.steps.items():
            g = ls.precondition(np.asarray(grads[name], np.float64))
            m = self.m[name] = b1 * self.m[name] + (1 - b1) * g
            v = self.v[name] = b2 * self.v[name] + (1 - b2) * g * g
            vmax = float(v.max()) / (1 - b2 ** self.t)
            du = 0.0 * m if vmax <= 0.0 else (self.lr[name] * lr_mult) * (m / (1 - b1 ** self.t)) / np.sqrt(vmax)
            x = self.scene.params[name].astype(np.float64)
            self.scene.params[name] = ls.apply(x, x - du).astype(np.float32)

    def state(self):
        """Checkpoint arrays of the uniform-Adam moments (name -> array; t is the driver's)."""
        out = {}
        for name in self.steps:
            out[f"m:{name}"], out[f"v:{name}"] = self.m[name], self.v[name]
        return out

    # -- outputs ------------------------------------------------------------------------------
    def world_mesh(self, d):
        return d.positions(self.scene.params.__getitem__), d.faces

    def save_meshes(self, folder, prefix=""):
        from ..scene.mesh_io import save_ply
        for d in self.meshes:
            P, F = self.world_mesh(d)
            save_ply(os.path.join(folder, f"{prefix}{d.name}.ply"), P.astype(np.float32), F.astype(np.int32))

    def chamfer(self):
        """Symmetric Chamfer distance to the truth per mesh (dict id -> float)."""
        return {d.name: chamfer_distance(self.world_mesh(d)[0], self.truth[d.name], d.faces) for d in self.meshes}

    def turntable(self, out, spp, seed, sensor):
        """Render TURNTABLE_FRAMES views of the current scene around the mesh's centre, about the
        up axis of `sensor` (a batch turns as a rig, Scene.set_sensor_transform), into turntable_<id>.png (a
        strip) under out."""
        from ..api import render
        from ..io.images import save_png
        sc = self.scene
        m0 = np.array(sc.sensors[sensor].to_world, np.float64)
        for d in self.meshes:
            P, _F = self.world_mesh(d)
            c = 0.5 * (P.min(0) + P.max(0))
            up = m0[:3, 1] / np.linalg.norm(m0[:3, 1])
            frames = []
            for k in range(TURNTABLE_FRAMES):
                R = _axis_rotation(up, 2 * np.pi * k / TURNTABLE_FRAMES)
                m = m0.copy()
                m[:3, :3] = R @ m0[:3, :3]
                m[:3, 3] = c + R @ (m0[:3, 3] - c)
                sc.set_sensor_transform(sensor, m)
                frames.append(render(sc, spp=spp, seed=seed + k, sensor=sensor, progress=False))
            sc.set_sensor_transform(sensor, m0)
            gap = np.ones((frames[0].shape[0], 2, 3), np.float32)
            strip = np.concatenate(sum(([f, gap] for f in frames), [])[:-1], axis=1)
            save_png(os.path.join(out, f"turntable_{d.name}.png"), strip)


def _axis_rotation(axis, angle):
    x, y, z = axis
    c, s = np.cos(angle), np.sin(angle)
    C = 1 - c
    return np.array([[x * x * C + c, x * y * C - z * s, x * z * C + y * s],
                     [y * x * C + z * s, y * y * C + c, y * z * C - x * s],
                     [z * x * C - y * s, z * y * C + x * s, z * z * C + c]])


def surface_points(P, faces, n, seed=0):
    """n points uniformly distributed over the triangle mesh's area (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    f = np.asarray(faces, np.int64)
    a, b, c = P[f[:, 0]], P[f[:, 1]], P[f[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    k = rng.choice(len(f), size=n, p=area / area.sum())
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    return a[k] + u[:, None] * (b[k] - a[k]) + v[:, None] * (c[k] - a[k])


def _closest_on_triangles(p, a, b, c):
    """Closest points of triangles (a, b, c) (m, 3) to points p (n, 3): (n, m, 3) (Ericson, Real-Time
    Collision Detection §5.1.5, vectorised: the Voronoi region of each pair decides)."""
    p = p[:, None, :]
    ab, ac = b - a, c - a
    ap, bp, cp = p - a, p - b, p - c
    d1, d2 = np.sum(ab * ap, -1), np.sum(ac * ap, -1)
    d3, d4 = np.sum(ab * bp, -1), np.sum(ac * bp, -1)
    d5, d6 = np.sum(ab * cp, -1), np.sum(ac * cp, -1)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    with np.errstate(divide="ignore", invalid="ignore"):
        den = va + vb + vc
        v = np.where(den != 0, vb / den, 0.0)
        w = np.where(den != 0, vc / den, 0.0)
        out = a + ab * v[..., None] + ac * w[..., None]                   # inside the face
        t_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        e_bc = (va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0)
        out = np.where(e_bc[..., None], b + (c - b) * t_bc[..., None], out)
        t_ac = d2 / (d2 - d6)
        e_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        out = np.where(e_ac[..., None], a + ac * t_ac[..., None], out)
        t_ab = d1 / (d1 - d3)
        e_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        out = np.where(e_ab[..., None], a + ab * t_ab[..., None], out)
    out = np.where(((d6 >= 0) & (d5 <= d6))[..., None], c, out)
    out = np.where(((d3 >= 0) & (d4 <= d3))[..., None], b, out)
    out = np.where(((d1 <= 0) & (d2 <= 0))[..., None], a, out)
    return out


def point_mesh_distance(x, P, faces, chunk=64):
    """Distance from each point of x (n, 3) to the triangle mesh (P, faces): exact (closest points on
    the triangles), over the triangles that can be nearest — those whose bounding sphere comes within
    the distance to the nearest vertex — for chunks of spatially sorted points."""
    f = np.asarray(faces, np.int64)
    a, b, c = P[f[:, 0]], P[f[:, 1]], P[f[:, 2]]
    cen = (a + b + c) / 3.0
    rad = np.sqrt(np.max([np.sum((v - cen) ** 2, 1) for v in (a, b, c)], 0))
    used = np.unique(f)
    dv = np.empty(len(x))                                    # distance to the nearest vertex: an upper bound
    for i in range(0, len(x), 256):
        d2 = np.sum((x[i:i + 256, None, :] - P[None, used, :]) ** 2, -1)
        dv[i:i + 256] = np.sqrt(d2.min(1))
    ext = np.ptp(P, axis=0).max() + 1e-300
    key = np.floor((x - P.min(0)) / (ext / 16.0)).astype(np.int64)
    order = np.lexsort((key[:, 2], key[:, 1], key[:, 0]))
    out = np.empty(len(x))
    for i in range(0, len(x), chunk):
        idx = order[i:i + chunk]
        xs = x[idx]
        dc = np.sqrt(np.sum((xs[:, None, :] - cen[None]) ** 2, -1)) - rad[None]     # lower bounds
        cand = np.flatnonzero(np.any(dc <= dv[idx, None] + 1e-12, axis=0))
        q = _closest_on_triangles(xs, a[cand], b[cand], c[cand])
        out[idx] = np.sqrt(np.min(np.sum((q - xs[:, None, :]) ** 2, -1), 1))
    return out


def chamfer_distance(P, Q, faces, n=CHAMFER_POINTS):
    """Symmetric Chamfer distance between two meshes of the same faces and positions P, Q: the mean
    distance of n area-uniform surface points of each to the other's surface (exact point-to-triangle
    distances), both ways averaged (world units)."""
    P, Q = np.asarray(P, np.float64), np.asarray(Q, np.float64)
    a = surface_points(P, faces, n, 1)
    b = surface_points(Q, faces, n, 2)
    return float(0.5 * (point_mesh_distance(a, Q, faces).mean() + point_mesh_distance(b, P, faces).mean()))
