"""PLY mesh attributes and the ``mesh_attribute`` texture (scene/mesh_io.py, tirender/mesh_attribute.py):
attribute names, channels and values against Mitsuba 3's ply plugin (``mi.traverse``), Mitsuba's rules for
them as BSDF textures (refusals in one line), the lookup's adjoint against central differences in float64 (rgb
and spectral children), Mitsuba's mesh_attributes test scenes by its Z-test (with TIRENDER_MITSUBA_DATA), a
whole-render PRB gradient against finite differences, and images and gradients against Mitsuba's."""
import json
import os
import sys
import tempfile

import numpy as np
import pytest
import taichi as ti

from gradcheck_util import assert_agree, f64_child_report, max_rel_err, projected_gradients
from mesh_writers import icosphere, write_ply, write_serialized
from scenes import camera, xml_sensor
from tirender import mesh_attribute, variants
from tirender.errors import ConfigError
from tirender.scene.description import parse_scene
from tirender.scene.mesh_io import load_mesh

DATA = os.environ.get("TIRENDER_MITSUBA_DATA")
_INT = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4"}


def _values(rng, t, n):
    if t in ("float", "double"):
        return rng.normal(size=n)
    info = np.iinfo(_INT[t])
    return rng.integers(info.min, info.max, n, endpoint=True)


def _attribute_ply(path, binary, seed=0):
    """An icosphere with vertex and face properties of every type and naming scheme Mitsuba's ply.h groups (and
    some it leaves out)."""
    rng = np.random.default_rng(seed)
    P, F = icosphere(1)
    V, N = len(P), len(F)
    vp = [(t, f"a{i}_{c}", _values(rng, t, V)) for i, t in enumerate(["char", "uchar", "short", "ushort", "int",
                                                                       "uint", "float", "double"]) for c in "rgb"]
    vp += [("uchar", n, _values(rng, "uchar", V)) for n in ("red", "green", "blue", "alpha")]
    vp += [("float", n, _values(rng, "float", V)) for n in ("w_1", "lonely", "q_x", "q_y", "p_0", "p_1", "p_2")]
    fp = [("int", "id_0", _values(rng, "int", N))] + [("float", f"k_{c}", _values(rng, "float", N)) for c in "xyz"]
    fp += [("short", "s_0", _values(rng, "short", N)), ("float", "t_x", _values(rng, "float", N)),
           ("float", "t_y", _values(rng, "float", N))]
    return write_ply(path, P, F, vp, fp, binary=binary), dict((n, v) for _, n, v in vp + fp)


def test_ply_attribute_names_and_values(tmp_path):
    """Mitsuba's grouping (ply.h find_other_fields) and value conversion, spelled out."""
    path, v = _attribute_ply(tmp_path / "a.ply", binary=True)
    a = load_mesh(path)["attributes"]
    assert sorted(a) == ["face_id", "face_k", "face_s", "vertex_a0_color", "vertex_a1_color", "vertex_a2_color",
                         "vertex_a3_color", "vertex_a4_color", "vertex_a5_color", "vertex_a6_color",
                         "vertex_a7_color", "vertex_color", "vertex_p", "vertex_w"]
    assert a["vertex_color"].shape == (42, 4) and a["vertex_p"].shape == (42, 3) and a["face_k"].shape == (80, 3)
    assert np.array_equal(a["vertex_color"][:, 3], v["alpha"].astype(np.float32))          # uchar: as stored
    assert np.array_equal(a["vertex_a7_color"][:, 1], v["a7_g"].astype(np.float32))         # double -> float32
    x = v["a2_b"] / 32767.0                                                                 # short: /max, sRGB
    lin = np.where(x <= 0.04045, x / 12.92, ((np.maximum(x, 0.04045) + 0.055) / 1.055) ** 2.4)
    assert np.allclose(a["vertex_a2_color"][:, 2], lin, rtol=1e-6, atol=1e-9)
    # a polygon's face properties repeat over its triangles
    (tmp_path / "q.ply").write_text("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
                                    "property float z\nelement face 2\nproperty list uchar int vertex_indices\n"
                                    "property float f_0\nend_header\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3 7\n"
                                    "3 0 2 3 9\n")
    assert load_mesh(str(tmp_path / "q.ply"))["attributes"]["face_f"].ravel().tolist() == [7, 7, 9]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "ascii"])
