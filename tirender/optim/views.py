"""One view's share of an optimisation iteration: the unit of work that ``tirender optimize``
runs in turn (one process) or shards over workers (``--workers N``, tirender/distributed.py).

An iteration of a multi-view task is, per view v (sensors in ``optimize.views`` order):
primal image (seed s0) -> loss ℓ_v and δy_v = ∂ℓ_v/∂image -> gradient g_v of <δy_v / n_views, image>
(seed s1 ≠ s0). Every quantity is a pure function of (parameter values, iteration, view): the seeds
come from ``view_seed`` and the film and gradients accumulate in fixed point (core/fixed_point.py),
so a view evaluated by any process on the same backend gives the same bits.

The views' gradients are added **exactly**, so the total cannot depend on which process evaluated
which view, nor on how many processes there were, nor on the order of the additions:
  1. each view reports max|g_v| per parameter (``maxima``);
  2. per parameter, one power-of-two scale S = ``scale_for(max over views, n_views)`` (no sum of
     n_views values can leave the i64 range);
  3. q_v = round(g_v · S) as int64; Σ_v q_v is exact in any grouping (a worker adds its views, the
     driver adds the workers' partial sums); the gradient is Σ_v q_v / S (float64).
Resolution: 2^-62 · n_views of the largest view's largest element (non-finite elements count as 0,
as the optimisers skip them anyway). Losses add in view order (``combine``).
"""
from dataclasses import dataclass, field

import numpy as np

from . import losses


def view_seed(base, it, view, k):
    """Decorrelated seeds: k = 0 primal, 1 adjoint (PRB three-pass scheme: s0 != s1)."""
    return (int(base) * 1000003 + it * 4099 + view * 67 + k * 7919 + 1) & 0xFFFFFFFF


@dataclass
class ViewTask:
    """What a process needs to evaluate one view at one iteration (parameter values travel apart).

    previous: the pipelined methods' image of this view from the previous iteration (None at the
    first; RB biased II back-propagates the δy of that image)."""
    it: int
    view: int
    n_views: int
    spp: int
    spp_grad: int
    seed: int
    method: str
    loss: str
    names: tuple
    previous: np.ndarray = None


@dataclass
class ViewResult:
    """loss: ℓ_v (not divided by n_views); image: float32 (H, W, 3) rendered this iteration;
    maxima: name -> max |g_v| (finite elements); grads: name -> float64 g_v shaped like the parameter
    (empty once a worker kept them for the reduction)."""
    view: int
    loss: float
    image: np.ndarray
    maxima: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)


def _finite(g):
    return np.where(np.isfinite(g), g, 0.0)


def gradient_scales(results, n_views):
    """name -> the fixed-point scale of the exact sum over `n_views` views (from their maxima)."""
    from ..core.fixed_point import scale_for
    names = {n for r in results for n in r.maxima}
    return {n: scale_for(max(r.maxima.get(n, 0.0) for r in results), n_views) for n in sorted(names)}


def quantized_sum(grads_list, scales):
    """Σ_v round(g_v · S) per name (int64, exact): grads_list is [name -> float64 array]."""
    total = {}
    for grads in grads_list:
        for n, g in grads.items():
            q = np.rint(_finite(g) * scales[n]).astype(np.int64)
            total[n] = q if n not in total else total[n] + q
    return total


def add_quantized(a, b):
    """Two partial sums of quantized_sum added (exact)."""
    out = dict(a)
    for n, q in b.items():
        out[n] = q if n not in out else out[n] + q
    return out


def dequantize(total, scales):
    """name -> float64 gradient Σ_v q_v / S."""
    return {n: q.astype(np.float64) / scales[n] for n, q in total.items()}


def resize_param(scene, name, shape):
    """Resample the bitmap texture (shape (h, w)) or 3D grid (shape (D, H, W)) parameter `name`."""
    if len(shape) == 3:
        scene.resize_grid(name, shape)
    else:
        scene.resize_texture(name, shape[0], shape[1])


def set_params(scene, values):
    """Set the scene's parameters to `values` (name -> array shaped like the parameter), first
    resizing textures and grids whose resolution differs (a coarse-to-fine stage change)."""
    for name, v in values.items():
        info = scene.params.info(name)
        if v.shape != info.shape and info.kind in ("texture", "grid"):
            resize_param(scene, name, v.shape[:-1])
        scene.params[name] = v


def evaluate_view(scene, task, target):
    """Evaluate one view of the scene at its current parameter values (``ViewTask``): a ViewResult."""
    from ..api import render, render_and_grad, render_grad
    loss_fn = losses.LOSSES[task.loss]
    v, nv = task.view, task.n_views
    if task.method.endswith("_pipelined"):
        # RB biased II (pipelining, Nimier-David 2020 §3.8): δy from the previous iteration's image;
        # ONE joint pass renders this iteration's image and back-propagates that δy through the
        # current parameters (spp = primal spp)
        prev = task.previous
        if prev is None:
            prev = render(scene, spp=task.spp, seed=view_seed(task.seed, task.it, v, 1), sensor=v, progress=False)
        lv, dy = loss_fn(prev, target)
        img, g = render_and_grad(scene, dy / nv, spp=task.spp, seed=view_seed(task.seed, task.it, v, 0), sensor=v,
                                 method=task.method, accumulate=False)
    else:
        img = render(scene, spp=task.spp, seed=view_seed(task.seed, task.it, v, 0), sensor=v, progress=False)
        lv, dy = loss_fn(img, target)
        g = render_grad(scene, dy / nv, spp=task.spp_grad, seed=view_seed(task.seed, task.it, v, 1), sensor=v,
                        method=task.method, accumulate=False, progress=False, params=task.names)
    grads = {n: np.asarray(g[n], np.float64) for n in task.names}
    maxima = {n: float(np.abs(_finite(a)).max(initial=0.0)) for n, a in grads.items()}
    return ViewResult(v, float(lv), img, maxima, grads)


def combine(results, n_views):
    """The iteration's loss Σ ℓ_v / n_views, added in view order (the results' order)."""
    loss = 0.0
    for r in results:
        loss += r.loss / n_views
    return loss


class LocalViews:
    """The views of a task evaluated in this process, in turn (``tirender optimize`` without
    ``--workers``); tirender/distributed.py ``WorkerPool`` has the same interface."""

    def __init__(self, scene, targets):
        self.scene = scene
        self.targets = targets          # view -> float32 (H, W, 3) target image

    def evaluate(self, tasks, params=None):
        """(ViewResults of `tasks` in their order, {name: float64 gradient summed over the tasks})
        (params: unused, the scene holds the values)."""
        results = [evaluate_view(self.scene, t, self.targets[t.view]) for t in tasks]
        scales = gradient_scales(results, len(tasks))
        return results, dequantize(quantized_sum([r.grads for r in results], scales), scales)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
