"""A test bench for BSDF models through the same path the renderer uses: a scene built from YAML
specs (every model under test is one entry of ``bsdfs:``), the generated dispatch, shading-point
contexts. Kernels are compiled once for the bench's dispatcher.

Per-sample parameters: every texture parameter of the bench is an N x 1 bitmap with nearest
filtering, and sample i looks up texel i (uv at its centre), so an adjoint scattered into the pool
lands in texel i alone — per-sample gradients, comparable with per-sample finite differences.
"""
import numpy as np
import taichi as ti

import tirender
import tirender.backend as backend
from tirender.bsdfs.base import BsdfCtx
from tirender.bsdfs.registry import dispatch
from tirender.core.math import vec2, vec3
from tirender.core.rng import make_sampler


def fdt():
    return np.float64 if backend._state.get("fp") == "f64" else np.float32


@ti.func
def _v3(a: ti.template(), i):
    return vec3(a[i, 0], a[i, 1], a[i, 2])


# the shading point's dp/du, dp/dv and geometric normal (local frame) the bench's contexts carry:
# a slanted uv parameterisation and a geometric normal off the shading normal (bump maps)
DPDU = (1.5, 0.3, 0.2)
DPDV = (-0.2, 1.1, -0.3)
NG = (0.0993808, -0.0496904, 0.9938080)


@ti.func
def _ctx(b, uv: ti.template(), i):
    return BsdfCtx(b=b, uv=vec2(uv[i % uv.shape[0], 0], uv[i % uv.shape[0], 1]), dpdu=vec3(DPDU[0], DPDU[1], DPDU[2]),
                   dpdv=vec3(DPDV[0], DPDV[1], DPDV[2]), ng=vec3(NG[0], NG[1], NG[2]))


@ti.kernel
def k_sample(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), uv: ti.types.ndarray(),
             seed: ti.i32, wo_in: ti.types.ndarray(), given: ti.i32, out: ti.types.ndarray()):
    """out[i] = wo(3) weight(3) pdf eta delta valid eval(wi, wo)(3) pdf(wi, wo); with `given`, eval and pdf (the
    last four) at wo_in[i] instead of the sampled wo (the chi-square tests' pdf integration compiles no kernel
    of its own)."""
    for i in range(out.shape[0]):
        wi = _v3(wi_in, i % wi_in.shape[0])
        rng = make_sampler(seed, i, 0)
        u1 = rng.next_1d()
        u2 = rng.next_2d()
        ctx = _ctx(b, uv, i)
        s = D.sample(st, ctx, wi, u1, u2)
        wo = s.wo
        if given:
            wo = _v3(wo_in, i)
        e, pd = D.eval_pdf(st, ctx, wi, wo)
        for k in ti.static(range(3)):
            out[i, k] = s.wo[k]
            out[i, 3 + k] = s.weight[k]
            out[i, 10 + k] = e[k]
        out[i, 6] = s.pdf
        out[i, 7] = s.eta
        out[i, 8] = s.delta
        out[i, 9] = s.valid
        out[i, 13] = pd


@ti.kernel
def k_sample_u(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), u_in: ti.types.ndarray(),
               uv: ti.types.ndarray(), out: ti.types.ndarray()):
    """As k_sample with given random numbers u_in[i] = (u1, u2.x, u2.y) (comparisons with Mitsuba)."""
    for i in range(out.shape[0]):
        s = D.sample(st, _ctx(b, uv, i), _v3(wi_in, i), u_in[i, 0], vec2(u_in[i, 1], u_in[i, 2]))
        for k in ti.static(range(3)):
            out[i, k] = s.wo[k]
            out[i, 3 + k] = s.weight[k]
        out[i, 6] = s.pdf
        out[i, 7] = s.eta
        out[i, 8] = s.delta
        out[i, 9] = s.valid


@ti.kernel
def k_eval(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), wo_in: ti.types.ndarray(),
           uv: ti.types.ndarray(), out: ti.types.ndarray()):
    """out[i] = eval(3), pdf, eval of eval_pdf(3), pdf of eval_pdf for wi_in[i % K], wo_in[i]."""
    for i in range(out.shape[0]):
        wi = _v3(wi_in, i % wi_in.shape[0])
        wo = _v3(wo_in, i)
        ctx = _ctx(b, uv, i)
        e = D.eval(st, ctx, wi, wo)
        e2, p2 = D.eval_pdf(st, ctx, wi, wo)
        for k in ti.static(range(3)):
            out[i, k] = e[k]
            out[i, 4 + k] = e2[k]
        out[i, 3] = D.pdf(st, ctx, wi, wo)
        out[i, 7] = p2


