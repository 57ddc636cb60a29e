"""Edge sampling (Li, Aittala, Durand, Lehtinen 2018, "Differentiable Monte Carlo Ray Tracing
through Edge Sampling"): the boundary term of the gradient when geometry moves (issue 17).

A pixel integral I_p = ∫ k_p(x) L(x) dx over the film (x in pixels) has discontinuities along the
projections of mesh edges (silhouettes, boundaries, creases of flat-shaded meshes). When an edge
moves, Reynolds' transport theorem adds to ∂I_p/∂π, besides the interior (PRB) term,

    ∫_edge k_p(x) (L⁻(x) - L⁺(x)) (n · ∂x/∂π) dℓ                       (n: the edge's screen normal,
                                                                      L± the radiance on either side)

Reverse mode with the adjoint image δy: the film's adjoint at x is spp · gather_adjoint(x)
(δy_p k_p(x) / W_p summed over pixels: the normalisation PRB's samples use, so both terms
differentiate the same estimator). Edges are chosen in proportion to their projected length (after
clipping to the film plus the filter radius and to the near plane), a point uniformly on the chosen
one, L± by two camera paths through x ± ε n sharing their random numbers (their difference is
what matters), and the weight (L⁻ - L⁺)·δL · L_total / n_samples goes to the edge's two world
vertices along the world-space gradient of n·x(X) (``camera.camera_connect_adjoint``), into the
differentiable meshes' derived slots (scene/deform.py). Edges of static meshes do not move and are
not sampled.

Candidate edges (host, per sensor and gradient pass; ``primary_edges``), on each mesh with its
coincident vertices welded (scene/deform.edge_topology): boundary edges, silhouettes (one adjacent
face towards the camera, one away) and creases where shading may jump (flat shading, or split
vertices). An edge's motion is that of the first copy of each endpoint: meshes with split vertices
are assumed to keep their copies together (transforms always do).
"""
import numpy as np
import taichi as ti

from .. import variants
from ..core import film, pool
from ..core.intersect import occluded
from ..core.math import BIG, max_component, vec2, vec3
from ..core.rng import make_sampler
from ..sensors import batch
from ..sensors.base import project
from ..sensors.registry import camera_connect_adjoint, camera_ray, check_perspective
from ..variants import spec
from ..walk import vertex
from ..walk.state import PRIMAL
from . import path, quadric_edges, shadow_edges

EPS_PIXELS = 1e-3        # the two sides of an edge are sampled this far (pixels) from it
EPS_DIR = 1e-4           # ... and this far (radians) in the directions seen from a path vertex
SEED_MIX = 0x5BD1E995    # decorrelates the edge samples' streams from the pixel samples'
SEED_MIX2 = 0x27D4EB2F
BOUNDARY, CREASE = 1, 2  # SecondaryTable.flags
MIN_ROWS = 16384         # the edge tables' first capacity (table_rows)


def table_rows(n):
    """The capacity of a shared edge table that must hold n rows: MIN_ROWS, grown 4x at a time. A table is a
    kernel argument, so a larger one recompiles every kernel that reads it (prb_attached's gradient kernels:
    15-25 s each on 2 cores); a user's scenes and an optimisation's changing edge counts rarely cross a size
    (16,384 rows: about 1.4 MB for the secondary table)."""
    cap = MIN_ROWS
    while cap < n:
        cap *= 4
    return cap


assert shadow_edges.BAND >= 2 * EPS_DIR     # the light-aimed intervals cover both sides' rays


