"""Emitter sampling: the environment map's importance sampling is consistent with its pdf and its
radiance (weight = Le / pdf), and an environment map of constant radiance renders like the
constant environment (white furnace); the scene's choice of an emitter by Mitsuba's sampling_weight
(registry.select) in images, gradients and against Mitsuba 3."""
import numpy as np
import pytest
import taichi as ti

import tirender
from tirender.core.math import vec2, vec3
from tirender.emitters import registry
from tirender.emitters.base import env_record
from tirender.emitters.envmap import Envmap

from scenes import furnace_plane


@ti.kernel
def _sample_env(st: ti.template(), e: ti.i32, u: ti.types.ndarray(), d_out: ti.types.ndarray(),
                w_out: ti.types.ndarray(), pdf_out: ti.types.ndarray(), pdf_eval: ti.types.ndarray(),
                le_eval: ti.types.ndarray()):
    for k in range(u.shape[0]):
        ds = Envmap.sample_direction(st, e, vec3(0.0), vec2(u[k, 0], u[k, 1]))
        for c in ti.static(range(3)):
            d_out[k, c] = ds.d[c]
            w_out[k, c] = ds.weight_rgb[c]
            le_eval[k, c] = Envmap.eval(st, e, env_record(e, vec3(0.0), ds.d))[c]
        pdf_out[k] = ds.pdf
        pdf_eval[k] = Envmap.pdf_direction(st, e, vec3(0.0), env_record(e, vec3(0.0), ds.d))


def test_envmap_sampling_matches_pdf():
    rng = np.random.default_rng(0)
    sc = tirender.load_scene({"sensors": [{"film": {"width": 4, "height": 4}}],
                              "emitters": [{"id": "sky", "type": "envmap", "width": 32, "height": 16}]})
    sky = rng.uniform(0.05, 1.0, (16, 32, 3)).astype(np.float32)
    sky[3, 7] = 50.0
    sc.params["sky.radiance"] = sky
    st = sc.bind()
    n = 200000
    u = rng.uniform(0, 1, (n, 2)).astype(np.float32)
    d = np.zeros((n, 3), np.float32)
    w = np.zeros((n, 3), np.float32)
    le = np.zeros((n, 3), np.float32)
    pdf = np.zeros(n, np.float32)
    pdf2 = np.zeros(n, np.float32)
    _sample_env(st, 0, u, d, w, pdf, pdf2, le)
    ok = pdf > 0
    assert ok.mean() > 0.999
    # the density reported by sampling equals pdf_direction of the sampled direction (all but a few
    # samples within ~1e-4 of the poles, where f32 cannot recover sin θ from the direction)
    close = np.isclose(pdf[ok], pdf2[ok], rtol=2e-3)
    assert close.mean() > 0.999, close.mean()
    # weight = Le / pdf (again all but a few samples at the poles: Le is bilinear in θ there now)
    assert np.isclose(w[ok], le[ok] / pdf[ok, None], rtol=2e-3).all(1).mean() > 0.9999
    # histogram over (cos θ, φ) cells vs the pdf integrated over each cell (midpoint rule, 8x8 sub-cells)
    nc, nphi = 8, 16
    ct = d[:, 1]
    ph = np.arctan2(d[:, 0], -d[:, 2]) % (2 * np.pi)
    hist, _, _ = np.histogram2d(ct, ph, bins=[nc, nphi], range=[[-1, 1], [0, 2 * np.pi]])
    sub = 8
    cs = -1 + (np.arange(nc * sub) + 0.5) * (2 / (nc * sub))
    ps = (np.arange(nphi * sub) + 0.5) * (2 * np.pi / (nphi * sub))
    C, P = np.meshgrid(cs, ps, indexing="ij")
    S = np.sqrt(1 - C ** 2)
    dirs = np.stack([np.sin(P) * S, C, -np.cos(P) * S], -1).reshape(-1, 3).astype(np.float32)
    m = len(dirs)
    pd = np.zeros(m, np.float32)
    _pdf_dirs(st, 0, dirs, pd)
    dA = (2 / (nc * sub)) * (2 * np.pi / (nphi * sub))
    expected = pd.reshape(nc, sub, nphi, sub).sum(axis=(1, 3)) * dA * n
    assert abs(expected.sum() / n - 1) < 0.01
    big = expected > 50
    chi = ((hist[big] - expected[big]) ** 2 / expected[big]).sum() / big.sum()
    assert chi < 2.0, chi


