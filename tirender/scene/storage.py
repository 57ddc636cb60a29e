"""Taichi fields that hold a scene on the device, with fixed capacities.

Kernels take the storage as a ``ti.template()`` argument, so they compile once per storage
object. Scenes of any structure that fit the capacities reuse the same storage (and the
compiled kernels): ``Storage.acquire(sizes)`` returns the first shared instance that fits, making a larger one
(new fields, one recompile) only when a scene fits none; the first stays for the scenes that fit it. Scenes with
quadrics, SDF grids or instances (FEATURES) share other instances per combination, so that the others never
compile that code.
"""
import numpy as np
import taichi as ti

from .. import backend
from ..bsdfs import registry as bsdfs
from ..core.fixed_point import N_SLOTS
from ..core.math import vec2, vec3
from ..core.view import StorageView
from ..emitters import registry as emitters
from ..media import MAJORANT_GRID
from ..mesh_attribute import MAX_NAMES as MESH_ATTRIBUTES
from .bvh import WIDTH

INFO_N_EMITTERS, INFO_ENV, INFO_N_TRIS = range(3)                     # st.info_i
INFO_RAY_EPS, INFO_SCENE_RADIUS, INFO_MARCH_STEP = 0, 1, 3   # st.info_f (2, 4: fixed-point scales)


GRAD_COPIES, GRAD_HOT = 4, 1 << 16   # a power of two; entries with copies
FEATURES = ("quads", "sdfv", "insts")   # capacities whose presence adds code to every kernel (core/implicit.py)
# counts that size no field, only switch code on (a storage holds any number of quadrics or instances: 1 = present),
# and the first capacity of kinds that are off (0) until a scene has one: a scene with one more SDF value or
# mesh-attribute texture than the last does not make a new storage (and recompile every kernel)
FLAGS = ("quads", "insts")
KEEP = 2                                # storages kept per FEATURES key (Storage.acquire)
PRESENT_MINIMUM = dict(sdfv=1 << 16, atex=64)


def _rows(key, n):
    """The rows a scene's count n of `key` takes in a storage (FLAGS: 1 if any)."""
    return min(n, 1) if key in FLAGS else n


