"""Mitsuba's ``bsplinecurve`` and ``linearcurve`` (src/shapes/bsplinecurve.cpp, linearcurve.cpp) as tube meshes with
differentiable control points.

**File** (Mitsuba's format): one control point per line, ``x y z r`` (position, radius); an empty line starts a
new curve; each curve has at least 4 points (B-spline) or 2 (linear). ``to_world`` moves the positions, not the
radii (as Mitsuba).

**Linear curves** (Mitsuba's linearcurve: round segments joined by spherical joints, spherical end caps): per
segment c_a -> c_b a frustum with rings of radius w r_a, w r_b at its ends in the planes normal to its axis, closed
by flat caps (fans around c_a, c_b, inside the joints, on their own vertices: the frustum's vertex normals stay
radial), and at every control point a UV sphere (``sides`` meridians, ``sides // 2`` bands) of radius w r_i: the union is the
swept sphere of the segments where the radius is constant. v = (segment + t) / segments as Mitsuba's; u runs
around the axis from the ring's reference direction (Mitsuba's from its local frame), at the joints around z.

**Curve** (per curve of K points, K - 3 uniform cubic B-spline segments): on segment j with points c_j..c_{j+3},
t in [0, 1],

    C(t) = Σ_k B_k(t) c_{j+k},   R(t) = Σ_k B_k(t) r_{j+k},   T = C'(t) / |C'(t)|
    B = ((1-t)³, 3t³ - 6t² + 4, -3t³ + 3t² + 3t + 1, t³) / 6

**Tube** (Mitsuba's open tube, no end caps, the circle of radius R(t) in the plane normal to T): ``rings`` rings
per segment (the last one shared with the next segment) of ``sides`` vertices,

    P_ik = C_i + w R_i (cos θ_k n1_i + sin θ_k n2_i),   θ_k = 2π k / sides,   w = π / (sides sin(π / sides))
    n1 = normalize(a - (a·T) T),  n2 = T × n1

with a_i the ring's reference direction, fixed at load by parallel transport along the rest curve (no twist at
rest; under motion n1 stays the projection of a_i). uv = (θ / 2π, Mitsuba's global v = (segment + t) / segments);
Mitsuba's u starts at its local frame instead, so textures along u are rotated. w scales the polygon so that its
width averaged over directions (its perimeter / π) is the circle's 2R: a thin curve's shadow and silhouette cover
what Mitsuba's round tube covers on average (the width varies by ±1 - cos(π / sides) around it: 1.9 % at 16).
Open ends differ: Mitsuba culls a curve's back faces (a ray into an open end passes through), the tube's inside
is visible here; curves seen at closed loops or away from their ends match Mitsuba's image (tests/test_curves.py).

**Differentiable**: ``<id>.control_points`` (K_total, 4) (positions after to_world, radii), Mitsuba's
``control_points``; :class:`CurveBody` is a :class:`~tirender.scene.deform.Deformable` whose world positions are
P(control points): ``backward`` takes ∂/∂P (and the recomputed vertex normals' ∂/∂N) to the control points,
``tangent`` the other way (forward mode), both in float64 on the host.
"""
import numpy as np

from ..errors import ConfigError
from .deform import DERIVED, Deformable

SIDES = 16     # vertices around a ring
RINGS = 6      # rings per B-spline segment
MIN_POINTS = {"bsplinecurve": 4, "linearcurve": 2}    # Mitsuba's curve shapes: the fewest control points per curve
CURVES = tuple(MIN_POINTS)


def read_curves(path, min_points=4):
    """Mitsuba's curve file -> list of (K_i, 4) float64 arrays (x, y, z, r); ConfigError on a malformed line."""
    curves, cur = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if not s:
                if cur:
                    curves.append(cur)
                cur = []
                continue
            try:
                v = [float(x) for x in s.split()]
            except ValueError:
                raise ConfigError(f"line {n}: could not parse {s[:60]!r}", path, "filename") from None
            if len(v) != 4 or not np.all(np.isfinite(v)):
                raise ConfigError(f"line {n}: a control point is 4 finite numbers (x y z radius), got {s[:60]!r}",
                                  path, "filename")
            cur.append(v)
    if cur:
        curves.append(cur)
    if not curves:
        raise ConfigError("no control points were read", path, "filename")
    for c in curves:
        if len(c) < min_points:
            kind = "a B-spline" if min_points == 4 else "a linear"
            raise ConfigError(f"{kind} curve needs at least {min_points} control points (one has {len(c)})", path,
                              "filename")
    return [np.array(c, np.float64) for c in curves]


