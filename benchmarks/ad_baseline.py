"""Conventional reverse-mode AD baseline: a path tracer differentiated by Taichi's ``ti.ad.Tape``.

For benchmarks and tests ONLY - tirender itself never uses ``ti.ad`` (its gradients are hand-written
adjoints: PRB, RB). This module reproduces what the PRB/RB papers call "conventional AD": the
primal program is recorded and replayed backwards by an AD system, so memory grows with the work.

Two tape-compatible versions of the same estimator (paths of at most ``max_depth`` segments; NEE by
area sampling of the emitter triangles, cosine BSDF sampling, power-heuristic MIS, no Russian
roulette; Lambertian BSDFs with constant reflectance; one-sided area lights of constant radiance;
pinhole camera, box filter):

``mode="megakernel"``  ONE kernel, one thread per (pixel, sample): a fixed ``for depth in
    range(max_depth)`` loop with an ``active`` flag (no while/break), brute-force closest-hit and
    shadow-ray loops over all triangles, a stateless hash RNG (Taichi's AD rejects ``ti.random``).
    ``ti.ad.Tape`` differentiates it; Taichi's reverse pass re-executes the loop nest and keeps
    every loop iteration's mutated locals on per-thread *AD stacks* (its tape for locals), whose
    capacity ``ad_stack_size`` is a compile-time constant, so the recorded state is
    O(max_depth x n_triangles) per thread. Two Taichi facts make this fragile, which is why the
    module sets them itself (and restores them): (1) with ``advanced_optimization=False`` (tirender's
    default, for compile speed) the reverse pass of any dynamic loop crashes (SIGSEGV/SIGBUS); (2) the
    automatic AD-stack sizing fails for nested dynamic loops and falls back to a small default, and
    an overflow is not checked in release mode - it corrupts memory / crashes. We set
    ``ad_stack_size`` from the loop bounds.
``mode="wavefront"``   one kernel launch per path segment, all recorded by the same ``ti.ad.Tape``;
    every vertex's state (throughput, radiance so far, ray, MIS state) is written to a new slot of
    global fields of shape (n_paths, max_depth + 1) and never overwritten - exactly the transcript
    a tape-based AD system (Enoki / Mitsuba 2 "conventional AD") keeps. Memory is
    O(n_paths x max_depth): it grows with spp and with the path length.

``ADPathTracer(scene).gradient(weights, spp, seed, mode)`` returns the gradient of
<weights, image> w.r.t. every diffuse ``*.reflectance`` and area-emitter ``*.radiance`` parameter
(dict name -> array shaped like the parameter), ``render`` the primal image; ``state_bytes``
reports the memory the tape holds (wavefront fields incl. gradients, or the AD-stack capacity per
thread for the megakernel).
"""
import numpy as np
import taichi as ti

from tirender.core.rng import mix32
from tirender.errors import ConfigError

INV_PI = 1.0 / np.pi


@ti.func
def _rand(seed, path, dim):
    """Stateless uniform [0, 1) for (seed, path index, dimension): no RNG state in the AD loops."""
    h = mix32(ti.cast(path, ti.u32) ^ mix32(ti.cast(seed, ti.u32) + mix32(ti.cast(dim, ti.u32) + ti.u32(0x9E3779B9))))
    return ti.cast(h >> ti.u32(8), ti.f32) * (1.0 / 16777216.0)


@ti.func
def _mis(a, b):
    a2 = a * a
    b2 = b * b
    r = 0.0
    if a2 + b2 > 0.0:
        r = a2 / (a2 + b2)
    return r


