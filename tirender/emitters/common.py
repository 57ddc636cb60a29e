"""The emitter direction sample shared by all emitter models."""
import taichi as ti

from ..core.math import vec2, vec3


@ti.dataclass
class DirectionSample:
    """Emitter sample seen from a reference point.

    p, n: point on the emitter and its normal; d: unit direction ref -> p; dist: distance (BIG for
    infinite emitters); pdf: solid-angle density incl. the emitter-selection probability (1 for
    delta emitters times selection); delta: 1 for point/directional; weight: Le / pdf (0 if the
    sample is invalid); le: emitted radiance Le (RGB); emitter: index; uv: texture coordinates of
    the radiance lookup (for the adjoint); scale: factor between the radiance texture and Le
    (1/dist² for point lights, 1 otherwise).
    """
    p: vec3
    n: vec3
    d: vec3
    dist: float
    pdf: float
    delta: ti.i32
    weight: vec3
    le: vec3
    emitter: ti.i32
    uv: vec2
    scale: float
