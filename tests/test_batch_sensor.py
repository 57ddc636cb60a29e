"""Mitsuba's batch sensor (sensors/batch.py): several sensors side by side in one film, in YAML and Mitsuba XML;
its image against its children rendered alone and against Mitsuba 3; gradients through it; its errors."""
import os
import sys

import numpy as np
import pytest

import tirender
from tirender.errors import ConfigError

sys.path.insert(0, os.path.dirname(__file__))
from scenes import FLOOR_BSDF, camera, cornell_like  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import mitsuba_suite as suite  # noqa: E402

VIEWS = [([0.0, 0.2, 3.0], [0.0, 0.0, 0.0]), ([2.5, 1.0, 1.5], [0.0, -0.2, 0.0])]


def _scene(n=2, w=24, h=24):
    sc = cornell_like(w=w)
    kids = [{k: v for k, v in camera(o, t, w=w, h=h).items() if k != "film"} for o, t in VIEWS[:n]]
    sc["sensors"] = [{"type": "batch", "id": "both", "film": {"width": n * w, "height": h, "filter": {"type": "box"}},
                      "sensors": kids}]
    return sc, [dict(k, film={"width": w, "height": h, "filter": {"type": "box"}}) for k in kids]


def test_a_batch_of_one_is_its_sensor_and_of_two_its_sensors_side_by_side():
    """One child: bit for bit the child rendered alone (the same pixels, the same random numbers). Two children:
    each half of the film is its child's image (the same means within noise; the streams differ by pixel index)."""
    sc1, kids = _scene(n=1)
    a = tirender.render(tirender.load_scene(sc1), spp=4, seed=3, progress=False)
    b = tirender.render(tirender.load_scene(dict(sc1, sensors=kids)), spp=4, seed=3, progress=False)
    assert np.array_equal(a, b)
    sc2, kids = _scene(n=2)
    scene = tirender.load_scene(sc2)
    assert [s.type for s in scene.sensors] == ["batch"] and scene.sensors[0].width == 48
    assert "both_1.to_world" in scene.sensor_params       # the children's parameters, by their ids
    m0 = [np.array(c.to_world) for c in scene.sensors[0].children]
    shift = np.eye(4)
    shift[:3, 3] = [0.5, 0.0, 0.0]
    scene.set_sensor_transform(0, shift @ m0[0])          # a batch moves as a rig (the viewer's orbit)
    assert all(np.allclose(c.to_world, shift @ m) for c, m in zip(scene.sensors[0].children, m0))
    scene.set_sensor_transform(0, m0[0])
    img = tirender.render(scene, spp=256, seed=1, progress=False)
    alone = tirender.load_scene(dict(sc2, sensors=kids))
    for k in range(2):
        ref = tirender.render(alone, spp=256, seed=2, sensor=k, progress=False)
        half = img[:, 24 * k:24 * (k + 1)]
        assert abs(half.mean() - ref.mean()) < 0.02 * ref.mean(), (k, half.mean(), ref.mean())
        # pixel by pixel within the noise of two 256-spp images (a sensor mixed up would differ by far more)
        assert np.abs(half - ref).mean() < 0.1 * ref.mean()


def test_batch_in_mitsuba_xml_and_its_errors(tmp_path):
    xml = """<scene version="3.0.0">
  <sensor type="batch" id="pair">
    <sensor type="perspective"><float name="fov" value="45"/>
      <transform name="to_world"><lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/></transform></sensor>
    <sensor type="perspective"><float name="fov" value="45"/>
      <transform name="to_world"><lookat origin="4, 0, 0" target="0, 0, 0" up="0, 1, 0"/></transform></sensor>
    <film type="hdrfilm"><integer name="width" value="{w}"/><integer name="height" value="8"/>
      <boolean name="sample_border" value="true"/><rfilter type="box"/></film>
    <sampler type="independent"><integer name="sample_count" value="4"/></sampler>
  </sensor>
  <shape type="sphere"><emitter type="area"><rgb name="radiance" value="1"/></emitter></shape>
</scene>"""
    f = tmp_path / "b.xml"
    f.write_text(xml.replace("{w}", "16"))
    sc = tirender.load_scene(str(f))
    assert sc.sensors[0].type == "batch" and [c.width for c in sc.sensors[0].children] == [8, 8]
    f.write_text(xml.replace("{w}", "15"))
    with pytest.raises(ConfigError, match=r"width \(15\) must be divisible by the number of child sensors \(2\)"):
        tirender.load_scene(str(f))
    with pytest.raises(ConfigError, match="do not nest"):
        tirender.load_scene({"sensors": [{"type": "batch", "sensors": [{"type": "batch", "sensors": [{}]}]}]})
    with pytest.raises(ConfigError, match="non-empty list of child sensors"):
        tirender.load_scene({"sensors": [{"type": "batch", "sensors": []}]})
    scene = tirender.load_scene(dict(_scene()[0], integrator={"type": "ptracer"}))
    with pytest.raises(ConfigError, match="particle tracer"):
        tirender.render(scene, spp=1, progress=False)


