"""Boundary samples aimed at the lights: the second strategy of the secondary-visibility edge term.

``edges.secondary`` estimates, at a path vertex p, the boundary integral over the edges that p sees as
discontinuities. Choosing an edge by its length (strategy A) is blind to where the integrand lives: a
shadow boundary contributes only where the ray from p through the edge point x goes on to hit a light,
and behind a small light that is a sliver of every edge (the shadow of a thin curve under a small area
light: one edge point in hundreds). Strategy B samples those slivers directly:

* the lights: the triangles of the area emitters on static meshes with few triangles (rectangles, small
  meshes; at most MAX_TRIANGLES in all), world space;
* the edges: the rows of the secondary table that can be silhouettes seen from some point of a light
  (boundaries and creases always; a smooth edge when a light's corner sees its two faces from opposite
  sides, or a face plane cuts the light — exact, since a face's side is linear in the eye point), in
  chunks of CHUNK (Morton order) with bounding spheres, the moving edges' chunks first;
* per vertex p: for each (edge, light triangle) the interval of τ (x = x0 + τ e) whose ray from p passes
  x and then hits the triangle — x inside the pyramid from p over the triangle (widened by BAND radians:
  the boundary sample's two side rays are edges.EPS_DIR off the edge) and on p's side of its plane: linear
  inequalities in τ — weighted by the angle it subtends from p (zero unless
  the edge is a silhouette from p, which is the same as from the light point behind it); chunks and edges
  whose bounding spheres miss the cone around the triangle are skipped (conservative);
* a pair by weighted reservoir sampling, τ uniformly in its interval: density in τ
  q(k, τ) / W = Σ_j [τ ∈ I_kj] w_kj / (W |I_kj|).

``edges.secondary`` draws from the mixture (1 - α) A + α B (α = FRACTION where some light is in reach,
else 0) and divides by the mixture's density (one-sample MIS, balance heuristic), so the estimate is
unbiased whatever the scene has (environment maps, sphere lights and indirect light stay A's). Without
lights in the table nothing changes: the same random numbers and the same result as before.
"""
import numpy as np
import taichi as ti

from ..core.math import vec3

MAX_TRIANGLES = 64     # light triangles strategy B aims at (the first static emitter meshes that fit)
CHUNK = 16             # edges per bounding sphere
SUPER = 8              # chunks per bounding sphere of chunks
FRACTION = 0.75        # α: the share of boundary samples strategy B takes where it has a light in reach
BAND = 2.5e-4          # radians: the pyramids widened by this angle (the two sides of a boundary sample are
                       # edges.EPS_DIR = 1e-4 from it: where only one of them hits the light, B must reach too)


# ------------------------------------------------------------------------------ host: tables
def light_triangles(scene):
    """(T, 3, 3) world-space triangles of the area emitters on static meshes (not curves, height fields,
    quadrics or instances), whole shapes while MAX_TRIANGLES allows, and (G,) the triangle count of each
    such shape (its triangles are culled together first)."""
    out, counts = [], []
    for sh in scene.desc.shapes or []:
        if (sh.emitter < 0 or sh.differentiable or sh.implicit is not None or sh.proto or sh.curve is not None
                or sh.heightfield is not None):
            continue
        F = np.asarray(sh.faces)
        if len(out) + len(F) > MAX_TRIANGLES or len(F) == 0:
            continue
        out.extend(np.asarray(sh.positions, np.float64)[F])
        counts.append(len(F))
    return np.array(out, np.float64).reshape(-1, 3, 3), np.array(counts, np.int64)


def light_silhouettes(rows, tris):
    """Rows of the secondary table that some point of some light triangle sees as a discontinuity: (E,) bool (an
    analytic shape's curve, sampled whole and exactly by length, never: integrators/quadric_edges.py)."""
    x0, n1, n2 = rows["x0"], rows["n1"], rows["n2"]
    edge = np.asarray(rows["quadric"]) < 0 if "quadric" in rows else np.ones(len(x0), bool)   # a mesh's edge
    keep = np.asarray(rows["flags"]) != 0
    for q in tris:
        f1 = np.stack([np.einsum("ij,ij->i", x0 - c, n1) for c in q], 1)      # (E, 3): a face's side per corner
        f2 = np.stack([np.einsum("ij,ij->i", x0 - c, n2) for c in q], 1)
        keep |= np.any(f1 * f2 < 0, 1)                                        # a corner sees a silhouette
        keep |= (f1.min(1) < 0) & (f1.max(1) > 0) | (f2.min(1) < 0) & (f2.max(1) > 0)   # a plane cuts the light
    return keep & edge


