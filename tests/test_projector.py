"""The ``projector`` emitter (Mitsuba 3 src/emitters/projector.cpp) and the ``spot`` light's projection
``texture`` (src/emitters/spot.cpp): Le/pdf of sample_direction against Mitsuba's (scalar_rgb) at points
around the light (uv orientation, fov and fov_axis, aspect, scale, falloff), the light tracer's texture
sampling against its density, the hand-written adjoints against central differences in f64 (NEE records
and the light tracer's rays), whole-render gradients against finite differences (path tracer and light
tracer), input errors. Images and PRB gradients against Mitsuba 3: tests/test_parity.py (the parity
scene benchmarks/parity/scenes/projector.xml).

``python tests/test_projector.py --f64`` runs the f64 child by hand."""
import json
import os
import sys

import numpy as np
import pytest
import taichi as ti

import tirender
from gradcheck_util import assert_agree, f64_child_report, projected_gradients
from scenes import FLOOR_BSDF, camera, floor
from tirender.core.math import safe_div, vec2, vec3
from tirender.emitters import registry
from tirender.emitters.projector import Projector
from tirender.emitters.spot import Spot
from tirender.errors import ConfigError
from tirender.textures import tex_eval

HERE = os.path.dirname(os.path.abspath(__file__))


def _texture(h=4, w=6, seed=0, black=True):
    rng = np.random.default_rng(seed)
    img = rng.uniform(0.05, 1.0, (h, w, 3)).astype(np.float32)
    if black:
        img[1, 2] = 0.0                              # a black texel (sampled with the floor's probability)
    return img


def _scene(emitters, w=16, integrator="path"):
    """A diffuse floor (y = 0) and a back wall (z = -1) seen from the front, lit by `emitters`."""
    return {"integrator": {"type": integrator, "max_depth": 3, "rr_depth": 100},
            "sensors": [camera([0.2, 1.4, 3.2], [0, 0.3, 0], fov=45, w=w, h=w)],
            "bsdfs": {"floor": FLOOR_BSDF, "wall": {"type": "diffuse", "reflectance": [0.4, 0.5, 0.7]}},
            "shapes": [floor(), {"id": "wall", "type": "rectangle", "bsdf": "wall",
                        "to_world": [{"scale": 2}, {"translate": [0, 1, -1]}]}],
            "emitters": emitters}


def _projector(data, **kw):
    e = {"id": "proj", "type": "projector", "irradiance": {"type": "bitmap", "data": data}, "scale": 1.5,
         "fov": 40.0, "to_world": {"look_at": {"origin": [0.6, 2.0, 1.6], "target": [0, 0.2, -0.3], "up": [0, 1, 0]}}}
    e.update(kw)
    return e


def _spot(data):
    return {"id": "spot", "type": "spot", "intensity": [8.0, 7.0, 6.0], "cutoff_angle": 35.0, "beam_width": 20.0,
            "texture": {"type": "bitmap", "data": data},
            "to_world": {"look_at": {"origin": [-0.7, 1.8, 1.2], "target": [0.2, 0, -0.5], "up": [0, 1, 0]}}}


def _points(rng, n, row, spread=0.7):
    """Reference points in front of emitter row (most inside its cone or frustum)."""
    pos, axis = np.asarray(row.position), np.asarray(row.direction)
    return pos + axis * rng.uniform(0.3, 3.0, (n, 1)) + rng.normal(size=(n, 3)) * spread


# -- sample_direction against Mitsuba ---------------------------------------------------------------
@ti.kernel
def _sample(st: ti.template(), em: ti.template(), x: ti.types.ndarray(), out: ti.types.ndarray()):
    """Le/pdf (RGB) and uv of emitter sampling from the points x (one emitter in the scene)."""
    for k in range(x.shape[0]):
        ds = registry.sample_emitter(st, em, vec3(x[k, 0], x[k, 1], x[k, 2]), vec2(0.5), vec3(0.0))
        for c in ti.static(range(3)):
            out[k, c] = ds.weight[c]
        out[k, 3] = ds.uv[0]
        out[k, 4] = ds.uv[1]


