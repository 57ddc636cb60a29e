"""Differentiable mesh geometry (issue 17): a shape declared ``differentiable: true`` exposes its
vertex positions and a rigid-plus-scale transform as parameters.

Parameters of shape ``<id>`` with V vertices (all in world units unless stated):

  ``<id>.vertex_positions`` (V, 3)  rest positions V_v (after the shape's ``to_world``)
  ``<id>.translation``      (3,)    t
  ``<id>.rotation``         (3,)    Euler angles (θx, θy, θz) in degrees, R = Rz(θz) Ry(θy) Rx(θx)
  ``<id>.scale``            (3,)    s, per world axis before the rotation
  ``<id>.uniform_scale``    (1,)    u

    P_v = c + t + R · u · diag(s) · (V_v - c)        c: the pivot, the centre of the rest
                                                     bounding box (fixed at load)

A ``type: sphere`` shape names its translation and uniform scale as what they are — ``<id>.center``
(3,), the centre c + t, and ``<id>.radius`` (1,), r₀·u with r₀ the rest mesh's mean distance from
c — with the same P. Shading normals (unless the shape has
``face_normals: true``) are the area-weighted vertex normals N_v = normalize(M_v),
M_v = Σ_{faces f ∋ v} (P_f1 - P_f0) × (P_f2 - P_f0), recomputed from the positions (normals the mesh
file carries are replaced once the shape is differentiable: they would not follow the motion).

Primal, adjoint and tangent run on the host in float64 (numpy: O(V + F) per optimiser step, like
the BVH refit that follows, scene/bvh.py). Kernels see the moved triangles (``tri_p0``, ``tri_e*``,
``tri_n*``) and, per triangle, ``tri_dm`` (the pool offset of the shape's derived slot
``<id>.world``, -1 for static triangles) and ``tri_code`` (its vertex indices). The derived slot
(V, 6) holds no value: reverse-mode kernels add ∂/∂P_v (3) and ∂/∂N_v (3) of each vertex into it
(``corner_adjoint``, deterministic fixed point like every gradient), and :meth:`Deformable.backward`
takes them to the parameters; forward mode puts (Ṗ_v, Ṅ_v) there (:meth:`Deformable.tangent`) so the
same corner sink yields <∂L/∂(P, N), (Ṗ, Ṅ)>.
"""
import numpy as np
import taichi as ti

from ..core import pool

PARAMS = ("vertex_positions", "translation", "rotation", "scale", "uniform_scale")
SPHERE_NAMES = {"translation": "center", "uniform_scale": "radius"}   # type sphere: absolute centre, radius
DERIVED = "world"


def param_names(sphere=False):
    """The parameter suffixes of a differentiable mesh (of a sphere shape: center and radius)."""
    return tuple(SPHERE_NAMES.get(k, k) if sphere else k for k in PARAMS)


def rotation(angles_deg):
    """R = Rz Ry Rx for Euler angles in degrees, and (∂R/∂θx, ∂R/∂θy, ∂R/∂θz) per degree."""
    a, b, c = np.radians(np.asarray(angles_deg, np.float64))
    k = np.pi / 180.0
    ca, sa, cb, sb, cc, sc = np.cos(a), np.sin(a), np.cos(b), np.sin(b), np.cos(c), np.sin(c)
    Rx = np.array([[1, 0, 0], [0, ca, -sa], [0, sa, ca]])
    Ry = np.array([[cb, 0, sb], [0, 1, 0], [-sb, 0, cb]])
    Rz = np.array([[cc, -sc, 0], [sc, cc, 0], [0, 0, 1]])
    dRx = np.array([[0, 0, 0], [0, -sa, -ca], [0, ca, -sa]])
    dRy = np.array([[-sb, 0, cb], [0, 0, 0], [-cb, 0, -sb]])
    dRz = np.array([[-sc, -cc, 0], [cc, -sc, 0], [0, 0, 0]])
    return Rz @ Ry @ Rx, (k * Rz @ Ry @ dRx, k * Rz @ dRy @ Rx, k * dRz @ Ry @ Rx)


