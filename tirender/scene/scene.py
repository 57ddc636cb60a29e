"""Scene: a parsed description packed into device fields, its parameter pool and BVH.

``Scene(desc, integrator)`` builds the numpy arrays (triangles in BVH order, materials, emitters, textures)
once; ``bind()`` uploads them into the shared :class:`Storage` (re-uploading only when another
scene used the storage in between, or when parameters changed on the host).
"""
import warnings

import numpy as np

from .. import mesh_attribute, variants
from ..backend import ensure_init
from ..bsdfs import registry as bsdf_registry
from ..emitters import registry as emitter_registry
from ..emitters.base import INFINITE, SURFACE
from ..params import ParameterPool
from ..sensors import registry as sensor_registry
from ..textures import TEX_VOLUME
from .mitsuba_xml import param_aliases
from .bvh_build import EMPTY, build_wide, refit_device
from .description import SceneDescription
from .implicit import device_rows as implicit_rows
from .toplevel import build_two_level, groups_of, instance_boxes
from .storage import Storage, VolumeTextureView, padded
from .triangles import Triangles, gather, write_rows


def shading_kind(shape):
    """Its storage row's shape_smooth (core/interaction.py): FLAT without normals, SMOOTH_BENT for a curve's
    tube (its normals bent at the shading horizon, as Mitsuba's round curve is shaded to its silhouette),
    else SMOOTH."""
    from ..core.interaction import FLAT, SMOOTH, SMOOTH_BENT     # after init (core.math fixes the float type)
    if shape.normals is None:
        return FLAT
    return SMOOTH_BENT if shape.curve is not None else SMOOTH

RAY_EPS = 2e-5


def _row(values, n, fill):
    """values padded with `fill` to length n (one row of a per-model table)."""
    return list(values) + [fill] * (n - len(values))


def bsdf_levels(rows, roots):
    """Per nesting depth, the bitmask of BSDF models reachable from the rows `roots` (the BSDFs
    shapes use): levels[0] the roots' models, levels[1] their children's, ..."""
    levels = []
    stack = [(r, 0) for r in set(roots)]
    seen = set()
    while stack:
        r, d = stack.pop()
        if (r, d) in seen:
            continue
        seen.add((r, d))
        while len(levels) <= d:
            levels.append(0)
        levels[d] |= 1 << rows[r].tag
        stack.extend((c, d + 1) for c in rows[r].children)
    return tuple(levels) or (1 << bsdf_registry.BY_NAME["diffuse"].TAG,)


def _tri_codes(a, n):
    """a["tri_code"] (per triangle 3 ints, -1: unused), created when first needed (height fields,
    differentiable meshes, mesh attributes); scenes without leave it to triangles.gather's -1."""
    if "tri_code" not in a:
        a["tri_code"] = np.full((n, 3), -1, np.int32)


def _root_box(box_min, box_max, child, count):
    """(lo, hi) float64 (3,) of a wide BVH's root node (its child boxes (3 * WIDTH,), children, counts): the
    union of its used child slots (an empty one's point box EMPTY left out: scene/bvh_build._refit_level)."""
    lo0, hi0 = np.asarray(box_min).reshape(3, -1), np.asarray(box_max).reshape(3, -1)
    used = ((np.asarray(count) > 0) | (np.asarray(child) > 0)) & ~((lo0[0] == EMPTY) & (hi0[0] == EMPTY))
    if not used.any():
        return np.zeros(3), np.zeros(3)
    lo = np.asarray(box_min).reshape(3, -1)[:, used].astype(np.float64)
    hi = np.asarray(box_max).reshape(3, -1)[:, used].astype(np.float64)
    return lo.min(1), hi.max(1)


def _bounding_sphere(points):
    """(centre, radius) of the bounding box of points (N, 3)."""
    pts = np.asarray(points, np.float64)
    lo, hi = pts.min(0), pts.max(0)
    return tuple((lo + hi) / 2), max(float(np.linalg.norm(hi - lo)) / 2, 1e-6)