_XML = """<scene version="3.0.0">
    <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="8"/>
        <integer name="height" value="8"/></film></sensor>
    <shape type="rectangle"/>
    {emitter}
</scene>"""
_TO_WORLD = ('<transform name="to_world"><lookat origin="0.3, 1.2, 0.8" target="-0.2, 0, -0.4" up="0.2, 1, 0"/>'
             '</transform>')
CASES = {
    "bitmap_fov_x": '<emitter type="projector"><texture name="irradiance" type="bitmap">'
                    '<string name="filename" value="tex.exr"/></texture><float name="fov" value="50"/>'
                    '<float name="scale" value="2.5"/>' + _TO_WORLD + '</emitter>',
    "bitmap_fov_y": '<emitter type="projector"><texture name="irradiance" type="bitmap">'
                    '<string name="filename" value="tex.exr"/><string name="filter_type" value="nearest"/>'
                    '</texture><float name="fov" value="35"/><string name="fov_axis" value="y"/>'
                    + _TO_WORLD + '</emitter>',
    "bitmap_focal_length": '<emitter type="projector"><texture name="irradiance" type="bitmap">'
                           '<string name="filename" value="tex.exr"/></texture>' + _TO_WORLD + '</emitter>',
    "rgb_diagonal": '<emitter type="projector"><rgb name="irradiance" value="0.3, 0.6, 0.9"/>'
                    '<float name="fov" value="70"/><string name="fov_axis" value="diagonal"/>' + _TO_WORLD
                    + '</emitter>',
    "spot_texture": '<emitter type="spot"><rgb name="intensity" value="4, 5, 6"/><texture name="texture" '
                    'type="bitmap"><string name="filename" value="tex.exr"/></texture><float name="cutoff_angle" '
                    'value="30"/><float name="beam_width" value="12"/>' + _TO_WORLD + '</emitter>',
}


