"""A differentiable SDF grid: Mitsuba's ``sdfgrid`` (scene/sdfgrid.py, core/sdf.py) whose node values are a parameter
— ``type: sdfgrid, differentiable: true`` (the name of Mitsuba's ``grid`` parameter).

Parameter of shape ``<id>``:

  ``<id>.grid`` (D, H, W)   the signed distances at the grid's nodes [z, y, x] (object units: the unit cube)

Its pool slice is the record's ``geo_slot``: reverse-mode kernels add ∂/∂(values) into it where a path's hit moves
with them (core/sdf.hit_adjoint: the hit slides along its ray to stay on f = 0, the normal turns with the voxel
gradients); forward mode reads the direction there. Silhouettes are not in the boundary terms (as Mitsuba's sdfgrid,
which has no silhouette sampling either: its projective integrators leave an SDF's visibility out): a change that moves
a grid's outline against what lies behind it has that part of its derivative missing.

Every voxel of the grid is a BVH primitive (the surface may move into any); after a change the values are written on
the device, each voxel's row gets its tight box or becomes empty (scene/sdfgrid.dense_corners) and the tree is
refitted (scene.py). Memory: one triangle row per voxel, (W - 1)(H - 1)(D - 1).
"""
import numpy as np
import taichi as ti

from .sdfgrid import dense_corners
from .triangles import write_rows

nd = ti.types.ndarray


class SdfBody:
    """One differentiable SDF grid: name (the shape id), its shape index and Implicit (scene/implicit.py)."""

    analytic = True              # a record of core/implicit.py, not mesh triangles
    SLOT = "grid"                # the parameter whose pool offset the record's geo_slot holds
    boundary = False             # no silhouette in the boundary terms (module doc)

    def __init__(self, name, shape_index, imp):
        self.name = name
        self.implicit = imp
        self.members = [(shape_index, 0)]
        self.shape = imp.values.shape
        self.record = -1                         # its geo_* record (scene.py)
        self.rows = None                         # its voxels' triangle rows, in BVH order (dense order)

    def names(self):
        """Internal key -> pool name."""
        return {"grid": f"{self.name}.grid"}

    def initial_values(self):
        """Pool entries (name, value, kind, lo) at load."""
        return [(self.names()["grid"], np.asarray(self.implicit.values, np.float32), "geometry", -np.inf)]

    def place(self, inv, start):
        """Its rows in BVH order from the inverse permutation inv and its shape's first row."""
        n = int(np.prod(np.asarray(self.shape) - 1))
        self.rows = np.ascontiguousarray(inv[start:start + n], np.int32)

    def state(self, get):
        """(values (D, H, W) float32,) from the parameter."""
        return (np.asarray(get(self.names()["grid"]), np.float32).reshape(self.shape),)

    def write(self, st, values):
        """Write the values and the voxels' boxes on the device (the caller refits the tree)."""
        v = np.asarray(values)
        _write_values(st, np.ascontiguousarray(v.reshape(-1)), int(st.geo_off[self.record]))   # float64 kept
        write_rows(st, self.rows, dense_corners(v.reshape(self.shape), self.implicit.to_world))


@ti.kernel
def _write_values(st: ti.template(), src: nd(ndim=1), off: ti.i32):
    for i in range(src.shape[0]):
        st.sdf_val[off + i] = src[i]
