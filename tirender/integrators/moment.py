"""Mitsuba 3's ``moment`` integrator: a wrapper that renders its nested integrator's image and, per pixel,
the second moment of the samples (an output users read, as Mitsuba's ``m2_*`` AOV channels).

    integrator: {type: moment, integrator: {type: path, max_depth: 2}}        (YAML)
    <integrator type="moment"><integrator type="path">...</integrator></integrator>   (Mitsuba XML)

The scene's integrator settings become the nested integrator's, with ``moment: true`` recorded
(``registry.parse``): rendering, gradients and every other driver see the nested integrator.
``tirender.render_moments`` (and ``tirender render`` for such a scene) also returns the per-pixel mean of the
squared XYZ value of the samples (Mitsuba's ``m2_<name>.X/Y/Z``: each sample's colour converted to XYZ, squared
per channel, filtered like the image), from which the per-sample variance is m2 − mean²
(integrators/kernels.py, kind "moment").
"""
from ..errors import ConfigError
from ..schema import Child

NAMES = ("moment",)
WRAPPER = True
KEYS = (Child("integrator", kind="integrator", doc="the nested integrator (a mapping with its type and keys)"),)


def unwrap(spec, file=None, where="integrator"):
    """(nested integrator mapping, its key path) of a moment mapping (one nested integrator: Mitsuba's moment takes
    several, tirender renders one)."""
    spec = dict(spec)
    spec.pop("type", None)
    inner = spec.pop("integrator", None)
    for k in spec:
        raise ConfigError(f"unknown key '{k}' (the moment integrator takes: integrator)", file, f"{where}.{k}")
    if isinstance(inner, list):
        if len(inner) != 1:
            raise ConfigError(f"tirender's moment integrator wraps one integrator, got {len(inner)}", file,
                              f"{where}.integrator")
        inner = inner[0]
    if not isinstance(inner, dict):
        raise ConfigError("expected the nested integrator as a mapping ({type: path, ...})", file,
                          f"{where}.integrator")
    if inner.get("type") == "moment":
        raise ConfigError("a moment integrator cannot wrap another moment integrator", file,
                          f"{where}.integrator.type")
    return inner, f"{where}.integrator"


def render_moments(module, scene, spp, seed, sensor, progress, integrator):
    """(image, m2): the nested integrator's image and, from the same samples (same seed), the per-pixel second
    moment of the samples' XYZ colour, float32 (H, W, 3) each. The per-sample variance is m2 − mean² (with the
    mean in XYZ); the variance of the pixel estimate is that over spp."""
    if not getattr(module, "MOMENTS", False):
        raise ConfigError(f"the moment integrator wraps sampling integrators (path, direct, volpath and their "
                          f"variants), not '{integrator}'", key="integrator.integrator.type")
    img = module.render(scene, spp, seed, sensor, progress, integrator=integrator)
    m2 = module.render(scene, spp, seed, sensor, progress, integrator=integrator, second_moment=True)
    return img, m2
