"""The public front door: load a scene, render it, differentiate it.

    scene = load_scene("configs/cbox.yaml")          # a YAML file or a dict (config or scene)
    img = render(scene, spp=64, seed=0)              # float32 (H, W, 3) linear RGB, row 0 at the top
    grads = render_grad(scene, dy, spp=64, seed=1)   # dict parameter name -> array (PRB by default)
    img, grads = render_and_grad(scene, dy, method="rb_biased_pipelined")   # RB pipelining
    jv = render_forward(scene, {"red.reflectance": [1, 0, 0]}, spp=64)     # forward mode: J v image

Everything dispatches through the integrator registry (tirender/integrators/registry.py) on the
scene's integrator type and the gradient method, via the host layer (tirender/launch.py).
"""
import numpy as np

from . import launch, variants
from .backend import ensure_init
from .config import load_config
from .errors import ConfigError
from .integrators import registry
from .scene import bvh_build
from .scene.description import parse_scene
from .scene.scene import Scene
from .schema import Bool, Integer

# API arguments are checked by the same schema keys as the config's ``render:`` section
_ARGS = {k.name: k for k in (Integer("spp", lo=1, hi=1 << 24), Integer("seed", lo=0, hi=(1 << 32) - 1),
                             Integer("sensor", lo=0, hi=1 << 16), Integer("sample_offset", lo=0, hi=1 << 30),
                             Bool("accumulate"), Bool("progress"), Bool("clear"))}


def _check(**kw):
    """Validated keyword arguments (ConfigError naming the argument: "spp: must be >= 1, got 0")."""
    return [_ARGS[k].parse(v, None, k) for k, v in kw.items()]


def _integrator(scene, integrator):
    if integrator is not None and not isinstance(integrator, str):
        raise ConfigError(f"expected an integrator name, got {integrator!r}", key="integrator")
    return registry.check_type(integrator or scene.integrator["type"])


def _adjoint(a):
    """The adjoint image as a float32 array (shape and finiteness are checked by the host layer)."""
    try:
        arr = np.asarray(a, np.float32)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 3 or arr.shape[2] != 3:
        shape = getattr(arr, "shape", None)
        raise ConfigError(f"expected an (H, W, 3) array of numbers, got {type(a).__name__}"
                          + (f" of shape {shape}" if shape is not None else ""), key="adjoint_image")
    return arr


def _method(method, scene=None):
    """The gradient method named, or (None) the scene integrator's default (registry.default_method)."""
    if method is None and scene is not None:
        return registry.default_method(scene.integrator["type"])
    if not isinstance(method, str):
        raise ConfigError(f"expected a method name, got {method!r}", key="method")
    return method


def describe(cfg, meanwhile=None):
    """(scene description, validated integrator settings) of a config loaded by
    tirender.config.load_config: every check of the scene's input, before Taichi starts. ``meanwhile``: work for
    this process while a forked child reads a large scene's mesh files (scene/prefetch.py)."""
    if not isinstance(cfg, dict) or not isinstance(cfg.get("scene"), dict):
        raise ConfigError(f"expected a config mapping with a 'scene' section (tirender.config.load_config's result), "
                          f"got {type(cfg).__name__}", key="cfg")
    scene_spec = cfg["scene"]
    variant = None if cfg.get("variant") is None else variants.check(cfg["variant"], cfg.get("_file"))
    integrator = registry.parse(scene_spec.get("integrator"), cfg.get("_scene_file"), variant=variant)
    return parse_scene(scene_spec, cfg.get("_scene_file"), cfg.get("_scene_dir"), variant, meanwhile), integrator


def overlapped(start=ensure_init):
    """What this process can do while a forked child reads a large scene's mesh files (scene/prefetch.py): start
    Taichi (``start()``, which comes next anyway) and load the BVH build's kernels (scene/bvh_build.warm); None
    when they are loaded already."""
    if bvh_build.warmed():
        return None

    def meanwhile():
        start()
        bvh_build.warm()
    return meanwhile


def scene_from_config(cfg, described=None):
    """A Scene from a config loaded by tirender.config.load_config (or its ``describe`` result)."""
    desc, integrator = described or describe(cfg, overlapped())
    if cfg.get("variant") is not None:
        variants.set_variant(cfg["variant"], cfg.get("_file"), "variant")
    ensure_init()
    return Scene(desc, integrator)


def load_scene(source, base_dir=None, overrides=None, defines=None):
    """Scene from a YAML file (a scene file, or a config with a ``scene:`` section), a Mitsuba 3
    XML file (``.xml``; docs/mitsuba.md) or a dict. overrides: ["key.path=value", ...] applied to
    the scene mapping (e.g. "sensors.0.film.width=64"); defines: {name: value} for an XML scene's
    ``<default>`` parameters (Mitsuba's ``-D``)."""
    return scene_from_config(load_config(source, base_dir=base_dir, scene_overrides=overrides, defines=defines))


