"""Every image format Mitsuba 3 reads (PNG, JPEG, OpenEXR, Radiance .hdr, PFM, PPM, BMP, TGA), read by
tirender (tirender.io.images.load_image, through OpenImageIO) to the values Mitsuba's own bitmap texture
holds for the same file: written here with OpenImageIO (8/16-bit, float, grey, grey+alpha, RGBA where the
format allows), then compared texel by texel with ``mi.load_dict({"type": "bitmap", "filter_type":
"nearest", "raw": ...})`` evaluated at the texel centres (scalar_rgb). Also the bad files (one ConfigError
line, nothing on stderr), the formats Mitsuba reads differently from their definition (refused), and an
envmap from a Radiance .hdr file (the tutorials' lego scene's kind) against Mitsuba's envmap emitter."""
import os

import numpy as np
import pytest

oiio = pytest.importorskip("OpenImageIO")

from tirender.errors import ConfigError  # noqa: E402
from tirender.io.images import load_image, srgb_to_linear  # noqa: E402

H, W = 5, 7


def write(path, arr, fmt, names=None, **attrs):
    """Write (H, W, C) `arr` with OpenImageIO as sample type `fmt` ('uint8', 'uint16', 'half', 'float'),
    alpha stored as given (not un-premultiplied)."""
    spec = oiio.ImageSpec(arr.shape[1], arr.shape[0], arr.shape[2], fmt)
    spec.attribute("oiio:UnassociatedAlpha", 1)
    if names:
        spec.channelnames = tuple(names)
    for k, v in attrs.items():
        if isinstance(v, tuple):
            spec.attribute(k, oiio.TypeDesc(f"float[{len(v)}]"), v)
        else:
            spec.attribute(k, v)
    out = oiio.ImageOutput.create(path)
    assert out is not None and out.open(path, spec), oiio.geterror()
    assert out.write_image(np.ascontiguousarray(arr)), out.geterror()
    out.close()
    return path


def pixels(dtype, C, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        a = rng.integers(0, 256, (H, W, C)).astype(np.uint8)
        a.flat[:2] = (0, 255)
    elif dtype == "uint16":
        a = rng.integers(0, 65536, (H, W, C)).astype(np.uint16)
        a.flat[:2] = (0, 65535)
    else:
        a = (rng.random((H, W, C)) * 8).astype(np.float32)
    if C in (2, 4):
        a[0, 0, -1] = 0            # fully transparent texel: colour must come through as stored
    return a


@pytest.fixture(scope="module")
def mi():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    return mi


def mitsuba_texels(mi, path, raw, fmt="auto", shape=(H, W), at=None):
    """Mitsuba's bitmap texture at the texel centres -> float32 (H, W, 3) (a grey map broadcast); at:
    [(y, x), ...] -> (n, 3) at those texels only."""
    tex = mi.load_dict({"type": "bitmap", "filename": path, "filter_type": "nearest", "raw": raw,
                        "format": fmt})
    si = mi.SurfaceInteraction3f()
    h, w = shape
    coords = at if at is not None else [(y, x) for y in range(h) for x in range(w)]
    out = np.empty((len(coords), 3), np.float32)
    for k, (y, x) in enumerate(coords):
        si.uv = mi.Point2f((x + 0.5) / w, (y + 0.5) / h)
        out[k] = np.array(tex.eval(si), np.float32).reshape(-1)[:3]
    return out if at is not None else out.reshape(h, w, 3)


def as_texture(img):
    """What a bitmap texture keeps of load_image's array: alpha dropped, grey broadcast to RGB."""
    c = img[..., :3] if img.shape[2] >= 3 else img[..., :1]
    return np.broadcast_to(c, img.shape[:2] + (3,))


def ulps(a, b):
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64)).max())