@ti.kernel
def _pdf_dirs(st: ti.template(), e: ti.i32, d: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(d.shape[0]):
        out[k] = Envmap.pdf_direction(st, e, vec3(0.0), env_record(e, vec3(0.0), vec3(d[k, 0], d[k, 1], d[k, 2])))


def test_uniform_envmap_white_furnace():
    d = furnace_plane({"type": "diffuse", "reflectance": [0.8, 0.5, 0.2]}, tilt_deg=30.0)
    d["emitters"] = [{"type": "envmap", "width": 16, "height": 8, "radiance": 1.0}]
    img = tirender.render(tirender.load_scene(d), spp=32, seed=0)
    m = img.reshape(-1, 3).mean(0)
    assert np.allclose(m, [0.8, 0.5, 0.2], atol=0.01), m


@ti.kernel
def _eval_dirs(st: ti.template(), e: ti.i32, d: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(d.shape[0]):
        le = Envmap.eval(st, e, env_record(e, vec3(0.0), vec3(d[k, 0], d[k, 1], d[k, 2])))
        for c in ti.static(range(3)):
            out[k, c] = le[c]


def _mitsuba_envmap_eval(img, d):
    """Mitsuba 3 envmap.cpp eval_spectrum, in numpy: u = atan2(x, -z)/2π (columns texel-centred,
    periodic), v = acos(y)/π (rows corner-aligned: row j at v = j/(H-1), clamped), bilinear."""
    h, w = img.shape[:2]
    u = (np.arctan2(d[:, 0], -d[:, 2]) / (2 * np.pi)) % 1.0
    v = np.arccos(np.clip(d[:, 1], -1, 1)) / np.pi
    x = u * w - 0.5
    y = np.clip(v, 0, 1) * (h - 1)
    x0 = np.floor(x).astype(int)
    y0 = np.minimum(np.floor(y).astype(int), h - 2)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    x1 = (x0 + 1) % w
    x0 = x0 % w
    return ((1 - fy) * ((1 - fx) * img[y0, x0] + fx * img[y0, x1])
            + fy * ((1 - fx) * img[y0 + 1, x0] + fx * img[y0 + 1, x1]))


def test_envmap_lookup_follows_mitsuba_convention():
    """The zenith is row 0 exactly, the nadir row H-1, the horizon halfway (no blending of the top
    row with the bottom one); columns wrap; every direction matches Mitsuba's formula."""
    rng = np.random.default_rng(5)
    h, w = 6, 10
    sc = tirender.load_scene({"sensors": [{"film": {"width": 4, "height": 4}}],
                              "emitters": [{"id": "sky", "type": "envmap", "width": w, "height": h}]})
    img = rng.uniform(0.1, 4.0, (h, w, 3)).astype(np.float32)
    sc.params["sky.radiance"] = img
    st = sc.bind()
    d = rng.normal(size=(4000, 3))
    d = np.concatenate([d / np.linalg.norm(d, axis=1, keepdims=True),
                        [[0, 1, 0], [0, -1, 0], [0, 0, -1], [1e-4, 0.9999, 0.0]]]).astype(np.float32)
    out = np.zeros((len(d), 3), np.float32)
    _eval_dirs(st, 0, d, out)
    ref = _mitsuba_envmap_eval(img.astype(np.float64), d.astype(np.float64))
    assert np.allclose(out, ref, rtol=2e-4, atol=2e-4), np.abs(out - ref).max()
    # zenith: the mean of row 0 is not what a point lookup gives, but every column of row 0 blends
    # only with its neighbour in the same row
    assert np.allclose(out[-4], ref[-4], rtol=1e-5) and np.allclose(out[-3], ref[-3], rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 1), (1, 3), (4, 1)])
def test_tiny_envmap_is_padded_like_mitsuba(tmp_path, shape):
    """Maps smaller than 2 x 3 (W x H) are padded by edge replication (Mitsuba's Bitmap::pad_to): the last column
    repeated up to 2 columns, then the last row up to 3 rows; the values compared with the replicated ones and
    with the data of Mitsuba's envmap read from the same file (its one-column periodic halo on each side
    dropped)."""
    from tirender.io.exr import write_exr
    h, w = shape
    img = (np.arange(h * w * 3, dtype=np.float32).reshape(h, w, 3) + 1.0) * np.float32(0.25)
    path = str(tmp_path / "tiny.exr")
    write_exr(path, img)
    sc = tirender.load_scene({"sensors": [{"film": {"width": 4, "height": 4}}],
                              "emitters": [{"id": "sky", "type": "envmap", "filename": path}]})
    got = sc.params["sky.radiance"]
    rows = np.minimum(np.arange(max(h, 3)), h - 1)
    cols = np.minimum(np.arange(max(w, 2)), w - 1)
    assert np.array_equal(got, img[rows][:, cols]), got
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    ref = np.array(mi.traverse(mi.load_dict({"type": "envmap", "filename": path}))["data"])[:, 1:-1]
    assert np.array_equal(got, ref), (got, ref)