@ti.data_oriented
class ADPathTracer:
    """The scene's triangles, diffuse reflectances and area lights in fields of its own (one SNode
    tree, freed by ``release``); parameters ``rho`` (per BSDF) and ``le`` (per shape) need grads."""

    def __init__(self, scene, sensor=0, max_depth_cap=None):
        d = scene.desc
        # the megakernel's AD-stack capacity is compiled in: it bounds the usable max_depth
        self.max_depth_cap = int(max_depth_cap or scene.integrator["max_depth"])
        self.scene = scene
        P, N, SH = [], [], []
        for si, s in enumerate(d.shapes):
            f = s.faces
            P.append(s.positions[f])
            nrm = s.normals[f].mean(1) if s.normals is not None else np.cross(
                s.positions[f][:, 1] - s.positions[f][:, 0], s.positions[f][:, 2] - s.positions[f][:, 0])
            N.append(nrm / np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-20))
            SH.append(np.full(len(f), si, np.int32))
        P, N, SH = np.concatenate(P).astype(np.float32), np.concatenate(N).astype(np.float32), np.concatenate(SH)
        self.ntri = len(P)
        self.nshape = len(d.shapes)
        self.nbsdf = len(d.bsdfs)
        self.rho_names, self.le_names = {}, {}
        rho = np.zeros((max(self.nbsdf, 1), 3), np.float32)
        for bi, b in enumerate(d.bsdfs):
            if b.model.NAME != "diffuse" or b.tex[0] < 0:
                raise ConfigError(f"AD baseline: BSDF '{b.id}' must be diffuse with a constant reflectance")
            tex = d.textures[b.tex[0]]
            if not tex.constant:
                raise ConfigError(f"AD baseline: BSDF '{b.id}' reflectance must be constant")
            rho[bi] = np.broadcast_to(scene.params[tex.name], 3)
            self.rho_names[bi] = tex.name
        le = np.zeros((self.nshape, 3), np.float32)
        shape_bsdf = np.array([s.bsdf for s in d.shapes], np.int32)
        shape_em = np.full(self.nshape, -1, np.int32)
        for e in d.emitters:
            if e.model.NAME != "area":
                raise ConfigError(f"AD baseline: emitter '{e.id}' must be an area light")
            tex = d.textures[e.tex[0]]
            le[e.shape] = np.broadcast_to(scene.params[tex.name], 3)
            shape_em[e.shape] = 1
            self.le_names[e.shape] = tex.name
        # emitter triangles: uniform emitter choice (1/N), then a triangle by area (as tirender)
        area = 0.5 * np.linalg.norm(np.cross(P[:, 1] - P[:, 0], P[:, 2] - P[:, 0]), axis=1)
        ems = [s for s in range(self.nshape) if shape_em[s] >= 0]
        if not ems:
            raise ConfigError("AD baseline: the scene needs an area light")
        etri, eprob, shape_parea = [], [], np.zeros(self.nshape, np.float32)
        for s in ems:
            idx = np.nonzero(SH == s)[0]
            A = area[idx].sum()
            shape_parea[s] = 1.0 / (len(ems) * A)    # area density of NEE on this emitter
            etri.extend(idx)
            eprob.extend(area[idx] / (A * len(ems)))
        self.nemtri = len(etri)
        cdf = np.cumsum(eprob).astype(np.float32)
        cdf[-1] = 1.0
        s = scene.sensors[sensor]
        self.w, self.h = s.width, s.height
        M = np.asarray(s.to_world, np.float64)
        fb = ti.FieldsBuilder()
        self.p0, self.e1, self.e2, self.nrm = (ti.Vector.field(3, ti.f32) for _ in range(4))
        self.tshape = ti.field(ti.i32)
        fb.dense(ti.i, self.ntri).place(self.p0, self.e1, self.e2, self.nrm, self.tshape)
        self.sbsdf, self.sem = ti.field(ti.i32), ti.field(ti.i32)
        self.sparea = ti.field(ti.f32)
        self.le = ti.Vector.field(3, ti.f32, needs_grad=True)
        fb.dense(ti.i, self.nshape).place(self.sbsdf, self.sem, self.sparea, self.le, self.le.grad)
        self.rho = ti.Vector.field(3, ti.f32, needs_grad=True)
        fb.dense(ti.i, rho.shape[0]).place(self.rho, self.rho.grad)
        self.etri, self.ecdf = ti.field(ti.i32), ti.field(ti.f32)
        fb.dense(ti.i, self.nemtri).place(self.etri, self.ecdf)
        self.img = ti.Vector.field(3, ti.f32, needs_grad=True)
        self.wgt = ti.Vector.field(3, ti.f32)
        fb.dense(ti.i, self.w * self.h).place(self.img, self.img.grad, self.wgt)
        self.loss = ti.field(ti.f32, needs_grad=True)
        self.cam = ti.Vector.field(3, ti.f32)
        fb.dense(ti.i, 4).place(self.cam)
        fb.place(self.loss, self.loss.grad)
        self._tree = fb.finalize()
        self.p0.from_numpy(P[:, 0])
        self.e1.from_numpy(P[:, 1] - P[:, 0])
        self.e2.from_numpy(P[:, 2] - P[:, 0])
        self.nrm.from_numpy(N)
        self.tshape.from_numpy(SH)
        self.sbsdf.from_numpy(shape_bsdf)
        self.sem.from_numpy(shape_em)
        self.sparea.from_numpy(shape_parea)
        self.le.from_numpy(le)
        self.rho.from_numpy(rho)
        self.etri.from_numpy(np.array(etri, np.int32))
        self.ecdf.from_numpy(cdf)
        cam = np.stack([M[:3, 0] * s.tan_x, M[:3, 1] * s.tan_y, M[:3, 2], M[:3, 3]]).astype(np.float32)
        self.cam.from_numpy(cam)
        self.eps = 1e-4 * (1.0 + float(np.abs(P).max()))
        self._wf = None     # wavefront state tree (allocated per (n_paths, max_depth))
        self._wf_key = None

    def release(self):
        """Free the fields (SNode trees) of this tracer."""
        self._free_wavefront()
        if self._tree is not None:
            self._tree.destroy()
            self._tree = None

    # ------------------------------------------------------------------ shared path pieces
    @ti.func
    def intersect(self, o, d, tmax):
        """Brute-force closest hit over all triangles (fixed-count loop). Returns (t, tri)."""
        tb = tmax
        ib = -1
        for i in range(self.ntri):
            e1 = self.e1[i]
            e2 = self.e2[i]
            pv = d.cross(e2)
            det = e1.dot(pv)
            if ti.abs(det) > 1e-12:
                inv = 1.0 / det
                sv = o - self.p0[i]
                u = sv.dot(pv) * inv
                q = sv.cross(e1)
                v = d.dot(q) * inv
                t = e2.dot(q) * inv
                if u >= 0.0 and v >= 0.0 and u + v <= 1.0 and t > 0.0 and t < tb:
                    tb = t
                    ib = i
        return tb, ib

    @ti.func
    def camera_ray(self, pix, seed, path):
        x = ti.cast(pix % self.w, ti.f32) + _rand(seed, path, 0)
        y = ti.cast(pix // self.w, ti.f32) + _rand(seed, path, 1)
        dx = 1.0 - 2.0 * x / self.w
        dy = 1.0 - 2.0 * y / self.h
        d = (self.cam[0] * dx + self.cam[1] * dy + self.cam[2]).normalized()
        return self.cam[3], d

    @ti.func
    def vertex(self, seed, path, depth, max_depth, active, o, d, beta, prev_p, prev_pdf, prev_delta):
        """One path segment: intersect (o, d), add the (MIS) emission of the hit, and - unless the
        depth limit is reached - NEE and a cosine BSDF sample. Returns the radiance added, the next
        ray, throughput and MIS state, and whether the path continues. The triangle loops run
        unconditionally (their results are masked): Taichi's reverse pass crashes on loops nested
        in data-dependent branches inside loops."""
        L = ti.Vector([0.0, 0.0, 0.0])
        cont = 0
        n_o = o
        n_d = d
        n_beta = beta
        n_pp = prev_p
        n_pdf = prev_pdf
        t, tri = self.intersect(o, d, 1e30)
        hit = active == 1 and tri >= 0
        tc = ti.max(tri, 0)
        p = o + t * d
        n = self.nrm[tc]
        sh = self.tshape[tc]
        cos_i = -d.dot(n)
        if hit and self.sem[sh] >= 0 and cos_i > 0.0:
            mis = 1.0
            if prev_delta == 0:
                pdf_em = self.sparea[sh] * t * t / cos_i
                mis = _mis(prev_pdf, pdf_em)
            L += beta * mis * self.le[sh]
        scatter = hit and depth + 1 < max_depth and cos_i > 0.0
        rho = self.rho[self.sbsdf[sh]]
        so = p + n * self.eps
        # --- NEE: an emitter triangle (CDF scan), a uniform point on it
        u0 = _rand(seed, path, 8 * depth + 2)
        k = 0
        for j in range(self.nemtri):
            if self.ecdf[j] <= u0:
                k = j + 1
        et = self.etri[ti.min(k, self.nemtri - 1)]
        a = _rand(seed, path, 8 * depth + 3)
        b = _rand(seed, path, 8 * depth + 4)
        sa = ti.sqrt(a)
        q = self.p0[et] + (1.0 - sa) * self.e1[et] + sa * b * self.e2[et]
        dv = q - so
        dist = ti.max(dv.norm(), 1e-20)
        wl = dv / dist
        cos_l = -wl.dot(self.nrm[et])
        cos_s = wl.dot(n)
        ts, ts_tri = self.intersect(so, wl, dist * (1.0 - 1e-4))
        if scatter and cos_l > 0.0 and cos_s > 0.0 and ts_tri < 0:
            esh = self.tshape[et]
            pdf_l = self.sparea[esh] * dist * dist / cos_l
            pdf_b = cos_s * INV_PI
            L += beta * _mis(pdf_l, pdf_b) * (rho * (INV_PI * cos_s)) * self.le[esh] / pdf_l
        # --- BSDF sampling (cosine): weight f cos / pdf = rho
        r1 = _rand(seed, path, 8 * depth + 5)
        r2 = _rand(seed, path, 8 * depth + 6)
        r = ti.sqrt(r1)
        phi = 2.0 * np.pi * r2
        lz = ti.sqrt(ti.max(1.0 - r1, 0.0))
        sgn = 1.0 if n[2] >= 0.0 else -1.0
        aa = -1.0 / (sgn + n[2])
        bb = n[0] * n[1] * aa
        s = ti.Vector([1.0 + sgn * n[0] * n[0] * aa, sgn * bb, -sgn * n[0]])
        tt = ti.Vector([bb, sgn + n[1] * n[1] * aa, -n[1]])
        wo = (s * (r * ti.cos(phi)) + tt * (r * ti.sin(phi)) + n * lz).normalized()
        if scatter and lz > 0.0:
            cont = 1
            n_o = so
            n_d = wo
            n_beta = beta * rho
            n_pp = p
            n_pdf = lz * INV_PI
        return L, cont, n_o, n_d, n_beta, n_pp, n_pdf

    # ------------------------------------------------------------------ megakernel
    @ti.kernel
    def mk_render(self, spp: ti.i32, seed: ti.u32, max_depth: ti.i32):
        for pix, s in ti.ndrange(self.w * self.h, spp):
            path = pix * spp + s
            o, d = self.camera_ray(pix, seed, path)
            beta = ti.Vector([1.0, 1.0, 1.0])
            L = ti.Vector([0.0, 0.0, 0.0])
            prev_p = o
            prev_pdf = 1.0
            prev_delta = 1
            active = 1
            for depth in range(max_depth):
                dl, cont, o2, d2, b2, pp2, pdf2 = self.vertex(seed, path, depth, max_depth, active, o, d, beta,
                                                              prev_p, prev_pdf, prev_delta)
                L += dl
                active = cont
                o = o2
                d = d2
                beta = b2
                prev_p = pp2
                prev_pdf = pdf2
                prev_delta = 0
            self.img[pix] += L / spp

    # ------------------------------------------------------------------ wavefront (stored transcript)
    def _free_wavefront(self):
        if self._wf is not None:
            self._wf.destroy()
            self._wf = None
            self._wf_key = None

    def _alloc_wavefront(self, n_paths, max_depth):
        key = (n_paths, max_depth)
        if self._wf_key == key:
            return
        self._free_wavefront()
        fb = ti.FieldsBuilder()
        self.s_beta = ti.Vector.field(3, ti.f32, needs_grad=True)
        self.s_L = ti.Vector.field(3, ti.f32, needs_grad=True)
        self.s_o, self.s_d, self.s_pp = (ti.Vector.field(3, ti.f32) for _ in range(3))
        self.s_pdf = ti.field(ti.f32)
        self.s_act = ti.field(ti.i32)
        fb.dense(ti.ij, (n_paths, max_depth + 1)).place(self.s_beta, self.s_beta.grad, self.s_L, self.s_L.grad,
                                                         self.s_o, self.s_d, self.s_pp, self.s_pdf, self.s_act)
        self._wf = fb.finalize()
        self._wf_key = key

    @ti.kernel
    def wf_init(self, spp: ti.i32, seed: ti.u32):
        for pix, s in ti.ndrange(self.w * self.h, spp):
            path = pix * spp + s
            o, d = self.camera_ray(pix, seed, path)
            self.s_o[path, 0] = o
            self.s_d[path, 0] = d
            self.s_pp[path, 0] = o
            self.s_pdf[path, 0] = 1.0
            self.s_act[path, 0] = 1
            self.s_beta[path, 0] = ti.Vector([1.0, 1.0, 1.0])
            self.s_L[path, 0] = ti.Vector([0.0, 0.0, 0.0])

    @ti.kernel
    def wf_step(self, n_paths: ti.i32, seed: ti.u32, depth: ti.i32, max_depth: ti.i32):
        """Segment `depth` of every path: reads slot depth, writes slot depth + 1 (never overwrites)."""
        for path in range(n_paths):
            L = self.s_L[path, depth]
            act = self.s_act[path, depth]
            o = self.s_o[path, depth]
            d = self.s_d[path, depth]
            beta = self.s_beta[path, depth]
            pp = self.s_pp[path, depth]
            pdf = self.s_pdf[path, depth]
            dl, cont, o2, d2, b2, pp2, pdf2 = self.vertex(seed, path, depth, max_depth, act, o, d, beta, pp, pdf,
                                                          1 if depth == 0 else 0)
            self.s_L[path, depth + 1] = L + dl
            self.s_act[path, depth + 1] = cont
            self.s_o[path, depth + 1] = o2
            self.s_d[path, depth + 1] = d2
            self.s_beta[path, depth + 1] = b2
            self.s_pp[path, depth + 1] = pp2
            self.s_pdf[path, depth + 1] = pdf2

    @ti.kernel
    def wf_splat(self, spp: ti.i32, max_depth: ti.i32):
        for pix, s in ti.ndrange(self.w * self.h, spp):
            self.img[pix] += self.s_L[pix * spp + s, max_depth] / spp

    # ------------------------------------------------------------------ loss and driver
    @ti.kernel
    def loss_kernel(self):
        for p in range(self.w * self.h):
            self.loss[None] += self.wgt[p].dot(self.img[p])

    def _forward(self, spp, seed, max_depth, mode):
        if mode == "megakernel":
            self.mk_render(spp, seed, max_depth)
        else:
            n = self.w * self.h * spp
            self.wf_init(spp, seed)
            for k in range(max_depth):
                self.wf_step(n, seed, k, max_depth)
            self.wf_splat(spp, max_depth)
        self.loss_kernel()

    def stack_size(self, max_depth=None):
        """AD-stack capacity for the megakernel's loop nest (pushes per thread): per segment, the
        closest-hit and shadow loops over all triangles and the emitter CDF scan, plus slack."""
        return int((max_depth or self.max_depth_cap) * (2 * self.ntri + self.nemtri + 16) + 64)

    def _depth(self, max_depth):
        md = int(max_depth or self.scene.integrator["max_depth"])
        if md > self.max_depth_cap:
            raise ValueError(f"max_depth {md} exceeds this tracer's max_depth_cap {self.max_depth_cap} "
                             f"(the AD-stack size is compiled into its kernels)")
        return md

    # AD stacks in the megakernel's reverse kernel: counted in its final IR (print_ir): 57 f32,
    # 30 u32, 27 u1 and 11 i32 stacks; each entry holds a primal and an adjoint value
    MK_AD_STACKS = 125

    def state_bytes(self, spp, max_depth, mode):
        """Bytes of recorded state. wavefront: the per-vertex fields incl. their gradients, for all
        paths. megakernel: the AD-stack entries one thread needs for this max_depth (Taichi allocates
        the compiled capacity, ``stack_size()``, per thread in flight; independent of spp)."""
        if mode == "wavefront":
            per_vertex = 4 * (3 + 3 + 3 + 3 + 3 + 3 + 3 + 1 + 1)
            return self.w * self.h * spp * (max_depth + 1) * per_vertex
        return self.MK_AD_STACKS * 2 * 4 * self.stack_size(max_depth)

    def render(self, spp, seed=0, max_depth=None, mode="megakernel"):
        """Primal image (H, W, 3) of this estimator (no gradients)."""
        max_depth = self._depth(max_depth)
        if mode == "wavefront":
            self._alloc_wavefront(self.w * self.h * spp, max_depth)
        self.img.fill(0)
        self.loss[None] = 0.0
        with _ad_config(self.stack_size()):
            self._forward(int(spp), int(seed) & 0xFFFFFFFF, max_depth, mode)
        return self.img.to_numpy().reshape(self.h, self.w, 3)

    def gradient(self, weights, spp, seed=0, max_depth=None, mode="megakernel"):
        """d<weights, image>/d(params) by ti.ad.Tape over the recorded forward pass. Returns
        dict param name -> gradient (diffuse reflectances, area-light radiances)."""
        max_depth = self._depth(max_depth)
        spp = int(spp)
        if mode not in ("megakernel", "wavefront"):
            raise ValueError(f"mode must be 'megakernel' or 'wavefront', got {mode!r}")
        if mode == "wavefront":
            self._alloc_wavefront(self.w * self.h * spp, max_depth)
        self.wgt.from_numpy(np.asarray(weights, np.float32).reshape(-1, 3))
        self.img.fill(0)
        self.loss[None] = 0.0
        with _ad_config(self.stack_size()):
            with ti.ad.Tape(loss=self.loss):
                self._forward(spp, int(seed) & 0xFFFFFFFF, max_depth, mode)
        out = {}
        gr = self.rho.grad.to_numpy()
        for bi, name in self.rho_names.items():
            out[name] = gr[bi].reshape(self.scene.params[name].shape)
        gl = self.le.grad.to_numpy()
        for sh, name in self.le_names.items():
            out[name] = gl[sh].reshape(self.scene.params[name].shape)
        return out


class _ad_config:
    """Temporarily enable what Taichi's reverse-mode AD of loops needs: advanced optimisation (the
    AD passes crash on dynamic loops without it) and an explicit AD-stack capacity. Kernels compile
    on first launch, inside this context."""

    def __init__(self, stack):
        self.stack = int(stack)

    def __enter__(self):
        cfg = ti.lang.impl.current_cfg()
        self.saved = (cfg.advanced_optimization, cfg.ad_stack_size)
        cfg.advanced_optimization = True
        cfg.ad_stack_size = max(self.stack, cfg.ad_stack_size)
        # Taichi warns "Loading variable ... before anything is stored to it" for the adjoints of
        # the (non-differentiated) shading frame in the reverse kernels; the gradients are checked
        # against PRB (tests/test_rb.py), so keep the log quiet while compiling
        ti.set_logging_level(ti.ERROR)
        return self

    def __exit__(self, *a):
        cfg = ti.lang.impl.current_cfg()
        cfg.advanced_optimization, cfg.ad_stack_size = self.saved
        ti.set_logging_level(ti.WARN)  # tirender's level (backend.init: log_level=ti.WARN)
