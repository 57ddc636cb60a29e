"""Triangle mesh files: Wavefront OBJ, PLY (ascii, binary little/big endian) and Mitsuba's
``.serialized`` (zlib-compressed, versions 3 and 4, several shapes per file).

Everything is parsed with vectorised numpy (no per-face Python loop on the common paths),
so a 1M-triangle file loads in a few seconds.  A loaded mesh is a dict::

    positions  (V, 3) float32    vertex positions (scene units)
    faces      (F, 3) int32      vertex indices of the triangles (polygons fan-triangulated)
    normals    (V, 3) float32 or None   per-vertex shading normals (as stored, not normalised)
    uvs        (V, 2) float32 or None   per-vertex texture coordinates
    attributes {name: (V or F, C) float32}   PLY's other vertex / face properties, grouped and named
               as Mitsuba's ply.h does (``vertex_color``, ``face_weight``, ...; a polygon's face row is
               repeated for each of its triangles); empty for OBJ and .serialized

PLY scalar properties read as Mitsuba 3 reads them (its Struct conversion with the Normalized | Gamma
flags it gives every integer property): float and double as stored; uchar as the stored integer; any
other integer type divided by the type's largest value and then decoded from sRGB (x / 12.92 up to
0.04045, else ((x + 0.055) / 1.055)^2.4).

Bad input raises :class:`tirender.errors.ConfigError` naming the file.
"""
import os
import struct
import warnings
import zlib

import numpy as np

from ..errors import ConfigError
from ..io.atomic import atomic_write_bytes as _atomic_write

__all__ = ["load_mesh", "save_ply", "save_obj", "clean_triangles", "angle_weighted_normals"]

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True


# --------------------------------------------------------------------------- public API
def load_mesh(path, shape_index=0):
    """Load an ``.obj``, ``.ply`` or ``.serialized`` triangle mesh -> dict(positions, faces, normals,
    uvs, attributes).

    Polygons are fan-triangulated; OBJ corners are de-duplicated per unique (v, vt, vn)
    triple so that the result is an indexed mesh with per-vertex attributes. shape_index: which
    mesh of a ``.serialized`` file (0 for the others).
    Raises ConfigError (with the file name) for a missing/unreadable file, an unknown
    extension, a truncated or malformed file, out-of-range indices, non-finite vertex
    coordinates, or a file without faces.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".obj", ".ply", ".serialized"):
        raise ConfigError(f"unknown mesh format '{ext or path}' (expected .obj, .ply or .serialized)", file=path)
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
    elif ext == ".ply":
        mesh = _parse_ply(data, path)
    else:
        mesh = _parse_serialized(data, path, shape_index)
    _validate(mesh, path)
    mesh["faces"] = np.ascontiguousarray(mesh["faces"], dtype=np.int32)
    return mesh


def row_norms(a):
    """|a_i| (N,) of the rows of a (N, 3): the bits of ``np.linalg.norm(a, axis=1)`` (x² + y², then + z²), without
    numpy's slow reduction over a short axis (~2x faster on large meshes)."""
    s = a[:, 0] * a[:, 0]
    s += a[:, 1] * a[:, 1]
    s += a[:, 2] * a[:, 2]
    return np.sqrt(s)


def triangle_areas(positions, faces):
    """Areas (F,) float64 of triangles faces (F, 3) over positions (V, 3), computed in float64: 0.5 |(p1 - p0) ×
    (p2 - p0)|, the bits of ``0.5 * np.linalg.norm(np.cross(...), axis=1)`` with fewer temporaries."""
    p = np.asarray(positions, np.float64)
    p0 = p[faces[:, 0]]
    e1 = p[faces[:, 1]]
    e1 -= p0
    e2 = p[faces[:, 2]]
    e2 -= p0
    del p0
    a0, a1, a2, b0, b1, b2 = e1[:, 0], e1[:, 1], e1[:, 2], e2[:, 0], e2[:, 1], e2[:, 2]
    c = a1 * b2 - a2 * b1
    s = c * c
    c = a2 * b0 - a0 * b2
    s += c * c
    c = a0 * b1 - a1 * b0
    s += c * c
    return 0.5 * np.sqrt(s)


def box_extent(positions):
    """The largest side of the bounding box of positions (V, 3) (0 for none): per-column min / max, ~10x faster
    than ``np.ptp(positions, axis=0).max()``, the same value."""
    if not len(positions):
        return 0.0
    return float(max(positions[:, k].max() - positions[:, k].min() for k in range(3)))


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
    if not np.isfinite(pos).all():
        bad = ~np.isfinite(pos).all(axis=1)
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