def _morton(points):
    lo, hi = points.min(0), points.max(0)
    q = np.clip(((points - lo) / np.maximum(hi - lo, 1e-30) * 1023).astype(np.int64), 0, 1023)
    code = np.zeros(len(points), np.int64)
    for bit in range(10):
        for a in range(3):
            code |= ((q[:, a] >> bit) & 1) << (3 * bit + a)
    return code


def chunks(rows, n_mov, tris):
    """Strategy B's rows: {"b_row": table rows (moving ones first, Morton order within each part),
    "chunk_of": per table row its chunk (-1: not a candidate), "start", "count", "centre", "radius": per
    chunk (CHUNK rows), "s_start", "s_count", "s_centre", "s_radius": per super-chunk (SUPER chunks)}, the
    number of super-chunks over moving rows; (None, 0) without candidates."""
    n = len(rows["flags"])
    chunk_of = np.full(n, -1, np.int64)
    if n == 0 or len(tris) == 0:
        return None, 0
    keep = light_silhouettes(rows, tris)
    mid = 0.5 * (rows["x0"] + rows["x1"])
    half = 0.5 * np.linalg.norm(rows["x1"] - rows["x0"], axis=1)
    lo_e, hi_e = np.minimum(rows["x0"], rows["x1"]), np.maximum(rows["x0"], rows["x1"])
    parts, n_mov_supers = [], 0
    for which, part in enumerate((np.arange(n_mov), np.arange(n_mov, n))):       # moving rows' chunks first
        idx = part[keep[part]]
        if len(idx):
            idx = idx[np.argsort(_morton(mid[idx]), kind="stable")]
            start = np.arange(0, len(idx), CHUNK)
            centre, radius = _spheres(np.minimum.reduceat(lo_e[idx], start), np.maximum.reduceat(hi_e[idx], start),
                                      start, mid[idx], half[idx])
            s_start = np.arange(0, len(start), SUPER)
            s_centre, s_radius = _spheres(np.minimum.reduceat(centre - radius[:, None], s_start),
                                          np.maximum.reduceat(centre + radius[:, None], s_start), s_start, centre,
                                          radius)
            parts.append((idx, start, centre, radius, s_start, s_centre, s_radius))
        if which == 0:
            n_mov_supers = sum(len(p[4]) for p in parts)
    if not parts:
        return None, 0
    out = {k: [] for k in ("b_row", "start", "count", "centre", "radius", "s_start", "s_count", "s_centre",
                           "s_radius")}
    rows_before = chunks_before = 0
    for idx, start, centre, radius, s_start, s_centre, s_radius in parts:
        chunk_of[idx] = chunks_before + np.arange(len(idx)) // CHUNK
        out["b_row"].append(idx)
        out["start"].append(rows_before + start)
        out["count"].append(np.diff(np.append(start, len(idx))))
        out["centre"].append(centre)
        out["radius"].append(radius)
        out["s_start"].append(chunks_before + s_start)
        out["s_count"].append(np.diff(np.append(s_start, len(start))))
        out["s_centre"].append(s_centre)
        out["s_radius"].append(s_radius)
        rows_before += len(idx)
        chunks_before += len(start)
    out = {k: np.concatenate(v) for k, v in out.items()}
    out["chunk_of"] = chunk_of
    return out, n_mov_supers


def _spheres(lo, hi, start, points, radii):
    """Per run of (point, radius) pairs starting at `start`: a sphere around the run's box [lo, hi] holding
    them all, slightly widened ((R, 3) centres, (R,) radii)."""
    c = 0.5 * (lo + hi)
    run = np.repeat(np.arange(len(start)), np.diff(np.append(start, len(points))))
    far = np.linalg.norm(points - c[run], axis=1) + radii
    return c, np.maximum.reduceat(far, start) * (1 + 1e-5) + 1e-7


