"""Mitsuba's shapegroup / instance (scene/instances.py) and cylinder (scene/shapes.py):

* an instanced scene renders as the same scene with each instance's shapes written out (same seed: the same image);
  a member's inline BSDF is one BSDF for all instances (one parameter, both instances change);
* instances and cylinders (p0 / p1 / radius and to_world, Mitsuba's uv) against Mitsuba 3 by Mitsuba's own Z-test
  (its ``moment`` integrator's per-pixel variance at 8192 spp; llvm_ad_rgb or scalar_rgb:
  mitsuba_suite.reference_variant; skipped without mitsuba);
* the cylinder mesh: area, uv and normals as Mitsuba's parametrisation;
* bad input: one ConfigError naming the file, key or line.
"""
import os
import sys

import numpy as np
import pytest

import tirender
from tirender.errors import ConfigError
from tirender.scene import shapes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mitsuba_suite as suite  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenes import xml_sensor  # noqa: E402

MEMBER_T = ['<scale value="0.5"/><translate x="-1"/>', '<scale value="1.2"/><rotate y="1" angle="-80"/>']
INSTANCE_T = ['', '<rotate y="1" angle="45"/><scale value="1.5"/><translate z="2"/>',
              '<rotate y="1" angle="-45"/><rotate x="1" angle="-25"/><scale value="1.5"/><translate z="-2"/>',
              '<scale x="-0.8" y="0.8" z="0.8"/><translate x="-2.5" y="2" z="1"/>']          # a mirror
HEAD = """<scene version="3.0.0">
    <default name="spp" value="16"/>
    <integrator type="moment"><integrator type="path"><integer name="max_depth" value="3"/></integrator></integrator>
    """ + xml_sensor("-5, -6, 0.5", "0, 0, 0", "0, 0, 1", 50, 40, 36) + """
    <emitter type="point"><point name="position" x="-5" y="-6" z="1"/><rgb name="intensity" value="250"/></emitter>
    <emitter type="constant"><rgb name="radiance" value="0.1"/></emitter>
    <bsdf type="diffuse" id="checker">
        <texture name="reflectance" type="checkerboard">
            <transform name="to_uv"><scale x="6" y="3"/></transform>
            <rgb name="color0" value="0.8, 0.6, 0.2"/><rgb name="color1" value="0.1, 0.2, 0.7"/>
        </texture>
    </bsdf>
"""
MEMBERS = ["""<shape type="cylinder" {id}><transform name="to_world">{t0}</transform><ref id="checker"/></shape>""",
           """<shape type="rectangle" {id}><transform name="to_world">{t1}</transform>
                  <bsdf type="diffuse"><rgb name="reflectance" value="0.9, 0.5, 0.9"/></bsdf></shape>"""]
CYLINDER = """<shape type="cylinder">
        <point name="p0" x="2.5" y="1.3" z="-1"/><point name="p1" x="1.9" y="0.8" z="1.5"/>
        <float name="radius" value="0.6"/><ref id="checker"/></shape>
"""


def instanced_xml():
    group = "\n".join(m.format(id=f'id="m{k}"', t0=MEMBER_T[0], t1=MEMBER_T[1]) for k, m in enumerate(MEMBERS))
    inst = "\n".join(f'<shape type="instance" id="i{k}"><ref id="g"/><transform name="to_world">{t}</transform>'
                     f'</shape>' for k, t in enumerate(INSTANCE_T))
    return HEAD + f'<shape type="shapegroup" id="g">{group}</shape>\n{inst}\n{CYLINDER}</scene>\n'


def flattened_xml():
    """The same scene with every instance's shapes written out (member transform, then the instance's); the
    rectangle's BSDF one named BSDF, as the group holds one."""
    out = HEAD + '<bsdf type="diffuse" id="rect"><rgb name="reflectance" value="0.9, 0.5, 0.9"/></bsdf>\n'
    for t in INSTANCE_T:
        out += f'<shape type="cylinder"><transform name="to_world">{MEMBER_T[0]}{t}</transform><ref id="checker"/>' \
               f'</shape>\n<shape type="rectangle"><transform name="to_world">{MEMBER_T[1]}{t}</transform>' \
               f'<ref id="rect"/></shape>\n'
    return out + CYLINDER + "</scene>\n"


