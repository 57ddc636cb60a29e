"""Mitsuba's ``mesh_attribute`` texture (src/textures/mesh_attribute.cpp): a mesh's per-vertex or per-face
attribute (``vertex_color``, ``face_weight``, ... : PLY properties, scene/mesh_io.py) as the value of a BSDF's
texture slot, times ``scale``.

At a hit on triangle (i0, i1, i2) with barycentrics (b1, b2), a vertex attribute is interpolated,
scale · ((1 − b1 − b2) a[i0] + b1 a[i1] + b2 a[i2]); a face attribute is constant on its triangle, scale · a[f]
(Mesh::interpolate_attribute). A 1-channel attribute feeds a scalar slot or, as a grey, a colour slot; a
3-channel one a colour slot (its luminance in mono). In the spectral variants, as Mitsuba (which stores the
spectral model's coefficients of every 3-channel attribute named ``*color*``), each vertex's colour is upsampled
at the path's wavelengths and the spectra are interpolated; a 3-channel colour attribute without ``color`` in
its name is refused there (Mitsuba would read its values as spectral coefficients).

The attribute values are parameters ``<shape id>.<attribute name>`` (Mitsuba's ``mi.traverse`` keys, shape
(V or F, C)), differentiable as in Mitsuba: the adjoint adds d_out times the lookup's weights to the corner
values (``pool.add_gradient``: atomic adds into the fixed-point gradient). ``scale`` is not differentiable
(Mitsuba: NonDifferentiable).

A texture slot of BSDF row b holds ``st.bsdf_tex[b, k]``: a texture index ≥ 0, -1 (none), or ATTRIBUTE - j for
attribute texture j (``st.atex_attr[j]``: the index of its attribute name in the scene, ``st.atex_scale[j]``).
Per shape s and name index a, ``st.shape_attr_off[s, a]`` is the pool offset of the shape's attribute (-1: none)
and ``st.shape_attr_code[s, a]`` its channels | 4 for a face attribute; a triangle's vertex indices are
``st.tri_code[t]`` and its face index in its shape ``st.tri_face[t]``. Only BSDF slots take attribute textures
(emitters, media and height fields refuse them).
"""
from dataclasses import dataclass

import numpy as np
import taichi as ti

from . import variants
from .core import pool
from .core.math import vec3
from .errors import ConfigError
from .schema import Number, String, validate

ATTRIBUTE = -2       # bsdf_tex of attribute texture j: ATTRIBUTE - j
MAX_NAMES = 8        # distinct attribute names the textures of one scene read (columns of st.shape_attr_*)
FACE = 4             # st.shape_attr_code: face attribute flag (| channels)
ivec3 = ti.types.vector(3, ti.i32)


class MeshAttribute:
    """``{type: mesh_attribute, name: vertex_color, scale: 1}``: a mesh attribute as a BSDF texture (module doc)."""
    NAME = "mesh_attribute"
    KEYS = (String("name", doc="the attribute: `vertex_<name>` (interpolated) or `face_<name>` (per triangle)"),
            Number("scale", default=1.0, doc="factor on the value (not differentiable, as Mitsuba)"))


@dataclass
class Record:
    """One texture slot reading an attribute: its name, scale, the slot's channels, whether the slot is raw data
    (not a colour), and the scene key (messages)."""
    name: str
    scale: float
    channels: int
    raw: bool
    key: str


def is_spec(spec):
    return isinstance(spec, dict) and spec.get("type") == MeshAttribute.NAME


def texture(builder, spec, channels, raw, key):
    """A ``mesh_attribute`` mapping in a BSDF's texture slot -> the slot's value ATTRIBUTE - j
    (builder.mesh_attributes[j] its Record)."""
    values = validate({k: v for k, v in spec.items() if k != "type"}, MeshAttribute.KEYS, builder.file, key)
    name = values["name"]
    if not name.startswith(("vertex_", "face_")):
        raise ConfigError(f"a mesh attribute's name starts with 'vertex_' or 'face_', got '{name}'", builder.file,
                          f"{key}.name")
    names = {r.name for r in builder.mesh_attributes} | {name}
    if len(names) > MAX_NAMES:
        raise ConfigError(f"more than {MAX_NAMES} distinct mesh attributes are read in one scene", builder.file,
                          f"{key}.name")
    builder.mesh_attributes.append(Record(name, values["scale"], channels, bool(raw), key))
    return ATTRIBUTE - (len(builder.mesh_attributes) - 1)