def _basis(t):
    """Uniform cubic B-spline weights B (T, 4) and their derivatives B' (T, 4) at t (T,)."""
    t = np.asarray(t, np.float64)
    s = 1.0 - t
    B = np.stack([s ** 3, 3 * t ** 3 - 6 * t ** 2 + 4, -3 * t ** 3 + 3 * t ** 2 + 3 * t + 1, t ** 3], 1) / 6.0
    dB = np.stack([-3 * s ** 2, 9 * t ** 2 - 12 * t, -9 * t ** 2 + 6 * t + 3, 3 * t ** 2], 1) / 6.0
    return B, dB


class Tube:
    """The tube mesh's topology and the linear maps from control points to the rings' centres, radii and
    derivatives: W (N_rings, K_total) and dW (N_rings, K_total) sparse-as-dense weights (curves are small)."""

    def __init__(self, curves, sides=SIDES, rings=RINGS, linear=False):
        """linear: one frustum per segment of consecutive points (two rings of its own), else uniform cubic
        B-spline segments of ``rings`` rings each, shared at the joins."""
        self.sides = int(sides)
        counts = [len(c) for c in curves]
        K = sum(counts)
        order = 2 if linear else 4                       # control points per segment
        n_seg = sum(k - order + 1 for k in counts)
        if linear:                                       # rings at t = 0, 1: C = (1 - t) c_a + t c_b
            ts, B, dB = np.array([0.0, 1.0]), np.eye(2), np.array([[-1.0, 1.0], [-1.0, 1.0]])
        else:
            ts = np.arange(rings + 1) / rings
            B, dB = _basis(ts)
        Ws, dWs, vs, ring_first = [], [], [], []
        offset, seg, n_rows = 0, 0, 0
        for k in counts:
            for j in range(k - order + 1):
                first = linear or j == 0                 # a new strip of rings: each linear segment, each B-spline
                if first:                                # curve (a segment's first ring is the last one's)
                    ring_first.append(n_rows)
                rows = slice(0 if first else 1, len(ts))
                W = np.zeros((len(ts), K))
                dW = np.zeros((len(ts), K))
                W[:, offset + j:offset + j + order] = B
                dW[:, offset + j:offset + j + order] = dB
                Ws.append(W[rows])
                dWs.append(dW[rows])
                vs.append((seg + ts[rows]) / n_seg)
                n_rows += len(ts[rows])
                seg += 1
            offset += k
        self.W, self.dW = np.concatenate(Ws), np.concatenate(dWs)
        v = np.concatenate(vs)
        ring_first.append(len(self.W))
        # faces between consecutive rings of a strip; vertex (i, k) = i * sides + k, the seam closed by index
        S = self.sides
        faces = []
        for c in range(len(ring_first) - 1):
            for i in range(ring_first[c], ring_first[c + 1] - 1):
                k = np.arange(S)
                a, b = i * S + k, i * S + (k + 1) % S
                c_, d = a + S, b + S
                faces += [np.stack([a, b, d], 1), np.stack([a, d, c_], 1)]
        self.faces = np.concatenate(faces).astype(np.int64)
        self.theta = 2 * np.pi * np.arange(S) / S
        self.w = np.pi / (S * np.sin(np.pi / S))      # mean width of the polygon = the circle's
        self.uvs = np.stack([np.tile(np.arange(S) / S, len(v)), np.repeat(v, S)], 1).astype(np.float32)
        self.ring_first = ring_first
        self.ref = None          # (N_rings, 3) reference directions a_i (set by transport)

    # -- centreline ----------------------------------------------------------------------------
    def frame(self, ctrl):
        """(C, R, D, T) per ring: centres (N, 3), the polygon's radii w R (N,), C' (N, 3), unit tangents (N, 3)."""
        ctrl = np.asarray(ctrl, np.float64).reshape(-1, 4)
        C, R, D = self.W @ ctrl[:, :3], self.w * (self.W @ ctrl[:, 3]), self.dW @ ctrl[:, :3]
        T = D / np.maximum(np.linalg.norm(D, axis=1, keepdims=True), 1e-30)
        return C, R, D, T

    def transport(self, ctrl):
        """Fix the rings' reference directions by parallel transport along the rest curve (per strip of rings, from
        a direction normal to its first tangent)."""
        _C, _R, _D, T = self.frame(ctrl)
        ref = np.zeros_like(T)
        for c in range(len(self.ring_first) - 1):
            i0, i1 = self.ring_first[c], self.ring_first[c + 1]
            t0 = T[i0]
            axis = np.eye(3)[np.argmin(np.abs(t0))]
            n = np.cross(axis, t0)
            n /= np.linalg.norm(n)
            for i in range(i0, i1):
                n = n - np.dot(n, T[i]) * T[i]               # project onto the ring's normal plane
                n /= max(np.linalg.norm(n), 1e-30)
                ref[i] = n
        self.ref = ref

    # -- primal, adjoint, tangent ----------------------------------------------------------------
    def positions(self, ctrl):
        """P (N * sides, 3) float64 of control points ctrl (K, 4)."""
        C, R, _D, T = self.frame(ctrl)
        n1, n2, _m = self._normals(T)
        ring = np.cos(self.theta)[None, :, None] * n1[:, None] + np.sin(self.theta)[None, :, None] * n2[:, None]
        return (C[:, None] + R[:, None, None] * ring).reshape(-1, 3)

    def normals(self, ctrl):
        """Radial unit vertex normals (N * sides, 3): from each ring's centre."""
        C = self.frame(ctrl)[0]
        nrm = self.positions(ctrl).reshape(len(C), self.sides, 3) - C[:, None]
        nrm /= np.maximum(np.linalg.norm(nrm, axis=2, keepdims=True), 1e-30)
        return nrm.reshape(-1, 3)

    def _normals(self, T):
        a = self.ref
        m = a - np.sum(a * T, 1, keepdims=True) * T
        lm = np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-30)
        n1 = m / lm
        return n1, np.cross(T, n1), lm

    def backward(self, ctrl, gP):
        """∂<gP, P(ctrl)>/∂ctrl (K, 4) for gP (N * sides, 3)."""
        C, R, D, T = self.frame(ctrl)
        n1, n2, lm = self._normals(T)
        g = np.asarray(gP, np.float64).reshape(len(C), self.sides, 3)
        cs, sn = np.cos(self.theta)[None, :, None], np.sin(self.theta)[None, :, None]
        gC = g.sum(1)
        gR = np.sum(g * (cs * n1[:, None] + sn * n2[:, None]), (1, 2))
        g_n1 = R[:, None] * np.sum(cs * g, 1)
        g_n2 = R[:, None] * np.sum(sn * g, 1)
        g_T = np.cross(n1, g_n2)                              # n2 = T × n1
        g_n1 = g_n1 + np.cross(g_n2, T)
        g_m = (g_n1 - n1 * np.sum(n1 * g_n1, 1, keepdims=True)) / lm
        a = self.ref
        g_T += -np.sum(a * T, 1, keepdims=True) * g_m - np.sum(g_m * T, 1, keepdims=True) * a
        lD = np.maximum(np.linalg.norm(D, axis=1, keepdims=True), 1e-30)
        g_D = (g_T - T * np.sum(T * g_T, 1, keepdims=True)) / lD
        out = np.zeros((self.W.shape[1], 4))
        out[:, :3] = self.W.T @ gC + self.dW.T @ g_D
        out[:, 3] = self.w * (self.W.T @ gR)
        return out

    def tangent(self, ctrl, dctrl):
        """Ṗ (N * sides, 3): the derivative of P along dctrl (K, 4)."""
        C, R, D, T = self.frame(ctrl)
        n1, _n2, lm = self._normals(T)
        dc = np.asarray(dctrl, np.float64).reshape(-1, 4)
        dC, dR, dD = self.W @ dc[:, :3], self.w * (self.W @ dc[:, 3]), self.dW @ dc[:, :3]
        lD = np.maximum(np.linalg.norm(D, axis=1, keepdims=True), 1e-30)
        dT = (dD - T * np.sum(T * dD, 1, keepdims=True)) / lD
        a = self.ref
        dm = -np.sum(a * dT, 1, keepdims=True) * T - np.sum(a * T, 1, keepdims=True) * dT
        dn1 = (dm - n1 * np.sum(n1 * dm, 1, keepdims=True)) / lm
        n2 = np.cross(T, n1)
        dn2 = np.cross(dT, n1) + np.cross(T, dn1)
        cs, sn = np.cos(self.theta)[None, :, None], np.sin(self.theta)[None, :, None]
        ring = cs * n1[:, None] + sn * n2[:, None]
        dring = cs * dn1[:, None] + sn * dn2[:, None]
        return (dC[:, None] + dR[:, None, None] * ring + R[:, None, None] * dring).reshape(-1, 3)


