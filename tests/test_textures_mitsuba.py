"""Mitsuba's textures with Mitsuba's meaning, value by value against Mitsuba 3 (pip ``mitsuba``, scalar variants;
skipped without it) and their adjoints against central differences in float64 (a child process):

* bitmap: wrap_mode repeat / mirror / clamp × filter_type nearest / bilinear with a to_uv transform (Dr.Jit's
  texel-centre conventions and per-texel wrapping, textures.py), an RGB bitmap in a scalar slot (its luminance),
  the ``format`` precisions;
* rawconstant (rgb, and the spectral variant: a flat value, no upsampling; a 3-vector refused in a colour slot,
  read as is in a normal map);
* the ``volume`` texture: a gridvolume read at the shading point's world position through to_world (and
  use_grid_bbox), every wrap mode × filter; a heterogeneous medium's gridvolume placement (its clip box and
  lookups, as Mitsuba's Volume::bbox and eval);
* a whole-render PRB gradient of a volume texture's voxels against finite differences (correlated seeds).
"""
import json
import os
import sys

import numpy as np
import pytest
import taichi as ti

import tirender
from tirender import variants
from tirender.bsdfs.base import BsdfCtx, slot_float, slot_rgb, slot_rgb_adjoint, slot_vec3
from tirender.core.math import vec2, vec3
from tirender.errors import ConfigError
from tirender.media.volfile import write_vol

sys.path.insert(0, os.path.dirname(__file__))
from gradcheck_util import assert_agree, projected_gradients  # noqa: E402
from scenes import camera  # noqa: E402

WRAPS = ("repeat", "mirror", "clamp")
FILTERS = ("nearest", "bilinear")
TO_UV = np.array([[1.7, 0.4, -0.3], [-0.25, 2.2, 0.15], [0.0, 0.0, 1.0]])     # Mitsuba's 3x3 to_uv
VOL_TO_WORLD = np.array([[0.0, -1.6, 0.0, 0.3], [1.2, 0.0, 0.0, -0.2], [0.0, 0.0, 0.9, 0.1], [0, 0, 0, 1.0]])


