"""OpenEXR reading/writing (tirender.io.exr, through the OpenEXR library): round trips, files
written by the library itself and by Mitsuba 3, the spec's sample file, and bad files."""
import os
import struct

import numpy as np
import OpenEXR
import pytest

from tirender.errors import ConfigError
from tirender.io.exr import read_exr, read_exr_shape, write_exr

DATA = os.path.join(os.path.dirname(__file__), "data")


def _img(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random(shape) * 10 - 1).astype(np.float32)


@pytest.mark.parametrize("shape", [(5, 7, 3), (1, 1, 3), (6, 4), (3, 9, 1), (4, 3, 4)])
def test_round_trip_float(tmp_path, shape):
    img = _img(shape)
    img.flat[0] = np.inf
    img.flat[-1] = 1e-30
    p = str(tmp_path / "a.exr")
    write_exr(p, img)
    r = read_exr(p)
    ref = img if img.ndim == 3 else img[:, :, None]
    assert r.dtype == np.float32 and r.shape == ref.shape
    assert np.array_equal(r, ref)


def test_round_trip_half(tmp_path):
    img = _img((8, 5, 3))
    p = str(tmp_path / "h.exr")
    write_exr(p, img, half=True)
    r = read_exr(p)
    assert np.array_equal(r, img.astype(np.float16).astype(np.float32))
    write_exr(str(tmp_path / "f.exr"), img)
    assert os.path.getsize(p) < os.path.getsize(str(tmp_path / "f.exr"))


def _spec_sample():
    """The 4x3 'Sample File' of the OpenEXR file-layout document (channels G: HALF,
    Z: FLOAT), assembled byte by byte."""
    def attr(name, typ, payload):
        return name + b"\0" + typ + b"\0" + struct.pack("<i", len(payload)) + payload
    ch = (b"G\0" + struct.pack("<iB3xii", 1, 0, 1, 1) + b"Z\0"
          + struct.pack("<iB3xii", 2, 0, 1, 1) + b"\0")
    box = struct.pack("<iiii", 0, 0, 3, 2)
    head = (struct.pack("<ii", 20000630, 2) + attr(b"channels", b"chlist", ch)
            + attr(b"compression", b"compression", b"\0") + attr(b"dataWindow", b"box2i", box)
            + attr(b"displayWindow", b"box2i", box) + attr(b"lineOrder", b"lineOrder", b"\0")
            + attr(b"pixelAspectRatio", b"float", struct.pack("<f", 1))
            + attr(b"screenWindowCenter", b"v2f", struct.pack("<ff", 0, 0))
            + attr(b"screenWindowWidth", b"float", struct.pack("<f", 1)) + b"\0")
    assert len(head) == 295            # the document's offset table starts at byte 295
    G = [[0x0000, 0x2954, 0x35D5, 0x2DE8], [0x3837, 0x3376, 0x3B74, 0x3873],
         [0x3A23, 0x340A, 0x3B02, 0x3B5D]]
    Z = [[0x3A81285C, 0x3E34E1CF, 0x3DBB0B8B, 0x3EF97489],
         [0x3EE8AB7F, 0x3F54CF8A, 0x3F116C5B, 0x3D503520],
         [0x3C9AF338, 0x3E98AD4D, 0x3F08141C, 0x3F03F34C]]
    body = struct.pack("<3Q", 319, 351, 383)
    for y in range(3):
        body += struct.pack("<ii", y, 24) + struct.pack("<4H", *G[y]) + struct.pack("<4I", *Z[y])
    g = np.array(G, np.uint16).view(np.float16).astype(np.float32)
    z = np.array(Z, np.uint32).view(np.float32)
    return head + body, np.stack([g, z], axis=2)


def test_reads_spec_sample_file(tmp_path):
    data, ref = _spec_sample()
    p = tmp_path / "sample.exr"
    p.write_bytes(data)
    r = read_exr(str(p))
    assert r.shape == (3, 4, 2)
    assert np.array_equal(r, ref)
    assert abs(r[0, 1, 0] - 0.042) < 1e-3 and abs(r[1, 1, 1] - 0.831292) < 1e-6


def test_scanlines_in_any_order(tmp_path):
    data, ref = _spec_sample()
    head, lines = data[:295], data[319:]   # [295:319] is the offset table, rewritten
    blocks = [lines[i * 32:(i + 1) * 32] for i in range(3)]
    new = head + struct.pack("<3Q", 319 + 64, 319 + 32, 319) + blocks[2] + blocks[1] + blocks[0]
    p = tmp_path / "dec.exr"
    p.write_bytes(new)
    assert np.array_equal(read_exr(str(p)), ref)


def test_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        read_exr(str(tmp_path / "missing.exr"))
    data, _ = _spec_sample()
    bad = tmp_path / "zip.exr"          # flagged ZIP, but the data is not deflate-compressed
    i = data.index(b"compression\0compression\0") + len(b"compression\0compression\0") + 4
    bad.write_bytes(data[:i] + b"\x03" + data[i + 1:])
    with pytest.raises(ConfigError, match="corrupt") as e:
        read_exr(str(bad))
    assert str(e.value).startswith(str(bad) + ": ") and "\n" not in str(e.value)
    trunc = tmp_path / "trunc.exr"
    trunc.write_bytes(data[:-10])
    with pytest.raises(ConfigError, match="truncated") as e:
        read_exr(str(trunc))
    assert str(e.value).startswith(str(trunc) + ": ") and "\n" not in str(e.value)
    junk = tmp_path / "junk.exr"
    junk.write_bytes(b"hello world, not an exr")
    with pytest.raises(ConfigError, match="not an OpenEXR"):
        read_exr(str(junk))
    garbage = tmp_path / "garbage.exr"  # right magic number, nothing else
    garbage.write_bytes(b"v/1\x01garbage")
    with pytest.raises(ConfigError, match="corrupt"):
        read_exr(str(garbage))
    (tmp_path / "dir.exr").mkdir()
    with pytest.raises(ConfigError, match="not found"):
        read_exr(str(tmp_path / "dir.exr"))


