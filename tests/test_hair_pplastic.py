"""pplastic and hair (tirender/bsdfs/pplastic.py, hair.py) beyond the BSDF bench of tests/test_bsdfs.py (which checks
eval / pdf / sample against Mitsuba 3 scalar_rgb number for number, sampling by chi-square, hair's white furnace and
the adjoints against central differences): Mitsuba's documentation examples through the XML importer (the same file
in Mitsuba), the refusals, pplastic's Mueller matrices and both models' spectral values against Mitsuba 3's
scalar_spectral_polarized, and whole-render PRB gradients of the new parameters against central differences.
Images and gradients against Mitsuba's renders: tests/test_parity.py (benchmarks/parity/scenes/pplastic.xml, hair.xml)."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, HERE):      # (also as the child process of test_polarized_values_match_mitsuba)
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tirender  # noqa: E402
from child_util import run_child  # noqa: E402
from scenes import xml_scene  # noqa: E402
from tirender.errors import ConfigError  # noqa: E402

FIBRES = os.path.join(ROOT, "benchmarks", "parity", "scenes", "assets", "fibres.obj")

# Mitsuba's documentation examples (src/bsdfs/pplastic.cpp, hair.cpp), one shape each
DOC_XML = xml_scene("""    <bsdf type="pplastic" id="purple">
        <rgb name="diffuse_reflectance" value="0.05, 0.03, 0.1"/>
        <float name="alpha" value="0.06"/>
    </bsdf>
    <bsdf type="hair" id="blonde">
        <float name="eumelanin" value="0.2"/>
        <float name="pheomelanin" value="0.4"/>
    </bsdf>
    <bsdf type="hair" id="absorbing">
        <rgb name="sigma_a" value="0.2, 0.25, 0.7"/>
        <float name="scale" value="200"/>
    </bsdf>
    <shape type="rectangle"><ref id="purple"/></shape>
    <shape type="rectangle"><ref id="blonde"/></shape>
    <shape type="rectangle"><ref id="absorbing"/></shape>
""")


def test_documentation_examples_load(tmp_path):
    """Mitsuba's documentation snippets load; every parameter Mitsuba's traverse reports (scalar_rgb, the same file)
    has tirender's value, η = int_ior / ext_ior of the defaults included."""
    f = tmp_path / "doc.xml"
    f.write_text(DOC_XML)
    sc = tirender.load_scene(str(f))
    p = sc.params
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    ref = mi.traverse(mi.load_file(str(f)))
    pairs = {"purple.diffuse_reflectance": "purple.diffuse_reflectance.value", "purple.roughness": "purple.alpha.value",
             "purple.eta": "purple.eta.value", "absorbing.sigma_a": "absorbing.sigma_a.value"}
    for k in ("eumelanin", "pheomelanin", "longitudinal_roughness", "azimuthal_roughness", "scale_tilt", "eta"):
        pairs[f"blonde.{k}"] = f"blonde.{k}"
        pairs[f"absorbing.{k}"] = f"absorbing.{k}"
    for ours, theirs in pairs.items():
        assert np.allclose(np.ravel(p[ours]), np.ravel(np.array(ref[theirs])), rtol=1e-6), (ours, p[ours], ref[theirs])
    rows = {r.id: r for r in sc.desc.bsdfs}
    assert rows["absorbing"].floats == [0.0, 200.0] and rows["blonde"].floats == [1.0, 1.0]   # sigma_a × scale
    assert ref["absorbing.scale"] == 200.0 and not ref["absorbing.use_pigmentation"]


def _load(bsdf, variant=None):
    from tirender.scene.description import parse_scene
    parse_scene({"sensors": [{"film": {"width": 2, "height": 2}}], "bsdfs": {"b": bsdf},
                 "shapes": [{"type": "rectangle", "bsdf": "b"}]}, variant=variant)


