"""Spectra given as data — Mitsuba 3's ``<spectrum>`` forms (wavelength:value lists, files, the ``regular``,
``irregular``, ``uniform``, ``srgb``, ``d65`` plugins; tirender/spectra/sampled.py) — with Mitsuba's meaning in
each variant, against Mitsuba 3:

* rgb and mono: the value tirender stores equals what Mitsuba's scalar_rgb / llvm_ad_mono textures hold, per role
  (a BSDF colour, an emitter, a conductor's η and k, a medium's coefficients, a constvolume), float rounding apart;
* spectral: the values the kernels read at given wavelengths (BSDF slot, emitter, medium, conductor) equal
  Mitsuba's scalar_spectral ``regular`` / ``irregular`` eval; a small scene's image matches Mitsuba's in rgb and
  in spectral within noise (benchmarks/parity/scenes/spectra.xml);
* the sampled spectrum's adjoint against float64 central differences, and a whole render's gradient of the
  ``values`` against central differences with correlated random numbers (spectral).

Spectral renders run in a child process (a process holds one variant): ``python tests/test_sampled_spectra.py
--child``; the float64 checks in another (``--f64``)."""
import os
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from child_util import run_child  # noqa: E402
from gradcheck_util import central_differences, max_rel_err  # noqa: E402

PARITY = os.path.join(ROOT, "benchmarks", "parity", "scenes", "spectra.xml")
PARITY_DEFINES = {"res": "24", "spp": "16"}
LLVM = os.environ.get("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")

# wavelength lists exercising the reduction: smooth, spiky (out of gamut: clamped), a regular one, one reaching
# outside 360–830 nm, one on a narrow range
LISTS = ["400:0.2, 500:0.5, 650:0.9",
         "400:0.78, 500:0.78, 600:0.3, 700:0.1",
         "380:0.0, 450:0.95, 470:0.0, 830:0.0",
         "300:0.5, 900:0.25",
         "520:0.4, 530:0.9, 541:0.1"]
EMITTED = ["400:0, 500:8, 600:15.6, 700:18.4", "400:3, 450:0, 700:5", "380:0.0, 450:9.5, 470:0.0, 830:0.0"]
ETA_K = ("400:0.2, 500:0.9, 700:1.4", "400:3.0, 600:2.5, 800:4.5")
# the same wavelengths in the spectral child: inside, at the ends and outside the lists' ranges
LAMBDAS = [[380.0, 400.0, 455.5, 650.0], [499.9, 500.0, 700.0, 701.0], [361.0, 523.7, 541.0, 829.0]]


def _scene_xml(refl, rad, sigma, const_sigma, albedo, eta, k, uniform_rad=3.0, spd=None):
    """One scene holding each role once: BSDF colour, emitter, conductor η/k, medium σt and albedo, a constvolume."""
    spd_el = f'<spectrum name="specular_reflectance" filename="{spd}"/>' if spd else ""
    return textwrap.dedent(f"""\
        <scene version="3.0.0">
            <bsdf type="diffuse" id="r"><spectrum name="reflectance" value="{refl}"/></bsdf>
            <bsdf type="conductor" id="c"><spectrum name="eta" value="{eta}"/><spectrum name="k" value="{k}"/>
                {spd_el}</bsdf>
            <bsdf type="diffuse" id="g"><spectrum name="reflectance" value="0.25"/></bsdf>
            <medium type="homogeneous" id="m"><spectrum name="sigma_t" value="{sigma}"/>
                <spectrum name="albedo" value="{albedo}"/></medium>
            <medium type="homogeneous" id="cv"><volume name="sigma_t" type="constvolume">
                <spectrum name="value" value="{const_sigma}"/></volume></medium>
            <shape type="rectangle" id="l">
                <emitter type="area"><spectrum name="radiance" value="{rad}"/></emitter></shape>
            <shape type="rectangle" id="u">
                <emitter type="area"><spectrum name="radiance" value="{uniform_rad}"/></emitter></shape>
            <shape type="cube" id="box"><ref name="bsdf" id="r"/><ref name="interior" id="m"/></shape>
            <shape type="cube" id="box2"><ref name="bsdf" id="c"/><ref name="interior" id="cv"/></shape>
            <shape type="cube" id="box3"><ref name="bsdf" id="g"/></shape>
        </scene>""")