def test_instances_render_as_their_copies(tmp_path):
    a, b = tmp_path / "inst.xml", tmp_path / "flat.xml"
    a.write_text(instanced_xml())
    b.write_text(flattened_xml())
    sa, sb = tirender.load_scene(str(a)), tirender.load_scene(str(b))
    ia = np.asarray(tirender.render(sa, spp=8, seed=3, progress=False))
    ib = np.asarray(tirender.render(sb, spp=8, seed=3, progress=False))
    assert ia.mean() > 0.02
    np.testing.assert_allclose(ia, ib, rtol=1e-4, atol=1e-5)
    # one BSDF per group member: one parameter moves every instance's rectangle
    assert "g.m1.reflectance" in sa.params and not any(k.startswith("i1.") and "reflectance" in k for k in sa.params)
    sa.params["g.m1.reflectance"] = np.array([0.1, 0.9, 0.1], np.float32)
    ic = np.asarray(tirender.render(sa, spp=8, seed=3, progress=False))
    assert np.abs(ic - ia).mean() > 1e-3


def test_instances_and_cylinders_match_mitsuba(tmp_path):
    """Mitsuba's Z-test (benchmarks/mitsuba_suite.ztest, α = 0.01 Bonferroni over pixels) against Mitsuba 3's image
    of the same file at 8192 spp with its per-pixel variance (the moment integrator)."""
    pytest.importorskip("mitsuba")
    f = tmp_path / "inst.xml"
    f.write_text(instanced_xml())
    ok, details = suite.ztest_file(f, ref_spp=8192)
    assert ok, details
    assert np.allclose(details["mean"], details["ref_mean"], rtol=0.01)


def test_cylinder_mesh_is_mitsubas_parametrisation():
    m = shapes.cylinder(256)
    p, f, uv, n = m["positions"].astype(np.float64), m["faces"], m["uvs"], m["normals"]
    v0, v1, v2 = (p[f[:, k]] for k in range(3))
    cr = np.cross(v1 - v0, v2 - v0)
    assert abs(0.5 * np.linalg.norm(cr, axis=1).sum() / (2 * np.pi) - 1) < 1e-4       # lateral area 2π r h
    c = (v0 + v1 + v2) / 3
    assert np.all(np.einsum("ij,ij->i", cr, c * [1, 1, 0]) > 0)                         # wound outwards
    assert np.allclose(np.linalg.norm(p[:, :2], axis=1), 1, atol=1e-6) and set(np.unique(p[:, 2])) == {0.0, 1.0}
    phi = np.mod(np.arctan2(p[:, 1], p[:, 0]), 2 * np.pi)
    seam = uv[:, 0] > 1 - 1e-6                                                          # u = 1 at φ = 2π
    assert np.allclose(uv[~seam, 0], phi[~seam] / (2 * np.pi), atol=1e-6) and np.allclose(uv[:, 1], p[:, 2])
    assert np.allclose(n[:, :2], p[:, :2], atol=1e-6) and np.all(n[:, 2] == 0)
    # p0 / p1 / radius: Mitsuba's frame (u = 0 where its coordinate_system puts s)
    w = shapes.cylinder_to_object([1, 2, 3], [1, 2, 5], 0.5)
    assert np.allclose(w[:3, 3], [1, 2, 3]) and np.allclose(w[:3, 2], [0, 0, 2]) and np.allclose(w[:3, 0], [.5, 0, 0])


def _load(tmp_path, body, name="bad.xml"):
    f = tmp_path / name
    f.write_text('<scene version="3.0.0">' + body + "</scene>")
    return tirender.load_scene(str(f))


@pytest.mark.parametrize("body,msg", [
    ('<shape type="shapegroup" id="g"><shape type="shapegroup" id="h"><shape type="cube"/></shape></shape>'
     '<shape type="instance"><ref id="g"/></shape>', "nested instancing"),
    ('<shape type="shapegroup" id="g"><shape type="cube"><emitter type="area"/></shape></shape>',
     "instancing of emitters"),
    ('<shape type="cube" id="c"/><shape type="instance"><ref id="c"/></shape>', "not the id of a shapegroup"),
    ('<shape type="instance"><transform name="to_world"><scale value="2"/></transform></shape>',
     "a reference to a 'shapegroup' must be specified"),
    ('<shape type="cylinder"><point name="p0" x="1"/><point name="p1" x="1"/></shape>', "p0 != p1"),
])
def test_xml_errors_name_the_line(tmp_path, body, msg):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, body)
    assert msg in str(e.value) and "bad.xml" in str(e.value) and "line" in str(e.value), str(e.value)