def test_ply_attributes_match_mitsuba(tmp_path, binary):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    path, v = _attribute_ply(tmp_path / "a.ply", binary)
    a = load_mesh(path)["attributes"]
    p = mi.traverse(mi.load_dict({"type": "ply", "filename": path}))
    keys = [k for k in p.keys() if k.startswith(("vertex_", "face_"))
            and k not in ("vertex_positions", "vertex_normals", "vertex_texcoords")]
    assert sorted(keys) == sorted(a)
    floats = ("vertex_a6_color", "vertex_a7_color", "vertex_a1_color", "vertex_color", "face_k", "vertex_w",
              "vertex_p")
    for k in keys:
        ref = np.array(p[k], np.float32)
        assert a[k].size == ref.size, k
        if k in floats:       # float, double, uchar: exactly
            assert np.array_equal(a[k].ravel(), ref), k
        else:                 # normalised integers: Mitsuba's sRGB curve rounds differently (float32)
            assert np.allclose(a[k].ravel(), ref, rtol=5e-6, atol=1e-12), k


def _write_sphere(tmp_path, seed=0):
    """An icosphere PLY with vertex_color (3), vertex_w (1), face_c_color (3), face_k (1), and extra_x/y/z (3, no
    'color' in its name)."""
    rng = np.random.default_rng(seed)
    P, F = icosphere(1)
    V, N = len(P), len(F)
    vp = [("float", f"color_{c}", rng.uniform(0.1, 0.9, V)) for c in "012"] + \
         [("float", "w_0", rng.uniform(0.1, 0.9, V))] + [("float", f"extra_{c}", rng.uniform(0.1, 0.9, V))
                                                          for c in "xyz"]
    fp = [("float", f"c_{c}", rng.uniform(0.1, 0.9, N)) for c in "rgb"] + [("float", "k_0", rng.uniform(0.1, 0.9, N))]
    return write_ply(tmp_path / "sphere.ply", P, F, vp, fp)


def _sphere_scene(path, bsdf, variant=None, **shape):
    return parse_scene({"sensors": [camera([0, 0, 4], [0, 0, 0])], "bsdfs": {"mat": bsdf},
                        "shapes": [dict({"id": "s", "type": "ply", "filename": path, "bsdf": "mat"}, **shape)],
                        "emitters": [{"type": "constant"}]}, "scene.yaml", variant=variant)


def test_attribute_textures_described(tmp_path):
    """The attributes a shape's BSDF reads become its parameters <shape>.<name>; face attributes follow the
    triangles kept (degenerate ones are dropped)."""
    path = _write_sphere(tmp_path)
    ma = lambda n, **k: dict({"type": "mesh_attribute", "name": n}, **k)   # noqa: E731
    d = _sphere_scene(path, {"type": "blendbsdf", "weight": ma("face_k"),
                             "bsdf_0": {"type": "diffuse", "reflectance": ma("vertex_color", scale=0.5)},
                             "bsdf_1": {"type": "diffuse", "reflectance": ma("vertex_w")}})
    s = d.shapes[0]
    assert sorted(s.attributes) == ["face_k", "vertex_color", "vertex_w"]
    m = load_mesh(path)
    assert np.array_equal(s.attributes["vertex_color"], m["attributes"]["vertex_color"])
    assert [(r.name, r.scale, r.channels) for r in d.mesh_attributes] == [
        ("face_k", 1.0, 1), ("vertex_color", 0.5, 3), ("vertex_w", 1.0, 3)]
    assert d.bsdfs[-1].tex[0] == -2      # the blendbsdf's weight slot: attribute texture 0


