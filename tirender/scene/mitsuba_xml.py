"""Mitsuba 3 XML scenes -> the scene mapping of tirender's YAML format (then the generic path:
config.load_config -> api.describe -> scene.description.parse_scene).

Generic over the model registries: a Mitsuba plugin ``<bsdf type="X">`` / ``<emitter>`` /
``<medium>`` / ``<phase>`` maps onto tirender's model of the same name, and its properties onto the
model's schema keys (``KEYS``, aliases included) of the same name; ``RENAMES`` lists the few names
that differ. Anything tirender does not have raises one line naming the file, the XML line and
the tag: ``scene.xml: line 12: <bsdf type="plastic">: unsupported BSDF type`` (ConfigError, exit 2).

Supported: ``<scene version>``, ``<default name value>`` and ``$name`` substitution (overridden by
``defines``, the CLI's ``-D name=value``), ``<include filename>``, ``id`` / ``<ref id>`` / ``name``,
transforms (translate, rotate, scale, matrix, lookat; composed in Mitsuba's order, each one
pre-multiplied), ``<float> <integer> <boolean> <string> <rgb> <spectrum> <point> <vector> <transform>``
(spectra: a value, wavelength:value pairs, files and the spectrum plugins, spectra/sampled.py),
``<texture type="bitmap"|"checkerboard"|"mesh_attribute"|"rawconstant"|"volume">``, ``<volume
type="gridvolume"|"constvolume">`` (to_world, use_grid_bbox, filter_type, wrap_mode, raw), shapes
obj/ply/serialized/rectangle/cube/sphere/disk, the sensors of tirender/sensors (perspective, thinlens, orthographic:
their KEYS) with
``hdrfilm`` + ``rfilter`` and any of Mitsuba's samplers (sample_count, rounded as that sampler rounds it,
-> render.spp; seed -> render.seed; tirender samples independently), and the integrators tirender has.
See docs/mitsuba.md.
"""
import os
import re
from xml.parsers import expat

import numpy as np

from ..errors import ConfigError
from . import shapes as builtin
from . import transforms as tf
from .curves import CURVES

# Mitsuba property name -> tirender key, per (family, type); only where the names differ.
RENAMES = {
    ("medium", "heterogeneous"): {"sigma_t": "density"},
}
# Properties Mitsuba scenes commonly carry that do not change tirender's image.
IGNORED = {
    ("film", "hdrfilm"): {"pixel_format", "component_format", "sample_border", "compensate"},
    # CUDA hardware interpolation (lower precision); tirender's lookups are always exact 32-bit (accel=false)
    ("texture", "bitmap"): {"accel"},
    ("volume", "gridvolume"): {"accel"},
    ("medium", "homogeneous"): {"sample_emitters"},
    ("medium", "heterogeneous"): {"sample_emitters"},
}
# Mitsuba's sphere is analytic; tirender's is a UV-sphere mesh: 256 segments keep its area and
# silhouette within ~1e-4 (the parity envmap scene's ball gradient: -0.9 % at 64 segments, -0.5 % at 256)
MESH_FILES = ("obj", "ply", "serialized")    # Mitsuba's mesh plugins that read a file (serialized: + shape_index)
SHAPES = MESH_FILES + tuple(builtin.BUILTIN) + CURVES + ("sdfgrid",)
FILTERS = {"gaussian": {"stddev"}, "box": set(), "tent": {"radius"}}   # Mitsuba rfilters -> their properties


def _is_prime(p):
    return p > 1 and all(p % q for q in range(2, int(p ** 0.5) + 1))


def _next_prime_square(n):
    p = max(2, int(np.ceil(np.sqrt(n))))
    while not _is_prime(p):
        p += 1
    return p * p


def _power_of_four(n):
    k = 4
    while k < n:
        k *= 4
    return k


