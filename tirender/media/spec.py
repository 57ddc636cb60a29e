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
                                            # bounding box of the first shape using it (a density
                                            # grid with to_world / use_grid_bbox places itself, below)
        majorant: 8.0                       # optional fixed majorant (a lower bound: the
                                            # renderer uses max(majorant, 1.1 * max sigma_t))
        phase: {type: hg, g: 0.3}           # isotropic (default) | hg
    shapes:
      - {type: cube, bsdf: {type: null}, interior: smoke}
      - {type: sphere, bsdf: {type: dielectric}, interior: {type: homogeneous,
         sigma_t: [1, 2, 4], albedo: 0.9, scale: 1.0}}    # inline media take the shape's id

Grid specs also take Mitsuba's ``gridvolume`` properties (src/volumes/grid.cpp): ``to_world`` (a transform:
the grid spans to_world([0, 1]^3), looked up at to_world⁻¹ p), ``use_grid_bbox`` (the .vol's bbox,
transformed by to_world, instead of the unit cube), ``filter_type`` (trilinear | nearest), ``wrap_mode``
(clamp | repeat | mirror) and ``raw``; ``{type: const, value: v, to_world: ...}`` is Mitsuba's
``constvolume``. A heterogeneous medium whose density grid says to_world or use_grid_bbox is clipped to
the grid's world box (the bounding box of its image, Mitsuba's ``Volume::bbox``), as Mitsuba's
``intersect_aabb``; its albedo grid is looked up through its own placement (or the medium's box).

Parameters (pool slices): ``<id>.sigma_t`` (homogeneous, RGB (3,)), ``<id>.density``
(grid, (D, H, W, C)), ``<id>.albedo`` (RGB (3,) or a grid), ``<id>.g`` (HG only, (1,)).
"""
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..schema import boolean, family_keys, number, validate
from ..spectra.sampled import is_spectrum
from ..textures import CLAMP, TEX_VOLUME, WRAP_MODES
from . import GRID_MAJORANT_MARGIN, HOMOGENEOUS
from .phase import BY_NAME as PHASES
from . import registry

GRID_KEYS = {"type", "filename", "data", "resolution", "value", "to_world", "use_grid_bbox", "filter_type",
             "wrap_mode", "raw"}
CONST_KEYS = {"type", "value", "to_world"}
_CORNERS = np.array([[i & 1, (i >> 1) & 1, (i >> 2) & 1] for i in range(8)], np.float64)


@dataclass
class Grid:
    """A loaded grid spec: data (D, H, W, C) float32; bbox: the .vol header's (lo, hi) or None; to_local:
    world -> unit cube (3, 4) when the spec places itself (to_world / use_grid_bbox), else None (the medium's
    box); box: its world box (lo, hi) then; bilinear, wrap (textures.WRAP_MODES), raw: Mitsuba's filter_type,
    wrap_mode, raw."""
    data: np.ndarray
    bbox: tuple = None
    to_local: np.ndarray = None
    box: tuple = None
    bilinear: bool = True
    wrap: int = CLAMP
    raw: bool = False


def _box_to_local(lo, hi):
    """The map (4x4, float64) of an axis-aligned box onto the unit cube."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    m = np.eye(4)
    m[:3, :3] = np.diag(1.0 / (hi - lo))
    m[:3, 3] = -lo / (hi - lo)
    return m


def _placement(b, spec, key, file_bbox):
    """(to_local (3, 4), world box (lo, hi)) of a grid spec with ``to_world`` / ``use_grid_bbox`` (Mitsuba's
    Volume: to_local = to_world⁻¹, preceded by VolumeGrid::bbox_transform with use_grid_bbox; bbox = the image of
    the unit cube), or (None, None) without either."""
    use_bbox = boolean(spec.get("use_grid_bbox", False), b.file, f"{key}.use_grid_bbox")
    if spec.get("to_world") is None and not use_bbox:
        return None, None
    from ..scene.transforms import parse_transform
    to_world = parse_transform(spec.get("to_world"), b.file, f"{key}.to_world")
    if abs(np.linalg.det(to_world[:3, :3])) < 1e-30:
        raise ConfigError("to_world is singular", b.file, f"{key}.to_world")
    to_local = np.linalg.inv(to_world)
    if use_bbox:
        if file_bbox is None:
            raise ConfigError("use_grid_bbox needs a .vol file (its header holds the bbox)", b.file,
                              f"{key}.use_grid_bbox")
        lo, hi = (np.asarray(x, np.float64) for x in file_bbox)
        if np.any(hi <= lo):
            raise ConfigError(f"the .vol bbox {lo.tolist()} .. {hi.tolist()} is empty", b.file, f"{key}.use_grid_bbox")
        to_local = _box_to_local(lo, hi) @ to_local
    corners = (np.linalg.inv(to_local) @ np.c_[_CORNERS, np.ones(8)].T).T[:, :3]
    return to_local[:3].astype(np.float32), (corners.min(0), corners.max(0))


def _filter_wrap(b, spec, key):
    """(bilinear, wrap mode, raw) of a grid spec (Mitsuba's gridvolume filter_type, wrap_mode, raw)."""
    filt = spec.get("filter_type", "trilinear")
    if filt not in ("trilinear", "nearest"):
        raise ConfigError(f"unknown filter_type {filt!r} (trilinear, nearest)", b.file, f"{key}.filter_type")
    wrap = spec.get("wrap_mode", "clamp")
    if wrap not in WRAP_MODES:
        raise ConfigError(f"unknown wrap_mode {wrap!r} ({', '.join(WRAP_MODES)})", b.file, f"{key}.wrap_mode")
    raw = boolean(spec.get("raw", False), b.file, f"{key}.raw")
    return filt == "trilinear", WRAP_MODES[wrap], raw


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
    """Grid spec -> Grid (data (D, H, W, C) float32, the .vol bbox, placement, filter, wrap mode)."""
    if not isinstance(spec, dict):
        if channels == 3 and isinstance(spec, (list, tuple)):
            v = np.asarray(spec, np.float32).reshape(1, 1, 1, -1)
        else:
            v = np.full((1, 1, 1, 1), number(spec, b.file, key), np.float32)
        return Grid(v)
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
    bilinear, wrap, raw = _filter_wrap(b, spec, key)
    to_local, box = _placement(b, spec, key, bbox)
    return Grid(np.ascontiguousarray(data, np.float32), bbox, to_local, box, bilinear, wrap, raw)


def _const_volume(b, spec, key):
    """{type: const, value, to_world} (Mitsuba's constvolume) -> (value, world box or None)."""
    unknown = set(spec) - CONST_KEYS
    if unknown:
        k = sorted(unknown)[0]
        raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(sorted(CONST_KEYS))})", b.file,
                          f"{key}.{k}")
    _, box = _placement(b, {"to_world": spec.get("to_world", [])}, key, None)
    return spec.get("value", 1.0), box