# (extension, sample type, channels): what each format can hold (Mitsuba reads TGA grey+alpha not at
# all, BMP and PPM/PFM have no 2-channel form, JPEG no alpha, Radiance RGB only)
CASES = ([("png", t, c) for t in ("uint8", "uint16") for c in (1, 2, 3, 4)]
         + [("jpg", "uint8", c) for c in (1, 3)]
         + [("bmp", "uint8", c) for c in (1, 3, 4)]
         + [("tga", "uint8", c) for c in (1, 3, 4)]
         + [("ppm", "uint8", 3), ("hdr", "float", 3), ("pfm", "float", 1), ("pfm", "float", 3)]
         + [("exr", t, c) for t in ("half", "float") for c in (1, 2, 3, 4)])
EXR_NAMES = {1: ["Y"], 2: ["Y", "A"], 3: ["R", "G", "B"], 4: ["R", "G", "B", "A"]}


@pytest.mark.parametrize("ext, dtype, C", CASES, ids=[f"{e}-{t}-{c}" for e, t, c in CASES])
def test_texels_equal_mitsuba_bitmap_texture(tmp_path, mi, ext, dtype, C):
    """Texel values (raw="false" and raw="true") equal Mitsuba's bitmap texture: exactly for 8-bit and
    float files; to 8 float32 ulps for 16-bit ones (Mitsuba's struct converter decodes sRGB with ~4 ulps of
    its own), against the texture's float32 storage (its default, "auto", rounds 16-bit files to half).
    Alpha (not kept by the texture) is compared with mi.Bitmap's stored alpha."""
    a = pixels(dtype, C)
    p = write(str(tmp_path / f"t.{ext}"), a, dtype, EXR_NAMES[C] if ext == "exr" else None)
    fmt = "variant" if dtype == "uint16" else "auto"
    for raw in (False, True):
        mine = as_texture(load_image(p, srgb=False if raw else None))
        ref = mitsuba_texels(mi, p, raw, fmt)
        assert mine.shape == ref.shape
        if dtype == "uint16":
            assert ulps(np.ascontiguousarray(mine), ref) <= 8, (raw, ulps(np.ascontiguousarray(mine), ref))
        else:
            assert np.array_equal(mine, ref), (raw, np.abs(mine - ref).max())
    if dtype == "uint16":    # Mitsuba's default storage: half precision
        ref = mitsuba_texels(mi, p, False)
        assert np.allclose(as_texture(load_image(p)), ref, rtol=2.0 ** -11, atol=0)
    if C in (2, 4):
        bm = np.array(mi.Bitmap(p))
        scale = {"uint8": 255.0, "uint16": 65535.0}.get(dtype, 1.0)
        alpha = (bm[..., -1].astype(np.float32) * np.float32(1 / scale)) if scale != 1 else bm[..., -1]
        assert np.array_equal(load_image(p)[..., -1], alpha.astype(np.float32))


def test_other_writers_variants(tmp_path, mi):
    """Variants OpenImageIO does not write, saved by Pillow: 1-bit grey, palette, palette and grey with a
    tRNS transparency PNG, RLE-compressed TGA (grey, RGB, RGBA), 8-bit grey BMP, JPEG: texels equal
    Mitsuba's, raw and decoded."""
    from PIL import Image
    rng = np.random.default_rng(3)
    g = rng.integers(0, 256, (H, W)).astype(np.uint8)
    rgb = rng.integers(0, 256, (H, W, 3)).astype(np.uint8)
    pal = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=16)
    saves = {"b1.png": (Image.fromarray(g > 128), {}), "pal.png": (pal, {}),
             "palt.png": (pal, {"transparency": 3}), "gt.png": (Image.fromarray(g), {"transparency": 7}),
             "rle.tga": (Image.fromarray(rgb), {"compression": "tga_rle"}),
             "rlea.tga": (Image.fromarray(np.dstack([rgb, g])), {"compression": "tga_rle"}),
             "rleg.tga": (Image.fromarray(g), {"compression": "tga_rle"}),
             "g.bmp": (Image.fromarray(g), {}), "q.jpg": (Image.fromarray(rgb), {"quality": 80})}
    for name, (im, kw) in saves.items():
        p = str(tmp_path / name)
        im.save(p, **kw)
        for raw in (False, True):
            mine = as_texture(load_image(p, srgb=False if raw else None))
            assert np.array_equal(mine, mitsuba_texels(mi, p, raw)), (name, raw)


