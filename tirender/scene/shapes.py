"""Built-in shapes as indexed triangle meshes in object space (Mitsuba 3 conventions).

Each returns dict(positions (V,3), faces (F,3), normals (V,3) or None, uvs (V,2)).
"""
import numpy as np

from .mesh_io import row_norms


def rectangle():
    """[-1, 1]² in the z = 0 plane, normal +z, uv (0,0) at (-1,-1)."""
    p = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float32)
    uv = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], np.float32)
    n = np.tile(np.array([[0, 0, 1]], np.float32), (4, 1))
    return dict(positions=p, faces=np.array([[0, 1, 2], [0, 2, 3]], np.int32), normals=n, uvs=uv)


def cube():
    """[-1, 1]³ exactly as Mitsuba 3's cube.cpp: 24 vertices (four per face, sharing the face normal),
    12 triangles, every face mapped onto [0, 1]² with Mitsuba's vertex order and uv pattern."""
    side_normals = [(0, -1, 0), (0, 1, 0), (1, 0, 0), (0, 0, 1), (-1, 0, 0), (0, 0, -1)]
    side_uv = [(0, 1), (1, 1), (1, 0), (0, 0)]
    position_index = [1, 5, 4, 0, 3, 2, 6, 7, 1, 3, 7, 5, 5, 7, 6, 4, 4, 6, 2, 0, 3, 1, 0, 2]
    corner = [(1.0 if c & 1 else -1.0, 1.0 if c & 2 else -1.0, 1.0 if c & 4 else -1.0) for c in range(8)]
    ps, ns, uvs, fs = [], [], [], []
    for s_ in range(6):
        v = 4 * s_
        for k in range(4):
            ps.append(corner[position_index[v + k]])
            ns.append(side_normals[s_])
            uvs.append(side_uv[k])
        fs.extend([[v, v + 1, v + 2], [v + 3, v, v + 2]])
    return dict(positions=np.array(ps, np.float32), faces=np.array(fs, np.int32),
                normals=np.array(ns, np.float32), uvs=np.array(uvs, np.float32))


def sphere(resolution=64, smooth=True):
    """Unit sphere as a UV-sphere mesh: `resolution` segments in φ, resolution/2 rings in θ."""
    nphi = max(int(resolution), 8)
    nth = max(nphi // 2, 4)
    th = np.linspace(0, np.pi, nth + 1)
    ph = np.linspace(0, 2 * np.pi, nphi + 1)
    T, P = np.meshgrid(th, ph, indexing="ij")
    pos = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1).reshape(-1, 3)
    uv = np.stack([P / (2 * np.pi), T / np.pi], -1).reshape(-1, 2)
    idx = np.arange((nth + 1) * (nphi + 1)).reshape(nth + 1, nphi + 1)
    a, b = idx[:-1, :-1], idx[:-1, 1:]
    c, d = idx[1:, :-1], idx[1:, 1:]
    f1 = np.stack([a, c, d], -1).reshape(-1, 3)
    f2 = np.stack([a, d, b], -1).reshape(-1, 3)
    faces = np.concatenate([f1, f2])
    pos32 = pos.astype(np.float32)
    # drop the degenerate triangles at the poles
    v0, v1, v2 = pos[faces[:, 0]], pos[faces[:, 1]], pos[faces[:, 2]]
    area = np.linalg.norm(np.cross(v1 - v0, v2 - v0), axis=1)
    faces = faces[area > 1e-12]
    # outward orientation
    v0, v1, v2 = pos[faces[:, 0]], pos[faces[:, 1]], pos[faces[:, 2]]
    flip = np.einsum("ij,ij->i", np.cross(v1 - v0, v2 - v0), v0 + v1 + v2) < 0
    faces[flip] = faces[flip][:, [0, 2, 1]]
    return dict(positions=pos32, faces=faces.astype(np.int32),
                normals=pos32.copy() if smooth else None, uvs=uv.astype(np.float32))