@pytest.mark.parametrize("bsdf,variant,what", [
    ({"type": "pplastic", "eta": 1.4, "int_ior": 1.5}, None, "b.int_ior: give either eta or int_ior"),
    ({"type": "pplastic", "int_ior": 1.3, "ext_ior": 1.3}, None, "b.int_ior: int_ior and ext_ior must differ"),
    ({"type": "pplastic", "sample_visible": False}, None, "b.sample_visible: sample_visible: false is not supported"),
    ({"type": "pplastic", "alpha_u": 0.1}, None, "b.alpha_v: give both alpha_u and alpha_v"),
    ({"type": "pplastic", "distribution": "phong"}, None, "b.distribution: unknown value 'phong'"),
    ({"type": "hair", "sigma_a": [0.1, 0.2, 0.3], "eumelanin": 0.5}, None, "b.eumelanin: give either the pigments"),
    ({"type": "hair", "longitudinal_roughness": 1.5}, None, "b.longitudinal_roughness: value 1.5 is out of range"),
    ({"type": "hair", "eta": 1.5, "int_ior": 1.6}, None, "b.int_ior: give either eta or int_ior"),
    ({"type": "hair"}, "mono", "hair's pigments have no meaning in the mono variant"),
    ({"type": "hair", "specular_reflectance": 0.5}, None, "key 'specular_reflectance' does not apply to a 'hair'")])
def test_refusals_are_one_line(bsdf, variant, what):
    """Mitsuba's own checks (eta or int_ior, IORs that differ, both alpha_u and alpha_v, pigments or sigma_a, roughness
    in [0, 1]), what tirender cannot honour (sample_visible: false) and hair's pigments in mono, where Mitsuba's hair
    throws (sigma_a works there: it loads)."""
    with pytest.raises(ConfigError) as e:
        _load(bsdf, variant)
    assert what in str(e.value) and "\n" not in str(e.value), str(e.value)
    _load({"type": "hair", "sigma_a": 0.5}, "mono")


# --------------------------------------------------------------------------------- spectral_polarized vs Mitsuba
# grey reflectances and absorption (flat spectra in both upsamplers: the values compare to float rounding) and coloured
# ones (tirender's own fit of Jakob & Hanika's upsampling on Mitsuba's nodes: within 4e-4 of Mitsuba's table)
POL_ROWS = {
    "pp_grey": {"type": "pplastic", "diffuse_reflectance": 0.4, "specular_reflectance": 0.8, "alpha": 0.3},
    "pp_ggx": {"type": "pplastic", "diffuse_reflectance": 0.6, "alpha_u": 0.15, "alpha_v": 0.5, "distribution": "ggx",
               "int_ior": 1.7, "ext_ior": 1.1},
    "pp_doc": {"type": "pplastic", "diffuse_reflectance": [0.05, 0.03, 0.1], "alpha": 0.06},
    "hair_grey": {"type": "hair", "sigma_a": 0.6, "longitudinal_roughness": 0.4, "azimuthal_roughness": 0.5},
    "hair_doc": {"type": "hair", "eumelanin": 0.2, "pheomelanin": 0.4},
}
_COLOUR_KEYS = ("diffuse_reflectance", "specular_reflectance", "sigma_a")
# the colours (pplastic's reflectances, hair's σa as an unbounded colour) pass through the RGB upsampling, whose
# coefficient table tirender fits itself (spectra/fit_srgb_table.py, on Mitsuba's nodes: its greys' spectra within
# 1.5e-5 of Mitsuba's); the values agree to 2e-3 (measured: pp_grey 8.2e-4, pp_ggx 6.2e-4, hair_grey 1.05e-3, the
# same with the earlier table whose greys were 8e-4 away, so the rest of the gap is not the upsampling; not yet
# traced); the documentation rows' pigments go through Mitsuba's eumelanin/pheomelanin fit
TOL = {"pp_grey": 2e-3, "pp_ggx": 2e-3, "pp_doc": 3e-2, "hair_grey": 2e-3, "hair_doc": 3e-2}


