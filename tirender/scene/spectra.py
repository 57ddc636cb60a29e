"""The scene builder's side of spectra given as data (spectra/sampled.py: the forms and their meaning per variant):
a spectrum mapping becomes a texture (its value in this variant, or a sampled spectrum whose N values are the
parameter and whose wavelengths go to the scene's spectrum table), a model's colour constant (a conductor's η and
k: RGB, or a constant of the table), or an emitter's spectrum kind. ``b`` is scene/description's builder (its
``variant``, ``file``, ``path``, ``add_texture``, ``texture``, ``textures`` and the table ``spectra``).

The spectrum table (SceneDescription.spectra, on the device ``st.spec_tab``): per spectrum N, its N wavelengths
(nm, increasing) and, for constants, its N values; textures.py reads it (``tex_lam`` of a texture: its offset).
"""
import numpy as np

from .. import variants
from ..errors import ConfigError
from ..spectra import sampled


def resolve(b, spec, role, key):
    """A spectrum mapping -> sampled.Resolved for the builder's variant (one ConfigError on bad input)."""
    try:
        r = sampled.resolve(spec, role, b.variant, lambda p: b.path(p, f"{key}.filename"))
    except ValueError as e:
        raise ConfigError(e.args[0], b.file, f"{key}.{e.args[1]}" if len(e.args) > 1 else key) from None
    return r


def _check_range(b, r, lo, hi, key):
    """A list's values lie in the key's range, in every variant (Mitsuba accepts any and clamps the RGB)."""
    if r.data is not None:
        v = r.data.values
        if v.min() < lo or v.max() > hi:
            raise ConfigError(f"spectrum values must lie in [{lo:g}, {hi:g}] (found {v.min():g}..{v.max():g})",
                              b.file, key)


def add(b, s, constant=False):
    """Append sampled spectrum s to the table (N, wavelengths, and its values if ``constant``); -> its offset."""
    o = len(b.spectra)
    b.spectra += [float(len(s.wavelengths))] + [float(x) for x in s.wavelengths]
    if constant:
        b.spectra += [float(x) for x in s.values]
    return o


def texture(b, spec, name, channels, lo, hi, key, role, raw=None):
    """A spectrum mapping as texture `name` -> texture index: its value in this variant (an RGB or scalar
    constant), or a sampled spectrum (spectral variants: its N values the parameter (N,), its wavelengths in the
    table). On data keys (``raw``: normal maps, IORs, a polarizer's angle) a uniform spectrum is its value (Mitsuba's
    ``uniform`` texture); other spectra there, and a colour on a scalar key, are refused."""
    if raw:
        v = spec.get("value")
        if spec.get("type") in ("spectrum", "uniform") and isinstance(v, (int, float)) and not isinstance(v, bool):
            return b.texture(float(v), name, channels, lo, hi, key)
        raise ConfigError("expected a number, an RGB value or a bitmap (this key holds data, not a spectrum)",
                          b.file, key)
    r = resolve(b, spec, role, key)
    _check_range(b, r, lo, hi, key)
    if r.spectrum is None:
        if channels == 1 and not r.uniform:
            raise ConfigError("a scalar key takes a uniform spectrum (a number), not a colour", b.file, key)
        v = float(np.mean(r.value)) if channels == 1 else [float(x) for x in np.broadcast_to(r.value, 3)]
        return b.texture(v, name, channels, lo, hi, key)
    if channels != 3:
        raise ConfigError("a scalar key takes a uniform spectrum (a number), not a wavelength list", b.file, key)
    t = b.add_texture(name, r.spectrum.values.reshape(1, 1, -1).astype(np.float32), lo, hi, True, 0, True, key)
    b.textures[t].lam = add(b, r.spectrum)
    return t


def colour_constants(b, spec, model, key):
    """A model's colour constants given as spectra (Vec3 keys declaring a ``spectrum`` role: a conductor's η, k)
    -> spec with each replaced by its RGB value in this variant, or by a table reference (sampled.TableRef) for a
    wavelength list in the spectral variants."""
    out = dict(spec)
    for k in model.KEYS:
        role = getattr(k, "spectrum", None)
        name = next((n for n in (k.name,) + k.aliases if n in spec), None)
        if role is None or name is None or not sampled.is_spectrum(spec[name]):
            continue
        r = resolve(b, spec[name], role, f"{key}.{name}")
        _check_range(b, r, k.lo, k.hi, f"{key}.{name}")
        if r.spectrum is None:
            out[name] = [float(x) for x in np.broadcast_to(r.value, 3)]
        else:
            out[name] = sampled.TableRef(add(b, r.spectrum, constant=True))
    return out


def emitter_kind(b, spec, v, k0, key):
    """An emitter's spectrum given as data (its first texture key k0 holds v) -> (spec, (kind, T, tint)) or None
    (not such a spectrum: the caller's emitter spectra, or a plain RGB value). A wavelength list (or ``d65``
    without a colour) is a sampled spectrum in the spectral variants (kind SPECTRUM_SAMPLED: the texture holds its
    values), a uniform ``{type: spectrum, value: v}`` the uniform kind there (no D65); in rgb and mono the texture
    holds the reduced value (``texture`` with the EMISSION role), kind RGB."""
    if not sampled.is_spectrum(v) or v["type"] in ("blackbody", "uniform") or (v["type"] == "d65" and "color" in v):
        return None
    white = (1.0, 1.0, 1.0)
    if b.variant in ("spectral", "spectral_polarized"):
        r = resolve(b, v, sampled.EMISSION, f"{key}.{k0.name}")
        if r.spectrum is not None:
            return spec, (variants.SPECTRUM_SAMPLED, 0.0, white)
        if r.uniform:
            return dict(spec, **{k0.name: float(r.value)}), (variants.SPECTRUM_UNIFORM, 0.0, white)
    return spec, (variants.SPECTRUM_RGB, 0.0, white)