def disk(resolution=64):
    """Unit disk in the z = 0 plane, normal +z, with Mitsuba 3's polar uv = (r, φ / 2π) (disk.cpp).
    A fan of `resolution` triangles, each with its own centre vertex (uv (0, φ_mid)) so that φ does
    not interpolate across the seam; on the fan, r and φ are exact on the edges and within
    ~(π/resolution)²/2 inside (1.2e-3 at 64)."""
    n = max(int(resolution), 8)
    ph = np.linspace(0, 2 * np.pi, n + 1)
    ring = np.stack([np.cos(ph), np.sin(ph), np.zeros(n + 1)], -1)
    centre = np.zeros((n, 3))
    pos = np.concatenate([centre, ring]).astype(np.float32)          # n centres, then n + 1 rim vertices
    faces = np.stack([np.arange(n), n + np.arange(n), n + np.arange(n) + 1], -1).astype(np.int32)
    uv_c = np.stack([np.zeros(n), (np.arange(n) + 0.5) / n], -1)
    uv_r = np.stack([np.ones(n + 1), np.arange(n + 1) / n], -1)
    uv = np.concatenate([uv_c, uv_r]).astype(np.float32)
    nrm = np.tile(np.array([[0, 0, 1]], np.float32), (2 * n + 1, 1))
    return dict(positions=pos, faces=faces, normals=nrm, uvs=uv)


def cylinder(resolution=64):
    """Mitsuba 3's cylinder (cylinder.cpp) in object space: radius 1 around the z axis from z = 0 to z = 1, open
    (no end caps), normals outward (x, y, 0), uv = (φ / 2π, z) with φ = atan2(y, x) in [0, 2π).
    A band of 2·`resolution` triangles (the seam's vertices doubled, u = 0 and u = 1): exact along z, the
    circle inscribed (radius within 1 - cos(π / resolution) of 1: 7.5e-5 at 256)."""
    n = max(int(resolution), 8)
    ph = np.linspace(0, 2 * np.pi, n + 1)
    c, s_ = np.cos(ph), np.sin(ph)
    c[-1], s_[-1] = 1.0, 0.0                                          # the seam closes exactly
    pos = np.concatenate([np.stack([c, s_, np.zeros(n + 1)], -1), np.stack([c, s_, np.ones(n + 1)], -1)])
    uv = np.concatenate([np.stack([np.arange(n + 1) / n, np.zeros(n + 1)], -1),
                         np.stack([np.arange(n + 1) / n, np.ones(n + 1)], -1)])
    nrm = pos.copy()
    nrm[:, 2] = 0.0
    k = np.arange(n)
    lo, hi = k, k + n + 1
    faces = np.concatenate([np.stack([lo, lo + 1, hi + 1], -1), np.stack([lo, hi + 1, hi], -1)])
    return dict(positions=pos.astype(np.float32), faces=faces.astype(np.int32), normals=nrm.astype(np.float32),
                uvs=uv.astype(np.float32))


def cylinder_to_object(p0, p1, radius):
    """Mitsuba's cylinder placement: translate(p0) · to_frame(Frame(d / |d|)) · scale(r, r, |d|), d = p1 - p0
    (4x4; the frame's tangents as Mitsuba's coordinate_system, which fixes where u = 0 lies)."""
    p0, p1 = np.asarray(p0, np.float64), np.asarray(p1, np.float64)
    d = p1 - p0
    length = float(np.linalg.norm(d))
    n = d / length
    sign = 1.0 if n[2] >= 0 else -1.0                                  # Duff et al. 2017, as Mitsuba's Frame3f
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    s = np.array([1 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]])
    t = np.array([b, sign + n[1] * n[1] * a, -n[1]])
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = s * radius, t * radius, n * length, p0
    return m


BUILTIN = {"rectangle": rectangle, "cube": cube, "sphere": sphere, "disk": disk, "cylinder": cylinder}


def transform_mesh(mesh, m):
    """Apply a 4x4 to_world: positions by m, normals by the inverse transpose."""
    p = mesh["positions"].astype(np.float64) @ m[:3, :3].T
    p += m[:3, 3]
    out = dict(mesh)
    out["positions"] = p.astype(np.float32)
    if mesh.get("normals") is not None:
        nm = np.linalg.inv(m[:3, :3]).T
        n = mesh["normals"].astype(np.float64) @ nm.T
        ln = row_norms(n)[:, None]
        out["normals"] = (n / np.where(ln > 0, ln, 1)).astype(np.float32)
    if np.linalg.det(m[:3, :3]) < 0:  # keep the winding (and geometric normal) consistent
        out["faces"] = mesh["faces"][:, [0, 2, 1]]
    return out
