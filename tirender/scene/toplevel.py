"""Instances in the scene's BVH: two levels, as Mitsuba's (src/shapes/instance.cpp; parsing: scene/instances.py).

Each placed shapegroup's triangles and primitives are stored once, in the group's space, under a tree of their own;
the top-level tree holds the scene's other primitives and one box primitive per instance (core/implicit.py: its
record maps world <-> the group's space and names the group tree's root). On the device the trees are one array of
wide nodes and one of triangle rows: the top-level tree first (its nodes from 0, so that refitting moving geometry
refits it alone), then each group's, its children and leaves offset to where they were placed.
"""
import numpy as np

from .bvh import WideBVH
from .bvh_build import Built, build_wide
from .implicit import box_under


class Box:
    """An instance's primitive among the scene's triangle rows (triangles.Triangles reads these arrays): the world
    box's corners as two vertices and one face (0, 1, 0), so that e2 = 0 (core/implicit.py)."""

    def __init__(self, lo, hi):
        self.positions = np.array([lo, hi], np.float32)
        self.faces = np.array([[0, 1, 0]], np.int32)
        self.normals = None
        self.uvs = None


def groups_of(shapes, placements):
    """The placed groups in order of first placement: (group ids, per shape its group index or -1)."""
    gids = list(dict.fromkeys(g for _, g, _ in placements))
    index = {g: i for i, g in enumerate(gids)}
    return gids, np.array([index.get(s.proto, -1) if s.proto else -1 for s in shapes], np.int64)


def instance_boxes(shapes, placements, shape_group, n_groups):
    """Per placement its Box: the world box of its group's bounds (the group shapes' vertices, for quadrics and
    SDF grids their boxes' corners) under the instance's to_world."""
    lo = np.full((n_groups, 3), np.inf)
    hi = np.full((n_groups, 3), -np.inf)
    for s, g in zip(shapes, shape_group):
        if g >= 0 and len(s.positions):
            p = np.asarray(s.positions, np.float64)
            lo[g] = np.minimum(lo[g], p.min(0))
            hi[g] = np.maximum(hi[g], p.max(0))
    gidx = {}
    for s, g in zip(shapes, shape_group):
        if g >= 0:
            gidx[s.proto] = g
    boxes = []
    for _, gid, m in placements:
        g = gidx[gid]
        boxes.append(Box(*box_under(lo[g], hi[g], m, pad=True)))
    return boxes


def build_two_level(pos, corners, tri_group, n_groups):
    """The trees of a scene with instances: pos (V, 3) and corners (T, 3) the triangles (triangles.Triangles),
    tri_group (T,) each triangle's group (-1: the top level). Returns (Built over all rows: prim_order the row
    order, wide the merged nodes; the top-level WideBVH (its levels, for refits); per group its root node)."""
    parts = []
    for g in range(-1, n_groups):
        ids = np.flatnonzero(tri_group == g)
        parts.append((ids, build_wide(pos, corners[ids])))
    order, mins, maxs, childs, counts, roots = [], [], [], [], [], []
    row = node = 0
    for ids, b in parts:
        w = b.wide
        roots.append(node)
        childs.append(np.where(w.count > 0, w.child + row, w.child + node).astype(np.int32))
        counts.append(w.count)
        mins.append(w.box_min)
        maxs.append(w.box_max)
        order.append(ids[b.prim_order])
        row += len(ids)
        node += w.n_nodes
    top = parts[0][1]
    wide = WideBVH(np.concatenate(mins), np.concatenate(maxs), np.concatenate(childs), np.concatenate(counts),
                   top.wide.levels)
    built = Built(prim_order=np.concatenate(order).astype(np.int32), wide=wide,
                  n_nodes=sum(b.n_nodes for _, b in parts), depth=max(b.depth for _, b in parts))
    return built, top.wide, roots[1:]
