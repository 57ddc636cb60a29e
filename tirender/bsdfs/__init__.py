"""BSDF models. Each module holds eval / pdf / sample and the hand-written eval_adjoint.

Type tags (stored per BSDF in the scene) select the model; ``dispatch.py`` specialises
the dispatch chain with ``ti.static`` to the types a scene uses.
"""
DIFFUSE = 0
SMOOTH_CONDUCTOR = 1
ROUGH_CONDUCTOR = 2
SMOOTH_DIELECTRIC = 3
ROUGH_DIELECTRIC = 4
ROUGH_PLASTIC = 5
NULL = 6

TYPE_NAMES = {
    "diffuse": DIFFUSE,
    "conductor": SMOOTH_CONDUCTOR,
    "roughconductor": ROUGH_CONDUCTOR,
    "dielectric": SMOOTH_DIELECTRIC,
    "roughdielectric": ROUGH_DIELECTRIC,
    "roughplastic": ROUGH_PLASTIC,
    "null": NULL,
}