@pytest.mark.parametrize("shapes_,key,msg", [
    ([{"type": "instance", "shapegroup": "nope"}], "shapes.shape0.shapegroup", "id of a shapegroup"),
    ([{"type": "shapegroup", "shapes": [{"type": "cube"}]}], "shapes[0].id", "needs an 'id'"),
    ([{"type": "shapegroup", "id": "g", "shapes": []}], "shapes.g.shapes", "non-empty"),
    ([{"type": "shapegroup", "id": "g", "shapes": [{"type": "cube", "differentiable": True}]}],
     "shapes.g.shapes[0].differentiable", "not differentiable"),
    ([{"type": "shapegroup", "id": "g", "shapes": [{"type": "instance", "shapegroup": "g"}]}],
     "shapes.g.shapes[0].type", "nested instancing"),
    ([{"type": "shapegroup", "id": "g", "shapes": [{"type": "cube"}]},
      {"type": "instance", "shapegroup": "g", "scale": 2}], "shapes.shape1.scale", "unknown key"),
])
def test_yaml_errors_name_the_key(shapes_, key, msg):
    spec = {"sensor": {"film": {"width": 8, "height": 8}}, "emitters": [{"type": "constant"}], "shapes": shapes_}
    with pytest.raises(ConfigError) as e:
        tirender.load_scene(spec)
    assert e.value.key == key and msg in str(e.value), (e.value.key, str(e.value))


def test_instances_store_the_group_once(tmp_path, monkeypatch):
    """The group's mesh file is read once and its triangles stored once, in the group's space; each instance adds
    one box primitive and one record (O(1) memory per instance: 5 and 50 instances differ by 45 rows)."""
    from tirender.scene import mesh_io
    mesh = shapes.cube()
    mesh_io.save_ply(str(tmp_path / "m.ply"), mesh["positions"], mesh["faces"])
    calls = []
    real = mesh_io.load_mesh
    monkeypatch.setattr(mesh_io, "load_mesh", lambda *a, **k: calls.append(a) or real(*a, **k))

    def scene(n):
        spec = {"sensor": {"film": {"width": 8, "height": 8}}, "emitters": [{"type": "constant"}],
                "shapes": [{"type": "shapegroup", "id": "g", "shapes": [{"type": "ply", "filename": "m.ply"}]}]
                + [{"type": "instance", "shapegroup": "g", "to_world": {"translate": [3 * k, 0, 0]}}
                   for k in range(n)]}
        return tirender.load_scene(spec, base_dir=str(tmp_path))

    sc = scene(5)
    assert len(calls) == 1
    assert [s.id for s in sc.desc.shapes] == ["g.shape0"] and [p[0] for p in sc.desc.placements][:2] == \
        ["shape1", "shape2"]
    assert sc.n_triangles == 12 + 5 and scene(50).n_triangles == 12 + 50
    assert sc.sizes["insts"] == 5 and sc.sizes["geos"] == 5


