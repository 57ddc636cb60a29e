"""Adam (Kingma & Ba 2015) and SGD as Taichi kernels over a flat 1-D parameter field.

The parameter pool of a scene (or a radiance-field grid) is one f32 field ``x`` with a twin
gradient field ``g``; per-element learning rates ``lr`` and bounds ``lo``/``hi`` let one kernel
serve every named parameter. After each step ``x`` is projected into [lo, hi].
"""
import numpy as np
import taichi as ti


@ti.kernel
def _adam_step(x: ti.template(), g: ti.template(), m: ti.template(), v: ti.template(),
               lr: ti.template(), lo: ti.template(), hi: ti.template(), n: ti.i32,
               beta1: float, beta2: float, eps: float, bc1: float, bc2: float):
    for i in range(n):
        gi = g[i]
        if gi != gi:  # NaN gradients never reach the parameters
            gi = 0.0
        m[i] = beta1 * m[i] + (1.0 - beta1) * gi
        v[i] = beta2 * v[i] + (1.0 - beta2) * gi * gi
        mh = m[i] / bc1
        vh = v[i] / bc2
        x[i] = ti.min(ti.max(x[i] - lr[i] * mh / (ti.sqrt(vh) + eps), lo[i]), hi[i])


@ti.kernel
def _sgd_step(x: ti.template(), g: ti.template(), m: ti.template(), lr: ti.template(),
              lo: ti.template(), hi: ti.template(), n: ti.i32, momentum: float):
    for i in range(n):
        gi = g[i]
        if gi != gi:
            gi = 0.0
        m[i] = momentum * m[i] + gi
        x[i] = ti.min(ti.max(x[i] - lr[i] * m[i], lo[i]), hi[i])


class _FieldOptimizer:
    """Shared state: moment fields sized like ``x``; ``lr``, ``lo``, ``hi`` per element."""

    def __init__(self, x, g, lr, lo=None, hi=None):
        self.x, self.g = x, g
        self.n = x.shape[0]
        self.m = ti.field(x.dtype, self.n)
        self.v = ti.field(x.dtype, self.n)
        self.lr = ti.field(x.dtype, self.n)
        self.lo = ti.field(x.dtype, self.n)
        self.hi = ti.field(x.dtype, self.n)
        self.set_lr(lr)
        self.lo.from_numpy(np.broadcast_to(np.asarray(-np.inf if lo is None else lo, np.float32), (self.n,)).copy())
        self.hi.from_numpy(np.broadcast_to(np.asarray(np.inf if hi is None else hi, np.float32), (self.n,)).copy())
        self.t = 0

    def set_lr(self, lr):
        """lr: scalar or (n,) array of per-element learning rates."""
        self.lr.from_numpy(np.broadcast_to(np.asarray(lr, np.float32), (self.n,)).copy())

    def reset(self):
        self.m.fill(0)
        self.v.fill(0)
        self.t = 0

    def state_dict(self):
        return {"m": self.m.to_numpy(), "v": self.v.to_numpy(), "t": self.t}

    def load_state_dict(self, s):
        self.m.from_numpy(np.asarray(s["m"], np.float32))
        self.v.from_numpy(np.asarray(s["v"], np.float32))
        self.t = int(s["t"])


class Adam(_FieldOptimizer):
    def __init__(self, x, g, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, lo=None, hi=None):
        super().__init__(x, g, lr, lo, hi)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def step(self):
        self.t += 1
        _adam_step(self.x, self.g, self.m, self.v, self.lr, self.lo, self.hi, self.n,
                   self.beta1, self.beta2, self.eps,
                   1.0 - self.beta1 ** self.t, 1.0 - self.beta2 ** self.t)


class SGD(_FieldOptimizer):
    def __init__(self, x, g, lr=1e-2, momentum=0.0, lo=None, hi=None):
        super().__init__(x, g, lr, lo, hi)
        self.momentum = momentum

    def step(self):
        self.t += 1
        _sgd_step(self.x, self.g, self.m, self.lr, self.lo, self.hi, self.n, self.momentum)