def _mesh(positions, faces, normals, uvs, attributes=None):
    return dict(
        positions=np.ascontiguousarray(positions, dtype=np.float32).reshape(-1, 3),
        faces=np.asarray(faces, dtype=np.int64).reshape(-1, 3),
        normals=None if normals is None else np.ascontiguousarray(normals, dtype=np.float32),
        uvs=None if uvs is None else np.ascontiguousarray(uvs, dtype=np.float32),
        attributes=dict(attributes or {}),
    )


# --------------------------------------------------------------------------- PLY
_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "long": "i8", "ulong": "u8", "half": "f2", "float16": "f2",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
# Mitsuba's texture-coordinate names, in its order of preference (ply.cpp); texture_s/t: tirender's last resort
_UV_NAMES = [("u", "v"), ("texture_u", "texture_v"), ("s", "t"), ("texture_s", "texture_t")]
# ply.h find_other_fields: an attribute's components are <prefix>_<c> with c running through one column
_POSTFIXES = ("xr01", "yg12", "zb23", "wa34")


def _ply_float(v, t):
    """A PLY scalar property as Mitsuba reads it (module docstring) -> float32 array."""
    dt = np.dtype(t)
    if dt.kind == "f" or dt == np.uint8:
        return np.asarray(v).astype(np.float32)
    x = np.asarray(v, np.float64) / float(np.iinfo(dt).max)
    x = np.where(x <= 0.04045, x / 12.92, ((np.maximum(x, 0.04045) + 0.055) / 1.055) ** 2.4)
    return x.astype(np.float32)


def _ply_attribute_fields(kind, names, reserved):
    """Mitsuba's grouping of an element's other scalar properties into mesh attributes (ply.h
    find_other_fields, ported with its rules and quirks): ``r g b [a]`` / ``red green blue [alpha]`` ->
    ``<kind>color``; runs of ``<prefix>_<c>`` with c = x y z w / r g b a / 0 1 2 3 / 1 2 3 4 of length 1 or 3
    -> ``<kind><prefix>`` (``<kind><prefix>_color`` for r g b); everything else is left out (Mitsuba warns).
    names: the element's scalar properties in file order. Returns [(attribute name, [property names])]."""
    have = set(names)
    rename = {}
    if not {"r", "g", "b"} <= have and {"red", "green", "blue"} <= have:
        rename = {"red": "r", "green": "g", "blue": "b", "alpha": "a"}
    mapped = [rename.get(n, n) for n in names]
    orig = dict(zip(mapped, names))
    out = []
    if {"r", "g", "b"} <= set(mapped):
        out.append((kind + "color", [orig[c] for c in ("r", "g", "b", "a") if c in orig]))
    reserved = set(reserved) | {"r", "g", "b", "a"}
    st = dict(prefix="", post=0, level=0, reading=False)
    seen = set()

    def reset():
        st.update(prefix="", post=0, level=0, reading=False)

    def flush():
        if st["level"] in (1, 3):
            fields = [orig.get(f"{st['prefix']}_{_POSTFIXES[k][st['post']]}") for k in range(st["level"])]
            if None not in fields:
                out.append((kind + st["prefix"] + ("_color" if st["post"] == 1 else ""), fields))
            seen.add(st["prefix"])
        reset()

    i, n = 0, len(mapped)
    while i < n:
        name = mapped[i]
        if name in reserved:
            i += 1
            continue
        cut = name.rfind("_")
        if cut < 0 or len(name) - cut - 1 != 1:
            if st["reading"]:
                flush()
            i += 1
            continue
        prefix, ch = name[:cut], name[cut + 1]
        if st["reading"] and prefix != st["prefix"]:
            flush()
        if not st["reading"] and prefix in seen:
            while i < n and mapped[i].startswith(prefix):
                i += 1
            i += 1
            continue
        if not st["reading"]:
            k = _POSTFIXES[0].find(ch)
            if k < 0:
                i += 1
                continue
            st.update(reading=True, post=k, prefix=prefix)
        elif st["level"] >= 4 or ch != _POSTFIXES[st["level"]][st["post"]]:
            reset()
            while i < n and mapped[i].startswith(prefix):
                i += 1
            if i == n:
                break
        st["level"] += 1
        i += 1
    if st["reading"]:
        flush()
    return out


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
    types = {el["name"]: {n: t for n, t, item in el["props"] if item is None}
             for el in elements if el["name"] in ("vertex", "face")}
    vert = values["vertex"]
    for n in "xyz":
        if n not in vert or isinstance(vert[n], tuple):
            raise ConfigError(f"PLY vertex element lacks property '{n}'", file=path)

    def col(el, n):
        return _ply_float(values[el][n], types[el][n])

    positions = np.stack([col("vertex", "x"), col("vertex", "y"), col("vertex", "z")], axis=1)
    normals = None
    if all(n in types["vertex"] for n in ("nx", "ny", "nz")):
        normals = np.stack([col("vertex", "nx"), col("vertex", "ny"), col("vertex", "nz")], axis=1)
    uvs, uv_names = None, ()
    for a, b in _UV_NAMES:
        if a in types["vertex"] and b in types["vertex"]:
            uvs, uv_names = np.stack([col("vertex", a), col("vertex", b)], axis=1), (a, b)
            break
    face = values["face"]
    lst = face.get("vertex_indices", face.get("vertex_index"))
    if not isinstance(lst, tuple):
        raise ConfigError("PLY face element lacks list property 'vertex_indices'", file=path)
    flat, counts = lst
    faces = _fan(flat.astype(np.int64), counts, path)
    attributes = {}
    for el, kind, reserved in (("vertex", "vertex_", {"x", "y", "z", "nx", "ny", "nz", *uv_names}),
                               ("face", "face_", set())):
        names = [n for n, t, item in next(e for e in elements if e["name"] == el)["props"] if item is None]
        for name, fields in _ply_attribute_fields(kind, names, reserved):
            a = np.stack([col(el, f) for f in fields], axis=1)
            if el == "face":              # a polygon's row for each triangle of its fan
                a = np.repeat(a, np.asarray(counts, np.int64) - 2, axis=0)
            attributes.setdefault(name, a)
    return _mesh(positions, faces, normals, uvs, attributes)


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


