"""Adjoints for derivatives that move paths (issue 16) against float64 central differences of their
primal (run in a child process with fp = f64, since a process holds one ti.init):

* core/optics.py: Snell refraction w.r.t. the direction, the normal and η; normalisation;
* sensors/base.py: the camera connection's film position and importance w.r.t. the point (a perspective
  pinhole with a principal point offset; a thin lens through a fixed lens point);
* core/film.py: the gathered adjoint w.r.t. a splat's film position (Gaussian filter);
* core/optics.py: mirror reflection w.r.t. the direction and the normal;
* a surface hit's position, shading normal and uv (core/intersect.py ray_triangle_adjoint,
  core/interaction.py interaction_adjoint) w.r.t. the ray, on a flat triangle and on a height field,
  where the chain continues through the vertices and the stencil normals into every height texel
  (scene/heightfield.py corner_adjoint, the lookups' adjoints): the primal re-displaces the mesh
  for each difference; on a linear curve's tube near its silhouette, where the shading normal is
  bent towards the ray (core/interaction.py horizon_bend); on Mitsuba's analytic sphere (also w.r.t. its centre and
  radius, a differentiable one's derived slot: scene/sphere_body.py), cylinder (flipped) and disk
  (core/quadrics.py hit_adjoint: the hit stays on the surface, uv and normal follow), on SDF grids with both
  normal modes (core/sdf.py hit_adjoint: the trilinear gradient's and the smooth blend's motion; a differentiable
  grid's node values too: scene/sdf_body.py, the primal rewriting the grid for each difference) and inside an
  instance stored once (a smooth mesh with uvs and a sphere under a non-uniform to_world: walk/attached.stop_adjoint
  takes the ray and the adjoints into the group's space and back).

``python tests/test_optics_adjoints.py --f64`` runs the child by hand."""
import json
import os
import sys

import numpy as np

from gradcheck_util import f64_child_report, central_differences, max_rel_err

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
H = 1e-6


def _fd(f, x, h=H):
    return central_differences(f, x, h)


_rel = max_rel_err