@ti.data_oriented
class EdgeTable:
    """Device table of sampled edges, capacity table_rows (regrown, never per call): screen
    endpoints a, b (pixels, after clipping), world endpoints x0, x1 of the unclipped edge, the pool
    offsets slot0, slot1 of the endpoints' derived slots, the CDF of the clipped lengths, and sphere: the
    record of the analytic sphere whose silhouette the edge is a chord of (slot0 its derived slot), -1 for a mesh's."""

    _shared = {}

    def __init__(self, cap):
        self.cap = cap
        self.a, self.b = vec2.field(shape=cap), vec2.field(shape=cap)
        self.x0, self.x1 = vec3.field(shape=cap), vec3.field(shape=cap)
        self.slot0, self.slot1 = ti.field(ti.i32, shape=cap), ti.field(ti.i32, shape=cap)
        self.sphere = ti.field(ti.i32, shape=cap)
        self.cdf = ti.field(float, shape=cap)

    @classmethod
    def holding(cls, rows):
        """The shared table, grown to fit, with rows (dict of arrays: a, b, x0, x1, slot0, slot1, sphere, cdf)."""
        n = len(rows["cdf"])
        cap = table_rows(n)
        t = cls._shared.get("primary")
        if t is None or t.cap < cap:
            t = cls._shared["primary"] = cls(cap)
        for k, v in rows.items():
            arr = np.zeros((t.cap,) + v.shape[1:], v.dtype)      # the shared table may be larger than cap
            arr[:n] = v
            if k == "cdf":
                arr[n:] = 2.0                 # beyond the last edge: never chosen
            getattr(t, k).from_numpy(arr.astype(np.float32) if arr.dtype.kind == "f" else arr)
        t.n = n
        return t


def _clip(p, q, lo, hi):
    """Liang–Barsky: the parameter range [t0, t1] of segments p + t (q - p) (arrays (E, 2)) inside the box
    [lo, hi]; t0 > t1 where a segment misses it."""
    t0 = np.zeros(len(p))
    t1 = np.ones(len(p))
    d = q - p
    for k in range(2):
        for bound, sgn in ((lo[k], -1.0), (hi[k], 1.0)):
            num = sgn * (bound - p[:, k])       # inside: sgn * (x - bound) <= 0
            den = sgn * d[:, k]
            with np.errstate(divide="ignore", invalid="ignore"):
                t = num / den
            t0 = np.where(den < 0, np.maximum(t0, t), t0)
            t1 = np.where(den > 0, np.minimum(t1, t), t1)
            t1 = np.where((den == 0) & (num < 0), -1.0, t1)
    return t0, t1


def _silhouette_somewhere(n1, n2, a, b):
    """Whether the edge from a to b (relative to the eye) is a silhouette at some point X(τ) = a + τ (b - a),
    τ in [0, 1]: the two faces' f_i(τ) = n_i · X(τ) of opposite signs there. q = f1 f2 is quadratic in τ: negative
    at an end or at its vertex."""
    f1a, f1b = np.einsum("ij,ij->i", n1, a), np.einsum("ij,ij->i", n1, b)
    f2a, f2b = np.einsum("ij,ij->i", n2, a), np.einsum("ij,ij->i", n2, b)
    d1, d2 = f1b - f1a, f2b - f2a
    qa = d1 * d2                                       # q(τ) = f1a f2a + (f1a d2 + f2a d1) τ + d1 d2 τ²
    qb = f1a * d2 + f2a * d1
    with np.errstate(divide="ignore", invalid="ignore"):
        tv = np.clip(np.where(qa > 0, -qb / (2 * qa), 0.0), 0.0, 1.0)
    q = lambda t: (f1a + d1 * t) * (f2a + d2 * t)     # noqa: E731
    return (q(0.0) < 0) | (q(1.0) < 0) | (q(tv) < 0)


def _project_edges(cand, e_all, P, cam, lo, hi):
    """One camera's share of a mesh's candidate edges (cand, their vertex pairs e_all; P the mesh's positions):
    boundaries and creases always, the other bent edges where they are silhouettes from the pinhole anywhere along
    them (a long edge in perspective can be one over part of its length only); clipped to the near side of the
    pinhole, projected (pixels), clipped to the box [lo, hi]. Returns (a, b, X0, X1, e) of the visible ones."""
    o = cam.to_world[:3, 3]
    X0, X1 = cand["x0"], cand["x1"]
    keep = (cand["flags"] != 0) | _silhouette_somewhere(cand["n1"], cand["n2"], X0 - o, X1 - o)
    a, b, vis = _project_segments(X0[keep], X1[keep], float(np.abs(P - o).max()), cam, lo, hi)
    return a, b, X0[keep][vis], X1[keep][vis], e_all[keep][vis]


