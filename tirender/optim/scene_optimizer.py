"""Optimisers over a scene's named parameters, for Python loops written as Mitsuba's (``mi.ad.Adam``):

    opt = tirender.Adam(scene, lr=0.05, params=["red.reflectance"])     # lr={"name": lr} per parameter
    for it in range(40):
        img = tirender.render(scene, spp=8, seed=1 + it)
        loss, dy = tirender.losses.l2(img, target)
        opt.step(tirender.render_grad(scene, dy, spp=8, seed=1000 + it))

``step(grads)`` makes ``grads`` (render_grad's dict: name -> array shaped like the parameter) the scene's gradients
and takes one step on the device over the scene's parameter pool (optim/adam.py's kernels: the pool is not copied
to the host), projected into each parameter's bounds; ``step()`` without an argument steps with the gradients
render_grad left on the device (a sum over views with ``accumulate=True``). Parameters not named are not
touched. Textures, volume grids and mesh vertices are parameters like any other (a moved mesh is refitted before
the next render).

Defaults are Dr.Jit's (Mitsuba 3's ``mi.ad.Adam``): β₁ 0.9, β₂ 0.999, ε 1e-8 absolute (in the gradient's units),
so a ported tutorial behaves as in Mitsuba; ``eps_mode="relative"`` gives the loss-scale-invariant ε of the
YAML driver's option of that name (docs/optimize.md).
"""
import numbers

import numpy as np

from ..errors import ConfigError
from . import adam


def _scene_of(scene):
    from ..scene.scene import Scene
    if not isinstance(scene, Scene):
        raise ConfigError(f"expected a tirender Scene (tirender.load_scene), got {type(scene).__name__}",
                          key="scene")
    return scene


def _positive(v, what):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v) or v < 0:
        raise ConfigError(f"expected a number ≥ 0, got {v!r:.40}", key=what)
    return float(v)


class _SceneOptimizer:
    """Shared: which parameters (names resolved as scene.params resolves them, Mitsuba's spellings included),
    their learning rates and the pool's bounds, as per-element arrays over the device pool."""

    def __init__(self, scene, lr, params):
        self.scene = _scene_of(scene)
        pool = self.scene.params
        if params is None:
            params = list(lr) if isinstance(lr, dict) else list(pool.keys())
        if isinstance(params, str):
            params = [params]
        if not isinstance(params, (list, tuple)) or not all(isinstance(n, str) for n in params):
            raise ConfigError(f"expected a list of parameter names, got {params!r:.60}", key="params")
        names = [pool.resolve(n) for n in params]
        for given, n in zip(params, names):
            if n not in pool.keys():
                raise ConfigError(f"unknown parameter {given!r:.60} (scene.params has: "
                                  f"{', '.join(pool.keys()[:12])}{', …' if len(pool.keys()) > 12 else ''})",
                                  key="params")
        if not names:
            raise ConfigError("no parameters to optimise", key="params")
        self.names = names
        lrs = {pool.resolve(k): v for k, v in lr.items()} if isinstance(lr, dict) else {n: lr for n in names}
        for k in lrs:
            if k not in names:
                raise ConfigError(f"a learning rate for {k!r}, which is not among params", key="lr")
        self._lrs = {n: _positive(lrs.get(n, 0.0), f"lr.{n}" if isinstance(lr, dict) else "lr") for n in names}
        st = self.scene.bind()
        cap = st.caps["pool"]
        self._lo = np.full(cap, -np.inf, np.float32)
        self._hi = np.full(cap, np.inf, np.float32)
        plo, phi = pool.bounds_arrays()
        self._lo[:plo.size], self._hi[:phi.size] = plo, phi
        self.segments = [self._range(n) for n in names]

    def _range(self, name):
        i = self.scene.params.info(name)
        return i.offset, i.offset + i.size

    def _lr_array(self):
        lr = np.zeros(self.scene.bind().caps["pool"], np.float32)
        for n in self.names:
            a, b = self._range(n)
            lr[a:b] = self._lrs[n]
        return lr

    def set_learning_rate(self, lr):
        """A new learning rate: a number for every parameter, or {name: lr}."""
        upd = {self.scene.params.resolve(k): v for k, v in lr.items()} if isinstance(lr, dict) else \
            {n: lr for n in self.names}
        for k, v in upd.items():
            if k not in self._lrs:
                raise ConfigError(f"{k!r} is not optimised by this optimiser", key="lr")
            self._lrs[k] = _positive(v, "lr")
        self._opt.set_lr(self._lr_array())

    def step(self, grads=None):
        """One step with ``grads`` (render_grad's dict; None: the gradients already on the device)."""
        from ..api import set_gradients
        if grads is not None:
            if not isinstance(grads, dict):
                raise ConfigError(f"expected render_grad's dict (name -> array), got {type(grads).__name__}",
                                  key="grads")
            set_gradients(self.scene, {self.scene.params.resolve(k): v for k, v in grads.items()})
        st = self.scene.bind()
        if self._opt.x is not st.pool:        # the scene's storage was rebuilt (it grew): follow it
            self._rebuild()
        self._opt.step()
        self.scene.mark_device_params_changed()

    def _rebuild(self):
        state = self.state_dict()
        self.__init__(self.scene, self._lrs, self.names, **self._kw)
        self.load_state_dict(state)

    def _per_param(self, flat):
        return {n: flat[a:b].copy() for n, (a, b) in zip(self.names, self.segments)}

    def _from_params(self, d, key):
        flat = np.zeros(self.scene.bind().caps["pool"], np.float32)
        for n, (a, b) in zip(self.names, self.segments):
            if f"{key}:{n}" in d:
                v = np.asarray(d[f"{key}:{n}"], np.float32).ravel()
                if v.size != b - a:
                    raise ConfigError(f"state of {n!r} has {v.size} values, the parameter {b - a}", key="state")
                flat[a:b] = v
        return flat