def checks():
    """(name -> largest relative error over random cases); runs under fp = f64."""
    import taichi as ti
    import tirender
    from scenes import camera
    from tirender.core import film
    from tirender.sensors.registry import camera_connect, camera_connect_adjoint
    from tirender.core.math import vec2, vec3
    from tirender.core.optics import normalize_adjoint, reflect, reflect_adjoint, refract, refract_adjoint
    rng = np.random.default_rng(0)
    out = {}

    @ti.kernel
    def k_refract(x: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        d = vec3(x[0], x[1], x[2])
        n = vec3(x[3], x[4], x[5])
        wt, _ok = refract(d, n, x[6])
        return wt.dot(vec3(g[0], g[1], g[2]))

    @ti.kernel
    def k_refract_adj(x: ti.types.ndarray(), g: ti.types.ndarray(), out: ti.types.ndarray()):
        gd, gn, ge = refract_adjoint(vec3(x[0], x[1], x[2]), vec3(x[3], x[4], x[5]), x[6], vec3(g[0], g[1], g[2]))
        for i in ti.static(range(3)):
            out[i] = gd[i]
            out[3 + i] = gn[i]
        out[6] = ge

    errs, tir = [], 0
    for _ in range(200):
        n = rng.normal(size=3)
        n /= np.linalg.norm(n)
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
        if d @ n > -0.05:
            d -= 2 * (d @ n) * n if d @ n > 0 else 0
            if d @ n > -0.05:
                continue
        eta = rng.uniform(0.6, 1.6)
        if 1 - eta * eta * (1 - (d @ n) ** 2) < 1e-3:
            tir += 1
            continue
        x = np.concatenate([d, n, [eta]])
        g = rng.normal(size=3)
        adj = np.zeros(7)
        k_refract_adj(x, g, adj)
        errs.append(_rel(adj, _fd(lambda y: k_refract(y, g), x)))
    out["refract (d, n, eta)"] = {"max_rel_err": max(errs), "cases": len(errs)}

    @ti.kernel
    def k_norm(v: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        u = vec3(v[0], v[1], v[2]).normalized()
        return u.dot(vec3(g[0], g[1], g[2]))

    @ti.kernel
    def k_norm_adj(v: ti.types.ndarray(), g: ti.types.ndarray(), out: ti.types.ndarray()):
        r = normalize_adjoint(vec3(v[0], v[1], v[2]), vec3(g[0], g[1], g[2]))
        for i in ti.static(range(3)):
            out[i] = r[i]

    errs = []
    for _ in range(100):
        v, g, adj = rng.normal(size=3) * 2, rng.normal(size=3), np.zeros(3)
        k_norm_adj(v, g, adj)
        errs.append(_rel(adj, _fd(lambda y: k_norm(y, g), v)))
    out["normalize"] = {"max_rel_err": max(errs), "cases": len(errs)}

    sc = tirender.load_scene({"sensors": [dict(camera([0.3, 0.8, 3.0], [0, 0, 0], fov=50, w=40, h=30),
                                               film={"width": 40, "height": 30,
                                                     "filter": {"type": "gaussian", "stddev": 0.6}},
                                               principal_point_offset_x=0.07, principal_point_offset_y=-0.04),
                                          dict(camera([0.3, 0.8, 3.0], [0, 0, 0], fov=50, w=40, h=30),
                                               film={"width": 40, "height": 30,
                                                     "filter": {"type": "tent", "radius": 1.3}}),
                                          dict(camera([0.3, 0.8, 3.0], [0, 0, 0], fov=50, w=40, h=30),
                                               type="thinlens", aperture_radius=0.3, focus_distance=2.5)],
                              "shapes": [{"id": "p", "type": "rectangle"}],
                              "emitters": [{"type": "constant"}]})
    st = sc.bind()

    U = (0.3, 0.8)     # the thin lens's connection sample (a fixed lens point)

    @ti.kernel
    def k_cam(cam: ti.i32, p: ti.types.ndarray(), w: ti.types.ndarray()) -> ti.f64:
        c = camera_connect(st, cam, vec3(p[0], p[1], p[2]), vec2(U[0], U[1]))
        return c.pos[0] * w[0] + c.pos[1] * w[1] + c.imp * w[2]

    @ti.kernel
    def k_cam_valid(cam: ti.i32, p: ti.types.ndarray()) -> ti.i32:
        return camera_connect(st, cam, vec3(p[0], p[1], p[2]), vec2(U[0], U[1])).valid

    @ti.kernel
    def k_cam_adj(cam: ti.i32, p: ti.types.ndarray(), w: ti.types.ndarray(), out: ti.types.ndarray()):
        c = camera_connect(st, cam, vec3(p[0], p[1], p[2]), vec2(U[0], U[1]))
        r = camera_connect_adjoint(st, cam, vec3(p[0], p[1], p[2]), c.q, vec2(w[0], w[1]), w[2])
        for i in ti.static(range(3)):
            out[i] = r[i]

    for cam, what in ((0, "perspective, principal point offset"), (2, "thin lens, fixed lens point")):
        errs = []
        while len(errs) < 100:
            p = rng.uniform(-1.5, 1.5, 3)
            if not k_cam_valid(cam, p):
                continue
            w, adj = rng.normal(size=3) * np.array([1.0, 1.0, 10.0]), np.zeros(3)
            k_cam_adj(cam, p, w, adj)
            errs.append(_rel(adj, _fd(lambda y: k_cam(cam, y, w), p)))
        out[f"camera_connect (pos, imp) w.r.t. p ({what})"] = {"max_rel_err": max(errs), "cases": len(errs)}

    @ti.kernel
    def k_set_adj(a: ti.types.ndarray()):
        for i in range(a.shape[0]):
            st.adj[i] = vec3(a[i, 0], a[i, 1], a[i, 2])

    @ti.kernel
    def k_gather(cam: ti.i32, pos: ti.types.ndarray(), L: ti.types.ndarray()) -> ti.f64:
        return film.gather_adjoint(st, cam, vec2(pos[0], pos[1])).dot(vec3(L[0], L[1], L[2]))

    @ti.kernel
    def k_gather_adj(cam: ti.i32, pos: ti.types.ndarray(), L: ti.types.ndarray(), out: ti.types.ndarray()):
        r = film.gather_adjoint_position(st, cam, vec2(pos[0], pos[1]), vec3(L[0], L[1], L[2]))
        out[0] = r[0]
        out[1] = r[1]

    k_set_adj(rng.normal(size=(40 * 30, 3)))
    for cam, filt in enumerate(("Gaussian", "tent")):
        errs = []
        r_ = rng if cam == 0 else np.random.default_rng(11)   # (the later checks keep their random cases)
        for _ in range(200):
            pos = r_.uniform([0.0, 0.0], [40.0, 30.0])
            L, adj = r_.normal(size=3), np.zeros(2)
            k_gather_adj(cam, pos, L, adj)
            errs.append(_rel(adj, _fd(lambda y: k_gather(cam, y, L), pos)))
        errs = np.array(errs)
        # a central difference straddling the filter's truncation radius (or the tent's apex) sees the mean
        # of two slopes
        out[f"film gather w.r.t. splat position ({filt})"] = {"max_rel_err": float(np.quantile(errs, 0.99)),
                                                              "cases": len(errs), "worst": float(errs.max())}

    @ti.kernel
    def k_reflect(x: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        return reflect(vec3(x[0], x[1], x[2]), vec3(x[3], x[4], x[5])).dot(vec3(g[0], g[1], g[2]))

    @ti.kernel
    def k_reflect_adj(x: ti.types.ndarray(), g: ti.types.ndarray(), out: ti.types.ndarray()):
        gd, gn = reflect_adjoint(vec3(x[0], x[1], x[2]), vec3(x[3], x[4], x[5]), vec3(g[0], g[1], g[2]))
        for i in ti.static(range(3)):
            out[i] = gd[i]
            out[3 + i] = gn[i]

    errs = []
    for _ in range(100):
        x, g, adj = rng.normal(size=6), rng.normal(size=3), np.zeros(6)
        k_reflect_adj(x, g, adj)
        errs.append(_rel(adj, _fd(lambda y: k_reflect(y, g), x)))
    out["reflect (d, n)"] = {"max_rel_err": max(errs), "cases": len(errs)}
    out.update(_hit_checks(rng))
    return out


def _grazing_ray(rng, p0, p1, r0, r1):
    """A ray (o, d) perpendicular to the segment p0 p1 (radii r0, r1) passing it at 0.99-1.01 of its radius."""
    s = rng.uniform(0.3, 0.7)
    a = (p1 - p0) / np.linalg.norm(p1 - p0)
    u = np.cross(a, rng.normal(size=3))
    u /= np.linalg.norm(u)
    c = p0 + s * (p1 - p0) + (r0 + s * (r1 - r0)) * rng.uniform(0.99, 1.01) * np.cross(a, u)
    return c - 3.0 * u, u


def _hit_checks(rng):
    """Hit point and shading normal adjoints (flat triangle: w.r.t. the ray; height field: also
    w.r.t. every height texel, through the displaced vertices and the stencil normals)."""
    import taichi as ti
    import tirender
    from tirender.core.fixed_point import grad_scale_for
    from tirender.core.intersect import intersect
    from tirender.core.math import BIG, vec2, vec3
    from tirender.walk.attached import Stop, stop_adjoint
    from tirender.launch import read_gradients, reset_gradients
    from scenes import camera, ray_hit_x
    from tirender.media.volfile import write_vol
    import tempfile
    yy, xx = np.mgrid[0:5, 0:6]
    heights = (0.15 * np.sin(1.3 * xx + 0.4) * np.cos(0.9 * yy) + 0.05 * yy)[..., None].astype(np.float32)
    tmp = tempfile.mkdtemp()
    np.save(os.path.join(tmp, "h.npy"), heights)
    C = np.array([[5.0, -0.6, -1.0, 0.2], [5.1, 0.6, -1.2, 0.25]])
    np.savetxt(os.path.join(tmp, "c.txt"), C)
    x1 = np.linspace(0.0, 1.0, 9)
    Z, Y, X = np.meshgrid(x1, x1, x1, indexing="ij")           # an SDF grid: a torus's distances on 9^3 nodes
    write_vol(os.path.join(tmp, "g.vol"), (np.hypot(np.hypot(X - 0.5, Y - 0.5) - 0.28, Z - 0.5) - 0.12)
              .astype(np.float32))
    grid = [{"translate": [-0.5, -0.5, -0.5]}, {"rotate": {"axis": [1, 2, 0], "angle": 25}}, {"scale": [1.6, 1.3, 1.5]}]
    with open(os.path.join(tmp, "bent.obj"), "w") as fh:      # a smooth sheet with uvs (placed as an instance)
        fh.write("v -1 -1 0.1\nv 1 -1 -0.2\nv 1 1 0.15\nv -1 1 -0.1\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
                 "vn 0.3 0.1 1\nvn -0.2 0.25 1\nvn 0.1 -0.3 1\nvn -0.25 -0.1 1\n"
                 "f 1/1/1 2/2/2 3/3/3\nf 1/1/1 3/3/3 4/4/4\n")
    sc = tirender.load_scene({
        "sensors": [camera([0, 0, 5.0], [0, 0, 0], fov=40, w=8, h=8)],
        "shapes": [{"id": "hf", "type": "heightfield", "resolution": [7, 6], "thickness": 0.3,
                    "height": {"type": "bitmap", "data": "h.npy"},
                    "to_world": [{"rotate": {"axis": [1, 1, 0], "angle": 20}}, {"scale": [1.0, 0.8, 1.2]}]},
                   {"id": "flat", "type": "rectangle", "face_normals": True,
                    "to_world": [{"rotate": {"axis": [0, 1, 0], "angle": 30}}, {"translate": [0, 0, -3.0]}]},
                   {"id": "curve", "type": "linearcurve", "filename": "c.txt"},
                   {"id": "ball", "type": "sphere", "differentiable": True,
                    "to_world": [{"scale": 0.5}, {"translate": [-5.0, 0.0, 0.0]}]},
                   {"type": "cylinder", "flip_normals": True,
                    "to_world": [{"translate": [0, 0, -0.5]}, {"scale": [0.4, 0.3, 1.0]},
                                 {"rotate": {"axis": [1, 0.3, 0], "angle": 80}}, {"translate": [-5.0, 4.0, 0.0]}]},
                   {"type": "disk", "to_world": [{"scale": [0.6, 0.4, 1.0]}, {"rotate": {"axis": [1, 1, 0], "angle": 30}},
                                                 {"translate": [-5.0, -4.0, 0.0]}]},
                   {"id": "sdfa", "type": "sdfgrid", "filename": "g.vol", "normals": "analytic", "differentiable": True,
                    "to_world": grid + [{"translate": [10.0, 0.0, 0.0]}]},
                   {"id": "sdfs", "type": "sdfgrid", "filename": "g.vol", "normals": "smooth", "differentiable": True,
                    "to_world": grid + [{"translate": [10.0, 4.0, 0.0]}]},
                   {"type": "shapegroup", "id": "grp", "shapes": [
                       {"id": "sheet", "type": "obj", "filename": "bent.obj"},
                       {"id": "bead", "type": "sphere", "to_world": [{"scale": 0.3}, {"translate": [0.0, 0.0, 0.4]}]}]},
                   {"id": "placed", "type": "instance", "shapegroup": "grp",
                    "to_world": [{"scale": [1.3, 0.8, 1.1]}, {"rotate": {"axis": [1, 1, 0], "angle": 25}},
                                 {"translate": [0.0, 10.0, 0.0]}]}],
        "emitters": [{"type": "constant"}]}, base_dir=tmp)
    st = sc.bind()

    hit_x = ray_hit_x()

    @ti.kernel
    def k_hit(x: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        tri, t, b1, b2, si = hit_x(st, x)
        return si.p.dot(vec3(g[0], g[1], g[2])) + si.n.dot(vec3(g[3], g[4], g[5])) + si.uv.dot(vec2(g[6], g[7])) \
            + ti.cast(si.shape, ti.f64) * g[8]       # g[8] = 0 for the differences (no rounding at 1e3 |shape|)

    @ti.kernel
    def k_hit_adj(x: ti.types.ndarray(), g: ti.types.ndarray(), out: ti.types.ndarray()):
        o = vec3(x[0], x[1], x[2])
        d = vec3(x[3], x[4], x[5])
        tri, t, b1, b2, inst = intersect(st, o, d, BIG)
        stop = Stop(valid=1, tri=tri, inst=inst, t=t, b=vec2(b1, b2), o=o, d=d, g_p=vec3(g[0], g[1], g[2]),
                    g_n=vec3(g[3], g[4], g[5]), g_uv=vec2(g[6], g[7]), g_d=vec3(0.0))
        g_o, g_d = stop_adjoint(st, stop)
        for i in ti.static(range(3)):
            out[i] = g_o[i]
            out[3 + i] = g_d[i]

    def value(x, g, h=None):
        if h is not None:      # written on the device in float64 (the host copy is float32)
            sc.write_param_device("hf.height", np.ascontiguousarray(h, np.float64))
        return k_hit(x, g)

    out = {}
    bent = 0
    targets = (("flat triangle", None, 1), ("height field", None, 0), ("curve's tube", None, 2),
               ("sphere", (-5.0, 0.0, 0.5), 3), ("cylinder", (-5.0, 4.0, 0.5), 4), ("disk", (-5.0, -4.0, 0.5), 5),
               ("SDF grid (analytic normals)", (10.0, 0.0, 0.8), 6), ("SDF grid (smooth normals)", (10.0, 4.0, 0.8), 7),
               ("smooth mesh in an instance", (0.0, 10.0, 0.9), "grp.sheet"),
               ("sphere in an instance", (0.0, 10.0, 0.2), "grp.bead"))
    ball = next(d for d in sc.deformables if "center" in d.names())
    grids = {6: next(d for d in sc.deformables if d.name == "sdfa"), 7: next(d for d in sc.deformables if d.name == "sdfs")}
    ids = [sh.id for sh in sc.desc.shapes]
    for name, z, want in targets:
        want = ids.index(want) if isinstance(want, str) else want
        errs, errs_h, errs_c, errs_v = [], [], [], []
        for _attempt in range(20000):
            if len(errs) >= (40 if want == 0 else 100):
                break
            o = np.array([*rng.uniform(-0.6, 0.6, 2), -1.0 if want == 1 else 2.5])
            d = np.array([*rng.normal(size=2) * 0.15, -1.0])
            if want >= 3:        # a quadric or an SDF grid at (x, y), of about this half-width
                o = np.array([z[0] + rng.uniform(-z[2], z[2]), z[1] + rng.uniform(-z[2], z[2]), 2.5])
            if want == 2:        # grazing the tube (any turn about its axis), where the normal turns from the ray
                o, d = _grazing_ray(rng, C[0, :3], C[1, :3], C[0, 3], C[1, 3])
            g = np.append(rng.normal(size=8), 0.0)
            x = np.concatenate([o, d])
            shape = round(k_hit(x, np.array([0.0] * 8 + [1.0])))
            if shape != want:
                continue
            if want == 2:
                dn = k_hit(x, np.array([0, 0, 0, *(d / np.linalg.norm(d)), 0, 0, 0.0]))
                bent += bool(abs(abs(dn) - 0.01) < 1e-3)    # |n·d| ≈ ε: bent (core/interaction.HORIZON_EPS)
            adj = np.zeros(6)
            reset_gradients(st, grad_scale_for(10.0))
            k_hit_adj(x, g, adj)
            fd = _fd(lambda y: value(y, g), x)
            if np.abs(fd).max() > 1e2:       # the difference crossed an edge of the mesh
                continue
            errs.append(_rel(adj, fd))
            if want == 0:
                gh = read_gradients(sc, st)["hf.height"].astype(np.float64).ravel()
                h0 = heights.ravel().astype(np.float64)
                fdh = _fd(lambda hh: value(x, g, hh), h0)
                value(x, g, h0)
                if np.abs(fdh).max() < 1e2:    # (a ray through the flat bottom: 0 = 0, hence the floor)
                    errs_h.append(float(np.abs(gh - fdh).max() / max(np.abs(fdh).max(), 1e-3)))
            if want == 3:            # the differentiable sphere's centre and radius (its derived slot)
                grads = read_gradients(sc, st)
                gcr = np.concatenate([grads["ball.center"], grads["ball.radius"]]).astype(np.float64)
                c0, r0 = ball.state(sc.params.__getitem__)

                def moved(y):
                    ball.write(st, y[:3], y[3])
                    return value(x, g)
                fdc = _fd(moved, np.append(c0, r0))
                moved(np.append(c0, r0))
                if np.abs(fdc).max() < 1e2:
                    errs_c.append(_rel(gcr, fdc))
            if want in grids and len(errs_v) < 30:   # a differentiable grid's values (the nodes the hit reads)
                body = grids[want]
                pname = body.names()["grid"]
                gv = read_gradients(sc, st)[pname].astype(np.float64).ravel()
                v0 = np.asarray(body.implicit.values, np.float64).ravel()
                idx = np.flatnonzero(gv)
                idx = np.union1d(idx, np.random.default_rng(len(errs_v)).choice(v0.size, 4, replace=False))  # + others
                fdv = np.zeros(v0.size)
                for i in idx:
                    vals = []
                    for sgn in (1.0, -1.0):
                        v = v0.copy()
                        v[i] += sgn * H
                        body.write(st, v)
                        vals.append(value(x, g))
                    fdv[i] = (vals[0] - vals[1]) / (2 * H)
                body.write(st, v0)
                if len(np.flatnonzero(gv)) >= 8 and np.abs(fdv).max() < 1e2:
                    errs_v.append(_rel(gv[idx], fdv[idx]))
        out[f"hit on a {name} (o, d)"] = {"max_rel_err": max(errs), "cases": len(errs)}
        if errs_v:    # each case: every node the hit reads (8 to 64) and 4 others
            out[f"hit on a {name} (grid values)"] = {"max_rel_err": max(errs_v), "cases": len(errs_v)}
        if want == 2:
            out[f"hit on a {name} (o, d)"]["bent"] = bent
        if errs_h:     # each case: every height texel (30) of one ray
            out["hit on a height field (heights)"] = {"max_rel_err": max(errs_h), "cases": len(errs_h)}
        if errs_c:
            out["hit on a sphere (centre, radius)"] = {"max_rel_err": max(errs_c), "cases": len(errs_c)}
    return out


def test_adjoints_vs_central_differences_f64():
    report = f64_child_report(__file__)
    assert len(report) == 21
    assert report["hit on a curve's tube (o, d)"]["bent"] >= 30
    for name, r in report.items():
        assert r["cases"] >= (30 if "height field" in name or "grid values" in name else 100), (name, r)
        assert r["max_rel_err"] <= 1e-6, (name, r)


if __name__ == "__main__" and "--f64" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu", fp="f64")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(checks()))