def _project_segments(X0, X1, extent, cam, lo, hi):
    """World segments X0 X1 (E, 3) clipped to the near side of the pinhole (1e-4 of `extent`, the geometry's
    distance from it), projected (pixels) and clipped to the box [lo, hi]: (a, b) of the visible ones and which
    those are (E,) bool."""
    m = cam.to_world
    o = m[:3, 3]
    fwd = m[:3, 2] / np.linalg.norm(m[:3, 2])
    z0, z1 = (X0 - o) @ fwd, (X1 - o) @ fwd
    zmin = 1e-4 * max(extent, 1e-30)
    ok = (z0 > zmin) | (z1 > zmin)
    with np.errstate(divide="ignore", invalid="ignore"):
        tz = np.clip((zmin - z0) / (z1 - z0), 0.0, 1.0)
    A = np.where((z0 > zmin)[:, None], X0, X0 + tz[:, None] * (X1 - X0))
    B = np.where((z1 > zmin)[:, None], X1, X0 + tz[:, None] * (X1 - X0))
    a, b = project(cam, A[ok]), project(cam, B[ok])
    t0, t1 = _clip(a, b, lo, hi)
    vis = np.zeros(len(X0), bool)
    vis[np.flatnonzero(ok)] = t1 > t0
    inside = t1 > t0
    a, b = a + t0[:, None] * (b - a), a + t1[:, None] * (b - a)
    return a[inside], b[inside], vis


def _sphere_segments(d, get, cam, lo, hi):
    """An analytic sphere's silhouette from the pinhole as a polygon on its circle (SphereBody.silhouette), fine
    enough that its chords stay within 1e-5 pixel of the circle (the two sides of an edge sample are EPS_PIXELS
    apart), projected and clipped as _project_segments: (a, b, X0, X1) of the visible chords."""
    o = cam.to_world[:3, 3]
    c, r = d.state(get)
    dist = float(np.linalg.norm(c - o))
    focal = cam.width / (2.0 * max(cam.tan_x, 1e-12))
    rho_px = r / max(dist - r, 1e-12 * dist) * focal                # the circle's radius on the film, at most
    n = int(np.clip(np.ceil(np.pi * np.sqrt(rho_px / 2e-5)), 256, 1 << 16))   # sag ρ (π / n)² / 2 <= 1e-5 px
    pts = d.silhouette(get, o, n)
    if pts is None:
        return None
    X0, X1 = pts, np.roll(pts, -1, axis=0)
    a, b, vis = _project_segments(X0, X1, dist + r, cam, lo, hi)
    return a, b, X0[vis], X1[vis]


def primary_edges(scene, sensor):
    """The candidate edges of the differentiable meshes seen from `sensor` (module doc), projected,
    clipped, with their CDF: dict of arrays for EdgeTable.holding, and the total length (pixels). A perspective
    sensor only (as Mitsuba's projective integrators)."""
    check_perspective(scene, sensor, "the primary-visibility boundary term (differentiable meshes; integrator.sppp: 0 "
                                     "leaves it out)")
    s = scene.sensors[sensor]
    radius = s.radius if s.filter != "box" else 0.0
    # the film's cameras: the sensor, or a batch's children side by side (sensors/batch.py), each edge clipped to
    # its camera's columns (a sample there is that camera's)
    views = [(s, 0.0, -radius, s.width + radius)]
    if s.children:
        wc = s.width // len(s.children)
        views = [(c, k * wc, -radius if k == 0 else 0.0, wc + (radius if k == len(s.children) - 1 else 0.0))
                 for k, c in enumerate(s.children)]
    get = scene.params.__getitem__
    rows = {k: [] for k in ("a", "b", "x0", "x1", "slot0", "slot1", "sphere")}
    for d in scene.deformables:
        if not d.boundary:               # an SDF grid (scene/sdf_body.py)
            continue
        if d.analytic:                   # an analytic sphere: chords of its silhouette from each camera
            base = scene.params.slot(d.names()["world"]).offset
            for cam, dx, xlo, xhi in views:
                seg = _sphere_segments(d, get, cam, (xlo, -radius), (xhi, cam.height + radius))
                if seg is not None:
                    a, b, X0, X1 = seg
                    rows["a"].append(a + np.array([dx, 0.0]))
                    rows["b"].append(b + np.array([dx, 0.0]))
                    rows["x0"].append(X0)
                    rows["x1"].append(X1)
                    rows["slot0"].append(np.full(len(a), base))
                    rows["slot1"].append(np.full(len(a), base))
                    rows["sphere"].append(np.full(len(a), d.record))
            continue
        P = d.positions(get)
        cand, e_all = _candidates(d.faces, P, d.smooth, d.edges, d.edge_faces, d.edge_split)
        base = scene.params.slot(d.names()["world"]).offset
        for cam, dx, xlo, xhi in views:
            a, b, X0, X1, e = _project_edges(cand, e_all, P, cam, (xlo, -radius), (xhi, cam.height + radius))
            rows["a"].append(a + np.array([dx, 0.0]))
            rows["b"].append(b + np.array([dx, 0.0]))
            rows["x0"].append(X0)
            rows["x1"].append(X1)
            rows["slot0"].append(base + 6 * e[:, 0].astype(np.int64))
            rows["slot1"].append(base + 6 * e[:, 1].astype(np.int64))
            rows["sphere"].append(np.full(len(a), -1))
    out = {k: (np.concatenate(v) if v else np.zeros((0, 2 if k in "ab" else 3))) for k, v in rows.items()}
    for k in ("slot0", "slot1", "sphere"):
        out[k] = out[k].astype(np.int32).reshape(-1)
    length = np.linalg.norm(out["b"] - out["a"], axis=1) if len(out["a"]) else np.zeros(0)
    total = float(length.sum())
    cdf = np.cumsum(length) / total if total > 0 else np.zeros(0)
    if len(cdf):
        cdf[-1] = 1.0
    out["cdf"] = cdf
    return out, total


