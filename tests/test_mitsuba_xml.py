"""Mitsuba 3 XML import (tirender/scene/mitsuba_xml.py): the Cornell box as XML gives the same
scene description as configs/cbox.yaml and renders bit for bit as it (which tests/test_forward.py compares with the
Mitsuba reference); hostile
XML fails with one line naming the file, the line and the tag (exit 2)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tirender.api import describe
from tirender.config import load_config
from tirender.errors import ConfigError

HERE = os.path.dirname(__file__)
CBOX_XML = os.path.join(HERE, "data", "cbox.xml")
ROOT = os.path.join(HERE, "..")


def _write(tmp_path, body, name="scene.xml"):
    p = tmp_path / name
    p.write_text('<?xml version="1.0"?>\n<scene version="3.0.0">\n' + body + "\n</scene>\n")
    return str(p)


def _error(path, **kw):
    with pytest.raises(ConfigError) as e:
        describe(load_config(path, **kw))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


SHAPE = '<shape type="rectangle"><bsdf type="diffuse"/></shape>'


def test_cbox_xml_matches_yaml_description():
    d, integ = describe(load_config(CBOX_XML))
    d2, integ2 = describe(load_config(os.path.join(ROOT, "configs", "cbox.yaml")))
    assert integ == integ2
    assert [s.id for s in d.shapes] == [s.id for s in d2.shapes]
    for a, b in zip(d.shapes, d2.shapes):
        np.testing.assert_allclose(a.positions, b.positions, atol=1e-6)
        np.testing.assert_array_equal(a.faces, b.faces)
        assert a.bsdf == b.bsdf and a.emitter == b.emitter
    for a, b in zip(d.textures, d2.textures):
        assert a.name == b.name
        np.testing.assert_allclose(a.data, b.data)
    s, s2 = d.sensors[0], d2.sensors[0]
    np.testing.assert_allclose(s.to_world, s2.to_world, atol=1e-12)
    assert (s.width, s.height, s.tan_x, s.tan_y, s.filter, s.stddev) == \
        (s2.width, s2.height, s2.tan_x, s2.tan_y, s2.filter, s2.stddev)


def test_defines_override_defaults():
    cfg = load_config(CBOX_XML, defines={"spp": "16", "res": "32"})
    assert cfg["render"]["spp"] == 16
    assert cfg["scene"]["sensors"][0]["film"]["width"] == 32


def test_transforms_compose_in_mitsuba_order(tmp_path):
    p = _write(tmp_path, '<shape type="rectangle" id="r"><transform name="to_world">'
               '<scale value="2"/><rotate x="1" angle="90"/><translate x="1" y="2" z="3"/></transform>'
               '<bsdf type="diffuse"/></shape>')
    d, _ = describe(load_config(p))
    # scale first, then rotate about x by 90° (z=0 plane -> y=0 plane), then translate
    pos = d.shapes[0].positions
    np.testing.assert_allclose(pos[:, 1], 2.0, atol=1e-5)
    np.testing.assert_allclose(sorted(set(np.round(pos[:, 0], 4))), [-1.0, 3.0], atol=1e-5)


def test_sphere_center_radius_and_include_and_refs(tmp_path):
    (tmp_path / "mats.xml").write_text('<scene version="3.0.0"><bsdf type="roughconductor" id="metal">'
                                       '<float name="alpha" value="0.2"/><string name="material" value="Au"/>'
                                       '</bsdf></scene>')
    p = _write(tmp_path, '<include filename="mats.xml"/>'
               '<shape type="sphere" id="s"><point name="center" x="1" y="0" z="0"/><float name="radius" value="0.5"/>'
               '<ref id="metal"/></shape><emitter type="constant"><rgb name="radiance" value="1"/></emitter>')
    d, _ = describe(load_config(p))
    pos = d.shapes[0].positions
    np.testing.assert_allclose(pos.min(0), [0.5, -0.5, -0.5], atol=1e-3)
    np.testing.assert_allclose(pos.max(0), [1.5, 0.5, 0.5], atol=1e-3)
    assert any(t.name == "metal.roughness" and abs(t.data.ravel()[0] - 0.2) < 1e-7 for t in d.textures)


@pytest.mark.parametrize("body, where, words", [
    ('<shape type="rectangle">\n<bsdf type="nosuchbsdf"/></shape>', "line 4", "nosuchbsdf"),
    ('<shape type="ellipsoids"/>', "line 3", "unsupported shape type 'ellipsoids'"),
    ('<shape type="serialized"/>', "line 3", "a mesh needs a filename"),
    ('<shape type="rectangle"><ref id="nothere"/></shape>', "line 3", "nothere"),
    ('<include filename="missing.xml"/>', "line 3", "missing.xml"),
    (SHAPE + '\n<sensor type="perspective"><float name="fov" value="4x5"/></sensor>', "line 4", "bad number"),
    (SHAPE + '\n<sensor type="perspective"><float name="fov" value="$fov"/></sensor>', "line 4", "$fov"),
    ('<shape type="rectangle"><bsdf type="diffuse"><float name="nosuchkey" value="1"/></bsdf></shape>',
     "line 3", "nosuchkey"),
    ('<shape type="rectangle"><bsdf type="diffuse"></shape>', "line 3", "malformed XML"),
    (SHAPE + '<sensor type="perspective"><film type="hdrfilm"><rfilter type="mitchell"/></film></sensor>',
     "line 3", "mitchell"),
    ('<frobnicate/>', "line 3", "frobnicate"),
])
def test_hostile_xml_one_line(tmp_path, body, where, words):
    msg = _error(_write(tmp_path, body))
    assert "scene.xml" in msg and where in msg and words in msg, msg


def test_unsupported_tag_cli_exit_2(tmp_path):
    p = _write(tmp_path, SHAPE + '\n<emitter type="nosuchlight"/>')
    r = subprocess.run([sys.executable, "-m", "tirender", "render", p, "--spp", "1"], capture_output=True,
                       text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=os.path.abspath(ROOT)))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 4" in lines[0] and "<emitter" in lines[0] and "nosuchlight" in lines[0], r.stderr


@pytest.mark.slow
def test_cbox_xml_renders_like_the_yaml_cbox():
    """cbox.xml renders bit for bit as configs/cbox.yaml (same seed: the same image), which
    tests/test_forward.py compares with the Mitsuba 3 reference (1024 spp) at 256 spp."""
    import tirender
    yaml = tirender.render(tirender.load_scene(os.path.join(ROOT, "configs", "cbox.yaml")), spp=4, seed=3,
                           progress=False)
    img = tirender.render(tirender.load_scene(CBOX_XML), spp=4, seed=3, progress=False)
    assert img.max() > 0.0 and np.array_equal(img, yaml)


def test_mitsuba_parameter_names_resolve():
    """scene.params accepts mi.traverse keys (docs/mitsuba.md) as aliases; no Taichi needed."""
    from tirender.params import ParameterPool
    from tirender.scene.mitsuba_xml import param_aliases
    parity = os.path.join(ROOT, "benchmarks", "parity", "scenes")
    cases = {
        "conductor": {"floor.bsdf.alpha.value": "floor.roughness", "sky.radiance.value": "sky.radiance",
                      "light.emitter.radiance.value": "light.radiance",
                      "ball.bsdf.specular_reflectance.value": "ball.specular_reflectance"},
        "composites": {"floor.bsdf.bsdf_0.reflectance.value": "floor.bsdf_0.reflectance",
                       "floor.bsdf.weight.value": "floor.weight", "card.bsdf.reflectance": "card.bsdf.reflectance"},
        "heterogeneous": {"smoke.sigma_t.data": "smoke.density", "smoke.albedo.value.value": "smoke.albedo"},
        "homogeneous": {"fog.sigma_t.value.value": "fog.sigma_t", "fog.phase_function.g": "fog.g"},
    }
    for scene, names in cases.items():
        d, _ = describe(load_config(os.path.join(parity, scene + ".xml")))
        pool = ParameterPool()
        for t in d.textures:
            pool.add(t.name, t.data, t.lo, t.hi)
        pool.aliases = param_aliases(d)
        for mi_name, ti_name in names.items():
            assert pool.resolve(mi_name) == ti_name, (scene, mi_name)
            assert mi_name in pool
        assert "floor.nosuch.value" not in pool


def test_emitting_shape_without_bsdf_is_black(tmp_path):
    """Mitsuba gives an area-emitting shape without a BSDF a black diffuse BSDF (shape.cpp)."""
    p = _write(tmp_path, '<shape type="rectangle" id="lamp"><emitter type="area"><rgb name="radiance" value="1"/>'
               '</emitter></shape><shape type="rectangle" id="wall"/>')
    d, _ = describe(load_config(p))
    refl = {t.name: t.data.ravel() for t in d.textures}
    np.testing.assert_array_equal(refl["lamp.reflectance"], 0.0)
    np.testing.assert_allclose(refl["wall.reflectance"], 0.5)


@pytest.mark.parametrize("tex_name", ['name="arbitrary"', 'name="bumps"', ''])
def test_bumpmap_and_anisotropic_roughness(tmp_path, tex_name):
    """Mitsuba's bumpmap takes its one nested texture whatever its name (the height), its nested BSDF
    as `bsdf`; alpha_u / alpha_v become the anisotropic roughness parameters."""
    from PIL import Image
    Image.fromarray(np.arange(16, dtype=np.uint8).reshape(4, 4) * 16).save(tmp_path / "h.png")
    p = _write(tmp_path, '<shape type="rectangle" id="floor"><bsdf type="bumpmap">'
               f'<texture {tex_name} type="bitmap"><string name="filename" value="h.png"/>'
               '<boolean name="raw" value="true"/></texture><float name="scale" value="0.5"/>'
               '<bsdf type="roughconductor"><float name="alpha_u" value="0.05"/><float name="alpha_v" value="0.3"/>'
               '</bsdf></bsdf></shape><emitter type="constant"><rgb name="radiance" value="1"/></emitter>')
    d, _ = describe(load_config(p))
    names = {t.name: t for t in d.textures}
    assert names["floor.height"].data.shape == (4, 4, 3)
    assert abs(float(names["floor.bsdf.alpha_u"].data.ravel()[0]) - 0.05) < 1e-7
    assert abs(float(names["floor.bsdf.alpha_v"].data.ravel()[0]) - 0.3) < 1e-7
    assert [b.model.NAME for b in d.bsdfs] == ["roughconductor", "bumpmap"]


@pytest.mark.parametrize("raw", [None, "true", "false"])
def test_scalar_png_is_decoded_like_mitsuba(tmp_path, raw):
    """Mitsuba decodes an 8-bit roughness map from sRGB unless raw="true" (a 1-channel PNG too)."""
    from PIL import Image

    from tirender.io.images import from_srgb
    Image.fromarray(np.full((2, 2), 128, np.uint8)).save(tmp_path / "r.png")
    flag = "" if raw is None else f'<boolean name="raw" value="{raw}"/>'
    p = _write(tmp_path, '<shape type="rectangle" id="floor"><bsdf type="roughconductor">'
               f'<texture name="alpha" type="bitmap"><string name="filename" value="r.png"/>{flag}</texture>'
               '</bsdf></shape><emitter type="constant"><rgb name="radiance" value="1"/></emitter>')
    d, _ = describe(load_config(p))
    t = [t for t in d.textures if t.name.endswith("roughness") or t.name.endswith("alpha")][0]
    v = float(t.data.ravel()[0])
    want = 128 / 255 if raw == "true" else float(from_srgb(np.array([128 / 255], np.float32))[0])
    assert abs(v - want) < 1e-6, (t.name, v, want)


# sample counts Mitsuba 3.9.1's samplers actually take for a requested sample_count (their constructors round it)
SAMPLER_COUNTS = {
    "independent": {1: 1, 5: 5, 30: 30, 100: 100},
    "stratified": {1: 1, 5: 9, 16: 16, 30: 36, 100: 100},
    "multijitter": {1: 1, 5: 6, 16: 16, 30: 30, 100: 100},
    "orthogonal": {1: 4, 5: 9, 16: 25, 30: 49, 64: 121, 100: 121},
    "ldsampler": {1: 4, 5: 16, 16: 16, 30: 64, 64: 64, 100: 256},
}


def _sampler_scene(tmp_path, typ, n, extra=""):
    return _write(tmp_path, SHAPE + f'<sensor type="perspective"><sampler type="{typ}">'
                  f'<integer name="sample_count" value="{n}"/>{extra}</sampler></sensor>')


@pytest.mark.parametrize("typ", sorted(SAMPLER_COUNTS))
def test_every_mitsuba_sampler_loads_with_its_sample_count(tmp_path, typ):
    """Any Mitsuba sampler is accepted; render.spp is the count that sampler really takes (so a scene
    renders with as many samples as in Mitsuba), seed -> render.seed; bad counts are one line."""
    for n, want in SAMPLER_COUNTS[typ].items():
        cfg = load_config(_sampler_scene(tmp_path, typ, n, '<integer name="seed" value="7"/>'))
        assert cfg["render"]["spp"] == want and cfg["render"]["seed"] == 7, (typ, n)
    assert "sample_count" in _error(_sampler_scene(tmp_path, typ, 0))
    assert "nosuch" in _error(_sampler_scene(tmp_path, typ, 4, '<float name="nosuch" value="1"/>'))


def test_sampler_counts_match_mitsuba():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    mi.set_log_level(mi.LogLevel.Error)
    from tirender.scene.mitsuba_xml import SAMPLERS
    for typ, (rounded, _) in SAMPLERS.items():
        for n in range(1, 300):
            assert rounded(n) == mi.load_dict({"type": typ, "sample_count": n}).sample_count(), (typ, n)


def test_tent_rfilter(tmp_path):
    """<rfilter type="tent"> (radius, Mitsuba's default 1) -> the film's tent filter."""
    for extra, radius in (('<float name="radius" value="1.5"/>', 1.5), ("", 1.0)):
        path = _write(tmp_path, SHAPE + '<sensor type="perspective"><film type="hdrfilm"><rfilter type="tent">'
                      f'{extra}</rfilter></film></sensor>')
        s = describe(load_config(path))[0].sensors[0]
        assert (s.filter, s.radius) == ("tent", radius)
    bad = _write(tmp_path, SHAPE + '<sensor type="perspective"><film type="hdrfilm"><rfilter type="tent">'
                 '<float name="stddev" value="0.5"/></rfilter></film></sensor>')
    assert "stddev" in _error(bad)


def test_file_resolution_as_mitsubas(tmp_path):
    """<path> entries (wherever they stand at the root), include folders (an included file's own <include> found
    through the scene's folder, as Mitsuba's participating_media tests do), object files included inside an object,
    <default> inside an object and <alias>, as Mitsuba's parser reads them."""
    common = tmp_path / "common" / "meshes"
    common.mkdir(parents=True)
    (common / "plane.obj").write_text("v -1 -1 0\nv 1 -1 0\nv 1 1 0\nv -1 1 0\nf 1 2 3\nf 1 3 4\n")
    scenes = tmp_path / "scenes"
    (scenes / "include").mkdir(parents=True)
    (scenes / "include" / "preamble.xml").write_text('<scene version="2.0.0"><default name="res" value="24"/></scene>')
    (scenes / "include" / "base.xml").write_text(
        '<scene version="2.0.0"><include filename="include/preamble.xml"/>'
        '<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="$res"/>'
        '<integer name="height" value="$res"/></film></sensor></scene>')
    (scenes / "material.xml").write_text('<bsdf version="3.0.0" type="diffuse"><rgb name="reflectance" '
                                         'value="$albedo"/></bsdf>')
    path = _write(scenes, '''
        <include filename="include/base.xml"/>
        <shape type="obj" id="a">
            <default name="albedo" value="0.25"/>
            <string name="filename" value="meshes/plane.obj"/>
            <include filename="material.xml"/>
        </shape>
        <bsdf type="diffuse" id="red"><rgb name="reflectance" value="0.5, 0.1, 0.1"/></bsdf>
        <alias id="red" as="crimson"/>
        <shape type="obj" id="b">
            <string name="filename" value="meshes/plane.obj"/>
            <ref id="crimson"/>
        </shape>
        <path value="../common"/>''')
    cfg = load_config(path)
    d, _ = describe(cfg)
    assert d.sensors[0].width == 24
    assert len(d.shapes) == 2 and d.shapes[0].positions.shape == (4, 3)
    assert d.shapes[1].bsdf == d.bsdf_ids["red"]
    refl = {t.name: t.data.ravel() for t in d.textures}
    np.testing.assert_allclose(refl["a.reflectance"], 0.25)
    assert "<path>: folder not found" in _error(_write(scenes, '<path value="nowhere"/>' + SHAPE, "bad.xml"))
    assert "alias source id 'nope'" in _error(_write(scenes, '<alias id="nope" as="x"/>' + SHAPE, "bad2.xml"))