@pytest.mark.skipif(not os.environ.get("TIRENDER_MITSUBA_DATA"), reason="needs Mitsuba's test data")
@pytest.mark.parametrize("big", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_mitsuba_data_textures(mi, big):
    """Mitsuba's own test textures (common/textures: flower.bmp, PNGs, JPEGs, museum.exr; the files over
    500 kB in the slow lane): 64 random texels of each equal Mitsuba's bitmap texture (raw and decoded)."""
    from tirender.io.bitmap import read_header
    folder = os.path.join(os.environ["TIRENDER_MITSUBA_DATA"], "common", "textures")
    rng = np.random.default_rng(0)
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name)
        if (os.path.getsize(p) > 500_000) != big:
            continue
        deep16 = "uint16" in read_header(p).formats       # compared with float32 storage, to 8 ulps
        for raw in (False, True):
            img = as_texture(load_image(p, srgb=False if raw else None))
            at = [(int(rng.integers(img.shape[0])), int(rng.integers(img.shape[1]))) for _ in range(64)]
            ref = mitsuba_texels(mi, p, raw, "variant" if deep16 else "auto", img.shape[:2], at)
            mine = np.stack([img[y, x] for y, x in at])
            if deep16:
                assert ulps(mine, ref) <= 8, (name, raw, ulps(mine, ref))
            else:
                assert np.array_equal(mine, ref), (name, raw, np.abs(mine - ref).max())


def test_row_zero_is_the_top_row(tmp_path, mi):
    """Orientation: the first row written is row 0 (Mitsuba's v = 0) in every format, bottom-up files
    (BMP, TGA, PFM) included."""
    for ext, dtype in (("png", "uint8"), ("bmp", "uint8"), ("tga", "uint8"), ("pfm", "float"),
                       ("hdr", "float"), ("exr", "float")):
        a = np.zeros((H, W, 3), np.uint8 if dtype == "uint8" else np.float32)
        a[0, 0] = (255, 0, 0) if dtype == "uint8" else (1.0, 0.0, 0.0)
        p = write(str(tmp_path / f"o.{ext}"), a, dtype, ["R", "G", "B"] if ext == "exr" else None)
        img = load_image(p)
        assert np.array_equal(img[0, 0], [1, 0, 0]) and not img[1:].any() and not img[0, 1:].any(), ext
        assert np.array_equal(mitsuba_texels(mi, p, False)[0, 0], [1, 0, 0]), ext


