"""The integrator registry: (integrator, gradient method) -> its primal and gradient drivers.

A primal module declares ``NAMES`` (the integrator types it renders), ``KEYS`` (its section of
the scene's ``integrator:`` mapping) and ``render(scene, spp, seed, sensor, progress, integrator,
sample_offset, clear)``. A gradient module declares ``INTEGRATES`` (the types it differentiates)
and ``METHODS`` (method -> ``fn(scene, adjoint_image, spp, seed, sensor, accumulate, progress)``),
optionally ``JOINT`` (method -> a pass that returns (image, gradients)) and ``FORWARD`` (method ->
forward mode ``fn(scene, directions, spp, seed, sensor, progress)`` -> the J v image; ``FORWARD_VARIANTS``
where it runs in more variants than the reverse methods) and ``PARAMS`` (methods whose driver also takes
``params=``, the names asked for: prb in spectral_polarized runs forward passes for the Mueller parameters among
them). One line per module below. Method ``forward`` (the gradient by forward passes, forward_gradient.py) exists
wherever detached forward mode does.
"""
from functools import partial

from .. import variants
from ..errors import ConfigError
from ..schema import validate
from . import aov, forward_gradient, mcmc, moment, path, prb, prb_attached, prbvolpath, ptracer, rb, stokes, volpath

PRIMAL_MODULES = (path, aov, volpath, mcmc, ptracer, stokes)
GRADIENT_MODULES = (prb, prb_attached, rb, prbvolpath, ptracer)
WRAPPERS = {n: m for m in (moment,) for n in m.NAMES}   # integrators that wrap another one (its settings + a flag)
PER_PARAMETER = ("forward",)     # methods that differentiate any named parameter element by element (no
                                 # reverse-mode refusals: check_reverse_params)
check_reverse_params = prb.check_params   # reverse methods: names a variant cannot differentiate (spectral_polarized)
VOLUME = volpath.NAMES


def _derive():
    """The tables derived from PRIMAL_MODULES and GRADIENT_MODULES (recomputed when a user integrator joins:
    ``add``): PRIMAL, GRADIENT, GRADIENT_VARIANTS, JOINT, FORWARD, FORWARD_VARIANTS, TAKES_PARAMS, NAMES, METHODS."""
    global PRIMAL, GRADIENT, GRADIENT_VARIANTS, JOINT, FORWARD, FORWARD_VARIANTS, TAKES_PARAMS, NAMES, METHODS
    PRIMAL = {n: m for m in PRIMAL_MODULES for n in m.NAMES}
    GRADIENT = {(n, meth): fn for m in GRADIENT_MODULES for n in m.INTEGRATES for meth, fn in m.METHODS.items()}
    GRADIENT_VARIANTS = {(n, meth): getattr(m, "VARIANTS", ("rgb",)) for m in GRADIENT_MODULES for n in m.INTEGRATES
                         for meth in m.METHODS}
    JOINT = {(n, meth): fn for m in GRADIENT_MODULES for n in m.INTEGRATES
             for meth, fn in getattr(m, "JOINT", {}).items()}
    FORWARD = {(n, meth): fn for m in GRADIENT_MODULES for n in m.INTEGRATES
               for meth, fn in getattr(m, "FORWARD", {}).items()}
    FORWARD_VARIANTS = {(n, meth): getattr(m, "FORWARD_VARIANTS", getattr(m, "VARIANTS", ("rgb",)))
                        for m in GRADIENT_MODULES for n in m.INTEGRATES for meth in getattr(m, "FORWARD", {})}
    TAKES_PARAMS = {(n, meth) for m in GRADIENT_MODULES for n in m.INTEGRATES for meth in getattr(m, "PARAMS", ())}
    # method ``forward``: the gradient from detached forward mode, one pass per parameter element
    # (integrators/forward_gradient.py), wherever detached forward mode runs
    for (n, meth), fn in list(FORWARD.items()):
        if meth == "prb":
            GRADIENT[n, "forward"] = partial(forward_gradient.render_grad, fn)
            GRADIENT_VARIANTS[n, "forward"] = FORWARD_VARIANTS[n, meth]
            TAKES_PARAMS.add((n, "forward"))
    NAMES = tuple(PRIMAL) + tuple(WRAPPERS)
    METHODS = tuple(dict.fromkeys(meth for _, meth in GRADIENT))


_derive()


def add(primal=None, gradient=None):
    """Append a user integrator (tirender/plugins.py checks its declaration): ``primal`` joins PRIMAL_MODULES
    (its NAMES become integrator types), ``gradient`` GRADIENT_MODULES (its METHODS differentiate the types it
    INTEGRATES); every derived table is recomputed."""
    global PRIMAL_MODULES, GRADIENT_MODULES
    if primal is not None:
        PRIMAL_MODULES = PRIMAL_MODULES + (primal,)
    if gradient is not None:
        GRADIENT_MODULES = GRADIENT_MODULES + (gradient,)
    _derive()


