"""Write configs/meshes/blob.ply: the non-convex target of configs/shape_recovery.yaml.

An icosphere (4 subdivisions: 2562 vertices, 5120 triangles) displaced radially by two dents and a
bump, r(ω) = 1 - 0.4 e^{-7(1 - ω·a)} - 0.3 e^{-9(1 - ω·b)} + 0.25 e^{-6(1 - ω·c)}: a star-shaped,
non-convex body of sphere topology, so that `init: sphere` (the same vertices on a sphere) starts
the recovery with the target's own connectivity.

    python3 demos/make_shape_target.py
"""
import os

import numpy as np

from tirender.scene.mesh_io import save_ply


def icosphere(levels):
    t = (1.0 + 5 ** 0.5) / 2.0
    v = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t), (0, -1, -t), (0, 1, -t),
         (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    f = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4), (11, 10, 2),
         (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9), (4, 9, 5), (2, 4, 11),
         (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    verts = [np.array(p, float) / np.linalg.norm(p) for p in v]
    faces = list(f)
    for _ in range(levels):
        cache, new = {}, []

        def mid(a, b):
            k = (min(a, b), max(a, b))
            if k not in cache:
                m = verts[a] + verts[b]
                verts.append(m / np.linalg.norm(m))
                cache[k] = len(verts) - 1
            return cache[k]
        for a, b, c in faces:
            ab, bc, ca = mid(a, b), mid(b, c), mid(c, a)
            new += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        faces = new
    return np.array(verts), np.array(faces, np.int32)


def blob():
    P, F = icosphere(4)
    def unit(x):
        x = np.asarray(x, float)
        return x / np.linalg.norm(x)
    a, b, c = unit([0.3, -1.0, 0.4]), unit([1.0, 0.5, -0.2]), unit([-0.6, 0.2, 1.0])
    r = 1.0 - 0.4 * np.exp(-7 * (1 - P @ a)) - 0.3 * np.exp(-9 * (1 - P @ b)) + 0.25 * np.exp(-6 * (1 - P @ c))
    return (P * r[:, None] * 0.8).astype(np.float32), F


if __name__ == "__main__":
    P, F = blob()
    out = os.path.join(os.path.dirname(__file__), "..", "configs", "meshes", "blob.ply")
    save_ply(out, P, F)
    print(f"{out}: {len(P)} vertices, {len(F)} triangles")