# --------------------------------------------------------------------------- Mitsuba .serialized
SERIALIZED_MAGIC = 0x041C
_SER_NORMALS, _SER_UVS, _SER_COLORS, _SER_DOUBLE = 0x0001, 0x0002, 0x0008, 0x2000


class _Inflate:
    """Sequential reads from one zlib stream starting at a memoryview (decompressing only what is read)."""

    def __init__(self, src, path, what):
        self.z, self.tail, self.buf, self.path, self.what = zlib.decompressobj(), src, b"", path, what

    def read(self, n):
        while len(self.buf) < n and len(self.tail) and not self.z.eof:
            try:
                chunk = self.z.decompress(self.tail, n - len(self.buf))
            except zlib.error as e:
                raise ConfigError(f"corrupt compressed data in {self.what} ({e})", file=self.path) from None
            self.tail = self.z.unconsumed_tail
            self.buf += chunk
        if len(self.buf) < n:
            raise ConfigError(f"truncated file: {self.what} ends early", file=self.path)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _serialized_range(data, path, index):
    """(start, end, version) of shape `index`'s compressed stream, from the end-of-file dictionary (Mitsuba's
    serialized.cpp: uint32 count last, before it the streams' offsets, uint64 in version 4, uint32 in 3)."""
    if len(data) < 4:
        raise ConfigError("truncated .serialized file (no header)", file=path)
    magic, version = struct.unpack_from("<HH", data, 0)
    if magic != SERIALIZED_MAGIC:
        raise ConfigError(f"not a Mitsuba .serialized file (identifier 0x{magic:04X}, expected 0x041C)", file=path)
    if version not in (3, 4):
        raise ConfigError(f"unsupported .serialized version {version} (Mitsuba 3 reads versions 3 and 4)", file=path)
    if index == 0:
        return 4, len(data), version
    count = struct.unpack_from("<I", data, len(data) - 4)[0] if len(data) >= 8 else 0
    if index >= count:
        raise ConfigError(f"shape_index {index} is out of range: the file holds {count} shape(s)", file=path)
    width = 8 if version == 4 else 4
    table = len(data) - 4 - width * count
    if table < 4:
        raise ConfigError(f"corrupt shape dictionary at the end of the file ({count} shapes do not fit)", file=path)
    offsets = np.frombuffer(data, "<u8" if width == 8 else "<u4", count, table).astype(np.int64)
    start = int(offsets[index])
    end = int(offsets[index + 1]) if index + 1 < count else table
    if not 0 <= start < end <= table or end - start < 4:
        raise ConfigError(f"corrupt shape dictionary: shape {index} at byte {start}", file=path)
    return start + 4, end, version