def _scene(scene):
    if isinstance(scene, Scene):
        return scene
    if isinstance(scene, (str, dict)) or hasattr(scene, "__fspath__"):
        return load_scene(scene)
    raise ConfigError(f"expected a Scene, a file name or a dict, got {type(scene).__name__}", key="scene")


def _loaded(scene):
    """``scene`` if it is a loaded Scene (functions of a scene's state: its gradients), else one ConfigError line."""
    if not isinstance(scene, Scene):
        raise ConfigError(f"expected a loaded Scene (tirender.load_scene), got {type(scene).__name__}", key="scene")
    return scene


def render(scene, spp=None, seed=0, sensor=0, integrator=None, progress=True):
    """Render one sensor: float32 linear RGB (H, W, 3), row 0 at the top.

    spp: samples per pixel (default 64); seed: fixes the image (per backend); integrator: override
    the scene's (``path``, ``direct``, ``aov``, ``volpath``, ...)."""
    spp, seed, sensor, progress = _check(spp=launch.DEFAULT_SPP if spp is None else spp, seed=seed, sensor=sensor,
                                         progress=progress)
    scene = _scene(scene)
    spp, sensor = launch.check_args(scene, spp, sensor)
    t = _integrator(scene, integrator)
    return registry.module(t).render(scene, spp, seed, sensor, progress, integrator=t)


def render_moments(scene, spp=None, seed=0, sensor=0, integrator=None, progress=True):
    """(image, m2): the image as ``render`` gives it and, from the same samples, the per-pixel second moment of
    the samples' colour in XYZ (float32 (H, W, 3) each; Mitsuba's ``moment`` integrator's ``m2_*`` channels).
    The per-sample variance in XYZ is m2 − mean², the pixel estimate's that over spp. Any scene (with or without
    a ``moment`` integrator) whose integrator samples pixels (path, direct, volpath and their variants)."""
    from .integrators import moment
    spp, seed, sensor, progress = _check(spp=launch.DEFAULT_SPP if spp is None else spp, seed=seed, sensor=sensor,
                                         progress=progress)
    scene = _scene(scene)
    spp, sensor = launch.check_args(scene, spp, sensor)
    t = _integrator(scene, integrator)
    return moment.render_moments(registry.module(t), scene, spp, seed, sensor, progress, t)


def render_stokes(scene, spp=None, seed=0, sensor=0, progress=True):
    """The Stokes components S0..S3 of one sensor: float32 (4, H, W, 3) linear sRGB, row 0 at the top, in the
    camera's frame (x = ray × up, as Mitsuba 3's ``stokes``): the path tracer with the scene's integrator
    keys (max_depth, rr_depth, hide_emitters), a box filter. S1..S3 are 0 outside ``spectral_polarized``."""
    from .integrators import stokes
    spp, seed, sensor, progress = _check(spp=launch.DEFAULT_SPP if spp is None else spp, seed=seed, sensor=sensor,
                                         progress=progress)
    scene = _scene(scene)
    spp, sensor = launch.check_args(scene, spp, sensor)
    return stokes.render_stokes(scene, spp, seed, sensor, progress)


def render_progressive(scene, sensor=0, spp=1, sample_offset=0, seed=0, integrator=None, clear=False):
    """Add `spp` more samples (indices sample_offset..) to the film and return the running image
    (the interactive viewer: call with clear=True after the camera moved)."""
    spp, seed, sensor, sample_offset, clear = _check(spp=spp, seed=seed, sensor=sensor, sample_offset=sample_offset,
                                                     clear=clear)
    launch.check_args(scene, spp, sensor)
    t = _integrator(scene, integrator)
    return registry.module(t).render(scene, spp, seed, sensor, False, integrator=t,
                                     sample_offset=sample_offset, clear=clear)


