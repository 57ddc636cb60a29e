"""Shapes that are not triangle meshes, on the host: Mitsuba's analytic ``sphere``, ``disk`` and ``cylinder`` and its
``sdfgrid`` (scene/sdfgrid.py). Each is one record of the device's ``geo_*`` table (core/implicit.py: layout) and a
few BVH primitives in triangle rows whose edge e2 is zero (p0 and p0 + e1 the corners of the primitive's world box):
one per quadric, one per voxel the SDF's surface crosses.

As Mitsuba (src/shapes/sphere.cpp, disk.cpp, cylinder.cpp), in object space: the unit sphere (centre to_world·0,
radius |to_world·(1, 0, 0)|: a non-uniformly scaled sphere stays a sphere, with a warning), the unit disk in z = 0
(normal +z), the open unit cylinder from z = 0 to 1. ``flip_normals`` turns the normals inwards. Normals as Mitsuba
3.9's (probed): the disk's and the cylinder's are the object normals through to_world's normal matrix (the cylinder's
stay outward under a mirroring to_world), the sphere's p - centre, inwards when to_world mirrors (det < 0).
"""
from dataclasses import dataclass

import numpy as np

SDF, SPHERE, DISK, CYLINDER, INSTANCE = 1, 2, 3, 4, 5
KINDS = {"sdfgrid": SDF, "sphere": SPHERE, "disk": DISK, "cylinder": CYLINDER}
QUADRICS = ("sphere", "disk", "cylinder")
FLIP, SMOOTH = 1, 2                        # geo_flags bits
CORNERS = np.array([[c & 1, (c >> 1) & 1, (c >> 2) & 1] for c in range(8)], np.float64)   # (8, 3): x, y, z bits


def box_under(lo, hi, m, pad=False):
    """(lo', hi'): the world box around the boxes [lo, hi] ((..., 3) each) mapped by the 4x4 affine m (their 8
    corners); with `pad`, widened by 1e-6 of the box's largest coordinate (a flat box keeps a width)."""
    m = np.asarray(m, np.float64)
    corners = np.where(CORNERS > 0, np.asarray(hi, np.float64)[..., None, :], np.asarray(lo, np.float64)[..., None, :])
    c = corners @ m[:3, :3].T + m[:3, 3]
    a, b = c.min(-2), c.max(-2)
    if pad:
        w = 1e-6 * max(float(np.abs(np.concatenate([a.ravel(), b.ravel()])).max()), 1e-30)
        a, b = a - w, b + w
    return a, b


@dataclass
class Implicit:
    """One non-mesh shape: kind (KINDS), to_world 4x4 (object -> world), flip (normals inwards), and for an SDF grid
    its values (D, H, W) float32 [z, y, x] and the normal mode (smooth: Mitsuba's "smooth", else "analytic"); for
    an instance (INSTANCE, device records only) values is its group tree's root node."""
    kind: int
    to_world: np.ndarray
    flip: bool = False
    values: np.ndarray = None
    smooth: bool = True

    def sphere(self):
        """(centre (3,), radius) of a sphere, Mitsuba's: to_world·0 and |to_world·(1, 0, 0)|."""
        m = np.asarray(self.to_world, np.float64)
        return m[:3, 3].copy(), float(np.linalg.norm(m[:3, 0]))

    def flipped(self):
        """Whether the normals point inwards: flip_normals, toggled for a sphere whose to_world mirrors."""
        mirror = np.linalg.det(np.asarray(self.to_world, np.float64)[:3, :3]) < 0
        return bool(self.flip) ^ bool(mirror and self.kind == SPHERE)

    def area(self):
        """Surface area (scene units²), Mitsuba's formulas (0 for an SDF grid, which cannot emit)."""
        m = np.asarray(self.to_world, np.float64)
        if self.kind == SPHERE:
            return 4.0 * np.pi * self.sphere()[1] ** 2
        if self.kind == DISK:
            return np.pi * float(np.linalg.norm(np.cross(m[:3, 0], m[:3, 1])))
        if self.kind == CYLINDER:
            return 2.0 * np.pi * float(np.linalg.norm(m[:3, 0])) * float(np.linalg.norm(m[:3, 2]))
        return 0.0

    def world_box(self):
        """(lo, hi) (3,) float64: the world box of the shape."""
        m = np.asarray(self.to_world, np.float64)
        if self.kind == SPHERE:
            c, r = self.sphere()
            return c - r, c + r
        lo = {DISK: (-1.0, -1.0, 0.0), CYLINDER: (-1.0, -1.0, 0.0)}.get(self.kind, (0.0, 0.0, 0.0))
        return box_under(lo, (1.0, 1.0, 0.0 if self.kind == DISK else 1.0), m)