def _add_grid(b, g, name, lo, hi, key, spectrum=True):
    """Register a loaded Grid as pool parameter `name` (a volume texture); returns its index. spectrum: the
    grid is read as a colour (Mitsuba's Volume::eval), not as data (eval_3)."""
    if g.data.min() < lo or g.data.max() > hi:
        raise ConfigError(f"grid values must lie in [{lo:g}, {hi:g}] (found {g.data.min():g}..{g.data.max():g})",
                          b.file, key)
    if spectrum and g.raw and g.data.shape[3] == 3 and b.variant in ("spectral", "spectral_polarized"):
        # Mitsuba's GridVolume::eval: a 3-channel raw grid has no spectrum
        raise ConfigError("a 3-channel raw grid cannot be read as a spectrum in the spectral variants", b.file,
                          f"{key}.raw")
    t = b.add_texture(name, g.data, lo, hi, g.bilinear, g.wrap, False, key)
    tex = b.textures[t]
    tex.flags |= TEX_VOLUME
    tex.to_local = g.to_local
    return t


def volume_texture(b, spec, name, channels, lo, hi, key, data_slot=False):
    """{type: volume, volume: <grid spec | {type: const, ...} | number | RGB>} (Mitsuba's ``volume`` texture,
    src/textures/volume.cpp: the volume read at the shading point's world position through its to_world; default
    0.75) -> texture index. A grid without to_world spans the unit cube (Mitsuba's default). In a 1-channel slot a
    3-channel grid is read as its luminance (Mitsuba's eval_1; refused in the spectral variants unless raw, as
    Mitsuba's); data_slot: read as data (normal maps: eval_3), else as a colour. Differentiable: the voxels."""
    unknown = set(spec) - {"type", "volume"}
    if unknown:
        k = sorted(unknown)[0]
        raise ConfigError(f"unknown key '{k}' (expected one of: type, volume)", b.file, f"{key}.{k}")
    v = spec.get("volume", 0.75)
    where = f"{key}.volume"
    if isinstance(v, dict) and v.get("type") == "const":
        v, _ = _const_volume(b, v, where)
    if not isinstance(v, dict):
        return b.texture(v, name, channels, lo, hi, where)
    g = _load_grid(b, v, where, 3)
    if channels == 1 and g.data.shape[3] == 3:
        if b.variant in ("spectral", "spectral_polarized") and not g.raw:
            raise ConfigError("a 3-channel grid in a scalar slot has no value in the spectral variants (Mitsuba's "
                              "eval_1 of an upsampled grid); give a 1-channel grid or raw: true", b.file, where)
        from ..core.math import LUMINANCE
        g.data = np.ascontiguousarray(g.data @ np.asarray(LUMINANCE, np.float32)[:, None], np.float32)
    if g.to_local is None:
        g.to_local = np.eye(3, 4, dtype=np.float32)
    return _add_grid(b, g, name, lo, hi, where, spectrum=channels == 3 and not data_slot)