@ti.kernel
def k_value(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), wo_in: ti.types.ndarray(),
            uv: ti.types.ndarray(), out: ti.types.ndarray()):
    """out[i] = eval(wi_in[i % K], wo_in[i]) (3): eval alone, for the finite differences of the adjoint checks."""
    for i in range(out.shape[0]):
        e = D.eval(st, _ctx(b, uv, i), _v3(wi_in, i % wi_in.shape[0]), _v3(wo_in, i))
        for k in ti.static(range(3)):
            out[i, k] = e[k]


@ti.kernel
def k_adjoint(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), wo_in: ti.types.ndarray(),
              uv: ti.types.ndarray(), dout: ti.types.ndarray()):
    for i in range(wo_in.shape[0]):
        D.adjoint(st, _ctx(b, uv, i), _v3(wi_in, i % wi_in.shape[0]), _v3(wo_in, i), _v3(dout, i))


@ti.kernel
def k_grad_dirs(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), wo_in: ti.types.ndarray(),
                uv: ti.types.ndarray(), dout: ti.types.ndarray(), out: ti.types.ndarray()):
    for i in range(wo_in.shape[0]):
        gi, go = D.grad_dirs(st, _ctx(b, uv, i), _v3(wi_in, i % wi_in.shape[0]), _v3(wo_in, i), _v3(dout, i))
        for k in ti.static(range(3)):
            out[i, k] = gi[k]
            out[i, 3 + k] = go[k]


@ti.kernel
def k_null(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(), uv: ti.types.ndarray(),
           out: ti.types.ndarray()):
    """out[i] = null_transmission(wi_in[i]) (3 channels)."""
    for i in range(out.shape[0]):
        w = D.null_transmission(st, _ctx(b, uv, i), _v3(wi_in, i))
        for k in ti.static(range(3)):
            out[i, k] = w[k]


@ti.kernel
def k_null_adjoint(st: ti.template(), D: ti.template(), b: ti.i32, wi_in: ti.types.ndarray(),
                   uv: ti.types.ndarray(), dout: ti.types.ndarray()):
    for i in range(wi_in.shape[0]):
        D.null_transmission_adjoint(st, _ctx(b, uv, i), _v3(wi_in, i), _v3(dout, i))