def bind_shape(builder, bsdf, attributes, sid, key):
    """The attributes of shape `sid` that its BSDF row `bsdf` (and its nested rows) read, checked as Mitsuba
    evaluates them: {name: (V or F, C) float32}, or None when it reads none. Registers the parameter names
    ``<sid>.<name>``."""
    rows, stack = set(), [bsdf]
    while stack:
        r = stack.pop()
        if r not in rows:
            rows.add(r)
            stack.extend(builder.bsdfs[r].children)
    recs = [builder.mesh_attributes[ATTRIBUTE - t] for r in sorted(rows) for t in builder.bsdfs[r].tex
            if t <= ATTRIBUTE]
    if not recs:
        return None
    out = {}
    for rec in recs:
        a = attributes.get(rec.name)
        if a is None:
            have = ", ".join(sorted(attributes)) or "none"
            raise ConfigError(f"the mesh has no attribute '{rec.name}' (read by {rec.key}; it has: {have})",
                              builder.file, key)
        c = a.shape[1]
        if c not in (1, 3) or (rec.channels == 1 and c != 1):
            raise ConfigError(f"attribute '{rec.name}' has {c} channels; {rec.key} reads "
                              f"{'1' if rec.channels == 1 else '1 or 3'}", builder.file, key)
        if c == 3 and not rec.raw and "color" not in rec.name and builder.variant.startswith("spectral"):
            raise ConfigError(f"attribute '{rec.name}' has 3 channels but no 'color' in its name: Mitsuba's spectral "
                              f"variants read its values as spectral-model coefficients (rename it *color*)",
                              builder.file, key)
        out[rec.name] = np.ascontiguousarray(a, np.float32)
    for name in out:
        pname = f"{sid}.{name}"
        if pname in builder.names:
            raise ConfigError(f"duplicate parameter name '{pname}' (ids must be unique)", builder.file, key)
        builder.names.add(pname)
    return out


# -- scene side ------------------------------------------------------------------------------------
def add_parameters(params, desc):
    """The pool parameters ``<shape id>.<name>`` of the attributes the scene's textures read."""
    for s in desc.shapes:
        for name, a in (s.attributes or {}).items():
            params.add(f"{s.id}.{name}", a, kind="attribute", file=desc.file)


def carry(desc, params):
    """Keep the attributes' current parameter values in the description (before it is built again)."""
    for s in desc.shapes:
        for name in s.attributes or {}:
            s.attributes[name] = params[f"{s.id}.{name}"]


def arrays(a, desc, params, starts, inv):
    """Device arrays (module doc): atex_attr, atex_scale, shape_attr_off, shape_attr_code, tri_face (scenes with
    attributes; otherwise scene/triangles.gather's -1), and the vertex
    indices in a["tri_code"] of the shapes with attributes (triangles in BVH order: inv maps a shape's face
    starts[s] + f to its row)."""
    recs = desc.mesh_attributes
    names = sorted({r.name for r in recs})
    a["atex_attr"] = np.array([names.index(r.name) for r in recs] or [0], np.int32)
    a["atex_scale"] = np.array([r.scale for r in recs] or [1.0], np.float32)
    ns = max(len(desc.shapes), 1)
    off = np.full((ns, MAX_NAMES), -1, np.int32)
    code = np.zeros((ns, MAX_NAMES), np.int32)
    a["shape_attr_off"], a["shape_attr_code"] = off, code
    if not recs:
        return                 # tri_face: -1 everywhere (scene/triangles.gather)
    tri_face = np.full(len(inv), -1, np.int32)
    for si, s in enumerate(desc.shapes):
        if not s.attributes:
            continue
        rows = inv[starts[si]:starts[si] + len(s.faces)]
        a["tri_code"][rows] = s.faces
        tri_face[rows] = np.arange(len(s.faces), dtype=np.int32)
        for name, v in s.attributes.items():
            j = names.index(name)
            off[si, j] = params.slot(f"{s.id}.{name}").offset
            code[si, j] = v.shape[1] | (FACE if name.startswith("face_") else 0)
    a["tri_face"] = tri_face


# -- device side -----------------------------------------------------------------------------------
def enabled(st):
    """Compile time: whether kernels on storage st read attribute textures (scene/storage.py: a storage has them
    once a scene of the process needed them; the others compile without this code)."""
    return getattr(st, "mesh_attributes", False)


