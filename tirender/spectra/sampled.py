"""Spectra given as data (Mitsuba 3's ``<spectrum>`` forms): parsing, and what each means in each variant.

Forms (the scene format's mappings; the XML importer produces the same, docs/scenes.md, docs/mitsuba.md):

    {type: spectrum, value: 0.5}                               a uniform spectrum (``<spectrum value="0.5"/>``)
    {type: spectrum, value: [[400, 0.1], [700, 0.2]]}          wavelength (nm), value pairs
    {type: spectrum, value: "400:0.1, 700:0.2"}                the same in Mitsuba's text form
    {type: spectrum, filename: x.spd}                          a file of "wavelength value" lines
    {type: regular, wavelength_min: 400, wavelength_max: 700, values: [0.1, 0.2]}
    {type: irregular, wavelengths: [400, 700], values: [0.1, 0.2]}
    {type: uniform, value: v} / {type: srgb, color: rgb} / {type: d65, scale: s[, color: rgb]} / {type: blackbody, ...}

A wavelength list's meaning depends on the variant and on the role of the key that takes it
(Mitsuba's ``Properties::get_texture_impl``, src/core/properties.cpp):

    REFLECTANCE   BSDF colours, a medium's albedo and σt given as a property:  bounded, D65-weighted reduction
    UNBOUNDED     a conductor's η and k, a ``constvolume``'s value:            unbounded, D65-weighted reduction
    EMISSION      an emitter's radiance / intensity / irradiance:               unbounded, unweighted reduction

* rgb: the list is pre-integrated to linear sRGB, ``spectrum_list_to_srgb`` (src/core/spectrum.cpp: 1000
  steps over 360–830 nm, linear interpolation, 0 outside the list's range, times D65 unless emitted; bounded
  results clamped to [0, 1], unbounded ones to ≥ 0); a uniform spectrum v is v, except on an emitter where it is
  v · xyz_to_srgb(1, 1, 1) (the sRGB of illuminant E: a uniform spectral emitter's colour, not grey);
* mono: the luminance of the rgb value (a uniform spectrum: its value);
* spectral: the list itself, evaluated at the path's wavelengths (``textures.spectrum_eval``: Mitsuba's
  ``regular`` / ``irregular`` eval — linear interpolation, 0 outside [λ_first, λ_last]); a regular list (equal
  steps to 1e-3 of the first) is Mitsuba's ``regular``: its nodes are the exact grid between its ends.

Host only (numpy, float64). ``resolve`` turns a mapping into a ``Resolved`` value (an RGB or scalar value, or a
sampled spectrum's wavelengths and values); errors are ValueError messages the callers wrap with file and key.
"""
import os
import re
from dataclasses import dataclass

import numpy as np

from . import cie

REFLECTANCE, UNBOUNDED, EMISSION = "reflectance", "unbounded", "emission"
LIST_TYPES = ("spectrum", "regular", "irregular")
TYPES = LIST_TYPES + ("uniform", "srgb", "d65", "blackbody")

# Mitsuba 3's constants (include/mitsuba/core/spectrum.h): the CIE range, its luminance normalisation, D65's
CIE_MIN, CIE_MAX = 360.0, 830.0
CIE_Y_NORMALIZATION = 1.0 / 106.7502593994140625
CIE_D65_NORMALIZATION = 1.0 / 98.99741751876255
# the tables as Mitsuba stores them (float32; the same CIE 015:2018 samples as spectra/cie1931_d65.csv)
_XYZ32 = cie.XYZ_BAR.astype(np.float32).astype(np.float64)
_D6532 = cie.D65_RAW.astype(np.float32).astype(np.float64)
LUMINANCE = np.array([0.212671, 0.715160, 0.072169])


def xyz_to_srgb(xyz):
    """Linear sRGB of CIE XYZ (Mitsuba's matrix, include/mitsuba/core/color.h)."""
    return np.asarray(xyz, np.float64) @ cie.XYZ_TO_SRGB.T


E_SRGB = xyz_to_srgb([1.0, 1.0, 1.0])   # a uniform spectrum's linear sRGB per unit (≈ 1.205, 0.948, 0.909)


def _table(table, w):
    """Mitsuba's ``cie1931_xyz`` / ``cie_d65`` lookup: the 95-sample table at w nm, linearly, 0 outside."""
    if w < CIE_MIN or w > CIE_MAX:
        return table[0] * 0.0
    t = (w - CIE_MIN) * ((cie.N_SAMPLES - 1) / (CIE_MAX - CIE_MIN))
    i0 = min(max(int(t), 0), cie.N_SAMPLES - 2)
    w1 = t - i0
    return (1.0 - w1) * table[i0] + w1 * table[i0 + 1]