@pytest.mark.parametrize("case", list(CASES))
def test_sample_direction_matches_mitsuba(tmp_path, case):
    """Le/pdf and uv of a NEE sample at 3000 points around the light equal Mitsuba's emitter
    sample_direction (scalar_rgb) to float precision; the points cover the lit and the dark parts."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    mi.Bitmap(_texture(4, 6, 1)).write(str(tmp_path / "tex.exr"))
    p = tmp_path / "s.xml"
    p.write_text(_XML.format(emitter=CASES[case]))
    sc = tirender.load_scene(str(p))
    st = sc.bind()
    x = _points(np.random.default_rng(2), 3000, sc.desc.emitters[0]).astype(np.float32)
    out = np.zeros((len(x), 5), np.float32)
    _sample(st, sc.em_mask, x, out)
    em = mi.load_file(str(p)).emitters()[0]
    ref = np.zeros((len(x), 5))
    for i, q in enumerate(x.tolist()):
        it = mi.Interaction3f()
        it.p = mi.Point3f(*q)
        ds, w = em.sample_direction(it, mi.Point2f(0.5, 0.5))
        ref[i, :3] = np.array(w)[:3]
        ref[i, 3:] = np.array(ds.uv)
    lit = ref[:, :3].max(1) > 0
    assert 0.2 < lit.mean() < 0.9, lit.mean()
    # relative error, floored at 1e-4 of the largest value (the falloff's f32 cancellation near the cutoff)
    err = np.abs(out[:, :3] - ref[:, :3]) / np.maximum(np.abs(ref[:, :3]), 1e-4 * np.abs(ref[:, :3]).max())
    # a point on the frustum's border or a falloff kink may fall on the other side of it in f32
    assert np.mean(err > 1e-4) < 2e-3 and np.mean(err > 1e-2) < 5e-4, (err.max(), np.mean(err > 1e-4))
    if case.startswith("bitmap"):          # Mitsuba's spot records no uv (its lookup's uv is internal)
        assert np.allclose(out[lit, 3:], ref[lit, 3:], atol=1e-4)


# -- the light tracer's texture sampling --------------------------------------------------------------
@ti.kernel
def _sample_uv(st: ti.template(), n: ti.i32, out: ti.types.ndarray()):
    """Stratified sample_texture draws (n x n strata, jittered by an integer hash: deterministic) of
    emitter 0: uv, pdf and E(uv) / pdf."""
    for k in range(n * n):
        h = ti.cast(k, ti.u32) * ti.u32(2654435761)
        jx = ti.cast(h >> ti.u32(8), float) / 16777216.0
        jy = ti.cast((h * ti.u32(2246822519)) >> ti.u32(8), float) / 16777216.0
        u = vec2((k % n + jx) / n, (k // n + jy) / n)
        uv, pdf = Projector.sample_texture(st, 0, u)
        e = tex_eval(st, st.em_tex[0, 0], uv)
        out[k, 0] = uv[0]
        out[k, 1] = uv[1]
        out[k, 2] = pdf
        out[k, 3] = e.dot(vec3(0.2, 0.7, 0.1)) / ti.max(pdf, 1e-30)


@ti.kernel
def _pdf_grid(st: ti.template(), out: ti.types.ndarray()):
    """pdf_texture at the centres of an H x W grid over the unit square (texture space)."""
    for j, i in ti.ndrange(out.shape[0], out.shape[1]):
        out[j, i] = Projector.pdf_texture(st, 0, vec2((i + 0.5) / out.shape[1], (j + 0.5) / out.shape[0]))


@pytest.mark.parametrize("tex", [{}, {"wrap_mode": "clamp"}, {"filter_type": "nearest"},
                                 {"to_uv": [{"scale": [-1, 1, 1]}, {"translate": [1, 0, 0]}]}],
                         ids=["bilinear_repeat", "bilinear_clamp", "nearest", "flipped_to_uv"])
def test_texture_sampling_matches_its_density(tmp_path, tex):
    """sample_texture (Mitsuba's bitmap sample_position: a texel by luminance, then a tent) draws uv
    with the density pdf_texture reports (histogram on a 4x finer grid than the texels, within 5
    binomial standard errors), and E[E(uv)/pdf] is the texture's integral (the light tracer's weight
    is unbiased, whatever to_uv permutes)."""
    data = str(tmp_path / "t.npy")
    img = _texture(4, 6, 3)
    np.save(data, img)
    proj = _projector(data)
    proj["irradiance"].update(tex)
    sc = tirender.load_scene(_scene([proj]))
    st = sc.bind()
    n = 400
    out = np.zeros((n * n, 4), np.float32)
    _sample_uv(st, n, out)
    gw, gh = 24, 16
    s = out[:, :2].astype(np.float64)
    if "to_uv" in tex:
        s[:, 0] = 1.0 - s[:, 0]
    hist = np.histogram2d(s[:, 1], s[:, 0], bins=[gh, gw], range=[[0, 1], [0, 1]])[0] / len(s)
    fine = np.zeros((gh * 8, gw * 8), np.float32)
    _pdf_grid(st, fine)
    expect = fine.reshape(gh, 8, gw, 8).mean((1, 3)) / (gw * gh)
    se = np.sqrt(expect * (1 - expect) / len(s))
    assert np.all(np.abs(hist - expect) <= 5 * se + 1e-3 * expect), np.abs((hist - expect) / (se + 1e-12)).max()
    lum = img @ np.array([0.2, 0.7, 0.1])
    assert abs(out[:, 3].mean() / _integral(img, tex) - 1) < 2e-3, (out[:, 3].mean(), _integral(img, tex))
    assert lum.min() == 0 and out[:, 2].min() > 0 and expect.min() > 0


def _integral(img, tex):
    """∫ <(0.2, 0.7, 0.1), E(s)> ds of the bilinear (or nearest) texture over the unit square."""
    h, w = img.shape[:2]
    n = 64
    c = (np.arange(n * w) + 0.5) / (n * w)
    r = (np.arange(n * h) + 0.5) / (n * h)
    lum = img @ np.array([0.2, 0.7, 0.1])
    if tex.get("filter_type") == "nearest":
        return lum.mean()
    x, y = c * w - 0.5, r * h - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = x - x0, y - y0
    wrap = (lambda i, m: np.clip(i, 0, m - 1)) if tex.get("wrap_mode") == "clamp" else (lambda i, m: i % m)
    L = lambda yy, xx: lum[wrap(yy, h)][:, wrap(xx, w)]   # noqa: E731
    v = ((1 - fy)[:, None] * ((1 - fx)[None] * L(y0, x0) + fx[None] * L(y0, x0 + 1))
         + fy[:, None] * ((1 - fx)[None] * L(y0 + 1, x0) + fx[None] * L(y0 + 1, x0 + 1)))
    return v.mean()


# -- hand-written adjoints vs central differences (f64) ---------------------------------------------
def checks():
    """{name: {max_rel_err, cases}}: ∂Σ<w, Le>/∂π by eval_adjoint against central differences of the
    primal, for NEE samples (sample_direction) and for the light tracer's rays (sample_ray's weight with
    the adjoint of eval at its uv, as ptracer.py's replay scatters it); runs under fp = f64."""
    import tempfile

    from tirender.launch import read_gradients, reset_gradients

    @ti.kernel
    def nee(st: ti.template(), em: ti.template(), x: ti.types.ndarray(), w: ti.types.ndarray(),
            out: ti.types.ndarray(), grad: ti.i32):
        for k in range(x.shape[0]):
            ds = registry.sample_emitter(st, em, vec3(x[k, 0], x[k, 1], x[k, 2]), vec2(0.5), vec3(0.0))
            wk = vec3(w[k, 0], w[k, 1], w[k, 2])
            out[k] = ds.le.dot(wk)
            if grad == 1:
                registry.eval_adjoint(st, em, ds, wk, vec3(0.0))

    @ti.kernel
    def ray(st: ti.template(), em: ti.template(), u: ti.types.ndarray(), w: ti.types.ndarray(),
            out: ti.types.ndarray(), grad: ti.i32):
        for k in range(u.shape[0]):
            e, o, d, n, uv, wt, pw = registry.sample_ray(st, em, 0.5, vec2(0.5), vec2(u[k, 0], u[k, 1]), vec3(0.0),
                                                         1.0, vec3(0.0))
            wk = vec3(w[k, 0], w[k, 1], w[k, 2])
            out[k] = wt.dot(wk)
            if grad == 1:
                q = registry.DirectionSample(p=o, n=n, d=-d, dist=1.0, uv=uv, emitter=e, scale=1.0, delta=0)
                le = registry.eval(st, em, q, vec3(0.0))
                registry.eval_adjoint(st, em, q, safe_div(wk * wt, le), vec3(0.0))

    rng = np.random.default_rng(5)
    tmp = tempfile.mkdtemp()
    data = os.path.join(tmp, "t.npy")
    np.save(data, _texture(3, 4, 7))
    res = {}
    for name, em_spec, params in (("projector", _projector(data), ("proj.irradiance", "proj.scale")),
                                  ("spot", _spot(data), ("spot.intensity", "spot.texture"))):
        sc = tirender.load_scene(_scene([em_spec]))
        st = sc.bind()
        row = sc.desc.emitters[0]
        for kind, kern, inputs in (("nee", nee, _points(rng, 64, row, 0.4)), ("ray", ray, rng.uniform(0, 1, (64, 2)))):
            w = rng.uniform(-1, 1, (len(inputs), 3))
            out = np.zeros(len(inputs))
            reset_gradients(st, 2.0 ** 36)
            kern(st, sc.em_mask, inputs, w, out, 1)
            grads = read_gradients(sc, st)
            base = st.pool.to_numpy().astype(np.float64)
            errs, n_cases = [], 0
            for pname in params:
                g = grads[pname].astype(np.float64).reshape(-1)
                off = sc.params.info(pname).offset
                for i in range(g.size):
                    f = []
                    for s in (1, -1):
                        p = base.copy()
                        p[off + i] += s * 1e-6
                        st.pool.from_numpy(p)
                        kern(st, sc.em_mask, inputs, w, out, 0)
                        f.append(out.sum())
                    fd = (f[0] - f[1]) / 2e-6
                    errs.append(abs(g[i] - fd) / max(abs(fd), 1e-3))
                    n_cases += abs(fd) > 1e-3
            st.pool.from_numpy(base)
            res[f"{name} {kind}"] = {"max_rel_err": max(errs), "cases": int(n_cases)}
    return res


