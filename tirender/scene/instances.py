"""Mitsuba's ``shapegroup`` and ``instance`` (src/render/shapegroup.cpp, src/shapes/instance.cpp).

A shape group holds shapes that are not visible on their own; each instance places the whole group with its
own ``to_world`` (applied after each member's ``to_world``, in the group's space). In a scene file:

    shapes:
      - {type: shapegroup, id: tree, shapes: [{type: ply, filename: trunk.ply, bsdf: bark}, ...]}
      - {type: instance, id: tree1, shapegroup: tree, to_world: {translate: [2, 0, 0]}}
      - {type: instance, shapegroup: tree}                     # id: shape<index>

As in Mitsuba: a group cannot hold another group, an instance or an emitter; an instance names one group (by
id, or the group inline). A member's inline BSDF is one BSDF for all instances (named ``<group id>.<member
id>``, its parameters ``<group id>.<member id>.<name>``), as Mitsuba's group holds one BSDF object.

**Stored once** (a two-level BVH): a group's shapes are built once, in the group's space (ids ``<group id>.<member
id>``; member id: its ``id``, else ``shape<index in the group>``), under a tree of their own; each instance is one
box primitive of the scene's top-level tree with its transform (core/implicit.py), so an instance costs O(1)
memory whatever the group holds; the image is Mitsuba's. A group's members are not differentiable one by one
(``differentiable: true`` inside a group is refused); an **instance** with ``differentiable: true`` is flattened
into world-space copies (ids ``<instance id>.<member id>``) that move as one rigid-plus-scale body (scene/deform.py,
one pivot for all its shapes: the centre of its bounding box): parameters ``<instance id>.translation``,
``.rotation``, ``.scale``, ``.uniform_scale`` and ``.vertex_positions`` (the copy's vertices, its shapes' in
order), through the geometry gradients (edges, attached vertices). Groups holding height fields or curves (whose
geometry moves) are flattened too.
"""
import numpy as np

from ..errors import ConfigError
from ..schema import boolean, check_keys
from .transforms import parse_transform

GROUP_KEYS = {"type", "id", "shapes"}
INSTANCE_KEYS = {"type", "id", "shapegroup", "to_world", "differentiable"}
GROUP = "_instance"    # the key expand puts on a differentiable instance's copies (its id; parse_scene reads it)
PROTO = "_group"       # the key on a placed group's members (the group id; parse_scene reads it)
MOVING = ("heightfield", "bsplinecurve", "linearcurve")   # members whose geometry moves: their groups are flattened


def _group(spec, gid, file, key, bsdfs):
    """The members of a shapegroup spec -> [(member id, member spec with its inline BSDF hoisted)]."""
    check_keys(spec, GROUP_KEYS, file, key)
    members = spec.get("shapes")
    if not isinstance(members, list) or not members:
        raise ConfigError("a shapegroup needs a non-empty list 'shapes'", file, f"{key}.shapes")
    out, seen = [], set()
    for j, m in enumerate(members):
        mkey = f"{key}.shapes[{j}]"
        if not isinstance(m, dict):
            raise ConfigError("expected a mapping", file, mkey)
        t = m.get("type")
        if t in ("shapegroup", "instance"):
            raise ConfigError(f"a shapegroup cannot hold a {t} (nested instancing is not permitted, as in Mitsuba)",
                              file, f"{mkey}.type")
        if m.get("emitter") is not None:
            raise ConfigError("instancing of emitters is not supported (as in Mitsuba): put the emitting shape "
                              "outside the shapegroup", file, f"{mkey}.emitter")
        if m.get("differentiable"):
            raise ConfigError("shapes inside a shapegroup are not differentiable (instances are flattened copies)",
                              file, f"{mkey}.differentiable")
        mid = str(m.get("id", f"shape{j}"))
        if mid in seen:
            raise ConfigError(f"duplicate shape id '{mid}' in shapegroup '{gid}'", file, f"{mkey}.id")
        seen.add(mid)
        m = dict(m)
        if isinstance(m.get("bsdf"), dict):            # one BSDF for every instance of this member
            bid = f"{gid}.{mid}"
            if bid in bsdfs:
                raise ConfigError(f"BSDF id '{bid}' (this member's inline BSDF) is already defined", file,
                                  f"{mkey}.bsdf")
            bsdfs[bid] = m["bsdf"]
            m["bsdf"] = bid
        out.append((mid, m))
    return out