def _tirender_values(xml, variant, tmp_path):
    """{role: value} as tirender stores it for `variant` (parsed only: no kernels)."""
    from tirender.config import load_config
    from tirender.scene.description import parse_scene
    f = tmp_path / "s.xml"
    f.write_text(xml)
    d = parse_scene(load_config(str(f))["scene"], str(f), variant=variant)
    tex = {t.name: t.data.reshape(-1).astype(np.float64) for t in d.textures}
    c = next(b for b in d.bsdfs if b.id == "c")
    return {"reflectance": tex["r.reflectance"], "radiance": tex["l.radiance"], "uniform": tex["u.radiance"],
            "grey": tex["g.reflectance"], "sigma_t": tex["m.sigma_t"], "albedo": tex["m.albedo"],
            "constvolume": tex["cv.sigma_t"], "eta": np.array(c.floats[0:3]), "k": np.array(c.floats[3:6]),
            "specular": tex["c.specular_reflectance"]}, d


def _mitsuba_values(mi, xml):
    import drjit as dr
    p = mi.traverse(mi.load_string(xml))

    def v(key):
        return np.array(dr.detach(p[key]), np.float64).reshape(-1)
    return {"reflectance": v("r.reflectance.value"), "radiance": v("l.emitter.radiance.value"),
            "uniform": v("u.emitter.radiance.value"), "grey": v("g.reflectance.value"),
            "sigma_t": v("m.sigma_t.value.value"), "albedo": v("m.albedo.value.value"),
            "constvolume": v("cv.sigma_t.value.value"), "eta": v("c.eta.value"), "k": v("c.k.value"),
            "specular": v("c.specular_reflectance.value")}


@pytest.fixture(scope="module")
def mi():
    return pytest.importorskip("mitsuba")


def _cases():
    for i, refl in enumerate(LISTS):
        yield _scene_xml(refl, EMITTED[i % len(EMITTED)], LISTS[(i + 1) % len(LISTS)].replace("0.", "1."),
                         LISTS[(i + 2) % len(LISTS)].replace("0.", "2."), LISTS[(i + 3) % len(LISTS)], *ETA_K,
                         uniform_rad=1.0 + i)


def test_rgb_values_equal_mitsuba_scalar_rgb(mi, tmp_path):
    """rgb: spectrum_list_to_srgb per role (bounded and D65-weighted for a BSDF colour and a medium property,
    unbounded for η, k and a constvolume, unweighted for an emitter), a uniform emitter v·xyz_to_srgb(1, 1, 1),
    a uniform reflectance v, a spectrum file read like Mitsuba's parser: Mitsuba 3's scalar_rgb values."""
    mi.set_variant("scalar_rgb")
    spd = tmp_path / "r.spd"
    spd.write_text("# a reflectance\n400 0.5\n\n500\t0.9  extra\n700 0.7\n")
    n = 0
    for xml in list(_cases()) + [_scene_xml(LISTS[0], EMITTED[0], "0.5", "1.5", "0.25", *ETA_K, spd=spd.name)]:
        ours, _ = _tirender_values(xml, "rgb", tmp_path)
        theirs = _mitsuba_values(mi, xml.replace(f'filename="{spd.name}"', f'filename="{spd}"'))
        for role, a in ours.items():
            b = np.broadcast_to(theirs[role], a.shape)
            assert np.allclose(a, b, rtol=2e-6, atol=1e-7), (role, a, b, xml)
            n += 1
    assert n == 60
    e = ours["uniform"] / 3.0
    assert abs(e[0] - 1.2048) < 1e-3 and abs(e[2] - 0.9089) < 1e-3     # illuminant E's sRGB: not grey


def test_mono_values_equal_mitsuba_mono(mi, tmp_path):
    """mono: the luminance of the rgb value (Mitsuba's uniform texture), a uniform spectrum its value."""
    if not os.path.exists(LLVM):
        pytest.skip("Mitsuba's mono variants need libLLVM (DRJIT_LIBLLVM_PATH)")
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", LLVM)
    try:
        mi.set_variant("llvm_ad_mono")
    except Exception as e:                                      # pragma: no cover - depends on the machine
        pytest.skip(f"llvm_ad_mono unavailable: {e}")
    try:
        for xml in _cases():
            ours, _ = _tirender_values(xml, "mono", tmp_path)
            theirs = _mitsuba_values(mi, xml)
            for role, a in ours.items():
                assert np.allclose(a, theirs[role][0], rtol=2e-6, atol=1e-7), (role, a, theirs[role], xml)
    finally:
        mi.set_variant("scalar_rgb")


