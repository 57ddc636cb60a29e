"""The ``spot`` emitter (Mitsuba 3 src/emitters/spot.cpp): its falloff curve against Mitsuba's
formula, the irradiance it gives a plane (E = I·falloff(θ)·cos θ'/r²), the intensity adjoint against
central differences in f64, input errors, and a render against Mitsuba 3 (scalar_rgb). The projection
texture: tests/test_projector.py."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import taichi as ti

import tirender
import tirender.backend as backend
from tirender.core.math import vec2, vec3
from tirender.emitters.spot import Spot, falloff_np
from tirender.errors import ConfigError

from scenes import camera

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _spot(pos, target, intensity, cutoff=30.0, beam=None, up=(0, 1, 0)):
    e = {"id": "lamp", "type": "spot", "intensity": intensity, "cutoff_angle": cutoff,
         "to_world": {"look_at": {"origin": list(pos), "target": list(target), "up": list(up)}}}
    if beam is not None:
        e["beam_width"] = beam
    return e


def _scene(emitter, w=24, rho=0.5):
    """A diffuse floor (z = 0, normal +z) seen from above (as tests/scenes.py's lit_plane)."""
    return {"integrator": {"type": "path", "max_depth": 2},
            "sensors": [camera([0.3, -0.2, 3.0], [0.3, -0.2, 0], up=[0, 1, 0], fov=60.0, w=w, h=w)],
            "bsdfs": {"floor": {"type": "diffuse", "reflectance": rho}},
            "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor", "to_world": [{"scale": 4.0}]}],
            "emitters": [emitter]}


@ti.kernel
def _sample(st: ti.template(), x: ti.types.ndarray(), w: ti.types.ndarray(), le: ti.types.ndarray(),
            out: ti.types.ndarray()):
    for k in range(x.shape[0]):
        ds = Spot.sample_direction(st, 0, vec3(x[k, 0], x[k, 1], x[k, 2]), vec2(0.5))
        for c in ti.static(range(3)):
            le[k, c] = ds.le_rgb[c]
        out[k] = ds.le_rgb.dot(vec3(w[k, 0], w[k, 1], w[k, 2]))


@ti.kernel
def _sample_adjoint(st: ti.template(), x: ti.types.ndarray(), w: ti.types.ndarray()):
    for k in range(x.shape[0]):
        ds = Spot.sample_direction(st, 0, vec3(x[k, 0], x[k, 1], x[k, 2]), vec2(0.5))
        Spot.eval_adjoint(st, 0, ds, vec3(w[k, 0], w[k, 1], w[k, 2]))


def _points(rng, n, pos):
    """Reference points around the light, most of them inside its cone (axis -z)."""
    d = rng.normal(size=(n, 3)) * [0.5, 0.5, 0.2] + [0, 0, -1.0]
    return (np.asarray(pos)[None] + d).astype(backend_dtype())


def backend_dtype():
    return np.float64 if backend._state.get("fp") == "f64" else np.float32


def test_falloff_curve_is_mitsubas():
    pos, cutoff, beam = (0.1, 0.2, 1.0), 35.0, 12.0
    sc = tirender.load_scene(_scene(_spot(pos, (0.1, 0.2, 0.0), [1.0, 2.0, 3.0], cutoff, beam)))
    st = sc.bind()
    rng = np.random.default_rng(0)
    x = _points(rng, 4000, pos)
    w = np.zeros((len(x), 3), x.dtype)
    le = np.zeros((len(x), 3), x.dtype)
    out = np.zeros(len(x), x.dtype)
    _sample(st, x, w, le, out)
    dv = np.asarray(pos)[None] - x.astype(np.float64)
    r2 = (dv ** 2).sum(1)
    cos_t = dv[:, 2] / np.sqrt(r2)                    # the axis is -z; the emitted direction is -dv
    fall = falloff_np(cos_t, cutoff, beam)
    assert (fall == 0).mean() > 0.05 and (fall == 1).mean() > 0.05 and ((fall > 0) & (fall < 1)).mean() > 0.2
    expected = fall[:, None] * np.array([1.0, 2.0, 3.0]) / r2[:, None]
    # cos θ in f32 near the two kinks: a sample may fall on the other side of one
    near = (np.abs(cos_t - np.cos(np.radians(cutoff))) < 1e-5) | (np.abs(cos_t - np.cos(np.radians(beam))) < 1e-5)
    assert np.allclose(le[~near], expected[~near], rtol=2e-4, atol=1e-6)
    # the curve itself: linear in θ between beam_width and cutoff_angle
    th = np.radians([0.0, 11.9, 12.0, 23.5, 34.9, 35.0, 60.0])
    assert np.allclose(falloff_np(np.cos(th), cutoff, beam),
                       [1, 1, 1, (35 - 23.5) / (35 - 12), (35 - 34.9) / (35 - 12), 0, 0], atol=1e-9)
    # Mitsuba's default beam width: cutoff · 3/4
    assert np.isclose(falloff_np(np.cos(np.radians(15.0)), 20.0, 15.0), 1.0)