# ------------------------------------------------------------------------------ differentiable instances
def _occluder_scene(t=(0.2, 0.0, 1.0)):
    """A floor lit from above, shadowed by an instance of a two-shape group (a cube and a small sphere) that is
    differentiable: the instance moves as one body."""
    from scenes import camera
    return tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
        "sensors": [camera([0, -2.5, 5], [0, 0, 0], fov=35, w=16, h=16, filt="box")],
        "shapes": [
            {"id": "floor", "type": "rectangle", "to_world": [{"scale": 3}],
             "bsdf": {"type": "diffuse", "reflectance": [0.8, 0.5, 0.2]}},
            {"type": "shapegroup", "id": "g", "shapes": [
                {"type": "cube", "bsdf": {"type": "diffuse", "reflectance": [0.2, 0.3, 0.7]},
                 "to_world": [{"scale": 0.4}]},
                {"type": "sphere", "resolution": 32, "bsdf": {"type": "diffuse", "reflectance": 0.5},
                 "to_world": [{"scale": 0.2}, {"translate": [0.5, 0.3, 0.1]}]}]},
            {"id": "occ", "type": "instance", "shapegroup": "g", "differentiable": True,
             "to_world": [{"rotate": {"axis": [0, 0, 1], "angle": 20}}, {"translate": list(t)}]},
            {"id": "light", "type": "rectangle", "emitter": {"type": "area", "radiance": 20.0},
             "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 0, 0], "angle": 180}}, {"translate": [0, 0, 3]}]}]})


def test_differentiable_instance_moves_as_one_body():
    sc = _occluder_scene()
    names = [k for k in sc.params.keys() if k.startswith("occ")]
    assert names == ["occ.vertex_positions", "occ.translation", "occ.rotation", "occ.scale", "occ.uniform_scale"]
    assert sc.params["occ.vertex_positions"].shape[0] == sum(len(s.positions) for s in sc.desc.shapes
                                                             if s.group == "occ")
    # every triangle of the body names its own corners' vertices (where the kernels add ∂/∂P): tri_code indexes
    # the body's merged vertex list, each shape's faces offset by the vertices before it
    st = sc.bind()
    d = sc.deformables[0]
    P = d.positions(sc.params.__getitem__)
    code = st.tri_code.to_numpy()[d.tri_index]
    p0 = st.tri_p0.to_numpy()[d.tri_index]
    p2 = p0 + st.tri_e2.to_numpy()[d.tri_index]
    assert len(d.members) == 2 and np.allclose(p0, P[code[:, 0]], atol=1e-5) and np.allclose(p2, P[code[:, 2]], atol=1e-5)
    sc.params["occ.translation"] = [0.1, -0.05, 0.2]
    moved = tirender.render(sc, spp=4, seed=2, progress=False)
    placed = tirender.render(_occluder_scene((0.3, -0.05, 1.2)), spp=4, seed=2, progress=False)
    assert np.abs(moved - placed).max() < 1e-5
    assert np.abs(moved - tirender.render(_occluder_scene(), spp=4, seed=2, progress=False)).max() > 0.05


@pytest.mark.parametrize("name,u", [("occ.translation", [0.0, 0.0, 1.0]), ("occ.translation", [1.0, 0.0, 0.0]),
                                    ("occ.uniform_scale", [1.0])])
def test_instance_transform_gradient_vs_finite_differences(name, u):
    """Attached PRB (edges + attached vertices) against central differences with correlated random numbers: the
    translation, and the scale about the body's pivot (which weighs every vertex by its offset: a vertex of one shape
    credited to another would show)."""
    from gradcheck_util import assert_agree, projected_gradients
    sc = _occluder_scene()
    w = np.random.default_rng(1).uniform(0, 1, (16, 16, 3)).astype(np.float32)
    u = np.array(u, np.float32)
    g, _ = projected_gradients(sc, name, u, w, 256, list(range(8)), [], 1e-2, method="prb_attached")
    _, f = projected_gradients(sc, name, u, w, 512, [], list(range(100, 108)), 1e-2)
    assert_agree(g, f, f"{name} along {u}")


def test_instance_before_its_group_and_inline_group(tmp_path):
    """Mitsuba resolves references after reading the whole file: an instance may come before its shapegroup; an
    instance may also hold its group inline. Loading only (no kernels)."""
    sc = _load(tmp_path, '<shape type="instance" id="a"><ref id="g"/><transform name="to_world"><translate x="3"/>'
                         '</transform></shape>'
                         '<shape type="shapegroup" id="g"><shape type="cube" id="c"/></shape>'
                         '<shape type="instance" id="b"><shape type="shapegroup" id="h"><shape type="rectangle"/>'
                         '</shape></shape><emitter type="constant"/>', name="order.xml")
    ids = [s.id for s in sc.desc.shapes]
    assert ids == ["g.c", "h.shape0"], ids                      # each group once, in its own space
    assert [(i, g) for i, g, _ in sc.desc.placements] == [("a", "g"), ("b", "h")]
    assert np.allclose(sc.desc.shapes[0].positions.mean(0), [0, 0, 0], atol=1e-6)
    assert np.allclose(sc.desc.placements[0][2][:3, 3], [3, 0, 0])
