"""Scene files (YAML or dict) -> a validated, normalised scene description (numpy only).

Every problem raises ConfigError naming the file, the key path and the problem, before any
Taichi kernel runs. The format is documented in docs/scenes.md.
"""
import os
from dataclasses import dataclass, field

import numpy as np
import yaml

from .. import bsdfs as B
from ..errors import ConfigError
from . import shapes as builtin
from .transforms import parse_transform

# texture slots of a BSDF (index into Bsdf.tex)
SLOT_REFLECTANCE, SLOT_SPECULAR, SLOT_ROUGHNESS, SLOT_TRANSMITTANCE, SLOT_NORMALMAP = range(5)
N_SLOTS = 5

CONDUCTORS = {  # RGB complex IOR (eta, k), Mitsuba 3 rgb-mode values
    "Au": ((0.143, 0.374, 1.442), (3.983, 2.385, 1.603)),
    "Ag": ((0.155, 0.117, 0.138), (4.828, 3.122, 2.147)),
    "Cu": ((0.200, 0.924, 1.102), (3.912, 2.452, 2.142)),
    "Al": ((1.657, 0.880, 0.521), (9.224, 6.270, 4.837)),
}
IORS = {"vacuum": 1.0, "air": 1.000277, "water": 1.3330, "bk7": 1.5046, "glass": 1.5046,
        "polypropylene": 1.49, "acrylic glass": 1.49, "diamond": 2.419}

EMITTER_TYPES = ("point", "directional", "constant", "envmap")
EM_AREA, EM_POINT, EM_DIRECTIONAL, EM_CONSTANT, EM_ENVMAP = range(5)


@dataclass
class Texture:
    """A differentiable texture: a slice (H, W, C) of the parameter pool. Constants are 1x1."""
    name: str
    data: np.ndarray           # (H, W, C) float32, linear
    lo: float
    hi: float
    bilinear: bool = True
    wrap: int = 0              # 0 repeat, 1 clamp
    constant: bool = True      # named parameter shape (C,) rather than (H, W, C)


@dataclass
class Bsdf:
    id: str
    type: int
    tex: list = field(default_factory=lambda: [-1] * N_SLOTS)   # texture index per slot
    eta: float = 1.5
    cond_eta: tuple = (0.0, 0.0, 0.0)
    cond_k: tuple = (0.0, 0.0, 0.0)
    cond_none: int = 1
    twosided: bool = False


@dataclass
class Emitter:
    id: str
    type: int
    tex: int = -1              # radiance texture
    shape: int = -1            # area emitter: index of its shape
    position: tuple = (0.0, 0.0, 0.0)
    direction: tuple = (0.0, 0.0, -1.0)
    to_world: np.ndarray = None


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


@dataclass
class Sensor:
    to_world: np.ndarray       # 4x4 camera-to-world (columns left, up, forward, origin)
    width: int
    height: int
    tan_x: float               # tan(fov_x / 2)
    tan_y: float
    filter: str = "gaussian"
    stddev: float = 0.5
    radius: float = 2.0


@dataclass
class SceneDescription:
    file: str
    base_dir: str
    integrator: dict
    sensors: list
    textures: list
    bsdfs: list
    shapes: list
    emitters: list
    warnings: list
    media: list = field(default_factory=list)   # tirender.media.spec.Medium


def _keys(d, allowed, file, where):
    if not isinstance(d, dict):
        raise ConfigError(f"expected a mapping, got {type(d).__name__}", file, where)
    for k in d:
        if k not in allowed:
            raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(sorted(allowed))})", file,
                              f"{where}.{k}" if where else k)


def _num(v, file, key, lo=-np.inf, hi=np.inf, strict_lo=False, integer=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"expected a number, got {v!r}", file, key)
    if not np.isfinite(v):
        raise ConfigError("value is not finite", file, key)
    if (v <= lo if strict_lo else v < lo) or v > hi:
        cmp = ">" if strict_lo else ">="
        raise ConfigError(f"must be {cmp} {lo:g}" + (f" and <= {hi:g}" if hi < np.inf else "") + f", got {v}",
                          file, key)
    if integer and int(v) != v:
        raise ConfigError(f"expected an integer, got {v}", file, key)
    return int(v) if integer else float(v)