def takes_params(integrator, method):
    """Whether the gradient driver of (integrator, method) takes ``params=`` (the names asked for)."""
    return (integrator, method) in TAKES_PARAMS


def module(name):
    """The primal module of integrator ``name`` (refused with one line in a variant it does not run in: a module
    declares ``VARIANTS``, default rgb only)."""
    variants.require(f"integrator '{name}'", getattr(PRIMAL[name], "VARIANTS", ("rgb",)), key="integrator.type")
    return PRIMAL[name]


def parse(spec, file=None, where="integrator", variant=None):
    """Validate a scene's ``integrator:`` mapping against its type's keys -> settings dict (with
    ``type`` and every key's default); the type must run in ``variant`` (default: the current one)."""
    spec = dict(spec or {})
    if spec.get("type") in WRAPPERS:            # moment: the nested integrator's settings, flagged
        inner, at = WRAPPERS[spec["type"]].unwrap(spec, file, where)
        out = parse(inner, file, at, variant)
        if not getattr(PRIMAL[out["type"]], "MOMENTS", False):
            raise ConfigError(f"the moment integrator wraps sampling integrators (path, direct, volpath and their "
                              f"variants), not '{out['type']}'", file, f"{at}.type")
        return dict(out, **{spec["type"]: True})
    t = spec.pop("type", "path")
    if t not in PRIMAL:
        raise ConfigError(f"unknown integrator '{t}' (expected one of: {', '.join(NAMES)})", file, f"{where}.type")
    variants.require(f"integrator '{t}'", getattr(PRIMAL[t], "VARIANTS", ("rgb",)), file, f"{where}.type",
                     variant=variant)
    out = validate(spec, PRIMAL[t].KEYS, file, where)
    out["type"] = t
    if hasattr(PRIMAL[t], "check"):             # settings a module cannot honour
        PRIMAL[t].check(out, file, where)
    return out


def mitsuba_defaults(name):
    """{key: value}: Mitsuba 3's defaults of integrator ``name`` where they differ from tirender's YAML defaults
    (each module's ``MITSUBA_DEFAULTS``), for scenes read from Mitsuba XML."""
    m = PRIMAL.get(name)
    return dict(getattr(m, "MITSUBA_DEFAULTS", {}).get(name, {})) if m is not None else {}


def check_type(name, key="integrator"):
    if name not in PRIMAL:
        if name in WRAPPERS:
            raise ConfigError(f"'{name}' wraps another integrator: give it in the scene ({{type: {name}, "
                              f"integrator: {{...}}}})", key=key)
        raise ConfigError(f"unknown integrator '{name}' (expected one of: {', '.join(NAMES)})", key=key)
    return name


# Mitsuba's projective integrators differentiate visibility: their default gradient method is the attached one
PROJECTIVE = ("prb_projective", "direct_projective")


def default_method(integrator):
    """The gradient method a call without ``method`` uses: ``prb_attached`` (edges + attached vertices: gradients
    of geometry through visibility) for Mitsuba's projective integrators, else ``prb``."""
    return "prb_attached" if integrator in PROJECTIVE else "prb"


def gradient_driver(integrator, method):
    """The gradient function of (integrator, method), or a ConfigError saying what is supported."""
    if method not in METHODS:
        raise ConfigError(f"unknown gradient method '{method}' (expected one of: {', '.join(METHODS)})", key="method")
    return _driver(GRADIENT, integrator, method, "does not support")


def joint_driver(integrator, method):
    """The joint render + gradient pass (RB pipelining) of (integrator, method)."""
    return _driver(JOINT, integrator, method, "has no joint render+gradient pass for")


def forward_driver(integrator, method):
    """Forward mode (J v images) of (integrator, method)."""
    if method not in METHODS:
        raise ConfigError(f"unknown gradient method '{method}' (expected one of: {', '.join(METHODS)})", key="method")
    return _driver(FORWARD, integrator, method, "has no forward mode for")


def _driver(table, integrator, method, what):
    fn = table.get((integrator, method))
    if fn is not None:
        allowed = (FORWARD_VARIANTS if table is FORWARD else GRADIENT_VARIANTS).get((integrator, method), ("rgb",))
        variants.require(f"{'forward mode' if table is FORWARD else 'gradient method'} '{method}' of integrator "
                         f"'{integrator}'", allowed, key="method")
    if fn is None:
        ok = [m for (n, m) in table if n == integrator]
        raise ConfigError(f"method '{method}' {what} the '{integrator}' integrator (available: {', '.join(ok) or 'none'})",
                          key="method")
    return fn
