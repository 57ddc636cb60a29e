"""Normal maps are read raw (no sRGB curve) by default: a flat texel (0.5, 0.5, 1) stored in a PNG
leaves the shading normal unperturbed (decoded as sRGB it would become (0.21, 0.21, 1), a 39° tilt).
An explicit ``raw: false`` (or ``srgb: true``) is honoured; other bitmaps of a PNG stay sRGB."""
import imageio.v3 as iio
import numpy as np
import pytest

import tirender
from tirender.io.images import from_srgb

from scenes import lit_plane

FLAT = 128 / 255                     # the 8-bit texel closest to 0.5


@pytest.fixture(scope="module")
def flat_png(tmp_path_factory):
    d = tmp_path_factory.mktemp("nm")
    a = np.zeros((4, 4, 3), np.uint8)
    a[..., :2], a[..., 2] = 128, 255
    iio.imwrite(d / "flat.png", a)
    return str(d / "flat.png")


def _scene(bsdf):
    d = lit_plane(point=(np.array([0.1, 0.2, 1.0]), 5.0), w=16)
    d["bsdfs"]["floor"] = bsdf
    return d


def _texels(sc, name):
    return np.asarray(sc.params[name], np.float64).reshape(-1, 3)


@pytest.mark.parametrize("form", ["sugar", "model"])
def test_normal_map_png_is_raw_by_default(flat_png, form):
    nm = {"type": "bitmap", "filename": flat_png}
    if form == "sugar":
        bsdf, name = {"type": "diffuse", "reflectance": 0.5, "normalmap": nm}, "floor.normalmap"
    else:
        bsdf, name = {"type": "normalmap", "normalmap": nm, "bsdf": {"type": "diffuse"}}, "floor.normalmap"
    t = _texels(tirender.load_scene(_scene(bsdf)), name)
    assert np.allclose(t, [FLAT, FLAT, 1.0], atol=1e-6), t[0]


@pytest.mark.parametrize("opt", [{"raw": False}, {"srgb": True}])
def test_explicit_srgb_is_honoured(flat_png, opt):
    bsdf = {"type": "diffuse", "normalmap": dict({"type": "bitmap", "filename": flat_png}, **opt)}
    t = _texels(tirender.load_scene(_scene(bsdf)), "floor.normalmap")
    srgb = float(from_srgb(np.array([FLAT], np.float32))[0])
    assert abs(srgb - 0.2158) < 1e-3
    assert np.allclose(t, [srgb, srgb, 1.0], atol=1e-6), t[0]


def test_other_pngs_stay_srgb(flat_png):
    bsdf = {"type": "diffuse", "reflectance": {"type": "bitmap", "filename": flat_png}}
    t = _texels(tirender.load_scene(_scene(bsdf)), "floor.reflectance")
    assert np.allclose(t[0, 0], from_srgb(np.array([FLAT], np.float32))[0], atol=1e-6)


def test_xml_normalmap_without_raw_is_raw(flat_png, tmp_path):
    xml = tmp_path / "nm.xml"
    xml.write_text(f"""<scene version="3.0.0">
    <shape type="rectangle" id="floor"><bsdf type="normalmap">
        <texture name="normalmap" type="bitmap"><string name="filename" value="{flat_png}"/></texture>
        <bsdf type="diffuse"/></bsdf></shape>
    <emitter type="point"><point name="position" x="0" y="0" z="1"/></emitter>
</scene>""")
    sc = tirender.load_scene(str(xml))
    name = [n for n in sc.params.keys() if n.endswith("normalmap")][0]
    assert np.allclose(_texels(sc, name), [FLAT, FLAT, 1.0], atol=1e-6)


def test_flat_png_renders_like_the_plain_bsdf(flat_png):
    plain = tirender.render(tirender.load_scene(_scene({"type": "diffuse", "reflectance": 0.5})), spp=16, seed=3)
    nm = {"type": "bitmap", "filename": flat_png}
    mapped = tirender.render(tirender.load_scene(_scene({"type": "diffuse", "reflectance": 0.5, "normalmap": nm})),
                             spp=16, seed=3)
    tilted = tirender.render(tirender.load_scene(_scene({"type": "diffuse", "reflectance": 0.5,
                                                         "normalmap": dict(nm, raw=False)})), spp=16, seed=3)
    m0, m1, m2 = (float(np.mean(x)) for x in (plain, mapped, tilted))
    # the 8-bit texel 128/255 tilts the normal by 0.3°: the images agree to well below 1 %
    assert abs(m1 / m0 - 1) < 3e-3, (m0, m1)
    assert np.abs(mapped - plain).max() < 0.02 * plain.max()
    # decoded as sRGB, the same texel is a 39° tilt: a visibly different image
    assert abs(m2 / m0 - 1) > 0.05, (m0, m2)