# Mitsuba 3's samplers -> the sample count each actually takes (its constructors round the requested
# sample_count: checked against Mitsuba 3.9.1 for 1..299 in tests/test_mitsuba_xml.py) and the properties
# it reads. tirender renders that many samples per pixel with its independent sampler: the image's
# expectation is the same, its noise that of independent sampling.
SAMPLERS = {
    "independent": (lambda n: n, {"sample_count", "seed"}),
    "stratified": (lambda n: int(np.ceil(np.sqrt(n))) ** 2, {"sample_count", "seed", "jitter"}),
    "multijitter": (lambda n: max(1, int(np.sqrt(n))) * -(-n // max(1, int(np.sqrt(n)))),
                    {"sample_count", "seed", "jitter"}),
    "orthogonal": (_next_prime_square, {"sample_count", "seed", "jitter", "strength"}),
    "ldsampler": (_power_of_four, {"sample_count", "seed"}),
}
_SUB = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


# root-level elements an id may name; those a <ref> is replaced by (the others are shared by id)
_OBJECT_TAGS = ("bsdf", "medium", "texture", "emitter", "sampler", "film", "rfilter", "shape", "sensor", "spectrum",
                "volume")
_INLINED_TAGS = ("texture", "emitter", "sampler", "film", "rfilter", "volume", "spectrum")


class _Node:
    __slots__ = ("tag", "attrs", "children", "line", "file")

    def __init__(self, tag, attrs, line, file, children=None):
        self.tag, self.attrs, self.line, self.file = tag, attrs, line, file
        self.children = [] if children is None else children

    def label(self):
        t = self.attrs.get("type")
        n = self.attrs.get("name")
        return f"<{self.tag}" + (f' type="{t}"' if t else "") + (f' name="{n}"' if n else "") + ">"


def _parse_file(path, from_node=None, any_root=False):
    """XML file -> _Node tree with line numbers (expat); the root must be <scene> unless any_root (an <include>d
    object file, whose root is that object)."""
    if not os.path.exists(path):
        if from_node is not None:
            raise ConfigError(f"included file not found: {path}", from_node.file,
                              f"line {from_node.line}: {from_node.label()}")
        raise ConfigError("file not found", path)
    p = expat.ParserCreate()
    stack, root = [], []

    def start(tag, attrs):
        n = _Node(tag, dict(attrs), p.CurrentLineNumber, path)
        (stack[-1].children if stack else root).append(n)
        stack.append(n)

    def end(tag):
        stack.pop()

    p.StartElementHandler, p.EndElementHandler = start, end
    try:
        with open(path, "rb") as f:
            p.ParseFile(f)
    except expat.ExpatError as e:
        raise ConfigError(f"malformed XML: {expat.ErrorString(e.code)}", path, f"line {e.lineno}")
    if not root or (root[0].tag != "scene" and not any_root):
        raise ConfigError("the root element must be <scene>", path, f"line {root[0].line if root else 1}")
    return root[0]


class _Importer:
    def __init__(self, file, defines):
        self.file = file
        self.defaults = {}
        self.fixed = {str(k): str(v) for k, v in (defines or {}).items()}
        self.objects = {}           # id -> (family, converted value or node)
        self.scene = {"bsdfs": {}, "shapes": [], "emitters": [], "sensors": []}
        self.media = {}
        self.render = {}
        self.used_defines = set()
        # Mitsuba's file resolver (core/fresolver.h): the scene's folder, with every root-level <path> prepended
        # (mi.load_file / parser.cpp); `local` holds the folders an <include> adds while its file is read
        self.resolver = [os.path.dirname(os.path.abspath(file))]
        self.local = []

    # -- errors and attributes ------------------------------------------------------------
    def err(self, node, problem):
        return ConfigError(problem, node.file, f"line {node.line}: {node.label()}")

    def attr(self, node, name, required=True):
        v = node.attrs.get(name)
        if v is None:
            if required:
                raise self.err(node, f"missing attribute '{name}'")
            return None

        def sub(m):
            k = m.group(1)
            if k in self.fixed:
                return self.fixed[k]
            if k in self.defaults:
                return self.defaults[k]
            raise self.err(node, f"undefined parameter '${k}' (add <default name=\"{k}\" value=...> or -D {k}=...)")
        return _SUB.sub(sub, v)

    def number(self, node, s, integer=False):
        try:
            if integer:
                return int(s)
            v = float(s)
        except (TypeError, ValueError):
            raise self.err(node, f"bad {'integer' if integer else 'number'} '{s}'")
        if not np.isfinite(v):
            raise self.err(node, f"number '{s}' is not finite")
        return v

    def numbers(self, node, s):
        parts = [x for x in re.split(r"[,\s]+", s.strip()) if x]
        return [self.number(node, x) for x in parts]

    def xyz(self, node, default=0.0):
        if "value" in node.attrs:
            v = self.numbers(node, self.attr(node, "value"))
            if len(v) == 1:
                v = v * 3
            if len(v) != 3:
                raise self.err(node, f"expected 3 numbers, got {len(v)}")
            return v
        return [self.number(node, self.attr(node, a)) if a in node.attrs else default for a in "xyz"]

    def path(self, node, s):
        """A file name as Mitsuba's resolver finds it: absolute as is; else the first of the include's folders
        (while one is read), the root <path> entries (last first) and the scene's folder holding it; else (where
        Mitsuba would fail) the folder of the XML file that names it, then the name against that folder."""
        if os.path.isabs(s):
            return s
        own = os.path.dirname(os.path.abspath(node.file))
        for base in self.local + self.resolver + [own]:
            cand = os.path.normpath(os.path.join(base, s))
            if os.path.exists(cand):
                return cand
        return os.path.normpath(os.path.join(own, s))

    def resource(self, n, into):
        """<path value>: a folder prepended to the resolver `into` (relative: to the XML file's folder first,
        then through the resolver), as parser.cpp does."""
        v = self.attr(n, "value")
        full = v if os.path.isabs(v) else os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(n.file)), v))
        if not os.path.isabs(v) and not os.path.exists(full):
            full = self.path(n, v)
        if not os.path.isdir(full):
            raise self.err(n, f"folder not found: {full}")
        into.insert(0, full)

    # -- the document -----------------------------------------------------------------------
    def run(self, root):
        for n in root.children:      # root-level <path> entries hold for the whole scene, wherever they stand
            if n.tag == "default":
                self.default(n)
            elif n.tag == "path":
                self.resource(n, self.resolver)
        nodes = self.flatten(root)
        # Mitsuba resolves references after parsing the whole document: ids may be used before they are defined
        self.pending = {}
        for n in nodes:
            if n.attrs.get("id") and n.tag in _OBJECT_TAGS:
                nid = self.attr(n, "id")
                if nid in self.pending:
                    raise self.err(n, f"duplicate id '{nid}'")
                self.pending[nid] = n
        for n in nodes:
            self.substitute(n)
        self.top(nodes)
        if self.media:
            self.scene["media"] = self.media
        if not self.scene["sensors"]:
            del self.scene["sensors"]
        return self.scene

    def included(self, n, any_root=False):
        """The tree of the file an <include> names, read while its folder is on the resolver (parser.cpp: the
        including file's folder first), with nested includes and defaults inside objects expanded."""
        self.local.insert(0, os.path.dirname(os.path.abspath(n.file)))
        saved = list(self.local)
        try:
            root = _parse_file(self.path(n, self.attr(n, "filename")), n, any_root)
            self.expand(root)
            return root
        finally:
            self.local = saved[1:]

    def expand(self, node):
        """Inside objects (not at a scene's root, which ``top`` reads in order): an <include> becomes the objects
        of its file (a scene file's children, or the file's root object, named by the include's ``name``), and a
        <default> is read where it stands (Mitsuba's parser accepts both anywhere)."""
        out = []
        for c in node.children:
            if node.tag != "scene" and c.tag == "include":
                root = self.included(c, any_root=True)
                if root.tag == "scene":
                    out.extend(root.children)
                else:
                    if c.attrs.get("name"):
                        root.attrs["name"] = c.attrs["name"]
                    out.append(root)
            elif node.tag != "scene" and c.tag == "default":
                self.default(c)
            else:
                self.expand(c)
                out.append(c)
        node.children = out

    def flatten(self, root):
        """The scene's root-level elements in document order, with root-level <include>s replaced by their files'
        (read while the including file's folder and the included file's own <path>s are on the resolver) and
        objects' nested includes and defaults expanded (``expand``); <default>s are read where they stand."""
        self.expand(root)
        out = []
        for n in root.children:
            if n.tag == "default":
                self.default(n)
            elif n.tag == "path":
                if n.file != self.file:     # in an included file: for the rest of that file (parser.cpp)
                    self.resource(n, self.local)
            elif n.tag == "include":
                self.local.insert(0, os.path.dirname(os.path.abspath(n.file)))
                saved = list(self.local)
                try:
                    out.extend(self.flatten(self.included(n)))
                finally:
                    self.local = saved[1:]
            else:
                out.append(n)
        return out

    def substitute(self, node):
        """Unnamed <ref id> children that name a sampler, film, rfilter, texture or (area) emitter defined at the
        root become that element (Mitsuba's references to objects, which may come before the definition); BSDF
        and medium references stay ids (one shared object, ``bsdf`` / ``medium``)."""
        for i, c in enumerate(node.children):
            if c.tag == "ref" and c.attrs.get("id") in self.pending:
                target = self.pending[self.attr(c, "id")]
                if target.tag in _INLINED_TAGS:
                    if target.tag in ("texture", "emitter") and c.attrs.get("name"):
                        target = _Node(target.tag, dict(target.attrs, name=c.attrs["name"]), target.line, target.file,
                                       target.children)
                    node.children[i] = target
                    target.attrs["_used"] = "1"
            else:
                self.substitute(c)

    def ensure(self, rid, at):
        """Convert the root-level BSDF or medium with id rid now if it was not yet (a reference before its
        definition); unknown ids raise naming the referring element."""
        if rid in self.objects:
            return self.objects[rid]
        n = self.pending.get(rid)
        if n is None or n.tag not in ("bsdf", "medium"):
            raise self.err(at, f"unknown id '{rid}'")
        if n.tag == "bsdf":
            self.scene["bsdfs"][rid] = None          # reserves the id (recursion guard, document order kept)
            self.scene["bsdfs"][rid] = self.bsdf(n)
            self.objects[rid] = ("bsdf", rid)
        else:
            self.media[rid] = self.medium(n)
            self.objects[rid] = ("medium", rid)
        return self.objects[rid]

    def top(self, nodes):
        for n in nodes:
            t = n.tag
            nid = n.attrs.get("id")
            if nid and self.objects.get(nid) is not None and t in ("bsdf", "medium"):
                continue                          # converted already, where it was referenced first
            if n.attrs.get("_used") and t in _INLINED_TAGS:
                continue                          # used where it is referenced
            if t == "alias":                      # <alias id="a" as="b">: b names the object a names
                src, dst = self.attr(n, "id"), self.attr(n, "as")
                if src not in self.objects and src not in self.pending:
                    raise self.err(n, f"alias source id '{src}' not found")
                if dst in self.objects or dst in self.pending:
                    raise self.err(n, f"alias destination id '{dst}' already exists")
                self.objects[dst] = self.ensure(src, n) if src in self.pending else self.objects[src]
            elif t == "bsdf":
                bid = self.attr(n, "id", required=False) or f"bsdf_line{n.line}"
                self.scene["bsdfs"][bid] = self.bsdf(n)
                self.objects[bid] = ("bsdf", bid)
            elif t == "shape":
                self.scene["shapes"].append(self.shape(n))
            elif t == "emitter":
                e = self.emitter(n)
                if e.get("type") == "area":
                    raise self.err(n, "an area emitter must be nested in a shape")
                self.scene["emitters"].append(e)
            elif t == "sensor":
                self.scene["sensors"].append(self.sensor(n))
            elif t == "integrator":
                self.scene["integrator"] = self.integrator(n)
            elif t == "medium":
                mid = self.attr(n, "id", required=False) or f"medium_line{n.line}"
                self.media[mid] = self.medium(n)
                self.objects[mid] = ("medium", mid)
            elif t == "texture":
                if not n.attrs.get("id"):
                    raise self.err(n, "a top-level texture needs an id")
                self.texture(n)                   # checked here; used where referenced
            elif t in ("film", "sampler", "rfilter") and n.attrs.get("id"):
                pass                              # used where referenced (none: no effect, as in Mitsuba)
            elif t in ("film", "sampler", "rfilter", "phase", "ref"):
                raise self.err(n, f"<{t}> must be nested in a sensor/medium/shape")
            else:
                raise self.err(n, "unsupported tag")

    def default(self, n):
        name = self.attr(n, "name")
        if name not in self.fixed and name not in self.defaults:
            self.defaults[name] = self.attr(n, "value")

    # -- properties ------------------------------------------------------------------------
    def prop(self, n):
        """A property element -> value (float, int, bool, str, list, 4x4 list, texture/volume dict)."""
        t = n.tag
        if t == "float":
            return self.number(n, self.attr(n, "value"))
        if t == "integer":
            return self.number(n, self.attr(n, "value"), integer=True)
        if t == "boolean":
            v = self.attr(n, "value").strip().lower()
            if v not in ("true", "false", "1", "0"):
                raise self.err(n, f"bad boolean '{v}' (true, false)")
            return v in ("true", "1")
        if t == "string":
            v = self.attr(n, "value")
            return self.path(n, v) if self.attr(n, "name") == "filename" else v
        if t == "rgb":
            v = self.numbers(n, self.attr(n, "value"))
            if len(v) not in (1, 3):
                raise self.err(n, f"expected 1 or 3 numbers, got {len(v)}")
            return v[0] if len(v) == 1 else v
        if t == "spectrum" and "type" in n.attrs:
            return self.spectrum_type(n)
        if t == "spectrum":
            return self.spectrum(n)
        if t in ("point", "vector"):
            return self.xyz(n)
        if t == "transform":
            return self.transform(n).tolist()
        if t == "texture":
            return self.texture(n)
        if t == "volume":
            return self.volume(n)
        if t == "ref":
            return self.ensure(self.attr(n, "id"), n)[1]
        raise self.err(n, "unsupported tag")

    def spectrum(self, n):
        """<spectrum name value="v" | value="λ:v, ..." | filename="x.spd"> (parser.cpp, Properties::Spectrum) ->
        {type: spectrum, value: v | [[λ, v], ...]} (spectra/sampled.py: its meaning depends on the variant and
        the key; the file is read here, resolved like every file name)."""
        from ..spectra import sampled
        has_v, has_f = "value" in n.attrs, "filename" in n.attrs
        if has_v == has_f:
            raise self.err(n, "<spectrum> needs either a 'value' or a 'filename' attribute (not both)")
        try:
            if has_v:
                p = sampled.parse_text(self.attr(n, "value"))
            else:
                p = sampled.read_spd(self.path(n, self.attr(n, "filename")))
            if isinstance(p, float):
                return {"type": "spectrum", "value": p}
            s = sampled.sampled(*p)
        except ValueError as e:
            raise self.err(n, e.args[0])
        return {"type": "spectrum", "value": [[float(a), float(b)] for a, b in zip(s.wavelengths, s.values)]}

    def spectrum_type(self, n):
        """<spectrum type="blackbody|d65|uniform|regular|irregular|srgb"> with its properties -> the spectrum
        mapping of tirender's scene format (spectra/sampled.py; emitters: scene/description.py emitter_spectrum).
        The lists of ``regular`` / ``irregular`` (strings, as in Mitsuba) are parsed here."""
        from ..spectra import sampled
        typ = self.attr(n, "type")
        allowed = {"blackbody": ("temperature", "scale"), "d65": ("scale", "color"), "uniform": ("value",),
                   "regular": ("wavelength_min", "wavelength_max", "values"), "irregular": ("wavelengths", "values"),
                   "srgb": ("color",)}
        if typ not in allowed:
            raise self.err(n, f"unsupported spectrum type '{typ}' ({', '.join(allowed)})")
        out = {"type": typ}
        if typ == "uniform" and "value" in n.attrs:
            out["value"] = self.number(n, self.attr(n, "value"))
        for c in n.children:
            name = self.attr(c, "name")
            if name not in allowed[typ]:
                raise self.err(c, f"unsupported property '{name}' of a {typ} spectrum "
                                  f"(expected: {', '.join(allowed[typ])})")
            out[name] = self.prop(c)
            if name in ("values", "wavelengths"):
                try:
                    out[name] = sampled.parse_numbers(out[name], name[:-1]).tolist()
                except ValueError as e:
                    raise self.err(c, e.args[0])
        return out

    def props(self, node, family, typ, keys, skip=(), renames=None):
        """The property children of `node` -> {tirender key: value}; unknown names raise."""
        ren = {**RENAMES.get((family, typ), {}), **(renames or {})}
        ign = IGNORED.get((family, typ), set())
        out = {}
        for c in node.children:
            if c.tag in skip:
                continue
            name = self.attr(c, "name", required=False)
            if c.tag == "ref" and name is None:
                kind = self.ensure(self.attr(c, "id"), c)[0]
                if kind != "bsdf":
                    raise self.err(c, f"a <ref> to a {kind} inside a {family} needs a name")
                name = "bsdf"
            if name is None and None in ren:
                name = ren[None]
            if name is None:
                raise self.err(c, f"unsupported tag in {family} '{typ}' (a property needs a name)")
            if name in ign:
                continue
            key = ren.get(name, name)
            if keys is not None and key not in keys:
                raise self.err(c, f"unsupported {family} property '{name}' for type '{typ}' "
                                  f"(tirender has: {', '.join(sorted(keys)) or 'none'})")
            out[key] = self.prop(c)
        return out

    def transform(self, node):
        m = np.eye(4)
        for c in node.children:
            try:
                if c.tag == "translate":
                    op = tf.translate(self.xyz(c))
                elif c.tag == "scale":
                    op = tf.scale(self.xyz(c, default=1.0))
                elif c.tag == "rotate":
                    axis = self.xyz(c) if "value" in c.attrs else [self.number(c, self.attr(c, a)) if a in c.attrs
                                                                   else 0.0 for a in "xyz"]
                    op = tf.rotate(axis, self.number(c, self.attr(c, "angle")), normalize=False)   # as Mitsuba
                elif c.tag == "matrix":
                    v = self.numbers(c, self.attr(c, "value"))
                    if len(v) == 9:
                        op = np.eye(4)
                        op[:3, :3] = np.reshape(v, (3, 3))
                    elif len(v) == 16:
                        op = np.reshape(v, (4, 4))
                    else:
                        raise self.err(c, f"expected 9 or 16 numbers, got {len(v)}")
                elif c.tag == "lookat":
                    o, t, u = (self.numbers(c, self.attr(c, a)) for a in ("origin", "target", "up"))
                    if not (len(o) == len(t) == len(u) == 3):
                        raise self.err(c, "origin, target and up need 3 numbers each")
                    op = tf.look_at(o, t, u)
                else:
                    raise self.err(c, "unsupported transform")
            except ValueError as e:
                raise self.err(c, str(e))
            m = op @ m
        return m

    # -- textures / volumes ------------------------------------------------------------------
    def texture(self, n):
        t = self.attr(n, "type")
        if t == "mesh_attribute":     # tirender/mesh_attribute.py: name, scale
            from ..mesh_attribute import MeshAttribute
            return dict({"type": t}, **self.props(n, "texture", t, self._keynames(MeshAttribute)))
        if t == "checkerboard":
            p = self.props(n, "texture", t, {"color0", "color1", "to_uv"})
            spec = {"type": "checkerboard"}
            for k in ("color0", "color1", "to_uv"):
                if k in p:
                    spec[k] = p[k]
            return spec
        if t in ("rawconstant", "volume"):
            return self.texture_plugin(n, t)
        if t != "bitmap":
            raise self.err(n, f"unsupported texture type '{t}' (tirender has: bitmap, checkerboard, mesh_attribute, "
                              f"rawconstant, volume)")
        p = self.props(n, "texture", t, {"filename", "filter_type", "wrap_mode", "raw", "to_uv", "format"})
        if "filename" not in p:
            raise self.err(n, "a bitmap needs a filename")
        spec = {"type": "bitmap", "filename": p["filename"]}
        for k in ("to_uv", "filter_type", "wrap_mode", "format"):
            if k in p:
                spec[k] = p[k]
        # Mitsuba decodes every 8-bit bitmap from sRGB unless raw="true" (scalar maps too); a normal
        # map's bitmap without `raw` is read raw (tirender's normal-map default, docs/mitsuba.md)
        if "raw" in p:
            spec["raw"] = p["raw"]
        elif n.attrs.get("name") != "normalmap":
            spec["raw"] = False
        return spec

    def texture_plugin(self, n, t):
        """<texture type="rawconstant"> (a <float> or <vector> value, src/spectra/rawconstant.cpp) and
        <texture type="volume"> (its <volume name="volume">, or a value: src/textures/volume.cpp)."""
        if t == "volume":
            return dict({"type": "volume"}, **self.props(n, "texture", t, {"volume"}))
        vals = [c for c in n.children if c.attrs.get("name") == "value"]
        if vals and vals[0].tag not in ("float", "vector", "point"):
            raise self.err(vals[0], "a rawconstant's value is a <float> or a <vector>")
        return dict({"type": "rawconstant"}, **self.props(n, "texture", t, {"value"}))

    def volume(self, n):
        t = self.attr(n, "type")
        if t == "constvolume":
            p = self.props(n, "volume", t, {"value", "to_world"})
            v = p.get("value", 1.0)
            if isinstance(v, dict) and v.get("type") in ("spectrum", "regular", "irregular"):
                p["value"] = dict(v, unbounded=True)      # const.cpp: get_unbounded_texture("value")
            return dict({"type": "const"}, **p)
        if t == "gridvolume":
            p = self.props(n, "volume", t, {"filename", "to_world", "use_grid_bbox", "filter_type", "wrap_mode", "raw"})
            if "filename" not in p:
                raise self.err(n, "a gridvolume needs a filename")
            # Mitsuba's placement: the unit cube through to_world (identity by default), never tirender's bbox rules
            return dict({"type": "grid", "to_world": p.pop("to_world", np.eye(4).tolist())}, **p)
        raise self.err(n, f"unsupported volume type '{t}' (gridvolume, constvolume)")

    # -- models ------------------------------------------------------------------------------
    @staticmethod
    def _keynames(model):
        return {nm for k in model.KEYS for nm in (k.name,) + tuple(k.aliases)}

    @staticmethod
    def _mitsuba_defaults(model, spec):
        """spec with Mitsuba's defaults filled in where the model's YAML default differs (its MITSUBA_DEFAULTS: a
        dict, or a function of the given properties returning one) and no spelling of the key was given."""
        out = dict(spec)
        defaults = getattr(model, "MITSUBA_DEFAULTS", {})
        if callable(defaults):
            defaults = defaults(spec)
        for name, value in defaults.items():
            key = next((k for k in model.KEYS if k.name == name), None)
            spellings = (name,) + (tuple(key.aliases) if key is not None else ())
            if not any(s in out for s in spellings):
                out[name] = value
        return out

    def _plugin(self, n, by_name, family):
        """(type, model) of plugin node n in a registry's BY_NAME; ConfigError for a type tirender does not have."""
        t = self.attr(n, "type")
        model = by_name.get(t)
        if model is None:
            raise self.err(n, f"unsupported {family} type '{t}' (tirender has: {', '.join(by_name)})")
        return t, model

    def bsdf(self, n):
        from ..bsdfs import registry
        t, model = self._plugin(n, registry.BY_NAME, "BSDF")
        children = [k.name for k in model.KEYS if k.kind == "nested BSDF"]
        spec = {"type": t}
        names = self._keynames(model)
        ren = {}
        if getattr(model, "XML_TEXTURE", None):   # Mitsuba's bumpmap: its one <texture>, whatever its name
            ren = {c.attrs.get("name"): model.XML_TEXTURE for c in n.children
                   if c.tag == "texture" and c.attrs.get("name") not in names}
        spec.update(self.props(n, "bsdf", t, names, skip=("bsdf",), renames=ren))
        nested = [c for c in n.children if c.tag == "bsdf"]
        free = [c for c in children if c not in spec]
        for c in nested:
            name = c.attrs.get("name")
            if name is None or name not in children:
                if not free:
                    raise self.err(c, f"BSDF '{t}' takes {len(children)} nested BSDF(s)")
                name = free.pop(0)
            elif name in free:
                free.remove(name)
            spec[name] = self.bsdf(c)
        for k in children:   # refs to BSDFs by id are kept as ids
            v = spec.get(k)
            if isinstance(v, dict) and "type" not in v:
                raise self.err(n, f"'{k}' must be a BSDF")
        return self._mitsuba_defaults(model, spec)

    def emitter(self, n):
        from ..emitters import registry
        from ..emitters.base import COMMON_KEYS
        t, model = self._plugin(n, registry.BY_NAME, "emitter")
        names = self._keynames(model)
        spec = {"type": t}
        p = self.props(n, "emitter", t, names | {"to_world"} | {k.name for k in COMMON_KEYS})
        if "to_world" in p and "to_world" not in names:
            m = np.asarray(p.pop("to_world"))
            if "position" in names and "position" not in p:
                p["position"] = m[:3, 3].tolist()
            if "direction" in names and "direction" not in p:
                p["direction"] = (m[:3, :3] @ np.array([0.0, 0.0, 1.0])).tolist()
        spec.update(p)
        if n.attrs.get("id"):
            spec["id"] = self.attr(n, "id")
        return self._mitsuba_defaults(model, spec)

    def medium(self, n):
        from ..media.phase import BY_NAME as PHASES
        from ..media.registry import BY_NAME
        t, model = self._plugin(n, BY_NAME, "medium")
        spec = {"type": t}
        spec.update(self.props(n, "medium", t, self._keynames(model) - {"phase"}, skip=("phase",)))
        for c in n.children:
            if c.tag == "phase":
                pt = self.attr(c, "type")
                pm = PHASES.get(pt)
                if pm is None:
                    raise self.err(c, f"unsupported phase function '{pt}' (tirender has: {', '.join(PHASES)})")
                spec["phase"] = self._mitsuba_defaults(pm, dict({"type": pt}, **self.props(c, "phase", pt,
                                                                                       self._keynames(pm))))
        return self._mitsuba_defaults(model, spec)

    def shape(self, n, in_group=False):
        t = self.attr(n, "type")
        if t == "shapegroup":
            return self.shapegroup(n, in_group)
        if t == "instance":
            return self.instance(n, in_group)
        if t not in SHAPES:
            raise self.err(n, f"unsupported shape type '{t}' (tirender has: {', '.join(SHAPES)}, shapegroup, instance)")
        keys = {"to_world", "flip_normals", "face_normals"}
        keys |= {"filename", "flip_tex_coords"} if t in ("obj", "ply") else set()
        keys |= {"filename", "shape_index"} if t == "serialized" else set()
        keys |= {"filename"} if t in CURVES else set()
        keys |= {"filename", "normals"} if t == "sdfgrid" else set()
        keys |= {"center", "radius"} if t == "sphere" else set()
        keys |= {"p0", "p1", "radius"} if t == "cylinder" else set()
        p = self.props(n, "shape", t, keys | {"interior", "exterior", "bsdf"},
                       skip=("bsdf", "emitter", "medium"))
        spec = {"type": t}
        if n.attrs.get("id"):
            spec["id"] = self.attr(n, "id")
        m = np.asarray(p.pop("to_world", np.eye(4).tolist()), float)
        if t == "sphere":
            c = p.pop("center", [0.0, 0.0, 0.0])
            r = p.pop("radius", 1.0)
            m = m @ tf.translate(c) @ tf.scale(r)
        elif t == "cylinder":
            p0, p1 = p.pop("p0", [0.0, 0.0, 0.0]), p.pop("p1", [0.0, 0.0, 1.0])
            if np.linalg.norm(np.subtract(p1, p0)) <= 0:
                raise self.err(n, "a cylinder needs p0 != p1")
            m = m @ builtin.cylinder_to_object(p0, p1, p.pop("radius", 1.0))
        if not np.allclose(m, np.eye(4)):
            spec["to_world"] = m.tolist()
        for k in ("filename", "flip_normals", "face_normals", "flip_tex_coords", "shape_index", "normals"):
            if k in p:
                spec[k] = p.pop(k)
        if (t in MESH_FILES or t in CURVES or t == "sdfgrid") and "filename" not in spec:
            what = "a curve" if t in CURVES else "a mesh" if t in MESH_FILES else "an sdfgrid (Mitsuba's 'grid' tensor: Python only)"
            raise self.err(n, f"{what} needs a filename")
        if "bsdf" in p:
            spec["bsdf"] = p.pop("bsdf")
        for side in ("interior", "exterior"):
            if side in p:
                spec[side] = p.pop(side)
        for c in n.children:
            if c.tag == "bsdf":
                if "bsdf" in spec:
                    raise self.err(c, "a shape has one BSDF")
                spec["bsdf"] = self.bsdf(c)
            elif c.tag == "emitter":
                e = self.emitter(c)
                if e["type"] != "area":
                    raise self.err(c, "a shape's emitter must be an area emitter")
                e.pop("id", None)
                spec["emitter"] = e
            elif c.tag == "medium":
                side = self.attr(c, "name")
                if side not in ("interior", "exterior"):
                    raise self.err(c, "a shape's medium needs name=\"interior\" or \"exterior\"")
                mid = self.attr(c, "id", required=False) or f"{spec.get('id', 'shape')}_{side}_line{c.line}"
                self.media[mid] = self.medium(c)
                spec[side] = mid
        if "emitter" in spec and "bsdf" not in spec:
            # Mitsuba (src/render/shape.cpp): an emitting shape without a BSDF is black diffuse
            spec["bsdf"] = {"type": "diffuse", "reflectance": 0.0}
        return spec

    def shapegroup(self, n, in_group):
        """<shape type="shapegroup" id=...> holding shapes (scene/instances.py)."""
        if in_group:
            raise self.err(n, "a shapegroup cannot hold another shapegroup (nested instancing is not permitted)")
        spec = {"type": "shapegroup", "id": self.attr(n, "id"), "shapes": []}
        for c in n.children:
            if c.tag != "shape":
                raise self.err(c, f"a shapegroup holds shapes only (found <{c.tag}>)")
            for e in c.children:
                if e.tag == "emitter":
                    raise self.err(e, "instancing of emitters is not supported (as in Mitsuba)")
            spec["shapes"].append(self.shape(c, in_group=True))
        return spec

    def instance(self, n, in_group):
        """<shape type="instance"> with a <ref id> to a shapegroup (or one inline) and its to_world."""
        if in_group:
            raise self.err(n, "a shapegroup cannot hold an instance (nested instancing is not permitted)")
        spec = {"type": "instance"}
        if n.attrs.get("id"):
            spec["id"] = self.attr(n, "id")
        for c in n.children:
            if c.tag == "ref" or (c.tag == "shape" and c.attrs.get("type") == "shapegroup"):
                if "shapegroup" in spec:
                    raise self.err(c, "only a single shapegroup can be specified per instance")
                if c.tag == "ref":
                    rid = self.attr(c, "id")
                    target = self.pending.get(rid)
                    if target is None or target.tag != "shape" or target.attrs.get("type") != "shapegroup":
                        raise self.err(c, f"'{rid}' is not the id of a shapegroup")
                    spec["shapegroup"] = rid
                else:
                    spec["shapegroup"] = self.shapegroup(c, False)
            elif c.tag == "transform" and c.attrs.get("name") == "to_world":
                spec["to_world"] = self.transform(c).tolist()
            else:
                raise self.err(c, "an instance holds a shapegroup reference and a to_world transform only")
        if "shapegroup" not in spec:
            raise self.err(n, "a reference to a 'shapegroup' must be specified")
        return spec

    def sensor(self, n):
        from ..sensors import registry
        if n.attrs.get("type") == "batch":
            return self.batch_sensor(n)
        t, model = self._plugin(n, registry.BY_NAME, "sensor")
        refused = {k.name: k for k in model.KEYS if k.kind == "refused"}
        for c in n.children:
            if c.attrs.get("name") in refused:
                raise self.err(c, f"'{c.attrs['name']}' is not supported: {refused[c.attrs['name']].why}")
        p = self.props(n, "sensor", t, self._keynames(model), skip=("film", "sampler"))
        spec = {"type": t}
        spec.update(p)
        if n.attrs.get("id"):
            spec["id"] = self.attr(n, "id")
        self._film_and_sampler(n, spec)
        return self._mitsuba_defaults(model, spec)   # where Mitsuba's default differs from the YAML one

    def batch_sensor(self, n):
        """<sensor type="batch"> holding <sensor> children, a film and a sampler (sensors/batch.py)."""
        self.props(n, "sensor", "batch", set(), skip=("film", "sampler", "sensor"))
        spec = {"type": "batch", "sensors": [self.sensor(c) for c in n.children if c.tag == "sensor"]}
        if n.attrs.get("id"):
            spec["id"] = self.attr(n, "id")
        self._film_and_sampler(n, spec)
        return spec

    def _film_and_sampler(self, n, spec):
        """A sensor's <film> (into spec["film"], Mitsuba's 768 x 576 by default) and <sampler> (the render's spp,
        seed)."""
        for c in n.children:
            if c.tag == "film":
                ft = self.attr(c, "type")
                if ft != "hdrfilm":
                    raise self.err(c, f"unsupported film type '{ft}' (tirender has: hdrfilm)")
                film = self.props(c, "film", ft, {"width", "height"}, skip=("rfilter",))
                for r in c.children:
                    if r.tag == "rfilter":
                        rt = self.attr(r, "type")
                        if rt not in FILTERS:
                            raise self.err(r, f"unsupported reconstruction filter '{rt}' "
                                              f"(tirender has: {', '.join(FILTERS)})")
                        film["filter"] = dict({"type": rt}, **self.props(r, "rfilter", rt, FILTERS[rt]))
                spec["film"] = film
            elif c.tag == "sampler":
                st = self.attr(c, "type")
                if st not in SAMPLERS:
                    raise self.err(c, f"unsupported sampler '{st}' (tirender has: {', '.join(SAMPLERS)})")
                rounded, keys = SAMPLERS[st]
                sp = self.props(c, "sampler", st, keys)
                if "sample_count" in sp:
                    n = sp["sample_count"]
                    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
                        raise self.err(c, f"sampler sample_count must be an integer >= 1, got {n!r}")
                    self.render["spp"] = int(rounded(int(n)))
                if "seed" in sp:
                    self.render["seed"] = sp["seed"]
        if "film" not in spec:   # Mitsuba's defaults: 768 x 576, gaussian
            spec["film"] = {"width": 768, "height": 576}

    def integrator(self, n):
        """<integrator type=...> -> the scene's integrator mapping, with Mitsuba's defaults where tirender's YAML
        defaults differ (each integrator module's MITSUBA_DEFAULTS); wrappers (moment, stokes) hold the nested one."""
        from ..integrators import registry
        t = self.attr(n, "type")
        inner = [c for c in n.children if c.tag == "integrator"]
        if t in registry.WRAPPERS:
            if len(inner) != 1:
                raise self.err(n, f"tirender's {t} integrator wraps one nested integrator (got {len(inner)})")
            self.props(n, "integrator", t, set(), skip=("integrator",))
            return {"type": t, "integrator": self.integrator(inner[0])}
        if t not in registry.PRIMAL:
            raise self.err(n, f"unsupported integrator '{t}' (tirender has: {', '.join(registry.NAMES)})")
        keys = self._keynames(registry.PRIMAL[t])
        nested = {}
        if t == "stokes":   # Mitsuba's stokes wraps the integrator it measures: here the path tracer (or, in
            if inner:       # scenes with media, volpath's walk)
                it = self.attr(inner[0], "type")
                if it not in ("path", "volpath"):
                    raise self.err(inner[0], f"the stokes integrator measures a nested 'path' or 'volpath' integrator "
                                             f"here (got '{it}')")
                nested = {**registry.mitsuba_defaults(it), **self.props(inner[0], "integrator", it, keys)}
        elif inner:
            raise self.err(inner[0], f"the '{t}' integrator takes no nested integrator")
        return {"type": t, **registry.mitsuba_defaults(t), **nested,
                **self.props(n, "integrator", t, keys, skip=("integrator",))}