def render_grad(scene, adjoint_image, spp=64, seed=1, sensor=0, method=None, accumulate=False, progress=True,
                params=None):
    """Gradient of <adjoint_image, render(scene)> w.r.t. every scene parameter.

    adjoint_image: (H, W, 3) δy = ∂loss/∂image of the primal image; seed: the adjoint passes'
    seed (use one different from the primal render's); method: ``prb`` (default; ``prb_attached`` for Mitsuba's
    projective integrators prb_projective / direct_projective: geometry through visibility), an RB method, or
    ``forward`` (one forward-mode pass per element of ``params``: a few scalars, in every variant, e.g. a
    polarizer's angle in spectral_polarized). params: the names to differentiate (default: all; the
    reverse methods compute all in one pass either way). Returns dict name -> numpy array shaped like
    the parameter. ``accumulate=True`` adds into the current gradients (multi-view). In spectral_polarized,
    ``prb`` adds to its replay one forward-mode pass (same seed, spp, sensor) per element of each parameter that
    changes a Mueller matrix (polarizer / retarder angles; those in ``params`` if given) and has at most
    ``prb.MUELLER_MAX_ELEMENTS`` (64) elements; larger ones and those of BSDFs nested in a composite are left out
    and refused in ``params`` (``render_forward`` takes a direction)."""
    spp, seed, sensor, accumulate, progress = _check(spp=spp, seed=seed, sensor=sensor, accumulate=accumulate,
                                                     progress=progress)
    scene = _scene(scene)
    launch.check_args(scene, spp, sensor)
    method = _method(method, scene)
    fn = registry.gradient_driver(scene.integrator["type"], method)
    names = None if params is None else list(params)
    if method not in registry.PER_PARAMETER:
        registry.check_reverse_params(scene, names)
    kw = {"params": names} if registry.takes_params(scene.integrator["type"], method) else {}
    return fn(scene, _adjoint(adjoint_image), spp, seed, sensor, accumulate, progress, **kw)


def render_forward(scene, directions, spp=64, seed=1, sensor=0, method=None, progress=True):
    """Forward mode: the directional derivative of the image, J v = Σ_π ∂image/∂π v_π.

    directions: dict parameter name -> direction v (an array shaped like the parameter, or a scalar
    for every element); parameters left out do not move. Returns float32 (H, W, 3), the derivative
    of each pixel (same units as the image per unit of the parameter). Detached derivatives (method
    ``prb``: surfaces and volumes), the same replay that ``render_grad`` runs, with a tangent sink:
    for a seed, <w, render_forward(v)> equals <render_grad(w), v> up to float rounding. CPU and CUDA."""
    spp, seed, sensor, progress = _check(spp=spp, seed=seed, sensor=sensor, progress=progress)
    scene = _scene(scene)
    launch.check_args(scene, spp, sensor)
    method = _method(method, scene)
    fn = registry.forward_driver(scene.integrator["type"], method)
    if method != "prb_attached" and isinstance(directions, dict):
        geo = [n for n in directions if scene.params.resolve(n) in scene.deform_params]
        if geo:     # detached derivatives do not move geometry: the image would be 0, not the answer
            raise ConfigError(f"'{geo[0]}' is a geometry parameter: its derivative needs method prb_attached "
                              f"(edge sampling, docs/geometry.md)", key="method")
    return fn(scene, directions, spp, seed, sensor, progress)


def render_and_grad(scene, adjoint_image, spp=16, seed=0, sensor=0, method="rb_biased_pipelined", accumulate=False,
                    progress=False):
    """RB pipelining (biased II): one joint pass rendering the image at the current parameters and
    back-propagating ``adjoint_image`` (the previous iteration's). Returns (image, gradients)."""
    spp, seed, sensor, accumulate, progress = _check(spp=spp, seed=seed, sensor=sensor, accumulate=accumulate,
                                                     progress=progress)
    scene = _scene(scene)
    launch.check_args(scene, spp, sensor)
    fn = registry.joint_driver(scene.integrator["type"], _method(method))
    return fn(scene, _adjoint(adjoint_image), spp, seed, sensor, accumulate, progress)


def read_gradients(scene):
    """The gradients accumulated so far (after render_grad(..., accumulate=True) calls)."""
    scene = _loaded(scene)
    return launch.read_gradients(scene, scene.bind())


def set_gradients(scene, grads):
    """Make ``grads`` (dict name -> array shaped like the parameter; parameters left out are 0) the
    scene's accumulated gradients, as if render_grad had computed them: what an optimiser over the
    scene's device pool steps with (multi-view sums computed elsewhere, e.g. by workers)."""
    scene = _loaded(scene)
    if not isinstance(grads, dict):
        raise ConfigError(f"expected a dict parameter name -> array, got {type(grads).__name__}", key="grads")
    for name, g in grads.items():
        info = scene.params.info(name)
        try:
            n = np.asarray(g, np.float64).size
        except (TypeError, ValueError):
            raise ConfigError(f"expected an array of numbers, got {type(g).__name__}", key=f"grads.{name}") from None
        if n != info.size:
            raise ConfigError(f"{n} values, the parameter has {info.size} (shape {tuple(info.shape)})",
                              key=f"grads.{name}")
    launch.write_gradients(scene, scene.bind(), grads)
