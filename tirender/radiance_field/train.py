"""Training driver: coarse-to-fine stages, Adam, TV, held-out PSNR, checkpoints with resume.

Each iteration: draw a batch of training pixels (or one full view), march them with per-ray
jitter (forward), form ℒ and δL, replay the same rays backward into the grid gradient
(no per-sample storage), add the TV gradient, take one Adam step. Between stages the grid is
upsampled in place (``train.upsample``: cubic — Catmull-Rom clamped to the local range — or
trilinear, see resample.py) and Adam's moments are carried to the finer voxels
(``train.adam_state: carry``: resampled trilinearly, each element's step bounded, rescaled;
resample.carry_adam_moments) or reset. ``train.loss_watch`` prints one line (and records it in
metrics.json ``warnings``) when the loss rises across a stage change or over a window
(tirender/optim/watch.py).

Outputs in ``out_dir``: ``field.npz`` (final field + camera metadata for ``tirender render``),
``checkpoint.npz`` (written atomically, used by ``resume``), ``metrics.json`` (``heldout_psnr``
per stage and final, time-to-PSNR curve, peak RSS, ``warnings``) and ``heldout_<view>.png``
(render | reference).
"""
import json
import os
import resource
import sys
import time

import numpy as np

from ..errors import ConfigError
from ..optim.adam import DEFAULT_EPS_MODE, EPS_MODES, Adam
from ..optim.metrics import standard
from ..optim.watch import DEFAULT_FACTOR, DEFAULT_WINDOW, LossWatch, parse_loss_watch
from ..progress import Progress
from .dataset import Dataset, load_nerf, path_traced_dataset, procedural_dataset, render_field_views
from .field import COLOR_ACTIVATIONS, DENSITY_ACTIVATIONS, RadianceField, channels, np_float
from .render import LOSSES, render_and_backward
from .resample import METHODS as UPSAMPLE_METHODS, carry_adam_moments

ADAM_STATES = ("carry", "reset")
VIEW_ORDERS = ("shuffle", "sequential", "random")

DEFAULTS = {
    "seed": 0,
    "dataset": {"type": "procedural", "views": 8, "heldout": 2, "width": 128, "height": 128, "fov": 45.0,
                "radius": 3.2, "elevation": [-30.0, 75.0], "azimuth": 360.0, "gt_res": 64, "gt_step": 0.5,
                "spp": 1},
    "field": {"bbox_min": [-1.0, -1.0, -1.0], "bbox_max": [1.0, 1.0, 1.0], "sh_degree": 2,
              "density_activation": "relu", "color_activation": "relu", "init_density": 0.01,
              "init_color": 0.5, "step": 1.0, "background": None, "t_min": 1e-4, "color_clip": False},
    "train": {"stages": [{"res": 16, "iters": 200}, {"res": 32, "iters": 200},
                         {"res": 64, "iters": 200, "lr_scale": 0.5}],
              "batch": 4096, "loss": "l2", "lr_density": 0.2, "lr_color": 0.05, "lr_decay": 1.0,
              "tv_density": 0.002, "tv_color": 0.002, "l1_density": 0.0, "pixel_jitter": False, "deterministic": False,
              "eval_every": 0, "eval_spp": 1, "checkpoint_every": 100, "save_pngs": True,
              "upsample": "cubic", "adam_state": "carry", "view_order": "shuffle",
              "eps_mode": DEFAULT_EPS_MODE, "eps": None,
              "loss_watch": {"factor": DEFAULT_FACTOR, "window": DEFAULT_WINDOW}},
}


# ----------------------------------------------------------------------------- config

def _merge(defaults, user, file, prefix):
    out = dict(defaults)
    for k, v in (user or {}).items():
        if k not in defaults:
            raise ConfigError(f"unknown key (expected one of {', '.join(defaults)})", file=file,
                              key=f"{prefix}.{k}")
        out[k] = v
    return out


def _batch(b, file, key):
    if isinstance(b, str):
        if b not in ("view", "all"):
            raise ConfigError(f"expected a number of rays, 'view' or 'all', got '{b}'", file=file, key=key)
        return b
    try:
        if isinstance(b, bool) or int(b) != b or int(b) < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"expected a number of rays ≥ 1, 'view' or 'all', got {b!r}", file=file, key=key)
    return int(b)


