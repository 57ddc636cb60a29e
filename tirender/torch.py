"""PyTorch interop: the renderer and the radiance-field ray marcher as ``torch.autograd`` functions.

    import torch, tirender, tirender.torch as tt
    scene = tirender.load_scene("configs/texture_recovery.yaml")
    tex = torch.full((64, 64, 3), 0.5, requires_grad=True)
    img = tt.render(scene, {"canvas.reflectance": tex}, spp=16, seed=it)   # (H, W, 3) float32
    ((img - target) ** 2).mean().backward()                                # tex.grad: PRB

:func:`render` (scenes) — ``params``: dict parameter name (``scene.params`` names, Mitsuba-style
aliases too) -> tensor shaped like the parameter (``scene.params.info(name).shape``: (3,) RGB,
(1,) scalar, (H, W, C) bitmap, (D, H, W, C) grid), or broadcastable as ``scene.params`` accepts
(a number for an RGB/scalar, a colour (C,) for a bitmap). Values must lie in the parameter's
bounds (a ``ConfigError`` otherwise: clamp, or produce them through a sigmoid). Returns the
image, float32 (H, W, 3) linear RGB, row 0 at the top, on the device of the first parameter
tensor. Differentiable w.r.t. every floating-point tensor of ``params``; backward runs
``tirender.render_grad`` (PRB, or ``method``) with the incoming gradient as the adjoint image and
returns each tensor's gradient in its dtype, device and shape.

:func:`render_rays` (radiance fields) — ``x``: the field's parameters, (R, R, R, C) [z, y, x, ch]
(the layout of ``RadianceField.to_numpy``); returns L (n, 3) differentiable w.r.t. ``x`` through
the path-replay ``backward_rays``.

What crosses how. Forward: a float32 tensor of the parameter's exact shape on the device Taichi
runs on (a CPU tensor with the CPU backend, a CUDA tensor with CUDA) is written into the scene's
device pool by a kernel that reads the tensor's memory in place (``Scene.write_param_device``:
no host round trip; bounds and finiteness checked on the device). Any other tensor (another
dtype or device, a broadcast shape, an environment map whose sampling distribution is built on
the host) goes through the host: detached, copied to the host if it is on a GPU, viewed by numpy
(CPU float32/float64) and copied by ``scene.params[name] = value`` into the pool's master array,
which the scene uploads before the next kernel. The image comes back as a numpy array that torch
views without a copy (moved to the parameters' device: one host->device copy for CUDA).
Backward: the adjoint image goes to the host (a copy for CUDA tensors); gradients are folded from
the fixed-point accumulators into float64 on the host (launch.read_gradients) and come back as
numpy arrays, cast/moved to each input's dtype/device (one copy). Radiance fields go through the
host: ``field.from_numpy`` in, L out; backward uploads x again (one copy), and leaves
``field.grad`` as it found it.

Seeds: forward renders with ``seed``; backward's adjoint passes use ``seed_grad`` (default
:func:`adjoint_seed` (seed) != seed: PRB's three-pass scheme needs decorrelated seeds). A seed
fixes the image and the gradients bit for bit (per backend), so the backward of
``render(..., seed=s, seed_grad=t)`` equals ``tirender.render_grad(scene, dy, spp_grad, t)``.

Each call is its own graph node: several renders (views, sensors) in one graph each run their own
``render_grad`` (``accumulate=False``) in backward and torch sums the results. The values a call
set are re-set before its backward (PRB replays the primal paths at those values), so a later
forward with other values does not corrupt an earlier backward. Parameters not in ``params`` are
used at whatever value the scene holds when backward runs.
"""
import numpy as np

try:
    import torch
except ImportError:
    raise ImportError('tirender.torch needs PyTorch: pip install "tirender[torch]"') from None
from torch.autograd.function import once_differentiable

from . import api, backend
from .errors import ConfigError
from .integrators import registry
from .schema import Integer

__all__ = ["render", "render_rays", "adjoint_seed"]