REFUSALS = [
    ("missing", {"type": "diffuse", "reflectance": {"type": "mesh_attribute", "name": "vertex_nothere"}}, None,
     "shapes.s: the mesh has no attribute 'vertex_nothere' (read by bsdfs.mat.reflectance; it has: "),
    ("prefix", {"type": "diffuse", "reflectance": {"type": "mesh_attribute", "name": "color"}}, None,
     "bsdfs.mat.reflectance.name: a mesh attribute's name starts with 'vertex_' or 'face_'"),
    ("channels", {"type": "blendbsdf", "weight": {"type": "mesh_attribute", "name": "vertex_color"},
                  "bsdf_0": {"type": "diffuse"}, "bsdf_1": {"type": "diffuse"}}, None,
     "attribute 'vertex_color' has 3 channels; bsdfs.mat.weight reads 1"),
    ("scale", {"type": "diffuse", "reflectance": {"type": "mesh_attribute", "name": "vertex_color", "scale": "x"}},
     None, "bsdfs.mat.reflectance.scale: expected a number"),
    ("spectral", {"type": "diffuse", "reflectance": {"type": "mesh_attribute", "name": "vertex_extra"}}, "spectral",
     "attribute 'vertex_extra' has 3 channels but no 'color' in its name"),
    ("bumpmap", {"type": "bumpmap", "height": {"type": "mesh_attribute", "name": "vertex_w"},
                 "bsdf": {"type": "diffuse"}}, None,
     "bsdfs.mat.height: bumpmap differentiates its 'height' in uv: it cannot be a mesh attribute"),
]


