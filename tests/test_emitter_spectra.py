"""Emitter spectra (scene/description.py emitter_spectrum, spectra/blackbody.py): an emitter's light given as
a black body (Planck's law, Mitsuba's units), D65 or a uniform spectrum. Here the RGB variant (this process):
a directly seen black body is its scale times the sRGB of Planck's law, exactly; the XML form; bad input is
one line. The spectral and mono variants are checked in tests/test_variants.py's children
(``emitter_spectra_checks``)."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import tirender  # noqa: E402
from tirender.errors import ConfigError  # noqa: E402
from tirender.spectra import blackbody, cie  # noqa: E402


def lamp_scene(radiance, w=8):
    """A camera filled by an area light (path, max_depth 1: emission only; box filter)."""
    return {"integrator": {"type": "path", "max_depth": 1},
            "sensors": [{"fov": 30, "to_world": {"look_at": {"origin": [0, 0, 3], "target": [0, 0, 0], "up": [0, 1, 0]}},
                         "film": {"width": w, "height": w, "filter": {"type": "box"}}}],
            "shapes": [{"id": "lamp", "type": "rectangle", "to_world": {"scale": 5},
                        "emitter": {"type": "area", "radiance": radiance}}]}


def test_planck_host_values():
    """Planck's law against hand-computed values (λ = 500 nm, T = 5000 K: 1.2106e4 W m⁻² sr⁻¹ nm⁻¹; Wien's
    peak at b/T); the sRGB of a black body is reddish below ~6500 K and bluish above."""
    assert blackbody.planck(500.0, 5000.0) == pytest.approx(1.2106e4, rel=1e-3)
    lam = np.linspace(300.0, 1500.0, 120001)
    peak = lam[np.argmax(blackbody.planck(lam, 4000.0))]
    assert peak == pytest.approx(2.897772e6 / 4000.0, abs=0.02)
    warm, cool = blackbody.srgb(3000.0), blackbody.srgb(12000.0)
    assert warm[0] > warm[1] > warm[2] > 0 and cool[2] > cool[0]
    # luminance of srgb(T) = ∫ ȳ B dλ / ∫ ȳ dλ (the film's normalisation)
    from tirender.variants import LUMINANCE
    y = np.array(LUMINANCE) @ blackbody.srgb(5000.0)
    lam = np.linspace(cie.LAMBDA_MIN, cie.LAMBDA_MAX, 47001)
    ref = np.trapezoid(cie.cmf(lam)[:, 1] * blackbody.planck(lam, 5000.0), lam) / cie.Y_INTEGRAL
    assert y == pytest.approx(ref, rel=2e-3)


@pytest.mark.parametrize("rad,expect", [
    ({"type": "blackbody", "temperature": 5000, "scale": 1e-4}, lambda: 1e-4 * blackbody.srgb(5000.0)),
    ({"type": "blackbody", "temperature": 2700}, lambda: blackbody.srgb(2700.0)),
    ({"type": "d65", "color": [0.2, 0.5, 1.0], "scale": 3}, lambda: np.array([0.6, 1.5, 3.0])),
    ({"type": "uniform", "value": 2.5}, lambda: np.full(3, 2.5)),
])
def test_rgb_variant_sees_the_spectrum_srgb(rad, expect):
    sc = tirender.load_scene(lamp_scene(rad))
    img = tirender.render(sc, spp=2, seed=0, progress=False)
    assert np.allclose(img.reshape(-1, 3), expect()[None], rtol=2e-6)


def test_blackbody_scale_is_the_differentiable_parameter():
    """The pool parameter is the scale (grey), not Planck's values; its gradient is the image's slope in it
    (the image is linear in the scale: Σ_c ∂/∂scale_c · scale = image, same paths)."""
    sc = tirender.load_scene(lamp_scene({"type": "blackbody", "temperature": 4000, "scale": 0.5}))
    assert np.allclose(sc.params["lamp.radiance"], 0.5)
    img = tirender.render(sc, spp=2, seed=1, progress=False)
    g = tirender.render_grad(sc, np.ones_like(img), spp=2, seed=1, progress=False)["lamp.radiance"]
    tint = blackbody.srgb(4000.0)
    assert np.allclose(g.reshape(3), img.shape[0] * img.shape[1] * tint, rtol=1e-4)


def test_mitsuba_xml_blackbody(tmp_path):
    xml = tmp_path / "bb.xml"
    xml.write_text("""<scene version="3.0.0">
  <integrator type="path"><integer name="max_depth" value="1"/></integrator>
  <sensor type="perspective"><float name="fov" value="30"/>
    <transform name="to_world"><lookat origin="0,0,3" target="0,0,0" up="0,1,0"/></transform>
    <film type="hdrfilm"><integer name="width" value="4"/><integer name="height" value="4"/>
      <rfilter type="box"/></film></sensor>
  <shape type="rectangle"><transform name="to_world"><scale value="5"/></transform>
    <emitter type="area"><spectrum type="blackbody" name="radiance">
      <float name="temperature" value="3500"/></spectrum></emitter></shape>
</scene>""")
    sc = tirender.load_scene(str(xml))
    img = tirender.render(sc, spp=1, seed=0, progress=False)
    assert np.allclose(img.reshape(-1, 3), blackbody.srgb(3500.0)[None], rtol=2e-6)


@pytest.mark.parametrize("rad,key,problem", [
    ({"type": "blackbody"}, "shapes.lamp.emitter.radiance", "needs 'temperature'"),
    ({"type": "blackbody", "temperature": -3}, "radiance.temperature", ">= 1"),
    ({"type": "blackbody", "temperature": 5000, "colour": 1}, "radiance.colour", "unknown key 'colour'"),
    ({"type": "d65", "color": [1, -1, 1]}, "radiance.color", ""),
    ({"type": "uniform", "value": "bright"}, "radiance.value", ""),
])
def test_bad_spectra_are_one_line(rad, key, problem):
    with pytest.raises(ConfigError) as e:
        tirender.load_scene(lamp_scene(rad))
    msg = str(e.value)
    assert key in msg and problem in msg and "\n" not in msg, msg


@pytest.mark.parity
def test_blackbody_srgb_matches_mitsuba_spectral():
    """Mitsuba 3's scalar_spectral render of a directly seen black body (its units, constants and CIE film)
    against the sRGB our variants use: within 4 standard errors + 0.3 % (the CIE normalisations differ by
    0.1 %: docs/variants.md). Measured: ratios 0.9997–1.0011 at 2700, 5000 and 9000 K."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_spectral")
    for T in (2700.0, 9000.0):
        sc = mi.load_dict({
            "type": "scene", "integrator": {"type": "path", "max_depth": 1},
            "sensor": {"type": "perspective", "fov": 30,
                       "to_world": mi.ScalarTransform4f().look_at(origin=[0, 0, 3], target=[0, 0, 0], up=[0, 1, 0]),
                       "film": {"type": "hdrfilm", "width": 8, "height": 8, "rfilter": {"type": "box"},
                                "pixel_format": "rgb"},
                       "sampler": {"type": "independent", "sample_count": 128}},
            "lamp": {"type": "rectangle", "to_world": mi.ScalarTransform4f().scale(5),
                     "emitter": {"type": "area", "radiance": {"type": "blackbody", "temperature": T}}}})
        img = np.array(mi.render(sc, seed=1)).reshape(-1, 3)
        m, se, ours = img.mean(0), img.std(0) / np.sqrt(len(img)), blackbody.srgb(T)
        assert np.all(np.abs(m - ours) <= 4 * se + 3e-3 * ours), (T, m, ours, se)