def _parse_serialized(data, path, index):
    """Shape `index` of a Mitsuba .serialized file (src/shapes/serialized.cpp, versions 3 and 4): per shape a
    uint16 identifier 0x041C and version, then a zlib stream of the flags (uint32: 0x1 normals, 0x2 uvs,
    0x8 colours, 0x2000 double precision), the name (version 4: null-terminated), uint64 vertex and triangle
    counts, positions, normals, uvs and colours (float or double, per vertex) and uint32 triangle indices.
    Colours are skipped, as Mitsuba 3 skips them; the flag 0x0010 (face normals) is not read (Mitsuba 3.9
    reads only the ``face_normals`` property)."""
    start, end, version = _serialized_range(data, path, index)
    what = f"shape {index}"
    z = _Inflate(memoryview(data)[start:end], path, what)
    flags = struct.unpack("<I", z.read(4))[0]
    name = b""
    if version == 4:
        while True:
            ch = z.read(1)
            if ch == b"\0":
                break
            name += ch
            if len(name) > 1 << 16:
                raise ConfigError(f"corrupt {what}: its name has no end", file=path)
    V, F = struct.unpack("<QQ", z.read(16))
    if V >= 1 << 32:
        raise ConfigError(f"{what} has {V} vertices: indices of 2^32 vertices and more (64-bit) are not supported "
                          f"(nor by Mitsuba 3)", file=path)
    fs = 8 if flags & _SER_DOUBLE else 4
    lanes = 3 + 3 * bool(flags & _SER_NORMALS) + 2 * bool(flags & _SER_UVS) + 3 * bool(flags & _SER_COLORS)
    nbytes = V * lanes * fs + F * 12
    from ..limits import check
    check(nbytes, f"mesh of {V} vertices and {F} triangles", path, copies=16, bytes_per_value=1)
    ftype = "<f8" if fs == 8 else "<f4"

    def floats(k):
        return np.frombuffer(z.read(V * k * fs), ftype).reshape(V, k).astype(np.float32)

    positions = floats(3)
    normals = floats(3) if flags & _SER_NORMALS else None
    uvs = floats(2) if flags & _SER_UVS else None
    if flags & _SER_COLORS:
        z.read(V * 3 * fs)
    faces = np.frombuffer(z.read(F * 12), "<u4").reshape(F, 3).astype(np.int64)
    mesh = _mesh(positions, faces, normals, uvs)
    mesh["name"] = name.decode("utf-8", "replace")
    return mesh


# --------------------------------------------------------------------------- vertex normals
def angle_weighted_normals(positions, faces):
    """Mitsuba 3's vertex normals of a mesh without them (Mesh::recompute_vertex_normals, after Thürmer and
    Wüthrich 1998): each face's unit normal n_f = normalize((p1 - p0) × (p2 - p0)) weighted by the face's angle at
    the vertex, summed over the faces around it and normalised; zero-area faces add nothing, a vertex without a
    valid face gets (1, 0, 0). Computed in float64 (Mitsuba: float32; they agree to float32 rounding), so that
    coordinates up to 1e15 stay finite. positions (V, 3), faces (F, 3) -> (V, 3) float32."""
    p = np.asarray(positions, np.float64)
    f = np.asarray(faces, np.int64).reshape(-1, 3)
    v0, v1, v2 = p[f[:, 0]], p[f[:, 1]], p[f[:, 2]]
    n = np.cross(v1 - v0, v2 - v0)
    ln = np.linalg.norm(n, axis=1)
    ok = ln > 0
    n = n[ok] / ln[ok][:, None]

    def unit(a):
        la = np.linalg.norm(a, axis=1)[:, None]
        return a / np.where(la > 0, la, 1.0)

    def angle(a, b):       # drjit's unit_angle: 2 asin(|b - sign(a·b) a| / 2), π minus that when a·b < 0
        d = np.einsum("ij,ij->i", a, b)
        t = 2 * np.arcsin(np.minimum(0.5 * np.linalg.norm(b - np.where(d >= 0, 1.0, -1.0)[:, None] * a, axis=1), 1.0))
        return np.where(d >= 0, t, np.pi - t)

    w0, w1, w2 = v0[ok], v1[ok], v2[ok]
    ang = np.stack([angle(unit(w1 - w0), unit(w2 - w0)), angle(unit(w2 - w1), unit(w0 - w1)),
                    angle(unit(w0 - w2), unit(w1 - w2))], 1)
    idx, contrib = f[ok].reshape(-1), (n[:, None, :] * ang[:, :, None]).reshape(-1, 3)
    out = np.stack([np.bincount(idx, contrib[:, k], minlength=len(p)).astype(np.float64) for k in range(3)], 1)
    lo = np.linalg.norm(out, axis=1)
    good = lo != 0
    out[good] /= lo[good][:, None]
    out[~good] = (1.0, 0.0, 0.0)
    return out.astype(np.float32)