@pytest.mark.parametrize("name,bsdf,variant,words", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_one_line(tmp_path, name, bsdf, variant, words):
    path = _write_sphere(tmp_path)
    with pytest.raises(ConfigError) as e:
        _sphere_scene(path, bsdf, variant)
    assert "\n" not in str(e.value) and words in str(e.value), str(e.value)
    _sphere_scene(path, {"type": "diffuse", "reflectance": {"type": "mesh_attribute", "name": "vertex_extra"}})


def test_refused_outside_bsdfs_and_in_xml(tmp_path):
    path = _write_sphere(tmp_path)
    with pytest.raises(ConfigError, match="shapes.s.emitter.radiance.type: a mesh_attribute texture feeds BSDF"):
        parse_scene({"shapes": [{"id": "s", "type": "ply", "filename": path, "emitter": {
            "type": "area", "radiance": {"type": "mesh_attribute", "name": "vertex_color"}}}]}, "scene.yaml")
    (tmp_path / "a.xml").write_text("""<scene version="3.0.0">
  <texture type="mesh_attribute" id="t"><string name="name" value="vertex_color"/><float name="sale" value="2"/>
  </texture>
</scene>""")
    import tirender
    with pytest.raises(ConfigError) as e:
        tirender.load_scene(str(tmp_path / "a.xml"))
    assert "line 2" in str(e.value) and "unsupported texture property 'sale' for type 'mesh_attribute'" in str(e.value)


# -- the lookup's adjoint against central differences (float64 children) ------------------------------------------
@ti.func
def _lookup_args(k, bary: ti.template(), lam: ti.template(), w: ti.template()):
    b = ti.Vector([bary[k, 0], bary[k, 1]], float)
    la = variants.spec(0.0)
    wk = variants.spec(0.0)
    for i in ti.static(range(variants.lanes())):
        la[i] = lam[k, i]
        wk[i] = w[k, i]
    return b, la, wk


@ti.kernel
def _k_eval(st: ti.template(), tid: ti.types.ndarray(), raw: ti.types.ndarray(), tri: ti.types.ndarray(),
            bary: ti.types.ndarray(), lam: ti.types.ndarray(), w: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(tid.shape[0]):
        b, la, wk = _lookup_args(k, bary, lam, w)
        if raw[k]:           # the raw lookup (eval_3, eval_1: slot_vec3, slot_float)
            v = mesh_attribute.eval_vec3(st, tid[k], tri[k], b)
            out[k] = v[0] * w[k, 0] + v[1] * w[k, 1] + v[2] * w[k, 2]
        else:                # a colour slot (eval: slot_rgb)
            out[k] = (mesh_attribute.eval_spectrum(st, tid[k], tri[k], b, la) * wk).sum()


@ti.kernel
def _k_adjoint(st: ti.template(), tid: ti.types.ndarray(), raw: ti.types.ndarray(), tri: ti.types.ndarray(),
               bary: ti.types.ndarray(), lam: ti.types.ndarray(), w: ti.types.ndarray()):
    for k in range(tid.shape[0]):
        b, la, wk = _lookup_args(k, bary, lam, w)
        if raw[k]:
            mesh_attribute.eval_vec3_adjoint(st, tid[k], tri[k], b, ti.Vector([w[k, 0], w[k, 1], w[k, 2]], float))
        else:
            mesh_attribute.eval_spectrum_adjoint(st, tid[k], tri[k], b, la, wk)


def checks():
    """(child, float64) Per attribute parameter: the adjoint of 60 random lookups (colour slots, the raw lookup of
    a scalar slot) against central differences of their primal, every value of the parameter."""
    import tirender
    from pathlib import Path
    from tirender.core.fixed_point import grad_scale_for
    from tirender.launch import read_gradients, reset_gradients
    tmp = Path(tempfile.mkdtemp())
    path = _write_sphere(tmp, seed=3)
    ma = lambda n, **k: dict({"type": "mesh_attribute", "name": n}, **k)   # noqa: E731
    cases = {"a.vertex_color": ma("vertex_color", scale=0.7), "b.face_c_color": ma("face_c_color"),
             "c.vertex_w": ma("vertex_w", scale=1.5)}
    shapes = [{"id": k.split(".")[0], "type": "ply", "filename": path, "bsdf": {"type": "diffuse", "reflectance": v}}
              for k, v in cases.items()]
    shapes.append({"id": "d", "type": "ply", "filename": path, "bsdf": {
        "type": "blendbsdf", "weight": ma("face_k"), "bsdf_0": {"type": "diffuse"}, "bsdf_1": {"type": "diffuse"}}})
    sc = tirender.load_scene({"sensors": [camera([0, 0, 4], [0, 0, 0])], "shapes": shapes,
                              "emitters": [{"type": "constant"}]})
    st = sc.bind()
    tri_shape = st.tri_shape.to_numpy()[:sc.n_triangles]
    tex = {sid: sc.desc.bsdfs[s.bsdf].tex[0] for sid, s in zip("abcd", sc.desc.shapes)}
    rng = np.random.default_rng(0)
    out = {}
    for si, (sid, pname) in enumerate(zip("abcd", ("a.vertex_color", "b.face_c_color", "c.vertex_w", "d.face_k"))):
        n = 60
        tri = rng.choice(np.flatnonzero(tri_shape == si), n).astype(np.int32)
        u = rng.random((n, 2))
        bary = np.where(u.sum(1, keepdims=True) > 1, 1 - u[:, ::-1], u)
        lam = rng.uniform(380, 800, (n, 4))
        w = rng.uniform(-1, 1, (n, 4))
        tid = np.full(n, tex[sid], np.int32)
        raw = np.full(n, int(sid == "d"), np.int32)          # the blendbsdf's weight: a scalar slot
        x0 = sc.params[pname].astype(np.float64)
        reset_gradients(st, grad_scale_for(10.0))
        _k_adjoint(st, tid, raw, tri, bary, lam, w)
        g = read_gradients(sc, st)[pname].astype(np.float64).ravel()

        def value(x):
            sc.write_param_device(pname, np.ascontiguousarray(x.ravel(), np.float64))
            o = np.zeros(n)
            _k_eval(st, tid, raw, tri, bary, lam, w, o)
            return o.sum()
        fd = np.zeros(x0.size)
        h = 1e-6
        for i in range(x0.size):
            e = np.zeros(x0.size)
            e[i] = h
            fd[i] = (value(x0.ravel() + e) - value(x0.ravel() - e)) / (2 * h)
        value(x0.ravel())
        out[pname] = {"max_rel_err": max_rel_err(g, fd), "cases": n, "nonzero": int(np.count_nonzero(fd)),
                      "variant": variants.name()}
    return out


@pytest.mark.parametrize("variant", ["rgb", "spectral"])
def test_lookup_adjoint_vs_central_differences_f64(variant):
    report = f64_child_report(__file__, f"--f64-{variant}")
    assert sorted(report) == ["a.vertex_color", "b.face_c_color", "c.vertex_w", "d.face_k"]
    for name, r in report.items():
        assert r["max_rel_err"] <= 1e-6 and r["nonzero"] > 10 and r["variant"] == variant, (name, r)


# -- renders ---------------------------------------------------------------------------------------------------------
def _ztest(img, ref, var, spp):
    """Mitsuba's per-pixel Z-test (its render regression test): the fraction of pixel channels whose p-value passes
    the Šidák-corrected 1 % level."""
    from math import erfc, sqrt
    z = np.abs(img - ref) * np.sqrt(spp / np.maximum(var, 1e-4))
    p = np.vectorize(erfc)(z / sqrt(2))
    alpha = 1 - (1 - 0.01) ** (1 / (img.shape[0] * img.shape[1]))
    return float(np.mean(p > alpha))


@pytest.mark.slow
@pytest.mark.skipif(not DATA, reason="Mitsuba's test data: set TIRENDER_MITSUBA_DATA")
@pytest.mark.parametrize("name", ["1_face", "3_face", "3_vertex"])
def test_mitsuba_mesh_attribute_scenes_ztest(name):
    """Mitsuba's tests/scenes/mesh_attributes (direct integrator, rgb) against its 32k-spp references, at 256 spp
    (Mitsuba's test renders 868 spp; the Z-test scales with the spp)."""
    import tirender
    from tirender.io.exr import read_exr
    d = os.path.join(DATA, "tests", "scenes", "mesh_attributes")
    m = np.array([[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169], [0.019334, 0.119193, 0.950227]])
    ref = read_exr(os.path.join(d, "refs", f"test_mesh_attributes_{name}_ref_rgb.exr")).astype(np.float64) @ m.T
    var = read_exr(os.path.join(d, "refs", f"test_mesh_attributes_{name}_ref_rgb_var.exr")).astype(np.float64) @ m.T
    sc = tirender.load_scene(os.path.join(d, f"test_mesh_attributes_{name}_direct.xml"),
                             defines={"spp": "256", "integrator": "direct"})
    img = tirender.render(sc, spp=256, seed=0, progress=False).astype(np.float64) @ m.T
    frac = _ztest(img, ref, var, 256)
    assert frac >= 0.9975, f"{name}: {frac:.4f} of the pixels pass; means {img.mean((0, 1))} vs {ref.mean((0, 1))}"


def _gradient_scene(path):
    ma = lambda n, **k: dict({"type": "mesh_attribute", "name": n}, **k)   # noqa: E731
    return {"integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
            "sensors": [camera([0, 0.5, 3.2], [0, 0, 0], fov=40, w=16, h=16)],
            "bsdfs": {"mat": {"type": "blendbsdf", "weight": ma("face_k"),
                              "bsdf_0": {"type": "diffuse", "reflectance": ma("vertex_color")},
                              "bsdf_1": {"type": "diffuse", "reflectance": ma("face_c_color", scale=0.8)}}},
            "shapes": [{"id": "ball", "type": "ply", "filename": path, "bsdf": "mat"},
                       {"id": "floor", "type": "rectangle", "to_world": [{"scale": 3}, {"rotate": {
                           "axis": [1, 0, 0], "angle": -90}}, {"translate": [0, -1, 0]}]}],
            "emitters": [{"type": "directional", "direction": [0.4, -1, -0.5], "irradiance": 3.0},
                         {"type": "constant", "radiance": 0.3}]}


@pytest.mark.slow
def test_prb_matches_fd_mesh_attributes(tmp_path):
    """Whole-render PRB gradients of a vertex colour, a face colour and a face weight (blendbsdf) against finite
    differences with correlated random numbers."""
    import tirender
    sc = tirender.load_scene(_gradient_scene(_write_sphere(tmp_path, seed=5)))
    s = sc.sensors[0]
    w = np.random.default_rng(0).uniform(0.2, 1.0, (s.height, s.width, 3)).astype(np.float32) / (s.width * s.height)
    rng = np.random.default_rng(2)
    for pname in ("ball.vertex_color", "ball.face_c_color", "ball.face_k"):
        u = rng.uniform(0.5, 1.0, sc.params[pname].shape).astype(np.float32)
        g, f = projected_gradients(sc, pname, u, w, 16, [101 + k for k in range(8)], [501 + k for k in range(8)], 0.02)
        assert_agree(g, f, pname)


@pytest.mark.parity
def test_parity_serialized_and_mesh_attributes(tmp_path):
    """One XML scene rendered by tirender and Mitsuba 3 (llvm_ad_rgb): two balls of one .serialized file (the first
    with its normals under a mirroring to_world, the second without normals: Mitsuba's vertex normals) and a PLY
    ball whose BSDF reads a vertex colour and a face weight; image means and RMSE within noise, PRB gradients of
    the two attributes."""
    mi = pytest.importorskip("mitsuba")
    import importlib.util
    here = os.path.dirname(__file__)
    spec = importlib.util.spec_from_file_location("parity_run", os.path.join(here, "..", "benchmarks", "parity",
                                                                              "run.py"))
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")
    try:
        mi.set_variant("llvm_ad_rgb")
    except Exception:
        pytest.skip("Mitsuba's llvm_ad_rgb variant needs libLLVM (DRJIT_LIBLLVM_PATH)")
    P, F = icosphere(2)
    write_serialized(tmp_path / "balls.serialized", [dict(positions=P * 0.5, faces=F, normals=P),
                                                     dict(positions=P, faces=F, uvs=P[:, :2] * 0.5 + 0.5)], 4)
    _write_sphere(tmp_path, seed=7)
    (tmp_path / "scene.xml").write_text("""<scene version="3.0.0">
  <default name="res" value="32"/><default name="spp" value="16"/>
  <integrator type="path"><integer name="max_depth" value="3"/></integrator>
  """ + xml_sensor("0, 1, 5", "0, 0, 0", "0, 1, 0", 55, "$res", "$res") + """
  <emitter type="constant"><rgb name="radiance" value="0.4"/></emitter>
  <emitter type="directional"><vector name="direction" value="0.5, -1, -0.6"/><rgb name="irradiance" value="2"/>
  </emitter>
  <texture type="mesh_attribute" id="vc"><string name="name" value="vertex_color"/></texture>
  <bsdf type="blendbsdf" id="attr">
    <texture type="mesh_attribute" name="weight"><string name="name" value="face_k"/></texture>
    <bsdf type="diffuse"><ref name="reflectance" id="vc"/></bsdf>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.1, 0.2, 0.6"/></bsdf>
  </bsdf>
  <shape type="serialized" id="ser0">
    <string name="filename" value="balls.serialized"/>
    <transform name="to_world"><scale x="-1.4" y="1.4" z="1.4"/><translate x="-1.6" z="-0.3"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.7, 0.5, 0.3"/></bsdf>
  </shape>
  <shape type="serialized" id="ser1">
    <string name="filename" value="balls.serialized"/><integer name="shape_index" value="1"/>
    <transform name="to_world"><scale value="0.7"/><translate y="0.2"/></transform>
    <bsdf type="diffuse"><rgb name="reflectance" value="0.3, 0.6, 0.4"/></bsdf>
  </shape>
  <shape type="ply" id="ply">
    <string name="filename" value="sphere.ply"/>
    <transform name="to_world"><scale value="0.7"/><translate x="1.6"/></transform>
    <ref id="attr"/>
  </shape>
  <shape type="rectangle">
    <transform name="to_world"><scale value="4"/><rotate x="1" angle="-90"/><translate y="-0.9"/></transform>
  </shape>
</scene>""")
    path, defines, params = str(tmp_path / "scene.xml"), {"res": "32", "spp": "16"}, ["ply.vertex_color",
                                                                                       "ply.face_k"]
    ti_ = run.tirender_run(path, defines, 16, 4, params, 8)
    assert "missing" not in ti_, ti_
    r = run.compare(ti_, run.mitsuba_run(path, defines, 16, 4, params, 8), "meshes")
    print(run.table([dict(r, name="meshes")], ""))
    assert all(p >= run.P_FAIL for p in r["p"]) and r["rmse_ratio"] <= 1.2, r
    for key, ma_, sa, mb, sb, z, p, ok in r["grads"]:
        assert ok and abs(ma_) > 3 * sa, f"{key}: tirender {ma_} ± {sa}, Mitsuba {mb} ± {sb} (z {z:+.2f}, p {p:.3g})"


if __name__ == "__main__" and any(a.startswith("--f64") for a in sys.argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tirender import variants
    variants.set_variant("spectral" if "--f64-spectral" in sys.argv else "rgb")
    print(json.dumps(checks()))