@ti.func
def _pick_table(cdf: ti.template(), n, u):
    """The first row whose CDF exceeds u (binary search over n rows), and u remapped into [0, 1) within it."""
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cdf[mid] > u:
            hi = mid
        else:
            lo = mid + 1
    c0 = 0.0
    if lo > 0:
        c0 = cdf[lo - 1]
    w = cdf[lo] - c0
    r = 0.5
    if w > 0.0:
        r = ti.min(ti.max((u - c0) / w, 0.0), 0.9999999)
    return lo, r


@ti.func
def _line_param(o, d, x0, x1):
    """τ of the point of the line x0 + τ (x1 - x0) closest to the ray line o + s d (|d| = 1)."""
    e = x1 - x0
    w = x0 - o
    b = e.dot(d)
    c = e.dot(e)
    den = c - b * b
    tau = 0.0
    if den > 1e-30 * c:
        tau = (b * w.dot(d) - w.dot(e)) / den
    return ti.min(ti.max(tau, 0.0), 1.0)


_kernels = {}


def _kernel(kind="adjoint"):
    """kind "adjoint": add the boundary term of <δy, image> into the derived slots; "tangent" (st a
    core/pool.Tangent view): splat its tangent (L⁻ - L⁺) <∇_X(n·x), Ẋ> into the film (no weight)."""
    if kind not in _kernels:
        @ti.kernel
        def primary(st: ti.template(), bsdf: ti.template(), em: ti.template(), tab: ti.template(), n_edges: ti.i32,
                    cam: ti.i32, n_samples: ti.i32, seed: ti.u32, scale: float, max_depth: ti.i32,
                    rr_depth: ti.i32, hide_emitters: ti.i32):
            for j in range(n_samples):
                sampler = make_sampler(seed ^ ti.u32(SEED_MIX), j, 0)
                k, r = _pick_table(tab.cdf, n_edges, sampler.next_1d())
                lam, lw = variants.sample_wavelengths(sampler)   # both sides' paths carry them
                a = tab.a[k]
                ab = tab.b[k] - a
                la = ab.norm()
                if la > 0.0:
                    x = a + r * ab
                    nrm = vec2(-ab[1], ab[0]) / la
                    dL = vec3(1.0)
                    if ti.static(kind == "adjoint"):
                        dL = film.gather_adjoint(st, cam, x)
                    if dL[0] != 0.0 or dL[1] != 0.0 or dL[2] != 0.0:
                        diff_l = spec(0.0)
                        for side in range(2):          # a run-time loop: one inlined path
                            sgn = 1.0 - 2.0 * side      # + then -
                            o, d, tmax = camera_ray(st, cam, x + (sgn * EPS_PIXELS) * nrm, vec2(0.5))
                            sp = make_sampler(seed ^ ti.u32(SEED_MIX), j, 1)   # shared by both sides
                            L = path.sample(st, bsdf, em, 0, PRIMAL, o, d, tmax, lam, sp, max_depth, rr_depth, hide_emitters,
                                            spec(0.0), spec(0.0), 0)
                            diff_l -= sgn * film.nan_to_zero(L)       # L⁻ - L⁺
                        diff = variants.to_rgb(diff_l, lam, lw)      # the film's RGB (linear in L)
                        o, d, _tmax = camera_ray(st, cam, x, vec2(0.5))
                        tau = _line_param(o, d, tab.x0[k], tab.x1[k])
                        X = tab.x0[k] + tau * (tab.x1[k] - tab.x0[k])
                        c, _q = batch.resolve(st, cam, x)    # a batch's child camera (sensors/batch.py)
                        g = camera_connect_adjoint(st, c, X, st.cam_o[c], nrm, 0.0)   # ∇_X (n · film position)
                        o0 = tab.slot0[k]
                        o1 = tab.slot1[k]
                        sph = tab.sphere[k]
                        if ti.static(kind == "adjoint"):
                            w = scale * dL.dot(diff)
                            if sph >= 0:
                                quadric_edges.point_adjoint(st, sph, o0, X, w * g)
                            else:
                                pool.add_gradient(st, o0, 3, (w * (1.0 - tau)) * g)
                                pool.add_gradient(st, o1, 3, (w * tau) * g)
                        else:
                            xdot = vec3(0.0)
                            if sph >= 0:
                                xdot = quadric_edges.point_tangent(st, sph, o0, X)
                            else:
                                xdot = (1.0 - tau) * vec3(st.tan_v[o0], st.tan_v[o0 + 1], st.tan_v[o0 + 2]) \
                                    + tau * vec3(st.tan_v[o1], st.tan_v[o1 + 1], st.tan_v[o1 + 2])
                            film.splat_light(st, cam, x, film.nan_to_zero((scale * g.dot(xdot)) * diff))
        _kernels[kind] = primary
    return _kernels[kind]


