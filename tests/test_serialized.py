"""Mitsuba's .serialized meshes (scene/mesh_io.py, shape type ``serialized``): the reader against the data written
(every flag combination, versions 3 and 4, several shapes), the scene's geometry against Mitsuba 3's
(``mi.traverse`` of its serialized plugin: positions, faces and uvs exactly; normals to float32 rounding), Mitsuba's
matpreview.serialized (with TIRENDER_MITSUBA_DATA) and bad files (one ConfigError line naming the file)."""
import itertools
import os
import struct
import zlib

import numpy as np
import pytest

from mesh_writers import icosphere, serialized_bytes, write_serialized
from tirender.errors import ConfigError
from tirender.scene.description import parse_scene
from tirender.scene.mesh_io import load_mesh

COMBOS = list(itertools.product((False, True), repeat=4))     # normals, uvs, colours, double precision
DATA = os.environ.get("TIRENDER_MITSUBA_DATA")


def _shapes(seed=0):
    """One perturbed icosphere per flag combination (non-degenerate triangles, random normals and uvs)."""
    rng = np.random.default_rng(seed)
    P0, F = icosphere(1)
    out = []
    for k, (n, uv, col, dbl) in enumerate(COMBOS):
        P = P0 * rng.uniform(0.8, 1.2, (len(P0), 1)) + rng.normal(0, 0.01, P0.shape)
        out.append(dict(positions=P, faces=np.roll(F, k, axis=1), double=dbl, name=f"part{k}",
                        normals=rng.normal(size=P.shape) if n else None, uvs=rng.random((len(P), 2)) if uv else None,
                        colors=rng.random((len(P), 3)) if col else None))
    return out


@pytest.mark.parametrize("version", [3, 4])
def test_reader_returns_the_data_written(tmp_path, version):
    shapes = _shapes()
    path = write_serialized(tmp_path / "m.serialized", shapes, version)
    for k, sh in enumerate(shapes):
        m = load_mesh(path, shape_index=k)
        assert np.array_equal(m["positions"], np.asarray(sh["positions"], np.float32)), k
        assert np.array_equal(m["faces"], sh["faces"]), k
        for key in ("normals", "uvs"):
            if sh[key] is None:
                assert m[key] is None, (k, key)
            else:
                assert np.array_equal(m[key], np.asarray(sh[key], np.float32)), (k, key)
        assert m["attributes"] == {}                                   # colours are skipped, as Mitsuba 3 does
        assert m["name"] == (sh["name"] if version == 4 else "")


def _mitsuba_mesh(mi, path, **props):
    p = mi.traverse(mi.load_dict(dict({"type": "serialized", "filename": path}, **props)))
    get = lambda k, c: np.array(p[k], np.float32).reshape(-1, c)   # noqa: E731
    return get("vertex_positions", 3), np.array(p["faces"]).reshape(-1, 3), get("vertex_normals", 3), \
        get("vertex_texcoords", 2)


def _tirender_shape(path, tmp_path, **spec):
    desc = parse_scene({"shapes": [dict({"id": "m", "type": "serialized", "filename": path}, **spec)]},
                       str(tmp_path / "scene.yaml"))
    return desc.shapes[0]


@pytest.mark.parametrize("version", [3, 4])
def test_geometry_matches_mitsuba(tmp_path, version):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    shapes = _shapes(1)
    path = write_serialized(tmp_path / "m.serialized", shapes, version)
    for k, sh in enumerate(shapes):
        P, F, N, UV = _mitsuba_mesh(mi, path, shape_index=k)
        s = _tirender_shape(path, tmp_path, shape_index=k)
        assert np.array_equal(s.positions, P) and np.array_equal(s.faces, F), k
        assert np.array_equal(s.uvs, UV) if sh["uvs"] is not None else (s.uvs is None and UV.size == 0), k
        # stored normals normalised (Mitsuba's rsqrt may round differently: 2 ulp); else Mitsuba's
        # angle-weighted vertex normals
        assert np.abs(s.normals - N).max() <= (2.5e-7 if sh["normals"] is not None else 1e-6), k
    # to_world, face_normals, flip_normals (Mitsuba flips at the interaction, tirender the winding and the normals)
    m = [[0, -2, 0, 1], [1.5, 0, 0, -2], [0, 0, 0.5, 3], [0, 0, 0, 1]]
    P, F, N, UV = _mitsuba_mesh(mi, path, shape_index=9, to_world=mi.ScalarTransform4f(m))
    s = _tirender_shape(path, tmp_path, shape_index=9, to_world=m)
    assert np.abs(s.positions - P).max() <= 1e-6 * np.abs(P).max() and np.array_equal(s.faces, F)
    assert np.abs(s.normals - N).max() <= 1e-6
    # a mirroring to_world: tirender flips the winding; the normals computed for a file without them follow the
    # file's winding as in Mitsuba (they point inwards)
    P, F, N, UV = _mitsuba_mesh(mi, path, shape_index=0, to_world=mi.ScalarTransform4f().scale([-1, 1, 1]))
    s = _tirender_shape(path, tmp_path, shape_index=0, to_world={"scale": [-1, 1, 1]})
    assert np.array_equal(s.positions, P) and np.array_equal(s.faces, F[:, [0, 2, 1]])
    assert np.abs(s.normals - N).max() <= 1e-6 and (s.normals * P).sum(1).mean() < 0
    P, F, N, UV = _mitsuba_mesh(mi, path, shape_index=3, face_normals=True)
    assert N.size == 0 and _tirender_shape(path, tmp_path, shape_index=3, face_normals=True).normals is None
    P, F, N, UV = _mitsuba_mesh(mi, path, shape_index=2, flip_normals=True)
    s = _tirender_shape(path, tmp_path, shape_index=2, flip_normals=True)
    assert np.array_equal(s.faces, F[:, [0, 2, 1]]) and np.abs(s.normals + N).max() <= 1e-6


