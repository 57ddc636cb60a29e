"""Triangle mesh files: Wavefront OBJ and PLY (ascii, binary little/big endian).

Everything is parsed with vectorised numpy (no per-face Python loop on the common paths),
so a 1M-triangle file loads in a few seconds.  A loaded mesh is a dict::

    positions (V, 3) float32    vertex positions (scene units)
    faces     (F, 3) int32      vertex indices of the triangles (polygons fan-triangulated)
    normals   (V, 3) float32 or None   per-vertex shading normals (as stored, not normalised)
    uvs       (V, 2) float32 or None   per-vertex texture coordinates

Bad input raises :class:`tirender.errors.ConfigError` naming the file.
"""
import os
import struct
import warnings

import numpy as np

from ..errors import ConfigError
from ..io.atomic import atomic_write_bytes as _atomic_write

__all__ = ["load_mesh", "save_ply", "save_obj", "clean_triangles"]

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True


# --------------------------------------------------------------------------- public API
def load_mesh(path):
    """Load an ``.obj`` or ``.ply`` triangle mesh -> dict(positions, faces, normals, uvs).

    Polygons are fan-triangulated; OBJ corners are de-duplicated per unique (v, vt, vn)
    triple so that the result is an indexed mesh with per-vertex attributes.
    Raises ConfigError (with the file name) for a missing/unreadable file, an unknown
    extension, a truncated or malformed file, out-of-range indices, non-finite vertex
    coordinates, or a file without faces.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".obj", ".ply"):
        raise ConfigError(f"unknown mesh format '{ext or path}' (expected .obj or .ply)", file=path)
    if not os.path.isfile(path):
        raise ConfigError("mesh file not found", file=path)
    from ..limits import check
    size = os.path.getsize(path)
    # parse buffers, corner de-duplication, BVH: about 16 bytes of memory per byte of file text
    check(size, f"mesh file of {size} bytes", path, copies=16, bytes_per_value=1)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read mesh file ({e.strerror})", file=path) from None
    if ext == ".obj":
        mesh = _parse_obj(data, path)
    else:
        mesh = _parse_ply(data, path)
    _validate(mesh, path)
    mesh["faces"] = np.ascontiguousarray(mesh["faces"], dtype=np.int32)
    return mesh


def clean_triangles(positions, faces):
    """Drop degenerate triangles.

    positions (V,3), faces (F,3) int. A triangle is removed when two of its indices are
    equal or its area is below ``1e-12 * bbox_diagonal**2``.
    Returns ``(faces_kept (F',3) int32, n_removed)``; the caller reports n_removed.
    """
    p = np.asarray(positions, dtype=np.float64)
    f = np.asarray(faces).astype(np.int32, copy=False).reshape(-1, 3)
    if len(f) == 0:
        return f.copy(), 0
    repeated = (f[:, 0] == f[:, 1]) | (f[:, 1] == f[:, 2]) | (f[:, 0] == f[:, 2])
    a, b, c = p[f[:, 0]], p[f[:, 1]], p[f[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    diag2 = float(np.sum((p.max(axis=0) - p.min(axis=0)) ** 2)) if len(p) else 0.0
    bad = repeated | ~(area >= 1e-12 * diag2) | (area <= 0.0)
    keep = f[~bad]
    return np.ascontiguousarray(keep, dtype=np.int32), int(bad.sum())


def save_ply(path, positions, faces, normals=None, uvs=None, binary=True):
    """Write a triangle mesh as PLY (binary little endian by default, else ascii).

    positions (V,3), faces (F,3) int, optional normals (V,3) and uvs (V,2) (written as
    properties nx,ny,nz and u,v). Faces use a ``uchar`` count and ``int`` indices.
    The file is written atomically (temp file + rename).
    """
    pos, fcs, nrm, uv = _check_arrays(positions, faces, normals, uvs)
    V, F = len(pos), len(fcs)
    fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    if nrm is not None:
        fields += [("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
    if uv is not None:
        fields += [("u", "<f4"), ("v", "<f4")]
    head = ["ply", "format %s 1.0" % ("binary_little_endian" if binary else "ascii"),
            "comment written by tirender", f"element vertex {V}"]
    head += [f"property float {n}" for n, _ in fields]
    head += [f"element face {F}", "property list uchar int vertex_indices", "end_header"]
    header = ("\n".join(head) + "\n").encode("ascii")
    cols = [pos] + ([nrm] if nrm is not None else []) + ([uv] if uv is not None else [])
    vdata = np.concatenate(cols, axis=1).astype(np.float32)
    if binary:
        va = np.empty(V, dtype=fields)
        for i, (n, _) in enumerate(fields):
            va[n] = vdata[:, i]
        fa = np.empty(F, dtype=[("n", "u1"), ("i", "<i4", (3,))])
        fa["n"] = 3
        fa["i"] = fcs
        body = va.tobytes() + fa.tobytes()
    else:
        body = _format_rows(vdata, "%.9g") + _format_rows(
            np.concatenate([np.full((F, 1), 3, np.int64), fcs.astype(np.int64)], axis=1), "%d")
    _atomic_write(path, header + body)


def save_obj(path, positions, faces, normals=None, uvs=None):
    """Write a triangle mesh as Wavefront OBJ (``v``/``vt``/``vn`` share the vertex index).

    positions (V,3), faces (F,3) int (0-based; written 1-based), optional normals (V,3)
    and uvs (V,2). Written atomically.
    """
    pos, fcs, nrm, uv = _check_arrays(positions, faces, normals, uvs)
    parts = [b"# written by tirender\n", _format_rows(pos, "%.9g", b"v ")]
    if uv is not None:
        parts.append(_format_rows(uv, "%.9g", b"vt "))
    if nrm is not None:
        parts.append(_format_rows(nrm, "%.9g", b"vn "))
    f1 = fcs.astype(np.int64) + 1
    if uv is not None and nrm is not None:
        fmt, cols = "%d/%d/%d", np.repeat(f1, 3, axis=1)
    elif uv is not None:
        fmt, cols = "%d/%d", np.repeat(f1, 2, axis=1)
    elif nrm is not None:
        fmt, cols = "%d//%d", np.repeat(f1, 2, axis=1)
    else:
        fmt, cols = "%d", f1
    row = " ".join([fmt] * 3)
    if len(cols):
        text = "\nf ".join([row] * len(cols)) % tuple(cols.ravel().tolist())
        parts.append(b"f " + text.encode() + b"\n")
    _atomic_write(path, b"".join(parts))


# --------------------------------------------------------------------------- helpers
def _check_arrays(positions, faces, normals, uvs):
    pos = np.asarray(positions, dtype=np.float32).reshape(-1, 3)
    fcs = np.asarray(faces).astype(np.int64).reshape(-1, 3)
    nrm = None if normals is None else np.asarray(normals, dtype=np.float32).reshape(-1, 3)
    uv = None if uvs is None else np.asarray(uvs, dtype=np.float32).reshape(-1, 2)
    for name, a in (("normals", nrm), ("uvs", uv)):
        if a is not None and len(a) != len(pos):
            raise ValueError(f"{name} has {len(a)} rows but there are {len(pos)} vertices")
    return pos, fcs, nrm, uv


def _format_rows(a, fmt, prefix=b""):
    """Rows of a 2-D array as text lines (one big %-format call, no per-row loop)."""
    a = np.asarray(a)
    if a.size == 0:
        return b""
    row = prefix.decode() + " ".join([fmt] * a.shape[1])
    return ("\n".join([row] * len(a)) % tuple(a.ravel().tolist())).encode() + b"\n"


def _validate(mesh, path):
    pos, faces = mesh["positions"], mesh["faces"]
    bad = ~np.isfinite(pos).all(axis=1)
    if bad.any():
        raise ConfigError(f"{int(bad.sum())} of {len(pos)} vertices have NaN/Inf coordinates "
                          f"(first at vertex {int(np.flatnonzero(bad)[0])})", file=path)
    if len(faces) == 0:
        raise ConfigError("mesh has no faces", file=path)
    lo, hi = int(faces.min()), int(faces.max())
    if lo < 0 or hi >= len(pos):
        raise ConfigError(f"face index out of range: {lo if lo < 0 else hi} "
                          f"(mesh has {len(pos)} vertices)", file=path)


def _parse_numbers(text, dtype, path, what):
    """Whitespace-separated numbers of ``text`` (bytes) -> 1-D array (C parser)."""
    if not text or text.isspace():
        return np.zeros(0, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            raise ConfigError(f"malformed {what}: could not parse a number", file=path) from None


def _token_layout(S):
    """For a uint8 buffer of '\\n'-terminated lines: (token start positions, newline positions,
    tokens per line)."""
    ws = _WS[S]
    start = ~ws
    start[1:] &= ws[:-1]
    ts = np.flatnonzero(start)
    nl = np.flatnonzero(S == 10)
    line_of_tok = np.searchsorted(nl, ts)
    counts = np.bincount(line_of_tok, minlength=len(nl))
    return ts, nl, counts, line_of_tok


def _fan(corner, counts, path, where=None):
    """Fan-triangulate polygons. corner: flat (sum(counts),) vertex ids, counts: (P,) ints.
    Returns (T,3) int64."""
    counts = np.asarray(counts, dtype=np.int64)
    if len(counts) and counts.min() < 3:
        i = int(np.argmax(counts < 3))
        loc = f" (face {i}{'' if where is None else ', line %d' % where[i]})"
        raise ConfigError(f"a face has {int(counts[i])} vertices, at least 3 are needed{loc}",
                          file=path)
    if len(counts) and counts.max() == 3 and counts.min() == 3:
        return corner.reshape(-1, 3).astype(np.int64, copy=False)
    first = np.cumsum(counts) - counts
    ntri = counts - 2
    poly = np.repeat(np.arange(len(counts)), ntri)
    k = np.arange(int(ntri.sum())) - np.repeat(np.cumsum(ntri) - ntri, ntri) + 1
    f0 = first[poly]
    return np.stack([corner[f0], corner[f0 + k], corner[f0 + k + 1]], axis=1).astype(np.int64)


# --------------------------------------------------------------------------- OBJ
def _select_lines(buf, starts, ends, sel, plen):
    """Bytes of the selected lines with their first ``plen`` chars blanked, each ending in
    '\\n'. Works on runs of consecutive selected lines (bytes slicing + replace), so the
    usual layout (all ``v`` lines, then all ``f`` lines, ...) costs a few memcpy's."""
    sel = np.asarray(sel, dtype=bool)
    prev = np.concatenate([[False], sel[:-1]])
    nxt = np.concatenate([sel[1:], [False]])
    rs = np.flatnonzero(sel & ~prev)
    re_ = np.flatnonzero(sel & ~nxt)
    prefix = bytes(buf[int(starts[rs[0]]):int(starts[rs[0]]) + plen]) if len(rs) else b""
    blank = b" " * plen
    chunks = [buf[a:b + 1] for a, b in zip(starts[rs].tolist(), ends[re_].tolist())]
    text = b"".join(chunks)
    text = blank + text[plen:].replace(b"\n" + prefix, b"\n" + blank)
    return np.frombuffer(text, dtype=np.uint8)


def _obj_attr(buf, starts, ends, sel, plen, ncomp, path, what):
    """Numeric attribute lines (v / vt / vn) -> (n, ncomp) float64 (extra components dropped,
    missing optional components of vt set to 0)."""
    n = int(sel.sum())
    if n == 0:
        return np.zeros((0, ncomp))
    S = _select_lines(buf, starts, ends, sel, plen)
    nums = _parse_numbers(S.tobytes(), np.float64, path, f"'{what}' line")
    if len(nums) == n * ncomp:
        # same total: check that every line really has ncomp values (cheap, no search)
        ws = _WS[S]
        start = ~ws
        start[1:] &= ws[:-1]
        ts = np.flatnonzero(start).reshape(n, ncomp)
        nl = np.flatnonzero(S == 10)
        if len(nl) == n and (ts[:, -1] < nl).all() and (ts[1:, 0] > nl[:-1]).all():
            return nums.reshape(n, ncomp)
    _, _, counts, _ = _token_layout(S)
    first = np.cumsum(counts) - counts
    need = 1 if what == "vt" else ncomp
    if counts.min() < need:
        i = int(np.argmax(counts < need))
        raise ConfigError(f"'{what}' line {int(np.flatnonzero(sel)[i]) + 1} has {int(counts[i])} "
                          f"values, expected {ncomp}", file=path)
    out = np.zeros((n, ncomp))
    for c in range(ncomp):
        has = counts > c
        out[has, c] = nums[first[has] + c]
    return out


def _parse_obj(data, path):
    buf = data + b"\n\0\0\0"
    B = np.frombuffer(buf, dtype=np.uint8)
    L = len(data) + 1
    nl = np.flatnonzero(B[:L] == 10)
    starts = np.concatenate([[0], nl[:-1] + 1])
    ends = nl
    c0, c1, c2 = B[starts], B[starts + 1], B[starts + 2]
    is_v = (c0 == ord("v")) & _WS[c1]
    is_vt = (c0 == ord("v")) & (c1 == ord("t")) & _WS[c2]
    is_vn = (c0 == ord("v")) & (c1 == ord("n")) & _WS[c2]
    is_f = (c0 == ord("f")) & _WS[c1]

    V = _obj_attr(buf, starts, ends, is_v, 1, 3, path, "v")
    VT = _obj_attr(buf, starts, ends, is_vt, 2, 2, path, "vt")
    VN = _obj_attr(buf, starts, ends, is_vn, 2, 3, path, "vn")
    nf = int(is_f.sum())
    if nf == 0:
        raise ConfigError("OBJ file has no 'f' (face) lines", file=path)

    S = _select_lines(buf, starts, ends, is_f, 1)
    text = S.tobytes()
    if b"//" in text:
        text = text.replace(b"//", b"/0/")
    S = np.frombuffer(text, dtype=np.uint8)
    ts, fnl, counts, face_of_tok = _token_layout(S)
    slash = np.flatnonzero(S == ord("/"))
    if len(slash):
        nfield = 1 + np.bincount(np.searchsorted(ts, slash, side="right") - 1, minlength=len(ts))
    else:
        nfield = np.ones(len(ts), dtype=np.int64)
    if nfield.max() > 3:
        raise ConfigError("malformed face vertex (more than 3 '/'-separated indices)", file=path)
    nums = _parse_numbers(text.replace(b"/", b" ") if len(slash) else text, np.int64, path,
                          "'f' line")
    if len(nums) != int(nfield.sum()):
        raise ConfigError("malformed 'f' line (empty index field)", file=path)
    if nfield.min() == nfield.max():
        k = int(nfield[0])
        idx = nums.reshape(-1, k)
        iv = idx[:, 0]
        it = idx[:, 1] if k >= 2 else np.zeros(len(idx), np.int64)
        iN = idx[:, 2] if k >= 3 else np.zeros(len(idx), np.int64)
    else:
        off = np.cumsum(nfield) - nfield
        iv = nums[off]
        last = len(nums) - 1
        it = np.where(nfield >= 2, nums[np.minimum(off + 1, last)], 0)
        iN = np.where(nfield >= 3, nums[np.minimum(off + 2, last)], 0)

    # OBJ indices: 1-based, negative = relative to the elements defined so far, 0 = missing.
    fline = np.flatnonzero(is_f)
    tok_line = fline[face_of_tok]

    def resolve(i, is_kind, n, what, required):
        neg = i < 0
        out = i - 1
        if neg.any():
            before = np.cumsum(is_kind)[tok_line[neg]]
            out[neg] = before + i[neg]
        bad = (out >= n) | (out < 0) & (required | (i != 0))
        if bad.any():
            j = int(np.argmax(bad))
            raise ConfigError(f"{what} index {int(i[j])} out of range at line "
                              f"{int(tok_line[j]) + 1} ({n} defined)", file=path)
        return np.where(i == 0, -1, out)

    iv = resolve(iv, is_v, len(V), "vertex", True)
    it = resolve(it, is_vt, len(VT), "texture coordinate", False)
    iN = resolve(iN, is_vn, len(VN), "normal", False)
    has_t, has_n = bool((it >= 0).any()), bool((iN >= 0).any())

    if not has_t and not has_n:
        positions, normals, uvs, corner = V, None, None, iv
    else:
        a, b, c = iv, it + 1, iN + 1
        mb, mc = len(VT) + 1, len(VN) + 1
        if len(V) * mb * mc < 2 ** 62:
            key = (a * mb + b) * mc + c
            uk, corner = np.unique(key, return_inverse=True)
            ua, ub, uc = uk // (mb * mc), (uk // mc) % mb, uk % mc
        else:
            uk, corner = np.unique(np.stack([a, b, c], 1), axis=0, return_inverse=True)
            ua, ub, uc = uk[:, 0], uk[:, 1], uk[:, 2]
        corner = corner.reshape(-1)
        positions = V[ua]
        uvs = np.where((ub > 0)[:, None], VT[np.maximum(ub - 1, 0)], 0.0) if has_t else None
        normals = np.where((uc > 0)[:, None], VN[np.maximum(uc - 1, 0)], 0.0) if has_n else None
    faces = _fan(corner, counts, path, where=fline + 1)
    return _mesh(positions, faces, normals, uvs)


def _mesh(positions, faces, normals, uvs):
    return dict(
        positions=np.ascontiguousarray(positions, dtype=np.float32).reshape(-1, 3),
        faces=np.asarray(faces, dtype=np.int64).reshape(-1, 3),
        normals=None if normals is None else np.ascontiguousarray(normals, dtype=np.float32),
        uvs=None if uvs is None else np.ascontiguousarray(uvs, dtype=np.float32),
    )


# --------------------------------------------------------------------------- PLY
_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_UV_NAMES = [("u", "v"), ("s", "t"), ("texture_u", "texture_v"), ("texture_s", "texture_t")]


def _ply_header(data, path):
    if not (data.startswith(b"ply\n") or data.startswith(b"ply\r\n")):
        raise ConfigError("not a PLY file (missing 'ply' magic line)", file=path)
    end = data.find(b"end_header")
    if end < 0:
        raise ConfigError("PLY header has no 'end_header' (truncated file?)", file=path)
    body = data.find(b"\n", end)
    if body < 0:
        raise ConfigError("truncated PLY file (nothing after 'end_header')", file=path)
    fmt, elements = None, []
    for ln, raw in enumerate(data[:end].decode("latin-1").splitlines()[1:], start=2):
        tok = raw.split()
        if not tok or tok[0] in ("comment", "obj_info"):
            continue
        try:
            if tok[0] == "format":
                fmt = tok[1]
            elif tok[0] == "element":
                elements.append(dict(name=tok[1], count=int(tok[2]), props=[]))
            elif tok[0] == "property":
                if not elements:
                    raise ValueError("property before any element")
                if tok[1] == "list":
                    elements[-1]["props"].append(
                        (tok[4], _PLY_TYPES[tok[2]], _PLY_TYPES[tok[3]]))
                else:
                    elements[-1]["props"].append((tok[2], _PLY_TYPES[tok[1]], None))
            else:
                raise ValueError(f"unknown header keyword '{tok[0]}'")
        except (IndexError, KeyError, ValueError) as e:
            raise ConfigError(f"bad PLY header line {ln} '{raw.strip()}' ({e})",
                              file=path) from None
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise ConfigError(f"unsupported PLY format '{fmt}'", file=path)
    return fmt, elements, body + 1


def _parse_ply(data, path):
    fmt, elements, pos = _ply_header(data, path)
    if fmt == "ascii":
        values = _ply_ascii(data[pos:], elements, path)
    else:
        values = _ply_binary(data, pos, elements, "<" if fmt == "binary_little_endian" else ">",
                             path)
    if "vertex" not in values:
        raise ConfigError("PLY file has no 'vertex' element", file=path)
    if "face" not in values:
        raise ConfigError("PLY file has no 'face' element", file=path)
    vert = values["vertex"]
    for n in "xyz":
        if n not in vert or isinstance(vert[n], tuple):
            raise ConfigError(f"PLY vertex element lacks property '{n}'", file=path)
    positions = np.stack([vert["x"], vert["y"], vert["z"]], axis=1)
    normals = None
    if all(n in vert for n in ("nx", "ny", "nz")):
        normals = np.stack([vert["nx"], vert["ny"], vert["nz"]], axis=1)
    uvs = None
    for a, b in _UV_NAMES:
        if a in vert and b in vert:
            uvs = np.stack([vert[a], vert[b]], axis=1)
            break
    face = values["face"]
    lst = face.get("vertex_indices", face.get("vertex_index"))
    if not isinstance(lst, tuple):
        raise ConfigError("PLY face element lacks list property 'vertex_indices'", file=path)
    flat, counts = lst
    faces = _fan(flat.astype(np.int64), counts, path)
    return _mesh(positions, faces, normals, uvs)


def _ply_ascii(body, elements, path):
    """ascii PLY body: one row per non-blank line; each element's lines are parsed in one
    C call (as int64 when all its properties are integers, else float64)."""
    B = np.frombuffer(body + b"\n", dtype=np.uint8)
    ts, nl, counts, _ = _token_layout(B)
    line_start = np.concatenate([[0], nl[:-1] + 1])
    nonempty = np.flatnonzero(counts > 0)          # rows are the non-blank lines
    tok_first = np.cumsum(counts) - counts
    out, row = {}, 0
    for el in elements:
        n = el["count"]
        if row + n > len(nonempty):
            raise ConfigError(f"truncated PLY file: element '{el['name']}' needs {n} rows, "
                              f"{len(nonempty) - row} left", file=path)
        lines = nonempty[row:row + n]
        row += n
        if el["name"] not in ("vertex", "face") or n == 0:
            continue
        integer = all(np.dtype(t).kind in "iu" and (item is None or np.dtype(item).kind in "iu")
                      for _, t, item in el["props"])
        text = body[int(line_start[lines[0]]):int(nl[lines[-1]]) + 1]
        nums = _parse_numbers(text, np.int64 if integer else np.float64, path,
                              f"PLY element '{el['name']}'")
        off = (tok_first[lines] - tok_first[lines[0]]).astype(np.int64)
        if len(nums) != int(counts[lines].sum()):
            raise ConfigError(f"malformed PLY ascii data in element '{el['name']}'", file=path)
        end = off + counts[lines]
        vals = {}
        for name, _, item in el["props"]:
            if np.any(off >= end):
                raise ConfigError(f"truncated row in PLY element '{el['name']}'", file=path)
            if item is None:
                vals[name] = nums[off]
                off = off + 1
            else:
                c = nums[off]
                if np.any(c != np.round(c)) or np.any(c < 0):
                    raise ConfigError("bad list count in PLY data", file=path)
                c = c.astype(np.int64)
                if np.any(off + 1 + c > end):
                    raise ConfigError(f"truncated row in PLY element '{el['name']}'", file=path)
                if len(c) and c.min() == c.max():
                    idx = (off + 1)[:, None] + np.arange(int(c[0]))
                else:
                    idx = np.repeat(off + 1 - (np.cumsum(c) - c), c) + np.arange(int(c.sum()))
                vals[name] = (nums[idx].reshape(-1), c)
                off = off + 1 + c
        out[el["name"]] = vals
    return out


def _ply_binary(data, pos, elements, endian, path):
    out = {}
    for el in elements:
        try:
            vals, pos = _ply_binary_element(data, pos, el, endian)
        except (ValueError, struct.error, IndexError):
            raise ConfigError(f"truncated PLY file (element '{el['name']}' with {el['count']} rows "
                              f"does not fit)", file=path) from None
        out[el["name"]] = vals
    return out


def _ply_binary_element(data, pos, el, endian):
    n, props = el["count"], el["props"]
    # Fast path: every list of this element has the same count as in row 0 -> structured dtype.
    fields, p = [], pos
    for name, t, item in props:
        if item is None:
            fields.append((name, endian + t))
            p += np.dtype(t).itemsize
        else:
            if n == 0:
                c = 1
            else:
                c = int(np.frombuffer(data, dtype=endian + t, count=1, offset=p)[0])
            if c == 0:
                return _ply_binary_element_slow(data, pos, el, endian)
            fields.append(("__count_" + name, endian + t))
            fields.append((name, endian + item, (c,)))
            p += np.dtype(t).itemsize + c * np.dtype(item).itemsize
    dt = np.dtype(fields)
    if pos + n * dt.itemsize > len(data):
        return _ply_binary_element_slow(data, pos, el, endian)
    arr = np.frombuffer(data, dtype=dt, count=n, offset=pos)
    for name, t, item in props:
        if item is not None and not np.all(arr["__count_" + name] == dt[name].shape[0]):
            return _ply_binary_element_slow(data, pos, el, endian)
    vals = {}
    for name, t, item in props:
        if item is None:
            vals[name] = arr[name]
        else:
            vals[name] = (arr[name].reshape(-1), arr["__count_" + name].astype(np.int64))
    return vals, pos + n * dt.itemsize


def _ply_binary_element_slow(data, pos, el, endian):
    """Rows with varying list counts: one Python step per row to find the row offsets, then
    vectorised gathers."""
    n, props = el["count"], el["props"]
    sizes = [np.dtype(t).itemsize for _, t, _ in props]
    codes = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I"}
    prop_off = {name: [] for name, _, _ in props}   # per prop: byte offset of value / list start
    list_cnt = {name: [] for name, _, item in props if item is not None}
    unpackers = [struct.Struct(endian + codes.get(t, "i")) if item is not None else None
                 for _, t, item in props]
    p = pos
    for _ in range(n):
        for (name, t, item), sz, up in zip(props, sizes, unpackers):
            if item is None:
                prop_off[name].append(p)
                p += sz
            else:
                c = up.unpack_from(data, p)[0]
                p += sz
                prop_off[name].append(p)
                list_cnt[name].append(c)
                p += c * np.dtype(item).itemsize
    if p > len(data):
        raise ValueError("truncated")
    B = np.frombuffer(data, dtype=np.uint8)
    vals = {}
    for name, t, item in props:
        offs = np.asarray(prop_off[name], dtype=np.int64)
        if item is None:
            sz = np.dtype(t).itemsize
            vals[name] = B[offs[:, None] + np.arange(sz)].copy().view(endian + t).reshape(-1)
        else:
            cnt = np.asarray(list_cnt[name], dtype=np.int64)
            sz = np.dtype(item).itemsize
            k = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            start = np.repeat(offs, cnt) + k * sz
            flat = B[start[:, None] + np.arange(sz)].copy().view(endian + item).reshape(-1)
            vals[name] = (flat, cnt)
    return vals, p
