"""A scene's triangles on the host, compactly, and their upload in BVH order (one kernel).

The host keeps each mesh's vertices and faces once (:class:`Triangles`: the shapes' arrays concatenated, the
shapes' own arrays becoming views into them) and the BVH's triangle order; :func:`gather` writes the device's
per-triangle corners (``tri_p0``, ``tri_e1 = p1 - p0``, ``tri_e2``, ``tri_n*``, ``tri_uv*``, ``tri_shape``) in
that order from them, so that the host holds no per-corner copies (1.5 of the lego scene's 2 M triangles: about 250 MB
less). :func:`write_rows` rewrites some triangles (differentiable meshes that moved). :func:`tri_hf` and
:func:`tri_dm` read the per-triangle extras of storages that have them.
"""
import numpy as np
import taichi as ti

nd = ti.types.ndarray


class Triangles:
    """The triangles of `shapes` (scene.description shapes), each array once: ``pos`` (V, 3) float32 the
    vertices of every shape, ``nrm`` (V, 3) their normals (0 for shapes without), ``uv`` (V, 2) (0 for shapes
    without), ``face`` (T, 3) int32 every shape's faces (indices into its own vertices), ``shape`` (T,) int32
    each triangle's shape, ``vfirst`` (S,) int32 each shape's first vertex, ``starts`` each shape's first
    triangle; ``order`` (T,) the BVH's triangle order once set. The shapes' positions, normals, uvs and faces
    become views of these arrays (same values, no second copy)."""

    def __init__(self, shapes):
        vcount = [len(s.positions) for s in shapes]
        fcount = [len(s.faces) for s in shapes]
        vfirst = np.concatenate([[0], np.cumsum(vcount)]).astype(np.int64)
        ffirst = np.concatenate([[0], np.cumsum(fcount)]).astype(np.int64)
        V, T = int(vfirst[-1]), int(ffirst[-1])
        self.starts = [int(x) for x in ffirst[:-1]]
        self.vfirst = vfirst[:-1].astype(np.int32)
        self.pos = np.empty((V, 3), np.float32)
        self.nrm = np.zeros((V, 3), np.float32)
        self.uv = np.zeros((V, 2), np.float32)
        self.face = np.empty((T, 3), np.int32)
        self.shape = np.repeat(np.arange(len(shapes), dtype=np.int32), fcount)
        self.order = None
        for i, s in enumerate(shapes):
            v0, v1, f0, f1 = vfirst[i], vfirst[i + 1], ffirst[i], ffirst[i + 1]
            self.pos[v0:v1] = s.positions
            s.positions = self.pos[v0:v1]
            if s.normals is not None:
                self.nrm[v0:v1] = s.normals
                s.normals = self.nrm[v0:v1]
            if s.uvs is not None:
                self.uv[v0:v1] = s.uvs
                s.uvs = self.uv[v0:v1]
            self.face[f0:f1] = s.faces
            s.faces = self.face[f0:f1]

    def __len__(self):
        return len(self.face)

    def corners(self):
        """Every triangle's vertex indices into ``pos`` (T, 3) int32, input order."""
        return self.face + self.vfirst[self.shape][:, None]


