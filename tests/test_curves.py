"""Mitsuba's bsplinecurve and linearcurve (scene/curves.py): their file format and errors, the tubes' adjoint and
tangent against central differences in float64, the images against Mitsuba 3's by Mitsuba's Z-test
(mitsuba_suite.ztest_file, skipped without mitsuba), and whole-render gradients of the control points against
finite differences."""
import os
import sys

import numpy as np
import pytest

import tirender
from tirender.errors import ConfigError
from tirender.scene.curves import CurveBody, LinearTube, Tube, curve_mesh, read_curves

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mitsuba_suite as suite  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenes import camera, xml_sensor  # noqa: E402


def _helix(n=9, turns=1.0):
    t = np.linspace(0, 1, n)
    return np.stack([np.cos(2 * np.pi * turns * t) * 0.6, np.sin(2 * np.pi * turns * t) * 0.4, 0.3 * t - 0.15,
                     0.05 + 0.03 * t], 1)


def _loop(n=10, r=0.5, z=0.0, radius=0.04):
    """A closed uniform B-spline (the first three points repeated at the end): no open ends to look into."""
    a = 2 * np.pi * np.arange(n) / n
    p = np.stack([r * np.cos(a), 0.7 * r * np.sin(a), z + 0.15 * np.sin(2 * a), radius * (1 + 0.5 * np.cos(a))], 1)
    return np.concatenate([p, p[:3]])


def _write(path, curves):
    path.write_text("\n\n".join("\n".join(" ".join(f"{x:.8f}" for x in row) for row in c) for c in curves) + "\n")
    return str(path)


def test_file_format_and_errors(tmp_path):
    f = _write(tmp_path / "two.txt", [_helix(5), _helix(7)])
    cs = read_curves(f)
    assert [c.shape for c in cs] == [(5, 4), (7, 4)] and np.allclose(cs[1], _helix(7))
    for body, msg in (("1 2 3 0.1\n4 5 6 0.1\n1 1 1 0.1\n", "at least 4"), ("1 2 3\n", "4 finite numbers"),
                      ("1 2 x 0.1\n", "could not parse"), ("\n\n", "no control points")):
        (tmp_path / "bad.txt").write_text(body)
        with pytest.raises(ConfigError, match=msg):
            read_curves(str(tmp_path / "bad.txt"))
    (tmp_path / "lin.txt").write_text("0 0 0 0.1\n1 0 0 0.1\n\n2 0 0 0.1\n")   # a linear curve of 1 point
    assert [len(c) for c in read_curves(f, 2)] == [5, 7]
    with pytest.raises(ConfigError, match="a linear curve needs at least 2 control points"):
        read_curves(str(tmp_path / "lin.txt"), 2)


def test_tube_follows_the_bspline():
    """Ring centres are the B-spline's points (a segment's ends at (c0 + 4 c1 + c2) / 6), every vertex at the
    polygon radius w R from its centre in the plane normal to the tangent, v running over the segments."""
    ctrl = _helix(6)
    tube = Tube([ctrl])
    tube.transport(ctrl)
    C, R, _D, T = tube.frame(ctrl)
    assert np.allclose(C[0], (ctrl[0, :3] + 4 * ctrl[1, :3] + ctrl[2, :3]) / 6)
    assert np.allclose(C[-1], (ctrl[-3, :3] + 4 * ctrl[-2, :3] + ctrl[-1, :3]) / 6)
    P = tube.positions(ctrl).reshape(len(C), tube.sides, 3)
    off = P - C[:, None]
    assert np.allclose(np.linalg.norm(off, axis=2), R[:, None]) and np.allclose(R, tube.w * (tube.W @ ctrl[:, 3]))
    assert np.abs(np.einsum("rkj,rj->rk", off, T)).max() < 1e-9
    v = tube.uvs[:, 1].reshape(len(C), -1)[:, 0]
    assert v[0] == 0 and abs(v[-1] - 1) < 1e-6 and np.all(np.diff(v) > 0)