def test_beam_lights_its_cylinder_only():
    """A collimated beam through a disk aperture on a diffuse floor (direct light only): inside its
    footprint the floor's radiance is ρ E cos θ / π exactly (a delta emitter's NEE has no noise),
    outside it 0; the light tracer agrees; objects upstream of the aperture cast no shadow."""
    from scenes import camera
    a = np.array([0.3, -1.0, 0.2])
    a /= np.linalg.norm(a)
    d = {"integrator": {"type": "path", "max_depth": 2},
         "sensors": [camera([0, 2.5, 2.5], [0, 0, 0], fov=50, w=32, h=32)],
         "bsdfs": {"floor": {"type": "diffuse", "reflectance": 0.6}},
         "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor",
                     "to_world": [{"scale": 2}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]},
                    {"id": "blocker", "type": "rectangle", "bsdf": "floor",     # above the aperture: no shadow
                     "to_world": [{"scale": 0.8}, {"rotate": {"axis": [1, 0, 0], "angle": 90}}, {"translate": [-0.5, 3.0, -0.3]}]}],
         "emitters": [{"id": "beam", "type": "beam", "direction": a.tolist(), "origin": (-a * 1.5).tolist(),
                       "radius": 0.4, "irradiance": [2.0, 1.5, 1.0]}]}
    sc = tirender.load_scene(d)
    img = tirender.render(sc, spp=16, seed=0, progress=False)
    expect = 0.6 * np.array([2.0, 1.5, 1.0]) * abs(a[1]) / np.pi
    np.testing.assert_allclose(img.reshape(-1, 3).max(0), expect, rtol=1e-5)
    assert img.reshape(-1, 3).min() == 0.0
    lit = (img[..., 0] > 0.5 * expect[0]).mean()
    assert 0.02 < lit < 0.5
    pt = tirender.render(sc, spp=64, seed=1, integrator="ptracer", progress=False)
    assert abs(pt.mean() / img.mean() - 1) < 0.02


def test_beam_square_aperture():
    """aperture: square lights the square [-r, r]² of the frame coordinate_system(direction) (for -y:
    world x and z): a straight-down beam's footprint fills its bounding box (a disk fills π/4 of it)
    with side 2r, the irradiance unchanged inside; the light tracer (origins uniform on the square,
    weight E · 4r²) agrees."""
    from scenes import camera
    d = {"integrator": {"type": "path", "max_depth": 2},
         "sensors": [camera([0, 3.0, 0], [0, 0, 0], up=(0, 0, -1), fov=50, w=64, h=64)],
         "bsdfs": {"floor": {"type": "diffuse", "reflectance": 0.5}},
         "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "floor",
                     "to_world": [{"scale": 2}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]}],
         "emitters": [{"type": "beam", "direction": [0, -1, 0], "origin": [0.1, 2.0, -0.2], "radius": 0.4,
                       "aperture": "square", "irradiance": 2.0}]}
    fill = {}
    for ap in ("square", "disk"):
        d["emitters"][0]["aperture"] = ap
        sc = tirender.load_scene(d)
        img = tirender.render(sc, spp=4, seed=0, progress=False)[..., 0]
        np.testing.assert_allclose(img.max(), 0.5 * 2.0 / np.pi, rtol=1e-5)
        lit = img > 0.5 * img.max()
        ys, xs = np.nonzero(lit)
        side = 0.8 / (2 * 3.0 * np.tan(np.radians(25))) * 64          # 2r in pixels
        assert abs((xs.max() - xs.min() + 1) - side) <= 1.5 and abs((ys.max() - ys.min() + 1) - side) <= 1.5
        fill[ap] = lit.sum() / ((xs.max() - xs.min() + 1) * (ys.max() - ys.min() + 1))
        if ap == "square":
            pt = tirender.render(sc, spp=64, seed=1, integrator="ptracer", progress=False)[..., 0]
            assert abs(pt.mean() / img.mean() - 1) < 0.02
    assert fill["square"] > 0.88 and abs(fill["disk"] - np.pi / 4) < 0.06, fill   # (edge pixels half lit)