@ti.func
def is_attribute(tid):
    return tid <= ATTRIBUTE


@ti.func
def corners(st: ti.template(), tid, tri, bary):
    """(pool offsets ivec3, weights vec3, channels) of attribute texture tid on triangle tri at barycentrics
    bary = (b1, b2): a vertex attribute's three corner values with scale · (1 − b1 − b2, b1, b2), a face
    attribute's value with (scale, 0, 0) (weights 0 where the shape lacks the attribute)."""
    j = ATTRIBUTE - tid
    s = st.tri_shape[tri]
    a = st.atex_attr[j]
    o0 = st.shape_attr_off[s, a]
    code = st.shape_attr_code[s, a]
    c = code & 3
    o = ivec3(0)
    w = vec3(0.0)
    if o0 >= 0:
        scale = st.atex_scale[j]
        if code & FACE:
            o = ivec3(o0 + st.tri_face[tri] * c)
            w = vec3(scale, 0.0, 0.0)
        else:
            o = o0 + st.tri_code[tri] * c
            w = scale * vec3(1.0 - bary[0] - bary[1], bary[0], bary[1])
    return o, w, c


@ti.func
def _sum(st: ti.template(), o, w, c, tangent: ti.template()):
    """Σ_i w_i value_i (vec3; a 1-channel value replicated); tangent: of forward mode's direction instead."""
    res = vec3(0.0)
    for i in ti.static(range(3)):
        if w[i] != 0.0:
            if ti.static(tangent):
                res += w[i] * pool.direction(st, o[i], c)
            else:
                res += w[i] * pool.value(st, o[i], c)
    return res


@ti.func
def eval_vec3(st: ti.template(), tid, tri, bary):
    """The attribute as raw data (vec3): Mitsuba's eval_3."""
    o, w, c = corners(st, tid, tri, bary)
    return _sum(st, o, w, c, False)


@ti.func
def eval_vec3_tangent(st: ti.template(), tid, tri, bary):
    o, w, c = corners(st, tid, tri, bary)
    return _sum(st, o, w, c, True)


@ti.func
def eval_vec3_adjoint(st: ti.template(), tid, tri, bary, d):
    """Adjoint of eval_vec3: value_i += w_i d (summed over the channels of a 1-channel attribute)."""
    o, w, c = corners(st, tid, tri, bary)
    for i in ti.static(range(3)):
        if w[i] != 0.0:
            pool.add_gradient(st, o[i], c, w[i] * d)


@ti.func
def eval_spectrum(st: ti.template(), tid, tri, bary, lam):
    """The attribute as a colour at the path's wavelengths lam (Mitsuba's eval): Σ_i w_i S(value_i, λ), S the
    variant's reflectance upsampling (linear in rgb and mono, where it is applied once to the sum); a 1-channel
    attribute is a grey (the same value at every wavelength)."""
    o, w, c = corners(st, tid, tri, bary)
    res = variants.spec(0.0)
    if ti.static(variants.spectral()):
        for i in range(3):             # a runtime loop: one upsampling in the megakernel
            if w[i] != 0.0:
                v = pool.value(st, o[i], c)
                if c == 1:
                    res += variants.spec(w[i] * v[0])
                else:
                    res += w[i] * variants.reflectance(v, lam)
    else:
        res = variants.reflectance(_sum(st, o, w, c, False), lam)
    return res


@ti.func
def eval_spectrum_adjoint(st: ti.template(), tid, tri, bary, lam, d):
    """Adjoint of eval_spectrum (d: the walk's colour)."""
    o, w, c = corners(st, tid, tri, bary)
    if ti.static(variants.spectral()):
        for i in ti.static(range(3)):
            if w[i] != 0.0:
                g = vec3(0.0)
                if c == 1:
                    g = vec3(d.sum(), 0.0, 0.0)
                else:
                    g = variants.reflectance_adjoint(pool.value(st, o[i], c), lam, d)
                pool.add_gradient(st, o[i], c, w[i] * g)
    else:
        g = variants.reflectance_adjoint(vec3(0.0), lam, d)     # linear: independent of the value
        for i in ti.static(range(3)):
            if w[i] != 0.0:
                pool.add_gradient(st, o[i], c, w[i] * g)
