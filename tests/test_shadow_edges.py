"""Boundary samples aimed at the lights (integrators/shadow_edges.py): the exact light-silhouette filter, the
intervals against brute-force ray casting, the density's normalisation, and a thin curve's shadow gradient against
central differences with far less noise than edge sampling by length alone."""
import os
import sys

import numpy as np
import pytest
import taichi as ti

import tirender
from tirender.integrators import edges, shadow_edges
from tirender.integrators.shadow_edges import light_silhouettes, light_triangles

sys.path.insert(0, os.path.dirname(__file__))
from gradcheck_util import assert_agree, projected_gradients  # noqa: E402
from scenes import camera  # noqa: E402

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "shadow_art.yaml")


def _occluder_scene():
    """A differentiable cube (flat faces: creases) and a small sphere mesh (smooth: silhouettes) over a floor, under
    two small rectangle lights."""
    return tirender.load_scene({
        "sensors": [camera([0, -3, 3], [0, 0, 0])],
        "shapes": [
            {"id": "floor", "type": "rectangle", "to_world": [{"scale": 3}]},
            {"id": "cube", "type": "cube", "differentiable": True, "to_world": [{"scale": 0.3}, {"translate": [0.2, 0, 1]}]},
            {"id": "ball", "type": "sphere", "differentiable": True, "resolution": 12,
             "to_world": [{"scale": 0.25}, {"translate": [-0.5, 0.3, 0.8]}]},
            {"id": "lamp", "type": "rectangle", "emitter": {"type": "area", "radiance": 5.0},
             "to_world": [{"scale": 0.2}, {"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, 3]}]},
            {"id": "lamp2", "type": "rectangle", "emitter": {"type": "area", "radiance": 3.0},
             "to_world": [{"scale": 0.1}, {"rotate": {"axis": [0, 1, 0], "angle": -120}}, {"translate": [2, 0.5, 2]}]},
        ]})


def test_light_silhouettes_are_exact():
    """An edge is kept iff some point of some light triangle sees its two faces from opposite sides (dense
    sampling of the triangles finds a point wherever it keeps one; it never finds one where it drops one)."""
    sc = _occluder_scene()
    sc.bind()
    rows, n_mov = edges.secondary_edges(sc)
    tris, counts = light_triangles(sc)
    assert list(counts) == [2, 2] and tris.shape == (4, 3, 3)
    keep = light_silhouettes(rows, tris)
    rng = np.random.default_rng(0)
    uv = rng.random((4000, 2))
    uv = np.where(uv.sum(1, keepdims=True) > 1, 1 - uv, uv)
    found = np.zeros(len(keep), bool)
    for q in tris:
        pts = q[0] + uv[:, :1] * (q[1] - q[0]) + uv[:, 1:] * (q[2] - q[0])
        f1 = np.einsum("ijk,ik->ij", rows["x0"][:, None] - pts[None], rows["n1"])
        f2 = np.einsum("ijk,ik->ij", rows["x0"][:, None] - pts[None], rows["n2"])
        found |= np.any(f1 * f2 < 0, 1)
    found |= np.asarray(rows["flags"]) != 0
    assert not np.any(found & ~keep)                         # nothing it drops is a silhouette from a light
    assert np.count_nonzero(keep & ~found) <= 0.02 * max(keep.sum(), 1)   # what it keeps is (sampling aside)
    assert 0 < keep.sum() < len(keep)


@ti.kernel
def _densities(lt: ti.template(), tab: ti.template(), p: ti.types.ndarray(), taus: ti.types.ndarray(),
               q: ti.types.ndarray(), W: ti.types.ndarray(), n_rows: ti.i32):
    for i in range(p.shape[0]):
        pi = ti.Vector([p[i, 0], p[i, 1], p[i, 2]], float)
        w, _k, _lo, _hi = shadow_edges.pick(lt, tab, pi, 1, 0.5)
        W[i] = w
        for k in range(n_rows):
            for t in range(taus.shape[0]):
                q[i, k, t] = shadow_edges.density(lt, tab, k, taus[t], pi)


def _ray_hits_triangle(o, d, q):
    """Möller–Trumbore (numpy, broadcast over d (N, 3)): the ray parameter s of the hit, inf where none."""
    e1, e2 = q[1] - q[0], q[2] - q[0]
    pv = np.cross(d, e2)
    det = pv @ e1
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        tv = o - q[0]
        u = (pv @ tv) * inv
        qv = np.cross(tv, e1)
        v = (qv * d).sum(1) * inv
        s = (qv @ e2) * inv
    ok = (np.abs(det) > 1e-12) & (u >= 0) & (v >= 0) & (u + v <= 1) & (s > 0)
    return np.where(ok, s, np.inf)


def test_intervals_match_ray_casting_and_the_density_integrates_to_one():
    """For points p on the floor: strategy B's density is positive exactly where the ray from p through the edge
    point goes on to hit a light (brute force: Möller–Trumbore against every light triangle) and the edge is a
    silhouette from p; and Σ_k ∫ q(k, τ) dτ / W = 1 (it is a density)."""
    sc = _occluder_scene()
    sc.bind()
    rows, n_mov = edges.secondary_edges(sc)
    lights = light_triangles(sc)
    tab = edges.SecondaryTable.holding(rows, n_mov, lights)
    n = len(rows["flags"])
    P = np.array([[-0.18, 0.0, 0.0], [0.8, 0.05, 0.0], [-0.34, 0.41, 0.0], [-0.68, 0.07, 0.0]])   # penumbrae
    taus = (np.arange(400) + 0.5) / 400
    q = np.zeros((len(P), n, len(taus)), np.float32)
    W = np.zeros(len(P), np.float32)
    _densities(tab.lights, tab, P.astype(np.float32), taus.astype(np.float32), q, W, n)
    tris = lights[0]
    for i, p in enumerate(P):
        assert W[i] > 0
        integral = q[i].sum() / len(taus) / W[i]
        assert integral == pytest.approx(1.0, abs=0.03), (i, integral)
        X = rows["x0"][:, None] + taus[None, :, None] * (rows["x1"] - rows["x0"])[:, None]   # (n, T, 3)
        d = (X - p).reshape(-1, 3)
        hit = np.zeros(len(d), bool)
        for tq in tris:
            s = _ray_hits_triangle(p, d, tq)
            hit |= np.isfinite(s) & (s > 1.0)                   # the light lies beyond the edge point
        hit = hit.reshape(n, len(taus))
        side = rows["x0"] - p
        sil = (np.asarray(rows["flags"]) != 0) | (np.einsum("ij,ij->i", side, rows["n1"])
                                                 * np.einsum("ij,ij->i", side, rows["n2"]) < 0)
        want = (hit & sil[:, None])[:n_mov]           # the occluders' edges (the lights' own rims bound their
        got = (q[i] > 0)[:n_mov]                      # pyramids: s = 1 there, on both sides of the brute force's test)
        assert want.sum() > 0
        # agreement but for the grid points next to an interval's end
        assert np.count_nonzero(want != got) <= 0.01 * want.sum() + 4, (i, np.count_nonzero(want != got), want.sum())


def _curve_view(w=48):
    """The shadow-art scene (configs/shadow_art.yaml) seen through one of its wall views at w x w."""
    from tirender.config import load_config
    cfg = load_config(CONFIG)
    view = cfg["optimize"]["sensors"][0]["sensors"][0]
    return tirender.load_scene(dict(cfg["scene"], sensors=[dict(view, film={"width": w, "height": w,
                                                                              "filter": {"type": "box"}})]),
                               base_dir=os.path.dirname(CONFIG))


@pytest.mark.slow
def test_thin_curve_shadow_gradient_and_its_noise():
    """The shadow of the shadow-art curve (radius 0.01) under a 5 cm light: its control points turned about the
    vertical axis. The gradient agrees with central differences, and its spread is a fraction of what sampling
    edges by length alone gives (FRACTION = 0: the estimator of before)."""
    sc = _curve_view()
    P = sc.params["curve.control_points"].astype(np.float64)
    u = np.zeros_like(P)
    u[:, 0], u[:, 2] = P[:, 2], -P[:, 0]                                  # d/dθ of a turn about y
    img = tirender.render(sc, spp=64, seed=5, progress=False)
    wts = (img[..., :1] < 0.9 * np.median(img)).astype(np.float32).repeat(3, 2)   # the shadow's pixels
    g, _ = projected_gradients(sc, "curve.control_points", u, wts, 64, list(range(6)), [], 4e-3, method="prb_attached")
    _, f = projected_gradients(sc, "curve.control_points", u, wts, 256, [], list(range(100, 110)), 4e-3)
    assert_agree(g, f, "curve turned about y")
    old = shadow_edges.FRACTION
    try:
        shadow_edges.FRACTION = 0.0
        g0, _ = projected_gradients(sc, "curve.control_points", u, wts, 64, list(range(6)), [], 4e-3,
                                    method="prb_attached")
    finally:
        shadow_edges.FRACTION = old
    assert g.std() * 4 < g0.std(), (g.std(), g0.std())
