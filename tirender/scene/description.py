"""Scene files (YAML or dict) -> a validated, normalised scene description (numpy only).

Generic over the models' schemas (tirender.schema): a BSDF, emitter or medium spec is checked
against the KEYS its model declares (bsdfs/registry.py, emitters/registry.py, media/registry.py);
Texture keys become named pool parameters ``<id>.<param>``; nested BSDFs become child rows. Every
problem raises ConfigError naming the file, the key path and the problem, before any Taichi kernel
runs. The format is documented in docs/scenes.md (its key tables are generated from the schemas).
"""
import os
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import yaml

from .. import mesh_attribute, variants
from ..bsdfs import registry as bsdf_registry
from ..bsdfs.base import Row as BsdfRow
from ..core.math import LUMINANCE
from ..emitters import registry as emitter_registry
from ..emitters.base import COMMON_KEYS, INFINITE, SURFACE
from ..emitters.base import Row as EmitterRow
from ..errors import ConfigError
from ..schema import Child, boolean, family_keys, number, validate, vec3
from ..schema import check_keys as _keys
from ..spectra import sampled as _spectra
from ..textures import TEX_RAW, TEX_VOLUME, WRAP_MODES, bitmap_format
from . import instances, prefetch
from . import shapes as builtin
from . import spectra as scene_spectra
from .curves import CURVES
from .implicit import QUADRICS, is_similarity, quadric_prim
from .mesh_io import box_extent, triangle_areas
from .transforms import parse_transform

MAX_BSDF_NESTING = 4
MAX_COORDINATE = 1e15   # |x| of a vertex after to_world: squares and cross products stay finite in float32


@lru_cache(maxsize=8)
def _family(models, sugar=()):
    """Every key name of a family of models (and the SUGAR keys of its wrappers): validate's "did you mean"
    candidates, computed per registry state (user models join the registries: tirender/plugins.py)."""
    return family_keys(models) | {m.SUGAR for m in sugar}


def _bsdf_keys():
    return _family(bsdf_registry.MODELS, bsdf_registry.SUGAR)


def _emitter_keys():
    return _family(emitter_registry.MODELS)


@dataclass
class Texture:
    """A differentiable texture: a slice (H, W, C) of the parameter pool (or (D, H, W, C) for a
    volume). Constants are 1x1."""
    name: str
    data: np.ndarray           # (H, W, C) float32, linear
    lo: float
    hi: float
    bilinear: bool = True
    wrap: int = 0              # textures.WRAP_MODES: 0 repeat, 1 clamp, 2 mirror
    constant: bool = True      # named parameter shape (C,) rather than (H, W, C)
    to_uv: np.ndarray = None   # (2, 3) affine uv transform (Mitsuba's to_uv), None: identity
    lam: int = -1              # a sampled spectrum's offset in SceneDescription.spectra (-1: RGB; textures.py)
    flags: int = 0             # textures.TEX_VOLUME | TEX_RAW
    to_local: np.ndarray = None   # volumes: (3, 4) world -> unit cube (media/grid.py), None: identity


@dataclass
class Shape:
    id: str
    positions: np.ndarray
    faces: np.ndarray
    normals: np.ndarray
    uvs: np.ndarray
    bsdf: int
    emitter: int = -1
    interior: int = -1         # medium index inside the shape (-1: none), see tirender/media
    exterior: int = -1
    heightfield: dict = None   # type heightfield: W, H, thickness, texture (index), codes, top, to_world
    differentiable: str = ""   # "mesh" / "sphere" (centre, radius) / "curve" / "sdf" (grid values): geometry parameters
    attributes: dict = None    # mesh attributes its BSDF reads ({name: (V or F, C) float32}, tirender/mesh_attribute.py)
    group: str = ""            # a differentiable instance's id: its shapes move as one (scene/instances.py)
    proto: str = ""            # the shapegroup whose geometry this is, in the group's space (placed by instances)
    curve: tuple = None        # bsplinecurve, linearcurve: (curves.Tube / LinearTube, control points (K, 4), world)
    implicit: object = None    # sphere, disk, cylinder, sdfgrid: its scene.implicit.Implicit (faces: its BVH primitives)


MESH_FILES = ("obj", "ply", "serialized")   # shape types read from a mesh file (scene/mesh_io.py)
# reconstruction filters (core/film.py) -> the keys each takes besides "type"
FILTER_KEYS = {"gaussian": {"stddev"}, "box": set(), "tent": {"radius"}}


@dataclass
class Sensor:
    to_world: np.ndarray       # 4x4 camera-to-world (columns left, up, forward, origin)
    width: int
    height: int
    tan_x: float               # tan(fov_x / 2) (orthographic: the half extent 1)
    tan_y: float               # tan_x / aspect
    filter: str = "gaussian"   # FILTER_KEYS
    stddev: float = 0.5        # gaussian
    radius: float = 2.0        # support half-width, pixels: 4·stddev (gaussian), 0.5 (box), tent's radius
    type: str = "perspective"  # the sensor model (tirender/sensors)
    id: str = ""               # its parameters are named <id>.<name> (default id: sensor<index>)
    near_clip: float = 1e-2    # clip planes (Mitsuba's defaults)
    far_clip: float = 1e4
    focus_distance: float = 1e4
    principal_point: tuple = (0.0, 0.0)   # principal_point_offset_x, _y (film units; perspective)
    aperture_radius: float = 0.0          # thinlens
    children: list = None                 # batch: its child Sensors (sensors/batch.py)


@dataclass
class SceneDescription:
    file: str
    base_dir: str
    integrator: dict           # the raw ``integrator:`` mapping (validated by integrators.registry.parse)
    sensors: list
    textures: list
    bsdfs: list                # bsdfs.base.Row
    shapes: list
    emitters: list             # emitters.base.Row
    warnings: list
    media: list = field(default_factory=list)   # tirender.media.spec.Medium
    bsdf_ids: dict = field(default_factory=dict)   # id under ``bsdfs:`` -> row index
    mesh_attributes: list = field(default_factory=list)   # mesh_attribute textures (tirender/mesh_attribute.py)
    spectra: list = field(default_factory=list)    # the spectrum table (textures.py: st.spec_tab)
    placements: list = field(default_factory=list)  # instances: (id, group id, 4x4 to_world) (scene/instances.py)


def _num(v, file, key, lo=-np.inf, hi=np.inf, strict_lo=False, integer=False):
    return number(v, file, key, lo, hi, strict_lo, integer)


