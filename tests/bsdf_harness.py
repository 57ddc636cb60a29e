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


# the modes of the two kernels: a model's primal queries (k_primal) and its adjoint checks (k_adjoint, the float64
# child's) each compile once per dispatcher instead of once per query (a megakernel's fixed compile cost, and
# eval_pdf shared by sampling and evaluation: about a third of the bench's cold compile time)
SAMPLE, SAMPLE_U, EVAL, GRAD_DIRS, VALUE, ADJOINT = range(6)


@ti.func
def _grad_dirs(st: ti.template(), D: ti.template(), ctx, wi, wo, dout, out: ti.template(), i):
    gi, go = D.grad_dirs(st, ctx, wi, wo, dout)
    for k in ti.static(range(3)):
        out[i, k] = gi[k]
        out[i, 3 + k] = go[k]


@ti.kernel
def k_primal(st: ti.template(), D: ti.template(), b: ti.i32, mode: ti.i32, n: ti.i32, wi_in: ti.types.ndarray(),
             wo_in: ti.types.ndarray(), uv: ti.types.ndarray(), aux: ti.types.ndarray(), seed: ti.i32, given: ti.i32,
             out: ti.types.ndarray()):
    """Sample i of n at wi_in[i % K] (and wo_in[i % N]):
    SAMPLE: out[i] = wo(3) weight(3) pdf eta delta valid eval(wi, wo)(3) pdf(wi, wo); with `given`, eval and pdf
    (the last four) at wo_in[i] instead of the sampled wo (the chi-square tests' pdf integration);
    SAMPLE_U: the first ten with given random numbers aux[i] = (u1, u2.x, u2.y) (comparisons with Mitsuba);
    EVAL: out[i] = eval(3), pdf, eval of eval_pdf(3), pdf of eval_pdf at (wi, wo_in[i]);
    GRAD_DIRS: out[i] = the gradients of <aux[i], eval> w.r.t. wi and wo (3 + 3)."""
    for i in range(n):
        wi = _v3(wi_in, i % wi_in.shape[0])
        wo = _v3(wo_in, i % wo_in.shape[0])
        ctx = _ctx(b, uv, i)
        if mode == GRAD_DIRS:
            _grad_dirs(st, D, ctx, wi, wo, _v3(aux, i), out, i)
        else:
            if mode != EVAL:
                u1 = 0.0
                u2 = vec2(0.0, 0.0)
                if mode == SAMPLE_U:
                    u1 = aux[i, 0]
                    u2 = vec2(aux[i, 1], aux[i, 2])
                else:
                    rng = make_sampler(seed, i, 0)
                    u1 = rng.next_1d()
                    u2 = rng.next_2d()
                s = D.sample(st, ctx, wi, u1, u2)
                if given == 0:
                    wo = s.wo
                for k in ti.static(range(3)):
                    out[i, k] = s.wo[k]
                    out[i, 3 + k] = s.weight[k]
                out[i, 6] = s.pdf
                out[i, 7] = s.eta
                out[i, 8] = s.delta
                out[i, 9] = s.valid
            if mode != SAMPLE_U:
                e, pd = D.eval_pdf(st, ctx, wi, wo)
                c = ti.select(mode == SAMPLE, 10, 4)
                for k in ti.static(range(3)):
                    out[i, c + k] = e[k]
                out[i, c + 3] = pd
                if mode == EVAL:
                    e1 = D.eval(st, ctx, wi, wo)
                    for k in ti.static(range(3)):
                        out[i, k] = e1[k]
                    out[i, 3] = D.pdf(st, ctx, wi, wo)


@ti.kernel
def k_adjoint(st: ti.template(), D: ti.template(), b: ti.i32, mode: ti.i32, n: ti.i32, wi_in: ti.types.ndarray(),
              wo_in: ti.types.ndarray(), uv: ti.types.ndarray(), aux: ti.types.ndarray(), out: ti.types.ndarray()):
    """The adjoint checks' queries at (wi_in[i % K], wo_in[i]), i < n: VALUE: out[i] = eval (3) (the finite
    differences); ADJOINT: <aux[i], eval>'s gradient scattered into the parameters; GRAD_DIRS: as k_primal's."""
    for i in range(n):
        wi = _v3(wi_in, i % wi_in.shape[0])
        wo = _v3(wo_in, i)
        ctx = _ctx(b, uv, i)
        if mode == VALUE:
            e = D.eval(st, ctx, wi, wo)
            for k in ti.static(range(3)):
                out[i, k] = e[k]
        elif mode == ADJOINT:
            D.adjoint(st, ctx, wi, wo, _v3(aux, i))
        else:
            _grad_dirs(st, D, ctx, wi, wo, _v3(aux, i), out, i)


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

    def _primal(self, bid, mode, wi, wo, n, cols, per_sample=False, aux=None, seed=0, given=0, D=None):
        out = np.zeros((n, cols), fdt())
        k_primal(self.st, D or self.D(bid), self.row(bid), mode, n, self._arr(wi), self._arr(wo),
                 self.uv if per_sample else self.uv0, self._arr(np.zeros((1, 3)) if aux is None else aux), seed, given,
                 out)
        return out.astype(np.float64)

    def sample(self, bid, wi, n, seed=1, per_sample=False):
        """n samples at wi[i % K]: wo(3) weight(3) pdf eta delta valid eval(3) pdf of the sampled wo."""
        return self._primal(bid, SAMPLE, wi, np.zeros((1, 3)), n, 14, per_sample, seed=seed)

    def eval_pdf(self, bid, wi, wo):
        """(eval (n, 3), pdf (n,)) of the row's eval_pdf at (wi[i % K], wo[i]), through the sampling mode."""
        out = self._primal(bid, SAMPLE, wi, wo, len(wo), 14, given=1)
        return out[:, 10:13], out[:, 13]

    def sample_u(self, bid, wi, u):
        """Samples for given wi[i] and u[i] = (u1, u2.x, u2.y): wo(3) weight(3) pdf eta delta valid."""
        return self._primal(bid, SAMPLE_U, wi, np.zeros((1, 3)), len(u), 10, aux=u)

    def eval(self, bid, wi, wo, per_sample=False, D=None):
        """(n, 8): eval(3), pdf, eval_pdf's eval(3) and pdf at (wi[i % K], wo[i]) (D: another dispatcher)."""
        return self._primal(bid, EVAL, wi, wo, len(wo), 8, per_sample, D=D)

    def _adjoint(self, bid, mode, wi, wo, aux, cols):
        out = np.zeros((len(wo), cols), fdt())
        k_adjoint(self.st, self.D(bid), self.row(bid), mode, len(wo), self._arr(wi), self._arr(wo), self.uv,
                  self._arr(aux), out)
        return out.astype(np.float64)

    def value(self, bid, wi, wo):
        """eval (n, 3) at (wi[i % K], wo[i]) with per-sample texels."""
        return self._adjoint(bid, VALUE, wi, wo, np.zeros((1, 3)), 3)

    def grad_dirs(self, bid, wi, wo, dout):
        """(n, 6): the gradients of <dout[i], eval> w.r.t. wi and wo, per-sample texels. In the float64 child
        (the adjoint checks, with value and adjoint) through k_adjoint, elsewhere k_primal: each process
        compiles one kernel per model."""
        if fdt() is np.float64:
            return self._adjoint(bid, GRAD_DIRS, wi, wo, dout, 6)
        return self._primal(bid, GRAD_DIRS, wi, wo, len(wo), 6, True, aux=dout)

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
        self._adjoint(bid, ADJOINT, wi, wo, dout, 1)
        return read_gradients(self.scene, self.st)