def _kernel(kind):
    """A kernel reading texture slot k of BSDF row b at (uv, p) rows of inp -> out (N, lanes), through the slot
    functions the BSDFs use (kind: 'rgb' colour slot, 'vec3' data slot, 'float' scalar slot)."""
    @ti.kernel
    def k(st: ti.template(), b: ti.i32, slot: ti.i32, inp: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(inp.shape[0]):
            lam = variants.spec(0.0)
            for j in ti.static(range(variants.lanes())):
                lam[j] = inp[i, 5 + j]
            ctx = BsdfCtx(b=b, uv=vec2(inp[i, 0], inp[i, 1]), p=vec3(inp[i, 2], inp[i, 3], inp[i, 4]), lam=lam)
            if ti.static(kind == "rgb"):
                v = slot_rgb(st, ctx, slot)
                for j in ti.static(range(variants.lanes())):
                    out[i, j] = v[j]
            elif ti.static(kind == "vec3"):
                v = slot_vec3(st, ctx, slot)
                for j in ti.static(range(3)):
                    out[i, j] = v[j]
            else:
                out[i, 0] = slot_float(st, ctx, slot)
    return k


_KERNELS = {}


def read_slot(sc, bsdf, kind="rgb", uv=None, p=None, lam=None, key=None):
    """Texture slot `key` (default: the first) of BSDF `bsdf` (an id of scene sc) at n points (uv (n, 2), p (n, 3),
    wavelengths (n, lanes)) -> (n, lanes) float64."""
    row = sc.desc.bsdfs[sc.desc.bsdf_ids[bsdf]]
    slot = 0 if key is None else [k.name for k in row.model.KEYS if k.kind == "texture"].index(key)
    n = len(uv if uv is not None else p)
    inp = np.zeros((n, 5 + variants.lanes()), np.float32)
    if uv is not None:
        inp[:, :2] = uv
    if p is not None:
        inp[:, 2:5] = p
    if lam is not None:
        inp[:, 5:] = lam
    if kind not in _KERNELS:
        _KERNELS[kind] = _kernel(kind)
    out = np.zeros((n, max(variants.lanes(), 3)), np.float32)
    _KERNELS[kind](sc.bind(), sc.desc.bsdf_ids[bsdf], slot, inp, out)
    return out.astype(np.float64)


def _tmp():
    return os.environ.get("TIRENDER_TEST_OUT") or __import__("tempfile").mkdtemp()


def _uv4(m3):
    """Mitsuba's 3x3 to_uv as tirender's 4x4 transform (u, v in rows / columns 0, 1; the translation in 3)."""
    m = np.eye(4)
    m[:2, :2], m[:2, 3] = m3[:2, :2], m3[:2, 2]
    return m.tolist()


def _mi(variant="scalar_rgb"):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant(variant)
    return mi


def _mi_si(mi, uv=(0.0, 0.0), p=(0.0, 0.0, 0.0), lam=None):
    import drjit as dr
    si = dr.zeros(mi.SurfaceInteraction3f)
    si.uv = mi.Point2f(float(uv[0]), float(uv[1]))
    si.p = mi.Point3f(*[float(x) for x in p])
    if lam is not None:
        si.wavelengths = mi.Spectrum([float(x) for x in lam])
    return si


# ----------------------------------------------------------------------------------------------- bitmap
@pytest.fixture(scope="module")
def bitmaps(tmp_path_factory):
    d = tmp_path_factory.mktemp("bitmaps")
    img = np.random.default_rng(5).uniform(0.0, 1.0, (5, 7, 3)).astype(np.float32)
    np.save(d / "img.npy", img)
    bs = {f"{w}_{f}": {"type": "diffuse", "reflectance": {"type": "bitmap", "data": str(d / "img.npy"),
                                                         "wrap_mode": w, "filter_type": f, "to_uv": _uv4(TO_UV)}}
          for w in WRAPS for f in FILTERS}
    bs["rough"] = {"type": "roughconductor", "roughness": {"type": "bitmap", "data": str(d / "img.npy"),
                                                          "wrap_mode": "mirror"}}
    sc = tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)], "bsdfs": bs,
                              "shapes": [{"type": "rectangle", "bsdf": "repeat_nearest"}]})
    return sc, img


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("filt", FILTERS)
def test_bitmap_lookups_match_mitsuba(bitmaps, wrap, filt):
    """2000 uv points over [-2.3, 2.3]^2 (every wrap period of both axes, both mirror orientations) through a
    non-trivial to_uv: nearest lookups equal Mitsuba's texel for texel, bilinear ones to float32 rounding."""
    sc, img = bitmaps
    mi = _mi()
    tex = mi.load_dict({"type": "bitmap", "bitmap": mi.Bitmap(img), "raw": True, "wrap_mode": wrap,
                        "filter_type": filt, "to_uv": mi.ScalarTransform3f(TO_UV)})
    uv = np.random.default_rng(1).uniform(-2.3, 2.3, (2000, 2)).astype(np.float32)
    ours = read_slot(sc, f"{wrap}_{filt}", uv=uv)[:, :3]
    ref = np.array([tex.eval(_mi_si(mi, uv=q)) for q in uv], np.float64)
    err = np.abs(ours - ref).max(axis=1)
    if filt == "nearest":   # a texel boundary within an ulp of the to_uv product may round the other way
        assert np.mean(err == 0.0) >= 0.999, (wrap, filt, np.sort(err)[-5:])
    else:
        assert err.max() < 1e-5, (wrap, filt, err.max())   # float32 p = u W - 0.5 (fused in Dr.Jit) at |p| ~ 40


def test_rgb_bitmap_in_scalar_slot_is_its_luminance(bitmaps):
    """Mitsuba's eval_1 of an RGB bitmap: the luminance of the interpolated RGB (here a mirrored roughness)."""
    sc, img = bitmaps
    mi = _mi()
    tex = mi.load_dict({"type": "bitmap", "bitmap": mi.Bitmap(img), "raw": True, "wrap_mode": "mirror"})
    uv = np.random.default_rng(2).uniform(-1.5, 1.5, (300, 2)).astype(np.float32)
    ours = read_slot(sc, "rough", "float", uv=uv, key="roughness")[:, 0]
    ref = np.array([tex.eval_1(_mi_si(mi, uv=q)) for q in uv])
    assert np.abs(ours - ref).max() < 2e-6


@pytest.mark.parametrize("fmt, ext", [("float16", "exr"), ("uint8", "png"), ("auto", "png")])
def test_bitmap_format_and_srgb(tmp_path, fmt, ext):
    """Mitsuba's ``format`` (the texels as its storage holds them: float16 half precision; uint8 and auto of an
    8-bit file its bytes) and its sRGB rule (an 8-bit PNG is decoded unless raw), against Mitsuba's lookups at the
    texel centres."""
    mi = _mi()
    rng = np.random.default_rng(3)
    if ext == "exr":
        img = rng.uniform(0.0, 1.0, (4, 6, 3)).astype(np.float32)
        from tirender.io.exr import write_exr
        write_exr(str(tmp_path / "t.exr"), img)
    else:
        import imageio.v3 as iio
        img = rng.integers(0, 256, (4, 6, 3)).astype(np.uint8)
        iio.imwrite(str(tmp_path / "t.png"), img)
    f = str(tmp_path / f"t.{ext}")
    tex = mi.load_dict({"type": "bitmap", "filename": f, "format": fmt, "filter_type": "nearest"})
    ref = np.array([tex.eval(_mi_si(mi, uv=((x + 0.5) / 6, (y + 0.5) / 4))) for y in range(4) for x in range(6)])
    sc = tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                              "bsdfs": {"b": {"type": "diffuse", "reflectance": {
                                  "type": "bitmap", "filename": f, "format": fmt, "raw": False}}},
                              "shapes": [{"type": "rectangle", "bsdf": "b"}]})
    ours = sc.params["b.reflectance"].reshape(-1, 3)
    assert np.abs(ours - ref).max() <= 1e-6, np.abs(ours - ref).max()    # sRGB curves: a few ulp apart
    if ext == "exr":
        assert not np.array_equal(ours, img.reshape(-1, 3))     # rounded
        with pytest.raises(ConfigError, match="dithering"):
            tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                                 "bsdfs": {"b": {"type": "diffuse", "reflectance": {
                                     "type": "bitmap", "filename": f, "format": "uint8"}}},
                                 "shapes": [{"type": "rectangle", "bsdf": "b"}]})