def is_similarity(m, tol=1e-5):
    """Whether the linear part of 4x4 m is a rotation (or mirror) times a uniform scale (Mitsuba's test)."""
    a = np.asarray(m, np.float64)[:3, :3]
    g = a.T @ a
    s = np.trace(g) / 3.0
    return s > 0 and np.allclose(g, s * np.eye(3), atol=tol * s)


def quadric_prim(kind, to_world, flip):
    """The shape arrays of a sphere, disk or cylinder: one primitive (the world box's corners as two vertices,
    face (0, 1, 0)), no normals, zero uvs. dict(positions, faces, normals, uvs, implicit)."""
    imp = Implicit(KINDS[kind], np.asarray(to_world, np.float64), bool(flip))
    lo, hi = imp.world_box()
    lo, hi = box_under(lo, hi, np.eye(4), pad=True)                          # flat boxes (disks) keep a width
    pos = np.array([lo, hi], np.float32)
    return dict(positions=pos, faces=np.array([[0, 1, 0]], np.int32), normals=None,
                uvs=np.zeros((2, 2), np.float32), implicit=imp)


def device_rows(shapes, placed=()):
    """The per-shape record index (``shape_geo``, -1 for meshes) and the records of core/implicit.py for a scene's
    shapes and, after them, its instances' boxes (`placed`: per instance its 4x4 to_world and its group tree's root
    node, scene/toplevel.py). Returns (arrays, counts): counts = dict(geos=records, sdfv=SDF values, quads=quadrics,
    insts=instances)."""
    a = {"shape_geo": np.full(max(len(shapes) + len(placed), 1), -1, np.int32)}
    recs = [(i, s.implicit) for i, s in enumerate(shapes) if s.implicit is not None]
    recs += [(len(shapes) + j, Implicit(INSTANCE, np.asarray(m, np.float64), values=root))
             for j, (m, root) in enumerate(placed)]
    counts = dict(geos=len(recs), sdfv=0, quads=sum(imp.kind in (SPHERE, DISK, CYLINDER) for _, imp in recs),
                  insts=len(placed))
    if not recs:
        return a, counts
    cols = {k: [] for k in ("geo_kind", "geo_flags", "geo_off", "geo_res", "geo_to_obj", "geo_to_world", "geo_nm",
                            "geo_c", "geo_r", "geo_ray")}
    vals = []
    for g, (i, imp) in enumerate(recs):
        a["shape_geo"][i] = g
        m = np.asarray(imp.to_world, np.float64)
        centre, radius = imp.sphere() if imp.kind == SPHERE else (m[:3, 3], 1.0)
        res = imp.values.shape[::-1] if imp.kind == SDF else (0, 0, 0)
        off = imp.values if imp.kind == INSTANCE else counts["sdfv"]      # an instance: its group tree's root
        to_obj = np.linalg.inv(m)[:3]
        ray = np.hstack([np.eye(3) / radius, -centre[:, None] / radius]) if imp.kind == SPHERE else to_obj
        for k, v in (("geo_kind", imp.kind), ("geo_flags", FLIP * imp.flipped() | SMOOTH * bool(imp.smooth)),
                     ("geo_off", off), ("geo_res", res), ("geo_to_obj", to_obj), ("geo_to_world", m[:3]),
                     ("geo_nm", np.linalg.inv(m[:3, :3]).T), ("geo_c", centre), ("geo_r", radius), ("geo_ray", ray)):
            cols[k].append(v)
        if imp.kind == SDF:
            vals.append(imp.values.reshape(-1))
            counts["sdfv"] += imp.values.size
    for k, v in cols.items():
        a[k] = np.array(v, np.int32 if k in ("geo_kind", "geo_flags", "geo_off", "geo_res") else np.float32)
    a["geo_slot"] = np.full(len(recs), -1, np.int32)        # a differentiable sphere's derived slot (scene.py)
    if vals:
        a["sdf_val"] = np.concatenate(vals).astype(np.float32)
    return a, counts