def parse_config(cfg, cfg_path=None):
    """Validate the ``radiance_field:`` section (or a dict that is that section) → normalised dict."""
    if isinstance(cfg, dict) and "radiance_field" in cfg:
        cfg = cfg["radiance_field"]
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise ConfigError("expected a mapping", file=cfg_path, key="radiance_field")
    f = cfg_path
    top = _merge({"seed": 0, "dataset": None, "field": None, "train": None}, cfg, f, "radiance_field")
    out = {"seed": top["seed"]}
    for sec in ("dataset", "field", "train"):
        user = top[sec] or {}
        if not isinstance(user, dict):
            raise ConfigError("expected a mapping", file=f, key=f"radiance_field.{sec}")
        if sec == "dataset":
            kind = user.get("type", "procedural")
            extra = {"procedural": {}, "nerf": {"path": None, "background": [1.0, 1.0, 1.0], "downscale": 1,
                                                "max_views": None},
                     "path_traced": {"scene": None, "center": [0.0, 0.0, 0.0], "up": [0.0, 1.0, 0.0]}}
            if kind not in extra:
                raise ConfigError(f"unknown dataset type '{kind}' (procedural, nerf, path_traced)", file=f,
                                  key="radiance_field.dataset.type")
            d = dict(DEFAULTS["dataset"], **extra[kind])
            if kind == "path_traced":
                d["spp"] = 64
            out[sec] = _merge(d, user, f, f"radiance_field.{sec}")
        else:
            out[sec] = _merge(DEFAULTS[sec], user, f, f"radiance_field.{sec}")
    ds, fl, tr = out["dataset"], out["field"], out["train"]
    key = "radiance_field."

    def num(sec, k, lo=None, integer=False, d=None):
        v = (d if d is not None else out[sec])[k]
        try:
            v = int(v) if integer else float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"expected a number, got {v!r}", file=f, key=f"{key}{sec}.{k}")
        if lo is not None and v < lo:
            raise ConfigError(f"must be ≥ {lo}, got {v}", file=f, key=f"{key}{sec}.{k}")
        (d if d is not None else out[sec])[k] = v
        return v

    try:
        out["seed"] = int(out["seed"])
    except (TypeError, ValueError):
        raise ConfigError(f"expected an integer, got {out['seed']!r}", file=f, key=key + "seed")
    for k in ("views", "width", "height", "spp"):
        num("dataset", k, 1, True)
    num("dataset", "heldout", 0, True)
    for k in ("fov", "radius"):
        num("dataset", k, 1e-9)
    try:
        el = [float(v) for v in ds["elevation"]]
        assert len(el) == 2 and -90 <= el[0] <= 90 and -90 <= el[1] <= 90
    except (TypeError, ValueError, AssertionError):
        raise ConfigError(f"expected [min, max] degrees in [-90, 90], got {ds['elevation']!r}", file=f,
                          key=key + "dataset.elevation")
    ds["elevation"] = el
    num("dataset", "azimuth", 1e-6)
    if ds["type"] == "nerf" and not ds["path"]:
        raise ConfigError("the nerf dataset needs 'path' (a folder with transforms.json)", file=f,
                          key=key + "dataset.path")
    if ds["type"] == "path_traced" and ds["scene"] is None:
        raise ConfigError("the path_traced dataset needs 'scene' (a scene mapping or file)", file=f,
                          key=key + "dataset.scene")
    for k in ("bbox_min", "bbox_max"):
        try:
            a = np.asarray(fl[k], np.float64)
        except (TypeError, ValueError):
            a = None
        if a is None or a.shape != (3,) or not np.all(np.isfinite(a)):
            raise ConfigError(f"expected 3 numbers, got {fl[k]!r}", file=f, key=f"{key}field.{k}")
        fl[k] = a.tolist()
    if not np.all(np.asarray(fl["bbox_max"]) > np.asarray(fl["bbox_min"])):
        raise ConfigError("bbox_max must exceed bbox_min on every axis", file=f, key=key + "field.bbox_max")
    if fl["sh_degree"] not in (0, 1, 2):
        raise ConfigError(f"must be 0, 1 or 2, got {fl['sh_degree']!r}", file=f, key=key + "field.sh_degree")
    if fl["density_activation"] not in DENSITY_ACTIVATIONS:
        raise ConfigError(f"unknown activation '{fl['density_activation']}' ({', '.join(DENSITY_ACTIVATIONS)})",
                          file=f, key=key + "field.density_activation")
    if fl["color_activation"] not in COLOR_ACTIVATIONS:
        raise ConfigError(f"unknown activation '{fl['color_activation']}' ({', '.join(COLOR_ACTIVATIONS)})",
                          file=f, key=key + "field.color_activation")
    if not isinstance(fl["color_clip"], bool):
        raise ConfigError(f"expected true or false, got {fl['color_clip']!r}", file=f, key=key + "field.color_clip")
    num("field", "step", 1e-6)
    num("field", "t_min", 0.0)
    num("field", "init_density")
    num("field", "init_color")
    if fl["background"] is not None:
        try:
            bg = np.broadcast_to(np.asarray(fl["background"], np.float64), (3,))
        except (TypeError, ValueError):
            raise ConfigError(f"expected a number or 3 numbers, got {fl['background']!r}", file=f,
                              key=key + "field.background")
        fl["background"] = bg.tolist()
    stages = tr["stages"]
    if not isinstance(stages, list) or not stages:
        raise ConfigError("expected a non-empty list of {res, iters}", file=f, key=key + "train.stages")
    norm = []
    for i, st in enumerate(stages):
        if not isinstance(st, dict) or "res" not in st or "iters" not in st:
            raise ConfigError("each stage needs res and iters", file=f, key=f"{key}train.stages[{i}]")
        extra = set(st) - {"res", "iters", "lr_scale", "batch"}
        if extra:
            raise ConfigError(f"unknown key '{sorted(extra)[0]}' (res, iters, lr_scale, batch)", file=f,
                              key=f"{key}train.stages[{i}]")
        s = dict(st)
        num("train", "res", 2, True, d=s)
        num("train", "iters", 0, True, d=s)
        s["lr_scale"] = float(s.get("lr_scale", 1.0))
        if "batch" in s:
            s["batch"] = _batch(s["batch"], f, f"{key}train.stages[{i}].batch")
        norm.append(s)
    tr["stages"] = norm
    tr["batch"] = _batch(tr["batch"], f, key + "train.batch")
    if tr["loss"] not in LOSSES:
        raise ConfigError(f"unknown loss '{tr['loss']}' ({', '.join(LOSSES)})", file=f, key=key + "train.loss")
    for k in ("lr_density", "lr_color", "tv_density", "tv_color", "l1_density"):
        num("train", k, 0.0)
    num("train", "lr_decay", 1e-9)
    for k in ("pixel_jitter", "deterministic"):
        if not isinstance(tr[k], bool):
            raise ConfigError(f"expected true or false, got {tr[k]!r}", file=f, key=key + "train." + k)
    for k, allowed in (("upsample", UPSAMPLE_METHODS), ("adam_state", ADAM_STATES), ("view_order", VIEW_ORDERS),
                       ("eps_mode", EPS_MODES)):
        if tr[k] not in allowed:
            raise ConfigError(f"expected one of {', '.join(allowed)}, got {tr[k]!r}", file=f, key=key + "train." + k)
    num("train", "eval_every", 0, True)
    num("train", "eval_spp", 1, True)
    num("train", "checkpoint_every", 0, True)
    if tr["eps"] is not None and not num("train", "eps", 0.0) > 0:
        raise ConfigError(f"must be > 0, got {tr['eps']}", file=f, key=key + "train.eps")
    tr["loss_watch"] = parse_loss_watch(tr["loss_watch"], f, key + "train.loss_watch")
    return out