def _primary_args(scene, bsdf, sensor, spp, seed, n_samples, walk_args):
    """The primary kernel's arguments after the storage view, or None where there is nothing to add (no edge
    samples, no candidate edges)."""
    if n_samples <= 0:
        return None
    rows, total = primary_edges(scene, sensor)
    if total <= 0.0:
        return None
    tab = EdgeTable.holding(rows)
    a = walk_args
    return (bsdf, scene.em_mask, tab, tab.n, sensor, int(n_samples), int(seed) & 0xFFFFFFFF,
            float(spp) * total / float(n_samples), a.max_depth, a.rr_depth, a.hide)


def primary_pass(scene, st, bsdf, sensor, spp, seed, n_samples, walk_args):
    """Add the primary-visibility boundary term of <δy, image> (δy already in st.adj) for an image of
    spp samples per pixel, with n_samples edge samples (module doc); nothing without candidate edges."""
    args = _primary_args(scene, bsdf, sensor, spp, seed, n_samples, walk_args)
    if args is not None:
        _kernel()(st, *args)


def primary_tangent(scene, tv, bsdf, sensor, spp, seed, n_samples, walk_args):
    """Forward mode: splat the primary boundary term's tangent into the film of a forward pass
    (launch.forward_pass; tv: the storage's Tangent view, its direction already set) in one
    transaction of its own (film adds: up to a filter footprint per edge sample)."""
    from .. import launch
    args = _primary_args(scene, bsdf, sensor, spp, seed, n_samples, walk_args)
    if args is None:
        return
    kern = _kernel("tangent")
    s = scene.sensors[sensor]
    footprint = (2 * int(np.ceil(s.radius)) + 1) ** 2

    def run(off, k):
        kern(tv, *args)
    launch.sweep(scene, sensor, 1, "edges", False, run, film="splat", film_adds=lambda k: footprint * int(n_samples))