def spectrum_list_to_srgb(wavelengths, values, bounded, d65):
    """Linear sRGB of a wavelength list (Mitsuba's ``spectrum_list_to_srgb``, src/core/spectrum.cpp): the
    linear interpolant of the list (0 outside its range) times the CIE 1931 curves (times D65 normalised to
    luminance 1 if ``d65``), summed over 1000 wavelengths spanning 360–830 nm, scaled so that a unit spectrum has
    luminance 1; then clamped to [0, 1] (bounded) or to ≥ 0. -> (3,) float64."""
    wl = np.asarray(wavelengths, np.float64)
    v = np.asarray(values, np.float64)
    xyz = np.zeros(3)
    steps = 1000
    for i in range(steps):
        w = CIE_MIN + (i / (steps - 1.0)) * (CIE_MAX - CIE_MIN)
        if w < wl[0] or w > wl[-1]:
            continue
        j = min(max(int(np.searchsorted(wl, w, side="right")) - 1, 0), len(wl) - 2)   # last node <= w
        w0, w1, v0, v1 = wl[j], wl[j + 1], v[j], v[j + 1]
        val = ((w - w1) * v0 + (w0 - w) * v1) / (w0 - w1)
        xyz += _table(_XYZ32, w) * val * (_table(_D6532, w) * CIE_D65_NORMALIZATION if d65 else 1.0)
    xyz *= (CIE_MAX - CIE_MIN) * CIE_Y_NORMALIZATION / steps
    rgb = xyz_to_srgb(xyz)
    return np.clip(rgb, 0.0, 1.0) if bounded else np.maximum(rgb, 0.0)


# ------------------------------------------------------------------------------------------------- parsing
_FLOAT = re.compile(r"[ \t]*\+?[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)[ \t]*$")


def _float(s, what):
    """Mitsuba's ``string::stof``: one decimal number, surrounding blanks allowed."""
    if not _FLOAT.match(s):
        raise ValueError(f"could not parse {what} \"{s}\"")
    return float(s)


def _tokens(s, delims):
    return [t for t in re.split(f"[{re.escape(delims)}]", s) if t]


def parse_text(s):
    """Mitsuba's ``Properties::Spectrum(string)``: one number (a uniform spectrum) -> float, or
    "λ:v, λ:v, ..." pairs (separated by commas or blanks) -> (wavelengths, values)."""
    tokens = _tokens(s, ", ")
    if len(tokens) == 1 and ":" not in tokens[0]:
        return _float(tokens[0], "uniform spectrum value")
    wl, vals = [], []
    for tok in tokens:
        pair = _tokens(tok, ":")
        if len(pair) != 2:
            raise ValueError(f"invalid spectrum value \"{tok}\" (expected wavelength:value pairs)")
        wl.append(_float(pair[0], "wavelength"))
        vals.append(_float(pair[1], "spectrum value"))
    return np.array(wl), np.array(vals)


