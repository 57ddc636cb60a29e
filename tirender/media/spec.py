"""Medium specs (YAML) -> Medium descriptions and the packed device tables (numpy only).

Scene format (see docs/media.md)::

    media:                                  # optional: named media, referenced by shapes
      smoke:
        type: grid                          # homogeneous | grid
        density: {type: grid, filename: smoke.vol}    # or .npy (D, H, W[, C]), or
                                            # {resolution: [D, H, W], value: 0.5}, or a number
        albedo: [0.8, 0.8, 0.8]             # RGB constant, or a grid spec like density
        scale: 4.0                          # sigma_t = scale * density
        bbox: {min: [-1, -1, -1], max: [1, 1, 1]}     # default: the .vol's bbox, else the
                                            # bounding box of the first shape using it
        majorant: 8.0                       # optional fixed majorant (a lower bound: the
                                            # renderer uses max(majorant, 1.1 * max sigma_t))
        phase: {type: hg, g: 0.3}           # isotropic (default) | hg
    shapes:
      - {type: cube, bsdf: {type: null}, interior: smoke}
      - {type: sphere, bsdf: {type: dielectric}, interior: {type: homogeneous,
         sigma_t: [1, 2, 4], albedo: 0.9, scale: 1.0}}    # inline media take the shape's id

Parameters (pool slices): ``<id>.sigma_t`` (homogeneous, RGB (3,)), ``<id>.density``
(grid, (D, H, W, C)), ``<id>.albedo`` (RGB (3,) or a grid), ``<id>.g`` (HG only, (1,)).
"""
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..schema import family_keys, number, validate
from ..spectra.sampled import is_spectrum
from . import GRID_MAJORANT_MARGIN, HOMOGENEOUS
from .phase import BY_NAME as PHASES
from .registry import BY_NAME as MEDIA
from .registry import MEDIA as _MODELS

_MEDIUM_KEYS = family_keys(_MODELS)

GRID_KEYS = {"type", "filename", "data", "resolution", "value"}


@dataclass
class Medium:
    id: str
    type: int                  # model tag (media/registry.py)
    flags: int
    sigma: int                 # texture index: sigma_t (homogeneous) or density (grid) volume
    albedo: int                # texture index
    g: int = -1                # texture index of the phase function's parameter (-1: none)
    phase: int = 0             # phase model tag (media/phase.py)
    scale: float = 1.0
    bbox_min: tuple = (-1.0, -1.0, -1.0)
    bbox_max: tuple = (1.0, 1.0, 1.0)
    majorant: float = 0.0      # fixed majorant (0: automatic)


def _load_grid(b, spec, key, channels):
    """Grid spec -> (data (D, H, W, C) float32, bbox or None)."""
    if not isinstance(spec, dict):
        if channels == 3 and isinstance(spec, (list, tuple)):
            v = np.asarray(spec, np.float32).reshape(1, 1, 1, -1)
        else:
            v = np.full((1, 1, 1, 1), number(spec, b.file, key), np.float32)
        return v, None
    unknown = set(spec) - GRID_KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(sorted(GRID_KEYS))})", b.file,
                          f"{key}.{k}")
    if spec.get("type", "grid") != "grid":
        raise ConfigError(f"unknown volume type '{spec.get('type')}' (grid)", b.file, f"{key}.type")
    bbox = None
    if "filename" in spec or "data" in spec:
        k = "filename" if "filename" in spec else "data"
        full = b.path(spec[k], f"{key}.{k}")
        if full.lower().endswith(".vol"):
            from .volfile import read_vol
            data, lo, hi = read_vol(full)
            bbox = (tuple(lo), tuple(hi))
        else:
            from ..limits import load_npy
            data = load_npy(full, (3, 4), "grid (D, H, W) or (D, H, W, C)")
            if data.ndim == 3:
                data = data[..., None]
    elif "resolution" in spec:
        r = spec["resolution"]
        r = [r, r, r] if isinstance(r, int) and not isinstance(r, bool) else r
        if not isinstance(r, (list, tuple)) or len(r) != 3:
            raise ConfigError(f"expected a resolution n or [D, H, W], got {r!r}", b.file, f"{key}.resolution")
        r = [number(x, b.file, f"{key}.resolution", 1, 1024, integer=True) for x in r]
        val = spec.get("value", 1.0 if channels == 1 else 0.5)
        ok = isinstance(val, (int, float)) and not isinstance(val, bool) or (
            isinstance(val, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in val))
        val = np.atleast_1d(np.asarray(val if ok else np.nan, np.float32))
        if val.size not in (1, channels) or not np.all(np.isfinite(val)):
            raise ConfigError(f"expected a number or {channels} numbers, got {spec.get('value')!r}", b.file,
                              f"{key}.value")
        from ..limits import check
        check(r[0] * r[1] * r[2] * val.size, f"grid of {r[0]}x{r[1]}x{r[2]}x{val.size} values", b.file,
              f"{key}.resolution")
        data = np.ascontiguousarray(np.broadcast_to(val.reshape(1, 1, 1, -1), tuple(r) + (val.size,)), np.float32)
    else:
        raise ConfigError("a grid needs 'filename', 'data' or 'resolution'", b.file, key)
    if data.shape[3] not in (1, channels) or data.shape[3] not in (1, 3):
        raise ConfigError(f"grid has {data.shape[3]} channels, expected 1" + (" or 3" if channels == 3 else ""),
                          b.file, key)
    if not np.all(np.isfinite(data)):
        raise ConfigError("grid contains NaN or Inf", b.file, key)
    return np.ascontiguousarray(data, np.float32), bbox