def load_dataset(cfg, cfg_path=None, progress=None):
    ds = cfg["dataset"]
    fl = cfg["field"]
    common = dict(views=ds["views"], heldout=ds["heldout"], width=ds["width"], height=ds["height"],
                  fov=ds["fov"], radius=ds["radius"], elevation=ds["elevation"], azimuth=ds["azimuth"],
                  spp=ds["spp"], seed=cfg["seed"], progress=progress)
    if ds["type"] == "procedural":
        bg = fl["background"] or [0.0, 0.0, 0.0]
        return procedural_dataset(gt_res=int(ds["gt_res"]), gt_step=float(ds["gt_step"]), bbox_min=fl["bbox_min"],
                                  bbox_max=fl["bbox_max"], background=bg, **common)
    if ds["type"] == "nerf":
        p = ds["path"]
        if not os.path.isabs(p) and cfg_path:
            p = os.path.join(os.path.dirname(os.path.abspath(cfg_path)), p)
        return load_nerf(p, heldout=ds["heldout"], background=ds["background"], downscale=int(ds["downscale"]),
                         max_views=ds["max_views"])
    return path_traced_dataset(ds["scene"], center=ds["center"], up=ds["up"], cfg_file=cfg_path, **common)


# ----------------------------------------------------------------------------- helpers

def psnr(pred, ref):
    """PSNR in dB (peak 1, at most 100) of pred clipped to [0, 1] against ref."""
    mse = float(np.mean((np.clip(pred, 0, 1) - np.asarray(ref, np.float64)) ** 2))
    return 100.0 if mse <= 1e-10 else float(-10.0 * np.log10(mse))


def save_png(path, img, linear):
    """Write an (H, W, 3) image as an 8-bit PNG: linear radiance is sRGB-encoded, display-space
    values (``linear=False``, e.g. NeRF PNG data) are written as they are."""
    from ..io.images import from_srgb, save_png as _save
    a = np.asarray(img, np.float32)
    _save(path, a if linear else from_srgb(np.clip(a, 0, 1)))