def test_spectral_description_keeps_the_lists(tmp_path):
    """spectral: the parameter is the list's values (its wavelengths in the spectrum table; a regular list's nodes
    the exact grid between its ends), a uniform emitter a uniform spectrum, η and k table constants."""
    from tirender import variants
    xml = _scene_xml("400:0.2, 500.0004:0.5, 600:0.9", EMITTED[0], "400:1, 700:2", "400:3, 700:4", "0.5", *ETA_K)
    ours, d = _tirender_values(xml, "spectral", tmp_path)
    assert np.allclose(ours["reflectance"], [0.2, 0.5, 0.9]) and np.allclose(ours["radiance"], [0, 8, 15.6, 18.4])
    t = next(t for t in d.textures if t.name == "r.reflectance")
    assert d.spectra[t.lam:t.lam + 4] == [3.0, 400.0, 500.0, 600.0]      # regular: 500.0004 -> 500
    lamp = next(e for e in d.emitters if e.id == "l")
    assert lamp.spectrum == variants.SPECTRUM_SAMPLED
    assert next(e for e in d.emitters if e.id == "u").spectrum == variants.SPECTRUM_UNIFORM
    c = next(b for b in d.bsdfs if b.id == "c")
    o = int(c.floats[8])
    assert d.spectra[o:o + 7] == [3.0, 400.0, 500.0, 700.0, 0.2, 0.9, 1.4]


@pytest.mark.parametrize("element,problem", [
    ('<spectrum name="reflectance" value="400:0.5, 300:0.6"/>', "increasing order"),
    ('<spectrum name="reflectance" value="400:0.5"/>', "at least two"),
    ('<spectrum name="reflectance" value="400:0.5, 500:x"/>', 'could not parse spectrum value "x"'),
    ('<spectrum name="reflectance" value="0.5 0.6"/>', "expected wavelength:value pairs"),
    ('<spectrum name="reflectance" value="0.5" filename="a.spd"/>', "either a 'value' or a 'filename'"),
    ('<spectrum name="reflectance" filename="missing.spd"/>', "missing.spd"),
    ('<spectrum name="reflectance" value="400:0.5, 600:1.5"/>', "must lie in [0, 1]"),
    ('<spectrum name="reflectance" type="regular"><string name="values" value="0.1, 0.2"/></spectrum>',
     "needs 'wavelength_min'"),
    ('<spectrum name="reflectance" type="irregular"><string name="wavelengths" value="400, 500"/>'
     '<string name="values" value="0.1"/></spectrum>', "different sizes"),
    ('<spectrum name="reflectance" type="blackbody"><float name="temperature" value="3000"/></spectrum>',
     "an emitter's spectrum"),
    ('<spectrum name="reflectance" type="srgb"><rgb name="color" value="1.5, 0, 0"/></spectrum>', "in [0, 1]"),
])
def test_bad_spectra_are_one_line(tmp_path, element, problem):
    import tirender
    from tirender.errors import ConfigError
    f = tmp_path / "bad.xml"
    f.write_text(f'<scene version="3.0.0">\n<shape type="rectangle">\n<bsdf type="diffuse">\n{element}\n'
                 f'</bsdf></shape></scene>\n')
    with pytest.raises(ConfigError) as e:
        tirender.load_scene(str(f))
    msg = str(e.value)
    assert problem in msg and "\n" not in msg and str(f) in msg, msg
    assert "line 4" in msg or "reflectance" in msg, msg


