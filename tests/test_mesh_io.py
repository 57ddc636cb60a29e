"""OBJ / PLY loading and saving (tirender.scene.mesh_io)."""
import numpy as np
import pytest

from tirender.errors import ConfigError
from tirender.scene.mesh_io import clean_triangles, load_mesh, save_obj, save_ply


def _grid(n=6, seed=0):
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    P = np.stack([x, y, rng.random(x.shape)], -1).reshape(-1, 3).astype(np.float32)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    a, b, c, d = idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]
    F = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3),
                        np.stack([a, c, d], -1).reshape(-1, 3)]).astype(np.int32)
    N = rng.normal(size=P.shape).astype(np.float32)
    UV = rng.random((len(P), 2)).astype(np.float32)
    return P, F, N, UV


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


def _corners(m, attr="positions"):
    return m[attr][m["faces"]]


@pytest.mark.parametrize("with_n,with_uv", [(False, False), (True, False), (False, True),
                                            (True, True)])
@pytest.mark.parametrize("fmt", ["obj", "ply", "ply-ascii"])
def test_round_trip(tmp_path, fmt, with_n, with_uv):
    P, F, N, UV = _grid()
    N = N if with_n else None
    UV = UV if with_uv else None
    path = str(tmp_path / ("m." + fmt.split("-")[0]))
    if fmt == "obj":
        save_obj(path, P, F, N, UV)
    else:
        save_ply(path, P, F, N, UV, binary=(fmt == "ply"))
    m = load_mesh(path)
    assert m["positions"].dtype == np.float32 and m["faces"].dtype == np.int32
    assert m["faces"].shape == F.shape
    assert np.array_equal(_corners(m), P[F])
    if with_n:
        assert m["normals"].shape == m["positions"].shape
        assert np.array_equal(_corners(m, "normals"), N[F])
    else:
        assert m["normals"] is None
    if with_uv:
        assert np.array_equal(_corners(m, "uvs"), UV[F])
    else:
        assert m["uvs"] is None


OBJ_MIXED = """# comment
mtllib foo.mtl
o thing
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0\r
v\t0 0 1 1.0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
vn 0 0 1
vn 0 1 0

g group
usemtl red
s off
f 1 2 3
f 1/1 3/3 4/4
f 1//1 2//1 5//2
f -5/-4/-2 -4/-3/-2 -3/-2/-2 -2/-1/-2
"""


def test_obj_face_formats(tmp_path):
    m = load_mesh(_write(tmp_path, "mixed.obj", OBJ_MIXED))
    V = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    ref = np.array([[0, 1, 2], [0, 2, 3], [0, 1, 4], [0, 1, 2], [0, 2, 3]])
    assert m["faces"].shape == (5, 3)
    assert np.array_equal(_corners(m), V[ref])
    # uvs: missing ones (v, v//vn corners) are 0; normals: missing ones are 0
    uv = _corners(m, "uvs")
    assert np.array_equal(uv[1], [[0, 0], [1, 1], [0, 1]])
    assert np.array_equal(uv[3], [[0, 0], [1, 0], [1, 1]])
    assert np.array_equal(uv[0], np.zeros((3, 2)))
    nrm = _corners(m, "normals")
    assert np.array_equal(nrm[2], [[0, 0, 1], [0, 0, 1], [0, 1, 0]])
    assert np.array_equal(nrm[4], [[0, 0, 1]] * 3)
    # de-duplication per unique (v, vt, vn): corner 1 appears as (1,-,-), (1,1,-), (1,-,1), (1,1,1)
    assert len(m["positions"]) == 13