@pytest.mark.skipif(not DATA, reason="Mitsuba's test data: set TIRENDER_MITSUBA_DATA")
def test_matpreview_matches_mitsuba(tmp_path):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    path = os.path.join(DATA, "common", "meshes", "matpreview.serialized")
    for k in range(3):
        P, F, N, UV = _mitsuba_mesh(mi, path, shape_index=k)
        m = load_mesh(path, shape_index=k)
        assert np.array_equal(m["positions"], P) and np.array_equal(m["faces"], F) and np.array_equal(m["uvs"], UV)
        s = _tirender_shape(path, tmp_path, shape_index=k)
        assert np.abs(s.normals - N).max() <= 2.5e-7, k
    with pytest.raises(ConfigError, match="shape_index 3 is out of range: the file holds 3 shape"):
        load_mesh(path, shape_index=3)


def _corrupt_cases():
    sh = _shapes(2)[:3]
    good = serialized_bytes(sh, 4)
    one = serialized_bytes(sh[:1], 4)
    big = serialized_bytes([dict(sh[0], positions=np.zeros((3, 3)), faces=[[0, 1, 5]])], 4)
    plain = serialized_bytes([dict(sh[0], normals=None, uvs=None, colors=None)], 4)
    body = zlib.decompress(plain[4:-12])                    # one shape: 8 + 4 bytes of dictionary at the end
    cut = body.index(b"\0", 4) + 1                          # after the flags and the name
    many = body[:cut] + struct.pack("<QQ", 1 << 33, 1) + body[cut + 16:]
    return [
        ("empty", b"", "no header"),
        ("magic", b"\x1d\x04" + good[2:], "not a Mitsuba .serialized file"),
        ("version", good[:2] + b"\x05\x00" + good[4:], "unsupported .serialized version 5"),
        ("truncated", one[:len(one) // 2], "shape 0"),
        ("zlib", one[:20] + bytes(b ^ 0x5A for b in one[20:40]) + one[40:], "shape 0"),
        ("faces", big, "face index out of range"),
        ("index", good, "shape_index 7 is out of range: the file holds 3 shape"),
        ("dictionary", good[:-12] + b"\xff" * 8 + good[-4:], "corrupt shape dictionary"),
        ("vertices", plain[:4] + zlib.compress(many) + plain[-12:], "2^32 vertices"),
    ]


@pytest.mark.parametrize("name,data,words", _corrupt_cases(), ids=[c[0] for c in _corrupt_cases()])
def test_bad_files_one_line(tmp_path, name, data, words):
    path = tmp_path / "bad.serialized"
    path.write_bytes(data)
    index = 7 if name in ("index",) else (2 if name == "dictionary" else 0)
    with pytest.raises(ConfigError) as e:
        parse_scene({"shapes": [{"id": "m", "type": "serialized", "filename": str(path), "shape_index": index}]},
                    str(tmp_path / "scene.yaml"))
    msg = str(e.value)
    assert "\n" not in msg and "bad.serialized" in msg and words in msg, msg


def test_keys_checked(tmp_path):
    path = write_serialized(tmp_path / "m.serialized", _shapes()[:1])
    for spec, words in (({"shape_index": -1}, "shapes.m.shape_index: must be >= 0"),
                        ({"shape_index": 1.5}, "shapes.m.shape_index: expected an integer"),
                        ({"flip_tex_coords": True}, "'flip_tex_coords' belongs to obj and ply shapes"),
                        ({"type": "ply"}, "read by type 'serialized'")):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
            parse_scene({"shapes": [dict({"id": "m", "type": "serialized", "filename": path}, **spec)]}, "s.yaml")
    with pytest.raises(ConfigError, match="'shape_index' belongs to serialized shapes"):
        parse_scene({"shapes": [{"id": "m", "type": "rectangle", "shape_index": 0}]}, "s.yaml")


def test_xml_serialized_shape(tmp_path):
    """<shape type="serialized"> with Mitsuba's properties: the same description as the YAML spelling; a property
    Mitsuba's plugin does not read is refused in one line."""
    import tirender
    from tirender.api import describe
    from tirender.config import load_config
    write_serialized(tmp_path / "m.serialized", _shapes()[:4], 3)
    xml = """<scene version="3.0.0">
  <shape type="serialized" id="m">
    <string name="filename" value="m.serialized"/>
    <integer name="shape_index" value="2"/>
    <boolean name="flip_normals" value="true"/>%s
    <transform name="to_world"><translate x="1"/><scale value="2"/></transform>
  </shape>
</scene>"""
    (tmp_path / "a.xml").write_text(xml % "")
    s = describe(load_config(str(tmp_path / "a.xml")))[0].shapes[0]
    ref = _tirender_shape(str(tmp_path / "m.serialized"), tmp_path, shape_index=2, flip_normals=True,
                          to_world=[{"translate": [1, 0, 0]}, {"scale": 2}])
    for k in ("positions", "faces", "normals", "uvs"):
        assert np.array_equal(getattr(s, k), getattr(ref, k)), k
    (tmp_path / "b.xml").write_text(xml % '\n    <float name="max_smooth_angle" value="30"/>')
    with pytest.raises(ConfigError) as e:
        tirender.load_scene(str(tmp_path / "b.xml"))
    msg = str(e.value)
    assert "\n" not in msg and "line 6" in msg and "max_smooth_angle" in msg and "serialized" in msg, msg