def peak_rss_mb():
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024.0 if sys.platform != "darwin" else r / 1024.0 ** 2


def _atomic_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2)
    os.replace(tmp, path)


def scale_schedule(stages, iters):
    """Distribute a total of ``iters`` iterations over the stages in proportion to their counts."""
    tot = sum(s["iters"] for s in stages)
    out = [dict(s) for s in stages]
    if iters is None:
        return out
    iters = int(iters)
    if tot == 0:
        for s in out:
            s["iters"] = 0
        out[-1]["iters"] = iters
        return out
    acc = 0
    for i, s in enumerate(out):
        n = iters - acc if i == len(out) - 1 else int(round(iters * s["iters"] / tot))
        s["iters"] = max(0, n)
        acc += s["iters"]
    return out


# ----------------------------------------------------------------------------- trainer

class _PrefixShape:
    """Stand-in for a field in ``Adam(...)``'s constructor, which reads only ``shape`` and ``dtype``
    (to size its moment and learning-rate fields): the optimiser then runs over x[:n]."""

    def __init__(self, fld, n):
        self.shape, self.dtype = (int(n),), fld.dtype


def prefix_adam(x, g, n, lr, segments=None, eps_mode=DEFAULT_EPS_MODE, eps=None):
    """tirender.optim.Adam over the first n values of the fields x and g (n ≤ their size); segments:
    the groups of its relative ε; eps_mode, eps: its ε (tirender/optim/adam.py)."""
    opt = Adam(_PrefixShape(x, n), g, lr=lr, segments=segments, eps_mode=eps_mode, eps=eps)
    opt.x = x
    return opt