class Adam(_SceneOptimizer):
    """Adam over a scene's parameters (module doc). lr: a number or {name: lr}; params: names (default: lr's keys,
    else every parameter); beta1, beta2, eps: Dr.Jit's defaults; eps_mode "absolute" (Dr.Jit's) or "relative"."""

    def __init__(self, scene, lr=1e-3, params=None, beta1=0.9, beta2=0.999, eps=1e-8, eps_mode="absolute"):
        super().__init__(scene, lr, params)
        for k, v in (("beta1", beta1), ("beta2", beta2)):
            if _positive(v, k) >= 1.0:
                raise ConfigError(f"must be in [0, 1), got {v}", key=k)
        if eps_mode not in adam.EPS_MODES:
            raise ConfigError(f"unknown eps_mode {eps_mode!r} (expected one of: {', '.join(adam.EPS_MODES)})",
                              key="eps_mode")
        self._kw = dict(beta1=beta1, beta2=beta2, eps=eps, eps_mode=eps_mode)
        st = self.scene.bind()
        self._opt = adam.Adam(st.pool, st.grad, lr=self._lr_array(), beta1=float(beta1), beta2=float(beta2),
                              eps=_positive(eps, "eps"), lo=self._lo, hi=self._hi, eps_mode=eps_mode,
                              segments=self.segments)

    def state_dict(self):
        """{"t": steps, "m:<name>": first moments, "v:<name>": second moments} (flat float32 per parameter)."""
        s = self._opt.state_dict()
        out = {"t": s["t"]}
        out.update({f"m:{n}": v for n, v in self._per_param(s["m"]).items()})
        out.update({f"v:{n}": v for n, v in self._per_param(s["v"]).items()})
        return out

    def load_state_dict(self, d):
        self._opt.load_state_dict({"m": self._from_params(d, "m"), "v": self._from_params(d, "v"),
                                   "t": int(d.get("t", 0))})


class SGD(_SceneOptimizer):
    """Gradient descent with momentum over a scene's parameters (Dr.Jit's ``mi.ad.SGD``: x ← x − lr·m,
    m ← momentum·m + g)."""

    def __init__(self, scene, lr=1e-3, params=None, momentum=0.0):
        super().__init__(scene, lr, params)
        self._kw = dict(momentum=momentum)
        st = self.scene.bind()
        self._opt = adam.SGD(st.pool, st.grad, lr=self._lr_array(), momentum=_positive(momentum, "momentum"),
                             lo=self._lo, hi=self._hi)

    def state_dict(self):
        s = self._opt.state_dict()
        out = {"t": s["t"]}
        out.update({f"m:{n}": v for n, v in self._per_param(s["m"]).items()})
        return out

    def load_state_dict(self, d):
        m = self._from_params(d, "m")
        self._opt.load_state_dict({"m": m, "v": np.zeros_like(m), "t": int(d.get("t", 0))})