def _pol_inputs(n=96, seed=7):
    """wi, wo (half of the pairs above the surface for pplastic, the rest anywhere) and four wavelengths per pair."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(2, n, 3))
    v /= np.linalg.norm(v, axis=-1, keepdims=True)
    v[:, : n // 2, 2] = np.abs(v[:, : n // 2, 2])
    return np.concatenate([v[0], v[1], rng.uniform(380.0, 780.0, (n, 4))], 1)


def polarized_child():
    """(in spectral_polarized) per row: the Mueller matrices (lanes × 4 × 4) of the dispatcher's ``mueller`` and the
    lanes of ``eval`` at _pol_inputs, with Mitsuba's scalar_spectral_polarized eval at the same wavelengths."""
    import mitsuba as mi
    import taichi as ti

    from tirender import variants
    from tirender.bsdfs.base import BsdfCtx
    from tirender.bsdfs.registry import dispatch
    from tirender.core.math import vec2, vec3
    from tirender.scene.scene import bsdf_levels
    tirender.set_variant("spectral_polarized")
    tirender.init("cpu")
    sc = tirender.load_scene({"sensors": [{"film": {"width": 2, "height": 2}}], "bsdfs": POL_ROWS,
                              "shapes": [{"id": f"s_{k}", "type": "rectangle", "bsdf": k} for k in POL_ROWS]})
    st = sc.bind()
    D = dispatch(bsdf_levels(sc.desc.bsdfs, [sc.desc.bsdf_ids[k] for k in POL_ROWS]))

    @ti.kernel
    def k_eval(st: ti.template(), D: ti.template(), b: ti.i32, inp: ti.types.ndarray(), m: ti.types.ndarray(),
               e: ti.types.ndarray()):
        for i in range(m.shape[0]):
            lam = variants.spec(0.0)
            for c in ti.static(range(4)):
                lam[c] = inp[i, 6 + c]
            ctx = BsdfCtx(b=b, uv=vec2(0.5), dpdu=vec3(1.0, 0.0, 0.0), dpdv=vec3(0.0, 1.0, 0.0),
                          ng=vec3(0.0, 0.0, 1.0), lam=lam)
            wi = vec3(inp[i, 0], inp[i, 1], inp[i, 2])
            wo = vec3(inp[i, 3], inp[i, 4], inp[i, 5])
            ml = D.mueller(st, ctx, wi, wo, 0, False)
            f = D.eval(st, ctx, wi, wo)
            for r in ti.static(range(4)):
                e[i, r] = f[r]
                for c in ti.static(range(4)):
                    m[i, 0, r, c] = ml.m0[r, c]
                    m[i, 1, r, c] = ml.m1[r, c]
                    m[i, 2, r, c] = ml.m2[r, c]
                    m[i, 3, r, c] = ml.m3[r, c]

    inp = _pol_inputs().astype(np.float32)
    mi.set_variant("scalar_spectral_polarized")
    report = {}
    for name, params in POL_ROWS.items():
        n = len(inp)
        m = np.zeros((n, 4, 4, 4), np.float32)
        e = np.zeros((n, 4), np.float32)
        k_eval(st, D, sc.desc.bsdf_ids[name], np.ascontiguousarray(inp), m, e)
        # colours as RGB on both sides (a bare float on a colour key is a uniform spectrum in Mitsuba's spectral
        # variants, an RGB grey upsampled by Jakob & Hanika's model in tirender's)
        b = mi.load_dict({k: {"type": "rgb", "value": v if isinstance(v, list) else [v] * 3}
                          if isinstance(v, list) or k in _COLOUR_KEYS else v for k, v in params.items()})
        ref = np.zeros((n, 4, 4, 4))
        si = mi.SurfaceInteraction3f()
        for i, r in enumerate(inp.astype(np.float64)):
            si.wi = mi.Vector3f(*r[:3])
            si.wavelengths = mi.UnpolarizedSpectrum(*r[6:10])
            ref[i] = np.array(b.eval(mi.BSDFContext(), si, mi.Vector3f(*r[3:6]))).transpose(2, 0, 1)   # lane, row, col
        scale = np.maximum(np.abs(ref[:, :, 0, 0]), 1e-6)[:, :, None, None]
        rep = {"s0_err": float((np.abs(e - ref[:, :, 0, 0]) / scale[..., 0, 0]).max()),
               "nonzero": int((ref[:, :, 0, 0] > 1e-4).sum()), "polarized": float(np.abs(ref[:, :, 0, 1:]).max())}
        if params["type"] == "pplastic":
            rep["mueller_err"] = float((np.abs(m - ref) / scale).max())
        report[name] = rep
    return report


