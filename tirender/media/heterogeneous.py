"""Grid-based heterogeneous medium (Mitsuba 3 ``heterogeneous``; tirender also accepts ``grid``):
sigma_t(x) = scale * density(x) and albedo(x), looked up trilinearly in (D, H, W, C) volumes over
the medium's bounding box (grid.py). Free flights use delta tracking with a majorant (walk/media.py)."""
from ..schema import Bbox, Child, Number, Volume
from . import SPECTRAL_EXTINCTION


class Heterogeneous:
    NAME = "heterogeneous"
    ALIASES = ("grid",)
    KEYS = (Volume("density", 3, default=1.0, lo=0.0, doc="density grid (σt = scale · density)"),
            Volume("albedo", 3, default=0.75, lo=0.0, hi=1.0, doc="albedo (constant or grid)"),
            Number("scale", default=1.0, lo=0.0, doc="multiplies the density"),
            Child("phase", default="isotropic", kind="phase function", doc="`isotropic` or {type: hg, g: ...}"),
            Bbox("bbox", default=None, doc="world box of the grid (default: the .vol's, else the shape's bounds)"),
            Number("majorant", default=0.0, lo=0.0,
                   doc="lower bound of the majorant (the renderer uses max(this, 1.1 max σt))"),
            SPECTRAL_EXTINCTION)
    FLAGS = 0
    SIGMA = "density"