# ----------------------------------------------------------------------------------------------- rawconstant
def _raw_scene(variant):
    bs = {"grey": {"type": "diffuse", "reflectance": {"type": "rawconstant", "value": 0.37}},
          "nm": {"type": "normalmap", "normalmap": {"type": "rawconstant", "value": [0.5, 0.25, 1.0]},
                 "bsdf": {"type": "diffuse"}}}
    if variant == "rgb":
        bs["col"] = {"type": "diffuse", "reflectance": {"type": "rawconstant", "value": [0.9, 0.1, 0.4]}}
    return tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)], "bsdfs": bs,
                                "shapes": [{"type": "rectangle", "bsdf": "grey"}]})


def test_rawconstant_rgb_matches_mitsuba():
    mi = _mi()
    sc = _raw_scene("rgb")
    uv = np.random.default_rng(0).uniform(0, 1, (4, 2))
    for bsdf, kind, value in (("grey", "rgb", 0.37), ("col", "rgb", [0.9, 0.1, 0.4]), ("nm", "vec3", [0.5, 0.25, 1.0])):
        tex = mi.load_dict({"type": "rawconstant", "value": value})
        ref = np.array(tex.eval(_mi_si(mi)) if kind == "rgb" else tex.eval_3(_mi_si(mi)), np.float32)
        ours = read_slot(sc, bsdf, kind, uv=uv)[:, :3]
        assert np.array_equal(ours, np.broadcast_to(ref, ours.shape)), (bsdf, ours[0], ref)


def test_spectral_textures_match_mitsuba(tmp_path):
    """In the spectral variant (a child process), against Mitsuba's scalar_spectral evals at the same wavelengths:
    a float rawconstant is that value at every wavelength (not the spectral upsampling of the grey it would be as
    <rgb>); a 3-vector is read as is in a normal map (eval_3) and refused in a colour slot, as Mitsuba's eval throws;
    an RGB bitmap interpolates its texels' upsampled spectra (BitmapTexture's interpolate_spectral), a volume
    texture and a medium's σ and albedo grids their voxels' spectra and scales (GridVolume's interpolate_spectral) —
    not the spectrum of the interpolated RGB, which differs by ~0.07 on average here."""
    mi = _mi("scalar_spectral")
    from child_util import run_child
    r = run_child(__file__, ["--child", "spectral"], tmp_path)
    lam = np.array(r["lam"])
    tex = mi.load_dict({"type": "rawconstant", "value": 0.37})
    ref = np.array([tex.eval(_mi_si(mi, lam=row)) for row in lam])
    assert np.array_equal(np.array(r["grey"], np.float32), ref.astype(np.float32)), (r["grey"][0], ref[0])
    assert np.abs(np.array(r["grey_as_rgb"]) - ref).max() > 1e-5     # what upsampling would have given
    assert np.allclose(r["nm"], np.array(mi.load_dict({"type": "rawconstant", "value": [0.5, 0.25, 1.0]}).eval_3(
        _mi_si(mi))), atol=0)
    with pytest.raises(Exception):
        mi.load_dict({"type": "rawconstant", "value": mi.ScalarVector3f(0.9, 0.1, 0.4)}).eval(_mi_si(mi))
    assert "3-vector rawconstant" in r["refused"], r["refused"]
    d = r["dir"]
    uv, p = np.array(r["uv"]), np.array(r["p"])
    bm = mi.load_dict({"type": "bitmap", "bitmap": mi.Bitmap(np.load(os.path.join(d, "img.npy"))), "raw": False,
                       "wrap_mode": "mirror", "to_uv": mi.ScalarTransform3f(TO_UV)})
    vol = {"type": "gridvolume", "filename": os.path.join(d, "g3.vol"), "to_world": mi.ScalarTransform4f(VOL_TO_WORLD)}
    vt = mi.load_dict({"type": "volume", "volume": vol})
    sg = mi.load_dict(vol)
    it = mi.Interaction3f()
    refs = {"bitmap": [], "volume": [], "sigma": [], "albedo": []}
    for i in range(len(lam)):
        refs["bitmap"].append(bm.eval(_mi_si(mi, uv=uv[i], lam=lam[i])))
        refs["volume"].append(vt.eval(_mi_si(mi, p=p[i], lam=lam[i])))
        it.p, it.wavelengths = mi.Point3f(*[float(x) for x in p[i]]), mi.Spectrum([float(x) for x in lam[i]])
        refs["sigma"].append(sg.eval(it))
        refs["albedo"].append(sg.eval(it))        # a 3-channel albedo grid: lifted as σ's (Mitsuba's gridvolume)
    for name, v in refs.items():
        err = np.abs(np.array(r[name]) - np.array(v))
        # the two renderers' sRGB upsampling tables differ by up to ~0.015 for some colours (near white)
        assert err.mean() < 1e-3 and err.max() < 0.03, (name, err.mean(), err.max())