class Scene:
    """A renderable, differentiable scene.

    Attributes: ``params`` (ParameterPool: names, shapes, bounds; numpy get/set), ``sensors``
    (list of description.Sensor), ``integrator`` (dict), ``bsdf_levels`` (per nesting depth, the
    bitmask of BSDF models used: bsdfs.registry.dispatch specialises kernels to it), ``em_mask``
    (bitmask of the emitter models used), ``n_triangles``, ``bvh_seconds``, ``bounding_sphere`` ((centre,
    radius) of the geometry: where light tracing starts the rays of emitters at infinity), ``sensor_params``
    (the cameras' NonDifferentiable parameters by Mitsuba's names, ``<sensor id>.x_fov`` etc.: sensors/
    registry.SensorParameters; ``params[name]`` reads and writes them too).
    """

    def __init__(self, desc: SceneDescription, integrator):
        import time
        ensure_init()
        variants.prepare()
        self._storage = None
        self._host_dirty = False     # params changed on the host, upload before the next kernel
        self._device_dirty = False   # params changed on the device (optimizer), download before reading
        self._env_dirty = False      # an environment map changed: rebuild its sampling distribution
        self._geometry_dirty = False  # heights or mesh parameters changed: move triangles, refit the BVH
        self._geometry_changed = None  # which geometry parameters (a set of names; None: all of them)
        self.heightfield_params = ()  # names of the height textures (scene/heightfield.py)
        self.deformables = []         # differentiable meshes (scene/deform.py)
        self.deform_params = ()       # their parameter names
        self.sdf_params = ()          # the differentiable SDF grids' values (scene/sdf_body.py)
        self.desc = desc
        self.integrator = dict(integrator)   # validated (tirender.integrators.registry.parse)
        # a BSDF slot reads a volume texture (bind returns the storage's VolumeTextureView)
        self.volume_textures = any(t >= 0 and desc.textures[t].flags & TEX_VOLUME for b in desc.bsdfs for t in b.tex)
        self.sensors = desc.sensors
        for w in desc.warnings:
            warnings.warn(w, stacklevel=3)
        # ---- parameters: every texture is a pool slice ----
        self.params = ParameterPool()
        self._tex_param = []
        for tex in desc.textures:
            val = tex.data.reshape(-1) if tex.constant else tex.data
            if tex.constant and tex.data.shape[2] == 1:
                val = tex.data.reshape(1)
            kind = "rgb" if tex.constant else ("grid" if tex.data.ndim == 4 else "texture")
            info = self.params.add(tex.name, val, tex.lo, tex.hi, kind=kind, file=desc.file)
            self._tex_param.append(info)
        self._deformable_params(desc)
        mesh_attribute.add_parameters(self.params, desc)
        self.params.aliases = param_aliases(desc)
        self._camera_rows, self._camera_links = sensor_registry.device_list(self.sensors)
        self.sensor_params = sensor_registry.SensorParameters(self._camera_rows, self._sensor_changed)
        self.params.extra = self.sensor_params
        self.params.on_change = self._param_changed
        self.params.before_read = self._pull_params
        # ---- geometry: the triangles (kept compactly, written to the device in BVH order: triangles.gather)
        shapes = desc.shapes or []
        # instances (scene/toplevel.py): each placed group's shapes once, in its space; one box per instance
        gids, shape_group = groups_of(shapes, desc.placements)
        boxes = instance_boxes(shapes, desc.placements, shape_group, len(gids)) if gids else []
        tri = Triangles(shapes + boxes)
        starts = tri.starts
        self.n_triangles = n0 = len(tri)
        if not n0:   # emitter-only scene: one invisible degenerate triangle far away keeps the BVH valid
            tri.pos = np.full((1, 3), 1e30, np.float32)
            tri.nrm, tri.uv = np.zeros((1, 3), np.float32), np.zeros((1, 2), np.float32)
            tri.face, tri.shape, tri.vfirst = np.zeros((1, 3), np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32)
        t0 = time.perf_counter()
        roots = []
        if boxes:
            tri_group = np.concatenate([shape_group, np.full(len(boxes), -1)])[tri.shape]
            bvh, top_wide, roots = build_two_level(tri.pos, tri.corners(), tri_group, len(gids))
        else:
            bvh = build_wide(tri.pos, tri.corners())
            top_wide = bvh.wide
        self.bvh = bvh
        self.bvh_seconds = time.perf_counter() - t0
        order = tri.order = bvh.prim_order
        self._tri = tri
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order), dtype=order.dtype)
        a = {}
        self._heightfield_arrays(a, shapes, starts, order)
        self._deformable_arrays(a, shapes, starts, inv)
        if any(x.attributes for x in shapes):
            _tri_codes(a, len(inv))
        mesh_attribute.arrays(a, desc, self.params, starts, inv)
        wide = bvh.wide
        self._wide = top_wide                 # refits move the top-level tree (scene/toplevel.py)
        a["wnode_min"], a["wnode_max"] = wide.box_min, wide.box_max
        a["wnode_child"], a["wnode_count"] = wide.child, wide.count
        nb = len(boxes)                       # the instance boxes' rows: no BSDF, emitter or media of their own
        a["shape_bsdf"] = np.array([s.bsdf for s in shapes] + [0] * nb or [0], np.int32)
        a["shape_emitter"] = np.array([s.emitter for s in shapes] + [-1] * nb or [-1], np.int32)
        a["shape_smooth"] = np.array([shading_kind(s) for s in shapes] + [0] * nb or [0], np.int32)
        a["shape_med_int"] = np.array([s.interior for s in shapes] + [-1] * nb or [-1], np.int32)
        a["shape_med_ext"] = np.array([s.exterior for s in shapes] + [-1] * nb or [-1], np.int32)
        index = {g: i for i, g in enumerate(gids)}
        placed = [(m, roots[index[g]]) for _, g, m in desc.placements]
        geo_rows, geo_counts = implicit_rows(shapes, placed)    # quadrics, SDF grids, instances (scene/implicit.py)
        self._implicit_records(geo_rows)
        a.update(geo_rows)
        bs = desc.bsdfs or []
        a["bsdf_type"] = np.array([b.tag for b in bs] or [0], np.int32)
        a["bsdf_flags"] = np.array([b.flags for b in bs] or [0], np.int32)
        n_tex, n_float, nc = bsdf_registry.table_widths()
        a["bsdf_tex"] = np.array([_row(b.tex, n_tex, -1) for b in bs] or [[-1] * n_tex], np.int32)
        a["bsdf_f"] = np.array([_row(b.floats, n_float, 0.0) for b in bs] or [[0.0] * n_float], np.float32)
        a["bsdf_child"] = np.array([_row(b.children, nc, 0) for b in bs] or [[0] * nc], np.int32)
        texs = desc.textures
        a["tex_offset"] = np.array([i.offset for i in self._tex_param] or [0], np.int32)
        a["tex_w"] = np.array([t.data.shape[-2] for t in texs] or [1], np.int32)
        a["tex_h"] = np.array([t.data.shape[-3] for t in texs] or [1], np.int32)
        a["tex_c"] = np.array([t.data.shape[-1] for t in texs] or [1], np.int32)
        a["tex_d"] = np.array([t.data.shape[0] if t.data.ndim == 4 else 1 for t in texs] or [1], np.int32)
        a["tex_bilinear"] = np.array([int(t.bilinear) for t in texs] or [1], np.int32)
        a["tex_wrap"] = np.array([t.wrap for t in texs] or [0], np.int32)
        ident = np.array([[1, 0, 0], [0, 1, 0]], np.float32)
        a["tex_uvm"] = np.array([t.to_uv if t.to_uv is not None else ident for t in texs] or [ident], np.float32)
        a["tex_lam"] = np.array([t.lam for t in texs] or [-1], np.int32)           # sampled spectra (textures.py)
        a["spec_tab"] = np.array(list(desc.spectra) or [0.0], np.float32)
        a["tex_flags"] = np.array([t.flags for t in texs] or [0], np.int32)
        vid = np.eye(3, 4, dtype=np.float32)
        a["tex_vol"] = np.array([t.to_local if t.to_local is not None else vid for t in texs] or [vid], np.float32)
        # ---- emitters ----
        ems = desc.emitters
        em_tri_start, em_tri_count, em_area, emtri_idx, emtri_cdf = [], [], [], [], []
        env = -1
        for ei, e in enumerate(ems):
            if e.flags & SURFACE:
                s = e.shape
                lo, hi = starts[s], starts[s] + len(shapes[s].faces)
                if shapes[s].implicit is not None:      # a quadric: one primitive, its area (emitters/area.py)
                    ar = np.array([shapes[s].implicit.area()])
                else:
                    p = shapes[s].positions[shapes[s].faces].astype(np.float64)
                    ar = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
                em_tri_start.append(len(emtri_idx))
                em_tri_count.append(hi - lo)
                em_area.append(ar.sum())
                emtri_idx.extend(inv[lo:hi])
                c = np.cumsum(ar) / ar.sum()
                c[-1] = 1.0
                emtri_cdf.extend(c)
            else:
                em_tri_start.append(0)
                em_tri_count.append(0)
                em_area.append(0.0)
            if e.flags & INFINITE:
                env = ei
        a["em_type"] = np.array([e.tag for e in ems] or [0], np.int32)
        em_tex, em_float = emitter_registry.table_widths()
        a["em_tex"] = np.array([_row(e.tex, em_tex, -1) for e in ems] or [[-1] * em_tex], np.int32)
        a["em_shape"] = np.array([e.shape for e in ems] or [-1], np.int32)
        a["em_tri_start"] = np.array(em_tri_start or [0], np.int32)
        a["em_tri_count"] = np.array(em_tri_count or [0], np.int32)
        a["em_area"] = np.array(em_area or [0], np.float32)
        a["em_pos"] = np.array([e.position for e in ems] or [(0, 0, 0)], np.float32)
        a["em_dir"] = np.array([e.direction for e in ems] or [(0, 0, 1)], np.float32)
        a["em_f"] = np.array([_row(e.floats, em_float, 0.0) for e in ems] or [[0.0] * em_float], np.float32)
        a["em_spec"] = np.array([e.spectrum for e in ems] or [0], np.int32)
        a["em_temp"] = np.array([e.temperature for e in ems] or [0.0], np.float32)
        a["em_tint"] = np.array([e.tint for e in ems] or [(1.0, 1.0, 1.0)], np.float32)
        rots = []
        for e in ems:
            m = e.to_world if e.to_world is not None else np.eye(4)
            r = m[:3, :3]
            # world -> emitter-local rotation (inverse of the orthonormalised to_world)
            u, _, vt = np.linalg.svd(r)
            rots.append((u @ vt).T)
        a["em_rot"] = np.array(rots or [np.eye(3)], np.float32)
        a["emtri_idx"] = np.array(emtri_idx or [0], np.int32)
        a["emtri_cdf"] = np.array(emtri_cdf or [1.0], np.float32)
        # emitters whose sampling distribution is built on the host from their first texture (envmap, projector)
        self._env_emitters = [i for i, e in enumerate(ems) if hasattr(e.model, "distribution")]
        a["em_dist"], a["env_dist"], select = self._emitter_distributions()
        # sensors: the models' rows (tirender/sensors), the films
        cams = self._camera_rows      # the sensors, then batches' children (sensors/batch.py)
        a.update(sensor_registry.device_rows(cams, self._camera_links))
        a["cam_stddev"] = np.array([s.stddev for s in cams], np.float32)
        a["cam_radius"] = np.array([s.radius for s in cams], np.float32)
        a["cam_w"] = np.array([s.width for s in cams], np.int32)
        a["cam_h"] = np.array([s.height for s in cams], np.int32)
        from ..core.film import FILTERS      # after init: core.math fixes the float type on import
        a["cam_filter"] = np.array([FILTERS[s.filter] for s in cams], np.int32)
        info_i = np.zeros(8, np.int32)
        info_i[0], info_i[1], info_i[2], info_i[3] = len(ems), env, self.n_triangles, select
        info_f = np.zeros(8, np.float32)
        lo, hi = _root_box(wide.box_min[0], wide.box_max[0], wide.child[0], wide.count[0])
        ext = float(np.abs(np.concatenate([lo, hi])).max()) if n0 else 1.0
        self.bounding_sphere = _bounding_sphere(np.stack([lo, hi])) if n0 else ((0.0, 0.0, 0.0), 1.0)
        info_f[0], info_f[1] = RAY_EPS, ext
        a["info_i"], a["info_f"] = info_i, info_f
        from ..media.spec import media_arrays
        a.update(media_arrays(desc.media))
        self._arrays = a
        extra = any(k.startswith("tri_") for k in a)      # per-triangle extras (storage.py: tri_extra)
        self.sizes = dict(tris=len(tri), xtris=len(tri) if extra else 0, wnodes=wide.n_nodes, shapes=len(a["shape_bsdf"]), bsdfs=len(a["bsdf_type"]),
                          textures=len(a["tex_w"]), pool=self.params.data.size + 2, emitters=len(a["em_type"]),
                          emtris=len(a["emtri_idx"]), envdist=len(a["env_dist"]), sensors=len(cams),
                          pixels=max(s.width * s.height for s in self.sensors), media=len(a["med_type"]),
                          hfs=len(a["hf_tex"]), atex=len(desc.mesh_attributes), spectra=len(a["spec_tab"]),
                          **geo_counts)
        self.bsdf_levels = bsdf_levels(bs, [s.bsdf for s in shapes])
        self.em_mask = 0
        for e in ems:
            self.em_mask |= 1 << e.tag
        if not self.em_mask:
            self.em_mask = 1 << emitter_registry.BY_NAME["area"].TAG
        if select >= 0:                 # unequal sampling weights: the kernels' choice by their CDF
            self.em_mask |= emitter_registry.WEIGHTED

    # -- height fields (scene/heightfield.py) ---------------------------------------------------
    def _heightfield_arrays(self, a, shapes, starts, order):
        """Device arrays of the height-field shapes (tri_hf, tri_code in BVH order; the hf_* table)."""
        n = len(order)
        tri_hf = np.full(n, -1, np.int32) if any(x.heightfield is not None for x in shapes) else None
        tri_code = np.full((n, 3), -1, np.int32) if tri_hf is not None else None
        rows = []
        for si, s in enumerate(shapes):
            hf = s.heightfield
            if hf is None:
                continue
            k = len(rows)
            lo = starts[si]
            tri_hf[lo:lo + len(hf["codes"])] = 2 * k + hf["top"].astype(np.int32)
            tri_code[lo:lo + len(hf["codes"])] = hf["codes"]
            rows.append(hf)
        if rows:
            a["tri_hf"], a["tri_code"] = tri_hf[order], tri_code[order]
        self.heightfield_params = tuple(self.desc.textures[hf["texture"]].name for hf in rows)
        a["hf_tex"] = np.array([hf["texture"] for hf in rows] or [0], np.int32)
        a["hf_w"] = np.array([hf["W"] for hf in rows] or [2], np.int32)
        a["hf_h"] = np.array([hf["H"] for hf in rows] or [2], np.int32)
        a["hf_zb"] = np.array([-hf["thickness"] for hf in rows] or [0.0], np.float32)
        a["hf_m"] = np.array([hf["to_world"][:3, :4] for hf in rows] or [np.eye(4)[:3]], np.float32)
        a["hf_nm"] = np.array([np.linalg.inv(hf["to_world"][:3, :3]).T for hf in rows] or [np.eye(3)], np.float32)
        if rows:
            self._geometry_moved()

    # -- differentiable meshes (scene/deform.py) ---------------------------------------------
    def _deformable_params(self, desc):
        """One Deformable per differentiable shape, or per differentiable instance (its shapes, scene/instances.py,
        merged: vertices and faces concatenated in shape order); ``d.members`` = [(shape index, vertex offset)]."""
        from .curves import CurveBody
        from .deform import Deformable
        from .sdf_body import SdfBody
        from .sphere_body import SphereBody
        bodies = {}                                   # name -> [shape indices], in the shapes' order
        for si, s in enumerate(desc.shapes or []):
            if s.differentiable:
                bodies.setdefault(s.group or s.id, []).append(si)
        for name, members in bodies.items():
            ss = [desc.shapes[si] for si in members]
            if ss[0].implicit is not None:     # an analytic sphere's centre and radius (sphere_body.py; a differentiable
                body = SdfBody if ss[0].differentiable == "sdf" else SphereBody   # instance's spheres are meshes:
                d = body(name, members[0], ss[0].implicit)      # scene/instances.py), an SDF grid's values (sdf_body.py)
                for pname, value, kind, lo in d.initial_values():
                    self.params.add(pname, value, lo=lo, kind=kind, file=desc.file)
                self.deformables.append(d)
                continue
            if ss[0].differentiable == "curve":            # its control points (scene/curves.py)
                d = CurveBody(name, *ss[0].curve)
                d.members = [(members[0], 0)]
                for pname, value, kind in d.initial_values(ss[0].curve[1]):
                    self.params.add(pname, value, kind=kind, file=desc.file)
                self.deformables.append(d)
                continue
            offsets = np.cumsum([0] + [len(s.positions) for s in ss])
            rest = np.concatenate([s.positions for s in ss])
            faces = np.concatenate([s.faces + o for s, o in zip(ss, offsets)])
            d = Deformable(name, faces, rest, all(s.normals is not None for s in ss),
                           sphere=len(ss) == 1 and not ss[0].group and ss[0].differentiable == "sphere")
            d.members = list(zip(members, offsets[:-1].tolist()))
            for pname, value, kind in d.initial_values(rest):
                self.params.add(pname, value, kind=kind, file=desc.file)
            self.deformables.append(d)
        self.deform_params = tuple(n for d in self.deformables for k, n in d.names().items() if k != "world")
        self.sdf_params = tuple(d.names()["grid"] for d in self.deformables if isinstance(d, SdfBody))

    def _deformable_arrays(self, a, shapes, starts, inv):
        """tri_dm (the derived slot's pool offset, -1 static) and tri_code (vertex indices) of the
        differentiable meshes' triangles, in BVH order."""
        if not self.deformables:
            return
        a["tri_dm"] = np.full(len(inv), -1, np.int32)
        _tri_codes(a, len(inv))
        for d in self.deformables:
            if d.analytic:                   # its primitives' rows; its record and slot: _implicit_records
                d.place(inv, starts[d.members[0][0]])
                continue
            d.tri_index = np.concatenate([inv[starts[si]:starts[si] + len(shapes[si].faces)] for si, _o in d.members])
            a["tri_dm"][d.tri_index] = self.params.slot(d.names()["world"]).offset
            a["tri_code"][d.tri_index] = np.concatenate([shapes[si].faces + o for si, o in d.members])
        if self.deformables:
            self._geometry_moved()

    def _implicit_records(self, geo_rows):
        """geo_slot (each record's pool offset, -1 static) for the differentiable analytic spheres (their derived
        slot) and SDF grids (their values); shape_geo (each shape's record, -1 for a mesh) kept for the boundary
        terms (integrators/edges.py)."""
        self.shape_geo = geo_rows["shape_geo"]
        if "geo_kind" not in geo_rows:
            return
        geo_rows["geo_slot"] = np.full(len(geo_rows["geo_kind"]), -1, np.int32)
        for d in self.deformables:
            if d.analytic:
                d.record = int(geo_rows["shape_geo"][d.members[0][0]])
                geo_rows["geo_slot"][d.record] = self.params.slot(d.names()[d.SLOT]).offset

    def _deform(self, st, changed=None):
        """Move the differentiable meshes' triangles to their parameters' positions (host, float64), and rewrite the
        analytic spheres' records and boxes: those with a parameter in `changed` (a set of names; None: all)."""
        get = self.params.__getitem__
        for d in self.deformables:
            if changed is not None and changed.isdisjoint(d.names().values()):
                continue
            if d.analytic:
                d.write(st, *d.state(get))
                continue
            P = d.positions(get)
            f = d.faces
            N = d.normals(P)[0][f] if d.smooth else None
            write_rows(st, d.tri_index, P[f], N)

    def deform_gradients(self, h):
        """Take the gradients kernels added into the derived slots of the pool-layout float64 array h
        to the differentiable meshes' parameters (in place; the slots are zeroed)."""
        get = self.params.__getitem__
        for d in self.deformables:
            if "world" not in d.names():     # an SDF grid: kernels add into its values directly
                continue
            i = self.params.slot(d.names()["world"])
            g = h[i.offset:i.offset + i.size]
            if not g.any():
                continue
            for name, gv in d.backward_slot(get, g).items():
                j = self.params.slot(name)
                h[j.offset:j.offset + j.size] += np.asarray(gv, np.float64).ravel()
            h[i.offset:i.offset + i.size] = 0.0

    def deform_tangents(self, v):
        """Fill the derived slots of the pool-layout direction v (forward mode) with the world
        positions' and normals' tangents (Ṗ, Ṅ) along v (in place)."""
        get = self.params.__getitem__
        for d in self.deformables:
            def dget(name):
                j = self.params.slot(name)
                return v[j.offset:j.offset + j.size]
            if "world" not in d.names():
                continue
            i = self.params.slot(d.names()["world"])
            v[i.offset:i.offset + i.size] = d.tangent_slot(get, dget)

    def _geometry_moved(self, name=None):
        """Note that geometry parameter `name` changed (None: any of them may have) for the next _update_geometry."""
        if name is None or (self._geometry_dirty and self._geometry_changed is None):
            self._geometry_changed = None
        else:
            self._geometry_changed = (self._geometry_changed if self._geometry_dirty else set()) | {name}
        self._geometry_dirty = True

    def _update_geometry(self, st):
        """Move the height fields and differentiable meshes whose parameters changed (_geometry_moved) from the pool
        and refit the BVH on the device (topology kept)."""
        from .heightfield import displace
        changed = self._geometry_changed if self._geometry_dirty else None
        if self.heightfield_params and (changed is None or not changed.isdisjoint(self.heightfield_params)):
            displace(st)
        if self.deformables:
            self._deform(st, changed)
        refit_device(st, self._wide)
        lo, hi = _root_box(st.wnode_min[0].to_numpy(), st.wnode_max[0].to_numpy(), self._wide.child[0],
                           self._wide.count[0])
        self.bounding_sphere = _bounding_sphere(np.stack([lo, hi]))
        self._geometry_dirty, self._geometry_changed = False, None

    def heightfield_mesh(self, index=0):
        """The displaced mesh of height field `index` (world space) as dict(positions (V, 3), faces
        (F, 3)): shared vertices — the W·H top vertices first in grid order (row j = v, column i = u),
        then the bottom's — for writing a .ply that could be fabricated."""
        self.bind()
        rows = [s for s in self.desc.shapes if s.heightfield is not None]
        s = rows[index]
        hf = s.heightfield
        lo = sum(len(x.faces) for x in self.desc.shapes[:self.desc.shapes.index(s)])
        inv = np.empty_like(self.bvh.prim_order)
        inv[self.bvh.prim_order] = np.arange(len(inv))
        k = inv[lo:lo + len(hf["codes"])]
        st = self._storage
        p0, e1, e2 = (getattr(st, n).to_numpy()[k] for n in ("tri_p0", "tri_e1", "tri_e2"))
        corners = np.stack([p0, p0 + e1, p0 + e2], 1)
        codes = hf["codes"].reshape(-1)
        key = (codes & 1) * (hf["W"] * hf["H"]) + (codes >> 1)          # top vertices first
        uniq, first, faces = np.unique(key, return_index=True, return_inverse=True)
        return dict(positions=corners.reshape(-1, 3)[first].astype(np.float32),
                    faces=faces.reshape(-1, 3).astype(np.int32))

    # -- parameters -------------------------------------------------------------------------
    def _param_changed(self, name):
        self._host_dirty = True
        if name in self._env_param_names():
            self._env_dirty = True
        if name in self.heightfield_params or name in self.deform_params:
            self._geometry_moved(name)

    def _pull_params(self):
        if self._device_dirty and self._storage is not None:
            n = self.params.data.size
            self.params.data[:] = self._storage.pool.to_numpy()[:n]
            self._device_dirty = False

    def write_param_device(self, name, src):
        """Write parameter `name` on the device, from `src`: a flat array of its float values that a
        Taichi kernel reads in place — a numpy array, or a torch tensor on the device Taichi runs on
        (CPU tensors with the CPU backend, CUDA tensors with CUDA: no host round trip). Checked on
        the device (finite, within the parameter's bounds): a ConfigError and nothing written
        otherwise. Returns False (nothing done) for environment maps and projector textures, whose
        sampling distribution is built on the host: set those through ``scene.params[name] = ...``."""
        from ..errors import ConfigError
        info = self.params.info(name)
        if info.name in self._env_param_names():
            return False
        if tuple(src.shape) != (info.size,):
            raise ConfigError(f"expected {info.size} values (flat), got shape {tuple(src.shape)}", key=info.name)
        st = self.bind()                        # host changes first, then this slice
        bad = st.write_pool(src, info.offset, info.lo, info.hi)
        if bad:
            raise ConfigError(f"{bad} value(s) are not finite or out of bounds [{info.lo:g}, {info.hi:g}]",
                              key=info.name)
        self._device_dirty = True               # the host copy is refreshed when read
        if info.name in self.heightfield_params or info.name in self.deform_params:
            self._geometry_moved(info.name)
            self._update_geometry(st)
        return True

    def _texture_values(self, tid):
        """The current values of texture tid, shaped as its data (H, W, C) (a constant: (1, 1, C))."""
        tex = self.desc.textures[tid]
        return np.asarray(self.params[tex.name]).reshape(tex.data.shape)

    def _env_param_names(self):
        return {self._tex_param[self.desc.emitters[e].tex[0]].name for e in self._env_emitters}

    def mark_device_params_changed(self):
        """Called after a kernel (optimizer step) wrote st.pool."""
        self._device_dirty = True
        if self.heightfield_params or self.deform_params:
            self._geometry_moved()

    # -- device -----------------------------------------------------------------------------
    def bind(self):
        """Make this scene the one in the shared storage; returns the storage (its VolumeTextureView when a BSDF
        reads a volume texture: the kernels' slot lookups then compile their 3D branch)."""
        st = Storage.acquire(self.sizes)
        if st.owner is not self:
            self.detach()                                   # (another storage than the last bind's)
            if st.owner is not None:
                st.owner.detach()
            self._attach(st, self._arrays)
        if self._host_dirty:
            self._push_params()
        if self._geometry_dirty:
            self._update_geometry(st)
        if self.volume_textures:
            return VolumeTextureView.of(st)
        return st

    def detach(self):
        """Leave the storage this scene holds, first pulling the parameters the device changed (an optimiser's
        steps) into the host copy: another scene, or a larger storage, takes its place; the next bind uploads."""
        st = self._storage
        if st is not None and st.owner is self:
            self._pull_params()
            st.owner = None
        self._storage = None

    def _emitter_distributions(self):
        """(em_dist, env_dist, select): the sampling distributions built on the host, one after another in env_dist
        (float32) — each model's ``distribution`` of its first texture (envmap, projector; em_dist[e]: where
        emitter e's starts) and, where the emitters' sampling weights differ, the CDF of the choice of an emitter
        (n + 1 entries from 0 to 1, at ``select``; -1: weights all equal, the choice uniform, registry.select)."""
        from ..errors import ConfigError
        ems = self.desc.emitters
        dist_off, dist = [], []
        n = 0
        for e in ems:
            if hasattr(e.model, "distribution"):
                d = e.model.distribution(self._texture_values(e.tex[0]))
                dist_off.append(n)
                dist.append(d)
                n += len(d)
            else:
                dist_off.append(0)
        select = -1
        w = np.array([e.sampling_weight for e in ems], np.float64)
        if len(w) and w.max() <= 0.0:
            raise ConfigError(f"every emitter has sampling_weight 0 ({len(w)} emitters): none could be chosen",
                              self.desc.file, "emitters")
        if len(w) and w.min() != w.max():
            cdf = np.concatenate([[0.0], np.cumsum(w / w.sum())])
            cdf[np.nonzero(w)[0][-1] + 1:] = 1.0         # (exactly: trailing weights 0 are never chosen)
            select = n
            dist.append(cdf.astype(np.float32))
        return (np.array(dist_off or [0], np.int32), np.concatenate(dist) if dist else np.zeros(1, np.float32),
                select)

    def _push_params(self):
        st = self._storage
        st.pool.from_numpy(padded(self.params.data, st.caps["pool"]))
        if getattr(self, "_env_dirty", False):
            st.env_dist.from_numpy(padded(self._emitter_distributions()[1], st.caps["envdist"]))
            self._env_dirty = False
        self._host_dirty = False

    def resize_texture(self, name, height, width):
        """Resample the bitmap parameter `name` to (height, width) (bilinear), e.g. for
        coarse-to-fine optimisation. Rebuilds the scene's device layout (parameter offsets change;
        kernels are reused when the storage capacities suffice)."""
        from ..textures import resample_texture
        self._resize(name, "texture", lambda data: resample_texture(data, int(height), int(width)))

    def resize_grid(self, name, resolution):
        """Resample the 3D grid parameter `name` (D, H, W, C) to `resolution` (n or (D, H, W)),
        trilinearly, e.g. for coarse-to-fine volume optimisation (like resize_texture)."""
        from ..media.grid import resample_grid
        self._resize(name, "grid", lambda data: resample_grid(data, resolution))

    def _resize(self, name, kind, resample):
        from ..errors import ConfigError
        if self.params.info(name).kind != kind:
            raise ConfigError(f"only {'bitmap textures' if kind == 'texture' else '3D grids'} can be resized "
                              f"this way", key=name)
        for tex in self.desc.textures:  # carry the current values of every parameter
            v = self.params[tex.name]
            tex.data = v.reshape(tex.data.shape) if not tex.constant else v.reshape(1, 1, -1)
            if tex.name == name:
                tex.data = resample(tex.data)
        mesh_attribute.carry(self.desc, self.params)
        self.desc.warnings = []
        old = self._storage
        prev = None
        if old is not None and old.owner is self:
            old.owner = None
            prev = self._arrays          # what the device holds now
        self.__init__(self.desc, self.integrator)
        if prev is not None:
            self._rebind_changed(old, prev)

    def _rebind_changed(self, st, prev):
        """After a resize: if the shared storage `st` still fits, upload only the arrays that differ from
        `prev` (the previous layout's, on the device) and the pool, instead of everything at the next
        bind (a texture stage change of the texture task: 0.14 s -> a few ms)."""
        if Storage.acquire(self.sizes) is not st or st.owner is not None:
            return
        self._attach(st, {name: arr for name, arr in self._arrays.items()
                          if name not in prev or prev[name].shape != arr.shape or prev[name].dtype != arr.dtype
                          or not np.array_equal(prev[name], arr)})

    def _attach(self, st, arrays):
        """Make this scene the owner of storage st: its triangles, `arrays` (the ones st does not hold yet)
        and the parameter pool."""
        gather(st, self._tri)
        st.upload({k: v for k, v in self._arrays.items() if k.startswith("tri_")})
        st.upload({k: v for k, v in arrays.items() if not k.startswith("tri_")})
        st.pool.from_numpy(padded(self.params.data, st.caps["pool"]))
        st.owner = self
        self._storage = st
        self._host_dirty = False
        self._env_dirty = False
        self._geometry_dirty = False
        if self.heightfield_params or self.deformables:
            self._geometry_moved()

    def host_arrays(self):
        """The numpy arrays this scene keeps on the host, by name (for memory accounting: benchmarks/memory.py): the
        device arrays it uploads at bind (``tri_*`` extras, BVH nodes, tables), its triangles (``triangles.*``: the
        shapes' vertices, normals, uvs and faces are views of these) and the BVH's triangle order."""
        out = dict(self._arrays)
        for k in ("pos", "nrm", "uv", "face", "shape", "vfirst"):
            out[f"triangles.{k}"] = getattr(self._tri, k)
        out["bvh.prim_order"] = self.bvh.prim_order
        return out

    def set_sensor_transform(self, sensor, to_world):
        """Move a camera: 4x4 camera-to-world (columns left, up, forward, origin; checked as the sensor's
        ``to_world`` parameter: no scale for perspective / thin lens). Cheap (no recompile). A batch (sensors/
        batch.py) moves as a rig: its first child to to_world, the others keeping their poses relative to it."""
        s = self.sensors[sensor]
        if not s.children:
            self.sensor_params[f"{s.id}.to_world"] = to_world
            return
        m = np.asarray(to_world, np.float64)
        delta = m @ np.linalg.inv(np.asarray(s.children[0].to_world, np.float64))
        for c in s.children:
            self.sensor_params[f"{c.id}.to_world"] = m if c is s.children[0] else delta @ np.asarray(c.to_world,
                                                                                                   np.float64)
        s.to_world = s.children[0].to_world

    def _sensor_changed(self, sensor):
        """A camera parameter changed (sensor_params): its device row, written in place (no kernel compiled)."""
        rows = sensor_registry.device_rows([self._camera_rows[sensor]])
        for name, v in rows.items():
            self._arrays[name][sensor] = v[0]
            if self._storage is not None:
                f = getattr(self._storage, name)
                f[sensor] = v[0].tolist() if v[0].ndim else v[0].item()

    def __repr__(self):
        return (f"Scene({self.desc.file or '<dict>'}: {self.n_triangles} triangles, {len(self.desc.bsdfs)} BSDFs, "
                f"{len(self.desc.emitters)} emitters, {len(self.sensors)} sensors, {len(self.params)} parameters)")