def test_linear_tube_is_frustums_and_spheres():
    """Per segment a frustum whose end rings (radius w r) lie in the planes normal to the segment through its two
    points; at every point a closed sphere of radius w r wound outwards; v = (segment + t) / segments."""
    ctrl = _helix(5)
    lt = LinearTube([ctrl[:2], ctrl[2:]])
    lt.transport(ctrl)
    tube, w = lt.tube, lt.tube.w
    P = lt.positions(ctrl)
    rings = P[:lt.n_tube].reshape(-1, tube.sides, 3)
    assert len(rings) == 2 * 3                                     # segments (0, 1), (2, 3), (3, 4)
    for r, (a, b) in enumerate([(0, 1), (2, 3), (3, 4)]):
        axis = (ctrl[b, :3] - ctrl[a, :3]) / np.linalg.norm(ctrl[b, :3] - ctrl[a, :3])
        for end, i in ((0, a), (1, b)):
            off = rings[2 * r + end] - ctrl[i, :3]
            assert np.allclose(np.linalg.norm(off, axis=1), w * ctrl[i, 3]) and np.abs(off @ axis).max() < 1e-9
    n = lt.n_tube + lt.n_caps
    caps = P[lt.n_tube:n].reshape(6, tube.sides + 1, 3)
    assert np.allclose(caps[:, -1], ctrl[[0, 1, 2, 3, 3, 4], :3])                     # the caps' centres
    assert np.allclose(caps[:, :-1], rings)                                           # and the rings' copies
    sph = P[n:].reshape(len(ctrl), -1, 3)
    assert np.allclose(np.linalg.norm(sph - ctrl[:, None, :3], axis=2), w * ctrl[:, 3:4])
    fc = lt.joints.faces
    js = P[n:]
    cr = np.cross(js[fc[:, 1]] - js[fc[:, 0]], js[fc[:, 2]] - js[fc[:, 0]])
    centre = np.repeat(ctrl[:, :3], len(lt.joints.U), 0)[fc[:, 0]]
    assert np.all(np.einsum("ij,ij->i", cr, js[fc].mean(1) - centre) > 0)          # outwards
    edges = np.sort(np.concatenate([fc[:, [0, 1]], fc[:, [1, 2]], fc[:, [2, 0]]]), 1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    assert np.all(counts == 2)                                                       # every edge twice: closed
    fc = lt.faces                                          # the frustums are closed too (as positions)
    key = np.unique(np.round(P, 9), axis=0, return_inverse=True)[1].reshape(-1)
    edges = np.sort(np.concatenate([key[fc[:, [0, 1]]], key[fc[:, [1, 2]]], key[fc[:, [2, 0]]]]), 1)
    assert np.all(np.unique(edges, axis=0, return_counts=True)[1] == 2)
    cr = np.cross(P[fc[:, 1]] - P[fc[:, 0]], P[fc[:, 2]] - P[fc[:, 0]])              # caps wound outwards
    for j, (a, b) in enumerate([(0, 1), (2, 3), (3, 4)]):
        axis = ctrl[b, :3] - ctrl[a, :3]
        for end, sign in ((0, -1), (1, 1)):
            rows = np.flatnonzero(fc[:, 0] == lt.n_tube + (2 * j + end) * (tube.sides + 1) + tube.sides)
            assert len(rows) == tube.sides and np.all(sign * (cr[rows] @ axis) > 0)
    v = lt.uvs[:, 1]
    assert np.allclose(v[:lt.n_tube].reshape(-1, tube.sides)[:, 0], [0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 1])
    assert np.allclose(v[n:].reshape(len(ctrl), -1)[:, 0], [0, 1 / 3, 1 / 3, 2 / 3, 1])


@pytest.mark.parametrize("linear", [False, True], ids=["bspline", "linear"])
def test_tube_adjoint_and_tangent_vs_central_differences_f64(linear):
    ctrl = _helix(9)
    m = curve_mesh([ctrl[:5], ctrl[4:]], np.diag([1.5, 1.0, 0.8, 1.0]), linear=linear)
    tube, world = m["curve"]
    rng = np.random.default_rng(0)
    gP = rng.normal(size=(len(m["positions"]), 3))
    gN = rng.normal(size=gP.shape)
    body = CurveBody("c", tube, world)
    name = "c.control_points"
    errs = []
    for _ in range(4):
        dc = rng.normal(size=world.shape) * [1, 1, 1, 0.1]

        def total(c):
            P = body.positions({name: c}.__getitem__)
            return np.sum(gP * P) + np.sum(gN * body.normals(P)[0])
        fd = (total(world + 1e-6 * dc) - total(world - 1e-6 * dc)) / 2e-6
        adj = np.sum(body.backward({name: world}.__getitem__, gP, gN)[name] * dc)
        dP, dN = body.tangent({name: world}.__getitem__, lambda n: dc)
        tan = np.sum(dP * gP) + np.sum(dN * gN)
        errs += [abs(adj - fd) / abs(fd), abs(tan - fd) / abs(fd)]
    assert max(errs) < 1e-6, errs


def _xml(curve_file, spp="$spp", kind="bsplinecurve"):
    return f"""<scene version="3.0.0">
  <default name="spp" value="16"/>
  <integrator type="moment"><integrator type="direct"/></integrator>
  {xml_sensor("0, -2.5, 3", "0, 0, 0", "0, 0, 1", 40, 48, 40, spp)}
  <shape type="rectangle"><transform name="to_world"><scale value="2"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.7"/></bsdf></shape>
  <shape type="{kind}" id="curve"><string name="filename" value="{curve_file}"/>
    <transform name="to_world"><scale value="1.2"/><translate z="0.6"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.2, 0.3, 0.8"/></bsdf></shape>
  <shape type="rectangle"><transform name="to_world"><scale value="0.7"/><rotate x="1" angle="180"/>
    <translate x="0.3" z="2.5"/></transform><emitter type="area"><rgb name="radiance" value="8"/></emitter></shape>
</scene>
"""


def _zigzag():
    """Two linear curves: four points of one radius (joints bent both ways), two of growing radius (a cone)."""
    return [np.array([[-0.6, -0.3, 0.0, 0.08], [-0.2, 0.3, 0.1, 0.08], [0.3, -0.2, 0.2, 0.08], [0.6, 0.3, 0.05, 0.08]]),
            np.array([[-0.5, 0.5, 0.0, 0.05], [0.5, 0.6, 0.3, 0.1]])]


@pytest.mark.parametrize("kind", ["bsplinecurve", "linearcurve"])
def test_curve_matches_mitsuba(tmp_path, kind):
    """Mitsuba's Z-test against Mitsuba 3's image of the same file at 4096 spp with its per-pixel variance: two
    closed B-spline curves in one file with varying radii, to_world moving the points but not the radii; two linear
    curves, one bent at its joints, one a cone. (Open B-spline ends differ: Mitsuba culls a curve's back faces, so
    a ray into an open end sees through it, where tirender's tube shows its inside; linear curves are capped.)"""
    pytest.importorskip("mitsuba")
    f = tmp_path / "curve.xml"
    curves = [_loop(), _loop(7, 0.25, 0.45, 0.03)] if kind == "bsplinecurve" else _zigzag()
    f.write_text(_xml(_write(tmp_path / "c.txt", curves), kind=kind))
    sc = tirender.load_scene(str(f))
    assert sc.params["curve.control_points"].shape == (sum(len(c) for c in curves), 4)
    ok, details = suite.ztest_file(f, scene=sc)
    assert ok, details


@pytest.mark.parametrize("kind, u", [("bsplinecurve", [0.0, 1.0, 0.0, 0.0]), ("bsplinecurve", [0.0, 0.0, 0.0, 1.0]),
                                     ("linearcurve", [0.0, 0.0, 0.0, 1.0])], ids=["u0", "u1", "linear_u1"])
def test_control_point_gradient_vs_finite_differences(tmp_path, kind, u):
    """direct_projective's default gradient method (prb_attached: edges and attached vertices) moving a closed
    B-spline curve sideways and thickening it, and thickening a straight linear curve (a coarse smooth-shaded
    frustum: its shading normals bend towards the viewer at their horizon, core/interaction.horizon_bend — without
    the bend its gradient was -277 ± 0.6 against central differences -223 ± 8), against central differences with
    correlated random numbers. (Open tubes are left out: the geometry gradient of an open mesh whose inside is seen
    through its rim disagrees with the differences, for a plain mesh as much as for a curve — the edge-sampling
    issue this file does not cover.)"""
    from gradcheck_util import assert_agree, projected_gradients
    curves = [_loop()] if kind == "bsplinecurve" else [np.array([[-0.5, 0.0, 0.0, 0.08], [0.5, 0.0, 0.0, 0.08]])]
    f = _write(tmp_path / "c.txt", curves)
    sc = tirender.load_scene({
        "integrator": {"type": "direct_projective"},
        "sensors": [camera([0, -2.5, 3], [0, 0, 0], fov=40, w=24, h=24, filt="box")],
        "shapes": [{"type": "rectangle", "to_world": [{"scale": 2}], "bsdf": {"type": "diffuse", "reflectance": 0.7}},
                   {"id": "curve", "type": kind, "filename": f, "to_world": [{"translate": [0, 0, 0.6]}],
                    "bsdf": {"type": "diffuse", "reflectance": [0.2, 0.3, 0.8]}},
                   {"type": "rectangle", "emitter": {"type": "area", "radiance": 8.0},
                    "to_world": [{"scale": 0.7}, {"rotate": {"axis": [1, 0, 0], "angle": 180}},
                                 {"translate": [0.3, 0, 2.5]}]}]})
    w = np.random.default_rng(1).uniform(0, 1, (24, 24, 3)).astype(np.float32)
    u = np.tile(np.float32(u), (len(curves[0]), 1))
    g, _ = projected_gradients(sc, "curve.control_points", u, w, 128, list(range(8)), [], 1e-3, method=None)
    _, f_ = projected_gradients(sc, "curve.control_points", u, w, 512, [], list(range(100, 108)), 1e-3)
    assert_agree(g, f_, f"curve.control_points along {u[0]}")


def test_mirrored_curve_keeps_an_outward_tube(tmp_path):
    """A mirroring to_world moves the control points; the tube is built in world space, wound outwards."""
    f = _write(tmp_path / "c.txt", [_loop()])
    sc = tirender.load_scene({"sensor": {"film": {"width": 8, "height": 8}}, "emitters": [{"type": "constant"}],
                              "shapes": [{"id": "c", "type": "bsplinecurve", "filename": f,
                                          "to_world": {"scale": [-1.0, 1.0, 1.0]}}]})
    s = sc.desc.shapes[0]
    assert np.allclose(sc.params["c.control_points"][:, 0], -_loop()[:, 0], atol=1e-6)
    p, fc = s.positions.astype(np.float64), s.faces
    cr = np.cross(p[fc[:, 1]] - p[fc[:, 0]], p[fc[:, 2]] - p[fc[:, 0]])
    assert np.all(np.einsum("ij,ij->i", cr, s.normals[fc[:, 0]]) > 0)


def test_curve_errors(tmp_path):
    f = _write(tmp_path / "c.txt", [_helix(5)])
    base = {"sensor": {"film": {"width": 8, "height": 8}}, "emitters": [{"type": "constant"}]}
    for shape, key, msg in (({"type": "bsplinecurve", "filename": f, "flip_normals": True}, "shapes.shape0.flip_normals",
                             "does not apply"),
                            ({"type": "bsplinecurve", "filename": str(tmp_path / "none.txt")}, "shapes.shape0.filename",
                             ""),
                            ({"type": "bsplinecurve", "filename": f, "emitter": {"type": "area"}},
                             "shapes.shape0.emitter", "emitter")):
        with pytest.raises(ConfigError) as e:
            tirender.load_scene(dict(base, shapes=[shape]))
        assert e.value.key == key and msg in str(e.value), (e.value.key, str(e.value))
