"""Declarative schemas for the keys of a YAML mapping: type, YAML booleans, ranges, shapes, finiteness.

Every model (BSDF, emitter, medium, phase function, integrator) declares its keys once as a tuple of
``Key`` objects; ``validate`` checks a user's mapping against it before any kernel runs and
``keys_table`` renders the same declaration as a Markdown table for the documentation.

    KEYS = (Texture("reflectance", 3, default=0.5, lo=0.0, hi=1.0, doc="albedo ρ"),
            Bool("twosided", default=False))
    values = validate(spec, KEYS, file, "bsdfs.red")     # {"reflectance": 0.5, "twosided": False}

Texture and nested-BSDF keys are checked for their form only; the scene builder turns them into
pool slices and child indices. Every problem raises ConfigError naming the file, the key path and
the problem.
"""
import math

import numpy as np

from .errors import ConfigError

REQUIRED = object()


def _join(where, name):
    return f"{where}.{name}" if where else name


class Key:
    """One key of a mapping. ``aliases`` are accepted spellings (e.g. Mitsuba's ``alpha`` for
    ``roughness``); ``doc`` is the documentation text."""
    kind = "value"

    def __init__(self, name, default=REQUIRED, doc="", aliases=()):
        self.name, self.default, self.doc, self.aliases = name, default, doc, tuple(aliases)

    @property
    def required(self):
        return self.default is REQUIRED

    def parse(self, v, file, key):
        return v

    def describe(self):
        return self.kind

    def default_text(self):
        if self.required:
            return "required"
        if self.default is None:
            return "-"
        if isinstance(self.default, bool):
            return f"`{str(self.default).lower()}`"
        if isinstance(self.default, float):
            return f"`{self.default:g}`"
        if isinstance(self.default, tuple):
            return "`[" + ", ".join(f"{x:g}" for x in self.default) + "]`"
        return f"`{self.default}`"


def _fmt(x):
    """A bound for messages: whole numbers in full (16777216, not 1.67772e+07)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def number(v, file, key, lo=-math.inf, hi=math.inf, strict_lo=False, integer=False, strict_hi=False):
    """A finite number (not a boolean, not a string) within [lo, hi] (or (lo, hi], [lo, hi), (lo, hi));
    ``integer``: a whole number (2.0 is accepted as 2, 2.7 is refused)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(f"expected a number, got {v!r}", file, key)
    if not math.isfinite(float(v)):
        raise ConfigError(f"value is not finite ({v!r})", file, key)
    if integer and int(v) != v:
        raise ConfigError(f"expected an integer, got {v!r}", file, key)
    if (v <= lo if strict_lo else v < lo) or (v >= hi if strict_hi else v > hi):
        parts = []
        if lo > -math.inf:
            parts.append(f"{'>' if strict_lo else '>='} {_fmt(lo)}")
        if hi < math.inf:
            parts.append(f"{'<' if strict_hi else '<='} {_fmt(hi)}")
        raise ConfigError(f"must be {' and '.join(parts)}, got {v!r}", file, key)
    return int(v) if integer else float(v)