def test_obj_dedup_cube(tmp_path):
    lines = ["v %d %d %d" % (x, y, z) for x in (0, 1) for y in (0, 1) for z in (0, 1)]
    lines += ["vn -1 0 0", "vn 1 0 0", "vn 0 -1 0", "vn 0 1 0", "vn 0 0 -1", "vn 0 0 1"]
    quads = [(1, 2, 4, 3), (5, 7, 8, 6), (1, 5, 6, 2), (3, 4, 8, 7), (1, 3, 7, 5), (2, 6, 8, 4)]
    lines += ["f " + " ".join(f"{v}//{k + 1}" for v in q) for k, q in enumerate(quads)]
    m = load_mesh(_write(tmp_path, "cube.obj", "\n".join(lines)))
    assert m["faces"].shape == (12, 3) and m["positions"].shape == (24, 3)
    n = _corners(m, "normals")
    assert (n == n[:, :1]).all()          # flat normal per face
    e1 = _corners(m)[:, 1] - _corners(m)[:, 0]
    e2 = _corners(m)[:, 2] - _corners(m)[:, 0]
    assert np.allclose(np.cross(e1, e2) * n[:, 0], np.abs(np.cross(e1, e2)) * np.abs(n[:, 0]))


def test_polygon_fan(tmp_path):
    m = load_mesh(_write(tmp_path, "p.obj", "v 0 0 0\nv 1 0 0\nv 2 1 0\nv 1 2 0\nv 0 1 0\n"
                                             "f 1 2 3 4 5\n"))
    assert m["faces"].tolist() == [[0, 1, 2], [0, 2, 3], [0, 3, 4]]


def _ply_bytes(endian, verts, faces, vprops="xyz", count_t="uchar", index_t="int",
               list_name="vertex_indices", extra_face_prop=False, extra_element=False):
    e = "<" if endian == "little" else ">"
    head = ["ply", f"format binary_{endian}_endian 1.0", f"element vertex {len(verts)}"]
    tmap = {"uchar": "u1", "int": "i4", "uint": "u4", "ushort": "u2", "float": "f4"}
    head += [f"property float {p}" for p in vprops]
    if extra_element:
        head += ["element material 2", "property uchar r", "property float shine"]
    head += [f"element face {len(faces)}", f"property list {count_t} {index_t} {list_name}"]
    if extra_face_prop:
        head += ["property uchar red"]
    head += ["end_header"]
    body = np.asarray(verts, np.float32).astype(e + "f4").tobytes()
    if extra_element:
        body += np.zeros(2, dtype=[("r", "u1"), ("s", e + "f4")]).tobytes()
    for f in faces:
        body += np.array([len(f)], e + tmap[count_t]).tobytes()
        body += np.array(f, e + tmap[index_t]).tobytes()
        if extra_face_prop:
            body += b"\x07"
    return ("\n".join(head) + "\n").encode() + body


QUAD = [[0, 0, 0, 0, 0], [1, 0, 0, 1, 0], [1, 1, 0, 1, 1], [0, 1, 0, 0, 1], [2, 0, 0, 1, 1]]


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("faces", [[[0, 1, 2, 3]], [[0, 1, 2, 3], [1, 4, 2]], [[1, 4, 2]] * 3])
def test_ply_binary_variants(tmp_path, endian, faces):
    data = _ply_bytes(endian, QUAD, faces, vprops=["x", "y", "z", "s", "t"],
                      count_t="int", index_t="uint", list_name="vertex_index",
                      extra_face_prop=True, extra_element=True)
    m = load_mesh(_write(tmp_path, "q.ply", data))
    tris = []
    for f in faces:
        tris += [[f[0], f[k], f[k + 1]] for k in range(1, len(f) - 1)]
    assert m["faces"].tolist() == tris
    assert np.array_equal(m["positions"], np.array(QUAD, np.float32)[:, :3])
    assert np.array_equal(m["uvs"], np.array(QUAD, np.float32)[:, 3:])
    assert m["normals"] is None


def test_ply_ascii_variants(tmp_path):
    text = """ply
format ascii 1.0
comment hello
element vertex 4
property float x
property float y
property float z
property float texture_u
property float texture_v
element face 2
property uchar intensity
property list uchar int vertex_indices
end_header
0 0 0 0 0
1 0 0 1 0

1 1 0 1 1
0 1 0 0 1
9 4 0 1 2 3
9 3 0 2 1
"""
    m = load_mesh(_write(tmp_path, "a.ply", text))
    assert m["faces"].tolist() == [[0, 1, 2], [0, 2, 3], [0, 2, 1]]
    assert np.array_equal(m["uvs"], np.array([[0, 0], [1, 0], [1, 1], [0, 1]], np.float32))


