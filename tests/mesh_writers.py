"""Test-side writers of mesh files: Mitsuba's .serialized (versions 3 and 4) and PLY with extra properties,
and a small closed mesh (an icosphere)."""
import struct
import zlib

import numpy as np


def serialized_bytes(shapes, version=4):
    """A .serialized file (Mitsuba's format, src/shapes/serialized.cpp) holding `shapes`: dicts of positions (V, 3),
    faces (F, 3), optional normals (V, 3), uvs (V, 2), colors (V, 3), double (bool), name (str, version 4)."""
    out, offsets = b"", []
    for sh in shapes:
        offsets.append(len(out))
        double = bool(sh.get("double"))
        dt = "<f8" if double else "<f4"
        flags = (0x2000 if double else 0x1000) | sh.get("extra_flags", 0)
        flags |= 0x1 if sh.get("normals") is not None else 0
        flags |= 0x2 if sh.get("uvs") is not None else 0
        flags |= 0x8 if sh.get("colors") is not None else 0
        body = struct.pack("<I", flags)
        if version == 4:
            body += sh.get("name", "").encode() + b"\0"
        body += struct.pack("<QQ", len(sh["positions"]), len(sh["faces"]))
        for k in ("positions", "normals", "uvs", "colors"):
            if sh.get(k) is not None:
                body += np.asarray(sh[k], dt).tobytes()
        body += np.asarray(sh["faces"], "<u4").tobytes()
        out += struct.pack("<HH", 0x041C, version) + zlib.compress(body)
    return out + np.asarray(offsets, "<u8" if version == 4 else "<u4").tobytes() + struct.pack("<I", len(shapes))


def write_serialized(path, shapes, version=4):
    with open(path, "wb") as f:
        f.write(serialized_bytes(shapes, version))
    return str(path)


def write_ply(path, positions, faces, vertex_props=(), face_props=(), binary=True):
    """A PLY file: float x y z, then vertex_props [(type, name, values (V,))], faces (uchar count, int indices),
    then face_props [(type, name, values (F,))]."""
    code = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4",
            "float": "f4", "double": "f8"}
    V, F = len(positions), len(faces)
    head = ["ply", f"format {'binary_little_endian' if binary else 'ascii'} 1.0", f"element vertex {V}",
            "property float x", "property float y", "property float z"]
    head += [f"property {t} {n}" for t, n, _ in vertex_props]
    head += [f"element face {F}", "property list uchar int vertex_indices"]
    head += [f"property {t} {n}" for t, n, _ in face_props]
    head.append("end_header")
    vdt = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")] + [(n, "<" + code[t]) for t, n, _ in vertex_props]
    fdt = [("n", "u1"), ("i", "<i4", (3,))] + [(n, "<" + code[t]) for t, n, _ in face_props]
    va, fa = np.zeros(V, vdt), np.zeros(F, fdt)
    for k, c in enumerate("xyz"):
        va[c] = np.asarray(positions)[:, k]
    for _, n, v in vertex_props:
        va[n] = v
    fa["n"], fa["i"] = 3, faces
    for _, n, v in face_props:
        fa[n] = v
    if binary:
        body = va.tobytes() + fa.tobytes()
    else:
        rows = [" ".join(repr(x.item()) for x in r) for r in va]
        rows += [" ".join(["3"] + [str(int(i)) for i in r["i"]] + [repr(r[n].item()) for _, n, _ in face_props])
                 for r in fa]
        body = ("\n".join(rows) + "\n").encode()
    with open(path, "wb") as f:
        f.write(("\n".join(head) + "\n").encode() + body)
    return str(path)


def icosphere(subdivisions=2):
    """A unit icosphere: positions (V, 3) float32, faces (F, 3) int32 (outward winding)."""
    from demos.make_shape_target import icosphere as ico
    P, F = ico(subdivisions)
    return P.astype(np.float32), F.astype(np.int32)