def test_exr_xyz_chromaticities_and_uint(tmp_path, mi):
    """OpenEXR colour rules as Mitsuba's read_exr: X, Y, Z channels converted to linear sRGB; RGB with
    non-Rec.709 chromaticities converted to Rec.709 primaries (XYZ chromaticities mark an XYZ image);
    UINT channels read as their integer values (not scaled); a multi-part file's first part."""
    a = pixels("float", 3, seed=4)
    cases = [write(str(tmp_path / "xyz.exr"), a, "float", ["X", "Y", "Z"]),
             write(str(tmp_path / "p3.exr"), a, "float", ["R", "G", "B"],
                   chromaticities=(0.68, 0.32, 0.265, 0.69, 0.15, 0.06, 0.3127, 0.329)),
             write(str(tmp_path / "xyzc.exr"), a, "float", ["R", "G", "B"],
                   chromaticities=(1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1 / 3, 1 / 3)),
             write(str(tmp_path / "layer.exr"), a, "float", ["diffuse.B", "diffuse.G", "diffuse.R"])]
    for p in cases:
        mine = load_image(p)
        ref = mitsuba_texels(mi, p, False)
        assert np.allclose(mine, ref, rtol=3e-6, atol=1e-6), (p, np.abs(mine - ref).max())
        assert not np.allclose(mine, a, rtol=1e-3) or p.endswith("layer.exr"), p
    import OpenEXR
    rng = np.random.default_rng(5)
    parts = [OpenEXR.Part({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage},
                          {c: rng.random((H, W)).astype(np.float32) for c in "RGB"}, name=f"p{k}") for k in range(2)]
    OpenEXR.File(parts).write(str(tmp_path / "parts.exr"))          # multi-part: the first part, as Mitsuba
    mp = str(tmp_path / "parts.exr")
    assert np.array_equal(load_image(mp), mitsuba_texels(mi, mp, False))
    u = (np.arange(H * W * 3, dtype=np.uint32).reshape(H, W, 3) * 1000003) % 70001
    p = write(str(tmp_path / "u.exr"), u, "uint", ["R", "G", "B"])
    assert np.array_equal(load_image(p), u.astype(np.float32))
    assert np.array_equal(np.array(mi.Bitmap(p), np.float32), u.astype(np.float32))


def test_tiff_and_gif_follow_the_same_rules(tmp_path):
    """TIFF and GIF (tirender reads them; Mitsuba does not): integer samples scaled to [0, 1] and
    sRGB-decoded unless srgb=False, float samples linear."""
    for dtype, scale in (("uint8", 255.0), ("uint16", 65535.0)):
        a = pixels(dtype, 4)
        p = write(str(tmp_path / f"t_{dtype}.tif"), a, dtype)
        v = a.astype(np.float32) * np.float32(1 / scale)
        assert np.array_equal(load_image(p, srgb=False), v)
        got = load_image(p)
        assert np.array_equal(got[..., :3], srgb_to_linear(v[..., :3])) and np.array_equal(got[..., 3], v[..., 3])
    f = pixels("float", 3)
    assert np.array_equal(load_image(write(str(tmp_path / "f.tif"), f, "float")), f)
    g = pixels("uint8", 3)
    got = load_image(write(str(tmp_path / "g.gif"), g, "uint8"), srgb=False)
    assert got.shape == (H, W, 4) and np.all(got[..., 3] == 1.0)


def test_srgb_decode_is_mitsubas(tmp_path, mi):
    """srgb_to_linear equals Mitsuba's 8-bit texture decode (Dr.Jit's float32 srgb_to_linear) on all 256
    levels bit for bit, and the exact IEC 61966-2-1 curve to 3e-6."""
    levels = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    p = write(str(tmp_path / "levels.png"), levels, "uint8")
    x = levels.astype(np.float32) * np.float32(1 / 255)
    ref = mitsuba_texels(mi, p, False, shape=(16, 16))[..., :1]
    assert np.array_equal(srgb_to_linear(x), ref)
    assert np.array_equal(load_image(p), ref)
    exact = np.where(x <= 0.04045, x / 12.92, ((x.astype(np.float64) + 0.055) / 1.055) ** 2.4)
    assert np.allclose(srgb_to_linear(x), exact, rtol=3e-6, atol=1e-9)


def test_format_comes_from_the_content(tmp_path, mi):
    """As Mitsuba (Bitmap::detect_file_format), the content decides, not the extension: a PNG named
    .jpg reads as that PNG; unknown content is one ConfigError line."""
    a = pixels("uint8", 3)
    p = write(str(tmp_path / "x.png"), a, "uint8")
    q = tmp_path / "x.jpg"
    q.write_bytes(open(p, "rb").read())
    assert np.array_equal(load_image(str(q)), load_image(p))
    assert np.array_equal(as_texture(load_image(str(q))), mitsuba_texels(mi, str(q), False))