class Joints:
    """Linear curves' spherical joints and end caps: at control point i a UV sphere (``sides`` meridians,
    ``sides // 2`` bands, poles on z) of vertices P_ik = c_i + w r_i U_k, linear in the control points."""

    def __init__(self, curves, sides=SIDES, w=1.0):
        bands = max(sides // 2, 2)
        th = np.pi * np.arange(1, bands) / bands
        ph = 2 * np.pi * np.arange(sides) / sides
        U = np.concatenate([[[0.0, 0.0, 1.0]],
                            np.stack([np.outer(np.sin(th), np.cos(ph)), np.outer(np.sin(th), np.sin(ph)),
                                      np.repeat(np.cos(th)[:, None], sides, 1)], 2).reshape(-1, 3),
                            [[0.0, 0.0, -1.0]]])
        S, nb = sides, bands - 1
        k = np.arange(S)
        f = [np.stack([np.zeros(S, int), 1 + k, 1 + (k + 1) % S], 1)]          # north cap, outward winding
        for b in range(nb - 1):
            a, c = 1 + b * S + k, 1 + b * S + (k + 1) % S
            f += [np.stack([a, a + S, c], 1), np.stack([c, a + S, c + S], 1)]
        last = 1 + nb * S
        f.append(np.stack([last - S + k, np.full(S, last), last - S + (k + 1) % S], 1))
        one = np.concatenate(f)
        self.U, self.w, self.n_points = U, float(w), sum(len(c) for c in curves)
        nu = len(U)
        self.faces = np.concatenate([one + i * nu for i in range(self.n_points)]).astype(np.int64)
        n_seg = sum(len(c) - 1 for c in curves)
        v = np.concatenate([(o + np.arange(len(c))) / n_seg
                            for o, c in zip(np.cumsum([0] + [len(c) - 1 for c in curves]), curves)])
        u = (np.arctan2(U[:, 1], U[:, 0]) / (2 * np.pi)) % 1.0
        self.uvs = np.stack([np.tile(u, self.n_points), np.repeat(v, nu)], 1).astype(np.float32)

    def positions(self, ctrl):
        c = np.asarray(ctrl, np.float64).reshape(-1, 4)
        return (c[:, None, :3] + self.w * c[:, None, 3:4] * self.U[None]).reshape(-1, 3)

    def normals(self, ctrl):
        return np.tile(self.U, (self.n_points, 1))

    def backward(self, ctrl, gP):
        g = np.asarray(gP, np.float64).reshape(self.n_points, len(self.U), 3)
        out = np.zeros((self.n_points, 4))
        out[:, :3] = g.sum(1)
        out[:, 3] = self.w * np.einsum("ikj,kj->i", g, self.U)
        return out

    def tangent(self, ctrl, dctrl):
        return self.positions(dctrl)          # linear in the control points


class LinearTube:
    """A linear curve's mesh: the segments' frustums (a :class:`Tube`) closed by flat caps (fans around the
    segment's end points, inside the joints, on copies of the end rings' vertices so that the frustums' vertex
    normals stay radial), then the :class:`Joints`: closed pieces, so that no open rim is seen through a joint.
    The interface of :class:`Tube` (faces, uvs, positions, normals, backward, tangent) over all."""

    def __init__(self, curves, sides=SIDES):
        self.tube = Tube(curves, sides, linear=True)
        self.joints = Joints(curves, sides, self.tube.w)
        S = self.sides = self.tube.sides
        self.n_tube = len(self.tube.W) * S
        # cap e (ring e of the tube: segment e // 2, its start or end) = the ring's S vertices copied, then its
        # centre (the segment's end point, a control point): vertices n_tube + e (S + 1) + (0 .. S)
        starts = np.concatenate([o + np.arange(len(c) - 1)
                                 for o, c in zip(np.cumsum([0] + [len(c) for c in curves]), curves)])
        self.cap_points = np.stack([starts, starts + 1], 1).reshape(-1)
        n_rings = len(self.cap_points)
        k = np.arange(S)
        caps = []
        for e in range(n_rings):
            b = self.n_tube + e * (S + 1)
            if e % 2 == 0:
                caps.append(np.stack([np.full(S, b + S), b + (k + 1) % S, b + k], 1))     # facing -T
            else:
                caps.append(np.stack([np.full(S, b + S), b + k, b + (k + 1) % S], 1))     # facing +T
        self.n_caps = n_rings * (S + 1)
        self.faces = np.concatenate([self.tube.faces] + caps + [self.joints.faces + self.n_tube + self.n_caps])
        v = self.tube.uvs[::S, 1]
        cap_uv = np.stack([np.zeros(self.n_caps), np.repeat(v, S + 1)], 1).astype(np.float32)
        self.uvs = np.concatenate([self.tube.uvs, cap_uv, self.joints.uvs])

    def transport(self, ctrl):
        self.tube.transport(ctrl)

    def _caps(self, ring_values, centres):
        """The caps' vertex rows from the tube's ring rows (n_tube, 3) and the centres (rings, 3)."""
        r = ring_values.reshape(-1, self.sides, 3)
        return np.concatenate([r, centres[:, None]], 1).reshape(-1, 3)

    def _split(self, a):
        a = np.asarray(a, np.float64).reshape(-1, 3)
        n = self.n_tube + self.n_caps
        caps = a[self.n_tube:n].reshape(-1, self.sides + 1, 3)
        return a[:self.n_tube] + caps[:, :self.sides].reshape(-1, 3), caps[:, self.sides], a[n:]

    def positions(self, ctrl):
        c = np.asarray(ctrl, np.float64).reshape(-1, 4)
        P = self.tube.positions(c)
        return np.concatenate([P, self._caps(P, c[self.cap_points, :3]), self.joints.positions(c)])

    def normals(self, ctrl):
        T = self.tube.frame(ctrl)[3] * np.tile([-1.0, 1.0], len(self.cap_points) // 2)[:, None]
        return np.concatenate([self.tube.normals(ctrl), np.repeat(T, self.sides + 1, 0), self.joints.normals(ctrl)])

    def backward(self, ctrl, gP):
        g_tube, g_centres, g_joints = self._split(gP)      # the ring copies' gradients added to the rings'
        out = self.tube.backward(ctrl, g_tube) + self.joints.backward(ctrl, g_joints)
        np.add.at(out[:, :3], self.cap_points, g_centres)
        return out

    def tangent(self, ctrl, dctrl):
        d = np.asarray(dctrl, np.float64).reshape(-1, 4)
        dP = self.tube.tangent(ctrl, d)
        return np.concatenate([dP, self._caps(dP, d[self.cap_points, :3]), self.joints.tangent(ctrl, d)])


def curve_mesh(curves, to_world, sides=SIDES, rings=RINGS, linear=False):
    """The mesh of curves (list of (K_i, 4) in object space) under to_world (positions only): a B-spline tube or
    (linear) a :class:`LinearTube`: dict(positions, faces, normals, uvs) and ``curve`` = (the tube, control points
    (K, 4) in world space)."""
    ctrl = np.concatenate(curves)
    m = np.asarray(to_world, np.float64)
    ctrl[:, :3] = ctrl[:, :3] @ m[:3, :3].T + m[:3, 3]
    tube = LinearTube(curves, sides) if linear else Tube(curves, sides, rings)
    tube.transport(ctrl)
    return dict(positions=tube.positions(ctrl).astype(np.float32), faces=tube.faces.astype(np.int32),
                normals=tube.normals(ctrl).astype(np.float32), uvs=tube.uvs, curve=(tube, ctrl))


class CurveBody(Deformable):
    """A curve shape's geometry parameter: ``<id>.control_points`` (K, 4); world positions P = tube(ctrl)."""

    def __init__(self, name, tube, ctrl):
        super().__init__(name, tube.faces, tube.positions(ctrl), True)
        self.tube = tube
        self.n_controls = len(ctrl)

    def names(self):
        return {"control_points": f"{self.name}.control_points", DERIVED: f"{self.name}.{DERIVED}"}

    def initial_values(self, ctrl):
        n = self.names()
        return [(n["control_points"], np.asarray(ctrl, np.float32), "geometry"),
                (n[DERIVED], np.zeros((self.n_vertices, 6), np.float32), "derived")]

    def _ctrl(self, get):
        return np.asarray(get(self.names()["control_points"]), np.float64).reshape(-1, 4)

    def positions(self, get):
        return self.tube.positions(self._ctrl(get))

    def backward(self, get, gP, gN):
        ctrl = self._ctrl(get)
        gP = np.array(gP, np.float64).reshape(-1, 3)
        gP += self._normals_backward(self.tube.positions(ctrl), np.asarray(gN, np.float64).reshape(-1, 3))
        return {self.names()["control_points"]: self.tube.backward(ctrl, gP)}

    def tangent(self, get, dget):
        ctrl = self._ctrl(get)
        dP = self.tube.tangent(ctrl, dget(self.names()["control_points"]))
        return dP, self._normals_tangent(self.tube.positions(ctrl), dP)