@ti.kernel
def _gather(st: ti.template(), pos: nd(ndim=2), nrm: nd(ndim=2), uv: nd(ndim=2), face: nd(ndim=2),
            shape: nd(ndim=1), vfirst: nd(ndim=1), order: nd(ndim=1), n: ti.i32):
    for k in range(st.tri_p0.shape[0]):
        if k < n:
            t = order[k]
            s = shape[t]
            o = vfirst[s]
            f0, f1, f2 = face[t, 0] + o, face[t, 1] + o, face[t, 2] + o
            p0 = ti.Vector([pos[f0, 0], pos[f0, 1], pos[f0, 2]])
            st.tri_p0[k] = p0
            st.tri_e1[k] = ti.Vector([pos[f1, 0], pos[f1, 1], pos[f1, 2]]) - p0
            st.tri_e2[k] = ti.Vector([pos[f2, 0], pos[f2, 1], pos[f2, 2]]) - p0
            st.tri_n0[k] = ti.Vector([nrm[f0, 0], nrm[f0, 1], nrm[f0, 2]])
            st.tri_n1[k] = ti.Vector([nrm[f1, 0], nrm[f1, 1], nrm[f1, 2]])
            st.tri_n2[k] = ti.Vector([nrm[f2, 0], nrm[f2, 1], nrm[f2, 2]])
            st.tri_uv0[k] = ti.Vector([uv[f0, 0], uv[f0, 1]])
            st.tri_uv1[k] = ti.Vector([uv[f1, 0], uv[f1, 1]])
            st.tri_uv2[k] = ti.Vector([uv[f2, 0], uv[f2, 1]])
            st.tri_shape[k] = s
            if ti.static(st.tri_extra):
                st.tri_hf[k] = -1
                st.tri_code[k] = ti.Vector([-1, -1, -1])
                st.tri_dm[k] = -1
                st.tri_face[k] = -1
        else:
            st.tri_p0[k] = ti.Vector([0.0, 0.0, 0.0])
            st.tri_e1[k] = ti.Vector([0.0, 0.0, 0.0])
            st.tri_e2[k] = ti.Vector([0.0, 0.0, 0.0])
            st.tri_n0[k] = ti.Vector([0.0, 0.0, 0.0])
            st.tri_n1[k] = ti.Vector([0.0, 0.0, 0.0])
            st.tri_n2[k] = ti.Vector([0.0, 0.0, 0.0])
            st.tri_uv0[k] = ti.Vector([0.0, 0.0])
            st.tri_uv1[k] = ti.Vector([0.0, 0.0])
            st.tri_uv2[k] = ti.Vector([0.0, 0.0])
            st.tri_shape[k] = 0
            if ti.static(st.tri_extra):
                st.tri_hf[k] = 0
                st.tri_code[k] = ti.Vector([0, 0, 0])
                st.tri_dm[k] = 0
                st.tri_face[k] = 0


def gather(st, tri):
    """Write every triangle row of storage st from `tri` (Triangles with its BVH order): row k is triangle
    tri.order[k] (corners, normals, uvs, shape); on a storage with per-triangle extras (st.tri_extra) tri_hf,
    tri_code, tri_dm, tri_face = -1 (the scene uploads its own where it has height fields, differentiable meshes or
    mesh attributes); rows past the triangles zeroed."""
    _gather(st, tri.pos, tri.nrm, tri.uv, tri.face, tri.shape, tri.vfirst, tri.order, len(tri))


@ti.func
def tri_hf(st: ti.template(), tri):
    """st.tri_hf[tri] (the triangle's height field, scene/heightfield.py), -1 on a storage without per-triangle
    extras (no scene of its process had height fields, differentiable meshes or mesh attributes)."""
    r = -1
    if ti.static(st.tri_extra):
        r = st.tri_hf[tri]
    return r


@ti.func
def tri_dm(st: ti.template(), tri):
    """st.tri_dm[tri] (the triangle's differentiable mesh slot, scene/deform.py), -1 on a storage without
    per-triangle extras."""
    r = -1
    if ti.static(st.tri_extra):
        r = st.tri_dm[tri]
    return r


@ti.kernel
def _write_rows(st: ti.template(), rows: nd(ndim=1), pe: nd(ndim=3), n: nd(ndim=3), smooth: ti.i32):
    for i in range(rows.shape[0]):
        k = rows[i]
        st.tri_p0[k] = ti.Vector([pe[i, 0, 0], pe[i, 0, 1], pe[i, 0, 2]])
        st.tri_e1[k] = ti.Vector([pe[i, 1, 0], pe[i, 1, 1], pe[i, 1, 2]])
        st.tri_e2[k] = ti.Vector([pe[i, 2, 0], pe[i, 2, 1], pe[i, 2, 2]])
        if smooth:
            st.tri_n0[k] = ti.Vector([n[i, 0, 0], n[i, 0, 1], n[i, 0, 2]])
            st.tri_n1[k] = ti.Vector([n[i, 1, 0], n[i, 1, 1], n[i, 1, 2]])
            st.tri_n2[k] = ti.Vector([n[i, 2, 0], n[i, 2, 1], n[i, 2, 2]])


def write_rows(st, rows, corners, normals=None):
    """Rewrite triangles `rows` (BVH order) of storage st from their corners (R, 3, 3) (world positions, any
    float type: p0 and the edges p1 - p0, p2 - p0 are taken in it, then stored as float32, as the scene's own
    triangles) and, if given, their corner normals (R, 3, 3)."""
    c = np.asarray(corners)
    pe = np.stack([c[:, 0], c[:, 1] - c[:, 0], c[:, 2] - c[:, 0]], 1).astype(np.float32)
    n = pe if normals is None else np.ascontiguousarray(normals, np.float32)
    _write_rows(st, np.ascontiguousarray(rows, np.int32), pe, n, int(normals is not None))