@pytest.mark.slow
def test_polarized_values_match_mitsuba(tmp_path):
    """pplastic's Mueller matrices (every lane, every entry, relative to its [0, 0]) and both models' unpolarized
    value (the walk's f: pplastic's [0, 0], hair's depolarizer) against Mitsuba 3's scalar_spectral_polarized eval at
    the same wavelengths; pplastic's matrices polarize (entries off the first column), hair's do not."""
    pytest.importorskip("mitsuba")
    rep = run_child(__file__, ["--polarized"], tmp_path, timeout=900)
    for name, r in rep.items():
        assert r["nonzero"] > 100, (name, r)
        assert r["s0_err"] < TOL[name], (name, r)
        if name.startswith("pp_"):
            assert r["mueller_err"] < TOL[name] and r["polarized"] > 1e-3, (name, r)
        else:
            assert r["polarized"] == 0.0, (name, r)


# --------------------------------------------------------------------------------- whole-render gradients
def _gradient_scene():
    """A pplastic floor and the parity scene's fibres (hair) under an area light and a dim sky, 16² pixels."""
    from scenes import camera
    return {
        "integrator": {"type": "path", "max_depth": 4, "rr_depth": 100},
        "sensors": [camera([0, 1.6, 4.5], [0, 0.5, 0], fov=30, w=16, h=16)],
        "bsdfs": {"plastic": {"type": "pplastic", "diffuse_reflectance": [0.5, 0.3, 0.2], "alpha": 0.2, "eta": 1.5},
                  "hair": {"type": "hair", "eumelanin": 0.3, "pheomelanin": 0.5, "longitudinal_roughness": 0.35,
                           "azimuthal_roughness": 0.5, "scale_tilt": 3.0}},
        "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "plastic",
                    "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}]},
                   {"id": "fibres", "type": "obj", "filename": FIBRES, "bsdf": "hair"},
                   {"id": "lamp", "type": "rectangle", "emitter": {"type": "area", "radiance": [12.0, 11.0, 9.0]},
                    "to_world": [{"scale": 0.6}, {"rotate": {"axis": [1, 0, 0], "angle": 90}},
                                 {"translate": [0.0, 2.8, -0.5]}]}],
        "emitters": [{"type": "constant", "radiance": [0.3, 0.3, 0.3]}],
    }


@pytest.mark.slow
@pytest.mark.extended   # ~450 s of compilation cold (the hair's and pplastic's PRB megakernel over the fibres); the
# default lane checks both models' adjoints in f64 (tests/test_bsdfs.py rows adj_pp, adj_hair) and pplastic's
# Mueller matrices against Mitsuba (test_polarized_values_match_mitsuba)
@pytest.mark.parametrize("name,h", [("plastic.eta", 0.04), ("plastic.roughness", 0.02),
                                    ("hair.longitudinal_roughness", 0.04), ("hair.azimuthal_roughness", 0.04),
                                    ("hair.scale_tilt", 1.0), ("hair.eumelanin", 0.1), ("hair.eta", 0.04)])
def test_prb_gradients_match_finite_differences(name, h):
    """PRB's gradient of each new parameter (pplastic's η and α; hair's roughnesses, scale tilt, pigment and η) against
    central differences with correlated random numbers (tests/gradcheck_util.py)."""
    from gradcheck_util import assert_agree, projected_gradients
    sc = _scene_cache()
    w = np.random.default_rng(0).uniform(0.2, 1.0, (16, 16, 3)).astype(np.float32)
    # 32 seeds of 64 spp each side: a parameter that moves the lobe choice (η, the roughnesses) decorrelates the ±h
    # renders' paths where a choice flips, and their difference quotient is several times noisier than PRB's (at 8
    # seeds of 16 spp the FD mean was not significant for hair's η, azimuthal roughness and tilt)
    seeds = range(32)
    g, f = projected_gradients(sc, name, np.ones(1), w, 64, [101 + k for k in seeds], [501 + k for k in seeds], h)
    mg, mf, se = assert_agree(g, f, name)
    print(f"{name}: PRB {mg:.5g}, FD {mf:.5g} (3 SE {3 * se:.2g})")


_SCENE = {}


def _scene_cache():
    if "s" not in _SCENE:
        _SCENE["s"] = tirender.load_scene(_gradient_scene())
    return _SCENE["s"]


if __name__ == "__main__" and "--polarized" in sys.argv:
    print(json.dumps(polarized_child()))