@ti.data_oriented
class LightEdges:
    """Device side of strategy B: the light triangles (q0, q1, q2, bounding sphere lc, lr) in groups (one
    per emitter shape: g_first, g_count, sphere gc, gr), the candidate rows b_row in chunks (start, count,
    centre, radius) and super-chunks (s_*), per table row its chunk, per chunk its super-chunk; info_i =
    (groups, super-chunks, super-chunks over moving rows), info_f[0] = α."""

    def __init__(self, cap):
        self.cap = cap
        self.q0, self.q1, self.q2, self.lc = (vec3.field(shape=MAX_TRIANGLES) for _ in range(4))
        self.lr = ti.field(float, shape=MAX_TRIANGLES)
        self.g_first, self.g_count = ti.field(ti.i32, shape=MAX_TRIANGLES), ti.field(ti.i32, shape=MAX_TRIANGLES)
        self.gc, self.gr = vec3.field(shape=MAX_TRIANGLES), ti.field(float, shape=MAX_TRIANGLES)
        self.b_row, self.chunk_of = ti.field(ti.i32, shape=cap), ti.field(ti.i32, shape=cap)
        ccap = cap // CHUNK + 2
        self.start, self.count, self.super_of = (ti.field(ti.i32, shape=ccap) for _ in range(3))
        self.centre, self.radius = vec3.field(shape=ccap), ti.field(float, shape=ccap)
        scap = ccap // SUPER + 2
        self.s_start, self.s_count = ti.field(ti.i32, shape=scap), ti.field(ti.i32, shape=scap)
        self.s_centre, self.s_radius = vec3.field(shape=scap), ti.field(float, shape=scap)
        self.info_i = ti.field(ti.i32, shape=3)
        self.info_f = ti.field(float, shape=1)

    def fill(self, rows, n_mov, lights):
        """Upload the tables for the secondary rows (n_mov moving ones first) and the lights
        (light_triangles' (triangles, counts))."""
        tris, counts = lights
        table, n_mov_supers = chunks(rows, n_mov, tris)
        if table is None:
            self.info_i.from_numpy(np.zeros(3, np.int32))
            return

        def put(field, a):
            shape = field.shape + ((field.n,) if isinstance(field, ti.MatrixField) else ())
            full = np.zeros(shape, np.float32 if a.dtype.kind == "f" else np.int32)
            full[:len(a)] = a
            field.from_numpy(full)
        lc = tris.mean(1)
        for k, f in enumerate((self.q0, self.q1, self.q2)):
            put(f, tris[:, k])
        put(self.lc, lc)
        put(self.lr, np.linalg.norm(tris - lc[:, None], axis=2).max(1) * (1 + 1e-5) + 1e-7)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        corners = tris.reshape(-1, 3)
        gc, gr = _spheres(np.minimum.reduceat(corners, 3 * first), np.maximum.reduceat(corners, 3 * first), 3 * first,
                          corners, np.zeros(len(corners)))
        put(self.g_first, first)
        put(self.g_count, counts)
        put(self.gc, gc)
        put(self.gr, gr)
        put(self.b_row, table["b_row"])
        put(self.chunk_of, table["chunk_of"])
        for k in ("start", "count", "centre", "radius", "s_start", "s_count", "s_centre", "s_radius"):
            put(getattr(self, k), table[k])
        sup = np.zeros(len(table["start"]), np.int64)
        for i, (a, m) in enumerate(zip(table["s_start"], table["s_count"])):
            sup[a:a + m] = i
        put(self.super_of, sup)
        self.info_i.from_numpy(np.array([len(counts), len(table["s_start"]), n_mov_supers], np.int32))
        self.info_f.from_numpy(np.array([FRACTION], np.float32))


# ------------------------------------------------------------------------------ device
@ti.func
def _in_cone(p, c, r, lc, lr):
    """Whether the sphere (c, r) may meet a ray from p into the sphere (lc, lr) around a light (conservative:
    the angle between the two directions against the sum of their half-angles, with a margin, and no
    farther than the light)."""
    hit = True
    v = c - p
    a = lc - p
    dv2 = v.dot(v)
    da2 = a.dot(a)
    if dv2 > r * r and da2 > lr * lr:
        dv = ti.sqrt(dv2)
        da = ti.sqrt(da2)
        s1 = lr / da
        s2 = r / dv
        cos_sum = ti.sqrt(ti.max(1.0 - s1 * s1, 0.0)) * ti.sqrt(ti.max(1.0 - s2 * s2, 0.0)) - s1 * s2
        hit = v.dot(a) >= (cos_sum - 1e-4) * dv * da and dv - r <= da + lr
    return hit


@ti.func
def _clip(lo, hi, a, b):
    """[lo, hi] ∩ {τ : a + b τ ≥ 0}."""
    if b > 0.0:
        lo = ti.max(lo, -a / b)
    elif b < 0.0:
        hi = ti.min(hi, -a / b)
    elif a < 0.0:
        hi = -1.0
    return lo, hi


@ti.func
def _side(p, qa, qb, qc):
    """Normal of the plane through p, qa, qb, towards qc."""
    m = (qa - p).cross(qb - p)
    if m.dot(qc - p) < 0.0:
        m = -m
    return m