def test_yaml_forms_and_scalar_keys():
    """The YAML forms of docs/scenes.md give the XML's values; a scalar key takes a uniform spectrum only."""
    from tirender.errors import ConfigError
    from tirender.scene.description import parse_scene

    def refl(v, key="reflectance", t="diffuse"):
        d = parse_scene({"shapes": [{"type": "rectangle", "bsdf": {"type": t, key: v}}]}, variant="rgb")
        return d.textures[0].data.reshape(-1)
    a = refl({"type": "spectrum", "value": [[400, 0.2], [500, 0.5], [650, 0.9]]})
    assert np.array_equal(a, refl({"type": "spectrum", "value": "400:0.2, 500:0.5, 650:0.9"}))
    assert np.array_equal(a, refl({"type": "irregular", "wavelengths": [400, 500, 650], "values": [0.2, 0.5, 0.9]}))
    b = refl({"type": "regular", "wavelength_min": 400, "wavelength_max": 600, "values": "0.2, 0.5, 0.9"})
    assert np.array_equal(b, refl({"type": "spectrum", "value": "400:0.2, 500:0.5, 600:0.9"})) and not np.allclose(a, b)
    assert np.array_equal(refl({"type": "srgb", "color": [0.1, 0.2, 0.3]}), np.float32([0.1, 0.2, 0.3]))
    assert np.array_equal(refl({"type": "uniform", "value": 0.3}), np.float32([0.3] * 3))
    assert np.array_equal(refl({"type": "d65", "scale": 0.3}), np.float32([0.3] * 3))   # Mitsuba's d65 -> uniform
    r = parse_scene({"shapes": [{"type": "rectangle", "bsdf": {"type": "roughconductor",
                                                                "alpha": {"type": "spectrum", "value": 0.2}}}]},
                    variant="rgb")
    assert any(np.allclose(t.data, 0.2) and t.data.shape[-1] == 1 for t in r.textures)
    with pytest.raises(ConfigError, match="roughness: a scalar key takes a uniform spectrum"):
        parse_scene({"shapes": [{"type": "rectangle", "bsdf": {"type": "roughconductor", "alpha": {
            "type": "spectrum", "value": "400:0.1, 700:0.2"}}}]}, variant="rgb")
    with pytest.raises(ConfigError, match="radiance.unbounded: 'unbounded' must be true or false"):
        parse_scene({"shapes": [{"type": "rectangle", "emitter": {"type": "area", "radiance": {
            "type": "spectrum", "value": "400:1, 700:2", "unbounded": "yes"}}}]}, variant="rgb")
    with pytest.raises(ConfigError, match="srgb spectrum on an emitter"):
        parse_scene({"shapes": [{"type": "rectangle", "emitter": {"type": "area", "radiance": {
            "type": "srgb", "color": [0.5, 0.5, 0.5]}}}]}, variant="spectral")


