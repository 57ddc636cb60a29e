"""User-written models ("plugins"), as Mitsuba's ``mi.register_bsdf``: a class written outside the package with
the declarations the built-in models use joins its registry, and scenes (YAML, Mitsuba XML) take its type.

    from tirender import plugins
    @plugins.register_bsdf            # or plugins.register_bsdf(MyBsdf); also tirender.register_bsdf
    class MyBsdf: NAME = "mybsdf"; KEYS = (...); FLAGS = plugins.SMOOTH; Params = plugins.struct(...); ...

    register_bsdf(cls)        a BSDF (bsdfs/base.py's module doc): a leaf's pure functions are lifted by
                              ``leaf`` (or ``dirac`` for a model with Dirac lobes only) unless decorated already
    register_emitter(cls)     an emitter (emitters/base.py's module doc)
    register_medium(cls)      a medium declaration (keys, flags; the walk does the rest: media/)
    register_integrator(obj)  an integrator (integrators/registry.py's module doc): primal (NAMES, KEYS, render)
                              and/or gradient (INTEGRATES, METHODS)

A model joins its registry appended (the built-in tags keep their values) and every table derived from it is
recomputed; its Texture keys become pool parameters ``<id>.<key>`` (differentiable with render_grad through its
hand-written adjoints) and ``tirender.docgen`` lists it. Registering the same class again does nothing; another
class under a taken name, and any fault in a declaration, is a ConfigError of one line naming the class. A model
may join after scenes were loaded unless it would widen their per-model tables (more texture slots, constants or
nested BSDFs than any model before): that is refused, register it before loading scenes. Registration lasts for
the process. docs/plugins.md walks through writing one.

What a model needs is exported here: the BSDF decorators, flags and records (bsdfs/base.py), texture-slot access
and its adjoints, the schema keys, the colour type (tirender/variants.py), a few maths helpers; the emitter
records and flags (prefixed ``EMITTER_``) and the point source's direction sample (``point_source``, ``lit``:
emitters/point.py); the medium flag.
"""
import re

from . import variants
from .bsdfs import registry as _bsdfs
from .bsdfs.base import (BOTH_SIDES, DELTA, NULL, PASS, SMOOTH, TRANSMISSION, BsdfCtx, BsdfSample, child,
                         composite, const, dirac, invalid_sample, leaf, one_sided, slot_float, slot_float_adjoint,
                         slot_rgb, slot_rgb_adjoint, slot_unbounded, slot_unbounded_adjoint, slot_unit, slot_vec3,
                         slot_vec3_adjoint)
from .bsdfs.fresnel import fresnel_dielectric, reflect, refract
from .core.math import INV_PI, PI, safe_div, vec2, vec3
from .core.warp import square_to_cosine_hemisphere, square_to_cosine_hemisphere_pdf
from .emitters import registry as _emitters
from .emitters.base import DELTA as EMITTER_DELTA
from .emitters.base import INFINITE as EMITTER_INFINITE
from .emitters.base import SURFACE as EMITTER_SURFACE
from .emitters.base import AtPosition, DeltaEmitter, DirectionSample
from .emitters.base import slot as emitter_slot
from .emitters.base import slot_adjoint as emitter_slot_adjoint
from .emitters.point import lit, point_source
from .errors import ConfigError
from .integrators import registry as _integrators
from .media import HOMOGENEOUS, SPECTRAL_EXTINCTION
from .media import registry as _media
from .schema import Bbox, Bool, Child, Choice, Integer, Ior, Key, Number, String, Texture, Vec3, Volume
from .variants import SPECTRUM, spec, struct

__all__ = [
    "register_bsdf", "register_emitter", "register_medium", "register_integrator",
    # BSDFs (bsdfs/base.py): flags, records, decorators, texture slots and constants, maths helpers
    "SMOOTH", "DELTA", "BOTH_SIDES", "TRANSMISSION", "NULL", "PASS", "BsdfCtx", "BsdfSample", "invalid_sample",
    "leaf", "one_sided", "dirac", "composite", "child", "const", "slot_rgb", "slot_rgb_adjoint", "slot_float",
    "slot_float_adjoint", "slot_unit", "slot_unbounded", "slot_unbounded_adjoint", "slot_vec3", "slot_vec3_adjoint",
    "fresnel_dielectric", "reflect", "refract", "square_to_cosine_hemisphere", "square_to_cosine_hemisphere_pdf",
    "INV_PI", "PI", "safe_div", "vec2", "vec3",
    # the walk's colour (tirender/variants.py)
    "SPECTRUM", "spec", "struct",
    # emitters (emitters/base.py)
    "EMITTER_SURFACE", "EMITTER_DELTA", "EMITTER_INFINITE", "AtPosition", "DeltaEmitter", "DirectionSample", "emitter_slot",
    "emitter_slot_adjoint", "point_source", "lit",
    # media
    "HOMOGENEOUS", "SPECTRAL_EXTINCTION",
    # schema keys (tirender/schema.py)
    "Key", "Texture", "Number", "Integer", "Bool", "Choice", "Vec3", "Ior", "Volume", "Bbox", "Child", "String",
]

