"""Participating media: homogeneous and grid-based heterogeneous media attached to shapes.

A medium fills the interior (or exterior) of a shape whose surface is a null or dielectric
interface. Its coefficients are pool slices ("volumes"): a homogeneous coefficient is a 1x1x1
volume, a grid a (D, H, W, C) volume looked up trilinearly (``grid.py``). Modules:

    spec.py         YAML medium specs -> Medium descriptions + packed tables (numpy only)
    grid.py         trilinear lookup of a pool volume and its hand-written adjoint, bbox clipping;
                    numpy helpers (reference lookup, resampling, slices, 3D total variation)
    medium.py       the medium interface used by the integrators: coefficients at a point (+ adjoint),
                    majorants (recomputed on the device before every render)
    homogeneous.py  analytic free flight / transmittance of homogeneous media (+ adjoints), the
                    hero-channel spectral-MIS weights shared with grids
    phase.py        isotropic and Henyey-Greenstein phase functions (eval/sample/pdf, adjoint in g)
    volfile.py      Mitsuba's binary .vol grid format (read/write)
    procedural.py   the procedural smoke plume of configs/volume_recovery.yaml

See docs/media.md.
"""
MED_HOMOGENEOUS, MED_GRID = 0, 1
MEDIUM_TYPES = {"homogeneous": MED_HOMOGENEOUS, "grid": MED_GRID, "heterogeneous": MED_GRID}
PHASE_ISOTROPIC, PHASE_HG = 0, 1
VOLUME_INTEGRATORS = ("volpath", "prbvolpath", "volpath_raymarch")
# auto majorant = GRID_MAJORANT_MARGIN * max(scale * density): strictly above sigma_t so that
# null collisions (and their derivatives) have a non-zero probability everywhere (PRB §4.4).
GRID_MAJORANT_MARGIN = 1.1