def _vec3(v, file, key):
    return vec3(v, file, key)


def load_yaml(path):
    if not os.path.exists(path):
        raise ConfigError("file not found", path)
    if os.path.isdir(path):
        raise ConfigError("is a folder, expected a YAML file", path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except UnicodeDecodeError as e:
        raise ConfigError(f"not a text (UTF-8) file: byte {e.start}", path) from None
    except OSError as e:
        raise ConfigError(f"cannot read ({e.strerror})", path) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        raise ConfigError(f"malformed YAML: {getattr(e, 'problem', None) or e}", path, where)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", path)
    return data


class _Builder:
    def __init__(self, file, base_dir):
        self.file, self.base = file, base_dir
        self.variant = "rgb"       # the variant the scene is checked for (parse_scene sets it)
        self.textures, self.bsdfs, self.shapes, self.emitters = [], [], [], []
        self.bsdf_index = {}
        self.warnings = []
        self.degenerate = []        # (shape key, degenerate triangles skipped)
        self.media, self.media_index, self.media_specs = [], {}, {}
        self.names = set()
        self.mesh_attributes = []   # mesh_attribute texture records (tirender/mesh_attribute.py)
        self.spectra = []          # the spectrum table (N, wavelengths[, values]) of sampled spectra
        self.meshes = {}           # (mesh file, shape_index) -> the mesh read (object space; never modified)

    def path(self, p, key):
        if not isinstance(p, str):
            raise ConfigError(f"expected a file name, got {p!r}", self.file, key)
        full = p if os.path.isabs(p) else os.path.join(self.base, p)
        if not os.path.exists(full):
            raise ConfigError(f"file not found: {full}", self.file, key)
        return full

    def add_texture(self, name, data, lo, hi, bilinear, wrap, constant, key):
        """Register pool parameter `name` with its data; returns the texture index."""
        if name in self.names:
            raise ConfigError(f"duplicate parameter name '{name}' (ids must be unique)", self.file, key)
        self.names.add(name)
        self.textures.append(Texture(name, data, lo, hi, bilinear, wrap, constant))
        return len(self.textures) - 1

    # -- textures -------------------------------------------------------------------------
    def texture(self, spec, name, channels, lo, hi, key, default=None, raw=None, role=None):
        """Number / RGB list / {type: bitmap, ...} / a spectrum mapping -> texture index (a named pool slice).
        raw: bitmaps skip the sRGB curve unless they say otherwise (normal maps); 1-channel maps are raw unless
        they say `srgb: true` or `raw: false` (Mitsuba XML bitmaps always say raw: true/false). role: what a
        spectrum means here (spectra/sampled.py: REFLECTANCE by default, EMISSION, UNBOUNDED)."""
        if spec is None:
            spec = default
        if _spectra.is_spectrum(spec):
            return scene_spectra.texture(self, spec, name, channels, lo, hi, key, role or _spectra.REFLECTANCE, raw)
        if isinstance(spec, dict) and spec.get("type") in ("rawconstant", "volume"):
            return self.texture_plugin(spec, name, channels, lo, hi, key, raw)
        if isinstance(spec, dict):
            if spec.get("type") == "mesh_attribute":
                raise ConfigError("a mesh_attribute texture feeds BSDF slots only", self.file, f"{key}.type")
            _keys(spec, {"type", "filename", "data", "width", "height", "value", "srgb", "raw", "filter",
                         "wrap", "wrap_mode", "filter_type", "to_uv", "color0", "color1", "format"}, self.file, key)
            ttype = spec.get("type", "bitmap")
            if ttype not in ("bitmap", "checkerboard"):
                raise ConfigError(f"unknown texture type '{ttype}' (bitmap, checkerboard, rawconstant, volume)",
                                  self.file, f"{key}.type")
            to_uv = None
            if spec.get("to_uv") is not None:
                m = parse_transform(spec["to_uv"], self.file, f"{key}.to_uv")
                to_uv = np.array([[m[0, 0], m[0, 1], m[0, 3]], [m[1, 0], m[1, 1], m[1, 3]]], np.float32)
            if ttype == "checkerboard":
                # Mitsuba's checkerboard.cpp: color0 where frac(u) > 0.5 == frac(v) > 0.5, else color1 — and
                # the other way round in its eval_1, which scalar parameters (roughness, spec_trans, ...) read —
                # exactly a 2x2 nearest-neighbour bitmap, repeated (the parameter is that bitmap)
                _keys(spec, {"type", "color0", "color1", "to_uv"}, self.file, key)
                c0, c1 = (self.texture_constant(spec.get(k, dv), channels, lo, hi, f"{key}.{k}")
                          for k, dv in (("color0", 0.4), ("color1", 0.2)))
                if channels == 1:
                    c0, c1 = c1, c0
                img = np.stack([np.stack([c0, c1]), np.stack([c1, c0])]).astype(np.float32)
                t = self.add_texture(name, img, lo, hi, False, 0, False, key)
                self.textures[t].to_uv = to_uv
                return t
            if "filename" in spec:
                from ..io.images import load_image
                full = self.path(spec["filename"], f"{key}.filename")
                srgb = spec.get("srgb", None if not spec.get("raw", raw) else False)
                if srgb is None and channels == 1 and "raw" not in spec:
                    srgb = False   # scalar maps default to raw; an explicit `raw: false` decodes them
                img = load_image(full, srgb=srgb if srgb is not None else None)
                stored = load_image(full, srgb=False) if spec.get("format") == "uint8" else None
            elif "data" in spec:
                from ..limits import load_npy
                img = load_npy(self.path(spec["data"], f"{key}.data"), (2, 3), "texture")
            elif "width" in spec and "height" in spec:
                from ..limits import check
                w = _num(spec["width"], self.file, f"{key}.width", 1, 1 << 15, integer=True)
                h = _num(spec["height"], self.file, f"{key}.height", 1, 1 << 15, integer=True)
                check(w * h * channels, f"texture of {w}x{h}x{channels} values", self.file, key)
                val = spec.get("value", default if not isinstance(default, dict) else 0.5)
                v = _vec3(val, self.file, f"{key}.value") if channels == 3 and isinstance(val, list) else \
                    np.array([_num(val, self.file, f"{key}.value")])
                v = v.astype(np.float32)
                img = np.broadcast_to(v if v.size in (1, channels) else v[:1], (h, w, v.size if v.size in (1, channels) else 1))
                img = np.ascontiguousarray(np.broadcast_to(img[..., :1] if img.shape[2] != channels else img,
                                                           (h, w, channels)), np.float32)
            else:
                raise ConfigError("a bitmap texture needs 'filename', 'data' or 'width'+'height'", self.file, key)
            img = np.asarray(img, np.float32)
            if img.ndim == 2:
                img = img[..., None]
            if img.shape[2] == 4 or (img.shape[2] == 2 and "filename" in spec):   # RGBA, YA images: alpha dropped
                img = img[..., :img.shape[2] - 1]                                   # (Mitsuba's bitmap keeps RGB / Y)
            img = bitmap_format(img, spec.get("format", "auto"), self.file, f"{key}.format", self.variant,
                                stored if "filename" in spec else None)
            if img.shape[2] != channels:
                if channels == 1:      # Mitsuba's eval_1 of an RGB bitmap: its luminance (no value in spectral)
                    if self.variant in ("spectral", "spectral_polarized") and not spec.get("raw", raw):
                        raise ConfigError("an RGB bitmap in a scalar slot has no value in the spectral variants "
                                          "(Mitsuba's eval_1 of upsampled texels); give a 1-channel image or raw: true",
                                          self.file, key)
                    img = img @ np.asarray(LUMINANCE, np.float32)[:, None]
                elif img.shape[2] == 1:
                    img = np.repeat(img, 3, axis=2)
                else:
                    raise ConfigError(f"texture has {img.shape[2]} channels, expected {channels}", self.file, key)
            if not np.all(np.isfinite(img)):
                raise ConfigError("texture contains NaN or Inf", self.file, key)
            if img.min() < lo or img.max() > hi:
                raise ConfigError(f"texture values must lie in [{lo:g}, {hi:g}] (found {img.min():g}..{img.max():g})",
                                  self.file, key)
            filt = spec.get("filter", spec.get("filter_type", "bilinear"))
            wrap = spec.get("wrap", spec.get("wrap_mode", "repeat"))
            if filt not in ("bilinear", "nearest"):
                raise ConfigError(f"unknown filter '{filt}' (bilinear, nearest)", self.file, f"{key}.filter")
            if wrap not in WRAP_MODES:
                raise ConfigError(f"unknown wrap mode '{wrap}' ({', '.join(WRAP_MODES)})", self.file, f"{key}.wrap")
            t = self.add_texture(name, np.ascontiguousarray(img), lo, hi, filt == "bilinear", WRAP_MODES[wrap], False,
                                 key)
            self.textures[t].to_uv = to_uv
            return t
        else:
            v = self.texture_constant(spec, channels, lo, hi, key)
            return self.add_texture(name, v.reshape(1, 1, channels), lo, hi, True, 0, True, key)

    def texture_plugin(self, spec, name, channels, lo, hi, key, raw):
        """Mitsuba's ``rawconstant`` ({type: rawconstant, value: v | [x, y, z]}: the value as is, no colour
        processing: no spectral upsampling, flat v at every wavelength; a 3-vector is refused where Mitsuba's
        eval has no meaning for it: scalar slots, colour slots outside rgb) and ``volume`` textures
        (media/spec.py volume_texture) -> texture index. raw: the slot reads data (normal maps), not colour."""
        if spec["type"] == "volume":
            from ..media.spec import volume_texture
            return volume_texture(self, spec, name, channels, lo, hi, key, data_slot=bool(raw))
        _keys(spec, {"type", "value"}, self.file, key)
        if "value" not in spec:
            raise ConfigError("a rawconstant needs a value (a number or 3 numbers)", self.file, key)
        v = spec["value"]
        if isinstance(v, (list, tuple)) and (channels == 1 or (not raw and self.variant != "rgb")):
            raise ConfigError(f"a 3-vector rawconstant has no {'scalar' if channels == 1 else 'spectral'} value "
                              f"(Mitsuba's RawConstantTexture); give one number", self.file, f"{key}.value")
        t = self.add_texture(name, self.texture_constant(v, channels, lo, hi, f"{key}.value").reshape(1, 1, channels),
                             lo, hi, True, 0, True, key)
        self.textures[t].flags |= TEX_RAW
        return t

    def refuse_volumes(self, tids, key):
        """Refuse volume textures where textures are read at uv only (emitters, height fields): BSDF slots read them
        at the shading point's position."""
        if any(t >= 0 and self.textures[t].flags & TEX_VOLUME for t in tids):
            raise ConfigError("a volume texture is read at a position: only BSDF slots take one",
                              self.file, key)

    def texture_constant(self, spec, channels, lo, hi, key):
        """A number / RGB list -> float32 (channels,), range-checked."""
        if channels == 3:
            v = _vec3(spec, self.file, key)
        else:
            v = np.array([_num(spec, self.file, key)])
        if np.any(v < lo) or np.any(v > hi):
            bad = v[(v < lo) | (v > hi)][0]
            raise ConfigError(f"value {bad:g} is out of range [{lo:g}, {hi:g}]", self.file, key)
        return v.astype(np.float32)

    # -- BSDFs ----------------------------------------------------------------------------
    def bsdf(self, bid, spec, key, depth=0):
        """A BSDF mapping -> row index. Keys that a wrapper model declares as SUGAR (``normalmap``,
        ``twosided``) wrap the BSDF in that model; nested BSDFs become child rows."""
        if isinstance(spec, str):
            raise ConfigError(f"expected a BSDF mapping, got '{spec}'", self.file, key)
        if not isinstance(spec, dict):
            raise ConfigError(f"expected a BSDF mapping, got {spec!r}", self.file, key)
        if depth > MAX_BSDF_NESTING:
            raise ConfigError(f"BSDFs nested deeper than {MAX_BSDF_NESTING} levels", self.file, key)
        t = spec.get("type", "diffuse")
        if t not in bsdf_registry.BY_NAME:
            raise ConfigError(f"unknown BSDF type '{t}' (expected one of: {', '.join(bsdf_registry.BY_NAME)})",
                              self.file, f"{key}.type")
        variants.require(f"BSDF '{t}'", getattr(bsdf_registry.BY_NAME[t], "VARIANTS", variants.NAMES), self.file,
                         f"{key}.type", variant=self.variant)
        sugar = [(w, spec[w.SUGAR]) for w in bsdf_registry.SUGAR if w.SUGAR in spec and w.NAME != t]
        spec = {k: v for k, v in spec.items() if k not in {w.SUGAR for w, _ in sugar}}
        wrappers = []
        for w, value in sugar:
            wspec = w.sugar(value, self.file, f"{key}.{w.SUGAR}")
            if wspec is not None:
                wrappers.append((w, wspec))
        depth += len(wrappers)
        idx = self._row(bid, bsdf_registry.BY_NAME[t], spec, key, depth)
        for w, wspec in wrappers:   # innermost first (registry order)
            depth -= 1
            idx = self._row(bid, w, wspec, f"{key}.{w.SUGAR}", depth, children=[idx])
        return idx

    def _row(self, bid, model, spec, key, depth, children=None):
        keys = model.KEYS if children is None else tuple(k for k in model.KEYS if not isinstance(k, Child))
        spec = scene_spectra.colour_constants(self, spec, model, key)
        values = validate({k: v for k, v in spec.items() if k not in ("type", "id")}, keys, self.file, key,
                          family=("BSDF", model.NAME, _bsdf_keys()))
        if hasattr(model, "complete"):   # keys whose default depends on other keys (a model's η from int_ior / ext_ior)
            values = model.complete(values, self.file, key, self.variant)
        row = BsdfRow(bid, model.TAG, model)
        for k in model.KEYS:
            if k.kind == "texture":
                v = values.get(k.name)
                if mesh_attribute.is_spec(v):
                    if k.name in getattr(model, "UV_DERIVATIVE", ()):
                        raise ConfigError(f"{model.NAME} differentiates its '{k.name}' in uv: it cannot be a mesh "
                                          f"attribute", self.file, f"{key}.{k.name}")
                    row.tex.append(mesh_attribute.texture(self, v, k.channels, k.raw, f"{key}.{k.name}"))
                    continue
                row.tex.append(-1 if v is None else self.texture(v, f"{bid}.{k.param}", k.channels, k.lo, k.hi,
                                                                   f"{key}.{k.name}", raw=k.raw))
        if children is None:
            children = []
            for name in getattr(model, "CHILDREN", ()):
                c = values.get(name)
                if c is None:             # an optional child defaults to the previous one
                    children.append(children[-1])
                elif isinstance(c, str):
                    if c not in self.bsdf_index:
                        raise ConfigError(f"unknown BSDF id '{c}' (defined: {', '.join(self.bsdf_index) or 'none'})",
                                          self.file, f"{key}.{name}")
                    children.append(self.bsdf_index[c])
                else:
                    children.append(self.bsdf(f"{bid}.{name}", c, f"{key}.{name}", depth + 1))
        children = list(children)
        while len(children) < len(getattr(model, "CHILDREN", ())):
            children.append(children[-1])   # an optional child defaults to the previous one
        row.children = children
        if children:
            flags = [self.bsdfs[c].flags for c in children]
            if hasattr(model, "check_child"):
                for f in flags:
                    model.check_child(f, self.file, key)
            row.flags = model.combine_flags(flags)
        if hasattr(model, "constants"):
            row.floats = list(model.constants(values, self.file, key))
        if len(row.floats) > bsdf_registry.N_FLOAT:
            raise ConfigError(f"{model.NAME} gives {len(row.floats)} constants, more than its N_CONST declares",
                              self.file, key)
        self.bsdfs.append(row)
        return len(self.bsdfs) - 1

    # -- emitters -------------------------------------------------------------------------
    def emitter(self, spec, key, eid, shape=-1):
        """An emitter mapping -> row index (shape >= 0: attached to that shape)."""
        if not isinstance(spec, dict):
            raise ConfigError(f"expected an emitter mapping, got {spec!r}", self.file, key)
        t = spec.get("type")
        model = emitter_registry.BY_NAME.get(t)
        if model is None:
            raise ConfigError(f"unknown emitter type '{t}' (expected one of: {', '.join(emitter_registry.BY_NAME)})",
                              self.file, f"{key}.type")
        if shape >= 0 and not model.FLAGS & SURFACE:
            raise ConfigError(f"a shape's emitter must be a surface emitter (area), got '{t}'", self.file,
                              f"{key}.type")
        if shape < 0 and model.FLAGS & SURFACE:
            raise ConfigError(f"{t} emitters are attached to shapes (shapes[i].emitter)", self.file, key)
        spec, spectrum = self.emitter_spectrum(spec, model, key)
        values = validate({k: v for k, v in spec.items() if k not in ("type", "id")}, model.KEYS + COMMON_KEYS,
                          self.file, key, family=("emitter", t, _emitter_keys()))
        row = EmitterRow(eid, model.TAG, model, shape)
        row.sampling_weight = values.pop("sampling_weight")
        row.spectrum, row.temperature, row.tint = spectrum
        for i, k in enumerate(k for k in model.KEYS if k.kind == "texture"):
            v = values.get(k.name)     # an optional texture key left out (default None): slot -1
            row.tex.append(-1 if v is None else self.texture(v, f"{eid}.{k.param}", k.channels, k.lo, k.hi,
                                                             f"{key}.{k.name}", raw=k.raw,
                                                             role=_spectra.EMISSION if i == 0 else None))
        if self.variant in ("spectral", "spectral_polarized") and \
                any(t >= 0 and self.textures[t].flags & TEX_RAW for t in row.tex):
            raise ConfigError("a rawconstant emitter value is not available in the spectral variants (emitters "
                              "lift their values as light: use a <spectrum type=\"uniform\">)", self.file, key)
        self.refuse_volumes(row.tex, key)
        if hasattr(model, "build"):
            model.build(self, row, values, key)
        self.emitters.append(row)
        return len(self.emitters) - 1

    def emitter_spectrum(self, spec, model, key):
        """An emitter's light given as a spectrum type in its first texture key (radiance, intensity or
        irradiance), as Mitsuba's ``<spectrum type=...>``:

            {type: blackbody, temperature: K, scale: s}   Planck's law × s (W m⁻² sr⁻¹ nm⁻¹ × s)
            {type: d65, color: rgb, scale: s}             D65 × rgb × s (what an RGB value means already)
            {type: uniform, value: v}                     v at every wavelength (no D65)

        -> (spec with that key replaced by its differentiable factor (s, rgb s or v), (kind, T, tint)).
        A bitmap as a surface emitter's radiance is upsampled without D65 (kind SPECTRUM_UNIFORM: Mitsuba's area
        emitter evaluates the bitmap texture as it is, where an RGB value becomes a D65-scaled ``d65`` texture).
        Any other value is the usual RGB texture (kind SPECTRUM_RGB)."""
        k0 = next((k for k in model.KEYS if k.kind == "texture"), None)
        v = spec.get(k0.name) if k0 is not None else None
        plain = (variants.SPECTRUM_RGB, 0.0, (1.0, 1.0, 1.0))
        sampled = scene_spectra.emitter_kind(self, spec, v, k0, key)
        if sampled is not None:
            return sampled
        if isinstance(v, dict) and v.get("type", "bitmap") == "bitmap" and model.FLAGS & SURFACE:
            return spec, (variants.SPECTRUM_UNIFORM, 0.0, (1.0, 1.0, 1.0))
        if not (isinstance(v, dict) and v.get("type") in ("blackbody", "d65", "uniform")):
            return spec, plain
        where = f"{key}.{k0.name}"
        t = v["type"]
        allowed = {"blackbody": {"type", "temperature", "scale"}, "d65": {"type", "color", "scale"},
                   "uniform": {"type", "value"}}[t]
        _keys(v, allowed, self.file, where)
        if t == "blackbody":
            if "temperature" not in v:
                raise ConfigError("a blackbody needs 'temperature' (kelvin)", self.file, where)
            from ..spectra import blackbody
            temp = _num(v["temperature"], self.file, f"{where}.temperature", blackbody.T_MIN, blackbody.T_MAX)
            factor = _num(v.get("scale", 1.0), self.file, f"{where}.scale", 0.0)
            tint = tuple(float(c) for c in blackbody.srgb(temp))
            kind = (variants.SPECTRUM_BLACKBODY, temp, tint)
        elif t == "d65":
            s = _num(v.get("scale", 1.0), self.file, f"{where}.scale", 0.0)
            c = vec3(v.get("color", 1.0), self.file, f"{where}.color", lo=0.0)
            factor = [s * float(x) for x in c]
            kind = plain
        else:
            factor = _num(v.get("value", 1.0), self.file, f"{where}.value", 0.0)
            kind = (variants.SPECTRUM_UNIFORM, 0.0, (1.0, 1.0, 1.0))
        return dict(spec, **{k0.name: factor}), kind

    # -- shapes ---------------------------------------------------------------------------
    def shape(self, i, spec, geometry=None):
        """Shape i of the scene from its spec: its geometry (:meth:`shape_geometry`, or ``geometry``, what that
        returned for the same spec in a forked reader: scene/prefetch.py), its BSDF, media and emitter."""
        g = geometry if geometry is not None else self.shape_geometry(i, spec)
        sid, key, hf, pos, faces, normals = g["sid"], g["key"], g["hf"], g["pos"], g["faces"], g["normals"]
        if g["n_bad"]:
            self.degenerate.append((key, g["n_bad"]))    # one warning for all shapes: degenerate_warning
        bspec = spec.get("bsdf")
        if bspec is None:
            bi = self.bsdf(sid, {"type": "diffuse"}, f"{key}.bsdf")
        elif isinstance(bspec, str):
            if bspec not in self.bsdf_index:
                raise ConfigError(f"unknown BSDF id '{bspec}' (defined: {', '.join(self.bsdf_index) or 'none'})",
                                  self.file, f"{key}.bsdf")
            bi = self.bsdf_index[bspec]
        else:
            bi = self.bsdf(sid, bspec, f"{key}.bsdf")
        t = spec.get("type")
        kind = {"sphere": "sphere", "sdfgrid": "sdf"}.get(t, "curve" if t in CURVES else "mesh")   # differentiable
        s = Shape(sid, pos, faces, normals, g["uvs"], bi, heightfield=hf, differentiable=kind if g["diff"] else "",
                  curve=g["curve"], implicit=g["implicit"])
        s.attributes = mesh_attribute.bind_shape(self, bi, g["attributes"], sid, key)
        for side in ("interior", "exterior"):
            if spec.get(side) is not None:
                from ..media.spec import medium_ref
                setattr(s, side, medium_ref(self, spec[side], f"{key}.{side}", sid, side, pos))
        self.shapes.append(s)
        if spec.get("emitter") is not None:
            if hf is not None:
                raise ConfigError("a heightfield cannot be an emitter (its triangles move)", self.file,
                                  f"{key}.emitter")
            s.emitter = self.emitter(spec["emitter"], f"{key}.emitter", sid, shape=len(self.shapes) - 1)

    def shape_geometry(self, i, spec):
        """The geometry of shape i (world space; numpy only, no state but the mesh files read, so that a forked
        reader can compute it: scene/prefetch.py): a dict of its id ``sid``, ``key``, ``pos`` (V, 3) float32, ``faces``
        (F, 3) int32 (degenerate triangles skipped), ``normals`` (V, 3) or None, ``uvs``, ``attributes``, ``hf``
        (a heightfield's record), ``curve``, ``implicit``, ``diff`` (differentiable) and ``n_bad`` (triangles
        skipped). ConfigError for a bad spec or file."""
        key = f"shapes[{i}]"
        _keys(spec, {"id", "type", "filename", "to_world", "bsdf", "emitter", "face_normals", "flip_normals",
                     "flip_tex_coords", "resolution", "interior", "exterior", "height", "thickness", "differentiable",
                     "shape_index", "normals"}, self.file, key)
        sid = str(spec.get("id", f"shape{i}"))
        key = f"shapes.{sid}"
        t = spec.get("type")
        for k, types in (("height", ("heightfield",)), ("thickness", ("heightfield",)),
                         ("shape_index", ("serialized",)), ("flip_tex_coords", ("obj", "ply")),
                         ("normals", ("sdfgrid",))):
            if k in spec and t not in types:
                raise ConfigError(f"'{k}' belongs to {' and '.join(types)} shapes (this one is '{t}')", self.file,
                                  f"{key}.{k}")
        hf = None
        # Mitsuba's analytic quadrics, unless a mesh is asked for: a tessellation ('resolution'), or a differentiable
        # disk or cylinder (the geometry gradients move mesh vertices: scene/deform.py; a differentiable sphere
        # stays analytic, its centre and radius parameters: scene/sphere_body.py)
        analytic = t in QUADRICS and "resolution" not in spec and \
            (t == "sphere" or not boolean(spec.get("differentiable", False), self.file, f"{key}.differentiable"))
        if t == "heightfield":
            mesh, hf = self.heightfield(spec, sid, key)
        elif analytic:
            mesh = None
        elif t in builtin.BUILTIN:
            if t in ("sphere", "disk", "cylinder"):
                res = _num(spec.get("resolution", 64), self.file, f"{key}.resolution", 8, 4096, integer=True)
                mesh = builtin.BUILTIN[t](res)
            else:
                mesh = builtin.BUILTIN[t]()
        elif t in MESH_FILES:
            mesh = self.mesh_file(t, spec, key)
        elif t not in CURVES and t != "sdfgrid":
            raise ConfigError(f"unknown shape type '{t}' (expected one of: {', '.join(MESH_FILES)}, "
                              f"{', '.join(builtin.BUILTIN)}, {', '.join(CURVES)}, sdfgrid, shapegroup, instance)",
                              self.file, f"{key}.type")
        m = parse_transform(spec.get("to_world"), self.file, f"{key}.to_world")
        if hf is not None:
            if abs(np.linalg.det(m[:3, :3])) < 1e-30:
                raise ConfigError("to_world is singular", self.file, f"{key}.to_world")
            hf["to_world"] = m
        flip = boolean(spec.get("flip_normals", False), self.file, f"{key}.flip_normals")
        if analytic:
            if abs(np.linalg.det(m[:3, :3])) < 1e-30:
                raise ConfigError("to_world is singular", self.file, f"{key}.to_world")
            if t == "sphere" and not is_similarity(m):
                self.warnings.append(f"{self.file}: {key}: a sphere's to_world scales non-uniformly or shears; as "
                                     f"Mitsuba's, it stays a sphere (radius |to_world·(1, 0, 0)|)")
            mesh = quadric_prim(t, m, flip)
        elif t in CURVES:
            mesh = self.curve(t, spec, m, key)       # to_world moves the control points (not their radii)
        elif t == "sdfgrid":
            mesh = self.sdfgrid(spec, m, key)
        else:
            mesh = builtin.transform_mesh(mesh, m)
        pos = mesh["positions"]
        big = float(np.abs(pos).max()) if pos.size else 0.0
        if not np.isfinite(big):
            nbad = int((~np.isfinite(pos).all(axis=1)).sum())
            raise ConfigError(f"mesh has {nbad} vertices with NaN/Inf coordinates", self.file, key)
        if big > MAX_COORDINATE:
            raise ConfigError(f"vertex coordinates reach {big:.3g}, beyond the supported range ±{MAX_COORDINATE:g} "
                              f"(float32 geometry: squared distances must stay finite)", self.file, key)
        faces = np.asarray(mesh["faces"], np.int64)
        if faces.size and (faces.min() < 0 or faces.max() >= len(pos)):
            raise ConfigError("mesh face index out of range", self.file, key)
        face_normals = boolean(spec.get("face_normals", False), self.file, f"{key}.face_normals")
        if t in MESH_FILES and mesh.get("normals") is None and not face_normals:
            # Mitsuba's rule for mesh files without normals, from the file's winding (transform_mesh flipped a
            # mirroring to_world's: Mitsuba's normals of such a mesh point inwards)
            from .mesh_io import angle_weighted_normals
            mirrored = np.linalg.det(m[:3, :3]) < 0
            mesh["normals"] = angle_weighted_normals(pos, faces) * np.float32(-1 if mirrored else 1)
        bad = ~(triangle_areas(pos, faces) > 1e-14 * max(box_extent(pos), 1e-30) ** 2)
        if hf is not None or t in CURVES or mesh.get("implicit") is not None:
            bad[:] = False       # displaced at bind time (scene/heightfield.py) / moved by control points: kept
        if hf is not None and np.linalg.det(m[:3, :3]) < 0:   # transform_mesh flipped the winding: the codes too
            hf["codes"] = hf["codes"][:, [0, 2, 1]]
        attributes = dict(mesh.get("attributes") or {})
        n_bad = int(bad.sum())
        if n_bad:
            faces = faces[~bad]
            attributes = {n: a[~bad] if n.startswith("face_") else a for n, a in attributes.items()}
        if len(faces) == 0:
            raise ConfigError("mesh has no valid triangles", self.file, key)
        normals = None if face_normals else mesh.get("normals")
        if normals is not None and flip:
            normals = -normals
        if flip and mesh.get("implicit") is None:      # an implicit shape's flip is its record's
            faces = faces[:, [0, 2, 1]]
        diff = t in CURVES or boolean(spec.get("differentiable", False), self.file, f"{key}.differentiable")
        if diff:
            if hf is not None:
                raise ConfigError("a heightfield's geometry is its height texture; 'differentiable' is for meshes",
                                  self.file, f"{key}.differentiable")
            if spec.get("emitter") is not None:
                raise ConfigError("a differentiable shape cannot be an emitter (its triangles move)", self.file,
                                  f"{key}.emitter")
            if not face_normals and mesh.get("implicit") is None:   # area-weighted vertex normals, recomputed
                from .deform import vertex_normals
                normals = vertex_normals(faces, pos.astype(np.float64))[0].astype(np.float32)
        return dict(sid=sid, key=key, pos=pos, faces=faces.astype(np.int32), normals=normals, uvs=mesh.get("uvs"),
                    attributes=attributes, hf=hf, curve=mesh.get("curve"), implicit=mesh.get("implicit"), diff=diff,
                    n_bad=n_bad)

    def curve(self, t, spec, m, key):
        """The tube mesh of a bsplinecurve or linearcurve shape (scene/curves.py) read from its file, placed by
        to_world m."""
        from .curves import MIN_POINTS, curve_mesh, read_curves
        for k in ("flip_normals", "face_normals"):
            if k in spec:
                raise ConfigError(f"'{k}' does not apply to a curve (a tube, normals outwards)", self.file,
                                  f"{key}.{k}")
        path = self.path(spec.get("filename"), f"{key}.filename")
        try:
            curves = read_curves(path, MIN_POINTS[t])
        except ConfigError as e:
            raise ConfigError(f"{e.file}: {e.problem}", self.file, f"{key}.filename") from None
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}", self.file, f"{key}.filename") from None
        return curve_mesh(curves, m, linear=t == "linearcurve")

    def sdfgrid(self, spec, m, key):
        """The voxel primitives of an sdfgrid shape (scene/sdfgrid.py) read from its .vol file, placed by to_world m.
        Not an emitter, no media (as Mitsuba's: no area, no uv); with ``differentiable: true`` its grid values are a
        parameter (scene/sdf_body.py) and every voxel a primitive (the surface may move into any)."""
        from .sdfgrid import NORMALS, read_grid, sdf_mesh
        for k, why in (("flip_normals", "its normals are the SDF's gradient"),
                       ("face_normals", "its normals are the SDF's gradient ('normals: analytic')"),
                       ("emitter", "it has no surface area to sample (as in Mitsuba)"),
                       ("interior", "media bounded by an SDF grid are not supported"),
                       ("exterior", "media bounded by an SDF grid are not supported")):
            if spec.get(k) not in (None, False):
                raise ConfigError(f"'{k}' does not apply to an sdfgrid: {why}", self.file, f"{key}.{k}")
        mode = spec.get("normals", "smooth")
        if mode not in NORMALS:
            raise ConfigError(f"normals must be one of {', '.join(NORMALS)} (got {mode!r})", self.file,
                              f"{key}.normals")
        if abs(np.linalg.det(m[:3, :3])) < 1e-30:
            raise ConfigError("to_world is singular", self.file, f"{key}.to_world")
        path = self.path(spec.get("filename"), f"{key}.filename")
        try:
            if (path, "sdf") not in self.meshes:      # read once however many shapes (instances) use it
                self.meshes[(path, "sdf")] = read_grid(path, self.file, f"{key}.filename")
        except ConfigError as e:
            raise ConfigError(f"{e.file}: {e.problem}" if e.file != self.file else e.problem, self.file,
                              f"{key}.filename") from None
        dense = boolean(spec.get("differentiable", False), self.file, f"{key}.differentiable")
        return sdf_mesh(self.meshes[(path, "sdf")], m, mode == "smooth", self.file, key, dense=dense)

    def mesh_file(self, t, spec, key):
        """The mesh of an obj / ply / serialized shape (scene/mesh_io.py), uvs flipped as Mitsuba's loaders do.
        A problem with the file names the scene file and key too: "scene.yaml: shapes.m.filename: m.ply: ..."."""
        from .mesh_io import load_mesh
        index = _num(spec.get("shape_index", 0), self.file, f"{key}.shape_index", 0, 2 ** 31 - 1, integer=True)
        path = self.path(spec.get("filename"), f"{key}.filename")
        if t != "serialized" and os.path.splitext(path)[1].lower() == ".serialized":
            raise ConfigError(f"a .serialized file is read by type 'serialized', not '{t}'", self.file, f"{key}.type")
        try:
            if (path, index) not in self.meshes:      # read once however many shapes (instances) use it
                self.meshes[(path, index)] = load_mesh(path, shape_index=index)
            mesh = self.meshes[(path, index)]
        except ConfigError as e:
            where = "shape_index" if "shape_index" in str(e.problem) else "filename"
            raise ConfigError(f"{e.file}: {e.problem}", self.file, f"{key}.{where}") from None
        # Mitsuba 3: v = 0 is the top row of a bitmap; OBJ files (OpenGL convention) are flipped
        # on load by default, PLY files are not (obj.cpp / ply.cpp: flip_tex_coords)
        if boolean(spec.get("flip_tex_coords", t == "obj"), self.file, f"{key}.flip_tex_coords") \
                and mesh.get("uvs") is not None:
            uv = np.array(mesh["uvs"], np.float32)
            uv[:, 1] = 1.0 - uv[:, 1]
            mesh = dict(mesh, uvs=uv)
        return mesh

    def heightfield(self, spec, sid, key):
        """The object-space mesh of a heightfield shape (one vertex per triangle corner, heights of the
        nearest texel: the device displaces it exactly, scene/heightfield.py) and its description."""
        from . import heightfield as hfmod
        res = spec.get("resolution", 64)
        res = [res, res] if not isinstance(res, (list, tuple)) else list(res)
        if len(res) != 2:
            raise ConfigError("expected a vertex count or [W, H]", self.file, f"{key}.resolution")
        W, H = (_num(r, self.file, f"{key}.resolution", 2, 4096, integer=True) for r in res)
        from ..limits import check
        check(W * H * 6, f"heightfield of {W}x{H} vertices", self.file, f"{key}.resolution")
        thick = _num(spec.get("thickness", 0.0), self.file, f"{key}.thickness", 0.0, 1e6)
        tid = self.texture(spec.get("height", 0.0), f"{sid}.height", 1, -1e6, 1e6, f"{key}.height")
        self.refuse_volumes([tid], f"{key}.height")
        tex = self.textures[tid]
        tex.wrap = 1              # clamp: the border vertices see the border texels
        codes, top, nobj, uv = hfmod.topology(W, H, thick)
        heights = hfmod.vertex_heights_nearest(tex.data, W, H)
        pos = hfmod.object_positions(codes, W, H, heights, thick).reshape(-1, 3)
        nrm = np.repeat(np.where(top[:, None], np.array([0.0, 0.0, 1.0]), nobj), 3, axis=0)
        mesh = dict(positions=pos.astype(np.float32), faces=np.arange(3 * len(codes), dtype=np.int32).reshape(-1, 3),
                    normals=nrm.astype(np.float32), uvs=uv.reshape(-1, 2))
        return mesh, dict(W=W, H=H, thickness=thick, texture=tid, codes=codes, top=top)