BSDF_FLAGS = SMOOTH | DELTA | BOTH_SIDES | TRANSMISSION | NULL | PASS
LEAF_FUNCTIONS = ("fetch", "fetch_adjoint", "f", "pdf", "sample", "f_adjoint", "f_grad_dirs")
DIRAC_FUNCTIONS = ("fetch", "sample")
AT_FUNCTIONS = ("eval_at", "pdf_at", "eval_pdf_at", "sample_at", "adjoint_at", "grad_dirs_at")
EMITTER_FUNCTIONS = ("sample_direction", "pdf_direction", "eval", "eval_adjoint", "sample_ray")
EMITTER_FLAGS = EMITTER_SURFACE | EMITTER_DELTA | EMITTER_INFINITE
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def _label(obj):
    return getattr(obj, "__name__", None) or type(obj).__name__


def _fail(who, problem):
    raise ConfigError(f"{who}: {problem}")


def _where(model):
    return f"{getattr(model, '__module__', '?')}.{getattr(model, '__qualname__', _label(model))}"


def _names(model, who):
    """The model's NAME and ALIASES, checked."""
    name = getattr(model, "NAME", None)
    if name is None:
        _fail(who, "no NAME (its YAML type, a string)")
    aliases = getattr(model, "ALIASES", ())
    if not isinstance(aliases, tuple):
        _fail(who, "ALIASES must be a tuple of strings")
    for n in (name,) + aliases:
        if not isinstance(n, str) or not _NAME.match(n):
            _fail(who, f"NAME and ALIASES must be identifiers (letters, digits, _ and -), got {n!r}")
    return (name,) + aliases


def _taken(model, names, by_name, who):
    """Whether the same model is registered already (True: nothing to do); another model under one of its names
    is refused."""
    for n in names:
        other = by_name.get(n)
        if other is model:
            return True
        if other is not None:
            _fail(who, f"the name '{n}' is taken by {_where(other)}")
    return False


def _keys(model, who, kinds=None):
    """The model's KEYS, checked: a tuple of tirender.schema keys of distinct names (of ``kinds`` if given)."""
    keys = getattr(model, "KEYS", None)
    if keys is None:
        _fail(who, "no KEYS (a tuple of tirender.schema keys)")
    if not isinstance(keys, tuple) or not all(isinstance(k, Key) for k in keys):
        _fail(who, "KEYS must be a tuple of tirender.schema keys")
    seen = set()
    for k in keys:
        for n in (k.name,) + tuple(k.aliases):
            if n in seen or n in ("type", "id"):
                _fail(who, f"key '{n}' is given twice or is reserved ('type', 'id')")
            seen.add(n)
        if kinds is not None and k.kind not in kinds:
            _fail(who, f"key '{k.name}' is a {k.kind} key (this family takes {', '.join(sorted(kinds))} keys)")
    return keys


def _flags(model, who, allowed):
    flags = getattr(model, "FLAGS", None)
    if flags is None:
        _fail(who, "no FLAGS (a bitmask of the family's flags; 0 for none)")
    if isinstance(flags, bool) or not isinstance(flags, int) or flags < 0 or flags & ~allowed:
        _fail(who, f"FLAGS must be a bitmask of the family's flags (within {allowed}), got {flags!r}")
    return flags


def _functions(model, who, names, what):
    """Each of ``names`` is a Taichi function of the model (@staticmethod over @ti.func)."""
    for n in names:
        fn = getattr(model, n, None)
        if fn is None:
            _fail(who, f"missing {n} ({what})")
        if not getattr(fn, "_is_taichi_function", False):
            _fail(who, f"{n} must be a Taichi function (@staticmethod over @ti.func)")