def parse_numbers(s, what):
    """A list of numbers: a YAML list, or Mitsuba's text ("0.1, 0.2" or "0.1 0.2")."""
    if isinstance(s, str):
        return np.array([_float(t, what) for t in _tokens(s, ", ")])
    if isinstance(s, (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in s):
        return np.array(s, np.float64)
    raise ValueError(f"expected a list of numbers, got {s!r}")


def read_spd(path):
    """A spectrum file as Mitsuba's XML parser reads it (``Properties::Spectrum(fs::path)``): per line a
    wavelength and a value (the rest of the line ignored); lines starting with '#' and empty lines skipped.
    -> (wavelengths, values)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read spectrum file {path} ({getattr(e, 'strerror', None) or e})") from None
    wl, vals = [], []
    num = re.compile(r"[ \t]*\+?([-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?))")
    for n, line in enumerate(lines, 1):
        if not line or line[0] == "#" or line[0] == "\r":
            continue
        m = num.match(line)
        if not m:
            raise ValueError(f"could not extract a wavelength in line {n} of spectrum file {path}: {line.strip()!r}")
        m2 = num.match(line, m.end())
        if not m2:
            raise ValueError(f"could not extract a value in line {n} of spectrum file {path}: {line.strip()!r}")
        wl.append(float(m.group(1)))
        vals.append(float(m2.group(1)))
    return np.array(wl), np.array(vals)


@dataclass
class Sampled:
    """A wavelength list: nodes (nm, strictly increasing) and values; ``regular``: Mitsuba's ``regular``
    (its nodes are then exactly the equal steps between the ends)."""
    wavelengths: np.ndarray
    values: np.ndarray
    regular: bool


def sampled(wavelengths, values):
    """Mitsuba's ``Properties::Spectrum(wavelengths, values)``: checks (≥ 2 entries, same sizes, strictly
    increasing, finite) and the regular detection (every step within 1e-3 of the first)."""
    wl = np.asarray(wavelengths, np.float64)
    v = np.asarray(values, np.float64)
    if wl.size != v.size:
        raise ValueError(f"'wavelengths' and 'values' have different sizes ({wl.size} vs {v.size})")
    if wl.size < 2:
        raise ValueError("a spectrum needs at least two wavelength:value entries")
    if not (np.all(np.isfinite(wl)) and np.all(np.isfinite(v))):
        raise ValueError("spectrum wavelengths and values must be finite")
    if np.any(np.diff(wl) <= 0):
        raise ValueError("wavelengths must be given in increasing order")
    step = wl[1] - wl[0]
    regular = bool(np.all(np.abs(np.diff(wl) - step) <= 1e-3 * step))
    if regular:
        wl = regular_nodes(wl[0], wl[-1], wl.size)
    return Sampled(wl, v, regular)


def regular_nodes(lo, hi, n):
    """The nodes of Mitsuba's regular spectrum over [lo, hi] with n values (properties.cpp)."""
    step = (hi - lo) / (n - 1)
    return np.array([lo + step * i for i in range(n)])


def d65_sampled(scale):
    """D65 normalised to luminance 1 times ``scale``, as Mitsuba's ``d65`` holds it: a regular spectrum of its
    95 table values over 360–830 nm."""
    return Sampled(regular_nodes(CIE_MIN, CIE_MAX, cie.N_SAMPLES), _D6532 * scale * CIE_D65_NORMALIZATION, True)


@dataclass(frozen=True)
class TableRef:
    """A constant spectrum in the scene's spectrum table (SceneDescription.spectra: N, nodes, values) at
    ``table_offset``: a model's colour constant given as a wavelength list in the spectral variants (a
    conductor's η, k; textures.table_eval)."""
    table_offset: int


@dataclass
class Resolved:
    """What a spectrum mapping is in a variant: ``value`` (a number or (3,) RGB: a plain texture value), or a
    ``spectrum`` (Sampled, spectral variants); ``uniform``: the value came from a uniform spectrum; ``data``: the
    list given (every variant; its values are range-checked like any texture value)."""
    value: object = None
    spectrum: Sampled = None
    uniform: bool = False
    data: Sampled = None


def _keys(spec, allowed):
    for k in spec:
        if k not in allowed:
            raise ValueError(f"unknown key '{k}' of a {spec['type']} spectrum (expected one of: "
                             f"{', '.join(sorted(allowed))})", k)


def parse_list(spec, path=None):
    """A mapping of LIST_TYPES -> Sampled, or a float for ``{type: spectrum, value: v}`` (uniform). ``path``
    resolves a file name (default: as given)."""
    t = spec["type"]
    if t == "spectrum":
        _keys(spec, {"type", "value", "filename", "unbounded"})
        if ("value" in spec) == ("filename" in spec):
            raise ValueError("a spectrum needs either 'value' or 'filename' (not both)")
        if "filename" in spec:
            if not isinstance(spec["filename"], str):
                raise ValueError(f"expected a file name, got {spec['filename']!r}", "filename")
            full = path(spec["filename"]) if path else spec["filename"]
            if not os.path.isfile(full):
                raise ValueError(f"spectrum file not found: {full}", "filename")
            return sampled(*read_spd(full))
        v = spec["value"]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not np.isfinite(v):
                raise ValueError(f"value is not finite ({v!r})", "value")
            return float(v)
        if isinstance(v, str):
            p = parse_text(v)
            return p if isinstance(p, float) else sampled(*p)
        if isinstance(v, list) and v and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in v):
            flat = parse_numbers([x for p in v for x in p], "number")
            return sampled(flat[0::2], flat[1::2])
        raise ValueError(f"expected a number, [[wavelength, value], ...] or \"λ:v, ...\", got {v!r}", "value")
    if t == "regular":
        _keys(spec, {"type", "wavelength_min", "wavelength_max", "values", "unbounded"})
        for k in ("wavelength_min", "wavelength_max", "values"):
            if k not in spec:
                raise ValueError(f"a regular spectrum needs '{k}'", k)
        lo, hi = (spec[k] for k in ("wavelength_min", "wavelength_max"))
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) for x in (lo, hi)):
            raise ValueError(f"wavelength_min and wavelength_max must be numbers, got {lo!r}, {hi!r}")
        v = parse_numbers(spec["values"], "value")
        if v.size < 2:
            raise ValueError("a regular spectrum needs at least 2 values", "values")
        if not hi > lo:
            raise ValueError(f"wavelength_max ({hi:g}) must exceed wavelength_min ({lo:g})", "wavelength_max")
        return Sampled(regular_nodes(float(lo), float(hi), v.size), v, True)
    _keys(spec, {"type", "wavelengths", "values", "unbounded"})
    for k in ("wavelengths", "values"):
        if k not in spec:
            raise ValueError(f"an irregular spectrum needs '{k}'", k)
    return sampled(parse_numbers(spec["wavelengths"], "wavelength"), parse_numbers(spec["values"], "value"))