def test_library_diagnostics_do_not_leak(tmp_path, capfd):
    """The C++ library prints its own messages on stdout/stderr; they end up in the error."""
    data, _ = _spec_sample()
    trunc = tmp_path / "t.exr"
    trunc.write_bytes(data[:-10])
    with pytest.raises(ConfigError):
        read_exr(str(trunc))
    out, err = capfd.readouterr()
    assert out == "" and err == ""


_COMPRESSIONS = {"none": OpenEXR.NO_COMPRESSION, "zip": OpenEXR.ZIP_COMPRESSION,
                 "piz": OpenEXR.PIZ_COMPRESSION}


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("comp", sorted(_COMPRESSIONS))
@pytest.mark.parametrize("shape", [(5, 7, 3), (4, 3, 4), (6, 4)])
def test_written_file_read_by_the_library(tmp_path, comp, half, shape):
    img = _img(shape)
    p = str(tmp_path / "w.exr")
    write_exr(p, img, half=half, compression=comp)
    f = OpenEXR.File(p, separate_channels=True)
    assert f.header()["compression"] == _COMPRESSIONS[comp]
    ch = f.channels()
    names = {3: "RGB", 4: "RGBA", 2: "Y"}[img.ndim if img.ndim == 2 else shape[2]]
    assert sorted(ch) == sorted(names)
    ref = img if img.ndim == 3 else img[:, :, None]
    dt = np.float16 if half else np.float32
    for k, n in enumerate(names):
        assert ch[n].pixels.dtype == dt
        assert np.array_equal(ch[n].pixels, ref[:, :, k].astype(dt))


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("comp", sorted(_COMPRESSIONS))
@pytest.mark.parametrize("names", ["RGB", "RGBA", "Y"])
def test_library_file_read(tmp_path, comp, half, names):
    rng = np.random.default_rng(3)
    dt = np.float16 if half else np.float32
    planes = {n: (rng.random((6, 9)) * 100 - 20).astype(dt) for n in names}
    p = str(tmp_path / "l.exr")
    OpenEXR.File({"compression": _COMPRESSIONS[comp], "type": OpenEXR.scanlineimage},
                 dict(planes)).write(p)
    r = read_exr(p)
    assert r.dtype == np.float32 and r.shape == (6, 9, len(names))
    for k, n in enumerate(names):
        assert np.array_equal(r[:, :, k], planes[n].astype(np.float32))
    assert read_exr_shape(p) == (6, 9, len(names))


def _fixture_values(shape):
    """= tools/mitsuba_exr_fixtures.py's fixture_values (the values Mitsuba wrote)."""
    n = int(np.prod(shape))
    v = (np.arange(n, dtype=np.float64) * 0.37 - 3.0) * 10.0 ** ((np.arange(n) % 7) - 3)
    v[-1] = 6.0e4
    return v.reshape(shape).astype(np.float32)


@pytest.mark.parametrize("name, shape, half", [("rgb_f32", (4, 5, 3), False),
                                               ("rgb_f16", (4, 5, 3), True),
                                               ("rgba_f32", (3, 2, 4), False),
                                               ("y_f32", (2, 6, 1), False)])
def test_reads_files_written_by_mitsuba(name, shape, half):
    """PIZ-compressed files written by Mitsuba 3's mi.Bitmap.write (tools/mitsuba_exr_fixtures.py)."""
    r = read_exr(os.path.join(DATA, f"mitsuba_{name}.exr"))
    ref = _fixture_values(shape)
    if half:
        ref = ref.astype(np.float16).astype(np.float32)
    assert r.shape == shape and np.array_equal(r, ref)


def test_written_file_read_by_mitsuba(tmp_path):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    img = _img((5, 4, 3))
    p = str(tmp_path / "m.exr")
    write_exr(p, img)
    assert np.array_equal(np.array(mi.Bitmap(p), np.float32), img)


def test_atomic_write_leaves_no_temp(tmp_path):
    p = str(tmp_path / "x.exr")
    write_exr(p, _img((2, 2, 3)))
    write_exr(p, _img((3, 3, 3), 1))
    assert os.listdir(tmp_path) == ["x.exr"]
    assert read_exr(p).shape == (3, 3, 3)


def test_openimageio_reads_it(tmp_path):
    """An independent decoder (OpenImageIO, a dependency of tirender.io.images) reads the written file: the same
    float pixels, full and half."""
    import OpenImageIO as oiio
    img = _img((6, 5, 3))
    for half, ref in ((False, img), (True, img.astype(np.float16).astype(np.float32))):
        p = str(tmp_path / f"oiio_{int(half)}.exr")
        write_exr(p, img, half=half)
        inp = oiio.ImageInput.open(p)
        assert inp is not None, oiio.geterror()
        try:
            r = inp.read_image("float")
        finally:
            inp.close()
        assert r is not None and np.array_equal(np.asarray(r, np.float32).reshape(ref.shape), ref), half