@ti.func
def pair(lt: ti.template(), x0, x1, n1, n2, flags, p, j):
    """(w, lo, hi): the interval of τ on the edge x0 → x1 whose rays from p pass the edge and then hit light
    triangle j, and its weight (the angle it subtends from p; 0 when empty or the edge is no silhouette
    from p)."""
    q0, q1, q2 = lt.q0[j], lt.q1[j], lt.q2[j]
    e = x1 - x0
    nl = (q1 - q0).cross(q2 - q0)
    if nl.dot(p - q0) < 0.0:
        nl = -nl
    lo, hi = 0.0, 1.0
    lo, hi = _clip(lo, hi, nl.dot(x0 - q0), nl.dot(e))
    reach = BAND * ti.max((x0 - p).norm(), (x1 - p).norm())      # each side plane moved out by ≥ BAND radians
    m = _side(p, q0, q1, q2)
    lo, hi = _clip(lo, hi, m.dot(x0 - p) + reach * m.norm(), m.dot(e))
    m = _side(p, q1, q2, q0)
    lo, hi = _clip(lo, hi, m.dot(x0 - p) + reach * m.norm(), m.dot(e))
    m = _side(p, q2, q0, q1)
    lo, hi = _clip(lo, hi, m.dot(x0 - p) + reach * m.norm(), m.dot(e))
    w = 0.0
    sil = flags != 0 or (x0 - p).dot(n1) * (x0 - p).dot(n2) < 0.0
    if hi > lo and sil:
        a = x0 + lo * e - p
        b = x0 + hi * e - p
        la, lb = a.norm(), b.norm()
        if la > 1e-12 and lb > 1e-12:
            w = (a / la - b / lb).norm()
    return w, lo, hi


@ti.func
def _edge_near(lt: ti.template(), x0, x1, p, j):
    return _in_cone(p, 0.5 * (x0 + x1), 0.5 * (x1 - x0).norm() * (1.0 + 1e-5) + 1e-7, lt.lc[j], lt.lr[j])


@ti.func
def density(lt: ti.template(), tab: ti.template(), k, tau, p):
    """q(k, τ) = Σ_j [τ ∈ I_kj] w_kj / |I_kj| of table row k at vertex p (strategy B's density in τ is q / W),
    with the same culling as ``pick``."""
    q = 0.0
    c = lt.chunk_of[k]
    if c >= 0:
        x0, x1 = tab.x0[k], tab.x1[k]
        sc = lt.super_of[c]
        for g in range(lt.info_i[0]):
            if _in_cone(p, lt.s_centre[sc], lt.s_radius[sc], lt.gc[g], lt.gr[g]) and \
                    _in_cone(p, lt.centre[c], lt.radius[c], lt.gc[g], lt.gr[g]):
                for j in range(lt.g_first[g], lt.g_first[g] + lt.g_count[g]):
                    if _edge_near(lt, x0, x1, p, j):
                        w, lo, hi = pair(lt, x0, x1, tab.n1[k], tab.n2[k], tab.flags[k], p, j)
                        if w > 0.0 and lo <= tau and tau <= hi and hi - lo > 1e-12:
                            q += w / (hi - lo)
    return q


@ti.func
def pick(lt: ti.template(), tab: ti.template(), p, moving, u):
    """Strategy B at vertex p: (W, k, lo, hi) — the total weight of every (edge, light triangle) pair in
    reach (over the moving edges' super-chunks, or all when the vertex itself moves) and one pair chosen in
    proportion to its weight by u (weighted reservoir sampling; k = -1 when W = 0)."""
    W = 0.0
    k_sel, lo_sel, hi_sel = -1, 0.0, 0.0
    n_sc = lt.info_i[2]
    if moving == 1:
        n_sc = lt.info_i[1]
    for sc in range(n_sc):
        for g in range(lt.info_i[0]):
            if _in_cone(p, lt.s_centre[sc], lt.s_radius[sc], lt.gc[g], lt.gr[g]):
                for c in range(lt.s_start[sc], lt.s_start[sc] + lt.s_count[sc]):
                    if _in_cone(p, lt.centre[c], lt.radius[c], lt.gc[g], lt.gr[g]):
                        for i in range(lt.start[c], lt.start[c] + lt.count[c]):
                            k = lt.b_row[i]
                            x0, x1 = tab.x0[k], tab.x1[k]
                            for j in range(lt.g_first[g], lt.g_first[g] + lt.g_count[g]):
                                if _edge_near(lt, x0, x1, p, j):
                                    w, lo, hi = pair(lt, x0, x1, tab.n1[k], tab.n2[k], tab.flags[k], p, j)
                                    if w > 0.0 and hi - lo > 1e-12:
                                        W += w
                                        s = w / W            # reservoir: keep this pair with probability w / W
                                        if u < s:
                                            k_sel, lo_sel, hi_sel = k, lo, hi
                                            u = u / s
                                        else:
                                            u = (u - s) / (1.0 - s)
    return W, k_sel, lo_sel, hi_sel