def resolve(spec, role, variant, path=None):
    """A spectrum mapping (``TYPES``, not blackbody) for a key of the given role (REFLECTANCE, UNBOUNDED,
    EMISSION) in ``variant`` -> Resolved (module doc). ``d65`` with a colour and ``blackbody`` are emitter
    spectra (scene/description.py emitter_spectrum) and are refused here; so is ``srgb`` on an emitter in the
    spectral variants (Mitsuba upsamples it as a reflectance there, without D65; tirender's emitter RGB is
    D65-weighted)."""
    t = spec.get("type")
    spectral = variant in ("spectral", "spectral_polarized")
    if t in LIST_TYPES:
        unb = spec.get("unbounded", role != REFLECTANCE)
        if not isinstance(unb, bool):
            raise ValueError(f"'unbounded' must be true or false, got {unb!r}", "unbounded")
        s = parse_list(spec, path)
        if isinstance(s, float):                        # uniform
            if role == EMISSION and not spectral and variant != "mono":
                return Resolved(value=s * E_SRGB, uniform=True)
            return Resolved(value=s, uniform=True)
        if spectral:
            return Resolved(spectrum=s, data=s)
        rgb = spectrum_list_to_srgb(s.wavelengths, s.values, bounded=not unb, d65=role != EMISSION)
        return Resolved(value=np.full(3, LUMINANCE @ rgb) if variant == "mono" else rgb, data=s)
    if t == "uniform":
        _keys(spec, {"type", "value"})
        return Resolved(value=_number(spec.get("value", 1.0), "value"), uniform=True)
    if t == "srgb":
        _keys(spec, {"type", "color"})
        if role == EMISSION and spectral:
            raise ValueError("an srgb spectrum on an emitter is not supported in the spectral variants (Mitsuba "
                             "upsamples it as a reflectance without D65; give the colour as an RGB value: D65 times "
                             "its upsampling)")
        c = spec.get("color", None)
        if c is None:
            raise ValueError("an srgb spectrum needs 'color'", "color")
        c = np.array([_number(x, "color") for x in (c if isinstance(c, (list, tuple)) else [c] * 3)], np.float64)
        if c.size != 3 or np.any(c < 0) or np.any(c > 1):
            raise ValueError(f"an srgb colour must be 3 numbers in [0, 1] (Mitsuba's srgb), got {spec['color']!r}",
                             "color")
        return Resolved(value=c)
    if t == "d65":
        _keys(spec, {"type", "scale", "color"})
        if "color" in spec:
            raise ValueError("a d65 spectrum with a colour is an emitter's spectrum")
        s = _number(spec.get("scale", 1.0), "scale")
        return Resolved(spectrum=d65_sampled(s)) if spectral else Resolved(value=s, uniform=True)
    if t == "blackbody":
        raise ValueError("a blackbody spectrum is an emitter's spectrum")
    raise ValueError(f"unknown spectrum type '{t}' (expected one of: {', '.join(TYPES)})", "type")


def _number(v, key):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise ValueError(f"expected a number, got {v!r}", key)
    return float(v)


def is_spectrum(spec):
    """Whether a key's value is a spectrum mapping (``TYPES``)."""
    return isinstance(spec, dict) and spec.get("type") in TYPES