_SPP, _SEED = Integer("spp", lo=1, hi=1 << 24), Integer("seed", lo=0, hi=(1 << 32) - 1)


def adjoint_seed(seed):
    """The default seed of the adjoint passes for primal seed ``seed``: a 32-bit hash of it, never equal to it."""
    s = (int(seed) * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    s ^= s >> 16
    s = (s * 0x85EBCA6B) & 0xFFFFFFFF
    s ^= s >> 13
    return s if s != int(seed) else (s + 1) & 0xFFFFFFFF


def _host(t, dtype=None):
    """A tensor's values as a numpy array on the host: a view for CPU float32/float64 tensors
    (cast to ``dtype`` when given), else one copy (device->host, and/or a cast to float32)."""
    t = t.detach()
    if dtype is not None:
        t = t.to(dtype)
    elif t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32)
    return t.cpu().numpy()


def _like(g, t):
    """numpy gradient g -> tensor with t's dtype, device and shape (summed over broadcast axes)."""
    g = torch.from_numpy(np.ascontiguousarray(g))
    if tuple(g.shape) != tuple(t.shape):
        g = g.sum().reshape(t.shape) if t.numel() == 1 else g.sum_to_size(t.shape)
    return g.to(dtype=t.dtype if t.is_floating_point() else torch.float32, device=t.device)


def _in_place(t):
    """Whether Taichi's kernels can read tensor t where it is (float32, on Taichi's device)."""
    arch = backend.current_arch()
    return t.dtype == torch.float32 and t.device.type == {"cpu": "cpu", "cuda": "cuda"}.get(arch)


def _set(scene, names, tensors):
    """Write the tensors into the scene's parameters: on the device, read in place, when Taichi can
    (``Scene.write_param_device``); else through scene.params (skipping values the pool already
    holds: no re-upload)."""
    for n, t in zip(names, tensors):
        if _in_place(t) and tuple(t.shape) == scene.params.info(n).shape:
            if scene.write_param_device(n, t.detach().reshape(-1).contiguous()):
                continue
        v = _host(t)
        cur = scene.params[n]
        if cur.shape != v.shape or not np.array_equal(cur, v.astype(np.float32, copy=False)):
            scene.params[n] = v


class _Render(torch.autograd.Function):
    """forward(scene, opts, names, *tensors) -> image; backward: render_grad at the forward's values."""

    @staticmethod
    def forward(ctx, scene, opts, names, *tensors):
        _set(scene, names, tensors)
        img = api.render(scene, spp=opts["spp"], seed=opts["seed"], sensor=opts["sensor"], progress=opts["progress"])
        ctx.scene, ctx.opts, ctx.names = scene, opts, names
        ctx.save_for_backward(*tensors)
        out = torch.from_numpy(img)
        return out.to(tensors[0].device) if tensors else out

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        tensors = ctx.saved_tensors
        need = ctx.needs_input_grad[3:]
        grads = [None] * len(tensors)
        if not any(need) or dy is None or not bool(dy.any()):
            return (None, None, None, *(None if not k else torch.zeros_like(t) for k, t in zip(need, tensors)))
        scene, o = ctx.scene, ctx.opts
        _set(scene, ctx.names, tensors)
        g = api.render_grad(scene, _host(dy, torch.float32), spp=o["spp_grad"], seed=o["seed_grad"],
                            sensor=o["sensor"], method=o["method"], accumulate=False, progress=o["progress"],
                            params=list(ctx.names))
        for i, (n, t) in enumerate(zip(ctx.names, tensors)):
            if need[i]:
                grads[i] = _like(g[n], t)
        return (None, None, None, *grads)