def load_xml(path, defines=None):
    """A Mitsuba 3 XML scene file -> job config mapping ``{"render": {spp, seed}, "scene": {...}}``
    (tirender's YAML form). defines: {name: value} overriding ``<default>`` values (``-D``)."""
    root = _parse_file(path)
    imp = _Importer(path, defines)
    scene = imp.run(root)
    out = {"scene": scene}
    if imp.render:
        out["render"] = dict(imp.render)
    return out


def parse_defines(items, file=None):
    """["name=value", ...] -> {name: value} (the CLI's -D)."""
    out = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"-D '{it}' must look like name=value", file)
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def param_aliases(desc):
    """{alternative name: pool name} for a SceneDescription: the models' schema aliases (Mitsuba's
    ``alpha`` for ``roughness``, ...), a volume texture's ``<key>.volume`` and RENAMES (heterogeneous ``sigma_t``
    = ``density``)."""
    from ..textures import TEX_VOLUME
    out = {}
    for row in list(desc.bsdfs) + list(desc.emitters):
        keys = [k for k in row.model.KEYS if getattr(k, "kind", None) == "texture"]
        for k, t in zip(keys, row.tex):
            for a in (k.name,) + tuple(k.aliases):
                if a != k.param:
                    out[f"{row.id}.{a}"] = f"{row.id}.{k.param}"
                if t >= 0 and desc.textures[t].flags & TEX_VOLUME:   # Mitsuba: <id>.<key>.volume.data
                    out[f"{row.id}.{a}.volume"] = f"{row.id}.{k.param}"
    names = {t.name for t in desc.textures}
    for m in desc.media:
        for ren in RENAMES.values():
            for mi_name, ti_name in ren.items():
                if f"{m.id}.{ti_name}" in names:
                    out[f"{m.id}.{mi_name}"] = f"{m.id}.{ti_name}"
    return out