def weld(positions):
    """Coincident vertices (within 1e-6 of the mesh's extent): (index (V,) of each vertex's welded
    point, the number n of welded points, first (n,) the first vertex of each)."""
    P = np.asarray(positions, np.float64)
    ext = float(np.ptp(P, axis=0).max()) if len(P) else 1.0
    grid = np.round(P / max(1e-6 * ext, 1e-30))
    _u, first, inv = np.unique(grid, axis=0, return_index=True, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(first), first.astype(np.int64)


def edge_topology(faces, positions):
    """The edges of a triangle mesh as discontinuity candidates (integrators/edges.py), on the mesh
    with coincident vertices welded (copies of a vertex at one position, e.g. along a uv seam or a
    cube's face corners, within 1e-6 of the mesh's extent, are one point of the surface): (edges (E, 2) vertex indices (the first copy
    of each), adjacent faces (E, 2) (-1 where an edge has one face; edges with more than two faces
    keep the first two), split (E,) bool: the two faces use different copies of the edge's vertices,
    so shading normals may jump across it)."""
    f = np.asarray(faces, np.int64)
    w, _n, first_copy = weld(positions)
    rep = first_copy[w]                                # vertex -> its first copy
    fw = rep[f]
    e = np.concatenate([fw[:, [0, 1]], fw[:, [1, 2]], fw[:, [2, 0]]])
    eo = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
    fid = np.tile(np.arange(len(f)), 3)
    key = np.sort(e, axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    order = np.argsort(inv.reshape(-1), kind="stable")
    sorted_inv = inv.reshape(-1)[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_inv)) + 1])
    counts = np.diff(np.concatenate([starts, [len(order)]]))
    j1 = order[starts]
    j2 = order[np.minimum(starts + 1, len(order) - 1)]
    second = np.where(counts > 1, fid[j2], -1)
    okey = np.sort(eo, axis=1)
    split = (counts > 1) & np.any(okey[j1] != okey[j2], axis=1)
    return uniq.astype(np.int32), np.stack([fid[j1], second], 1).astype(np.int32), split


def vertex_normals(faces, P):
    """Area-weighted vertex normals of positions P (V, 3): (N (V, 3) unit, M (V, 3) unnormalised
    sums, C (F, 3) face crosses (P1 - P0) × (P2 - P0))."""
    f = np.asarray(faces, np.int64)
    C = np.cross(P[f[:, 1]] - P[f[:, 0]], P[f[:, 2]] - P[f[:, 0]])
    M = np.zeros_like(P)
    for k in range(3):
        np.add.at(M, f[:, k], C)
    ln = np.linalg.norm(M, axis=1, keepdims=True)
    N = np.where(ln > 1e-30, M / np.maximum(ln, 1e-30), 0.0)
    return N, M, C