def render(scene, params, spp=64, seed=0, sensor=0, spp_grad=None, seed_grad=None, method="prb", progress=False):
    """Render ``scene`` with the parameter values ``params`` (dict name -> tensor): float32 (H, W, 3)
    linear RGB, differentiable w.r.t. every floating-point tensor in ``params``.

    spp/seed: the forward render; spp_grad (default spp) / seed_grad (default adjoint_seed(seed)):
    the adjoint passes of backward; method: ``prb`` or another method ``render_grad`` supports for
    the scene's integrator (``rb``, ``rb_biased``, ...). Unknown names, wrong shapes, out-of-bounds
    or non-finite values raise tirender.ConfigError (one line)."""
    from .scene.scene import Scene
    if not isinstance(scene, Scene):
        raise ConfigError(f"expected a Scene (tirender.load_scene), got {type(scene).__name__}", key="scene")
    if not isinstance(params, dict):
        raise ConfigError(f"expected a dict name -> tensor, got {type(params).__name__}", key="params")
    names, tensors = [], []
    for name, value in params.items():
        pname = scene.params.info(name).name   # ConfigError for an unknown name
        if pname in names:
            raise ConfigError(f"given twice (as '{pname}' and an alias)", key=name)
        names.append(pname)
        tensors.append(value if isinstance(value, torch.Tensor) else torch.as_tensor(value))
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):   # fail before rendering
        registry.gradient_driver(scene.integrator["type"], method if isinstance(method, str) else repr(method))
    spp, seed = _SPP.parse(spp, None, "spp"), _SEED.parse(seed, None, "seed")
    opts = dict(spp=spp, seed=seed, sensor=sensor, method=method, progress=progress,
                spp_grad=spp if spp_grad is None else _SPP.parse(spp_grad, None, "spp_grad"),
                seed_grad=adjoint_seed(seed) if seed_grad is None else _SEED.parse(seed_grad, None, "seed_grad"))
    return _Render.apply(scene, opts, tuple(names), *tensors)


class _RenderRays(torch.autograd.Function):
    """forward(field, rays, x) -> L (n, 3); backward: backward_rays at the forward's x."""

    @staticmethod
    def forward(ctx, field, rays, x):
        from .radiance_field import render as rf
        field.from_numpy(_host(x))
        L, ns = rf.render_rays(field, *rays[:3])
        ctx.field, ctx.rays, ctx.L, ctx.ns = field, rays, L, ns
        ctx.save_for_backward(x)
        return torch.from_numpy(L).to(x.device)

    @staticmethod
    @once_differentiable
    def backward(ctx, dL):
        from .radiance_field import render as rf
        (x,) = ctx.saved_tensors
        if not ctx.needs_input_grad[2] or dL is None:
            return None, None, None
        field = ctx.field
        field.from_numpy(_host(x))      # a later forward may have set other values: replay at these
        before = field.grad.to_numpy()  # field.grad is used as scratch and restored afterwards
        field.zero_grad()
        o, d, jitter, mode = ctx.rays
        rf.backward_rays(field, o, d, jitter, ctx.L, _host(dL, torch.float64), ctx.ns, mode=mode)
        g = field.grad_numpy()
        field.grad.from_numpy(before)
        return None, None, _like(g.reshape(x.shape), x)


def render_rays(field, x, o, d, jitter=None, mode="auto"):
    """Emission-absorption march of the RadianceField ``field`` with parameters ``x`` (tensor,
    (R, R, R, C) [z, y, x, ch], as field.to_numpy()): radiance L (n, 3), differentiable w.r.t. x.

    o, d: (n, 3) ray origins / directions (tensors or arrays; not differentiated; d is
    normalised); jitter: (n,) in [0, 1) (default 0.5); mode: backward_rays' scatter mode
    ("auto", "atomic", "expand", "ordered": bit-reproducible on the CPU). ``field``'s parameters
    are overwritten with x; ``field.grad`` is left unchanged."""
    from .radiance_field import RadianceField
    if not isinstance(field, RadianceField):
        raise ConfigError(f"expected a RadianceField, got {type(field).__name__}", key="field")
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    arr = [None if a is None else (_host(a, torch.float64) if isinstance(a, torch.Tensor) else np.asarray(a))
           for a in (o, d, jitter)]
    return _RenderRays.apply(field, (*arr, mode), x)