def _vec3(v, file, key):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = [v, v, v]
    a = np.asarray(v, dtype=float) if isinstance(v, (list, tuple)) else None
    if a is None or a.shape != (3,):
        raise ConfigError(f"expected 3 numbers, got {v!r}", file, key)
    if not np.all(np.isfinite(a)):
        raise ConfigError("value is not finite", file, key)
    return a


def load_yaml(path):
    if not os.path.exists(path):
        raise ConfigError("file not found", path)
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
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
        self.textures, self.bsdfs, self.shapes, self.emitters = [], [], [], []
        self.bsdf_index = {}
        self.warnings = []
        self.media, self.media_index, self.media_specs = [], {}, {}
        self.names = set()

    def path(self, p, key):
        if not isinstance(p, str):
            raise ConfigError(f"expected a file name, got {p!r}", self.file, key)
        full = p if os.path.isabs(p) else os.path.join(self.base, p)
        if not os.path.exists(full):
            raise ConfigError(f"file not found: {full}", self.file, key)
        return full

    # -- textures -------------------------------------------------------------------------
    def texture(self, spec, name, channels, lo, hi, key, default=None, srgb_default=True):
        """Number / RGB list / {type: bitmap, ...} -> texture index (a named pool slice)."""
        if spec is None:
            spec = default
        if isinstance(spec, dict):
            _keys(spec, {"type", "filename", "data", "width", "height", "value", "srgb", "raw", "filter",
                         "wrap", "wrap_mode", "filter_type"}, self.file, key)
            if spec.get("type", "bitmap") != "bitmap":
                raise ConfigError(f"unknown texture type '{spec.get('type')}' (bitmap)", self.file, f"{key}.type")
            if "filename" in spec:
                from ..io.images import load_image
                full = self.path(spec["filename"], f"{key}.filename")
                srgb = spec.get("srgb", None if not spec.get("raw") else False)
                if srgb is None and channels == 1:
                    srgb = False
                img = load_image(full, srgb=srgb if srgb is not None else None)
            elif "data" in spec:
                full = self.path(spec["data"], f"{key}.data")
                try:
                    img = np.load(full).astype(np.float32)
                except Exception as e:
                    raise ConfigError(f"cannot read array: {e}", full)
            elif "width" in spec and "height" in spec:
                w = _num(spec["width"], self.file, f"{key}.width", 1, 1 << 15, integer=True)
                h = _num(spec["height"], self.file, f"{key}.height", 1, 1 << 15, integer=True)
                val = spec.get("value", default if not isinstance(default, dict) else 0.5)
                v = np.atleast_1d(np.asarray(val, np.float32))
                img = np.broadcast_to(v if v.size in (1, channels) else v[:1], (h, w, v.size if v.size in (1, channels) else 1))
                img = np.ascontiguousarray(np.broadcast_to(img[..., :1] if img.shape[2] != channels else img,
                                                           (h, w, channels)), np.float32)
            else:
                raise ConfigError("a bitmap texture needs 'filename', 'data' or 'width'+'height'", self.file, key)
            img = np.asarray(img, np.float32)
            if img.ndim == 2:
                img = img[..., None]
            if img.shape[2] == 4:
                img = img[..., :3]
            if img.shape[2] != channels:
                if channels == 1:
                    img = img.mean(axis=2, keepdims=True)
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
            if wrap not in ("repeat", "clamp"):
                raise ConfigError(f"unknown wrap mode '{wrap}' (repeat, clamp)", self.file, f"{key}.wrap")
            tex = Texture(name, np.ascontiguousarray(img), lo, hi, filt == "bilinear", 0 if wrap == "repeat" else 1,
                          constant=False)
        else:
            if channels == 3:
                v = _vec3(spec, self.file, key)
            else:
                v = np.array([_num(spec, self.file, key)])
            if np.any(v < lo) or np.any(v > hi):
                bad = v[(v < lo) | (v > hi)][0]
                raise ConfigError(f"value {bad:g} is out of range [{lo:g}, {hi:g}]", self.file, key)
            tex = Texture(name, v.astype(np.float32).reshape(1, 1, channels), lo, hi, True, 0, constant=True)
        if name in self.names:
            raise ConfigError(f"duplicate parameter name '{name}' (ids must be unique)", self.file, key)
        self.names.add(name)
        self.textures.append(tex)
        return len(self.textures) - 1

    # -- BSDFs ----------------------------------------------------------------------------
    def bsdf(self, bid, spec, key):
        if isinstance(spec, str):
            raise ConfigError(f"expected a BSDF mapping, got '{spec}'", self.file, key)
        _keys(spec, {"type", "reflectance", "diffuse_reflectance", "specular_reflectance", "specular_transmittance",
                     "alpha", "roughness", "distribution", "material", "eta", "k", "int_ior", "ext_ior",
                     "twosided", "normalmap", "nonlinear", "id"}, self.file, key)
        t = spec.get("type", "diffuse")
        if t not in B.TYPE_NAMES:
            raise ConfigError(f"unknown BSDF type '{t}' (expected one of: {', '.join(B.TYPE_NAMES)})", self.file,
                              f"{key}.type")
        tag = B.TYPE_NAMES[t]
        b = Bsdf(bid, tag, twosided=bool(spec.get("twosided", False)))
        allowed = {
            B.DIFFUSE: {"reflectance"},
            B.SMOOTH_CONDUCTOR: {"specular_reflectance", "material", "eta", "k"},
            B.ROUGH_CONDUCTOR: {"specular_reflectance", "material", "eta", "k", "alpha", "roughness", "distribution"},
            B.SMOOTH_DIELECTRIC: {"specular_reflectance", "specular_transmittance", "int_ior", "ext_ior"},
            B.ROUGH_DIELECTRIC: {"specular_reflectance", "specular_transmittance", "int_ior", "ext_ior", "alpha",
                                 "roughness", "distribution"},
            B.ROUGH_PLASTIC: {"diffuse_reflectance", "specular_reflectance", "int_ior", "ext_ior", "alpha",
                              "roughness", "distribution", "nonlinear"},
            B.NULL: set(),
        }[tag] | {"type", "twosided", "normalmap", "id"}
        for k in spec:
            if k not in allowed:
                raise ConfigError(f"key '{k}' does not apply to a '{t}' BSDF", self.file, f"{key}.{k}")
        if spec.get("distribution", "ggx") != "ggx":
            raise ConfigError("only the 'ggx' microfacet distribution is supported", self.file, f"{key}.distribution")
        if tag == B.DIFFUSE:
            b.tex[SLOT_REFLECTANCE] = self.texture(spec.get("reflectance"), f"{bid}.reflectance", 3, 0.0, 1.0,
                                                   f"{key}.reflectance", 0.5)
        if tag == B.ROUGH_PLASTIC:
            b.tex[SLOT_REFLECTANCE] = self.texture(spec.get("diffuse_reflectance"), f"{bid}.diffuse_reflectance",
                                                   3, 0.0, 1.0, f"{key}.diffuse_reflectance", 0.5)
        if tag in (B.SMOOTH_CONDUCTOR, B.ROUGH_CONDUCTOR, B.SMOOTH_DIELECTRIC, B.ROUGH_DIELECTRIC, B.ROUGH_PLASTIC):
            b.tex[SLOT_SPECULAR] = self.texture(spec.get("specular_reflectance"), f"{bid}.specular_reflectance", 3,
                                                0.0, 1e3 if tag in (B.SMOOTH_CONDUCTOR, B.ROUGH_CONDUCTOR) else 1.0,
                                                f"{key}.specular_reflectance", 1.0)
        if tag in (B.SMOOTH_DIELECTRIC, B.ROUGH_DIELECTRIC):
            b.tex[SLOT_TRANSMITTANCE] = self.texture(spec.get("specular_transmittance"),
                                                     f"{bid}.specular_transmittance", 3, 0.0, 1.0,
                                                     f"{key}.specular_transmittance", 1.0)
        if tag in (B.ROUGH_CONDUCTOR, B.ROUGH_DIELECTRIC, B.ROUGH_PLASTIC):
            rk = "roughness" if "roughness" in spec else "alpha"
            rspec = spec.get(rk, 0.1)
            if not isinstance(rspec, dict):
                r = _num(rspec, self.file, f"{key}.{rk}")
                if r <= 0:
                    raise ConfigError(f"roughness must be > 0, got {r}", self.file, f"{key}.{rk}")
            b.tex[SLOT_ROUGHNESS] = self.texture(rspec, f"{bid}.roughness", 1, 1e-3, 4.0, f"{key}.{rk}")
        if tag in (B.SMOOTH_CONDUCTOR, B.ROUGH_CONDUCTOR):
            mat = spec.get("material", "none")
            if "eta" in spec or "k" in spec:
                b.cond_eta = tuple(_vec3(spec.get("eta", 0.0), self.file, f"{key}.eta"))
                b.cond_k = tuple(_vec3(spec.get("k", 0.0), self.file, f"{key}.k"))
                if min(b.cond_eta) <= 0 or min(b.cond_k) < 0:
                    raise ConfigError("conductor eta must be > 0 and k >= 0", self.file, f"{key}.eta")
                b.cond_none = 0
            elif mat == "none":
                b.cond_none = 1
            elif mat in CONDUCTORS:
                b.cond_eta, b.cond_k = CONDUCTORS[mat]
                b.cond_none = 0
            else:
                raise ConfigError(f"unknown conductor material '{mat}' (none, {', '.join(CONDUCTORS)})", self.file,
                                  f"{key}.material")
        if tag in (B.SMOOTH_DIELECTRIC, B.ROUGH_DIELECTRIC, B.ROUGH_PLASTIC):
            def ior(k, d):
                v = spec.get(k, d)
                if isinstance(v, str):
                    if v not in IORS:
                        raise ConfigError(f"unknown IOR name '{v}' ({', '.join(IORS)})", self.file, f"{key}.{k}")
                    v = IORS[v]
                return _num(v, self.file, f"{key}.{k}", 1.0)
            b.eta = ior("int_ior", 1.49 if tag == B.ROUGH_PLASTIC else 1.5046) / ior("ext_ior", 1.000277)
        if "normalmap" in spec:
            b.tex[SLOT_NORMALMAP] = self.texture(spec["normalmap"], f"{bid}.normalmap", 3, 0.0, 1.0,
                                                 f"{key}.normalmap")
        self.bsdfs.append(b)
        return len(self.bsdfs) - 1

    # -- emitters -------------------------------------------------------------------------
    def emitter(self, spec, key, eid, shape=-1):
        _keys(spec, {"type", "radiance", "intensity", "irradiance", "position", "direction", "filename", "scale",
                     "to_world", "id", "data", "width", "height"}, self.file, key)
        t = spec.get("type")
        if shape >= 0:
            if t != "area":
                raise ConfigError(f"a shape's emitter must be of type 'area', got '{t}'", self.file, f"{key}.type")
            e = Emitter(eid, EM_AREA, shape=shape)
            e.tex = self.texture(spec.get("radiance", 1.0), f"{eid}.radiance", 3, 0.0, np.inf, f"{key}.radiance")
        elif t == "point":
            e = Emitter(eid, EM_POINT, position=tuple(_vec3(spec.get("position", [0, 0, 0]), self.file,
                                                            f"{key}.position")))
            e.tex = self.texture(spec.get("intensity", 1.0), f"{eid}.intensity", 3, 0.0, np.inf, f"{key}.intensity")
        elif t == "directional":
            d = _vec3(spec.get("direction", [0, 0, -1]), self.file, f"{key}.direction")
            if np.linalg.norm(d) == 0:
                raise ConfigError("direction has zero length", self.file, f"{key}.direction")
            e = Emitter(eid, EM_DIRECTIONAL, direction=tuple(d / np.linalg.norm(d)))
            e.tex = self.texture(spec.get("irradiance", 1.0), f"{eid}.irradiance", 3, 0.0, np.inf,
                                 f"{key}.irradiance")
        elif t == "constant":
            e = Emitter(eid, EM_CONSTANT)
            e.tex = self.texture(spec.get("radiance", 1.0), f"{eid}.radiance", 3, 0.0, np.inf, f"{key}.radiance")
        elif t == "envmap":
            e = Emitter(eid, EM_ENVMAP, to_world=parse_transform(spec.get("to_world"), self.file, f"{key}.to_world"))
            if "filename" in spec:
                tspec = {"filename": spec["filename"], "srgb": False if not str(spec["filename"]).lower().endswith(
                    (".png", ".jpg", ".jpeg")) else True, "wrap": "repeat"}
            elif "data" in spec:
                tspec = {"data": spec["data"]}
            elif "width" in spec:
                tspec = {"width": spec["width"], "height": spec.get("height", spec["width"] // 2),
                         "value": spec.get("radiance", 1.0)}
            else:
                raise ConfigError("an envmap needs 'filename', 'data' or 'width'/'height'", self.file, key)
            e.tex = self.texture(tspec, f"{eid}.radiance", 3, 0.0, np.inf, key)
            scale = _num(spec.get("scale", 1.0), self.file, f"{key}.scale", 0.0)
            self.textures[e.tex].data = self.textures[e.tex].data * np.float32(scale)
        else:
            raise ConfigError(f"unknown emitter type '{t}' (expected one of: area (on a shape), "
                              f"{', '.join(EMITTER_TYPES)})", self.file, f"{key}.type")
        self.emitters.append(e)
        return len(self.emitters) - 1

    # -- shapes ---------------------------------------------------------------------------
    def shape(self, i, spec):
        key = f"shapes[{i}]"
        _keys(spec, {"id", "type", "filename", "to_world", "bsdf", "emitter", "face_normals", "flip_normals",
                     "resolution", "interior", "exterior"}, self.file, key)
        sid = str(spec.get("id", f"shape{i}"))
        key = f"shapes.{sid}"
        t = spec.get("type")
        if t in builtin.BUILTIN:
            if t in ("sphere", "disk"):
                res = _num(spec.get("resolution", 64), self.file, f"{key}.resolution", 8, 4096, integer=True)
                mesh = builtin.BUILTIN[t](res)
            else:
                mesh = builtin.BUILTIN[t]()
        elif t in ("obj", "ply"):
            from .mesh_io import load_mesh
            mesh = load_mesh(self.path(spec.get("filename"), f"{key}.filename"))
        else:
            raise ConfigError(f"unknown shape type '{t}' (expected one of: obj, ply, "
                              f"{', '.join(builtin.BUILTIN)})", self.file, f"{key}.type")
        m = parse_transform(spec.get("to_world"), self.file, f"{key}.to_world")
        mesh = builtin.transform_mesh(mesh, m)
        pos = mesh["positions"]
        if not np.all(np.isfinite(pos)):
            nbad = int((~np.isfinite(pos).all(axis=1)).sum())
            raise ConfigError(f"mesh has {nbad} vertices with NaN/Inf coordinates", self.file, key)
        faces = np.asarray(mesh["faces"], np.int64)
        if faces.size and (faces.min() < 0 or faces.max() >= len(pos)):
            raise ConfigError("mesh face index out of range", self.file, key)
        v0, v1, v2 = (pos[faces[:, k]].astype(np.float64) for k in range(3))
        area = 0.5 * np.linalg.norm(np.cross(v1 - v0, v2 - v0), axis=1)
        ext = float(np.ptp(pos, axis=0).max()) if len(pos) else 0.0
        bad = ~(area > 1e-14 * max(ext, 1e-30) ** 2)
        if bad.any():
            self.warnings.append(f"{self.file or '<dict>'}: {key}: skipped {int(bad.sum())} degenerate "
                                 f"(zero-area) triangles")
            faces = faces[~bad]
        if len(faces) == 0:
            raise ConfigError("mesh has no valid triangles", self.file, key)
        normals = None if spec.get("face_normals", False) else mesh.get("normals")
        if normals is not None and spec.get("flip_normals", False):
            normals = -normals
        if spec.get("flip_normals", False):
            faces = faces[:, [0, 2, 1]]
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
        s = Shape(sid, pos, faces.astype(np.int32), normals, mesh.get("uvs"), bi)
        for side in ("interior", "exterior"):
            if spec.get(side) is not None:
                from ..media.spec import medium_ref
                setattr(s, side, medium_ref(self, spec[side], f"{key}.{side}", sid, side, pos))
        self.shapes.append(s)
        if spec.get("emitter") is not None:
            s.emitter = self.emitter(spec["emitter"], f"{key}.emitter", sid, shape=len(self.shapes) - 1)


def _sensor(spec, file, key):
    _keys(spec, {"type", "fov", "fov_axis", "to_world", "film", "near_clip", "far_clip", "id"}, file, key)
    if spec.get("type", "perspective") != "perspective":
        raise ConfigError(f"unknown sensor type '{spec.get('type')}' (perspective)", file, f"{key}.type")
    film = spec.get("film", {}) or {}
    _keys(film, {"width", "height", "filter", "type", "rfilter"}, file, f"{key}.film")
    w = _num(film.get("width", 256), file, f"{key}.film.width", 1, 16384, integer=True)
    h = _num(film.get("height", 256), file, f"{key}.film.height", 1, 16384, integer=True)
    fl = film.get("filter", film.get("rfilter", {"type": "gaussian"}))
    if isinstance(fl, str):
        fl = {"type": fl}
    _keys(fl, {"type", "stddev", "radius"}, file, f"{key}.film.filter")
    ftype = fl.get("type", "gaussian")
    if ftype not in ("gaussian", "box"):
        raise ConfigError(f"unknown filter '{ftype}' (gaussian, box)", file, f"{key}.film.filter.type")
    stddev = _num(fl.get("stddev", 0.5), file, f"{key}.film.filter.stddev", 0.0, 4.0, strict_lo=True)
    radius = 4.0 * stddev if ftype == "gaussian" else 0.5
    fov = _num(spec.get("fov", 39.3077), file, f"{key}.fov", 0.0, 179.0, strict_lo=True)
    axis = spec.get("fov_axis", "x")
    t = np.tan(np.radians(fov) / 2)
    if axis == "smaller":
        axis = "x" if w <= h else "y"
    elif axis == "larger":
        axis = "x" if w >= h else "y"
    if axis == "x":
        tx, ty = t, t * h / w
    elif axis == "y":
        tx, ty = t * w / h, t
    else:
        raise ConfigError(f"unknown fov_axis '{axis}' (x, y, smaller, larger)", file, f"{key}.fov_axis")
    m = parse_transform(spec.get("to_world"), file, f"{key}.to_world")
    # normalise the rotation part (a look_at matrix may carry tiny scale errors)
    return Sensor(m, w, h, float(tx), float(ty), ftype, stddev, radius)


INTEGRATORS = ("path", "direct", "aov", "prb", "volpath", "prbvolpath", "volpath_raymarch")


def parse_scene(spec, file=None, base_dir=None):
    """Scene mapping (already loaded YAML) -> SceneDescription."""
    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(file)) if file else os.getcwd()
    _keys(spec, {"integrator", "sensor", "sensors", "bsdfs", "emitters", "shapes", "textures", "media"}, file, "")
    integ = spec.get("integrator", {}) or {}
    _keys(integ, {"type", "max_depth", "rr_depth", "hide_emitters", "aovs", "step_size"}, file, "integrator")
    itype = integ.get("type", "path")
    if itype not in INTEGRATORS:
        raise ConfigError(f"unknown integrator '{itype}' (expected one of: {', '.join(INTEGRATORS)})", file,
                          "integrator.type")
    max_depth = _num(integ.get("max_depth", 6), file, "integrator.max_depth", -1, 1 << 20, integer=True)
    if max_depth == -1:
        max_depth = 1 << 20
    rr_depth = _num(integ.get("rr_depth", 5), file, "integrator.rr_depth", 1, 1 << 20, integer=True)
    aovs = integ.get("aovs", ["albedo"])
    if isinstance(aovs, str):
        aovs = [aovs]
    for a in aovs:
        if a not in ("depth", "normal", "albedo", "position", "uv"):
            raise ConfigError(f"unknown AOV '{a}' (depth, normal, albedo, position, uv)", file, "integrator.aovs")
    integrator = dict(type=itype, max_depth=max_depth, rr_depth=rr_depth,
                      hide_emitters=bool(integ.get("hide_emitters", False)), aovs=list(aovs))
    if "step_size" in integ:  # volpath_raymarch: fixed step (world units); default: half a voxel
        integrator["step_size"] = _num(integ["step_size"], file, "integrator.step_size", 0.0, strict_lo=True)
    b = _Builder(file, base_dir)
    if spec.get("media") is not None:
        from ..media.spec import set_media_specs
        set_media_specs(b, spec["media"], file)
    sens = spec.get("sensors", [spec["sensor"]] if "sensor" in spec else [{}])
    if not isinstance(sens, list) or not sens:
        raise ConfigError("expected a non-empty list of sensors", file, "sensors")
    sensors = [_sensor(s or {}, file, f"sensors[{i}]") for i, s in enumerate(sens)]
    bsdfs = spec.get("bsdfs", {}) or {}
    if not isinstance(bsdfs, dict):
        raise ConfigError("expected a mapping id -> BSDF", file, "bsdfs")
    for bid, bs in bsdfs.items():
        b.bsdf_index[str(bid)] = b.bsdf(str(bid), bs if bs is not None else {}, f"bsdfs.{bid}")
    shapes = spec.get("shapes", []) or []
    if not isinstance(shapes, list):
        raise ConfigError("expected a list of shapes", file, "shapes")
    ids = set()
    for i, s in enumerate(shapes):
        if not isinstance(s, dict):
            raise ConfigError("expected a mapping", file, f"shapes[{i}]")
        sid = str(s.get("id", f"shape{i}"))
        if sid in ids:
            raise ConfigError(f"duplicate shape id '{sid}'", file, f"shapes[{i}].id")
        ids.add(sid)
        b.shape(i, s)
    if b.media_specs:
        from ..media.spec import finish_media
        finish_media(b)
    ems = spec.get("emitters", []) or []
    if not isinstance(ems, list):
        raise ConfigError("expected a list of emitters", file, "emitters")
    n_env = 0
    for i, e in enumerate(ems):
        if not isinstance(e, dict):
            raise ConfigError("expected a mapping", file, f"emitters[{i}]")
        eid = str(e.get("id", f"emitter{i}"))
        if e.get("type") == "area":
            raise ConfigError("area emitters are attached to shapes (shapes[i].emitter)", file, f"emitters.{eid}")
        if e.get("type") in ("constant", "envmap"):
            n_env += 1
        b.emitter(e, f"emitters.{eid}", eid)
    if n_env > 1:
        raise ConfigError("at most one environment emitter (constant or envmap) per scene", file, "emitters")
    if not b.shapes and not b.emitters:
        raise ConfigError("the scene has no shapes and no emitters", file, "")
    return SceneDescription(file, base_dir, integrator, sensors, b.textures, b.bsdfs, b.shapes, b.emitters,
                            b.warnings, b.media)