def _spectral_child():
    tirender.set_variant("spectral")
    sc = _raw_scene("spectral")
    rng = np.random.default_rng(4)
    lam = rng.uniform(360.0, 830.0, (64, variants.lanes())).astype(np.float32)
    grey = read_slot(sc, "grey", uv=np.zeros((64, 2)), lam=lam)[:, :4]
    nm = read_slot(sc, "nm", "vec3", uv=np.zeros((1, 2)))[0, :3]
    as_rgb = tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                                  "bsdfs": {"g": {"type": "diffuse", "reflectance": 0.37}},
                                  "shapes": [{"type": "rectangle", "bsdf": "g"}]})
    grey_rgb = read_slot(as_rgb, "g", uv=np.zeros((64, 2)), lam=lam)[:, :4]
    try:
        tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                             "bsdfs": {"c": {"type": "diffuse", "reflectance": {"type": "rawconstant",
                                                                                "value": [0.9, 0.1, 0.4]}}},
                             "shapes": [{"type": "rectangle", "bsdf": "c"}]})
        refused = "no error"
    except ConfigError as e:
        refused = str(e)
    # 3-channel colour textures and a medium's 3-channel σ grid
    d = _tmp()
    np.save(os.path.join(d, "img.npy"), np.random.default_rng(5).uniform(0.0, 1.0, (5, 7, 3)).astype(np.float32))
    write_vol(os.path.join(d, "g3.vol"), _grid(3))
    grid = {"type": "grid", "filename": os.path.join(d, "g3.vol"), "to_world": VOL_TO_WORLD.tolist()}
    sc = tirender.load_scene({
        "sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
        "bsdfs": {"b": {"type": "diffuse", "reflectance": {"type": "bitmap", "data": os.path.join(d, "img.npy"),
                                                           "wrap_mode": "mirror", "to_uv": _uv4(TO_UV)}},
                  "v": {"type": "diffuse", "reflectance": {"type": "volume", "volume": grid}}},
        "media": {"fog": {"type": "heterogeneous", "density": grid, "albedo": grid}},
        "shapes": [{"type": "cube", "bsdf": "v", "interior": "fog"}, {"type": "rectangle", "bsdf": "b"}]})
    uv = rng.uniform(-1.5, 1.5, (64, 2)).astype(np.float32)
    loc = rng.uniform(-0.3, 1.3, (64, 3))
    p = (loc @ VOL_TO_WORLD[:3, :3].T + VOL_TO_WORLD[:3, 3]).astype(np.float32)
    from tirender.media.medium import coefficients

    @ti.kernel
    def sigma(st: ti.template(), p: ti.types.ndarray(), lam: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(p.shape[0]):
            lanes = variants.spec(0.0)
            for j in ti.static(range(variants.lanes())):
                lanes[j] = lam[i, j]
            s, a = coefficients(st, 0, vec3(p[i, 0], p[i, 1], p[i, 2]), lanes)
            for j in ti.static(range(variants.lanes())):
                out[i, j] = s[j]
                out[i, ti.static(variants.lanes()) + j] = a[j]

    sig = np.zeros((64, 2 * variants.lanes()), np.float32)
    sigma(sc.bind(), p, lam, sig)
    return {"lam": lam.tolist(), "grey": grey.tolist(), "grey_as_rgb": grey_rgb.tolist(), "nm": nm.tolist(),
            "refused": refused, "dir": d, "uv": uv.tolist(), "p": p.tolist(),
            "bitmap": read_slot(sc, "b", uv=uv, lam=lam)[:, :4].tolist(),
            "volume": read_slot(sc, "v", p=p, lam=lam)[:, :4].tolist(), "sigma": sig[:, :variants.lanes()].tolist(), "albedo": sig[:, variants.lanes():].tolist()}


# ----------------------------------------------------------------------------------------------- volume texture
def _grid(channels, seed=6):
    return np.random.default_rng(seed).uniform(0.05, 0.95, (3, 4, 5, channels)).astype(np.float32)


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    d = tmp_path_factory.mktemp("volumes")
    for c in (1, 3):
        write_vol(str(d / f"g{c}.vol"), _grid(c), bbox_min=(-0.5, 0.2, 0.0), bbox_max=(1.5, 0.7, 2.0))
    bs = {}
    for i, (w, f) in enumerate((w, f) for w in WRAPS for f in ("nearest", "trilinear")):
        c = 3 if i % 2 == 0 else 1
        bs[f"{w}_{f}"] = {"type": "diffuse", "reflectance": {"type": "volume", "volume": {
            "type": "grid", "filename": str(d / f"g{c}.vol"), "to_world": VOL_TO_WORLD.tolist(), "wrap_mode": w,
            "filter_type": f}}}
    bs["bbox"] = {"type": "diffuse", "reflectance": {"type": "volume", "volume": {
        "type": "grid", "filename": str(d / "g3.vol"), "to_world": VOL_TO_WORLD.tolist(), "use_grid_bbox": True}}}
    bs["rough"] = {"type": "roughconductor", "roughness": {"type": "volume", "volume": {
        "type": "grid", "filename": str(d / "g3.vol")}}}
    sc = tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)], "bsdfs": bs,
                              "shapes": [{"type": "rectangle", "bsdf": "bbox"}]})
    return sc, d