class Deformable:
    """One differentiable mesh shape: its topology, pivot and parameter names (see module doc).

    name: the shape id; faces (F, 3) vertex indices; rest (V, 3) rest positions; smooth: vertex
    normals recomputed (False: face normals); sphere: a sphere shape (center and radius parameters)."""

    analytic = False                     # a mesh (scene/sphere_body.SphereBody: an analytic sphere)
    boundary = True                      # its edges or silhouette are in the boundary terms (integrators/edges.py)

    def __init__(self, name, faces, rest, smooth, sphere=False):
        self.name = name
        self.faces = np.asarray(faces, np.int64)
        rest = np.asarray(rest, np.float64)
        self.n_vertices = len(rest)
        self.pivot = 0.5 * (rest.min(0) + rest.max(0))
        self.sphere = bool(sphere)
        self.r0 = float(np.linalg.norm(rest - self.pivot, axis=1).mean()) if sphere else 1.0
        self.smooth = bool(smooth)
        self.edges, self.edge_faces, self.edge_split = edge_topology(self.faces, rest)
        self.tri_index = None            # (F,) the faces' triangle indices in BVH order (scene.py)
        self.members = []                # [(shape index, vertex offset)]: the shapes it moves (scene.py)

    def names(self):
        """Internal key -> pool name (a sphere's translation is its ``center``, its uniform scale its
        ``radius``)."""
        return {k: f"{self.name}.{SPHERE_NAMES.get(k, k) if self.sphere else k}" for k in PARAMS + (DERIVED,)}

    def _t_u(self, t, u):
        """(translation, uniform scale) from the values of those parameters (a sphere's: centre, radius)."""
        return (t - self.pivot, u / self.r0) if self.sphere else (t, u)

    def initial_values(self, rest):
        """Pool entries (name, value, kind) of this shape: the parameters at rest, then the derived slot."""
        n = self.names()
        return [(n["vertex_positions"], np.asarray(rest, np.float32), "geometry"),
                (n["translation"], np.asarray(self.pivot if self.sphere else np.zeros(3), np.float32), "geometry"),
                (n["rotation"], np.zeros(3, np.float32), "geometry"),
                (n["scale"], np.ones(3, np.float32), "geometry"),
                (n["uniform_scale"], np.full(1, self.r0, np.float32), "geometry"),
                (n[DERIVED], np.zeros((self.n_vertices, 6), np.float32), "derived")]

    # -- primal -------------------------------------------------------------------------------
    def _state(self, get):
        n = self.names()
        V = np.asarray(get(n["vertex_positions"]), np.float64).reshape(-1, 3)
        t = np.asarray(get(n["translation"]), np.float64).reshape(3)
        R, dR = rotation(np.asarray(get(n["rotation"]), np.float64).reshape(3))
        s = np.asarray(get(n["scale"]), np.float64).reshape(3)
        u = float(np.asarray(get(n["uniform_scale"]), np.float64).reshape(-1)[0])
        t, u = self._t_u(t, u)
        return V, t, R, dR, s, u

    def positions(self, get):
        """World positions P (V, 3) float64; get(name) reads a parameter."""
        V, t, R, _dR, s, u = self._state(get)
        return self.pivot + t + ((V - self.pivot) * (u * s)) @ R.T

    def normals(self, P):
        """(N (V, 3) unit vertex normals, M (V, 3) their unnormalised sums, C (F, 3) face crosses)."""
        return vertex_normals(self.faces, P)

    # -- adjoint --------------------------------------------------------------------------------
    def backward_slot(self, get, g):
        """Parameter gradients from the derived slot's values g ((V, 6) flat: ∂/∂P_v, ∂/∂N_v)."""
        g = np.asarray(g, np.float64).reshape(-1, 6)
        return self.backward(get, g[:, :3], g[:, 3:])

    def tangent_slot(self, get, dget):
        """The derived slot's tangent ((V, 6) flat: Ṗ_v, Ṅ_v) along the direction dget(name) reads."""
        dP, dN = self.tangent(get, dget)
        return np.concatenate([dP, dN], 1).ravel()

    def backward(self, get, gP, gN):
        """Gradients of the parameters (dict name -> array shaped like it, float64) from ∂/∂P (V, 3)
        and ∂/∂N (V, 3) of the world positions and shading normals."""
        V, t, R, dR, s, u = self._state(get)
        P = self.pivot + t + ((V - self.pivot) * (u * s)) @ R.T
        gP = np.array(gP, np.float64).reshape(-1, 3)
        if self.smooth:
            gP += self._normals_backward(P, np.asarray(gN, np.float64).reshape(-1, 3))
        q = V - self.pivot
        w = q * (u * s)                       # before the rotation
        gw = gP @ R                           # Rᵀ gP per vertex
        G = gP.T @ w                          # Σ_v gP_v w_vᵀ
        n = self.names()
        return {n["vertex_positions"]: gw * (u * s),
                n["translation"]: gP.sum(0),
                n["rotation"]: np.array([np.sum(G * d) for d in dR]),
                n["scale"]: u * np.sum(gw * q, 0),
                n["uniform_scale"]: np.array([np.sum(gw * q * s)]) / self.r0}     # r0 = 1 unless a sphere

    def _normals_backward(self, P, gN):
        """∂/∂P of <gN, N(P)> for the area-weighted vertex normals."""
        N, M, _C = self.normals(P)
        ln = np.linalg.norm(M, axis=1, keepdims=True)
        gM = np.where(ln > 1e-30, (gN - N * np.sum(N * gN, 1, keepdims=True)) / np.maximum(ln, 1e-30), 0.0)
        f = self.faces
        gC = gM[f[:, 0]] + gM[f[:, 1]] + gM[f[:, 2]]
        a = P[f[:, 1]] - P[f[:, 0]]
        b = P[f[:, 2]] - P[f[:, 0]]
        ga = np.cross(b, gC)                  # <g, a × b>: ∂/∂a = b × g, ∂/∂b = g × a
        gb = np.cross(gC, a)
        out = np.zeros_like(P)
        np.add.at(out, f[:, 1], ga)
        np.add.at(out, f[:, 2], gb)
        np.add.at(out, f[:, 0], -ga - gb)
        return out

    # -- tangent (forward mode) -------------------------------------------------------------------
    def tangent(self, get, dget):
        """(Ṗ, Ṅ) (V, 3) each: the directional derivative of the world positions and normals along
        the direction dget(name) (arrays shaped like the parameters; zeros where not set)."""
        V, t, R, dR, s, u = self._state(get)
        n = self.names()
        dV = np.asarray(dget(n["vertex_positions"]), np.float64).reshape(-1, 3)
        dt = np.asarray(dget(n["translation"]), np.float64).reshape(3)
        dth = np.asarray(dget(n["rotation"]), np.float64).reshape(3)
        ds = np.asarray(dget(n["scale"]), np.float64).reshape(3)
        du = float(np.asarray(dget(n["uniform_scale"]), np.float64).reshape(-1)[0]) / self.r0
        q = V - self.pivot
        dRt = sum(dth[k] * dR[k] for k in range(3))
        dP = dt + (q * (u * s)) @ dRt.T + (q * (du * s + u * ds) + dV * (u * s)) @ R.T
        dN = self._normals_tangent(self.pivot + t + (q * (u * s)) @ R.T, dP) if self.smooth else np.zeros_like(dP)
        return dP, dN

    def _normals_tangent(self, P, dP):
        """Ṅ (V, 3): the derivative of the area-weighted vertex normals at P along dP."""
        N, M, _C = self.normals(P)
        f = self.faces
        a, b = P[f[:, 1]] - P[f[:, 0]], P[f[:, 2]] - P[f[:, 0]]
        da, db = dP[f[:, 1]] - dP[f[:, 0]], dP[f[:, 2]] - dP[f[:, 0]]
        dC = np.cross(da, b) + np.cross(a, db)
        dM = np.zeros_like(P)
        for k in range(3):
            np.add.at(dM, f[:, k], dC)
        ln = np.linalg.norm(M, axis=1, keepdims=True)
        return np.where(ln > 1e-30, (dM - N * np.sum(N * dM, 1, keepdims=True)) / np.maximum(ln, 1e-30), 0.0)


# ---------------------------------------------------------------------------------- device side
@ti.func
def corner_adjoint(st: ti.template(), tri, k, gv, gn):
    """Add ∂/∂P (gv) and ∂/∂N (gn) of corner k of a deformable triangle (world space) into its
    shape's derived slot (module doc); nothing for static triangles."""
    base = st.tri_dm[tri]
    if base >= 0:
        o = base + 6 * st.tri_code[tri][k]
        pool.add_gradient(st, o, 3, gv)
        pool.add_gradient(st, o + 3, 3, gn)
