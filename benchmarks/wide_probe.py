"""Probe for issue 14's lane-parallel walk: does tracing W rays per CPU thread as vector lanes pay off
on a real BVH, not only on the brute-force scene of the DESIGN.md probe?

One simplified path tracer (diffuse reflectance and area emission per triangle, cosine-sampled
bounces, no NEE, fixed depth, counter-based random numbers), in two forms over the same scene
fields (tirender's 4-wide BVH, triangles and camera):
  * scalar: one path per thread, tirender's production traversal (core/intersect.traverse);
  * packet W: W paths per thread as ti.Vector lanes with masks; one shared traversal stack per
    packet (a node is visited when any live lane's ray enters one of its child boxes; children
    pushed far to near by their nearest lane), leaf triangles tested against all W rays at once
    (the triangle is loaded once, no gathers); shading per lane.
The W samples of a packet are consecutive samples of one pixel (coherent camera rays; bounces
diverge). Prints Msamples/s per form and the packet/scalar ratio, and checks that both forms
estimate the same image (their means agree within noise).

    python benchmarks/wide_probe.py [--scene cbox|mesh] [--tris 100000] [--spp 64] [--depth 6]

Measured (2-core AMD EPYC, Taichi 1.7.4, cbox 256², 64 spp, forms alternated, best of 2, while a
test suite ran: load 3.8–4.6, so compare only within a row; the images are identical):

    depth 1 (camera rays only, coherent)   scalar 1.91 Ms/s   packet8 3.26 (1.71x)   packet16 2.63 (1.38x)
    depth 6 (diffuse bounces, incoherent)  scalar 0.56 Ms/s   packet8 0.51 (0.91x)   packet16 0.40 (0.71x)

So shared-stack packets pay only while the rays stay coherent: after the first bounce a packet
visits the union of its rays' nodes and loses to one ray per thread. The walk of issue 14 needs
per-lane traversal (each lane its own stack, node loads gathered) or ray reordering between
bounces, not packets alone.

A ceiling on any lane design in Taichi 1.7.4 (measured 2026-11-28 with ``ti.init(print_kernel_asm=True)`` on the
cbox path-tracer megakernel, this AVX-512 machine): the x64 JIT emits baseline x86-64 code — 4686 xmm operands,
0 ymm, 0 zmm, no VEX-encoded instruction; mostly scalar ``mulss``/``addss``, some 4-wide ``mulps`` — and the
optimised IR's SLP vectorizer forms only ``<2 x float>`` (the runtime's functions carry ``"target-cpu"="x86-64"``,
``+sse2``). So lanes can reach SSE's 4 floats per instruction, not Mitsuba's 16 (AVX-512);
``real_matrix_scalarize=False``, which would keep ti.Vector lanes as LLVM vectors, aborts in LLVM's verifier, and
``advanced_optimization=True`` fails Taichi's IR verifier on the megakernels.
"""
import argparse
import os
import sys
import time

import numpy as np
import taichi as ti

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tirender  # noqa: E402
from tirender.core.camera import camera_ray  # noqa: E402
from tirender.core.intersect import intersect  # noqa: E402
from tirender.core.math import BIG, vec3  # noqa: E402
from tirender.core.rng import hash_u32  # noqa: E402
from tirender.scene.bvh import WIDTH  # noqa: E402

STACK = 64
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
                child = st.wnode_child[e]
                count = st.wnode_count[e]
                for j in ti.static(range(WIDTH)):
                    if key[j] < BIG and sp < STACK:
                        c = slot[j]
                        if count[c] > 0:
                            stack[sp] = -1 - child[c]
                            leaf_n[sp] = count[c]
                        else:
                            stack[sp] = child[c]
                        sp += 1
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
        w = st.cam_w[cam]
        npix = w * st.cam_h[cam]
        for g in range(npix * (spp // W)):
            pix = g // (spp // W)
            base = (g % (spp // W)) * W
            o = mW(0.0)
            d = mW(0.0)
            beta = mW(1.0)
            L = mW(0.0)
            live = iW(1)
            for l in ti.static(range(W)):
                h = hash_u32(7, pix, base + l, 0)
                pos = ti.Vector([pix % w + _u01(h), pix // w + _u01(hash_u32(7, pix, base + l, 1))])
                oo, dd = camera_ray(st, cam, pos)
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
            pos = ti.Vector([pix % w + _u01(hash_u32(7, pix, s, 0)), pix // w + _u01(hash_u32(7, pix, s, 1))])
            o, d = camera_ray(st, cam, pos)
            beta = vec3(1.0)
            L = vec3(0.0)
            for bounce in range(depth):
                k, t, b1, b2 = intersect(st, o, d, BIG)
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


def _mesh_scene(tris):
    """A noisy UV sphere of ~tris triangles inside a lit box (the cbox's walls)."""
    import tempfile
    from tirender.scene.mesh_io import save_ply
    from tirender.scene.shapes import sphere
    res = max(8, int(np.sqrt(tris)))
    m = sphere(res)
    rng = np.random.default_rng(0)
    m["positions"] = (m["positions"] * (1 + 0.02 * rng.standard_normal((len(m["positions"]), 1)))).astype(np.float32)
    d = tempfile.mkdtemp()
    save_ply(os.path.join(d, "ball.ply"), m)
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
    ap.add_argument("--widths", default="8,16")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
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
    forms = [("scalar", 1)] + [(f"packet{w}", w) for w in (int(x) for x in a.widths.split(","))]
    kern = {}
    for name, w in forms:
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


if __name__ == "__main__":
    main()
