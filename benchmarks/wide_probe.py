"""Probe for issue 14's lane-parallel walk: does tracing W rays per CPU thread as vector lanes pay off
on a real BVH, not only on the brute-force scene of the DESIGN.md probe?

One simplified path tracer (diffuse reflectance and area emission per triangle, cosine-sampled
bounces, no NEE, fixed depth, counter-based random numbers), in three forms over the same scene
fields (tirender's 4-wide BVH, triangles and camera):
  * scalar: one path per thread, tirender's production traversal (core/intersect.traverse);
  * packet W: W paths per thread as ti.Vector lanes with masks; one shared traversal stack per
    packet (a node is visited when any live lane's ray enters one of its child boxes; children
    pushed far to near by their nearest lane), leaf triangles tested against all W rays at once
    (the triangle is loaded once, no gathers); shading per lane;
  * inter W: W paths per thread, each lane its own traversal (stack, closest hit), advanced in lock
    step one pop per lane per round, so that an out-of-order core can overlap the lanes' loads.
The W samples of a thread are consecutive samples of one pixel (coherent camera rays; bounces
diverge). Prints Msamples/s per form and the ratio to scalar, checks that the forms estimate the
same image (their means agree), and counts what Taichi's JIT emitted (`jit_isa`: the process's
anonymous executable pages disassembled with objdump, where it is installed).

    python benchmarks/wide_probe.py [--scene cbox|mesh] [--tris 100000] [--spp 64] [--depth 6]
                                    [--widths 8,16] [--inter 2,4]

Measured 2026-11-28 (2-core AMD EPYC, family 1Ah, Taichi 1.7.4; 256², 64 spp, forms alternated, best
of 2, quiet machine: load 0.1–0.8; the images are identical):

    cbox depth 1 (camera rays, coherent)   scalar 14.5 Ms/s  packet8 1.59x  packet16 1.58x  inter2 1.35x  inter4 1.39x
    cbox depth 6 (diffuse bounces)         scalar 2.79 Ms/s  packet8 1.45x  packet16 1.29x  inter2 0.92x  inter4 0.82x
    300k-triangle mesh, depth 6            scalar 1.08 Ms/s  packet8 0.84x  packet16 0.59x  inter2 1.02x  inter4 0.93x

(An earlier run of the packet forms while a test suite loaded the machine, load 3.8–4.6, gave packet8 0.91x at
depth 6: compare only on a quiet machine.) Shared-stack packets pay while a packet's rays stay near each other
(the closed cbox, camera rays) and lose once a packet's union of visited nodes grows (a big mesh); per-lane
interleaving pays only on camera rays (inter2 on the mesh: 1.02x, within noise). The best form, 1.45x on the cbox's simplified walk and < 1 on a big
mesh, is far from the 2.8x by which Mitsuba 3's LLVM backend outruns tirender's full walk on this machine.

What Taichi 1.7.4 emits here: VEX/EVEX-encoded code (the JIT's target machine has the host's AVX-512
features), but the IR is optimised and vectorised for a *generic* x86-64: Taichi passes
``llvm::sys::getHostCPUName()`` to its optimisation pipeline, and its LLVM 15.0.4 does not know this CPU family
(``LLVMGetHostCPUName`` of the system's libLLVM-15 returns "generic", of libLLVM-19 "znver5"), so the
vectorisers' cost model assumes 128-bit registers: the packet kernels' float arithmetic is mostly 4-wide xmm
(``vmulps``/``vminps``/``vmaxps`` on xmm; a few ymm, zmm almost only for moves), where Mitsuba's is 16-wide.
(``ti.init(print_kernel_asm=True)`` shows plain SSE: it prints from a separate target machine without the host
features, not the code that runs.) ``real_matrix_scalarize=False``, which would keep ti.Vector lanes as LLVM
vectors, aborts in LLVM's verifier, and ``advanced_optimization=True`` fails Taichi's IR verifier on the
megakernels.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import taichi as ti

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tirender  # noqa: E402
from tirender.sensors.registry import camera_ray  # noqa: E402
from tirender.core.intersect import STACK, child_entries, intersect, push_children, ray_triangle, safe_inv  # noqa: E402
from tirender.core.math import BIG, vec3  # noqa: E402
from tirender.core.rng import hash_u32  # noqa: E402
from tirender.scene.bvh import WIDTH  # noqa: E402

_SORT4 = ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2))   # descending network over 4 keys


@ti.func
def _u01(h):
    return ti.cast(h >> ti.u32(8), ti.f32) * (1.0 / 16777216.0)


@ti.func
def _cosine_dir(n, u1, u2):
    """Cosine-weighted direction about unit n."""
    r = ti.sqrt(u1)
    phi = 2.0 * np.pi * u2
    a = vec3(1.0, 0.0, 0.0) if ti.abs(n[0]) < 0.9 else vec3(0.0, 1.0, 0.0)
    s = n.cross(a).normalized()
    t = n.cross(s)
    return (s * (r * ti.cos(phi)) + t * (r * ti.sin(phi)) + n * ti.sqrt(ti.max(0.0, 1.0 - u1))).normalized()


@ti.func
def _tasks(st: ti.template(), cam, spp, width: ti.template()):
    """The number of tasks of a launch: a pixel's spp samples are spp // width tasks of `width` lanes."""
    return st.cam_w[cam] * st.cam_h[cam] * (spp // width)


@ti.func
def _sample_task(st: ti.template(), cam, g, spp, width: ti.template()):
    """(pixel, its first sample, the film's width) of task g (_tasks)."""
    per = spp // width
    return g // per, (g % per) * width, st.cam_w[cam]


@ti.func
def _lane_pos(w, pix, base, l):
    """Film position of sample base + l of pixel pix (row-major, width w): the pixel's corner plus a hashed offset."""
    return ti.Vector([pix % w + _u01(hash_u32(7, pix, base + l, 0)), pix // w + _u01(hash_u32(7, pix, base + l, 1))])


def make_kernels(W):
    vW = ti.types.vector(W, ti.f32)
    iW = ti.types.vector(W, ti.i32)
    mW = ti.types.matrix(3, W, ti.f32)

    @ti.func
    def row(M, a):
        return vW([M[a, j] for j in ti.static(range(W))])

    @ti.func
    def packet_traverse(st: ti.template(), O, D, live):
        """Closest hits of W rays (O, D: 3 x W, one ray per column) -> (tri iW, t vW)."""
        o = [row(O, 0), row(O, 1), row(O, 2)]
        d = [row(D, 0), row(D, 1), row(D, 2)]
        inv = [ti.select(ti.abs(d[a]) > 1e-30, 1.0 / d[a], ti.select(d[a] >= 0.0, vW(1e30), vW(-1e30)))
               for a in ti.static(range(3))]
        best_t = ti.select(live != 0, vW(BIG), vW(-1.0))     # dead lanes never enter a box
        best = iW(-1)
        stack = ti.Vector([0] * STACK, dt=ti.i32)
        leaf_n = ti.Vector([0] * STACK, dt=ti.i32)
        near = ti.Vector([0.0] * STACK)          # push_children's entry distances (not used here)
        sp = 1
        while sp > 0:
            sp -= 1
            e = stack[sp]
            if e >= 0:
                bmin = st.wnode_min[e]
                bmax = st.wnode_max[e]
                key = ti.Vector([BIG] * WIDTH, dt=ti.f32)
                for j in ti.static(range(WIDTH)):
                    tnear = vW(0.0)
                    tfar = best_t
                    for a in ti.static(range(3)):
                        t0 = (bmin[a * WIDTH + j] - o[a]) * inv[a]
                        t1 = (bmax[a * WIDTH + j] - o[a]) * inv[a]
                        tnear = ti.max(tnear, ti.min(t0, t1))
                        tfar = ti.min(tfar, ti.max(t0, t1))
                    entered = ti.select(tnear <= tfar * 1.00000024, tnear, vW(BIG))
                    key[j] = entered.min()
                slot = ti.Vector([j for j in ti.static(range(WIDTH))], dt=ti.i32)
                for i, j in ti.static(_SORT4):
                    if key[i] < key[j]:
                        key[i], key[j] = key[j], key[i]
                        slot[i], slot[j] = slot[j], slot[i]
                sp = push_children(st, e, key, slot, stack, leaf_n, near, sp)
            else:
                first = -1 - e
                for k in range(first, first + leaf_n[sp]):
                    p0 = st.tri_p0[k]
                    e1 = st.tri_e1[k]
                    e2 = st.tri_e2[k]
                    # Möller–Trumbore on W lanes (pv = d x e2, qv = tv x e1)
                    pvx = d[1] * e2[2] - d[2] * e2[1]
                    pvy = d[2] * e2[0] - d[0] * e2[2]
                    pvz = d[0] * e2[1] - d[1] * e2[0]
                    det = e1[0] * pvx + e1[1] * pvy + e1[2] * pvz
                    inv_det = 1.0 / ti.select(det != 0.0, det, vW(1.0))
                    tvx = o[0] - p0[0]
                    tvy = o[1] - p0[1]
                    tvz = o[2] - p0[2]
                    b1 = (tvx * pvx + tvy * pvy + tvz * pvz) * inv_det
                    qvx = tvy * e1[2] - tvz * e1[1]
                    qvy = tvz * e1[0] - tvx * e1[2]
                    qvz = tvx * e1[1] - tvy * e1[0]
                    b2 = (d[0] * qvx + d[1] * qvy + d[2] * qvz) * inv_det
                    t = (e2[0] * qvx + e2[1] * qvy + e2[2] * qvz) * inv_det
                    ok = (det != 0.0) & (b1 >= 0.0) & (b2 >= 0.0) & (b1 + b2 <= 1.0) & (t > 0.0) & (t < best_t)
                    best_t = ti.select(ok, t, best_t)
                    best = ti.select(ok, iW(k), best)
        return best, best_t

    @ti.kernel
    def packet(st: ti.template(), alb: ti.template(), emi: ti.template(), cam: ti.i32, spp: ti.i32, depth: ti.i32,
               out: ti.template()):
        for g in range(_tasks(st, cam, spp, W)):
            pix, base, w = _sample_task(st, cam, g, spp, W)
            o = mW(0.0)
            d = mW(0.0)
            beta = mW(1.0)
            L = mW(0.0)
            live = iW(1)
            for l in ti.static(range(W)):
                oo, dd, _t = camera_ray(st, cam, _lane_pos(w, pix, base, l), ti.Vector([0.5, 0.5]))
                for a in ti.static(range(3)):
                    o[a, l] = oo[a]
                    d[a, l] = dd[a]
            for bounce in range(depth):
                if live.max() > 0:
                    tri, t = packet_traverse(st, o, d, live)
                    for l in ti.static(range(W)):
                        if live[l] != 0:
                            k = tri[l]
                            if k < 0:
                                live[l] = 0
                            else:
                                dd = vec3(d[0, l], d[1, l], d[2, l])
                                p = vec3(o[0, l], o[1, l], o[2, l]) + t[l] * dd
                                n = st.tri_e1[k].cross(st.tri_e2[k]).normalized()
                                if n.dot(dd) > 0.0:
                                    n = -n
                                e = emi[k]
                                a = alb[k]
                                for c in ti.static(range(3)):
                                    L[c, l] += beta[c, l] * e[c]
                                    beta[c, l] *= a[c]
                                u1 = _u01(hash_u32(7, pix, base + l, 2 + 2 * bounce))
                                u2 = _u01(hash_u32(7, pix, base + l, 3 + 2 * bounce))
                                nd = _cosine_dir(n, u1, u2)
                                for c in ti.static(range(3)):
                                    o[c, l] = p[c] + 1e-4 * n[c]
                                    d[c, l] = nd[c]
            out[pix] += vec3(row(L, 0).sum(), row(L, 1).sum(), row(L, 2).sum())

    @ti.kernel
    def scalar(st: ti.template(), alb: ti.template(), emi: ti.template(), cam: ti.i32, spp: ti.i32, depth: ti.i32,
               out: ti.template()):
        w = st.cam_w[cam]
        npix = w * st.cam_h[cam]
        for g in range(npix * spp):
            pix = g // spp
            s = g % spp
            pos = _lane_pos(w, pix, s, 0)
            o, d, _t = camera_ray(st, cam, pos, ti.Vector([0.5, 0.5]))
            beta = vec3(1.0)
            L = vec3(0.0)
            for bounce in range(depth):
                k, t, b1, b2, _inst = intersect(st, o, d, BIG)
                if k < 0:
                    break
                p = o + t * d
                n = st.tri_e1[k].cross(st.tri_e2[k]).normalized()
                if n.dot(d) > 0.0:
                    n = -n
                L += beta * emi[k]
                beta *= alb[k]
                d = _cosine_dir(n, _u01(hash_u32(7, pix, s, 2 + 2 * bounce)), _u01(hash_u32(7, pix, s, 3 + 2 * bounce)))
                o = p + 1e-4 * n
            out[pix] += L

    return packet, scalar


def make_interleaved(W):
    """The interleaved form: W paths per thread, each lane its own traversal (stack, hit), advanced in
    lock step one pop per lane per round, so that an out-of-order core overlaps the lanes' loads."""
    @ti.func
    def step(st: ti.template(), o, d, inv_d, stack: ti.template(), leaf_n: ti.template(), near: ti.template(),
             sp: ti.template(), best_t: ti.template(), best: ti.template(), l: ti.template()):
        """One pop of lane l's traversal (sp, best_t, best: the W lanes' stack depth and closest hit)."""
        sp[l] -= 1
        top = sp[l]
        e = stack[top]
        if near[top] > best_t[l] * 1.00000024:
            pass
        elif e >= 0:
            key, slot = child_entries(st, e, o, inv_d, best_t[l], True)
            child = st.wnode_child[e]
            count = st.wnode_count[e]
            for j in ti.static(range(WIDTH)):
                if key[j] < BIG and sp[l] < STACK:
                    c = slot[j]
                    near[sp[l]] = key[j]
                    if count[c] > 0:
                        stack[sp[l]] = -1 - child[c]
                        leaf_n[sp[l]] = count[c]
                    else:
                        stack[sp[l]] = child[c]
                    sp[l] += 1
        else:
            first = -1 - e
            for k in range(first, first + leaf_n[top]):
                t, b1, b2 = ray_triangle(st, k, o, d)
                if t < best_t[l]:
                    best_t[l] = t
                    best[l] = k

    @ti.kernel
    def inter(st: ti.template(), alb: ti.template(), emi: ti.template(), cam: ti.i32, spp: ti.i32, depth: ti.i32,
              out: ti.template()):
        for g in range(_tasks(st, cam, spp, W)):
            pix, base, w = _sample_task(st, cam, g, spp, W)
            o = [vec3(0.0) for _ in ti.static(range(W))]
            d = [vec3(0.0) for _ in ti.static(range(W))]
            beta = [vec3(1.0) for _ in ti.static(range(W))]
            L = vec3(0.0)
            live = ti.Vector([1 for _ in ti.static(range(W))], dt=ti.i32)
            for l in ti.static(range(W)):
                o[l], d[l], _t = camera_ray(st, cam, _lane_pos(w, pix, base, l), ti.Vector([0.5, 0.5]))
            for bounce in range(depth):
                stack = [ti.Vector([0] * STACK, dt=ti.i32) for _ in ti.static(range(W))]
                leaf_n = [ti.Vector([0] * STACK, dt=ti.i32) for _ in ti.static(range(W))]
                near = [ti.Vector([0.0] * STACK) for _ in ti.static(range(W))]
                sp = ti.Vector([live[l] for l in ti.static(range(W))], dt=ti.i32)
                best_t = ti.Vector([BIG for _ in ti.static(range(W))], dt=ti.f32)
                best = ti.Vector([-1 for _ in ti.static(range(W))], dt=ti.i32)
                inv_d = [safe_inv(d[l]) for l in ti.static(range(W))]
                busy = 1
                while busy:
                    busy = 0
                    for l in ti.static(range(W)):
                        if sp[l] > 0:
                            step(st, o[l], d[l], inv_d[l], stack[l], leaf_n[l], near[l], sp, best_t, best, l)
                            busy |= sp[l] > 0
                for l in ti.static(range(W)):
                    if live[l]:
                        k = best[l]
                        if k < 0:
                            live[l] = 0
                        else:
                            dd = d[l]
                            p = o[l] + best_t[l] * dd
                            n = st.tri_e1[k].cross(st.tri_e2[k]).normalized()
                            if n.dot(dd) > 0.0:
                                n = -n
                            L += beta[l] * emi[k]
                            beta[l] *= alb[k]
                            nd = _cosine_dir(n, _u01(hash_u32(7, pix, base + l, 2 + 2 * bounce)), _u01(hash_u32(7, pix, base + l, 3 + 2 * bounce)))
                            o[l] = p + 1e-4 * n
                            d[l] = nd
            out[pix] += L
    return inter


def _ints(s):
    return [int(x) for x in s.split(",") if x.strip() and int(x) > 0]


def jit_isa():
    """Disassemble this process's anonymous executable mappings (where Taichi's LLVM JIT puts kernels)
    and count vector register operands: {'xmm': n, 'ymm': n, 'zmm': n, 'vex': n, 'packed': n, 'scalar': n}.
    None where objdump is missing."""
    if shutil.which("objdump") is None:
        return None
    blobs = []
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    with open("/proc/self/mem", "rb") as mem:
        for line in maps:
            parts = line.split()
            if len(parts) < 6 and "x" in parts[1]:           # anonymous and executable
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                mem.seek(lo)
                blobs.append(mem.read(hi - lo))
    with tempfile.NamedTemporaryFile(suffix=".bin") as tmp:
        tmp.write(b"".join(blobs))
        tmp.flush()
        asm = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", tmp.name],
                             capture_output=True, text=True).stdout
    ins = [l.split("\t")[-1] for l in asm.splitlines() if l.count("\t") >= 2]
    out = {r: sum(f"%{r}" in i for i in ins) for r in ("xmm", "ymm", "zmm")}
    out["vex"] = sum(bool(re.match(r"v[a-z]", i)) for i in ins)
    out["packed"] = sum(bool(re.match(r"v?[a-z]+p[sd]\s", i)) and not i.startswith(("vmovap", "movap", "vmovup", "movup")) for i in ins)
    out["scalar"] = sum(bool(re.match(r"v?[a-z]+s[sd]\s", i)) and not i.startswith(("vmovs", "movs")) for i in ins)
    out["instructions"] = len(ins)
    return out


def _mesh_scene(tris):
    """A noisy UV sphere of ~tris triangles inside a lit box (the cbox's walls)."""
    from tirender.scene.mesh_io import save_ply
    from tirender.scene.shapes import sphere
    res = max(8, int(np.sqrt(tris)))
    m = sphere(res)
    rng = np.random.default_rng(0)
    m["positions"] = (m["positions"] * (1 + 0.02 * rng.standard_normal((len(m["positions"]), 1)))).astype(np.float32)
    d = tempfile.mkdtemp()
    save_ply(os.path.join(d, "ball.ply"), m["positions"], m["faces"], m["normals"], m["uvs"])
    from tirender.config import load_config
    cfg = load_config(os.path.join(os.path.dirname(__file__), "..", "configs", "cbox.yaml"))
    sc = cfg["scene"]
    sc["bsdfs"]["ballmat"] = {"type": "diffuse", "reflectance": [0.7, 0.7, 0.7]}
    sc["shapes"].append({"id": "ball", "type": "ply", "filename": os.path.join(d, "ball.ply"), "bsdf": "ballmat",
                         "to_world": [{"scale": 0.3}, {"translate": [0.0, 0.3, 0.0]}]})
    return tirender.scene_from_config(cfg)


def _per_triangle(scene, st):
    """(albedo, emission) per triangle in BVH order, from the scene's diffuse reflectances and area
    lights' radiance (constants; other BSDFs count as grey 0.5)."""
    shape_of = st.tri_shape.to_numpy()
    ids = [s.id for s in scene.desc.shapes]
    bsdf_ids = [b.id for b in scene.desc.bsdfs]
    sb = st.shape_bsdf.to_numpy()
    n_shapes = len(ids)
    alb_s = np.full((n_shapes, 3), 0.5, np.float32)
    emi_s = np.zeros((n_shapes, 3), np.float32)
    for i in range(n_shapes):
        b = sb[i]
        if 0 <= b < len(bsdf_ids) and f"{bsdf_ids[b]}.reflectance" in scene.params:
            v = np.asarray(scene.params[f"{bsdf_ids[b]}.reflectance"], np.float32).reshape(-1, 3)
            alb_s[i] = v.mean(0)
        if f"{ids[i]}.radiance" in scene.params:
            emi_s[i] = np.asarray(scene.params[f"{ids[i]}.radiance"], np.float32).reshape(-1, 3).mean(0)
            alb_s[i] = 0.0
    return alb_s, emi_s, shape_of


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", choices=("cbox", "mesh"), default="cbox")
    ap.add_argument("--tris", type=int, default=100_000)
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--widths", default="8,16", help="packet widths (0: none)")
    ap.add_argument("--inter", default="2,4", help="interleaved widths (0: none)")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    bad = [w for w in _ints(a.widths) + _ints(a.inter) if a.spp % w]
    if a.spp < 1 or bad:
        raise SystemExit(f"--spp {a.spp}: must be a positive multiple of every width (not of {bad}): a task is a "
                         f"pixel's samples in groups of a width")
    tirender.init("cpu")
    if a.scene == "cbox":
        from tirender.config import load_config
        cfg = load_config(os.path.join(os.path.dirname(__file__), "..", "configs", "cbox.yaml"),
                          [f"scene.sensors.0.film.width={a.size}", f"scene.sensors.0.film.height={a.size}"])
        scene = tirender.scene_from_config(cfg)
    else:
        scene = _mesh_scene(a.tris)
    st = scene.bind()
    s = scene.sensors[0]
    npix = s.width * s.height
    alb_s, emi_s, shape_of = _per_triangle(scene, st)
    cap = len(shape_of)
    alb = ti.Vector.field(3, ti.f32, cap)
    emi = ti.Vector.field(3, ti.f32, cap)
    sh = np.clip(shape_of, 0, len(alb_s) - 1)
    alb.from_numpy(alb_s[sh])
    emi.from_numpy(emi_s[sh])
    out = ti.Vector.field(3, ti.f32, npix)
    print(f"scene {a.scene}: {s.width}x{s.height}, {a.spp} spp, depth {a.depth}, triangle slots {cap}; "
          f"load average {os.getloadavg()[0]:.2f}")
    forms = ([("scalar", 1)] + [(f"packet{w}", w) for w in _ints(a.widths)]
             + [(f"inter{w}", -w) for w in _ints(a.inter)])
    kern = {}
    for name, w in forms:
        if w < 0:
            kern[name] = make_interleaved(-w)
            continue
        packet, scalar = make_kernels(max(w, 1))
        kern[name] = scalar if name == "scalar" else packet
    means, best = {}, {}
    for rep in range(a.reps + 1):                    # rep 0 compiles; forms alternate
        for name, w in forms:
            out.fill(0)
            ti.sync()
            t = time.perf_counter()
            kern[name](st, alb, emi, 0, a.spp, a.depth, out)
            ti.sync()
            dt = time.perf_counter() - t
            img = out.to_numpy() / a.spp
            means[name] = img.mean(0)
            if rep > 0:
                best[name] = min(best.get(name, np.inf), dt)
    base = best["scalar"]
    for name, w in forms:
        ms = npix * a.spp / best[name] / 1e6
        print(f"  {name:9s} {best[name]:7.3f} s  {ms:6.2f} Msamples/s  speed-up {base / best[name]:5.2f}x  "
              f"mean RGB {np.round(means[name], 4).tolist()}")
    isa = jit_isa()
    if isa is not None:   # what the JIT actually emitted for the kernels above (and Taichi's own)
        print(f"  JIT code: {isa['instructions']} instructions; operands xmm {isa['xmm']}, ymm {isa['ymm']}, "
              f"zmm {isa['zmm']}; VEX/EVEX-encoded {isa['vex']}; packed float ops {isa['packed']}, "
              f"scalar {isa['scalar']}")


if __name__ == "__main__":
    main()