def _mi_volume_texture(mi, d, name, **kw):
    return mi.load_dict({"type": "volume", "volume": dict({"type": "gridvolume", "filename": str(d / name)}, **kw)})


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("filt", ["nearest", "trilinear"])
def test_volume_texture_matches_mitsuba(volumes, wrap, filt):
    """A BSDF slot reading a gridvolume (1 or 3 channels) at 600 world points whose local coordinates span
    [-1.3, 2.3]^3 (outside the grid: the wrap mode), through a rotating, scaling to_world."""
    sc, d = volumes
    mi = _mi()
    c = 3 if (WRAPS.index(wrap) * 2 + ("nearest", "trilinear").index(filt)) % 2 == 0 else 1
    tex = _mi_volume_texture(mi, d, f"g{c}.vol", to_world=mi.ScalarTransform4f(VOL_TO_WORLD), wrap_mode=wrap,
                             filter_type=filt)
    loc = np.random.default_rng(7).uniform(-1.3, 2.3, (600, 3))
    p = (loc @ VOL_TO_WORLD[:3, :3].T + VOL_TO_WORLD[:3, 3]).astype(np.float32)
    ours = read_slot(sc, f"{wrap}_{filt}", p=p)[:, :3]
    ref = np.array([tex.eval(_mi_si(mi, p=q)) for q in p], np.float64).reshape(len(p), -1)
    err = np.abs(ours - ref).max(axis=1)
    if filt == "nearest":
        assert np.mean(err == 0.0) >= 0.995, np.sort(err)[-5:]
    else:
        assert err.max() < 1e-5, err.max()


def test_volume_texture_grid_bbox_and_scalar_slot(volumes):
    """use_grid_bbox (the .vol header's box, through to_world), and a 3-channel grid in a scalar slot (the unit
    cube, no to_world): Mitsuba's eval and eval_1 (luminance)."""
    sc, d = volumes
    mi = _mi()
    p = np.random.default_rng(8).uniform(-1.5, 2.5, (400, 3)).astype(np.float32)
    tex = _mi_volume_texture(mi, d, "g3.vol", to_world=mi.ScalarTransform4f(VOL_TO_WORLD), use_grid_bbox=True)
    ref = np.array([tex.eval(_mi_si(mi, p=q)) for q in p])
    assert np.abs(read_slot(sc, "bbox", p=p)[:, :3] - ref).max() < 1e-5
    tex = _mi_volume_texture(mi, d, "g3.vol")
    ref = np.array([tex.eval_1(_mi_si(mi, p=q)) for q in p])
    assert np.abs(read_slot(sc, "rough", "float", p=p, key="roughness")[:, 0] - ref).max() < 1e-5