class Bench:
    """Scene with the BSDFs `specs` (id -> YAML spec; a texture given as {"range": (lo, hi)} (lo, hi
    numbers or per-channel lists; "channels": 1 for scalars) becomes an N x 1 random
    nearest-filtered bitmap, or with "shape": (h, w) an h x w random bilinear one). ``row(id)`` is
    the BSDF row of an id."""

    def __init__(self, specs, n=1, seed=0, tmpdir=None):
        import os
        import tempfile
        self.n = n
        rng = np.random.default_rng(seed)
        self._dir = tmpdir or tempfile.mkdtemp(prefix="bsdf_bench_")

        def convert(v, path):
            if isinstance(v, dict) and "range" in v:
                lo, hi = v["range"]
                ch = v.get("channels", 3)
                shape = tuple(v.get("shape", (1, n)))
                arr = rng.uniform(np.asarray(lo, float), np.asarray(hi, float), shape + (ch,)).astype(np.float32)
                f = os.path.join(self._dir, path.replace("/", "_") + ".npy")
                np.save(f, arr)
                return {"type": "bitmap", "data": f, "filter": "bilinear" if "shape" in v else "nearest"}
            if isinstance(v, dict):
                return {k: convert(x, f"{path}.{k}") for k, x in v.items()}
            return v
        bsdfs = {i: convert(s, i) for i, s in specs.items()}
        shapes = [{"id": f"s_{i}", "type": "rectangle", "bsdf": i} for i in specs]
        self.scene = tirender.load_scene({"sensors": [{"film": {"width": 2, "height": 2}}], "bsdfs": bsdfs,
                                          "shapes": shapes})
        if tmpdir is None:
            import shutil
            shutil.rmtree(self._dir, ignore_errors=True)   # bitmaps are read at load time
        self.st = self.scene.bind()
        self._D = {}
        dt = fdt()
        self.uv = np.ascontiguousarray(np.stack([(np.arange(n) + 0.5) / n, np.full(n, 0.5)], 1).astype(dt))
        self.uv0 = np.ascontiguousarray(self.uv[:1])

    def row(self, bid):
        return self.scene.desc.bsdf_ids[bid]

    def D(self, bid):
        """The dispatcher specialised to row `bid`'s models (as a scene using only it would be)."""
        from tirender.scene.scene import bsdf_levels
        levels = bsdf_levels(self.scene.desc.bsdfs, [self.row(bid)])
        if levels not in self._D:
            self._D[levels] = dispatch(levels)
        return self._D[levels]

    def _arr(self, a):
        return np.ascontiguousarray(a, dtype=fdt())

    def sample(self, bid, wi, n, seed=1, per_sample=False):
        out = np.zeros((n, 14), fdt())
        k_sample(self.st, self.D(bid), self.row(bid), self._arr(wi), self.uv if per_sample else self.uv0, seed,
                 self._arr(np.zeros((1, 3))), 0, out)
        return out.astype(np.float64)

    def eval_pdf(self, bid, wi, wo):
        """(eval (n, 3), pdf (n,)) of the row's eval_pdf at (wi[i % K], wo[i]), through the sampling kernel."""
        wo = self._arr(wo)
        out = np.zeros((wo.shape[0], 14), fdt())
        k_sample(self.st, self.D(bid), self.row(bid), self._arr(wi), self.uv0, 0, wo, 1, out)
        out = out.astype(np.float64)
        return out[:, 10:13], out[:, 13]

    def sample_u(self, bid, wi, u):
        """Samples for given wi[i] and u[i] = (u1, u2.x, u2.y): wo(3) weight(3) pdf eta delta valid."""
        out = np.zeros((len(u), 10), fdt())
        k_sample_u(self.st, self.D(bid), self.row(bid), self._arr(wi), self._arr(u), self.uv0, out)
        return out.astype(np.float64)

    def eval(self, bid, wi, wo, per_sample=False):
        wo = self._arr(wo)
        out = np.zeros((wo.shape[0], 8), fdt())
        k_eval(self.st, self.D(bid), self.row(bid), self._arr(wi), wo, self.uv if per_sample else self.uv0, out)
        return out.astype(np.float64)

    def value(self, bid, wi, wo):
        """eval (n, 3) at (wi[i % K], wo[i]) with per-sample texels (the kernel holds eval alone: a third of
        k_eval's code)."""
        wo = self._arr(wo)
        out = np.zeros((wo.shape[0], 3), fdt())
        k_value(self.st, self.D(bid), self.row(bid), self._arr(wi), wo, self.uv, out)
        return out.astype(np.float64)

    def grad_dirs(self, bid, wi, wo, dout):
        wo = self._arr(wo)
        out = np.zeros((wo.shape[0], 6), fdt())
        k_grad_dirs(self.st, self.D(bid), self.row(bid), self._arr(wi), wo, self.uv, self._arr(dout), out)
        return out.astype(np.float64)

    def null_transmission(self, bid, wi, per_sample=False):
        """(n, 3): the row's null transmission (a shadow ray's weight across it) for directions wi[i]."""
        wi = self._arr(wi)
        out = np.zeros((wi.shape[0], 3), fdt())
        k_null(self.st, self.D(bid), self.row(bid), wi, self.uv if per_sample else self.uv0, out)
        return out.astype(np.float64)

    def null_adjoint(self, bid, wi, dout, scale=2.0 ** 36):
        """Per-parameter gradient arrays of Σ_i <dout_i, null_transmission_i> (per-sample texels)."""
        from tirender.launch import read_gradients, reset_gradients
        reset_gradients(self.st, scale)
        k_null_adjoint(self.st, self.D(bid), self.row(bid), self._arr(wi), self.uv, self._arr(dout))
        return read_gradients(self.scene, self.st)

    # --- parameters: per-sample texels of the pool (set in full precision on the device) ---
    def params_of(self, bid):
        """Texture parameters of row `bid` and its nested rows (names in the pool)."""
        return [n for n in self.scene.params.keys() if n.startswith(bid + ".")]

    def pool(self):
        return self.st.pool.to_numpy().astype(np.float64)

    def set_pool(self, values):
        self.st.pool.from_numpy(np.asarray(values, fdt()))

    def adjoint(self, bid, wi, wo, dout, scale=2.0 ** 36):
        """Per-parameter gradient arrays (shaped like the parameters) of Σ_i <dout_i, eval_i>."""
        from tirender.launch import read_gradients, reset_gradients
        reset_gradients(self.st, scale)
        k_adjoint(self.st, self.D(bid), self.row(bid), self._arr(wi), self._arr(wo), self.uv, self._arr(dout))
        return read_gradients(self.scene, self.st)