def _sensor(spec, file, key, index=0):
    """A sensor mapping -> Sensor: its film here, the rest by its model (tirender/sensors)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"expected a mapping, got {type(spec).__name__}", file, key)
    film = spec.get("film", {}) or {}
    _keys(film, {"width", "height", "filter", "type", "rfilter"}, file, f"{key}.film")
    w = _num(film.get("width", 256), file, f"{key}.film.width", 1, 16384, integer=True)
    h = _num(film.get("height", 256), file, f"{key}.film.height", 1, 16384, integer=True)
    from ..limits import check
    # film (Σ w L, Σ w: four 64-bit integers), adjoint image and weights, the image read back: ~64 B/pixel
    check(w * h, f"film of {w}x{h} pixels", file, f"{key}.film", copies=16)
    fl = film.get("filter", film.get("rfilter", {"type": "gaussian"}))
    if isinstance(fl, str):
        fl = {"type": fl}
    ftype = fl.get("type", "gaussian")
    if ftype not in FILTER_KEYS:
        raise ConfigError(f"unknown filter '{ftype}' ({', '.join(FILTER_KEYS)})", file, f"{key}.film.filter.type")
    # each type reads its own keys (FILTER_KEYS) and ignores the others', so that overriding only the
    # type (--set sensors.0.film.filter.type=box) keeps a config valid
    _keys(fl, {"type"} | set().union(*FILTER_KEYS.values()), file, f"{key}.film.filter")
    stddev = _num(fl.get("stddev", 0.5), file, f"{key}.film.filter.stddev", 0.0, 4.0, strict_lo=True)
    if ftype == "tent":   # Mitsuba's tent: max(0, 1 - |d|/radius), radius 1 by default
        radius = _num(fl.get("radius", 1.0), file, f"{key}.film.filter.radius", 0.0, 8.0, strict_lo=True)
    else:
        radius = 4.0 * stddev if ftype == "gaussian" else 0.5
    if spec.get("type") == "batch":         # several sensors side by side in this film (sensors/batch.py)
        from ..sensors import batch
        kids = [_sensor(c, file, f"{key}.sensors[{k}]", k)
                for k, c in enumerate(batch.child_specs(spec, w, h, dict(film, filter=fl), file, key))]
        return Sensor(width=w, height=h, filter=ftype, stddev=stddev, radius=radius, type="batch",
                      id=str(spec.get("id", f"sensor{index}")), to_world=kids[0].to_world, tan_x=kids[0].tan_x,
                      tan_y=kids[0].tan_y, children=kids)
    from ..sensors import registry as sensors
    fields = sensors.parse(spec, w, h, file, key)
    return Sensor(width=w, height=h, filter=ftype, stddev=stddev, radius=radius,
                  id=str(spec.get("id", f"sensor{index}")), **fields)


def degenerate_warning(file, skipped, n_shapes, listed=4):
    """One warning line for the degenerate (zero-area) triangles skipped in the shapes `skipped` [(key,
    count)] of a scene of n_shapes shapes (a scene of 439 bricks prints one line, not 205)."""
    where = file or "<dict>"
    if len(skipped) == 1:
        key, n = skipped[0]
        return f"{where}: {key}: skipped {n:,} degenerate (zero-area) triangles"
    total = sum(n for _, n in skipped)
    first = ", ".join(f"{k}: {n:,}" for k, n in skipped[:listed]) + (", ..." if len(skipped) > listed else "")
    return (f"{where}: {n_shapes:,} shapes: {total:,} degenerate (zero-area) triangles skipped, in "
            f"{len(skipped):,} of them ({first})")


def parse_scene(spec, file=None, base_dir=None, variant=None, meanwhile=None):
    """Scene mapping (already loaded YAML) -> SceneDescription (the ``integrator:`` section is kept
    raw; tirender.integrators.registry.parse validates it). ``meanwhile``: work for this process (e.g. compiling
    kernels) while a forked child reads a large scene's mesh files (scene/prefetch.py); it is run only then."""
    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(file)) if file else os.getcwd()
    _keys(spec, {"integrator", "sensor", "sensors", "bsdfs", "emitters", "shapes", "textures", "media"}, file, "")
    integ = spec.get("integrator", {}) or {}
    if not isinstance(integ, dict):
        raise ConfigError(f"expected a mapping, got {integ!r}", file, "integrator")
    b = _Builder(file, base_dir)
    b.variant = variant or variants.name()
    if spec.get("media") is not None:
        from ..media.spec import set_media_specs
        set_media_specs(b, spec["media"], file)
    sens = spec.get("sensors", [spec["sensor"]] if "sensor" in spec else [{}])
    if not isinstance(sens, list) or not sens:
        raise ConfigError("expected a non-empty list of sensors", file, "sensors")
    sensors = [_sensor(s or {}, file, f"sensors[{i}]", i) for i, s in enumerate(sens)]
    every = [(f"sensors[{i}]", s) for i, s in enumerate(sensors)] + [
        (f"sensors[{i}].sensors[{k}]", c) for i, s in enumerate(sensors) for k, c in enumerate(s.children or [])]
    for i, (where, s) in enumerate(every):
        if s.id in [t.id for _, t in every[:i]]:
            raise ConfigError(f"duplicate sensor id '{s.id}'", file, f"{where}.id")
    bsdfs = spec.get("bsdfs", {}) or {}
    if not isinstance(bsdfs, dict):
        raise ConfigError("expected a mapping id -> BSDF", file, "bsdfs")
    shapes = spec.get("shapes", []) or []
    if not isinstance(shapes, list):
        raise ConfigError("expected a list of shapes", file, "shapes")
    shapes, bsdfs, placements = instances.expand(shapes, bsdfs, file)    # shapegroups and instances
    for bid, bs in bsdfs.items():
        b.bsdf_index[str(bid)] = b.bsdf(str(bid), bs if bs is not None else {}, f"bsdfs.{bid}")
    tags = [(s.pop(instances.GROUP, ""), s.pop(instances.PROTO, "")) if isinstance(s, dict) else None
            for _, s in shapes]       # s: expand's own copy where it holds these keys
    # a large scene's mesh files, read by a forked child while this process runs `meanwhile`
    files = prefetch.mesh_geometries(b, {j: (i, s) for j, (i, s) in enumerate(shapes) if isinstance(s, dict) and
                                         s.get("type") in MESH_FILES}, meanwhile)
    ids = set()
    for j, (i, s) in enumerate(shapes):
        if not isinstance(s, dict):
            raise ConfigError("expected a mapping", file, f"shapes[{i}]")
        group, proto = tags[j]
        sid = str(s.get("id", f"shape{i}"))
        if sid in ids:
            raise ConfigError(f"duplicate shape id '{sid}'", file, f"shapes[{i}].id")
        ids.add(sid)
        b.shape(i, s, files.get(j))
        b.shapes[-1].group = group
        b.shapes[-1].proto = proto
    if b.degenerate:
        b.warnings.append(degenerate_warning(file, b.degenerate, len(b.shapes)))
    if b.media_specs:
        from ..media.spec import finish_media
        finish_media(b)
    ems = spec.get("emitters", []) or []
    if not isinstance(ems, list):
        raise ConfigError("expected a list of emitters", file, "emitters")
    for i, e in enumerate(ems):
        if not isinstance(e, dict):
            raise ConfigError("expected a mapping", file, f"emitters[{i}]")
        eid = str(e.get("id", f"emitter{i}"))
        b.emitter(e, f"emitters.{eid}", eid)
    if sum(1 for e in b.emitters if e.flags & INFINITE) > 1:
        raise ConfigError("at most one environment emitter (constant or envmap) per scene", file, "emitters")
    if not b.shapes and not b.emitters:
        raise ConfigError("the scene has no shapes and no emitters", file, "")
    return SceneDescription(file, base_dir, dict(integ), sensors, b.textures, b.bsdfs, b.shapes, b.emitters,
                            b.warnings, b.media, dict(b.bsdf_index), b.mesh_attributes, spectra=list(b.spectra),
                            placements=placements)