# ------------------------------------------------------------------------------------------------ spectral
def spectral_checks():
    """The spectral child: the kernels' values at LAMBDAS, the parity scene's images, PRB vs central differences."""
    import taichi as ti

    import tirender
    from tirender import gradcheck, variants
    from tirender.bsdfs.base import BsdfCtx, slot_rgb, with_row
    from tirender.bsdfs.conductor import conductor_ior
    from tirender.core.math import vec2, vec3
    from tirender.emitters import registry
    from tirender.emitters.base import slot
    from tirender.media.medium import homogeneous_coefficients
    tirender.set_variant("spectral")
    out = {}
    xml = _scene_xml(LISTS[0], EMITTED[0], "400:1.5, 520:0.4, 600:2.5, 700:3", "0.5", "400:0.9, 500:0.2, 700:0.6",
                     *ETA_K)
    f = os.path.join(os.environ["TIRENDER_TEST_OUT"], "roles.xml")
    with open(f, "w") as fh:
        fh.write(xml)
    sc = tirender.load_scene(f)
    st = sc.bind()
    d = sc.desc
    b_r = next(i for i, b in enumerate(d.bsdfs) if b.id == "r")
    b_c = next(i for i, b in enumerate(d.bsdfs) if b.id == "c")
    e_l = next(i for i, e in enumerate(d.emitters) if e.id == "l")
    m = next(i for i, x in enumerate(d.media) if x.id == "m")

    @ti.kernel
    def probe(st: ti.template(), lam_in: ti.types.ndarray(), o: ti.types.ndarray()):
        lam = variants.spec(0.0)
        for i in ti.static(range(4)):
            lam[i] = lam_in[i]
        ctx = BsdfCtx(b=b_r, uv=vec2(0.5), dpdu=vec3(0.0), dpdv=vec3(0.0), ng=vec3(0.0, 0.0, 1.0), lam=lam)
        r = slot_rgb(st, ctx, 0)
        eta, k = conductor_ior(st, with_row(ctx, b_c))
        le = registry.emission(st, e_l, slot(st, e_l, 0, vec2(0.5)) * 2.0, lam)
        sig, alb = homogeneous_coefficients(st, m, lam)
        for i in ti.static(range(4)):
            o[0, i] = r[i]
            o[1, i] = le[i]
            o[2, i] = sig[i]
            o[3, i] = alb[i]
            o[4, i] = eta[i]
            o[5, i] = k[i]

    rows = []
    for lam in LAMBDAS:
        o = np.zeros((6, 4), np.float32)
        probe(st, np.array(lam, np.float32), o)
        rows.append(o.tolist())
    out["probe"] = rows
    r = _parity_module().tirender_run(PARITY, PARITY_DEFINES, 16, 8, [], 0, grad=False)
    np.save(os.path.join(os.environ["TIRENDER_TEST_OUT"], "spectra.npy"), r["imgs"])
    box = tirender.load_scene(PARITY, defines={"res": "12", "spp": "4"})
    grows = gradcheck.check(box, ["floor.reflectance", "light.radiance"], spp=16, seeds=8, h_rel=0.05)
    out["gradcheck"] = [dict(name=g.name, grad=g.grad, fd=g.fd, se=g.se, z=g.z, ok=g.ok) for g in grows]
    out["shapes"] = {n: list(box.params[n].shape) for n in ("floor.reflectance", "light.radiance", "ball.reflectance")}
    out["alias"] = box.params.resolve("floor.bsdf.reflectance.values")
    return out