# ------------------------------------------------------------------------ the choice of an emitter (sampling_weight)
def _choice_scene(w_bulb=1.0, w_lamp=1.0, bulb=(5.0, 4.0, 3.0)):
    """A floor and a box lit by a point light (``bulb``) and a small area light facing down (``lamp``) with the
    given sampling weights (Mitsuba's sampling_weight: the probability of choosing each for NEE and light tracing)."""
    from scenes import FLOOR_BSDF, camera, floor
    return {"integrator": {"type": "path", "max_depth": 3, "rr_depth": 100},
            "sensors": [camera([0, 2.0, 3.0], [0, 0, 0], fov=45, w=24, h=24)],
            "bsdfs": {"floor": FLOOR_BSDF, "box": {"type": "diffuse", "reflectance": [0.3, 0.5, 0.7]}},
            "shapes": [floor(), {"id": "box", "type": "cube", "bsdf": "box",
                                 "to_world": [{"scale": 0.3}, {"translate": [0.2, 0.3, 0.0]}]},
                       {"id": "lamp", "type": "rectangle", "bsdf": "box",
                        "emitter": {"type": "area", "radiance": [4.0, 4.0, 5.0], "sampling_weight": w_lamp},
                        "to_world": [{"scale": 0.4}, {"rotate": {"axis": [1, 0, 0], "angle": 90}},
                                     {"translate": [-0.6, 1.2, 0.3]}]}],
            "emitters": [{"id": "bulb", "type": "point", "position": [0.5, 1.5, 1.0], "intensity": list(bulb),
                          "sampling_weight": w_bulb}]}


def _renders(d, k=8, spp=64, seed=0, integrator=None):
    sc = tirender.load_scene(d)
    return [tirender.render(sc, spp=spp, seed=seed + j, integrator=integrator, progress=False) for j in range(k)]


def test_sampling_weights_change_the_noise_not_the_image():
    """Weights (bulb 4, lamp 1) and (lamp 0: reached by BSDF sampling alone, its MIS weight then 1) render the
    image of equal weights (path tracer and light tracer); a point light of weight 0 is never chosen and adds
    nothing (as in Mitsuba), the image of the scene without its light; the unequal weights do change the image's
    noise (the choice is not uniform)."""
    from gradcheck_util import assert_images_agree
    ref = _renders(_choice_scene())
    weighted = _renders(_choice_scene(4.0, 1.0), seed=100)
    assert_images_agree(weighted, ref, name="weights 4:1")
    assert_images_agree(_renders(_choice_scene(1.0, 0.0), seed=200), ref, name="lamp weight 0")
    assert_images_agree(_renders(_choice_scene(4.0, 1.0), seed=300, integrator="ptracer"), ref,
                        name="light tracer, weights 4:1")
    assert_images_agree(_renders(_choice_scene(0.0, 1.0), seed=400), _renders(_choice_scene(bulb=(0, 0, 0))),
                        name="bulb weight 0")