def _volume(b, k, spec, name, key):
    """Volume key k's value -> (texture index, bbox of a .vol file or None, world box of a self-placed volume or
    None). A spectrum mapping (spectra/sampled.py), given directly or as a constvolume's value, is a constant of the
    variant's meaning (Mitsuba's get_volume: bounded, D65-weighted in rgb; a sampled spectrum in the spectral
    variants)."""
    if isinstance(spec, dict) and spec.get("type") == "const":
        value, box = _const_volume(b, spec, key)
        return b.texture(value, name, k.channels, k.lo, k.hi, f"{key}.value"), None, box
    if isinstance(spec, dict) and not is_spectrum(spec):
        g = _load_grid(b, spec, key, k.channels)
        return _add_grid(b, g, name, k.lo, k.hi, key), g.bbox, g.box
    return b.texture(spec, name, k.channels, k.lo, k.hi, key), None, None


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
            b.refuse_volumes([tex], f"{key}.{k.name}")
    return model.TAG, tex


def parse_medium(b, mid, spec, key, shape_positions=None):
    """Parse one medium spec into b.media (generic over the models' KEYS); returns its index."""
    if not isinstance(spec, dict):
        raise ConfigError(f"expected a medium mapping, got {spec!r}", b.file, key)
    t = spec.get("type", "homogeneous")
    if t not in registry.BY_NAME:
        raise ConfigError(f"unknown medium type '{t}' (expected one of: {', '.join(registry.BY_NAME)})", b.file,
                          f"{key}.type")
    model = registry.BY_NAME[t]
    values = validate({k: v for k, v in spec.items() if k not in ("type", "id")}, model.KEYS, b.file, key,
                      family=("medium", t, family_keys(registry.MEDIA)))
    tex, bbox_file, boxes = {}, None, {}
    for k in model.KEYS:
        if k.kind == "volume":
            tex[k.name], bb, boxes[k.name] = _volume(b, k, values[k.name], f"{mid}.{k.param}", f"{key}.{k.name}")
            bbox_file = bbox_file or bb
    if values.get("has_spectral_extinction") is False:
        sig = b.textures[tex[model.SIGMA]]
        if sig.lam >= 0 or (sig.data.shape[-1] > 1 and np.ptp(sig.data, axis=-1).max() > 0.0):
            raise ConfigError("has_spectral_extinction = false needs a grey σt (Mitsuba's achromatic estimator is "
                              "biased otherwise; tirender's is exact: leave it true)", b.file,
                              f"{key}.has_spectral_extinction")
    phase, g = _phase(b, mid, values["phase"], f"{key}.phase")
    m = Medium(mid, model.TAG, model.FLAGS, tex[model.SIGMA], tex["albedo"], g=g, phase=phase,
               scale=values["scale"])
    if not model.FLAGS & HOMOGENEOUS:
        if boxes[model.SIGMA] is not None:        # the density grid placed itself (Mitsuba: sigma_t's bbox clips)
            if values.get("bbox") is not None:
                raise ConfigError(f"give either bbox or the {model.SIGMA} grid's to_world / use_grid_bbox", b.file,
                                  f"{key}.bbox")
            lo, hi = boxes[model.SIGMA]
        elif values.get("bbox") is not None:
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
        for t in tex.values():     # grids without a placement of their own span the medium's box
            if b.textures[t].flags & TEX_VOLUME and b.textures[t].to_local is None:
                b.textures[t].to_local = _box_to_local(lo, hi)[:3].astype(np.float32)
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