# ------------------------------------------------------------------------------ secondary visibility
@ti.data_oriented
class SecondaryTable:
    """Device table of the edges a path vertex may see as discontinuities (``secondary_edges``):
    world endpoints x0, x1, the adjacent faces' normals n1, n2 (unnormalised; silhouette test from
    the vertex), flags (BOUNDARY: one face; CREASE: shading may jump), the endpoints' derived-slot
    offsets (-1: a static mesh), and two CDFs by length: over the moving edges (the first n_mov
    rows) and over all. info_i = (n, n_mov), info_f = (total length, moving length). A row with quadric >= 0 is a
    curve of one of Mitsuba's analytic shapes, made per sample (integrators/quadric_edges.py; inst >= 0: of a group
    stored once, seen through that instance)."""

    _shared = None

    def __init__(self, cap):
        self.cap = cap
        self.x0, self.x1, self.n1, self.n2 = (vec3.field(shape=cap) for _ in range(4))
        self.flags, self.slot0, self.slot1, self.quadric, self.inst = (ti.field(ti.i32, shape=cap) for _ in range(5))
        self.cdf_all, self.cdf_mov = ti.field(float, shape=cap), ti.field(float, shape=cap)
        self.info_i = ti.field(ti.i32, shape=2)
        self.info_f = ti.field(float, shape=2)
        self.lights = shadow_edges.LightEdges(cap)

    @classmethod
    def holding(cls, rows, n_mov, lights=None):
        """The shared table holding rows (n_mov moving ones first) and strategy B's tables for the lights
        (shadow_edges.light_triangles: triangles (T, 3, 3), triangles per shape; None: none)."""
        n = len(rows["flags"])
        cap = table_rows(n)
        t = cls._shared
        if t is None or t.cap < cap:
            t = cls._shared = cls(cap)
        length = np.linalg.norm(rows["x1"] - rows["x0"], axis=1)
        tot, mov = float(length.sum()), float(length[:n_mov].sum())
        arrays = dict(rows)
        arrays["cdf_all"] = np.cumsum(length) / max(tot, 1e-300)
        arrays["cdf_mov"] = np.concatenate([np.cumsum(length[:n_mov]) / max(mov, 1e-300), np.full(n - n_mov, 2.0)])
        for k, v in arrays.items():
            arr = np.zeros((t.cap,) + v.shape[1:], v.dtype)      # the shared table may be larger than cap
            arr[:n] = v
            if k.startswith("cdf"):
                arr[n:] = 2.0
            getattr(t, k).from_numpy(arr.astype(np.float32) if arr.dtype.kind == "f" else arr.astype(np.int32))
        t.info_i.from_numpy(np.array([n, n_mov], np.int32))
        t.info_f.from_numpy(np.array([tot, mov], np.float32))
        t.lights.fill(rows, n_mov, (np.zeros((0, 3, 3)), np.zeros(0, np.int64)) if lights is None else lights)
        return t


def _candidates(faces, P, smooth, edges, edge_faces, split):
    """The rows of one mesh's potential discontinuity edges (boundary or non-coplanar)."""
    from ..scene.deform import vertex_normals
    C = vertex_normals(faces, P)[2]
    two = edge_faces[:, 1] >= 0
    c1, c2 = C[edge_faces[:, 0]], C[np.maximum(edge_faces[:, 1], 0)]
    cosang = np.einsum("ij,ij->i", c1, c2) / np.maximum(np.linalg.norm(c1, axis=1) * np.linalg.norm(c2, axis=1),
                                                         1e-300)
    bent = cosang < 1.0 - 1e-7
    keep = ~two | bent
    flags = np.where(~two, BOUNDARY, 0) | np.where(two & bent & (split | (not smooth)), CREASE, 0)
    e = edges[keep]
    return dict(x0=P[e[:, 0]], x1=P[e[:, 1]], n1=c1[keep], n2=np.where(two[keep, None], c2[keep], 0.0),
                flags=flags[keep]), e


