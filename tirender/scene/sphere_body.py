"""A differentiable analytic sphere: Mitsuba's ``sphere`` (scene/implicit.py, core/quadrics.py) whose centre and
radius are parameters, rendered exactly (no tessellation) — ``type: sphere, differentiable: true`` without a
``resolution`` (with one it is a mesh, scene/deform.py).

Parameters of shape ``<id>``:

  ``<id>.center`` (3,)   c, world units (to_world's translation)
  ``<id>.radius`` (1,)   R > 0, world units (to_world's uniform scale)

    to_world = [R Q | c]      Q: the rotation (or mirror) part of the sphere's to_world at load (uv, normals' side)

The derived slot ``<id>.world`` (4,) holds no value: reverse-mode kernels add ∂/∂(c, R) into it — at a path's hit
(core/quadrics.hit_adjoint: the hit slides along its ray), and at a silhouette point of the boundary terms
(integrators/edges.py: the surface there moves along its normal n by n·δc + δR) — and :meth:`SphereBody.backward`
hands them to the parameters; forward mode puts (ċ, Ṙ) there. After a change the record (geo_* fields) and its
BVH box are rewritten on the device and the tree refitted (scene.py).
"""
import numpy as np

from .implicit import box_under
from .triangles import write_rows

DERIVED = "world"


class SphereBody:
    """One differentiable analytic sphere: name (the shape id), its shape index and Implicit (scene/implicit.py)."""

    analytic = True
    SLOT = DERIVED               # the pool slot whose offset the record's geo_slot holds
    boundary = True              # its silhouette is in the boundary terms (integrators/edges.py)

    def __init__(self, name, shape_index, imp):
        self.name = name
        self.implicit = imp
        self.members = [(shape_index, 0)]
        c, r = imp.sphere()
        m = np.asarray(imp.to_world, np.float64)
        self.q = m[:3, :3] / r                   # rotation or mirror: the uv frame and the normals' side stay
        self.c0, self.r0 = c, r
        self.record = -1                         # its geo_* record (scene.py)
        self.row = -1                            # its box primitive's triangle row, in BVH order (scene.py)

    def place(self, inv, start):
        """Its box primitive's row in BVH order from the inverse permutation inv and its shape's first row."""
        self.row = int(inv[start])

    def names(self):
        """Internal key -> pool name."""
        return {k: f"{self.name}.{k}" for k in ("center", "radius", DERIVED)}

    def initial_values(self):
        """Pool entries (name, value, kind, lo) at load: the centre, the radius, then the derived slot."""
        n = self.names()
        return [(n["center"], np.asarray(self.c0, np.float32), "geometry", -np.inf),
                (n["radius"], np.full(1, self.r0, np.float32), "geometry", 0.0),
                (n[DERIVED], np.zeros(4, np.float32), "derived", -np.inf)]

    def state(self, get):
        """(c (3,), R) float64 from the parameters (R kept above 1e-6 of its value at load)."""
        n = self.names()
        c = np.asarray(get(n["center"]), np.float64).reshape(3)
        r = float(np.asarray(get(n["radius"]), np.float64).reshape(-1)[0])
        return c, max(r, 1e-6 * self.r0)

    def record_values(self, c, r):
        """The geo_* record (dict of arrays, scene/implicit.device_rows' layout) and the world box (lo, hi) of the
        sphere with centre c and radius r."""
        m = np.eye(4)
        m[:3, :3] = r * self.q
        m[:3, 3] = c
        to_obj = np.linalg.inv(m)[:3]
        rec = dict(geo_to_obj=to_obj, geo_to_world=m[:3], geo_nm=np.linalg.inv(m[:3, :3]).T, geo_c=np.asarray(c),
                   geo_r=r, geo_ray=np.hstack([np.eye(3) / r, -np.asarray(c)[:, None] / r]))
        return rec, box_under(c - r, c + r, np.eye(4), pad=True)

    def write(self, st, c, r):
        """Rewrite the sphere's record and box primitive on the device (the caller refits the tree)."""
        rec, (lo, hi) = self.record_values(np.asarray(c, np.float64), float(r))
        for k, v in rec.items():
            getattr(st, k)[self.record] = np.asarray(v).tolist() if np.ndim(v) else float(v)
        write_rows(st, [self.row], np.array([[lo, hi, lo]]))          # a box primitive: e2 = 0 (core/implicit.py)

    # -- adjoint and tangent ---------------------------------------------------------------------
    def backward_slot(self, get, g):
        """Parameter gradients from the derived slot's (4,) ∂/∂(c, R)."""
        n = self.names()
        return {n["center"]: np.asarray(g[:3], np.float64), n["radius"]: np.asarray(g[3:4], np.float64)}

    def tangent_slot(self, get, dget):
        """The derived slot's (4,) tangent (ċ, Ṙ) along the direction dget(name) reads."""
        n = self.names()
        return np.concatenate([np.asarray(dget(n["center"]), np.float64).reshape(3),
                               np.asarray(dget(n["radius"]), np.float64).reshape(1)])

    def silhouette(self, get, eye, samples):
        """The circle of the sphere's silhouette seen from `eye` as a closed polygon of `samples` points on it
        ((samples, 3) float64, consecutive points an edge, the last back to the first); None when the eye is
        inside. Its centre c + (R²/D²)(eye - c), radius R √(1 - R²/D²), D = |eye - c|."""
        c, r = self.state(get)
        v = np.asarray(eye, np.float64) - c
        d2 = float(v @ v)
        if d2 <= (r * (1.0 + 1e-6)) ** 2:
            return None
        w = v / np.sqrt(d2)
        a = np.cross(w, [1.0, 0.0, 0.0] if abs(w[0]) < 0.9 else [0.0, 1.0, 0.0])
        a /= np.linalg.norm(a)
        b = np.cross(w, a)
        rho = r * np.sqrt(1.0 - r * r / d2)
        phi = 2.0 * np.pi * np.arange(samples) / samples
        return c + (r * r / d2) * v + rho * (np.cos(phi)[:, None] * a + np.sin(phi)[:, None] * b)