def test_adjoints_vs_central_differences_f64():
    report = f64_child_report(__file__)
    assert set(report) == {"projector nee", "projector ray", "spot nee", "spot ray"}, report
    for name, r in report.items():
        assert r["cases"] >= 20, (name, r)
        assert r["max_rel_err"] <= 1e-6, (name, r)


# -- whole-render gradients against finite differences ------------------------------------------------
SEEDS_PRB, SEEDS_FD = range(1, 6), range(11, 16)


@pytest.mark.slow
@pytest.mark.parametrize("integrator", ["path", pytest.param("ptracer", marks=pytest.mark.extended)])
def test_render_gradients_match_fd(tmp_path, integrator):
    """PRB (the path tracer's NEE; the light tracer's detached light-path replay) against central
    differences with correlated random numbers, along random directions of each parameter: the
    projector's irradiance texels and scale, the spot's texture texels and intensity. (The light
    tracer's case compiles its gradient kernel, ~2 min cold: extended lane; the f64 check covers the
    adjoint of its rays, checks() "ray".)"""
    data = str(tmp_path / "t.npy")
    np.save(data, _texture(4, 6, 9, black=False))
    sc = tirender.load_scene(_scene([_projector(data), _spot(data)], w=12, integrator=integrator))
    wts = np.random.default_rng(4).uniform(0, 1, (12, 12, 3)).astype(np.float32)
    for pname, h in (("proj.irradiance", 0.05), ("proj.scale", 0.1), ("spot.texture", 0.05),
                     ("spot.intensity", 0.5)):
        u = np.random.default_rng(8).uniform(0.5, 1.0, sc.params[pname].shape)
        g, f = projected_gradients(sc, pname, u, wts, 16, SEEDS_PRB, SEEDS_FD, h)
        assert_agree(g, f, f"{pname} ({integrator})")


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("patch, key, msg", [
    ({"to_world": [{"scale": 2.0}]}, "emitters[0].to_world", "rotation and translation"),
    ({"focal_length": "35mm"}, "emitters[0].focal_length", "either 'fov' or 'focal_length'"),
    ({"fov_axis": "z"}, "emitters[0].fov_axis", "unknown value"),
    ({"fov": 180.0}, "emitters[0].fov", "must be"),
    ({"scale": -1.0}, "emitters[0].scale", "out of range"),
    ({"irradiance": {"type": "bitmap", "width": 4, "height": 2, "value": 1.0,
                     "to_uv": [{"scale": [0.5, 1, 1]}]}}, "emitters[0].irradiance.to_uv", "flip"),
])
def test_errors(tmp_path, patch, key, msg):
    data = str(tmp_path / "t.npy")
    np.save(data, _texture())
    e = _projector(data)
    e.update(patch)
    with pytest.raises(ConfigError) as err:
        tirender.load_scene(_scene([e]))
    s = str(err.value)
    assert "\n" not in s and msg in s and key.split(".")[-1] in s, s