def secondary_edges(scene):
    """SecondaryTable rows for the scene's current geometry: the differentiable meshes' candidate
    edges first (with their derived slots; an analytic sphere's one row), then every static mesh's (slots -1; their
    topology is computed once per scene; an analytic sphere's, disk's or cylinder's curves made exactly,
    integrators/quadric_edges.py, an instance's through its transform). Returns (rows, n_mov)."""
    from ..scene.deform import edge_topology
    from ..scene.implicit import SDF
    get = scene.params.__getitem__
    parts = []
    for d in scene.deformables:
        if not d.boundary:               # an SDF grid (scene/sdf_body.py)
            continue
        base = scene.params.slot(d.names()["world"]).offset
        if d.analytic:                   # an analytic sphere: one row, its silhouette from each vertex (secondary)
            parts += quadric_edges.rows(d.implicit, d.record, base, d.state(get))
            continue
        P = d.positions(get)
        rows, e = _candidates(d.faces, P, d.smooth, d.edges, d.edge_faces, d.edge_split)
        rows["slot0"] = base + 6 * e[:, 0].astype(np.int64)
        rows["slot1"] = base + 6 * e[:, 1].astype(np.int64)
        rows["quadric"] = np.full(len(e), -1)
        rows["inst"] = np.full(len(e), -1)
        parts.append(rows)
    n_mov = sum(len(r["flags"]) for r in parts)
    static = getattr(scene, "_static_edge_rows", None)
    if static is None:
        static = []
        for si, sh in enumerate(scene.desc.shapes or []):
            if sh.differentiable:
                continue
            P, F, smooth = np.asarray(sh.positions, np.float64), sh.faces, sh.normals is not None
            if sh.implicit is not None:     # a quadric's curves, exactly (a group's: per instance); an SDF grid has
                if sh.implicit.kind == SDF:  # no silhouette rows (its silhouettes are in no boundary term)
                    continue
                if not sh.proto:
                    static += quadric_edges.rows(sh.implicit, scene.shape_geo[si])
                for j, (_iid, g, m) in enumerate(scene.desc.placements):
                    if sh.proto and g == sh.proto:
                        static += quadric_edges.rows(sh.implicit, scene.shape_geo[si], place=m,
                                                     inst=scene.shape_geo[len(scene.desc.shapes) + j])
                continue
            ed, ef, sp = edge_topology(F, P)
            # a group's shape (scene/toplevel.py) is in the group's space: its edges once per instance, in world space
            places = [m for _, g, m in scene.desc.placements if g == sh.proto] if sh.proto else [None]
            for m in places:
                Pw = P if m is None else P @ m[:3, :3].T + m[:3, 3]
                rows, _e = _candidates(F, Pw, smooth, ed, ef, sp)
                rows["slot0"] = np.full(len(rows["flags"]), -1)
                rows["slot1"] = np.full(len(rows["flags"]), -1)
                rows["quadric"] = np.full(len(rows["flags"]), -1)
                rows["inst"] = np.full(len(rows["flags"]), -1)
                static.append(rows)
        scene._static_edge_rows = static
    parts = parts + static
    keys = ("x0", "x1", "n1", "n2", "flags", "slot0", "slot1", "quadric", "inst")
    out = {k: np.concatenate([r[k] for r in parts]) if parts else np.zeros((0, 3) if k[0] in "xn" else 0)
           for k in keys}
    return out, n_mov