@pytest.mark.slow
def test_batch_matches_mitsuba(tmp_path):
    """Mitsuba's Z-test of a batch of two views (a floor, a sphere, an area light) against Mitsuba 3's image."""
    pytest.importorskip("mitsuba")
    xml = f"""<scene version="3.0.0">
  <default name="spp" value="64"/>
  <integrator type="moment"><integrator type="path"><integer name="max_depth" value="3"/></integrator></integrator>
  <sensor type="batch">
    <sensor type="perspective"><float name="fov" value="50"/>
      <transform name="to_world"><lookat origin="0, 2, 4" target="0, 0, 0" up="0, 1, 0"/></transform></sensor>
    <sensor type="perspective"><float name="fov" value="35"/>
      <transform name="to_world"><lookat origin="3, 1, -2" target="0, 0.3, 0" up="0, 1, 0"/></transform></sensor>
    <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="16"/>
      <rfilter type="box"/></film>
    <sampler type="independent"><integer name="sample_count" value="$spp"/></sampler>
  </sensor>
  <bsdf type="diffuse" id="f"><rgb name="reflectance" value="{', '.join(map(str, FLOOR_BSDF['reflectance']))}"/></bsdf>
  <shape type="rectangle"><transform name="to_world"><rotate x="1" angle="-90"/><scale value="2"/></transform>
    <ref id="f"/></shape>
  <shape type="sphere"><point name="center" value="0, 0.5, 0"/><float name="radius" value="0.5"/><ref id="f"/></shape>
  <shape type="rectangle"><transform name="to_world"><scale value="0.4"/><rotate x="1" angle="90"/>
    <translate value="0.5, 2, 0.3"/></transform><emitter type="area"><rgb name="radiance" value="12"/></emitter></shape>
</scene>"""
    f = tmp_path / "batch.xml"
    f.write_text(xml)
    ok, d = suite.ztest_file(f, spp=256)
    assert ok, d


@pytest.mark.slow
def test_geometry_gradient_through_a_batch():
    """Primary visibility through a batch (the boundary term projects each edge into each child's columns): a
    differentiable cube seen by both children (the two halves weighted differently), edge sampling against
    central differences. (A flat-shaded cube: a smooth-shaded mesh's silhouettes carry the bias of
    docs/geometry.md's limits, with or without a batch.)"""
    from gradcheck_util import assert_agree, projected_gradients
    sc = {"integrator": {"type": "path", "max_depth": 2},
          "sensors": [{"type": "batch", "film": {"width": 48, "height": 24, "filter": {"type": "box"}},
                       "sensors": [{k: v for k, v in camera(o, [0, 0, 0], fov=30).items() if k != "film"}
                                   for o in ([0, 0, 4], [-4, 0, 0.5])]}],
          "emitters": [{"type": "constant", "radiance": 1.0}],
          "shapes": [{"id": "obj", "type": "cube", "differentiable": True, "bsdf": {"type": "diffuse", "reflectance": 0.2},
                      "to_world": [{"scale": 0.5}, {"rotate": {"axis": [1, 1, 0], "angle": 30}}]}]}
    scene = tirender.load_scene(sc)
    wts = np.ones((24, 48, 3), np.float32)
    wts[:, 24:] = 2.0                                                    # the two halves weighted differently
    u = np.array([1.0, 0.3, -0.5])
    g, _ = projected_gradients(scene, "obj.translation", u, wts, 16, list(range(6)), [], 1e-2, method="prb_attached")
    _, fd = projected_gradients(scene, "obj.translation", u, wts, 256, [], list(range(100, 108)), 1e-2)
    assert_agree(g, fd, "obj.translation through a batch")


def test_optimize_sensors_replace_the_scenes(tmp_path):
    """optimize.sensors: the optimisation renders through these sensors, the scene file stays as written."""
    from tirender.config import load_config, optimization_scene
    sc, _ = _scene()
    cfg = load_config({"scene": dict(sc, sensors=[camera([0, 0, 3], [0, 0, 0])]),
                       "optimize": {"sensors": sc["sensors"], "params": {}}})
    assert cfg["scene"]["sensors"][0]["type"] == "perspective"     # render / view: the scene's own
    opt = optimization_scene(cfg)
    assert opt["scene"]["sensors"][0]["type"] == "batch" and optimization_scene(opt) is opt
    with pytest.raises(ConfigError, match="non-empty list of sensors"):
        optimization_scene(load_config({"scene": sc, "optimize": {"sensors": {}}}))