def test_spot_texture_must_be_a_bitmap():
    e = _spot(None)
    e["texture"] = [0.5, 0.5, 0.5]
    with pytest.raises(ConfigError) as err:
        tirender.load_scene(_scene([e]))
    assert "spatially varying" in str(err.value) and "texture" in str(err.value)


def test_projector_constants(tmp_path):
    """fov along x of the texture's aspect; Mitsuba's default focal length (50 mm on the diagonal)."""
    data = str(tmp_path / "t.npy")
    np.save(data, _texture(4, 6))
    e = _projector(data)
    row = tirender.load_scene(_scene([e])).desc.emitters[0]
    t = np.tan(np.radians(20.0))
    assert np.allclose(row.floats, [t, t * 4 / 6, 4 * t * t * 4 / 6])
    del e["fov"]
    row = tirender.load_scene(_scene([e])).desc.emitters[0]
    diag = np.sqrt(36.0 ** 2 + 24.0 ** 2) / 50.0          # 2 tan(fov_diag / 2)
    tx = diag / 2 / np.sqrt(1 + (4 / 6) ** 2)
    assert np.allclose(row.floats[:2], [tx, tx * 4 / 6])
    assert Spot.NAME == "spot" and Projector.NAME == "projector"


if __name__ == "__main__" and "--f64" in sys.argv:
    import tirender.backend as backend
    backend.init("cpu", fp="f64")
    sys.path.insert(0, HERE)
    print(json.dumps(checks()))