def _cap(n, minimum):
    """Capacity for n rows: the next power of two (at least `minimum`); from 2^16 rows on, the next multiple
    of a sixteenth of it (at most 1/16 spare: the wide BVH of a 2 M triangle scene takes 40 MB, not 64)."""
    c = max(minimum, 1 if n > 0 else 0)
    while c < n:
        c *= 2
    if c > minimum and c >= 1 << 16:
        step = c >> 4
        c = max(minimum, -(-n // step) * step)
    return c


def has_extras(caps):
    """Whether a storage of capacities `caps` has the per-triangle extras (tri_hf, tri_code, tri_dm, tri_face) on every
    triangle row."""
    return caps["xtris"] >= caps["tris"]


def fits(caps, sizes):
    """Whether a scene of `sizes` (Scene.sizes: rows per field group; ``xtris`` > 0: it needs the per-triangle
    extras) fits a storage of capacities `caps`."""
    return (all(_rows(k, sizes.get(k, 0)) <= v for k, v in caps.items())
            and (has_extras(caps) or not sizes.get("xtris", 0)))


def capacities(sizes, current=None):
    """Capacities of a storage for a scene of `sizes`, at least the `current` storage's (capacities only grow: a
    process alternating between scenes settles on one storage); with per-triangle extras on every triangle row
    when the scene needs them."""
    caps = {}
    for k, m in Storage.MINIMUM.items():
        n = max(_rows(k, sizes.get(k, 0)), current[k] if current else 0)
        caps[k] = _cap(n, PRESENT_MINIMUM.get(k, m) if n else m)
    if sizes.get("xtris", 0):
        caps["xtris"] = caps["tris"]
    return caps


@ti.data_oriented
class Storage:
    # Generous minimum capacities (about 20 MB): most scenes fit the first storage, so its fields and
    # every kernel compiled against it (st is a template argument) are reused for the whole process.
    MINIMUM = dict(tris=1 << 15, xtris=1 << 15, wnodes=1 << 14, shapes=64, bsdfs=64, textures=256, pool=1 << 19, emitters=16,
                   emtris=1 << 12, envdist=1 << 14, sensors=16, pixels=256 * 256, media=16, hfs=8, atex=0,
                   spectra=1 << 10, geos=16, quads=0, sdfv=0, insts=0)
    _shared = {}      # per FEATURES key: its storages, the first made and the last (which holds every scene before it)

    def __init__(self, caps):
        self.caps = dict(caps)
        c = self.caps
        fb = ti.FieldsBuilder()
        f = self
        # triangles (in BVH order), 0: p0, e1 = p1 - p0, e2 = p2 - p0
        f.tri_p0, f.tri_e1, f.tri_e2 = (vec3.field() for _ in range(3))
        f.tri_n0, f.tri_n1, f.tri_n2 = (vec3.field() for _ in range(3))
        f.tri_uv0, f.tri_uv1, f.tri_uv2 = (vec2.field() for _ in range(3))
        f.tri_shape = ti.field(ti.i32)
        fb.dense(ti.i, c["tris"]).place(f.tri_p0, f.tri_e1, f.tri_e2, f.tri_n0, f.tri_n1, f.tri_n2,
                                         f.tri_uv0, f.tri_uv1, f.tri_uv2, f.tri_shape)
        # per-triangle extras, one row per triangle on a storage whose scenes have height fields, differentiable
        # meshes or mesh attributes (``tri_extra``; scenes of up to MINIMUM triangles always): kernels compiled
        # on a storage without them read -1 (scene/triangles.tri_hf, tri_dm) — 48 MB less for 2 M triangles.
        # height-field triangles (scene/heightfield.py): 2·field + top flag (-1: static), corner codes
        f.tri_hf = ti.field(ti.i32)
        f.tri_code = ti.Vector.field(3, ti.i32)
        # deformable-mesh triangles (scene/deform.py): pool offset of the shape's derived slot (-1:
        # static); tri_code then holds the corners' vertex indices (also for meshes with attributes)
        f.tri_dm = ti.field(ti.i32)
        # the triangle's face index in its shape (meshes with attributes, tirender/mesh_attribute.py)
        f.tri_face = ti.field(ti.i32)
        self.tri_extra = has_extras(c)
        fb.dense(ti.i, max(c["xtris"], 1)).place(f.tri_hf, f.tri_code, f.tri_dm, f.tri_face)
        # height fields: height texture, vertex grid, bottom level, object -> world (3x4), normal matrix
        f.hf_tex, f.hf_w, f.hf_h = (ti.field(ti.i32) for _ in range(3))
        f.hf_zb = ti.field(float)
        f.hf_m = ti.Matrix.field(3, 4, float)
        f.hf_nm = ti.Matrix.field(3, 3, float)
        fb.dense(ti.i, c["hfs"]).place(f.hf_tex, f.hf_w, f.hf_h, f.hf_zb, f.hf_m, f.hf_nm)
        # the 4-wide BVH the kernels traverse (scene/bvh.py: collapse)
        f.wnode_min, f.wnode_max = (ti.Vector.field(3 * WIDTH, float) for _ in range(2))
        f.wnode_child, f.wnode_count = (ti.Vector.field(WIDTH, ti.i32) for _ in range(2))
        fb.dense(ti.i, c["wnodes"]).place(f.wnode_min, f.wnode_max, f.wnode_child, f.wnode_count)
        f.shape_bsdf, f.shape_emitter, f.shape_smooth = (ti.field(ti.i32) for _ in range(3))
        f.shape_med_int, f.shape_med_ext = ti.field(ti.i32), ti.field(ti.i32)  # interior/exterior medium
        f.shape_geo = ti.field(ti.i32)      # the shape's record of non-mesh geometry (core/implicit.py), -1: a mesh
        fb.dense(ti.i, c["shapes"]).place(f.shape_bsdf, f.shape_emitter, f.shape_smooth, f.shape_med_int,
                                          f.shape_med_ext, f.shape_geo)
        # non-mesh geometry (core/implicit.py: layout): quadrics, SDF grids and instances; kernels compiled on a
        # storage whose capacities have none of a kind (quads, sdfv, insts: 0) leave that kind's code out
        self.quadrics = c["quads"] > 0
        self.sdf_grids = c["sdfv"] > 0
        self.instances = c["insts"] > 0
        f.geo_kind, f.geo_flags, f.geo_off, f.geo_slot = (ti.field(ti.i32) for _ in range(4))
        f.geo_res = ti.Vector.field(3, ti.i32)
        f.geo_to_obj, f.geo_to_world = ti.Matrix.field(3, 4, float), ti.Matrix.field(3, 4, float)
        f.geo_nm = ti.Matrix.field(3, 3, float)
        f.geo_c, f.geo_r = vec3.field(), ti.field(float)
        f.geo_ray = ti.Matrix.field(3, 4, float)     # world -> a quadric's canonical space (core/quadrics.ray)
        fb.dense(ti.i, max(c["geos"], 1)).place(f.geo_kind, f.geo_flags, f.geo_off, f.geo_slot, f.geo_res, f.geo_to_obj,
                                                f.geo_to_world, f.geo_nm, f.geo_c, f.geo_r, f.geo_ray)
        f.sdf_val = ti.field(float)
        fb.dense(ti.i, max(c["sdfv"], 1)).place(f.sdf_val)
        # mesh attribute textures and each shape's attributes (tirender/mesh_attribute.py); kernels compiled on a
        # storage without attribute textures (capacity 0: no scene of the process had one) leave their code out
        self.mesh_attributes = c["atex"] > 0
        f.atex_attr, f.atex_scale = ti.field(ti.i32), ti.field(float)
        fb.dense(ti.i, max(c["atex"], 1)).place(f.atex_attr, f.atex_scale)
        f.shape_attr_off, f.shape_attr_code = ti.field(ti.i32), ti.field(ti.i32)
        fb.dense(ti.ij, (c["shapes"], MESH_ATTRIBUTES)).place(f.shape_attr_off, f.shape_attr_code)
        # BSDFs (bsdfs/base.py): model tag, flags, texture slots, float constants, nested BSDFs
        f.bsdf_type, f.bsdf_flags = ti.field(ti.i32), ti.field(ti.i32)
        f.bsdf_tex, f.bsdf_f, f.bsdf_child = ti.field(ti.i32), ti.field(float), ti.field(ti.i32)
        fb.dense(ti.i, c["bsdfs"]).place(f.bsdf_type, f.bsdf_flags)
        fb.dense(ti.ij, (c["bsdfs"], bsdfs.N_TEX)).place(f.bsdf_tex)
        fb.dense(ti.ij, (c["bsdfs"], bsdfs.N_FLOAT)).place(f.bsdf_f)
        fb.dense(ti.ij, (c["bsdfs"], max(bsdfs.N_CHILD, 1))).place(f.bsdf_child)
        f.tex_offset, f.tex_w, f.tex_h, f.tex_c, f.tex_bilinear, f.tex_wrap = (ti.field(ti.i32) for _ in range(6))
        f.tex_d = ti.field(ti.i32)  # depth of 3D grids (media), 1 for 2D textures
        f.tex_uvm = ti.Matrix.field(2, 3, float)  # uv transform (Mitsuba's to_uv), uv' = A (u, v, 1)
        f.tex_lam = ti.field(ti.i32)   # a sampled spectrum's offset in spec_tab (-1: an RGB texture; textures.py)
        f.tex_flags = ti.field(ti.i32)            # textures.TEX_VOLUME | TEX_RAW
        f.tex_vol = ti.Matrix.field(3, 4, float)  # volumes: world -> local (unit cube), u = M (p, 1)
        fb.dense(ti.i, c["textures"]).place(f.tex_offset, f.tex_w, f.tex_h, f.tex_c, f.tex_bilinear, f.tex_wrap,
                                            f.tex_d, f.tex_uvm, f.tex_lam, f.tex_flags, f.tex_vol)
        # the scene's spectrum table: per sampled spectrum N and its N wavelengths (nm), constants also their values
        f.spec_tab = ti.field(float)
        fb.dense(ti.i, c["spectra"]).place(f.spec_tab)
        # parameters, gradients (float, for readout and the optimiser) and the deterministic
        # fixed-point accumulator the adjoint kernels atomically add into (see core/fixed_point.py)
        f.pool, f.grad, f.grad_fx = ti.field(float), ti.field(float), ti.field(ti.i64)
        fb.dense(ti.i, c["pool"]).place(f.pool, f.grad)
        # the fixed-point gradient and grad_copies - 1 more copies of its first grad_hot entries (core/pool.py:
        # contention of the atomics on parameters every thread adds into, which are small ones)
        self.grad_copies, self.grad_hot = GRAD_COPIES, min(c["pool"], GRAD_HOT)
        fb.dense(ti.i, c["pool"] + (self.grad_copies - 1) * self.grad_hot).place(f.grad_fx)
        # emitters (emitters/base.py): model tag, texture slots, shape triangles, position/direction/frame
        f.em_type, f.em_shape, f.em_tri_start, f.em_tri_count, f.em_dist = (ti.field(ti.i32) for _ in range(5))
        f.em_tex = ti.field(ti.i32)
        f.em_pos, f.em_dir = vec3.field(), vec3.field()
        f.em_area = ti.field(float)
        f.em_rot = ti.Matrix.field(3, 3, float)
        fb.dense(ti.i, c["emitters"]).place(f.em_type, f.em_shape, f.em_tri_start, f.em_tri_count,
                                            f.em_dist, f.em_pos, f.em_dir, f.em_area, f.em_rot)
        fb.dense(ti.ij, (c["emitters"], emitters.N_TEX)).place(f.em_tex)
        f.em_f = ti.field(float)
        fb.dense(ti.ij, (c["emitters"], emitters.N_FLOAT)).place(f.em_f)
        f.em_spec, f.em_temp, f.em_tint = ti.field(ti.i32), ti.field(float), vec3.field()   # its spectrum
        fb.dense(ti.i, c["emitters"]).place(f.em_spec, f.em_temp, f.em_tint)
        f.emtri_idx, f.emtri_cdf = ti.field(ti.i32), ti.field(float)
        fb.dense(ti.i, c["emtris"]).place(f.emtri_idx, f.emtri_cdf)
        f.env_dist = ti.field(float)
        fb.dense(ti.i, c["envdist"]).place(f.env_dist)
        f.cam_o, f.cam_left, f.cam_up, f.cam_fwd = (vec3.field() for _ in range(4))
        f.cam_tx, f.cam_ty, f.cam_stddev, f.cam_radius = (ti.field(float) for _ in range(4))
        f.cam_w, f.cam_h, f.cam_filter = (ti.field(ti.i32) for _ in range(3))
        fb.dense(ti.i, c["sensors"]).place(f.cam_o, f.cam_left, f.cam_up, f.cam_fwd, f.cam_tx, f.cam_ty,
                                           f.cam_stddev, f.cam_radius, f.cam_w, f.cam_h, f.cam_filter)
        # the sensor model (tirender/sensors: its tag, to_world's linear part, clip planes, principal point,
        # thin lens)
        f.cam_type = ti.field(ti.i32)
        f.cam_lin = ti.Matrix.field(3, 3, float)
        f.cam_near, f.cam_far, f.cam_aperture, f.cam_focus = (ti.field(float) for _ in range(4))
        f.cam_pp = vec2.field()
        f.cam_child = ti.Vector.field(2, ti.i32)     # a batch's (first child row, children): sensors/batch.py
        fb.dense(ti.i, c["sensors"]).place(f.cam_type, f.cam_lin, f.cam_near, f.cam_far, f.cam_aperture, f.cam_focus,
                                           f.cam_pp, f.cam_child)
        # film: (Σ w·rgb, Σ w) in fixed point; adjoint image and its per-pixel weight sum (fixed point)
        f.film = ti.Vector.field(4, ti.i64)
        f.adj = vec3.field()
        f.adj_w = ti.field(ti.i64)
        f.aux = ti.Vector.field(4, float)
        fb.dense(ti.i, c["pixels"]).place(f.film, f.adj, f.adj_w, f.aux)
        # participating media (tirender/media): type, coefficient volumes (texture indices), scale,
        # grid bbox, fixed majorant (a floor of the per-cell majorants, med_majgrid)
        f.med_type, f.med_flags, f.med_phase = (ti.field(ti.i32) for _ in range(3))
        f.med_sigma, f.med_albedo, f.med_g = (ti.field(ti.i32) for _ in range(3))
        f.med_scale, f.med_fixed_majorant = ti.field(float), ti.field(float)
        f.med_bmin, f.med_bmax = vec3.field(), vec3.field()
        fb.dense(ti.i, c["media"]).place(f.med_type, f.med_flags, f.med_phase, f.med_sigma, f.med_albedo, f.med_g,
                                         f.med_scale,
                                         f.med_fixed_majorant, f.med_bmin, f.med_bmax)
        f.med_majgrid = ti.field(float)      # per-cell majorants of grid media (media/medium.py)
        fb.dense(ti.ij, (c["media"], MAJORANT_GRID ** 3)).place(f.med_majgrid)
        f.info_i = ti.field(ti.i32)
        f.info_f = ti.field(float)
        fb.dense(ti.i, 8).place(f.info_i, f.info_f)
        # largest |value| added per launch into the film / the gradients (core/fixed_point.py)
        f.acc_max = ti.field(ti.i32)
        fb.dense(ti.i, 2 * N_SLOTS).place(f.acc_max)
        self._tree = fb.finalize()
        self.owner = None

    @classmethod
    def acquire(cls, sizes):
        """The shared storage for scenes with the code features of `sizes` (FEATURES: a scene without quadrics, SDF
        grids or instances keeps the storage, and the kernels, that leave their code out, however many scenes with
        them the process has seen): the first storage of that kind that fits. A scene that fits none gets a new one
        that holds it and every scene before it; the first storage stays for the scenes that fit it (with its
        compiled kernels: small scenes after a large one do not recompile), the one in between is released."""
        key = tuple(sizes.get(k, 0) > 0 for k in FEATURES)
        chain = cls._shared.setdefault(key, [])
        for st in chain:
            if fits(st.caps, sizes):
                return st
        st = Storage(capacities(sizes, chain[-1].caps if chain else None))
        if len(chain) == KEEP:
            old = chain.pop()
            if old.owner is not None:
                old.owner.detach()
        chain.append(st)
        return st

    def upload(self, arrays):
        """Write each named array into its field, rows past the array zeroed (as field.from_numpy of
        a zero-padded copy), with one kernel launch for all the i32 and float fields: Taichi compiles
        from_numpy once per field (about 10 ms each even from its kernel cache: 0.7 s for a scene's
        ~70 arrays at the first bind of a process); this kernel compiles once per set of fields."""
        fdt = backend.np_float()
        np_of = {ti.i32: np.int32, ti.f32: np.float32, ti.f64: np.float64}
        specs, parts, meta, sizes = [], {np.int32: [], fdt: []}, [], {np.int32: 0, fdt: 0}
        for name, arr in arrays.items():
            f = getattr(self, name)
            dt = np_of.get(f.dtype)
            if dt not in parts:                       # another dtype: Taichi's own upload
                f.from_numpy(padded(arr, f.shape[0], arr.dtype))
                continue
            a = np.ascontiguousarray(arr, dt)
            specs.append((name, dt is np.int32))
            meta.append((sizes[dt], a.shape[0]))
            parts[dt].append(a.ravel())
            sizes[dt] += a.size
        if not specs:
            return
        key = (tuple(specs), tuple(getattr(self, n).shape for n, _ in specs))
        kernel = _UPLOADERS.get(key)
        if kernel is None:
            kernel = _UPLOADERS[key] = _make_uploader(self, specs)
        ibuf = np.concatenate(parts[np.int32]) if parts[np.int32] else np.zeros(1, np.int32)
        fbuf = np.concatenate(parts[fdt]) if parts[fdt] else np.zeros(1, fdt)
        kernel(self, ibuf, fbuf, np.array(meta, np.int32).reshape(-1, 2))

    def write_pool(self, src, offset, lo, hi):
        """pool[offset : offset + n] <- src (a flat float array of n values the kernel reads in place:
        numpy, or a torch tensor on Taichi's device), if every value is finite and within [lo, hi]:
        returns the number of values that are not (0: written; else nothing was written)."""
        n = int(src.shape[0])
        bad = _count_outside(src, n, lo, hi)
        if bad == 0:
            _copy_into_pool(self, src, offset, n)
        return bad


@ti.data_oriented
class VolumeTextureView(StorageView):
    """The storage st as the kernels of a scene with volume textures (Mitsuba's ``volume`` texture in a BSDF
    slot, textures.TEX_VOLUME) see it: every attribute of st, and ``VOLUME_TEXTURES`` = True, the compile-time
    switch of the slot lookups' 3D branch (bsdfs/base.py; kernels of other scenes compile without it). One view
    per storage (``of``): kernels compile once against it."""

    VOLUME_TEXTURES = True
    ATTR = "volume_texture_view"
    tangent_view = None                   # its own forward-mode view (core/pool.Tangent.of), not the storage's

    def __setattr__(self, name, value):   # host state (launch.py: films, gradients) lives on the storage
        if name in ("base", "tangent_view"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.base, name, value)


@ti.kernel
def _count_outside(src: ti.types.ndarray(ndim=1), n: ti.i32, lo: ti.f64, hi: ti.f64) -> ti.i32:
    bad = 0
    for i in range(n):
        v = ti.cast(src[i], ti.f64)
        # NaN fails the comparisons; ±Inf (and what the f32 pool cannot hold) by the exponent bits,
        # immune to fast-math folding, also where the bounds are infinite
        inf = (ti.bit_cast(ti.cast(v, ti.f32), ti.i32) & 0x7F800000) == 0x7F800000
        if inf or not (v >= lo and v <= hi):
            bad += 1
    return bad


@ti.kernel
def _copy_into_pool(st: ti.template(), src: ti.types.ndarray(ndim=1), offset: ti.i32, n: ti.i32):
    for i in range(n):
        st.pool[offset + i] = src[i]


_UPLOADERS = {}


def _make_uploader(st, specs):
    """One kernel writing the fields `specs` [(name, is_int)] of storages laid out like st from a
    flat int32 and a flat float buffer; meta[k] = (offset of field k's values, its rows)."""
    ints = [_copier(st, k, name) for k, (name, i) in enumerate(specs) if i]
    floats = [_copier(st, k, name) for k, (name, i) in enumerate(specs) if not i]
    # static loops of at most 32 (Taichi warns about longer unrolls)
    ints = [ints[a:a + 32] for a in range(0, len(ints), 32)]
    floats = [floats[a:a + 32] for a in range(0, len(floats), 32)]

    rows = max(getattr(st, name).shape[0] for name, _ in specs)

    @ti.kernel
    def upload(st: ti.template(), ibuf: ti.types.ndarray(), fbuf: ti.types.ndarray(), meta: ti.types.ndarray()):
        for i in range(rows):   # one parallel loop (one task to compile), every field's row i
            for group in ti.static(ints):
                for copy in ti.static(group):
                    copy(st, ibuf, meta, i)
            for group in ti.static(floats):
                for copy in ti.static(group):
                    copy(st, fbuf, meta, i)
    return upload


def _copier(st, k, name):
    """ti.func writing row i of field `name` (scalar of rank 1 or 2, vector or matrix): the array's
    row while i < its rows, else 0."""
    f0 = getattr(st, name)
    cols = f0.shape[1] if len(f0.shape) == 2 else 1
    n = getattr(f0, "n", 1) if isinstance(f0, ti.MatrixField) else 0
    m = getattr(f0, "m", 1) if isinstance(f0, ti.MatrixField) else 0
    vector = isinstance(f0, ti.MatrixField) and (m == 1 or getattr(f0, "ndim", 2) == 1)

    @ti.func
    def copy(st: ti.template(), buf: ti.template(), meta: ti.template(), i):
        f = ti.static(getattr(st, name))
        if i < ti.static(f.shape[0]):
            off = meta[k, 0]
            ok = i < meta[k, 1]
            if ti.static(n == 0 and len(f.shape) == 1):
                if ok:   # (not `a if ok else 0`: Taichi evaluates both sides, reading past the buffer)
                    f[i] = buf[off + i]
                else:
                    f[i] = 0
            elif ti.static(n == 0):
                for j in range(ti.static(cols)):
                    if ok:
                        f[i, j] = buf[off + i * cols + j]
                    else:
                        f[i, j] = 0
            elif ti.static(vector):
                for a in ti.static(range(n)):
                    if ok:
                        f[i][a] = buf[off + i * n + a]
                    else:
                        f[i][a] = 0
            else:
                for a in ti.static(range(n)):
                    for b in ti.static(range(m)):
                        if ok:
                            f[i][a, b] = buf[off + (i * n + a) * m + b]
                        else:
                            f[i][a, b] = 0
    return copy


def padded(arr, cap, dtype=None):
    """numpy array zero-padded along axis 0 to the field capacity (for field.from_numpy)."""
    arr = np.asarray(arr, dtype=dtype)
    out = np.zeros((cap,) + arr.shape[1:], dtype=arr.dtype)
    out[:arr.shape[0]] = arr
    return out