def expand(shapes, bsdfs, file=None):
    """Scene-file shapes with groups and instances -> (the shapes to build: [(index, spec)], bsdfs, placements).

    ``index`` is the entry's position in ``shapes`` (default ids ``shape<index>`` stay those of a scene without
    groups). A group that is placed once or more by instances that are not differentiable is built once, in its own
    space: its members are specs with ids ``<group id>.<member id>``, the member's own ``to_world`` and ``PROTO``
    = the group id; each such instance is a placement (instance id, group id, 4x4 to_world). A differentiable
    instance, and every instance of a group holding a height field or a curve (their geometry moves), is flattened
    into copies with ids ``<instance id>.<member id>`` and the composed to_world. ``bsdfs`` is a new mapping with
    the groups' inline BSDFs added."""
    bsdfs = dict(bsdfs or {})
    groups = {}
    for i, s in enumerate(shapes):
        if isinstance(s, dict) and s.get("type") == "shapegroup":
            gid = s.get("id")
            if not isinstance(gid, str) or not gid:
                raise ConfigError("a shapegroup needs an 'id' (instances refer to it)", file, f"shapes[{i}].id")
            if gid in groups:
                raise ConfigError(f"duplicate shapegroup id '{gid}'", file, f"shapes[{i}].id")
            groups[gid] = _group(s, gid, file, f"shapes.{gid}", bsdfs)
    if not groups and not any(isinstance(s, dict) and s.get("type") == "instance" for s in shapes):
        return list(enumerate(shapes)), bsdfs, []
    out, placements, built = [], [], set()
    for i, s in enumerate(shapes):
        if not isinstance(s, dict) or s.get("type") not in ("shapegroup", "instance"):
            out.append((i, s))
            continue
        if s["type"] == "shapegroup":
            continue
        iid = str(s.get("id", f"shape{i}"))
        key = f"shapes.{iid}"
        check_keys(s, INSTANCE_KEYS, file, key)
        g = s.get("shapegroup")
        if isinstance(g, dict) and g.get("type") == "shapegroup":
            gid = str(g.get("id", iid))
            members = _group(g, gid, file, f"{key}.shapegroup", bsdfs)
        elif isinstance(g, str) and g in groups:
            gid, members = g, groups[g]
        else:
            known = ", ".join(groups) or "none"
            raise ConfigError(f"an instance needs 'shapegroup': the id of a shapegroup (defined: {known}) or one "
                              f"inline, got {g!r}", file, f"{key}.shapegroup")
        m_inst = parse_transform(s.get("to_world"), file, f"{key}.to_world")
        diff = boolean(s.get("differentiable", False), file, f"{key}.differentiable")
        if not diff and not any(m.get("type") in MOVING for _, m in members):
            if abs(np.linalg.det(m_inst[:3, :3])) < 1e-30:
                raise ConfigError("to_world is singular", file, f"{key}.to_world")
            if gid not in built:                       # the group's geometry, once, in its own space
                built.add(gid)
                out.extend((i, dict(m, id=f"{gid}.{mid}", **{PROTO: gid})) for mid, m in members)
            placements.append((iid, gid, m_inst))
            continue
        for mid, m in members:
            m_member = parse_transform(m.get("to_world"), file, f"{key}.{mid}.to_world")
            copy = dict(m, id=f"{iid}.{mid}", to_world=(m_inst @ m_member).tolist())
            if diff:
                if m.get("type") == "heightfield":
                    raise ConfigError("a differentiable instance cannot hold a heightfield (its geometry is its "
                                      "height texture)", file, f"{key}.differentiable")
                if m.get("type") == "sdfgrid":
                    raise ConfigError("a differentiable instance cannot hold an sdfgrid (its geometry is its grid: "
                                      "make the sdfgrid shape differentiable)", file, f"{key}.differentiable")
                copy.update({"differentiable": True, GROUP: iid})
                if m.get("type") == "sphere" and "resolution" not in m:
                    copy["resolution"] = 64       # moves with the instance's mesh (an analytic sphere moves alone)
            out.append((i, copy))
    return out, bsdfs, placements