def vec3(v, file, key, lo=-math.inf, hi=math.inf):
    """Three finite numbers (a single number is broadcast)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = [v, v, v]
    if not isinstance(v, (list, tuple)) or len(v) != 3:
        raise ConfigError(f"expected 3 numbers, got {v!r}", file, key)
    return np.array([number(x, file, key, lo, hi) for x in v], np.float64)


def check_keys(d, allowed, file, where):
    """ConfigError unless d is a mapping whose keys are all in `allowed` (the first unknown one named)."""
    if not isinstance(d, dict):
        raise ConfigError(f"expected a mapping, got {type(d).__name__}", file, where)
    for k in d:
        if k not in allowed:
            raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(sorted(allowed))})", file,
                              f"{where}.{k}" if where else k)


def boolean(v, file, key):
    """A YAML boolean (true/false); strings such as "false" or "no" are refused."""
    if not isinstance(v, bool):
        raise ConfigError(f"expected true or false, got {v!r}", file, key)
    return v


class Number(Key):
    kind = "number"

    def __init__(self, name, default=REQUIRED, lo=-math.inf, hi=math.inf, strict_lo=False, doc="",
                 aliases=(), integer=False, strict_hi=False, exclude=()):
        super().__init__(name, default, doc, aliases)
        self.lo, self.hi, self.strict_lo, self.integer = lo, hi, strict_lo, integer
        self.strict_hi, self.exclude = strict_hi, tuple(exclude)

    def parse(self, v, file, key):
        x = number(v, file, key, self.lo, self.hi, self.strict_lo, self.integer, self.strict_hi)
        for bad, why in self.exclude:
            if x == bad:
                raise ConfigError(f"{bad:g} is not allowed ({why})", file, key)
        return x

    def describe(self):
        k = "integer" if self.integer else "number"
        lo = "" if self.lo == -math.inf else f"{'>' if self.strict_lo else '≥'} {self.lo:g}"
        hi = "" if self.hi == math.inf else f"{'<' if self.strict_hi else '≤'} {self.hi:g}"
        rng = ", ".join(x for x in (lo, hi) if x)
        return f"{k} ({rng})" if rng else k


class Integer(Number):
    """An integer key; ``exclude``: ((value, reason), ...) refused inside the range."""

    def __init__(self, name, default=REQUIRED, lo=-math.inf, hi=math.inf, doc="", aliases=(), exclude=()):
        super().__init__(name, default, lo, hi, False, doc, aliases, integer=True, exclude=exclude)


class Bool(Key):
    kind = "boolean"

    def parse(self, v, file, key):
        return boolean(v, file, key)


class Choice(Key):
    def __init__(self, name, choices, default=REQUIRED, doc="", aliases=()):
        super().__init__(name, default, doc, aliases)
        self.choices = tuple(choices)

    def parse(self, v, file, key):
        if not isinstance(v, str) or v not in self.choices:
            raise ConfigError(f"unknown value {v!r} (expected one of: {', '.join(self.choices)})", file, key)
        return v

    def describe(self):
        return " \\| ".join(f"`{c}`" for c in self.choices)


class Vec3(Key):
    """Three numbers. ``spectrum``: the key is a colour constant that may also be given as a spectrum
    (spectra/sampled.py role, e.g. a conductor's η: UNBOUNDED); the scene builder resolves it to three numbers, or
    to a spectrum-table reference (an object with ``table_offset``) that parse passes through."""
    kind = "3 numbers"

    def __init__(self, name, default=REQUIRED, lo=-math.inf, hi=math.inf, doc="", aliases=(), spectrum=None):
        super().__init__(name, default, doc, aliases)
        self.lo, self.hi, self.spectrum = lo, hi, spectrum

    def parse(self, v, file, key):
        if self.spectrum is not None and hasattr(v, "table_offset"):
            return v
        return vec3(v, file, key, self.lo, self.hi)


class Texture(Key):
    """A differentiable input: a number, an RGB list, or a bitmap mapping (see docs/scenes.md).
    ``channels`` 1 (scalar) or 3 (RGB); values must lie in [lo, hi]; ``raw``: bitmaps are read
    without the sRGB transfer curve by default (normal maps, roughness). The pool parameter is
    named ``<id>.<param>`` (``param`` defaults to the key's name)."""
    kind = "texture"

    def __init__(self, name, channels, default=REQUIRED, lo=0.0, hi=math.inf, doc="", aliases=(), raw=None,
                 param=None, strict_lo=False):
        super().__init__(name, default, doc, aliases)
        self.channels, self.lo, self.hi, self.raw = channels, lo, hi, raw
        self.param = param or name
        self.strict_lo = strict_lo

    def parse(self, v, file, key):
        if isinstance(v, dict):
            return v
        if self.channels == 3:
            a = vec3(v, file, key)
        else:
            a = np.array([number(v, file, key)])
        bad = (a <= self.lo) if self.strict_lo else (a < self.lo)
        bad |= a > self.hi
        if bad.any():
            cmp = f"({self.lo:g}" if self.strict_lo else f"[{self.lo:g}"
            raise ConfigError(f"value {a[bad][0]:g} is out of range {cmp}, {self.hi:g}]", file, key)
        return v

    def describe(self):
        rng = (f"{'(' if self.strict_lo else '['}{self.lo:g}, {self.hi:g}]" if self.hi < math.inf else
               f"{'>' if self.strict_lo else '≥'} {self.lo:g}")
        what = "RGB" if self.channels == 3 else "scalar"
        return f"{what} texture {rng}"


class Volume(Texture):
    """A medium coefficient: a number / RGB list (a 1x1x1 volume), {type: const, value, to_world} (Mitsuba's
    constvolume) or, where ``grid`` is true, a grid mapping ({type: grid, filename | data | resolution, value};
    see docs/media.md). The pool parameter is named ``<id>.<param>``."""
    kind = "volume"

    def __init__(self, name, channels, default=REQUIRED, lo=0.0, hi=math.inf, grid=True, doc="", aliases=()):
        super().__init__(name, channels, default, lo, hi, doc, aliases)
        self.grid = grid

    def parse(self, v, file, key):
        if isinstance(v, dict) and v.get("type") == "const":   # Mitsuba's constvolume: checked by media/spec.py
            return v
        if isinstance(v, dict) and not self.grid and v.get("type", "grid") == "grid":
            raise ConfigError("expected a number or RGB values (grids belong to heterogeneous media)", file, key)
        return super().parse(v, file, key)

    def describe(self):
        rng = (f"{'(' if self.strict_lo else '['}{self.lo:g}, {self.hi:g}]" if self.hi < math.inf else
               f"{'>' if self.strict_lo else '≥'} {self.lo:g}")
        return ("grid or " if self.grid else "") + ("RGB" if self.channels == 3 else "scalar") + f" {rng}"


class Bbox(Key):
    """An axis-aligned box {min: [x, y, z], max: [x, y, z]} -> (lo, hi) arrays."""
    kind = "box"

    def parse(self, v, file, key):
        if not isinstance(v, dict) or set(v) - {"min", "max"} or len(v) != 2:
            raise ConfigError(f"expected {{min: [x, y, z], max: [x, y, z]}}, got {v!r}", file, key)
        lo, hi = vec3(v["min"], file, f"{key}.min"), vec3(v["max"], file, f"{key}.max")
        if np.any(hi <= lo):
            raise ConfigError(f"empty bounding box {lo.tolist()} .. {hi.tolist()}", file, key)
        return lo, hi


class Ior(Key):
    """An index of refraction: a number > 0 or a material name (``IORS``)."""
    kind = "IOR"
    IORS = {"vacuum": 1.0, "air": 1.000277, "water": 1.3330, "bk7": 1.5046, "glass": 1.5046,
            "polypropylene": 1.49, "acrylic glass": 1.49, "diamond": 2.419, "fused quartz": 1.458,
            "water ice": 1.31, "pyrex": 1.470, "sapphire": 1.77, "sodium chloride": 1.544,
            "amber": 1.55, "pet": 1.575, "helium": 1.000036, "hydrogen": 1.000132, "carbon dioxide": 1.00045,
            "ethanol": 1.361, "carbon tetrachloride": 1.461, "benzene": 1.501, "silicone oil": 1.52,
            "bromine": 1.661, "acetone": 1.36}

    def parse(self, v, file, key):
        if isinstance(v, str):
            if v.lower() not in self.IORS:
                raise ConfigError(f"unknown IOR '{v}' (a number or one of: {', '.join(self.IORS)})", file, key)
            return self.IORS[v.lower()]
        return number(v, file, key, 0.0, strict_lo=True)

    def describe(self):
        return "IOR (number > 0 or a name)"


class IorTexture(Texture):
    """A differentiable index of refraction: a number > 0, a material name (``Ior.IORS``) or a one-channel bitmap
    (read raw: a spatially varying IOR), i.e. the pool parameter ``<id>.<param>``."""

    def __init__(self, name, default=REQUIRED, doc="", aliases=()):
        super().__init__(name, 1, default=default, lo=0.01, hi=100.0, doc=doc, aliases=aliases, raw=True)

    def parse(self, v, file, key):
        if isinstance(v, dict):
            return super().parse(v, file, key)
        v = Ior(self.name).parse(v, file, key) if isinstance(v, str) else v
        return float(super().parse(v, file, key))

    def describe(self):
        return f"IOR (number in [{self.lo:g}, {self.hi:g}], a name or a scalar texture; differentiable)"


class String(Key):
    kind = "string"

    def parse(self, v, file, key):
        if not isinstance(v, str):
            raise ConfigError(f"expected a string, got {v!r}", file, key)
        return v


class Transform(Key):
    """A to_world transform (a list of translate / rotate / scale / matrix / look_at steps)."""
    kind = "transform"

    def parse(self, v, file, key):
        from .scene.transforms import parse_transform
        return parse_transform(v, file, key)


class Child(Key):
    """A nested model: a mapping, or (for BSDFs) the id of one defined under ``bsdfs:``; a phase
    function may also be given by its type name."""
    kind = "nested BSDF"

    def __init__(self, name, default=REQUIRED, doc="", aliases=(), kind=None):
        super().__init__(name, default, doc, aliases)
        if kind:
            self.kind = kind


def validate(spec, keys, file, where, skip=(), family=None):
    """Check mapping `spec` against `keys`; returns {name: parsed value} with defaults filled in
    (keys without default that are absent are left out). `skip`: keys handled by the caller.
    family: (what, type name, keys of the other models) — a key of another model of the family is
    reported as not applying to this one."""
    if not isinstance(spec, dict):
        raise ConfigError(f"expected a mapping, got {type(spec).__name__}", file, where)
    by_name = {}
    for k in keys:
        by_name[k.name] = k
        for a in k.aliases:
            by_name[a] = k
    for k in spec:
        if k not in by_name and k not in skip:
            allowed = sorted({k.name for k in keys} | set(skip))
            if family is not None and k in family[2]:
                raise ConfigError(f"key '{k}' does not apply to a '{family[1]}' {family[0]} (its keys: "
                                  f"{', '.join(allowed) or 'none'})", file, _join(where, k))
            raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(allowed)})", file, _join(where, k))
    out = {}
    for key in keys:
        given = [n for n in (key.name,) + key.aliases if n in spec]
        if len(given) > 1:
            raise ConfigError(f"give only one of {', '.join(given)}", file, _join(where, given[1]))
        if given:
            out[key.name] = key.parse(spec[given[0]], file, _join(where, given[0]))
        elif key.required:
            raise ConfigError("missing required key", file, _join(where, key.name))
        elif key.default is not None:
            out[key.name] = key.default
    return out


def family_keys(models):
    """Every key name (and alias) of a family of models, for validate(family=...)."""
    return {n for m in models for k in m.KEYS for n in (k.name,) + k.aliases}


def keys_table(keys):
    """Markdown table of a schema: key, type, default, description."""
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for k in keys:
        names = " / ".join(f"`{n}`" for n in (k.name,) + k.aliases)
        rows.append(f"| {names} | {k.describe()} | {k.default_text()} | {k.doc} |")
    return "\n".join(rows)