def _bad_files(tmp_path):
    f = pixels("float", 3)
    u = pixels("uint8", 3)
    out = {}
    for ext, arr, fmt in (("png", u, "uint8"), ("jpg", u, "uint8"), ("bmp", u, "uint8"), ("tga", u, "uint8"),
                          ("hdr", f, "float"), ("pfm", f, "float"), ("ppm", u, "uint8"), ("exr", f, "half"),
                          ("tif", u, "uint8")):
        data = open(write(str(tmp_path / f"ok.{ext}"), arr, fmt), "rb").read()
        (tmp_path / f"trunc.{ext}").write_bytes(data[:len(data) // 2])
        (tmp_path / f"text.{ext}").write_bytes(b"this is not an image\n" * 4)
        (tmp_path / f"empty.{ext}").write_bytes(b"")
        out[ext] = [tmp_path / f"{k}.{ext}" for k in ("trunc", "text", "empty")]
    return out


def test_bad_files_are_one_config_error_line(tmp_path, capfd):
    """Truncated, wrong-content and empty files of every format: one ConfigError line naming the file;
    the decoders' own messages (libpng, libjpeg, OpenEXR) do not reach stdout/stderr."""
    for ext, paths in _bad_files(tmp_path).items():
        for p in paths:
            with pytest.raises(ConfigError) as e:
                load_image(str(p))
            msg = str(e.value)
            assert msg.startswith(f"{p}: ") and "\n" not in msg and len(msg) < len(str(p)) + 240, msg
            assert "cannot read" in msg, msg
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(ConfigError, match="not found"):
        load_image(str(tmp_path / "dir.png"))
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_files_mitsuba_misreads_are_refused(tmp_path):
    """Files Mitsuba reads otherwise than their format says are refused, not read another way: a 16-bit PPM
    (Mitsuba skips the byte swap), a 16-bit BMP (read as grey and alpha), an 8-bit BMP whose palette is
    not the grey ramp (Mitsuba takes the indices for grey levels), a Radiance file stored bottom-up."""
    p = write(str(tmp_path / "p16.ppm"), pixels("uint16", 3), "uint16")
    with pytest.raises(ConfigError, match="maxval 65535"):
        load_image(p)
    hdr = write(str(tmp_path / "a.hdr"), pixels("float", 3), "float")
    data = open(hdr, "rb").read()
    (tmp_path / "up.hdr").write_bytes(data.replace(f"-Y {H} +X {W}".encode(), f"+Y {H} +X {W}".encode()))
    with pytest.raises(ConfigError, match="orientation"):
        load_image(str(tmp_path / "up.hdr"))
    from PIL import Image
    pal = Image.fromarray(pixels("uint8", 3)[..., 0]).convert("P")
    pal.putpalette([v for i in range(256) for v in (i, 255 - i, (3 * i) % 256)])
    pal.save(tmp_path / "pal.bmp")
    with pytest.raises(ConfigError, match="palette"):
        load_image(str(tmp_path / "pal.bmp"))
    import struct
    row = (np.arange(W, dtype="<u2") * 1057).tobytes() + b"\0" * ((-2 * W) % 4)        # 16-bit RGB555 BMP
    info = struct.pack("<IiiHHIIiiII", 40, W, H, 1, 16, 0, len(row) * H, 2835, 2835, 0, 0)
    (tmp_path / "b16.bmp").write_bytes(b"BM" + struct.pack("<IHHI", 54 + len(row) * H, 0, 0, 54) + info + row * H)
    with pytest.raises(ConfigError, match="16-bit BMP"):
        load_image(str(tmp_path / "b16.bmp"))
    inv = Image.fromarray(pixels("uint8", 1)[..., 0], "L").convert("P")
    inv.putpalette([255 - i for i in range(256) for _ in range(3)])      # grey, but not the identity ramp
    inv.save(tmp_path / "inv.bmp")
    with pytest.raises(ConfigError, match="grey ramp"):
        load_image(str(tmp_path / "inv.bmp"))
    grey = Image.fromarray(pixels("uint8", 1)[..., 0], "L")
    grey.save(tmp_path / "grey.bmp")          # an 8-bit BMP with the grey ramp: read as Mitsuba does
    assert np.array_equal(load_image(str(tmp_path / "grey.bmp"), srgb=False)[..., 0],
                          pixels("uint8", 1)[..., 0].astype(np.float32) * np.float32(1 / 255))


def test_lego_scene_envmap_hdr(tmp_path, mi):
    """The tutorials' lego scene lights with a Radiance .hdr envmap (`<emitter type="envmap"><string
    name="filename" value="textures/envmap.hdr"/>`): the XML importer resolves it, the envmap's texture is
    the file's radiance times `scale` (linear: no sRGB curve), equal to Mitsuba's envmap emitter's own
    values for the same file (its eval in the texel-centre directions)."""
    from tirender.config import load_config
    from tirender.api import describe
    os.makedirs(tmp_path / "textures")
    rng = np.random.default_rng(7)
    env = (rng.random((8, 16, 3)) * 5).astype(np.float32)
    write(str(tmp_path / "textures" / "envmap.hdr"), env, "float")
    scene = tmp_path / "lego.xml"
    scene.write_text('<scene version="3.0.0"><emitter type="envmap">'
                     '<string name="filename" value="textures/envmap.hdr"/><float name="scale" value="1.5"/>'
                     '</emitter></scene>')
    d, _ = describe(load_config(str(scene)))
    tex = [t for t in d.textures if t.name.endswith("radiance")][0]
    hdr = load_image(str(tmp_path / "textures" / "envmap.hdr"))
    data = np.asarray(tex.data)
    assert data.shape[2] == 3
    assert np.array_equal(data[:hdr.shape[0], :hdr.shape[1]], hdr * np.float32(1.5))
    em = mi.load_dict({"type": "envmap", "filename": str(tmp_path / "textures" / "envmap.hdr"), "scale": 1.5})
    ref = np.array(mi.traverse(em)["data"], np.float32)[:, 1:-1]     # Mitsuba's copy, less its wrap halo
    assert np.array_equal(data[:hdr.shape[0], :hdr.shape[1]], ref * np.float32(1.5))


@pytest.mark.slow
@pytest.mark.parity
def test_hdr_envmap_render_matches_mitsuba(tmp_path, mi):
    """benchmarks/parity's envmap scene with its map saved as a Radiance .hdr file instead of EXR: the
    tirender and Mitsuba renders (scalar_rgb) agree within noise (per-channel Welch test, RMSE)."""
    import importlib.util
    import shutil
    here = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "parity")
    spec = importlib.util.spec_from_file_location("parity_run", os.path.join(here, "run.py"))
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    scenes = os.path.join(here, "scenes")
    os.makedirs(tmp_path / "assets")
    shutil.copy(os.path.join(scenes, "sensor.xml"), tmp_path / "sensor.xml")
    env = load_image(os.path.join(scenes, "assets", "env.exr"))
    write(str(tmp_path / "assets" / "env.hdr"), np.ascontiguousarray(env[..., :3]), "float")
    xml = open(os.path.join(scenes, "envmap.xml")).read().replace("assets/env.exr", "assets/env.hdr")
    (tmp_path / "envmap.xml").write_text(xml)
    defines = {"res": "24", "spp": "16"}
    ti = run.tirender_run(str(tmp_path / "envmap.xml"), defines, 16, 4, [], 0, grad=False)
    assert "missing" not in ti, ti.get("missing")
    ref = run.mitsuba_run(str(tmp_path / "envmap.xml"), defines, 16, 4, [], 0, grad=False, variant="scalar_rgb")
    r = run.compare(ti, ref, "envmap")
    assert r["pass_img"], f"z={r['z']}, Welch p={r['p']}, RMSE/noise={r['rmse_ratio']:.2f}"