def _volume(b, k, spec, name, key):
    """Volume key k's value -> (texture index, bbox of a .vol file or None). A spectrum mapping (spectra/sampled.py)
    is a constant of the variant's meaning (Mitsuba's get_volume: bounded, D65-weighted in rgb; a sampled spectrum
    in the spectral variants)."""
    if isinstance(spec, dict) and not is_spectrum(spec):
        data, bbox = _load_grid(b, spec, key, k.channels)
        if data.min() < k.lo or data.max() > k.hi:
            raise ConfigError(f"grid values must lie in [{k.lo:g}, {k.hi:g}] (found {data.min():g}..{data.max():g})",
                              b.file, key)
        return b.add_texture(name, data, k.lo, k.hi, True, 1, False, key), bbox
    return b.texture(spec, name, k.channels, k.lo, k.hi, key), None


def _phase(b, mid, spec, key):
    """A phase spec (type name or mapping) -> (phase tag, texture index of its parameter or -1)."""
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"expected a phase function type or mapping, got {spec!r}", b.file, key)
    t = spec.get("type", "isotropic")
    if t not in PHASES:
        raise ConfigError(f"unknown phase function '{t}' (expected one of: {', '.join(PHASES)})", b.file,
                          f"{key}.type")
    model = PHASES[t]
    values = validate({k: v for k, v in spec.items() if k != "type"}, model.KEYS, b.file, key)
    tex = -1
    for k in model.KEYS:   # at most one differentiable parameter per phase function
        if k.kind == "texture":
            tex = b.texture(values[k.name], f"{mid}.{k.param}", k.channels, k.lo, k.hi, f"{key}.{k.name}")
    return model.TAG, tex