# --------------------------------------------------------------------------- errors
def _err(path):
    with pytest.raises(ConfigError) as e:
        load_mesh(path)
    assert path in str(e.value)
    return str(e.value)


def test_missing_and_unknown(tmp_path):
    assert "not found" in _err(str(tmp_path / "nope.obj"))
    assert "unknown mesh format" in _err(_write(tmp_path, "m.stl", "solid"))


def test_truncated(tmp_path):
    P, F, N, UV = _grid()
    path = str(tmp_path / "t.ply")
    save_ply(path, P, F, N)
    data = open(path, "rb").read()
    assert "truncated" in _err(_write(tmp_path, "t1.ply", data[:-7]))
    assert "truncated" in _err(_write(tmp_path, "t2.ply", data[:data.find(b"end_header")]))
    save_ply(path, P, F, binary=False)
    text = open(path, "rb").read()
    assert "truncated" in _err(_write(tmp_path, "t3.ply", text[:len(text) // 2]))
    assert "truncated" in _err(_write(tmp_path, "t4.ply", text[:-3]))
    assert "not a PLY" in _err(_write(tmp_path, "t5.ply", b"plx\n"))


def test_index_out_of_range(tmp_path):
    assert "out of range" in _err(_write(tmp_path, "r.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n"))
    assert "out of range" in _err(_write(tmp_path, "r2.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\n"
                                                           "f 1 2 -4\n"))
    assert "out of range" in _err(_write(tmp_path, "r3.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\n"
                                                           "f 1/1 2/2 3/1\n"))
    assert "out of range" in _err(_write(tmp_path, "r4.ply",
                                         _ply_bytes("little", np.array(QUAD)[:3, :3], [[0, 1, 3]])))


def test_nan_vertices(tmp_path):
    msg = _err(_write(tmp_path, "n.obj", "v 0 0 0\nv nan 0 0\nv 0 1 0\nv 0 inf 1\nf 1 2 3\n"))
    assert "2 of 4 vertices" in msg and "NaN" in msg
    P, F, _, _ = _grid()
    P[3, 1] = np.nan
    path = str(tmp_path / "n.ply")
    save_ply(path, P, F)
    assert "1 of" in _err(path)


def test_malformed_faces(tmp_path):
    assert "at least 3" in _err(_write(tmp_path, "f.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2\n"))
    assert "no 'f'" in _err(_write(tmp_path, "f2.obj", "v 0 0 0\n"))
    assert "could not parse" in _err(_write(tmp_path, "f3.obj", "v 0 0 0\nv 1 x 0\nf 1 1 1\n"))


def test_clean_triangles():
    P = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [2, 0, 0], [1e-9, 0, 0]], np.float32)
    F = np.array([[0, 1, 2], [0, 0, 1], [0, 1, 3], [0, 4, 2], [2, 1, 0]], np.int32)
    keep, n = clean_triangles(P, F)
    assert n == 2 and keep.tolist() == [[0, 1, 2], [0, 4, 2], [2, 1, 0]]
    keep, n = clean_triangles(P, np.array([[0, 1, 2], [0, 1, 1], [0, 1, 3]]))
    assert n == 2 and keep.dtype == np.int32 and keep.tolist() == [[0, 1, 2]]


def test_medium_obj_is_fast(tmp_path):
    import time
    P, F, N, UV = _grid(100)          # 20k triangles
    path = str(tmp_path / "big.obj")
    save_obj(path, P, F, N, UV)
    t = time.perf_counter()
    m = load_mesh(path)
    assert time.perf_counter() - t < 2.0
    assert np.array_equal(_corners(m), P[F])