def _parity_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("parity_run", os.path.join(ROOT, "benchmarks", "parity", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def spectral_out(tmp_path_factory):
    return tmp_path_factory.mktemp("sampled_spectral")


@pytest.fixture(scope="module")
def spectral_report(spectral_out):
    return run_child(__file__, ["--child"], spectral_out, timeout=1500)


@pytest.mark.slow       # a spectral child (path, prb and a probe kernel)
def test_spectral_values_at_wavelengths_equal_mitsuba(mi, spectral_report):
    """The kernels' reads at the path's wavelengths (a BSDF slot, an emitter through the registry, a medium's σt
    and albedo, a conductor's η and k) against Mitsuba 3's scalar_spectral: the BSDF through the XML (so the
    choice of regular / irregular is Mitsuba's), the others by its irregular plugin on the same list."""
    mi.set_variant("scalar_spectral")
    xml = '<bsdf version="3.0.0" type="diffuse"><spectrum name="reflectance" value="%s"/></bsdf>' % LISTS[0]
    bsdf = mi.load_string(xml)

    def irregular(text):
        wl, v = zip(*[(float(a), float(b)) for a, b in (p.split(":") for p in text.split(", "))])
        return mi.load_dict({"type": "irregular", "wavelengths": ", ".join(map(str, wl)),
                             "values": ", ".join(map(str, v))})
    texs = [None, irregular(EMITTED[0]), irregular("400:1.5, 520:0.4, 600:2.5, 700:3"),
            irregular("400:0.9, 500:0.2, 700:0.6"), irregular(ETA_K[0]), irregular(ETA_K[1])]
    scale = [1.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    for lam, rows in zip(LAMBDAS, spectral_report["probe"]):
        si = mi.SurfaceInteraction3f()
        si.wavelengths = list(lam)
        si.wi = mi.Vector3f(0, 0, 1)
        expect = [np.array(bsdf.eval_diffuse_reflectance(si))] + \
                 [np.array(t.eval(si)) * s for t, s in zip(texs[1:], scale[1:])]
        for k, (got, want) in enumerate(zip(rows, expect)):
            assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (k, lam, got, want)
    assert any(v == 0.0 for rows in spectral_report["probe"] for v in rows[0])     # outside a list's range: 0


@pytest.mark.slow
@pytest.mark.parity
@pytest.mark.parametrize("variant", ["rgb", "spectral"])
def test_image_parity_with_mitsuba(mi, variant, spectral_report, spectral_out):
    """benchmarks/parity/scenes/spectra.xml (wavelength-list reflectances and radiance, a uniform-spectrum lamp) by
    tirender and by Mitsuba 3's scalar variant from the same file: per-channel means by Welch's test and the image
    RMSE within 1.2x the combined noise (benchmarks/parity/run.py's criteria)."""
    parity = _parity_module()
    if variant == "rgb":
        ours = parity.tirender_run(PARITY, PARITY_DEFINES, 16, 8, [], 0, grad=False)
    else:
        ours = {"imgs": np.load(os.path.join(spectral_out, "spectra.npy")), "grads": {}}
    theirs = parity.mitsuba_run(PARITY, PARITY_DEFINES, 16, 8, [], 0, grad=False, variant="scalar_" + variant)
    r = parity.compare(ours, theirs, "spectra")
    print(variant, r["mean_ti"], r["mean_mi"], r["z"], r["rmse_ratio"])
    assert np.all(r["p"] >= parity.P_FAIL) and r["rmse_ratio"] <= 1.2, \
        (r["mean_ti"], r["mean_mi"], r["z"], r["rmse_ratio"])


@pytest.mark.slow       # a spectral child (path, prb and a probe kernel)
def test_spectral_gradients_of_the_values(spectral_report):
    """PRB's gradient of a sampled spectrum's values (a BSDF reflectance, an area light's radiance: parameters of
    the list's length, Mitsuba's ``values``) against central differences with correlated random numbers."""
    assert spectral_report["shapes"] == {"floor.reflectance": [3], "light.radiance": [4], "ball.reflectance": [4]}
    assert spectral_report["alias"] == "floor.reflectance"
    for r in spectral_report["gradcheck"]:
        assert r["ok"] and abs(r["fd"]) > 3 * r["se"], r


# ------------------------------------------------------------------------------------------------ float64
def f64_checks():
    """(name -> max relative error vs central differences): the sampled spectrum's adjoint, directly and through
    the BSDF slot, the emitter registry and a medium (homogeneous, and at a point as grid media read it), fp = f64,
    spectral."""
    import taichi as ti

    import tirender
    from tirender.bsdfs.base import BsdfCtx, slot_rgb, slot_rgb_adjoint
    from tirender.core.fixed_point import grad_scale_for
    from tirender.core.math import vec2, vec3
    from tirender.emitters import registry
    from tirender.emitters.base import direction_record
    from tirender.launch import read_gradients, reset_gradients
    from tirender.media.medium import (coefficients, coefficients_adjoint, homogeneous_coefficients,
                                       homogeneous_coefficients_adjoint)
    from tirender.textures import spectrum_eval, spectrum_eval_adjoint
    tirender.set_variant("spectral")
    rng = np.random.default_rng(3)
    wl = np.sort(rng.uniform(380.0, 800.0, 7))
    pairs = lambda v: ", ".join(f"{a:.6f}:{b:.6f}" for a, b in zip(wl, v))   # noqa: E731
    spec = {"shapes": [{"id": "p", "type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": {
                            "type": "spectrum", "value": pairs(rng.uniform(0.1, 0.9, 7))}}},
                       {"id": "l", "type": "rectangle", "emitter": {"type": "area", "radiance": {
                           "type": "spectrum", "value": pairs(rng.uniform(0.5, 9.0, 7))}},
                        "interior": {"type": "homogeneous", "albedo": {"type": "spectrum", "value": pairs(
                            rng.uniform(0.1, 0.9, 7))}, "sigma_t": {"type": "spectrum", "value": pairs(
                                rng.uniform(0.5, 3.0, 7))}}}]}
    sc = tirender.load_scene(spec)
    st = sc.bind()
    names = ["p.reflectance", "l.radiance", "l.albedo", "l.sigma_t"]
    tids = [[t.name for t in sc.desc.textures].index(n) for n in names]
    b = sc.desc.shapes[0].bsdf
    em = sc.em_mask
    t0 = tids[0]

    @ti.func
    def lanes(l: ti.template()):
        lam = tirender.variants.spec(0.0)
        for i in ti.static(range(4)):
            lam[i] = l[i]
        return lam

    @ti.kernel
    def val(which: ti.i32, l: ti.types.ndarray(), g: ti.types.ndarray()) -> ti.f64:
        lam = lanes(l)
        gs = lanes(g)
        ctx = BsdfCtx(b=b, uv=vec2(0.5), dpdu=vec3(0.0), dpdv=vec3(0.0), ng=vec3(0.0, 0.0, 1.0), lam=lam)
        q = direction_record(0, vec3(0.0), vec3(0.0, 0.0, 1.0), vec2(0.5), vec3(0.0, 0.0, -1.0), 1.0)
        v = tirender.variants.spec(0.0)
        sig, alb = homogeneous_coefficients(st, 0, lam)
        sig_p, alb_p = coefficients(st, 0, vec3(0.1, -0.2, 0.3), lam)     # the grid media's path
        if which == 0:
            v = spectrum_eval(st, t0, lam)
        elif which == 1:
            v = slot_rgb(st, ctx, 0)
        elif which == 2:
            v = registry.eval(st, em, q, lam)
        elif which == 3:
            v = alb
        elif which == 4:
            v = sig
        elif which == 5:
            v = alb_p
        else:
            v = sig_p
        return v.dot(gs)

    @ti.kernel
    def adj(which: ti.i32, l: ti.types.ndarray(), g: ti.types.ndarray()):
        lam = lanes(l)
        d = lanes(g)
        ctx = BsdfCtx(b=b, uv=vec2(0.5), dpdu=vec3(0.0), dpdv=vec3(0.0), ng=vec3(0.0, 0.0, 1.0), lam=lam)
        q = direction_record(0, vec3(0.0), vec3(0.0, 0.0, 1.0), vec2(0.5), vec3(0.0, 0.0, -1.0), 1.0)
        z = tirender.variants.spec(0.0)
        if which == 0:
            spectrum_eval_adjoint(st, t0, lam, d)
        elif which == 1:
            slot_rgb_adjoint(st, ctx, 0, d)
        elif which == 2:
            registry.eval_adjoint(st, em, q, d, lam)
        elif which == 3:
            homogeneous_coefficients_adjoint(st, 0, lam, z, d)
        elif which == 4:
            homogeneous_coefficients_adjoint(st, 0, lam, d, z)
        elif which == 5:
            coefficients_adjoint(st, 0, vec3(0.1, -0.2, 0.3), lam, z, d)
        else:
            coefficients_adjoint(st, 0, vec3(0.1, -0.2, 0.3), lam, d, z)

    out = {}
    for which, label, name in ((0, "spectrum_eval", names[0]), (1, "BSDF slot", names[0]),
                               (2, "area emitter", names[1]),
                               (3, "medium albedo", names[2]), (4, "medium sigma_t", names[3]),
                               (5, "medium albedo at a point", names[2]), (6, "medium sigma_t at a point", names[3])):
        errs = []
        for _ in range(40):
            lam = rng.uniform(370.0, 810.0, 4)         # some lanes outside the list's range
            g = rng.normal(size=4)
            reset_gradients(st, grad_scale_for(10.0))
            adj(which, lam, g)
            got = read_gradients(sc, st)[name]
            info = sc.params.info(name)
            v0 = sc.params[name].astype(np.float64)

            def f(x):                                  # the f64 pool itself (the host copy is float32)
                st.write_pool(np.ascontiguousarray(x, np.float64), info.offset, -np.inf, np.inf)
                return val(which, lam, g)
            fd = central_differences(f, v0, 1e-6)
            f(v0)
            errs.append(max_rel_err(got, fd) if np.abs(fd).max() > 0 else float(np.abs(got).max()))
        out[label] = {"max_rel_err": max(errs), "cases": len(errs)}
    return out


def test_sampled_adjoints_vs_central_differences_f64():
    from gradcheck_util import f64_child_report
    report = f64_child_report(__file__)
    assert len(report) == 7
    for name, r in report.items():
        assert r["cases"] >= 40 and r["max_rel_err"] <= 1e-6, (name, r)


if __name__ == "__main__" and "--child" in sys.argv:
    import json
    print(json.dumps(spectral_checks()))
elif __name__ == "__main__" and "--f64" in sys.argv:
    import json
    print(json.dumps(f64_checks()))
