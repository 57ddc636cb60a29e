"""Participating media: homogeneous and grid-based heterogeneous media attached to shapes.

A medium fills the interior (or exterior) of a shape whose surface is a null or dielectric
interface. Its coefficients are pool slices ("volumes"): a homogeneous coefficient is a 1x1x1
volume, a grid a (D, H, W, C) volume looked up trilinearly (``grid.py``). Modules:

    registry.py     the medium models (one line each): homogeneous.py, heterogeneous.py
    phase.py        the phase-function models (isotropic.py, hg.py) and their dispatch
    spec.py         YAML medium specs -> Medium descriptions + packed tables (numpy only)
    grid.py         trilinear lookup of a pool volume and its hand-written adjoint, bbox clipping;
                    numpy helpers (reference lookup, resampling, slices, 3D total variation)
    medium.py       coefficients at a point (+ adjoint), majorants (recomputed on the device)
    homogeneous.py  analytic free flight / transmittance of homogeneous media (+ adjoints), the
                    hero-channel spectral-MIS weights shared with grids
    volfile.py      Mitsuba's binary .vol grid format (read/write)
    procedural.py   the procedural smoke plume of configs/volume_recovery.yaml

The walk's media steps (free flights, transmittance) are in tirender/walk/media.py; see docs/media.md.
"""
from ..schema import Bool

HOMOGENEOUS = 1   # medium flag: constant coefficients, analytic free flights
# auto majorant = GRID_MAJORANT_MARGIN * max(scale * density): strictly above sigma_t so that
# null collisions (and their derivatives) have a non-zero probability everywhere (PRB §4.4).
GRID_MAJORANT_MARGIN = 1.1
# grid media track with piecewise-constant majorants on a MAJORANT_GRID^3 grid of cells over the
# medium's bbox (walk/media.py: MajorantWalk): empty space is skipped, dense cells keep their own bound
MAJORANT_GRID = 16

# Mitsuba's media: whether σt varies across the spectrum (false lets its volpath use an achromatic estimator, unbiased
# only for a grey σt): tirender's estimator is exact either way; false with a coloured σt is refused (media/spec.py)
SPECTRAL_EXTINCTION = Bool("has_spectral_extinction", default=True,
                           doc="Mitsuba's: σt varies with wavelength (false: a grey σt is required)")