def test_heterogeneous_gridvolume_placement_matches_mitsuba(tmp_path):
    """An XML heterogeneous medium whose sigma_t gridvolume has a rotating to_world and use_grid_bbox and whose
    albedo grid has a different to_world: the medium's clip box is Mitsuba's sigma_t bbox(), and both
    coefficients at world points are Mitsuba's volume evals (sigma_t times scale)."""
    mi = _mi()
    from tirender.media.grid import volume_eval
    write_vol(str(tmp_path / "s.vol"), _grid(1, 9) * 3, bbox_min=(0.0, -1.0, 0.5), bbox_max=(2.0, 1.0, 1.5))
    write_vol(str(tmp_path / "a.vol"), _grid(3, 10), bbox_min=(0, 0, 0), bbox_max=(1, 1, 1))
    xml = """<scene version="3.0.0">
  <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/><integer name="height" value="4"/>
  </film></sensor>
  <medium type="heterogeneous" id="fog"><float name="scale" value="2.5"/>
    <volume name="sigma_t" type="gridvolume"><string name="filename" value="s.vol"/>
      <boolean name="use_grid_bbox" value="true"/>
      <transform name="to_world"><rotate y="1" angle="30"/><scale value="0.8"/><translate x="0.2"/></transform>
      <string name="wrap_mode" value="mirror"/></volume>
    <volume name="albedo" type="gridvolume"><string name="filename" value="a.vol"/>
      <transform name="to_world"><scale x="2" y="1.5" z="1"/><translate x="-1" y="-0.5" z="-0.2"/></transform>
      <string name="filter_type" value="nearest"/></volume>
  </medium>
  <shape type="cube"><bsdf type="null"/><ref name="interior" id="fog"/></shape>
</scene>"""
    (tmp_path / "s.xml").write_text(xml)
    sc = tirender.load_scene(str(tmp_path / "s.xml"))
    params = mi.traverse(mi.load_file(str(tmp_path / "s.xml")))
    sig = mi.load_dict({"type": "gridvolume", "filename": str(tmp_path / "s.vol"), "use_grid_bbox": True,
                        "wrap_mode": "mirror", "to_world": mi.ScalarTransform4f().translate([0.2, 0, 0]).scale(0.8)
                        .rotate([0, 1, 0], 30)})
    alb = mi.load_dict({"type": "gridvolume", "filename": str(tmp_path / "a.vol"), "filter_type": "nearest",
                        "to_world": mi.ScalarTransform4f().translate([-1, -0.5, -0.2]).scale([2, 1.5, 1])})
    assert "fog.sigma_t.data" in params.keys() and "fog.albedo.data" in params.keys()
    box = sig.bbox()
    m = sc.desc.media[0]
    assert np.allclose(m.bbox_min, np.array(box.min), atol=1e-5) and np.allclose(m.bbox_max, np.array(box.max),
                                                                               atol=1e-5), (m, box)

    @ti.kernel
    def k(st: ti.template(), ts: ti.i32, ta: ti.i32, p: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(p.shape[0]):
            q = vec3(p[i, 0], p[i, 1], p[i, 2])
            s = volume_eval(st, ts, q)
            a = volume_eval(st, ta, q)
            out[i, 0] = s[0]
            for j in ti.static(range(3)):
                out[i, 1 + j] = a[j]

    p = np.random.default_rng(11).uniform(-1.5, 1.5, (500, 3)).astype(np.float32)
    out = np.zeros((500, 4), np.float32)
    k(sc.bind(), m.sigma, m.albedo, p, out)
    it = mi.Interaction3f()
    s_ref, a_ref = [], []
    for q in p:
        it.p = mi.Point3f(*[float(x) for x in q])
        s_ref.append(sig.eval_1(it))
        a_ref.append(np.array(alb.eval(it)))
    assert np.abs(out[:, 0] - np.array(s_ref)).max() < 1e-5
    assert np.mean(np.abs(out[:, 1:] - np.array(a_ref)).max(axis=1) == 0.0) >= 0.995
    assert m.scale == 2.5


# ----------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("spec, words", [
    ({"type": "bitmap", "width": 2, "height": 2, "value": 0.5, "wrap_mode": "border"}, "unknown wrap mode 'border'"),
    ({"type": "bitmap", "width": 2, "height": 2, "value": 0.5, "format": "uint16"}, "unknown format"),
    ({"type": "rawconstant"}, "needs a value"),
    ({"type": "volume", "volume": {"type": "grid", "resolution": 2, "wrap_mode": "border"}}, "wrap_mode"),
    ({"type": "volume", "volume": {"type": "grid", "resolution": 2, "use_grid_bbox": True}}, "use_grid_bbox needs"),
    ({"type": "volume", "volume": {"type": "grid", "resolution": 2, "filter_type": "cubic"}}, "filter_type"),
    ({"type": "volume", "volume": {"type": "grid", "resolution": 2, "value": 2.0}}, "must lie in [0, 1]"),
    ({"type": "volume", "colour": 1}, "unknown key 'colour'"),
])
def test_bad_textures_one_line(spec, words):
    with pytest.raises(ConfigError) as e:
        tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                             "bsdfs": {"b": {"type": "diffuse", "reflectance": spec}},
                             "shapes": [{"type": "rectangle", "bsdf": "b"}]})
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_volume_texture_only_in_bsdf_slots():
    """An area emitter reads its radiance at uv: a volume texture there is refused (one line)."""
    with pytest.raises(ConfigError, match="only BSDF slots"):
        tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                             "shapes": [{"type": "rectangle", "emitter": {"type": "area", "radiance": {
                                 "type": "volume", "volume": {"type": "grid", "resolution": 2, "value": 1.0}}}}]})