def test_irradiance_on_a_plane():
    """Diffuse floor lit from above: L = ρ/π · I·falloff(θ)·cos θ'/r², averaged over each pixel's
    footprint (a box filter; 16x16 sub-pixel points), within 5 of its standard errors per pixel."""
    pos, intensity, rho, cutoff, beam, spp = np.array([0.1, 0.2, 1.0]), 5.0, 0.5, 40.0, 20.0, 64
    d = _scene(_spot(pos, pos - [0, 0, 1], intensity, cutoff, beam), rho=rho)
    img = tirender.render(tirender.load_scene(d), spp=spp, seed=0)[..., 0].astype(np.float64)
    cam = d["sensors"][0]
    wdt = cam["film"]["width"]
    o = np.array(cam["to_world"]["look_at"]["origin"], float)
    tx = np.tan(np.radians(cam["fov"]) / 2)
    sub = (np.arange(16) + 0.5) / 16
    i = (np.arange(wdt)[None, :, None, None] + sub[None, None, None, :])    # (1, W, 1, 16)
    j = (np.arange(wdt)[:, None, None, None] + sub[None, None, :, None])    # (H, 1, 16, 1)
    x = o[0] - o[2] * tx * (1 - 2 * i / wdt) + 0 * j
    y = o[1] + o[2] * tx * (1 - 2 * j / wdt) + 0 * i
    dist2 = (pos[0] - x) ** 2 + (pos[1] - y) ** 2 + pos[2] ** 2
    cos_t = pos[2] / np.sqrt(dist2)                   # axis straight down: θ = θ' (the plane's normal is +z)
    L = rho / np.pi * intensity * falloff_np(cos_t, cutoff, beam) * cos_t / dist2
    expected = L.mean(axis=(2, 3))
    se = L.std(axis=(2, 3)) / np.sqrt(spp)
    lit, dark = expected > 0, L.max(axis=(2, 3)) == 0
    assert lit.sum() > 50 and dark.sum() > 50
    assert np.all(img[dark] == 0)
    assert np.all(np.abs(img - expected) <= 5 * se + 2e-3 * expected), np.abs(img - expected).max()
    inner = L.min(axis=(2, 3)) > 0                      # pixels wholly inside the cone
    assert abs(img[inner].sum() / expected[inner].sum() - 1) < 0.005
    assert abs(img.sum() / expected.sum() - 1) < 0.01


def adjoint_check(h=1e-6, n=64):
    """Max relative error of ∂Σ<w, Le>/∂intensity (the hand-written adjoint) vs central differences
    of sample_direction's Le, per channel (the pool is set in full precision on the device)."""
    from tirender.launch import read_gradients, reset_gradients
    pos = (0.1, 0.2, 1.0)
    sc = tirender.load_scene(_scene(_spot(pos, (0.3, 0.1, 0.0), [2.0, 3.0, 4.0], 30.0, 20.0)))
    st = sc.bind()
    rng = np.random.default_rng(5)
    x = _points(rng, n, pos)
    w = rng.uniform(-1, 1, (n, 3)).astype(x.dtype)
    reset_gradients(st, 2.0 ** 36)
    _sample_adjoint(st, x, w)
    g = read_gradients(sc, st)["lamp.intensity"].astype(np.float64).reshape(-1)
    off = sc.params.info("lamp.intensity").offset
    base = st.pool.to_numpy().astype(np.float64)
    le = np.zeros((n, 3), x.dtype)
    out = np.zeros(n, x.dtype)
    errs = []
    for i in range(g.size):
        sums = []
        for s in (1, -1):
            p = base.copy()
            p[off + i] += s * h
            st.pool.from_numpy(p.astype(x.dtype))
            _sample(st, x, w, le, out)
            sums.append(out.astype(np.float64).sum())
        fd = (sums[0] - sums[1]) / (2 * h)
        errs.append(abs(g[i] - fd) / max(abs(fd), 1e-6))
    st.pool.from_numpy(base.astype(x.dtype))
    return {"max_rel_err": max(errs), "grad": g.tolist()}