@ti.func
def secondary(st: ti.template(), bsdf: ti.template(), em: ti.template(), tab: ti.template(), v, beta_dL,
              sampler: ti.template(), depth_left, rr_depth, moving, lam):
    """The boundary term of the radiance scattered at surface vertex v (direction space, Li et al.
    2018 §5): one edge x(τ) = x0 + τ e sampled by length (over every candidate edge if the vertex
    itself moves — ``moving`` —, else over the moving ones), kept if it is a discontinuity seen
    from p (boundary, crease or silhouette) and visible; g(ω) = f(ω)|cos| Li(ω) on its two sides
    (two paths sharing random numbers); with n_E the normal of the plane (p, x0, x1), r = |x - p|:

        ∂/∂π ∫ g dω  ∋  (g⁻ - g⁺) n_E · (∂x/∂π - ∂p/∂π) |(I - ωωᵀ) e| / (r² p(edge, τ))

    The x part goes to the edge's vertices (moving meshes), the p part is returned (∂/∂p, to go
    back along the path). beta_dL: δL β at the vertex (per lane of the path's wavelengths lam);
    depth_left: the segments a path from it may still take."""
    g_p = vec3(0.0)
    n_e = tab.info_i[1]
    total = tab.info_f[1]
    if moving == 1:
        n_e = tab.info_i[0]
        total = tab.info_f[0]
    if n_e > 0 and total > 0.0 and depth_left > 0:
        u = sampler.next_1d()
        k = 0
        tau = 0.0
        if moving == 1:
            k, tau = _pick_table(tab.cdf_all, n_e, u)
        else:
            k, tau = _pick_table(tab.cdf_mov, n_e, u)
        alpha, W = 0.0, 0.0
        lt = tab.lights
        if lt.info_i[0] > 0 and lt.info_i[1] > 0:      # strategy B, aimed at the lights (shadow_edges.py)
            u_s, u_b, u_t = sampler.next_1d(), sampler.next_1d(), sampler.next_1d()
            W, kb, lo, hi = shadow_edges.pick(lt, tab, v.p, moving, u_b)
            if W > 0.0:
                alpha = lt.info_f[0]
                if u_s < alpha:
                    k, tau = kb, lo + u_t * (hi - lo)
        x0 = tab.x0[k]
        x1 = tab.x1[k]
        e = x1 - x0
        x = x0 + tau * e
        wt = e.norm()                                  # the row's weight in the CDFs (an edge's length)
        ok = tab.flags[k] != 0
        qr = tab.quadric[k]
        nE = (x0 - v.p).cross(x1 - v.p)
        apex = v.p                                     # where the rays to the edge start from (below)
        if qr >= 0:
            # an analytic shape's curve: its point τ seen from the rays' origin (p moved off its surface by spawn), so
            # that a tangent ray to a silhouette stays tangent (integrators/quadric_edges.py)
            ok, x, e = quadric_edges.curve(st, qr, tab.inst[k], tab.flags[k], v.p, tau)
            if ok:
                apex = vertex.spawn(st, v, (x - v.p).normalized())
                ok, x, e = quadric_edges.curve(st, qr, tab.inst[k], tab.flags[k], apex, tau)
            nE = (x - apex).cross(e)
        elif not ok:
            ok = (x0 - v.p).dot(tab.n1[k]) * (x0 - v.p).dot(tab.n2[k]) < 0.0
        w = x - apex
        r = w.norm()
        le = e.norm()
        p_tau = (1.0 - alpha) * wt / total             # the mixture's density in τ (A alone: weight / total)
        if alpha > 0.0:
            p_tau += alpha * shadow_edges.density(lt, tab, k, tau, v.p) / W
        ln = nE.norm()
        if ok and r > 1e-7 and ln > 1e-30 * r * r and le > 0.0 and p_tau > 0.0:
            nE = nE / ln
            om = w / r
            o = vertex.spawn(st, v, om)
            if not occluded(st, o, om, (x - o).norm() * (1.0 - 1e-3)):
                diff = spec(0.0)
                base = sampler.copy()
                for side in range(2):                  # a run-time loop: one inlined path
                    sgn = 1.0 - 2.0 * side              # + then -
                    d2 = (om + (sgn * EPS_DIR) * nE).normalized()
                    f, _pdf = vertex.eval_pdf(st, bsdf, v, d2)
                    if max_component(f) > 0.0:
                        sp = base.copy()
                        L = path.sample(st, bsdf, em, 0, PRIMAL, vertex.spawn(st, v, d2), d2, BIG, lam, sp, depth_left,
                                        rr_depth, 0, spec(0.0), spec(0.0), 0)
                        diff -= sgn * f * film.nan_to_zero(L)
                A = beta_dL.dot(diff) * (e - om * om.dot(e)).norm() / (r * r * p_tau)
                if qr >= 0:
                    if tab.slot0[k] >= 0:                # a differentiable sphere (a static shape: slot -1)
                        quadric_edges.point_adjoint(st, qr, tab.slot0[k], x, A * nE)
                elif tab.slot0[k] >= 0:
                    pool.add_gradient(st, tab.slot0[k], 3, (A * (1.0 - tau)) * nE)
                    pool.add_gradient(st, tab.slot1[k], 3, (A * tau) * nE)
                g_p = -A * nE
    return g_p