def parse_medium(b, mid, spec, key, shape_positions=None):
    """Parse one medium spec into b.media (generic over the models' KEYS); returns its index."""
    if not isinstance(spec, dict):
        raise ConfigError(f"expected a medium mapping, got {spec!r}", b.file, key)
    t = spec.get("type", "homogeneous")
    if t not in MEDIA:
        raise ConfigError(f"unknown medium type '{t}' (expected one of: {', '.join(MEDIA)})", b.file, f"{key}.type")
    model = MEDIA[t]
    values = validate({k: v for k, v in spec.items() if k not in ("type", "id")}, model.KEYS, b.file, key,
                      family=("medium", t, _MEDIUM_KEYS))
    tex, bbox_file = {}, None
    for k in model.KEYS:
        if k.kind == "volume":
            tex[k.name], bb = _volume(b, k, values[k.name], f"{mid}.{k.param}", f"{key}.{k.name}")
            bbox_file = bbox_file or bb
    phase, g = _phase(b, mid, values["phase"], f"{key}.phase")
    m = Medium(mid, model.TAG, model.FLAGS, tex[model.SIGMA], tex["albedo"], g=g, phase=phase,
               scale=values["scale"])
    if not model.FLAGS & HOMOGENEOUS:
        if values.get("bbox") is not None:
            lo, hi = values["bbox"]
        elif bbox_file is not None:
            lo, hi = np.asarray(bbox_file[0]), np.asarray(bbox_file[1])
        elif shape_positions is not None and len(shape_positions):
            lo, hi = shape_positions.min(0), shape_positions.max(0)
        else:
            lo, hi = -np.ones(3), np.ones(3)
        if np.any(hi <= lo):
            raise ConfigError(f"empty bounding box {np.asarray(lo).tolist()} .. {np.asarray(hi).tolist()}", b.file,
                              f"{key}.bbox")
        m.bbox_min, m.bbox_max = tuple(float(x) for x in lo), tuple(float(x) for x in hi)
        m.majorant = values["majorant"]
    b.media.append(m)
    return len(b.media) - 1


def medium_ref(b, ref, key, sid, side, positions):
    """A shape's ``interior``/``exterior``: a medium id (from ``media:``) or an inline spec."""
    if isinstance(ref, str):
        if ref in b.media_index:
            return b.media_index[ref]
        if ref not in b.media_specs:
            raise ConfigError(f"unknown medium id '{ref}' (defined: {', '.join(b.media_specs) or 'none'})",
                              b.file, key)
        i = parse_medium(b, ref, b.media_specs[ref], f"media.{ref}", positions)
        b.media_index[ref] = i
        return i
    if isinstance(ref, dict):
        mid = str(ref.get("id", sid if side == "interior" else f"{sid}_exterior"))
        if mid in b.media_index or mid in b.media_specs:
            raise ConfigError(f"duplicate medium id '{mid}'", b.file, key)
        i = parse_medium(b, mid, ref, key, positions)
        b.media_index[mid] = i
        return i
    raise ConfigError(f"expected a medium id or a medium mapping, got {ref!r}", b.file, key)


def set_media_specs(b, media, file):
    if media is None:
        media = {}
    if not isinstance(media, dict):
        raise ConfigError("expected a mapping id -> medium", file, "media")
    b.media_specs = {str(k): v for k, v in media.items()}


def finish_media(b):
    """Parse the named media that no shape referenced (their parameters still exist)."""
    for mid, spec in b.media_specs.items():
        if mid not in b.media_index:
            b.media_index[mid] = parse_medium(b, mid, spec, f"media.{mid}")


def media_arrays(media):
    """Medium tables for the Storage (padded by the scene)."""
    a = {}
    a["med_type"] = np.array([m.type for m in media] or [0], np.int32)
    a["med_flags"] = np.array([m.flags for m in media] or [0], np.int32)
    a["med_phase"] = np.array([m.phase for m in media] or [0], np.int32)
    a["med_sigma"] = np.array([m.sigma for m in media] or [-1], np.int32)
    a["med_albedo"] = np.array([m.albedo for m in media] or [-1], np.int32)
    a["med_g"] = np.array([m.g for m in media] or [-1], np.int32)
    a["med_scale"] = np.array([m.scale for m in media] or [1.0], np.float32)
    a["med_bmin"] = np.array([m.bbox_min for m in media] or [(-1, -1, -1)], np.float32)
    a["med_bmax"] = np.array([m.bbox_max for m in media] or [(1, 1, 1)], np.float32)
    a["med_fixed_majorant"] = np.array([m.majorant for m in media] or [0.0], np.float32)
    return a


def host_majorant(scene, m):
    """The majorant that the kernels use for medium m (numpy; for checks and docs)."""
    med = scene.desc.media[m]
    sig = scene.params[scene.desc.textures[med.sigma].name]
    mx = float(np.max(sig)) * med.scale
    if med.flags & HOMOGENEOUS:
        return mx
    return max(med.majorant, GRID_MAJORANT_MARGIN * mx)