def test_bumpmap_refuses_volume_texture():
    with pytest.raises(ConfigError, match="no uv gradient"):
        tirender.load_scene({"sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)],
                             "bsdfs": {"b": {"type": "bumpmap", "height": {"type": "volume", "volume": 0.5},
                                             "bsdf": {"type": "diffuse"}}},
                             "shapes": [{"type": "rectangle", "bsdf": "b"}]})


# ----------------------------------------------------------------------------------------------- adjoints (f64)
def test_adjoints_vs_finite_differences_f64(tmp_path):
    """Every new adjoint against central differences of its primal, in a float64 child process: bitmap lookups
    (mirror and clamp, nearest and bilinear, to_uv), volume textures (each wrap mode, nearest and trilinear,
    to_world), a rawconstant, and medium coefficients through a gridvolume's to_world."""
    from gradcheck_util import f64_child_report
    r = f64_child_report(__file__, "--f64")
    for name, err in r.items():
        assert err < 1e-7, (name, err)
    assert len(r) >= 10


def _f64_child():
    from tirender.launch import read_gradients, reset_gradients
    from tirender.core.fixed_point import grad_scale_for
    from tirender.media.medium import coefficients, coefficients_adjoint
    d = _tmp()
    write_vol(os.path.join(d, "g.vol"), _grid(3), bbox_min=(0, 0, 0), bbox_max=(1, 1, 1))
    img = np.random.default_rng(5).uniform(0.1, 0.9, (3, 4, 3))
    np.save(os.path.join(d, "img.npy"), img)
    bs = {}
    for w in ("mirror", "clamp", "repeat"):
        for f in ("nearest", "bilinear"):
            bs[f"bm_{w}_{f}"] = {"type": "diffuse", "reflectance": {
                "type": "bitmap", "data": os.path.join(d, "img.npy"), "wrap_mode": w, "filter_type": f,
                "to_uv": _uv4(TO_UV)}}
            bs[f"vol_{w}_{f}"] = {"type": "diffuse", "reflectance": {"type": "volume", "volume": {
                "type": "grid", "filename": os.path.join(d, "g.vol"), "to_world": VOL_TO_WORLD.tolist(),
                "wrap_mode": w, "filter_type": "trilinear" if f == "bilinear" else f}}}
    bs["raw"] = {"type": "diffuse", "reflectance": {"type": "rawconstant", "value": 0.4}}
    sc = tirender.load_scene({
        "sensors": [camera([0, 0, 3], [0, 0, 0], w=4, h=4)], "bsdfs": bs,
        "media": {"fog": {"type": "heterogeneous", "scale": 2.0,
                          "density": {"type": "grid", "filename": os.path.join(d, "g.vol"),
                                      "to_world": VOL_TO_WORLD.tolist(), "wrap_mode": "mirror"},
                          "albedo": {"type": "grid", "filename": os.path.join(d, "g.vol"), "wrap_mode": "repeat"}}},
        "shapes": [{"type": "cube", "bsdf": {"type": "null"}, "interior": "fog"}]})
    rng = np.random.default_rng(0)
    n = 24
    uv = rng.uniform(-1.7, 1.7, (n, 2))
    loc = rng.uniform(-1.3, 2.3, (n, 3))
    p = loc @ VOL_TO_WORLD[:3, :3].T + VOL_TO_WORLD[:3, 3]
    inp = np.concatenate([uv, p, rng.uniform(400.0, 700.0, (n, variants.lanes()))], 1)
    wts = rng.uniform(-1, 1, (n, 2 * variants.lanes()))

    @ti.func
    def lanes(a: ti.template(), i, k0):
        v = variants.spec(0.0)
        for j in ti.static(range(variants.lanes())):
            v[j] = a[i, k0 + j]
        return v

    @ti.func
    def ctx_of(b, inp: ti.template(), i):
        return BsdfCtx(b=b, uv=vec2(inp[i, 0], inp[i, 1]), p=vec3(inp[i, 2], inp[i, 3], inp[i, 4]),
                       lam=lanes(inp, i, 5))

    @ti.kernel
    def primal(st: ti.template(), b: ti.i32, inp: ti.types.ndarray(), w: ti.types.ndarray()) -> float:
        s = 0.0
        for i in range(inp.shape[0]):
            s += slot_rgb(st, ctx_of(b, inp, i), 0).dot(lanes(w, i, 0))
        return s

    @ti.kernel
    def adjoint(st: ti.template(), b: ti.i32, inp: ti.types.ndarray(), w: ti.types.ndarray()):
        for i in range(inp.shape[0]):
            slot_rgb_adjoint(st, ctx_of(b, inp, i), 0, lanes(w, i, 0))

    @ti.kernel
    def med_primal(st: ti.template(), inp: ti.types.ndarray(), w: ti.types.ndarray()) -> float:
        s = 0.0
        for i in range(inp.shape[0]):
            sig, alb = coefficients(st, 0, vec3(inp[i, 2], inp[i, 3], inp[i, 4]), lanes(inp, i, 5))
            s += sig.dot(lanes(w, i, 0)) + alb.dot(lanes(w, i, variants.lanes()))
        return s

    @ti.kernel
    def med_adjoint(st: ti.template(), inp: ti.types.ndarray(), w: ti.types.ndarray()):
        for i in range(inp.shape[0]):
            coefficients_adjoint(st, 0, vec3(inp[i, 2], inp[i, 3], inp[i, 4]), lanes(inp, i, 5), lanes(w, i, 0),
                                 lanes(w, i, variants.lanes()))

    def check(name, f, fa):
        """max |adjoint - central differences| / max |fd| for parameter `name` over 16 of its values (the 8 largest
        gradients and 8 others; the f64 pool perturbed in place: the host's parameter copy is float32)."""
        st = sc.bind()
        reset_gradients(st, grad_scale_for(1.0))
        fa(st)
        g = read_gradients(sc, st)[name].reshape(-1)
        info = sc.params.info(name)
        idx = np.unique(np.concatenate([np.argsort(-np.abs(g))[:8], rng.choice(info.size, min(8, info.size))]))
        fd = np.zeros(len(idx))
        h = 1e-6
        for j, i in enumerate(idx):
            x0 = st.pool[info.offset + i]
            for s in (1, -1):
                st.pool[info.offset + i] = x0 + s * h
                fd[j] += s * f(st) / (2 * h)
            st.pool[info.offset + i] = x0
        return float(np.abs(g[idx] - fd).max() / max(np.abs(fd).max(), 1e-12))

    out = {}
    for b in bs:
        row = sc.desc.bsdf_ids[b]
        out[b] = check(f"{b}.reflectance", lambda st: primal(st, row, inp, wts),
                       lambda st: adjoint(st, row, inp, wts))
    for name in ("fog.density", "fog.albedo"):
        out[name] = check(name, lambda st: med_primal(st, inp, wts), lambda st: med_adjoint(st, inp, wts))
    return out