class Trainer:
    """Coarse-to-fine radiance-field optimisation on a :class:`Dataset`.

    :meth:`prepare` allocates, before the loop, one field whose capacity holds the finest stage
    (every stage uses its first R³·C values, so every kernel compiles once) and the Adam state of
    every stage, and compiles the kernels on a few dummy rays: no field is created and no kernel
    compiled inside the loop. A stage change resamples the grid in place and carries Adam's
    state over (:meth:`_resampled_adam_state`) or resets it (``train.adam_state``).
    """

    RAY_CACHE_MAX = 1 << 22   # precompute the training rays while there are at most this many pixels

    def __init__(self, cfg, dataset: Dataset, out_dir=None, cfg_path=None, log=print):
        self.cfg, self.ds, self.out_dir, self.cfg_path, self.log = cfg, dataset, out_dir, cfg_path, log
        tr = cfg["train"]
        self.stages = tr["stages"]
        bg = cfg["field"]["background"]
        self.background = np.asarray(bg if bg is not None else dataset.background, np.float64)
        self.fp = np_float()
        self.ref = dataset.images[dataset.train].reshape(-1, 3).astype(self.fp)
        self.n_pix = self.ref.shape[0]
        self._rays = None
        if self.n_pix <= self.RAY_CACHE_MAX and not tr["pixel_jitter"]:
            o, d = self._pixel_rays(np.arange(self.n_pix))
            self._rays = (o.astype(self.fp), d.astype(self.fp))
        self.field = None
        self.opt = None
        self._opts = {}
        self._stage = None
        self.metrics = {"stages": [], "curve": [], "heldout_psnr_per_stage": [], "warnings": []}
        self.train_time = 0.0
        lw = tr["loss_watch"]
        self.watch = None if lw is None else LossWatch(
            lw["factor"], lw["window"], log=log,
            settings={"stage_change": "train.upsample, train.adam_state and the stage's lr_scale",
                      "window": "train.lr_density / train.lr_color (or the stage's lr_scale)"})

    # -- fields and optimisers
    def _make_field(self, res, params=None, capacity=None):
        fl = self.cfg["field"]
        return RadianceField(res, sh_degree=fl["sh_degree"], bbox_min=fl["bbox_min"], bbox_max=fl["bbox_max"],
                             density_activation=fl["density_activation"], color_activation=fl["color_activation"],
                             step=fl["step"], background=self.background, t_min=fl["t_min"],
                             init_density=fl["init_density"], init_color=fl["init_color"], params=params,
                             capacity=capacity, color_clip=fl["color_clip"])

    def _make_opt(self, stage_idx, fld):
        tr = self.cfg["train"]
        scale = self.stages[stage_idx]["lr_scale"] * tr["lr_decay"] ** stage_idx
        lr_ch = np.full(fld.C, tr["lr_color"] * scale)
        lr_ch[0] = tr["lr_density"] * scale
        res = self.stages[stage_idx]["res"]
        n = res ** 3 * fld.C
        chan = np.concatenate([np.zeros(res ** 3, int), np.tile(np.arange(1, fld.C), res ** 3)])
        # density (the first res³ values) and colour coefficients: one relative-ε group each
        return prefix_adam(fld.x, fld.grad, n, lr_ch[chan], segments=[(0, res ** 3), (res ** 3, n)],
                           eps_mode=tr["eps_mode"], eps=tr["eps"])

    def prepare(self, first_stage=0, warm=True):
        """Allocate the field (capacity: the finest stage ≥ first_stage) and the Adam state of
        every stage ≥ first_stage, and compile every kernel the loop uses (forward, both scatter
        modes, loss, TV, Adam) on a few dummy rays."""
        tr = self.cfg["train"]
        C = channels(self.cfg["field"]["sh_degree"])
        todo = range(first_stage, len(self.stages))
        cap = max(self.stages[si]["res"] ** 3 * C for si in todo)
        if self.field is None or self.field.capacity < cap:
            self.field = self._make_field(self.stages[first_stage]["res"], capacity=cap)
        fld = self.field
        for si in todo:
            self._opts[si] = self._make_opt(si, fld)
        from .render import EXPAND_MAX_BYTES, render_rays, thread_lanes
        if tr["deterministic"] and not thread_lanes() and not getattr(self, "_warned_det", False):
            self._warned_det = True
            self.log("note: train.deterministic is bit-reproducible on the CPU backend only; "
                     "this backend scatters gradients with atomic adds")
        if not warm:
            return
        o = np.zeros((4, 3))
        o[:, 2] = -3.0
        d = np.tile([0.05, 0.02, 1.0], (4, 1))
        j = np.full(4, 0.5)
        L, ns = render_rays(fld, o, d, j)            # evaluation renders
        render_and_backward(fld, o, d, j, L, kind=tr["loss"], mode="atomic")
        if fld.lanes_bytes() <= EXPAND_MAX_BYTES and thread_lanes():
            render_and_backward(fld, o, d, j, L, kind=tr["loss"],
                                mode="ordered" if tr["deterministic"] else "expand")
        if tr["tv_density"] > 0 or tr["tv_color"] > 0:
            fld.tv_grad(tr["tv_density"], tr["tv_color"])
        if tr["l1_density"] > 0:
            fld.sparsity_grad(tr["l1_density"])
        fld.zero_grad()
        for opt in self._opts.values():
            opt.step()
            opt.reset()
        self._stage = None  # the warm-up changed the values: the next stage starts from scratch

    def enter_stage(self, si, params=None):
        """Make stage si current: the grid becomes ``params`` (R, R, R, C) if given (Adam restarts:
        a resume loads its state after this), else the previous stage's grid resampled by
        ``train.upsample`` (or the initial values for a first stage). Coming from a previous stage
        with ``train.adam_state: carry``, Adam's moments are carried over (see
        :meth:`_resampled_adam_state`); with ``reset`` they restart from zero."""
        tr = self.cfg["train"]
        res = self.stages[si]["res"]
        if si not in self._opts:
            self.prepare(si, warm=False)
        fld = self.field
        carried = None
        if params is not None:
            fld.set_resolution(res)
            fld.from_numpy(params)
        elif self._stage is None:
            fld.set_resolution(res)
            fld.from_numpy(self._make_init(res))
        else:
            if tr["adam_state"] == "carry" and self.opt is not None:
                carried = self._resampled_adam_state(res)
            if fld.res != res:
                fld.resize(res, tr["upsample"])
        self._stage = si
        self.opt = self._opts[si]
        self.opt.reset()
        if carried is not None:
            self.opt.load_state_dict(carried)
        fld.zero_grad()

    ADAM_PRIOR_STEPS = 10   # carry: the resampled moments weigh as this many Adam steps

    def _resampled_adam_state(self, res):
        """Adam state {m, v, t} for resolution res carried over from the current one
        (:func:`.resample.carry_adam_moments`): the bias-corrected moments resampled trilinearly
        (whatever ``train.upsample``: non-negative weights keep each element's step ratio |m̂|/√v̂
        within its coarse neighbours'), |m̂| ≤ √v̂ (the first carried steps are at most about lr),
        rescaled to the finer voxels and re-entered as a prior worth k = ADAM_PRIOR_STEPS steps: the
        first steps continue the coarse ones instead of Adam's ±lr restart, and the fine grid's own
        gradients take over within a few k steps (an estimate carried with all of its t ≫ k steps
        would, where it is too small, keep Adam's steps too large for ~1/(1 − β₂) = 1000 iterations)."""
        fld, opt = self.field, self.opt
        st = opt.state_dict()
        t, n = int(st["t"]), fld.n_params
        if t == 0:
            return None
        m, v, k = carry_adam_moments(fld.flat_to_grid(np.asarray(st["m"], np.float32)[:n]),
                                     fld.flat_to_grid(np.asarray(st["v"], np.float32)[:n]), t, res,
                                     opt.beta1, opt.beta2, self.ADAM_PRIOR_STEPS)
        return {"m": fld.grid_to_flat(m), "v": fld.grid_to_flat(v), "t": k}

    def _make_init(self, res):
        fl = self.cfg["field"]
        from .field import SH_C0
        p = np.zeros((res, res, res, channels(fl["sh_degree"])))
        p[..., 0] = fl["init_density"]
        p[..., 1:4] = fl["init_color"] / SH_C0
        return p

    # -- one iteration
    def _pixel_rays(self, idx, jx=0.5, jy=0.5):
        """World rays of flat training-pixel indices (view-major, then row-major)."""
        HW, W = self.ds.height * self.ds.width, self.ds.width
        v, pix = np.divmod(idx, HW)
        rows, cols = np.divmod(pix, W)
        return self.ds.rays(self.ds.train[v], rows, cols, jx, jy)

    def batch(self, global_it):
        """(o, d, jitter, ref) of iteration ``global_it``: a deterministic function of (seed, it)."""
        tr = self.cfg["train"]
        rng = np.random.default_rng([self.cfg["seed"], global_it])
        b = self.stages[self._stage]["batch"] if self._stage is not None and "batch" in self.stages[self._stage] \
            else tr["batch"]
        HW = self.ds.height * self.ds.width
        if b == "all":
            idx = np.arange(self.n_pix)
        elif b == "view":
            v = self.view_of(global_it)
            idx = np.arange(v * HW, (v + 1) * HW)
        else:
            idx = np.sort(rng.integers(0, self.n_pix, min(int(b), self.n_pix)))  # sorted: coherent rays
        jit = rng.random(idx.size).astype(self.fp)
        if self._rays is not None:
            o, d = self._rays[0][idx], self._rays[1][idx]
        elif tr["pixel_jitter"]:
            o, d = self._pixel_rays(idx, rng.random(idx.size), rng.random(idx.size))
        else:
            o, d = self._pixel_rays(idx)
        return o, d, jit, self.ref[idx]

    def view_of(self, global_it):
        """Training view (index into ``ds.train``) of iteration ``global_it`` when the batch is one
        view, by ``train.view_order``: shuffle (a fresh permutation of the views every epoch of V
        iterations), sequential (0, 1, …, V−1, 0, …) or random (uniform, independently per
        iteration). A deterministic function of (seed, global_it)."""
        V = len(self.ds.train)
        order = self.cfg["train"]["view_order"]
        if order == "sequential":
            return global_it % V
        if order == "random":
            return int(np.random.default_rng([self.cfg["seed"], global_it, 11]).integers(V))
        return int(np.random.default_rng([self.cfg["seed"], global_it // V, 7]).permutation(V)[global_it % V])

    def step(self, global_it):
        tr = self.cfg["train"]
        o, d, jit, ref = self.batch(global_it)
        self.field.zero_grad()
        loss, _ = render_and_backward(self.field, o, d, jit, ref, kind=tr["loss"], scale=1.0 / (3 * len(jit)),
                                      mode="ordered" if tr["deterministic"] else "auto")
        if tr["tv_density"] > 0 or tr["tv_color"] > 0:
            loss += self.field.tv_grad(tr["tv_density"], tr["tv_color"])
        if tr["l1_density"] > 0:
            loss += self.field.sparsity_grad(tr["l1_density"])
        self.opt.step()
        return loss

    # -- evaluation
    def render_views(self, views, spp=None):
        spp = spp or self.cfg["train"]["eval_spp"]
        return render_field_views(self.field, self.ds.c2w[views], self.ds.fov_x[views], self.ds.width,
                                  self.ds.height, spp=spp, seed=12345)

    def heldout_psnr(self):
        """Mean PSNR over held-out views (NaN when there are none) and the rendered images."""
        if len(self.ds.heldout) == 0:
            return float("nan"), None
        imgs = self.render_views(self.ds.heldout)
        return float(np.mean([psnr(im, self.ds.images[v]) for im, v in zip(imgs, self.ds.heldout)])), imgs

    # -- checkpoints
    def _ckpt_path(self):
        return os.path.join(self.out_dir, "checkpoint.npz") if self.out_dir else None

    def save_checkpoint(self, stage, it_in_stage, global_it):
        p = self._ckpt_path()
        if not p:
            return
        st = self.opt.state_dict()
        tmp = p + ".tmp.npz"
        np.savez(tmp, params=self.field.to_numpy(), res=self.field.res, stage=stage, it=it_in_stage,
                 global_it=global_it, m=st["m"], v=st["v"], t=st["t"], train_time=self.train_time,
                 metrics=json.dumps(self.metrics), config=json.dumps(self.cfg, default=str))
        os.replace(tmp, p)

    def load_checkpoint(self):
        p = self._ckpt_path()
        if not p or not os.path.isfile(p):
            return None
        try:
            z = np.load(p, allow_pickle=False)
            c = {k: z[k] for k in z.files}
        except Exception as e:  # noqa: BLE001
            raise ConfigError(f"cannot read checkpoint ({type(e).__name__}); delete it or run without --resume",
                              file=p)
        need = ("params", "res", "stage", "it", "global_it", "m", "v", "t", "train_time", "metrics", "config")
        missing = [k for k in need if k not in c]
        if missing:
            raise ConfigError(f"incomplete checkpoint: missing {', '.join(missing)}; delete it or run without --resume",
                              file=p)
        try:
            saved = json.loads(str(c["config"]))
            json.loads(str(c["metrics"]))
            if not isinstance(saved, dict):
                raise ValueError("config is not a mapping")
        except ValueError as e:
            raise ConfigError(f"corrupt checkpoint ({e}); delete it or run without --resume", file=p) from None
        if saved.get("field", {}).get("sh_degree") != self.cfg["field"]["sh_degree"]:
            raise ConfigError("checkpoint was written with another sh_degree; delete it or run without --resume",
                              file=p)
        return c

    # -- main loop
    def run(self, resume=False, stop_after=None):
        """Train through all stages (from the checkpoint when ``resume``); returns the metrics.
        stop_after: stop (with a checkpoint) once this many iterations are done, returning None."""
        tr = self.cfg["train"]
        start_stage, start_it, global_it = 0, 0, 0
        ck = self.load_checkpoint() if resume else None
        if ck is not None:
            start_stage, start_it, global_it = int(ck["stage"]), int(ck["it"]), int(ck["global_it"])
            self.metrics = json.loads(str(ck["metrics"]))
            self.metrics.setdefault("warnings", [])
            self.train_time = float(ck["train_time"])
            if start_stage >= len(self.stages) or int(ck["res"]) != self.stages[start_stage]["res"]:
                raise ConfigError("checkpoint does not match the stage schedule; delete it or run without --resume",
                                  file=self._ckpt_path())
            self.prepare(start_stage)
            self.enter_stage(start_stage, params=ck["params"])
            self.opt.load_state_dict({"m": ck["m"], "v": ck["v"], "t": ck["t"]})
            self.log(f"resuming at stage {start_stage + 1}, iteration {start_it} (global {global_it})")
        else:
            self.prepare(0)
        if self.watch is not None:   # the watch's warnings are the metrics' (kept across a resume)
            self.watch.events = self.metrics["warnings"]
        total = sum(s["iters"] for s in self.stages)
        bar = Progress(total, "radiance field")
        bar.n = global_it
        every = tr["eval_every"]
        for si in range(start_stage, len(self.stages)):
            st = self.stages[si]
            if si != start_stage or ck is None:
                res0 = self.field.res if self._stage is not None else None
                t0 = time.perf_counter()
                self.enter_stage(si)
                if res0 is not None:   # the upsampling (grid and Adam state) is training work
                    self.train_time += time.perf_counter() - t0
                    if self.watch is not None:
                        self.watch.stage_change(f"{res0}³ → {st['res']}³")
                it0 = 0
                if every and res0 is not None:   # the upsampling's own effect, before any step
                    p, _ = self.heldout_psnr()
                    self.metrics["curve"].append({"iter": global_it, "time_s": round(self.train_time, 4),
                                                  "res": st["res"], "heldout_psnr": p, "stage_start": True})
                    before = self.metrics["heldout_psnr_per_stage"][-1] if self.metrics["heldout_psnr_per_stage"] \
                        else float("nan")
                    self.metrics.setdefault("upsampling", []).append(
                        {"iter": global_it, "from_res": res0, "to_res": st["res"], "heldout_psnr_before": before,
                         "heldout_psnr_after": p})
            else:
                it0 = start_it
            loss = float("nan")
            for it in range(it0, st["iters"]):
                t0 = time.perf_counter()
                loss = self.step(global_it)
                self.train_time += time.perf_counter() - t0
                self.metrics.setdefault("initial_loss", loss)      # the first step's training loss
                self.metrics["final_loss"] = loss
                if self.watch is not None:
                    self.watch.update(global_it, loss)
                global_it += 1
                bar.update(1, f"{st['res']}³ loss {loss:.2e}")
                if every and global_it % every == 0 and it + 1 < st["iters"]:
                    p, _ = self.heldout_psnr()
                    self.metrics["curve"].append({"iter": global_it, "time_s": round(self.train_time, 4),
                                                  "res": st["res"], "heldout_psnr": p})
                ce = tr["checkpoint_every"]
                if (ce and global_it % ce == 0 and it + 1 < st["iters"]) or global_it == stop_after:
                    self.save_checkpoint(si, it + 1, global_it)
                if global_it == stop_after:
                    bar.__exit__(None, None, None)
                    return None
            if self.watch is not None:
                self.watch.end_stage()
            if ck is not None and si == start_stage and it0 == st["iters"] and \
                    len(self.metrics["stages"]) > si:
                continue  # resumed from the end-of-stage checkpoint: already evaluated
            p, _ = self.heldout_psnr()
            self.metrics["curve"].append({"iter": global_it, "time_s": round(self.train_time, 4), "res": st["res"],
                                          "heldout_psnr": p})
            self.metrics["stages"].append({"res": st["res"], "iters": st["iters"], "last_loss": loss,
                                           "heldout_psnr": p, "train_time_s": round(self.train_time, 4)})
            self.metrics["heldout_psnr_per_stage"].append(p)
            self.log(f"stage {si + 1}/{len(self.stages)}: {st['res']}³, {st['iters']} iterations, "
                     f"held-out PSNR {p:.2f} dB, {self.train_time:.1f} s")
            self.save_checkpoint(si, st["iters"], global_it)
        bar.__exit__(None, None, None)
        p = self.metrics["heldout_psnr_per_stage"][-1]
        self.metrics.update({"heldout_psnr": p, "train_time_s": round(self.train_time, 4), "iterations": global_it,
                             "final_res": self.field.res, "n_params": self.field.n_params,
                             "peak_rss_mb": round(peak_rss_mb(), 1)})
        return self.metrics


def train(cfg, cfg_path=None, out_dir=None, iters=None, resume=False, dataset=None, log=print):
    """Run a ``radiance_field`` config end to end; returns the metrics dict (also written to
    ``out_dir/metrics.json`` with the field, held-out PNGs and checkpoints when out_dir is given)."""
    from .. import backend
    backend.ensure_init()
    cfg = parse_config(cfg, cfg_path)
    if iters is not None:
        cfg["train"]["stages"] = scale_schedule(cfg["train"]["stages"], iters)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    if dataset is None:
        with Progress(cfg["dataset"]["views"] + cfg["dataset"]["heldout"], "dataset", unit="view") as bar:
            dataset = load_dataset(cfg, cfg_path, progress=lambda n: bar.update(n - bar.n))
    t_data = time.perf_counter() - t0
    tr = Trainer(cfg, dataset, out_dir=out_dir, cfg_path=cfg_path, log=log)
    metrics = tr.run(resume=resume)
    if metrics is not None:     # the keys every optimisation task writes first (optim/metrics.py)
        metrics = standard(metrics, metrics.get("initial_loss"), metrics.get("final_loss"), metrics["iterations"],
                           time.perf_counter() - t0)
    metrics["dataset_time_s"] = round(t_data, 3)
    metrics["dataset"] = {"name": dataset.name, "train_views": int(len(dataset.train)),
                          "heldout_views": int(len(dataset.heldout)), "width": dataset.width,
                          "height": dataset.height}
    if out_dir:
        center = (np.asarray(cfg["field"]["bbox_min"]) + np.asarray(cfg["field"]["bbox_max"])) / 2
        radius = float(np.mean(np.linalg.norm(dataset.c2w[:, :3, 3] - center, axis=1)))
        up = np.mean(dataset.c2w[:, :3, 1], 0)
        up = up / max(np.linalg.norm(up), 1e-12)
        rel = dataset.c2w[:, :3, 3] - center
        rel /= np.maximum(np.linalg.norm(rel, axis=1, keepdims=True), 1e-12)
        elev = float(np.degrees(np.mean(np.arcsin(np.clip(rel @ up, -1, 1)))))
        tr.field.save(os.path.join(out_dir, "field.npz"), orbit_center=center, orbit_radius=radius,
                      orbit_up=up, orbit_elevation=elev, fov_x=float(np.mean(dataset.fov_x)), width=dataset.width,
                      height=dataset.height, linear=bool(dataset.linear))
        if cfg["train"]["save_pngs"] and len(dataset.heldout):
            imgs = tr.render_views(dataset.heldout)
            for im, v in zip(imgs, dataset.heldout):
                save_png(os.path.join(out_dir, f"heldout_{int(v):03d}.png"),
                         np.concatenate([im, dataset.images[v]], 1), dataset.linear)
        _atomic_json(os.path.join(out_dir, "metrics.json"), metrics)
    return metrics