def test_intensity_adjoint_vs_finite_differences_f64():
    env = dict(os.environ)
    env.pop("TIRENDER_FP", None)
    code = ("import sys, runpy; sys.path.insert(0, %r); sys.path.insert(0, %r); import tirender.backend as b; "
            "b.init('cpu', fp='f64'); sys.argv = [%r, '--adjoint-f64']; runpy.run_path(%r, run_name='__main__')"
            % (ROOT, os.path.dirname(__file__), __file__, os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(abs(v) > 1e-3 for v in rep["grad"]), rep
    assert rep["max_rel_err"] <= 1e-6, rep


@pytest.mark.parametrize("patch, key, msg", [
    ({"beam_width": 40.0}, "emitters[0].beam_width", "must be <= cutoff_angle"),
    ({"cutoff_angle": 0.0}, "emitters[0].cutoff_angle", "must be >"),
    ({"texture": [0.5, 0.5, 0.5]}, "emitters[0].texture", "spatially varying"),
    ({"intensity": {"type": "bitmap", "width": 4, "height": 4, "value": 1.0}}, "emitters[0].intensity",
     "not a bitmap"),
    ({"to_world": [{"scale": [1, 2, 1]}]}, "emitters[0].to_world", "uniform scale"),
])
def test_errors(patch, key, msg):
    e = _spot((0, 0, 1), (0, 0, 0), 1.0)
    e.update(patch)
    with pytest.raises(ConfigError) as err:
        tirender.load_scene(_scene(e))
    s = str(err.value)
    assert "\n" not in s and msg in s and key.split(".")[-1] in s, s


_XML = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="2"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="60"/>
        <transform name="to_world"><lookat origin="0.2, 2.0, 2.5" target="0, 0, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="24"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
        <sampler type="independent"><integer name="sample_count" value="{spp}"/>
            <integer name="seed" value="{seed}"/></sampler>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><scale value="3"/><rotate x="1" angle="-90"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.7, 0.5, 0.3"/></bsdf>
    </shape>
    <emitter type="spot" id="lamp">
        <transform name="to_world"><lookat origin="0.3, 1.5, 0.5" target="-0.2, 0, -0.3" up="0, 1, 0"/></transform>
        <rgb name="intensity" value="60, 50, 40"/>
        <float name="cutoff_angle" value="35"/><float name="beam_width" value="15"/>
    </emitter>
</scene>
"""


def test_matches_mitsuba(tmp_path):
    """Per-channel image means within 3 combined standard errors (seeds as the samples)."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    seeds, spp = 8, 16
    ti_means, mi_means = [], []
    for s in range(seeds):
        p = tmp_path / f"s{s}.xml"
        p.write_text(_XML.format(spp=spp, seed=s))
        ti_img = tirender.render(tirender.load_scene(str(p)), spp=spp, seed=s)
        ti_means.append(np.asarray(ti_img, np.float64).reshape(-1, 3).mean(0))
        mi_img = np.array(mi.render(mi.load_file(str(p)), spp=spp, seed=s), np.float64)[..., :3]
        mi_means.append(mi_img.reshape(-1, 3).mean(0))
    a, b = np.array(ti_means), np.array(mi_means)
    se = np.sqrt(a.var(0, ddof=1) / seeds + b.var(0, ddof=1) / seeds)
    z = (a.mean(0) - b.mean(0)) / np.maximum(se, 1e-12)
    print("tirender", a.mean(0), "Mitsuba", b.mean(0), "z", z)
    assert np.all(b.mean(0) > 0.01)
    assert np.all(np.abs(z) <= 3), (a.mean(0), b.mean(0), z)
    assert np.allclose(a.mean(0), b.mean(0), rtol=0.02), (a.mean(0), b.mean(0))


if __name__ == "__main__":
    if "--adjoint-f64" in sys.argv:
        from tirender.core.math import vec3 as _v
        assert _v.dtype == ti.f64, "tirender was imported before ti.init(default_fp=f64)"
        print(json.dumps(adjoint_check()))


def test_xml_import(tmp_path):
    """<emitter type="spot">: intensity, cutoff_angle, beam_width and to_world reach the model."""
    from tirender.scene.mitsuba_xml import load_xml
    p = tmp_path / "s.xml"
    p.write_text(_XML.format(spp=4, seed=0))
    spec = [e for e in load_xml(str(p))["scene"]["emitters"] if e["type"] == "spot"][0]
    assert spec["id"] == "lamp" and spec["cutoff_angle"] == 35 and spec["beam_width"] == 15
    assert np.allclose(spec["intensity"], [60, 50, 40])
    m = np.asarray(spec["to_world"], float)
    axis = np.array([-0.5, -1.5, -0.8]) / np.linalg.norm([-0.5, -1.5, -0.8])
    assert np.allclose(m[:3, 3], [0.3, 1.5, 0.5]) and np.allclose(m[:3, 2], axis)
    row = tirender.load_scene(str(p)).desc.emitters[0]
    assert np.allclose(row.position, [0.3, 1.5, 0.5]) and np.allclose(row.direction, axis)
    assert np.allclose(row.floats[:3], [np.cos(np.radians(35)), np.cos(np.radians(15)), np.radians(35)])