# ----------------------------------------------------------------------------------------------- renders
@pytest.mark.slow
def test_prb_matches_fd_volume_texture(tmp_path):
    """A whole render's PRB gradient along a direction in a volume texture's voxels (a floor textured by a
    rotated gridvolume, trilinear, mirror) against finite differences with correlated random numbers."""
    write_vol(str(tmp_path / "g.vol"), _grid(3), bbox_min=(0, 0, 0), bbox_max=(1, 1, 1))
    to_world = [{"scale": [1.5, 1.0, 1.5]}, {"rotate": {"axis": [0, 1, 0], "angle": 25}},
                {"translate": [-0.7, -0.5, -0.7]}]
    sc = tirender.load_scene({
        "integrator": {"type": "path", "max_depth": 3},
        "sensors": [camera([0, 1.2, 3.0], [0, -0.2, 0], w=16, h=16)],
        "shapes": [{"id": "floor", "type": "rectangle", "to_world": [{"scale": [2, 2, 1]}, {"rotate": {
            "axis": [1, 0, 0], "angle": -90}}, {"translate": [0, -0.5, 0]}],
            "bsdf": {"type": "diffuse", "reflectance": {"type": "volume", "volume": {
                "type": "grid", "filename": str(tmp_path / "g.vol"), "to_world": to_world, "wrap_mode": "mirror"}}}},
            {"id": "light", "type": "rectangle", "to_world": [{"rotate": {"axis": [1, 0, 0], "angle": 90}},
                                                               {"translate": [0, 1.5, 0]}],
             "emitter": {"type": "area", "radiance": 6.0}}]})
    rng = np.random.default_rng(2)
    w = rng.uniform(0, 1, (16, 16, 3)).astype(np.float32)
    u = rng.uniform(0.5, 1.0, sc.params["floor.reflectance"].shape).astype(np.float32)
    g, f = projected_gradients(sc, "floor.reflectance", u, w, 16, range(6), range(6), 0.02)
    assert_agree(g, f, "floor.reflectance (volume texture)")


if __name__ == "__main__" and sys.argv[1:] == ["--f64"]:       # gradcheck_util.f64_child_report (f64 init'd)
    tirender.set_variant("spectral")       # the spectral lifts' adjoints too (unbounded, flat, reflectance)
    print(json.dumps(_f64_child()))
elif __name__ == "__main__" and sys.argv[1:] == ["--child", "spectral"]:
    tirender.backend.init("cpu")
    print(json.dumps(_spectral_child()))
