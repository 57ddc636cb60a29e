"""Pure-numpy OpenEXR writer/reader."""
import os
import struct

import numpy as np
import pytest

from tirender.errors import ConfigError
from tirender.io.exr import read_exr, write_exr


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


def _attrs(data):
    pos, out = 8, {}
    while data[pos] != 0:
        e = data.index(b"\0", pos)
        name = data[pos:e].decode()
        e2 = data.index(b"\0", e + 1)
        typ = data[e + 1:e2].decode()
        (n,) = struct.unpack_from("<i", data, e2 + 1)
        out[name] = (typ, data[e2 + 5:e2 + 5 + n])
        pos = e2 + 5 + n
    return out, pos + 1


def test_header_layout(tmp_path):
    H, W = 3, 4
    img = _img((H, W, 3))
    p = str(tmp_path / "l.exr")
    write_exr(p, img)
    data = open(p, "rb").read()
    assert data[:8] == bytes([0x76, 0x2F, 0x31, 0x01, 2, 0, 0, 0])
    attrs, end = _attrs(data)
    assert {"channels", "compression", "dataWindow", "displayWindow", "lineOrder",
            "pixelAspectRatio", "screenWindowCenter", "screenWindowWidth"} <= set(attrs)
    typ, ch = attrs["channels"]
    assert typ == "chlist"
    entry = struct.pack("<iB3xii", 2, 0, 1, 1)          # FLOAT, pLinear 0, sampling 1x1
    assert ch == b"B\0" + entry + b"G\0" + entry + b"R\0" + entry + b"\0"
    assert attrs["compression"] == ("compression", b"\0")
    assert attrs["dataWindow"] == ("box2i", struct.pack("<iiii", 0, 0, W - 1, H - 1))
    assert attrs["displayWindow"] == attrs["dataWindow"]
    assert attrs["lineOrder"] == ("lineOrder", b"\0")
    assert attrs["pixelAspectRatio"] == ("float", struct.pack("<f", 1.0))
    assert attrs["screenWindowCenter"] == ("v2f", struct.pack("<ff", 0, 0))
    assert attrs["screenWindowWidth"] == ("float", struct.pack("<f", 1.0))
    offsets = struct.unpack_from(f"<{H}Q", data, end)
    assert offsets[0] == end + 8 * H
    for y, off in enumerate(offsets):
        yy, n = struct.unpack_from("<ii", data, off)
        assert yy == y and n == 3 * W * 4
        line = np.frombuffer(data, "<f4", 3 * W, off + 8).reshape(3, W)
        assert np.array_equal(line, img[y, :, ::-1].T)       # B, G, R planes
    assert len(data) == offsets[-1] + 8 + 3 * W * 4


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
    bad = tmp_path / "zip.exr"
    i = data.index(b"compression\0compression\0") + len(b"compression\0compression\0") + 4
    bad.write_bytes(data[:i] + b"\x03" + data[i + 1:])
    with pytest.raises(ConfigError, match="ZIP") as e:
        read_exr(str(bad))
    assert str(bad) in str(e.value)
    trunc = tmp_path / "trunc.exr"
    trunc.write_bytes(data[:-10])
    with pytest.raises(ConfigError, match="truncated"):
        read_exr(str(trunc))
    junk = tmp_path / "junk.exr"
    junk.write_bytes(b"hello world, not an exr")
    with pytest.raises(ConfigError, match="not an OpenEXR"):
        read_exr(str(junk))


def test_atomic_write_leaves_no_temp(tmp_path):
    p = str(tmp_path / "x.exr")
    write_exr(p, _img((2, 2, 3)))
    write_exr(p, _img((3, 3, 3), 1))
    assert os.listdir(tmp_path) == ["x.exr"]
    assert read_exr(p).shape == (3, 3, 3)


def test_imageio_can_read_it(tmp_path):
    """Extra check with an independent reader when this machine has one."""
    iio = pytest.importorskip("imageio.v3")
    img = _img((6, 5, 3))
    p = str(tmp_path / "io.exr")
    write_exr(p, img)
    try:
        r = iio.imread(p)
    except Exception as e:  # noqa: BLE001 - no EXR plugin (freeimage) here
        pytest.skip(f"imageio cannot read EXR on this machine: {type(e).__name__}")
    assert np.allclose(np.asarray(r, np.float32)[..., :3], img, atol=1e-6)
