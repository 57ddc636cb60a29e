"""The parameter pool: every differentiable float of a scene in one flat array.

A parameter is a named slice ``<id>.<field>`` (e.g. ``red.reflectance``, ``floor_tex.data``)
with a shape ((3,) for an RGB constant, (H, W, C) for a bitmap texture) and bounds.
The pool lives in numpy (the master copy, always valid) and is uploaded to the scene's
Taichi field ``pool``; gradients come back from the twin field ``grad``.
"""
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError


@dataclass
class ParamInfo:
    name: str
    offset: int
    shape: tuple
    lo: float
    hi: float
    kind: str  # "rgb", "scalar", "texture", "grid", "geometry", "attribute" (mesh); "derived" (see ParameterPool.add)

    @property
    def size(self):
        return int(np.prod(self.shape))


class ParameterPool:
    """Name -> slice of one flat float32 array, with bounds; numpy get/set with validation.

    ``pool[name]`` returns a copy shaped like the parameter; ``pool[name] = value`` validates
    (shape, finiteness, bounds) and writes it. The owning scene is told about writes so that
    it can upload them to the device (``on_change`` callback). Names of ``extra`` (the scene's
    sensor parameters, NonDifferentiable) are read and written through it; they are not in the
    pool: not in keys(), no gradients.
    """

    def __init__(self):
        self._info = {}
        self._chunks = []
        self.data = np.zeros(0, np.float32)
        self.on_change = None
        self.before_read = None  # hook: the owner refreshes `data` from the device first
        self.aliases = {}        # alternative spelling -> name (Mitsuba's, see resolve)
        self.extra = None        # non-differentiable parameters read and written by name (the sensors'), not pooled

    # -- building ---------------------------------------------------------------------------
    def add(self, name, value, lo=-np.inf, hi=np.inf, kind="rgb", file=None):
        """Append parameter `name`. kind "derived": a slot that kernels add gradients into (and forward
        mode reads tangents from) for a quantity computed from other parameters (a deformable mesh's
        world vertices, scene/deform.py); it is not a parameter: hidden from keys(), split() and
        describe(), and neither readable nor settable by name."""
        value = np.asarray(value, np.float32)
        if name in self._info:
            raise ConfigError(f"duplicate parameter name '{name}'", file, name)
        _check_value(name, value, lo, hi, file)
        offset = sum(c.size for c in self._chunks)
        self._info[name] = ParamInfo(name, offset, tuple(value.shape), float(lo), float(hi), kind)
        self._chunks.append(value.ravel())
        self.data = np.concatenate(self._chunks).astype(np.float32)
        return self._info[name]

    # -- access ------------------------------------------------------------------------------
    def __contains__(self, name):
        n = self.resolve(name)
        return (n in self._info and self._info[n].kind != "derived") or self._extra(name)

    def _extra(self, name):
        """Whether `name` is one of the non-differentiable parameters of ``extra`` (and not a pool name)."""
        return self.extra is not None and self.resolve(name) not in self._info and name in self.extra

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self.keys())

    def keys(self):
        return [n for n, i in self._info.items() if i.kind != "derived"]

    def slot(self, name):
        """The ParamInfo of a parameter or derived slot (offset, shape), without the hiding of info()."""
        return self._info[name]

    def resolve(self, name):
        """`name`, or the pool name a Mitsuba-style key stands for (docs/mitsuba.md):
        ``floor.bsdf.reflectance.value`` -> ``floor.reflectance``, ``light.emitter.radiance.value``
        -> ``light.radiance``, ``metal.alpha.value`` -> ``metal.roughness`` (schema aliases);
        ``floor.bsdf.reflectance.values`` (a sampled spectrum's values) -> ``floor.reflectance``."""
        if name in self._info:
            return name
        n = name
        while n.endswith((".value", ".data", ".values")):
            n = n.rsplit(".", 1)[0]
        cands = [n, ".".join(p for p in n.split(".") if p not in ("bsdf", "emitter", "phase_function"))]
        for c in cands:
            c = self.aliases.get(c, c)
            if c in self._info:
                return c
        return name

    def info(self, name):
        if self._extra(name):
            raise ConfigError("a sensor parameter is not differentiable (Mitsuba marks it NonDifferentiable): set it "
                              "by name, it has no gradient", key=name)
        name = self.resolve(name)
        if name not in self._info or self._info[name].kind == "derived":
            close = [k for k in self._info if name.split(".")[0] in k]
            hint = f" (parameters: {', '.join(close or list(self._info)[:12])})"
            raise ConfigError(f"unknown parameter '{name}'{hint}", key=name)
        return self._info[name]

    def __getitem__(self, name):
        if self._extra(name):
            return self.extra[name]
        i = self.info(name)
        if self.before_read is not None:
            self.before_read()
        return self.data[i.offset:i.offset + i.size].reshape(i.shape).copy()

    def __setitem__(self, name, value):
        if self._extra(name):
            self.extra[name] = value
            return
        i = self.info(name)
        v = as_float_array(value, name)
        if v.shape != i.shape:
            if v.size == 1 and i.kind != "texture":
                v = np.full(i.shape, float(v.ravel()[0]), np.float32)
            elif v.ndim == 1 and len(i.shape) == 3 and v.shape[0] == i.shape[2]:
                v = np.broadcast_to(v, i.shape).astype(np.float32)  # fill a texture with a colour
            else:
                raise ConfigError(f"wrong shape {tuple(v.shape)}, expected {i.shape}", key=name)
        _check_value(name, v, i.lo, i.hi, None)
        if self.before_read is not None:
            self.before_read()
        self.data[i.offset:i.offset + i.size] = v.ravel()
        if self.on_change is not None:
            self.on_change(i.name)

    def describe(self):
        """List of (name, shape, (lo, hi)) — what ``scene.params`` shows."""
        return [(i.name, i.shape, (i.lo, i.hi)) for i in self._info.values() if i.kind != "derived"]

    def __repr__(self):
        rows = [f"  {i.name:32s} shape={i.shape} bounds=[{i.lo:g}, {i.hi:g}]" for i in self._info.values()
                if i.kind != "derived"]
        return "ParameterPool(\n" + "\n".join(rows) + "\n)"

    def split(self, flat):
        """Flat array shaped like the pool -> dict name -> array."""
        return {n: np.asarray(flat[i.offset:i.offset + i.size]).reshape(i.shape).copy()
                for n, i in self._info.items() if i.kind != "derived"}

    def bounds_arrays(self):
        lo = np.empty(self.data.size, np.float32)
        hi = np.empty(self.data.size, np.float32)
        for i in self._info.values():
            lo[i.offset:i.offset + i.size] = i.lo
            hi[i.offset:i.offset + i.size] = i.hi
        return lo, hi


def as_float_array(value, what, file=None):
    """value as a float32 array, or one ConfigError line naming ``what`` (strings, None, ragged lists, objects)."""
    if isinstance(value, (str, bytes)) or value is None:
        raise ConfigError(f"expected a number or an array of numbers, got {type(value).__name__} {value!r:.40}",
                          file, what)
    try:
        return np.asarray(value, np.float32)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"expected a number or an array of numbers, got {type(value).__name__} "
                          f"({str(e).splitlines()[0][:80]})", file, what) from None


def _check_value(name, v, lo, hi, file):
    if not np.all(np.isfinite(v)):
        raise ConfigError("value is not finite (NaN or Inf)", file, name)
    if v.size and (v.min() < lo or v.max() > hi):
        bad = v.min() if v.min() < lo else v.max()
        raise ConfigError(f"value {bad:g} is out of bounds [{lo:g}, {hi:g}]", file, name)