@ti.kernel
def _select(st: ti.template(), em: ti.template(), u: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(u.shape[0]):
        e, inv, ur = registry.select(st, em, u[k])
        out[k, 0] = e
        out[k, 1] = inv
        out[k, 2] = ur
        out[k, 3] = registry.selection_pdf(st, em, e)


@pytest.mark.parametrize("weights", [(1.0, 3.0), (2.0, 2.0), (0.0, 1.0), (1.0, 0.0)])
def test_choice_follows_the_weights(weights):
    """registry.select: emitter e for u in its share of the weights' CDF (in the scene's emitter order), 1 / its
    probability, u rescaled to [0, 1) within the share (Mitsuba's sample_reuse_pmf); equal weights: the uniform
    choice (e = ⌊u n⌋, inv = n), as before sampling weights existed, in kernels without the CDF search (the
    emitter mask's WEIGHTED flag only where the weights differ)."""
    sc = tirender.load_scene(_choice_scene(*weights))
    order = [e.id for e in sc.desc.emitters]
    w = np.array([weights[0] if i == "bulb" else weights[1] for i in order])
    u = np.linspace(0.0, 1.0, 1001, endpoint=False).astype(np.float32)
    out = np.zeros((len(u), 4), np.float32)
    assert bool(sc.em_mask & registry.WEIGHTED) == (weights[0] != weights[1])
    _select(sc.bind(), sc.em_mask, u, out)
    cdf = np.concatenate([[0.0], np.cumsum(w / w.sum())])
    e = np.searchsorted(cdf, u, side="right") - 1
    p = w[e] / w.sum()
    np.testing.assert_array_equal(out[:, 0], e)
    np.testing.assert_allclose(out[:, 1], 1.0 / p, rtol=1e-6)
    np.testing.assert_allclose(out[:, 3], p, rtol=1e-6)
    np.testing.assert_allclose(out[:, 2], (u - cdf[e]) / p, atol=2e-6)


def test_sampling_weights_in_gradients_vs_finite_differences():
    """PRB under unequal weights (bulb 1, lamp 3): the floor's reflectance and the bulb's intensity against central
    differences with correlated random numbers (the choice's probability in Le / pdf of the replay)."""
    from gradcheck_util import assert_agree, image_weights, projected_gradients
    sc = tirender.load_scene(_choice_scene(1.0, 3.0))
    w = image_weights(sc)
    for pname, h in (("floor.reflectance", 0.02), ("bulb.intensity", 0.1)):
        u = np.random.default_rng(1).uniform(0.5, 1.0, np.shape(sc.params[pname]))
        g, f = projected_gradients(sc, pname, u, w, 16, range(4), range(4), h)
        assert_agree(g, f, pname)


@pytest.mark.parametrize("spec,key,words", [
    ({"sampling_weight": -1.0}, "emitters.bulb.sampling_weight", ">= 0"),
    ({"sampling_weight": "x"}, "emitters.bulb.sampling_weight", "number"),
])
def test_sampling_weight_refusals(spec, key, words):
    from tirender.errors import ConfigError
    d = _choice_scene()
    d["emitters"][0].update(spec)
    with pytest.raises(ConfigError) as e:
        tirender.load_scene(d)
    assert key in str(e.value) and words in str(e.value), str(e.value)
    with pytest.raises(ConfigError, match="every emitter has sampling_weight 0"):
        tirender.load_scene(_choice_scene(0.0, 0.0))


CHOICE_XML = """<scene version="3.0.0">
    <default name="spp" value="16"/>
    <integrator type="moment"><integrator type="path"><integer name="max_depth" value="3"/></integrator></integrator>
    """ + "{sensor}" + """
    <emitter type="point"><point name="position" x="1" y="-1" z="2.5"/><rgb name="intensity" value="6"/>
        <float name="sampling_weight" value="3"/></emitter>
    <emitter type="point"><point name="position" x="-1" y="0" z="2"/><rgb name="intensity" value="9"/>
        <float name="sampling_weight" value="0"/></emitter>
    <shape type="rectangle"><bsdf type="diffuse"><rgb name="reflectance" value="0.7, 0.6, 0.5"/></bsdf>
        <transform name="to_world"><scale value="3"/></transform></shape>
    <shape type="cube"><transform name="to_world"><scale value="0.4"/><rotate z="1" angle="30"/>
        <translate x="0.3" y="0.2" z="0.4"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.3, 0.5, 0.7"/></bsdf></shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.5"/><rotate x="1" angle="180"/><translate x="-0.8" z="2"/></transform>
        <emitter type="area"><rgb name="radiance" value="5"/><float name="sampling_weight" value="0.5"/></emitter>
    </shape>
</scene>
"""


def test_sampling_weights_match_mitsuba(tmp_path):
    """Mitsuba's sampling_weight in an XML scene (a point light of weight 3, one of weight 0 — never chosen: dark
    in both renderers —, an area light of weight 0.5) by Mitsuba's Z-test against Mitsuba 3's image (ztest_file's
    variant, the moment integrator's per-pixel variance at 8192 spp)."""
    import os
    import sys
    pytest.importorskip("mitsuba")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    import mitsuba_suite as suite
    from scenes import xml_sensor
    f = tmp_path / "choice.xml"
    f.write_text(CHOICE_XML.replace("{sensor}", xml_sensor("0, -4, 3", "0, 0, 0.4", "0, 0, 1", 45, 20, 16)))
    sc = tirender.load_scene(str(f))
    assert sorted(e.sampling_weight for e in sc.desc.emitters) == [0.0, 0.5, 3.0]
    ok, details = suite.ztest_file(f, ref_spp=8192, scene=sc)
    assert ok, details