def _optional_int(model, who, name):
    v = getattr(model, name, 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        _fail(who, f"{name} must be an integer >= 0, got {v!r}")


def _variants(model, who):
    v = getattr(model, "VARIANTS", variants.NAMES)
    if not isinstance(v, tuple) or not v or any(x not in variants.NAMES for x in v):
        _fail(who, f"VARIANTS must be a tuple of variant names ({', '.join(variants.NAMES)}), got {v!r}")


def _join(add, model, who):
    try:
        add(model)
    except ConfigError as e:
        _fail(who, e.problem)


def _begin(fn, cls, models, by_name):
    """(the label of errors, whether ``cls`` is registered already) for ``fn(cls)``: a class with a valid NAME
    (and ALIASES) that no other model of the registry (``models``, ``by_name``) holds."""
    who = f"{fn}({_label(cls)})"
    if not isinstance(cls, type):
        _fail(who, f"expected a class, got {cls!r}")
    names = _names(cls, who)
    return who, cls in models or _taken(cls, names, by_name, who)


def register_bsdf(cls):
    """Register a user BSDF class (bsdfs/base.py's module doc; docs/plugins.md) and return it (a decorator too).

    A leaf writes ``fetch, fetch_adjoint, f, pdf, sample, f_adjoint, f_grad_dirs`` (``leaf`` is applied unless
    ``eval_at`` exists: decorate it with ``one_sided`` or ``leaf`` yourself to choose); a model with Dirac lobes
    only (FLAGS with DELTA, without SMOOTH) and no ``f`` writes ``fetch, sample`` (``dirac`` applied; optional
    ``dirac_value_adjoint`` and ``fetch_adjoint`` make its lobes' values differentiable). Composites are
    decorated with ``composite`` and write the ``*_at`` functions themselves."""
    who, known = _begin("register_bsdf", cls, _bsdfs.MODELS, _bsdfs.BY_NAME)
    if known:
        return cls
    keys = _keys(cls, who)
    flags = _flags(cls, who, BSDF_FLAGS)
    _variants(cls, who)
    _optional_int(cls, who, "N_CONST")
    children = getattr(cls, "CHILDREN", ())
    if not isinstance(children, tuple) or any(c not in [k.name for k in keys if isinstance(k, Child)]
                                              for c in children):
        _fail(who, "CHILDREN must be a tuple of the names of its Child keys")
    for hook in ("constants", "complete"):
        if hasattr(cls, hook) and not callable(getattr(cls, hook)):
            _fail(who, f"{hook} must be a function")
    if not hasattr(cls, "eval_at"):
        if children:
            _fail(who, "a composite (CHILDREN) writes eval_pdf_at, sample_at, adjoint_at, grad_dirs_at and is "
                       "decorated with composite")
        dirac_only = flags & DELTA and not flags & SMOOTH and not hasattr(cls, "f")
        if dirac_only:
            need = DIRAC_FUNCTIONS + (("fetch_adjoint", "dirac_value_adjoint")
                                      if hasattr(cls, "dirac_value_adjoint") else ())
            _functions(cls, who, need, "a BSDF with Dirac lobes only writes fetch, sample (and, for a "
                                       "differentiable lobe value, dirac_value_adjoint, fetch_adjoint)")
        else:
            _functions(cls, who, LEAF_FUNCTIONS, f"a leaf BSDF writes {', '.join(LEAF_FUNCTIONS)}")
        params = next((c.__dict__["Params"] for c in cls.__mro__ if "Params" in c.__dict__), None)
        if not isinstance(params, variants.struct):
            _fail(who, "Params must be its parameter record, a tirender.plugins.struct(...)")
        if not flags & (SMOOTH | DELTA | NULL):
            _fail(who, "FLAGS must say SMOOTH (a lobe with a density), DELTA (Dirac lobes) or both")
        (dirac if dirac_only else leaf)(cls)
    else:
        _functions(cls, who, AT_FUNCTIONS, "a decorated BSDF has " + ", ".join(AT_FUNCTIONS))
        if not isinstance(getattr(cls, "COMPOSITE", None), bool):
            _fail(who, "decorate it with leaf, one_sided, dirac or composite")
        if cls.COMPOSITE and not children:
            _fail(who, "a composite names its nested BSDFs in CHILDREN")
    _join(_bsdfs.add, cls, who)
    return cls


def register_emitter(cls):
    """Register a user emitter class (emitters/base.py's module doc: NAME, KEYS, FLAGS of EMITTER_SURFACE /
    EMITTER_DELTA / EMITTER_INFINITE, optional build and N_CONST, and the Taichi functions sample_direction,
    pdf_direction, eval, eval_adjoint, sample_ray, optional eval_grad) and return it."""
    who, known = _begin("register_emitter", cls, _emitters.MODELS, _emitters.BY_NAME)
    if known:
        return cls
    _keys(cls, who)
    flags = _flags(cls, who, EMITTER_FLAGS)
    if flags & EMITTER_SURFACE and flags & EMITTER_INFINITE:
        _fail(who, "FLAGS: an emitter is on a surface or at infinity, not both")
    _optional_int(cls, who, "N_CONST")
    _functions(cls, who, EMITTER_FUNCTIONS, f"an emitter writes {', '.join(EMITTER_FUNCTIONS)}")
    if hasattr(cls, "eval_grad"):
        _functions(cls, who, ("eval_grad",), "")
    if hasattr(cls, "build") and not callable(cls.build):
        _fail(who, "build must be a function (b, row, values, key)")
    _join(_emitters.add, cls, who)
    return cls


def register_medium(cls):
    """Register a user medium declaration and return it: NAME, KEYS with Volume keys SIGMA (the extinction
    or density key's name) and ``albedo``, Number ``scale``, Child ``phase``; grid media (FLAGS without
    HOMOGENEOUS) also Bbox ``bbox`` and Number ``majorant``. The walk (walk/media.py) does the rest: a medium
    model has no device code of its own."""
    who, known = _begin("register_medium", cls, _media.MEDIA, _media.BY_NAME)
    if known:
        return cls
    keys = {k.name: k for k in _keys(cls, who)}
    flags = _flags(cls, who, HOMOGENEOUS)
    sigma = getattr(cls, "SIGMA", None)
    need = {sigma: Volume, "albedo": Volume, "scale": Number, "phase": Child}
    if not flags & HOMOGENEOUS:
        need.update(bbox=Bbox, majorant=Number)
    if not isinstance(sigma, str):
        _fail(who, "no SIGMA (the name of its extinction (homogeneous) or density (grid) Volume key)")
    for n, kind in need.items():
        if not isinstance(keys.get(n), kind):
            _fail(who, f"KEYS need a {kind.__name__} key '{n}' (a medium declares {', '.join(need)})")
    if not flags & HOMOGENEOUS and getattr(keys[sigma], "grid", True) is False:
        _fail(who, f"a grid medium's '{sigma}' must accept grids")
    if not hasattr(cls, "ALIASES"):
        cls.ALIASES = ()
    _join(_media.add, cls, who)
    return cls


def register_integrator(obj):
    """Register a user integrator (a module or a class; integrators/registry.py's module doc) and return it.
    Primal: NAMES (tuple of its types), KEYS (its ``integrator:`` keys) and ``render(scene, spp, seed, sensor,
    progress, integrator=None, sample_offset=0, clear=True)`` -> float32 (H, W, 3); optional VARIANTS, check,
    MITSUBA_DEFAULTS. Gradient: INTEGRATES (the types it differentiates) and METHODS ({method: fn(scene,
    adjoint_image, spp, seed, sensor, accumulate, progress)}), optional JOINT, FORWARD, PARAMS."""
    who = f"register_integrator({_label(obj)})"
    primal = hasattr(obj, "NAMES") or hasattr(obj, "render")
    gradient = hasattr(obj, "METHODS") or hasattr(obj, "INTEGRATES")
    if not primal and not gradient:
        _fail(who, "no NAMES and render (a primal integrator) nor INTEGRATES and METHODS (a gradient method)")
    if obj in _integrators.PRIMAL_MODULES or obj in _integrators.GRADIENT_MODULES:
        return obj
    if primal:
        names = getattr(obj, "NAMES", None)
        if not isinstance(names, tuple) or not names or not all(isinstance(n, str) and _NAME.match(n)
                                                                for n in names):
            _fail(who, "NAMES must be a non-empty tuple of identifiers (its integrator types)")
        for n in names:
            if n in _integrators.PRIMAL or n in _integrators.WRAPPERS:
                _fail(who, f"the integrator name '{n}' is taken")
        _keys(obj, who)
        if not callable(getattr(obj, "render", None)):
            _fail(who, "missing render(scene, spp, seed, sensor, progress, integrator=None, sample_offset=0, "
                       "clear=True)")
        _variants(obj, who)
    if gradient:
        integrates, methods = getattr(obj, "INTEGRATES", None), getattr(obj, "METHODS", None)
        if not isinstance(integrates, tuple) or not integrates:
            _fail(who, "INTEGRATES must be a non-empty tuple of integrator types")
        known = set(_integrators.PRIMAL) | set(getattr(obj, "NAMES", ()) if primal else ())
        for n in integrates:
            if n not in known:
                _fail(who, f"INTEGRATES names '{n}', not an integrator type")
        if not isinstance(methods, dict) or not methods or not all(
                isinstance(k, str) and callable(v) for k, v in methods.items()):
            _fail(who, "METHODS must be a non-empty dict {method name: gradient function}")
        for n in integrates:
            for m in methods:
                if (n, m) in _integrators.GRADIENT:
                    _fail(who, f"method '{m}' of integrator '{n}' exists already")
        _variants(obj, who)
    _integrators.add(obj if primal else None, obj if gradient else None)
    return obj
