"""`tirender optimize`: inverse rendering driven by a YAML config.

Config (section ``optimize:``; see docs/optimize.md)::

    optimize:
      params:                      # parameters to optimise: name -> options
        red.reflectance: {init: 0.5, lr: 0.05}
      target: {type: render, spp: 256, seed: 1000}   # synthetic: the scene as written is the truth
      # target: {images: [view0.exr, view1.png]}     # or one image per sensor
      loss: l2                     # l1 | l2 | relative_l2
      optimizer: {type: adam, lr: 0.02, beta1: 0.9, beta2: 0.999}   # or {type: sgd, lr, momentum}
      iters: 40
      spp: 16                      # primal spp; spp_grad: adjoint spp (default = spp)
      spp_schedule: {double_every: 20, max: 64}
      lr_decay: {every: 100, factor: 0.5}   # step decay: every learning rate × factor^(iteration // every)
      views: [0, 1]                # sensors used (default: all)
      sensors: [{type: batch, ...}]  # render through these sensors instead of the scene's (config.optimization_scene)
      method: prb                  # prb | prb_attached | rb | rb_biased | rb_pipelined | rb_biased_pipelined | forward
      tv: {weight: 0.01, params: [floor.reflectance]}
      eikonal: {weight: 0.1, params: [relief.grid]}   # |∇f| = 1 for SDF grids' values (optim/regularizers.py)
      multires: {floor.reflectance: [[0, 32], [20, 64], [40, 256]]}   # 3D grids: [[0, 32], [40, 64]]
      holdout: [6]                 # sensors only rendered for evaluation (start/end error vs truth)
      save_every: 10               # renders + checkpoint every k iterations
      eval_spp: 256                # metrics.json eval_loss: the loss of renders at this spp, start and end
      seed: 0

Each iteration follows the three-pass scheme: primal render (seed s0) -> loss and δy -> PRB
gradient (seed s1 != s0), accumulated over views -> (TV, eikonal) -> optimiser step -> projection to bounds.
"""
import csv
import json
import os
import time

import numpy as np

from ..errors import ConfigError
from ..integrators.registry import default_method
from ..io.atomic import atomic_write_bytes
from ..io.checkpoints import load_checkpoint, load_npy, save_checkpoint, save_npy
from ..io.images import load_image, montage, save_image_set, save_png
from ..progress import Progress
from ..schema import Choice, Integer, Key, Number, validate
from . import losses
from .adam import DEFAULT_EPS_MODE, EPS_MODES, SGD, Adam
from .metrics import standard
from .regularizers import eikonal as eikonal_reg
from .regularizers import tv as tv_reg
from .schedules import parse_multires, resolution_at, spp_at
from .views import LocalViews, ViewTask, combine, resize_param, view_seed
from .watch import DEFAULT_FACTOR, DEFAULT_WINDOW, LossWatch, parse_loss_watch

REGULARIZERS = ("tv", "eikonal")     # {weight, params}: total variation (textures, grids), |∇f| = 1 (SDF grids)
OPT_KEYS = {"params", "target", "loss", "optimizer", "iters", "spp", "spp_grad", "spp_schedule", "seed", "views",
            "tv", "eikonal", "multires", "save_every", "method", "lr", "holdout", "lr_decay", "loss_watch", "eval_spp",
            "sensors"}
METHODS = ("prb", "prb_attached", "rb", "rb_biased", "rb_pipelined", "rb_biased_pipelined", "forward")


OPTIMIZER_KEYS = {
    "adam": (Choice("type", ("adam", "sgd"), default="adam"), Number("lr", default=None, lo=0.0),
             Number("beta1", default=0.9, lo=0.0, hi=1.0, strict_hi=True),
             Number("beta2", default=0.999, lo=0.0, hi=1.0, strict_hi=True),
             Number("eps", default=None, lo=0.0, strict_lo=True,
                    doc="ε (absolute: in gradient units, default 1e-8; relative: fraction of a parameter's "
                        "RMS gradient, default 1e-3)"),
             Choice("eps_mode", EPS_MODES, default=DEFAULT_EPS_MODE,
                    doc="absolute: Dr.Jit's fixed ε (Mitsuba's steps); relative: scale-invariant ε per named "
                        "parameter")),
    "sgd": (Choice("type", ("adam", "sgd"), default="adam"), Number("lr", default=None, lo=0.0),
            Number("momentum", default=0.0, lo=0.0, hi=1.0, strict_hi=True)),
}
SECTION_KEYS = (
    Integer("iters", default=40, lo=0, hi=1 << 30), Integer("spp", default=16, lo=1, hi=1 << 24),
    Integer("spp_grad", default=None, lo=1, hi=1 << 24), Integer("seed", default=0, lo=0, hi=(1 << 32) - 1),
    Integer("save_every", default=10, lo=1, hi=1 << 30), Choice("method", METHODS, default=None),
    Choice("loss", tuple(losses.LOSSES), default="l2"), Number("lr", default=None, lo=0.0),
    Integer("eval_spp", default=0, lo=0, hi=1 << 24,
            doc="the loss of renders at this spp at the start and the end (metrics.json eval_loss; 0: none)"),
)
SKIP = tuple(k for k in OPT_KEYS if k not in {key.name for key in SECTION_KEYS})


def _init_value(v, file, key):
    """An ``init`` value: a finite number or a (nested) list of finite numbers."""
    a = None
    if not isinstance(v, (bool, str, dict)):
        try:
            a = np.asarray(v, np.float64)
        except (TypeError, ValueError):
            a = None
    if a is None or a.dtype.kind != "f" or a.size == 0:
        raise ConfigError(f"expected a number or a list of numbers, got {v!r}", file, key)
    if not np.all(np.isfinite(a)):
        raise ConfigError("value is not finite", file, key)
    return v


def _init_file(name, cfg, key):
    """``init: <file>``: the values of a .npy array, of a Mitsuba grid (.vol: an SDF grid's or a medium's values) or
    of a whitespace table (.txt, e.g. Mitsuba's curve file: x y z radius per control point; blank lines and #
    comments skipped), relative to the config's folder."""
    path = name if os.path.isabs(name) else os.path.join(cfg.get("_dir", "."), name)
    if not os.path.isfile(path):
        raise ConfigError(f"init file not found: {path} (init takes a value, a list, a .npy, .vol or .txt file, or "
                          f"'sphere')", cfg.get("_file"), key)
    try:
        if path.lower().endswith(".vol"):
            from ..media.volfile import read_vol
            a = read_vol(path)[0]
            a = a[..., 0] if a.shape[-1] == 1 else a
        else:
            a = load_npy(path, "init values") if path.lower().endswith(".npy") else np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read init values from {path} ({e})", cfg.get("_file"), key) from None
    except ConfigError as e:       # a .vol file that is not one
        raise ConfigError(f"cannot read init values from {path} ({e.problem})", cfg.get("_file"), key) from None
    a = np.asarray(a, np.float64)
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ConfigError(f"init values in {path} are empty or not finite", cfg.get("_file"), key)
    return a


def _lr_value(v, file, key):
    """A learning rate: a number ≥ 0, or a list of them, one per component of the parameter's last axis (e.g.
    [0.01, 0.01, 0.01, 0] moves a curve's control points but not their radii)."""
    if isinstance(v, list):
        if not v or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and x >= 0
                            for x in v):
            raise ConfigError(f"expected a learning rate ≥ 0 or a list of them, got {v!r}", file, key)
        return [float(x) for x in v]
    return Number("lr", lo=0.0).parse(v, file, key)


def check_optimize_config(cfg, described=None):
    """Every check of the ``optimize:`` section that needs no Taichi (types, ranges, finiteness of
    learning rates, optimiser moments, spp, iterations): before any kernel runs. Returns
    (section values, optimizer settings, {parameter: {init, lr}})."""
    f = cfg.get("_file")
    sec = cfg.get("optimize")
    if sec is None:
        raise ConfigError("missing required section (optimize: {params: ...})", f, "optimize")
    o = validate(sec, SECTION_KEYS, f, "optimize", skip=SKIP)
    if "params" not in sec:
        raise ConfigError("missing required key", f, "optimize.params")
    for k in SKIP:
        if k in sec:
            o[k] = sec[k]
    sched = o.get("spp_schedule")
    if sched is not None:
        o["spp_schedule"] = validate(sched, (Integer("double_every", default=None, lo=1, hi=1 << 30),
                                             Integer("max", default=None, lo=1, hi=1 << 24)),
                                     f, "optimize.spp_schedule")
    decay = o.get("lr_decay")
    if decay is not None:
        if not isinstance(decay, dict):
            raise ConfigError(f"expected {{every: N, factor: f}}, got {decay!r}", f, "optimize.lr_decay")
        o["lr_decay"] = validate(decay, (Integer("every", lo=1, hi=1 << 30),
                                         Number("factor", lo=0.0, hi=1.0, strict_lo=True)), f, "optimize.lr_decay")
    o["loss_watch"] = parse_loss_watch(sec.get("loss_watch", {"factor": DEFAULT_FACTOR, "window": DEFAULT_WINDOW}),
                                       f, "optimize.loss_watch")
    opt = sec.get("optimizer", {"type": "adam"}) or {"type": "adam"}
    if isinstance(opt, str):
        opt = {"type": opt}
    if not isinstance(opt, dict):
        raise ConfigError(f"expected adam, sgd or a mapping, got {opt!r}", f, "optimize.optimizer")
    kind = Choice("type", ("adam", "sgd")).parse(opt.get("type", "adam"), f, "optimize.optimizer.type")
    opt = validate(opt, OPTIMIZER_KEYS[kind], f, "optimize.optimizer")
    params = sec["params"]
    if isinstance(params, list) and all(isinstance(p, str) for p in params):
        params = {p: {} for p in params}
    if not isinstance(params, dict) or not params:
        raise ConfigError("expected a mapping parameter name -> {init, lr}", f, "optimize.params")
    specs = {}
    names = None
    if described is not None:
        names = {t.name for t in described[0].textures} if hasattr(described[0], "textures") else None
        if names is not None:
            from ..scene.deform import param_names
            for sh in getattr(described[0], "shapes", None) or []:
                if sh.differentiable == "curve":
                    names.add(f"{sh.id}.control_points")
                elif sh.differentiable == "sdf":
                    names.add(f"{sh.id}.grid")
                elif sh.differentiable:
                    names |= {f"{sh.group or sh.id}.{k}" for k in param_names(sh.differentiable == "sphere"
                                                                                and not sh.group)}
    for name, po in params.items():
        key = f"optimize.params.{name}"
        po = po or {}
        if not isinstance(po, dict):
            raise ConfigError(f"expected {{init: value, lr: rate}}, got {po!r}", f, key)
        lr_given = po.get("lr")
        po = {k: x for k, x in po.items() if k != "lr" or not isinstance(x, list)}
        v = validate(po, (Number("lr", default=None, lo=0.0), Key("init", default=None),
                          Number("min", default=None, doc="lower bound of the values (with the model's own)"),
                          Number("max", default=None, doc="upper bound of the values (with the model's own)"),
                          Number("large_steps", default=None, lo=0.0,
                                 doc="vertex_positions: Laplacian reparameterisation weight λ (optim/large_steps.py)")),
                     f, key)
        if lr_given is not None:
            v["lr"] = _lr_value(lr_given, f, f"{key}.lr")
        if isinstance(v.get("init"), str) and v["init"] != "sphere":
            v["init"] = _init_file(v["init"], cfg, f"{key}.init")
        elif v.get("init") is not None and not (v["init"] == "sphere" and name.endswith(".vertex_positions")):
            _init_value(v["init"], f, f"{key}.init")
        if v.get("min") is not None and v.get("max") is not None and v["min"] > v["max"]:
            raise ConfigError(f"min {v['min']:g} is above max {v['max']:g}", f, f"{key}.min")
        if names is not None and name not in names:
            raise ConfigError(f"unknown parameter (scene parameters: {', '.join(sorted(names))})", f, key)
        specs[name] = v
    for reg in REGULARIZERS:
        r = sec.get(reg)
        if r is not None:
            if not isinstance(r, dict):
                raise ConfigError(f"expected {{weight: w, params: [names]}}, got {r!r}", f, f"optimize.{reg}")
            rv = validate(r, (Number("weight", lo=0.0), Key("params", default=None)), f, f"optimize.{reg}")
            rp = rv.get("params")
            if rp is not None and (not isinstance(rp, list) or not all(isinstance(x, str) for x in rp)):
                raise ConfigError(f"expected a list of parameter names, got {rp!r}", f, f"optimize.{reg}.params")
            for n in rp or []:
                if n not in specs:
                    raise ConfigError(f"'{n}' is not an optimised parameter", f, f"optimize.{reg}.params")
    target = sec.get("target")
    if isinstance(target, dict) and "images" in target:
        imgs = target["images"]
        if not isinstance(imgs, list) or not all(isinstance(x, str) and x for x in imgs):
            raise ConfigError(f"expected a list of image file names, got {imgs!r}", f, "optimize.target.images")
        validate(target, (Key("images"), Choice("normalize", ("none", "initial"), default="none")), f,
                 "optimize.target")
    elif target is not None and not isinstance(target, dict):
        raise ConfigError(f"expected {{type: render, spp, seed}} or {{images: [...]}}, got {target!r}", f,
                          "optimize.target")
    if isinstance(target, dict) and "images" not in target:
        if target.get("type", "render") != "render" or set(target) - {"type", "spp", "seed"}:
            raise ConfigError("expected {type: render, spp, seed} or {images: [...]}", f, "optimize.target")
        Integer("spp", lo=1, hi=1 << 24).parse(target.get("spp", 256), f, "optimize.target.spp")
        Integer("seed", lo=0, hi=1 << 31).parse(target.get("seed", 100000), f, "optimize.target.seed")
    if described is not None:
        nsens = len(described[0].sensors)
        views = sec.get("views", list(range(nsens)))
        ok = isinstance(views, list) and views and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < nsens for v in views)
        if not ok or len(set(views)) != len(views):
            raise ConfigError(f"views must be a list of distinct sensor indices in [0, {nsens}), got {views!r}", f,
                              "optimize.views")
        hold = sec.get("holdout") or []
        if not isinstance(hold, list) or any(not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < nsens
                                             or v in views for v in hold):
            raise ConfigError(f"holdout must list sensor indices in [0, {nsens}) that are not views, got {hold!r}", f,
                              "optimize.holdout")
    return o, opt, specs


def _stage_shape(info, res):
    """Multi-resolution stage -> target shape: (h, w) of a bitmap, (D, H, W) of a 3D grid."""
    k = 3 if info.kind == "grid" else 2
    return (int(res),) * k if isinstance(res, int) else tuple(int(x) for x in res)


def _resample(a, shape):
    from ..media.grid import resample_grid
    from ..textures import resample_texture
    return resample_grid(a, shape) if len(shape) == 3 else resample_texture(a, shape[0], shape[1])


def running_mean(y, k):
    """Trailing running mean of a 1D series over (up to) k values: y_i -> mean(y[max(0, i-k+1) : i+1])."""
    c = np.cumsum(np.concatenate([[0.0], np.asarray(y, float)]))
    i = np.arange(1, len(y) + 1)
    lo = np.maximum(0, i - k)
    return (c[i] - c[lo]) / (i - lo)


class OptimizationRun:
    """State of one optimisation (also usable from Python: ``OptimizationRun(cfg, out).run()``)."""

    def __init__(self, cfg, out=None, iters=None, resume=False, gui=False, described=None, workers=None,
                 address=None, worker_threads=None):
        from ..api import scene_from_config
        from ..config import optimization_scene
        if described is None:
            cfg = optimization_scene(cfg)       # optimize.sensors (the CLI applies it before describing)
        self.cfg = cfg
        self.file = cfg.get("_file")
        o, opt, self.popt_specs = check_optimize_config(cfg, described)
        f = self.file
        self.out = out or os.path.join("out", os.path.splitext(os.path.basename(f or "optimize"))[0])
        from ..io.paths import check_output_dir
        self.out = check_output_dir(self.out, "out")   # a folder, writable: before anything renders
        if iters is not None:
            iters = Integer("iters", lo=0, hi=1 << 30).parse(iters, None, "iters")
        self.iters = iters if iters is not None else o["iters"]
        self.spp = o["spp"]
        self.spp_grad = o.get("spp_grad", self.spp)
        self.sched = o.get("spp_schedule") or {}
        self.lr_decay = o.get("lr_decay")
        self.seed = o["seed"]
        self.save_every = o["save_every"]
        self.eval_spp = o["eval_spp"]
        self.method = o.get("method")   # None: the integrator's own (set below)
        self.loss_name = o["loss"]
        self.loss_fn = losses.LOSSES[self.loss_name]
        self.opt_cfg = opt
        lr_default = opt.get("lr", o.get("lr", 0.02))
        self.gui = gui
        # ---- scene (as written = ground truth for synthetic targets) ----
        self.scene = scene_from_config(cfg, described)
        if self.method is None:           # the integrator's own: prb_attached for Mitsuba's projective ones
            self.method = default_method(self.scene.integrator["type"])
        sc = self.scene
        views = o.get("views", list(range(len(sc.sensors))))
        if not isinstance(views, list) or not views or any(
                not isinstance(v, int) or not 0 <= v < len(sc.sensors) for v in views):
            raise ConfigError(f"views must be a list of sensor indices in [0, {len(sc.sensors)})", f, "optimize.views")
        self.views = views
        self.popts = {}
        for name, po in self.popt_specs.items():
            if name not in sc.params:
                raise ConfigError(f"unknown parameter (scene parameters: {', '.join(sc.params.keys())})", f,
                                  f"optimize.params.{name}")
            lr = po.get("lr", lr_default)
            if isinstance(lr, list) and len(lr) != sc.params.info(name).shape[-1]:
                raise ConfigError(f"a list of learning rates needs one per component ({sc.params.info(name).shape[-1]}), "
                                  f"got {len(lr)}", f, f"optimize.params.{name}.lr")
            self.popts[name] = dict(init=po.get("init"), lr=lr if isinstance(lr, list) else float(lr),
                                    min=po.get("min"), max=po.get("max"), large_steps=po.get("large_steps"))
            info = sc.params.info(name)
            for k, inside in (("min", lambda x: x <= info.hi), ("max", lambda x: x >= info.lo)):
                if po.get(k) is not None and not inside(po[k]):
                    raise ConfigError(f"{k} {po[k]:g} leaves no value within the parameter's bounds "
                                      f"[{info.lo:g}, {info.hi:g}]", f, f"optimize.params.{name}.{k}")
        self.truth = {n: sc.params[n] for n in self.popts}
        for n, po in self.popts.items():   # init shapes, before any target is rendered
            if po["init"] is None or n in (o.get("multires") or {}) or isinstance(po["init"], str):
                continue
            info, v = sc.params.info(n), np.asarray(po["init"], np.float32)
            if v.size not in (1, info.shape[-1]) and v.shape != tuple(info.shape):
                raise ConfigError(f"init has shape {v.shape}, the parameter {tuple(info.shape)} (wrong shape)", f,
                                  f"optimize.params.{n}.init")
        from .geometry import GeometryOptions, mesh_of
        self.geo = GeometryOptions(sc, self.popts, f)      # the truth meshes: the scene as written
        if (self.geo.meshes or any(n in sc.deform_params for n in self.popts)) and self.method != "prb_attached":
            raise ConfigError(f"geometry parameters need method prb_attached (the gradient of '{self.method}' "
                              f"w.r.t. geometry is 0: it does not see moving silhouettes)", f, "optimize.method")
        for n, po in self.popts.items():
            if isinstance(po["init"], str) and po["init"] == "sphere" and mesh_of(sc, n) is None:
                raise ConfigError("init: sphere applies to the vertex_positions of differentiable meshes", f,
                                  f"optimize.params.{n}.init")
        self.tv = o.get("tv")
        self.eikonal = o.get("eikonal")
        self.reg_params = {}        # regulariser -> the parameters it applies to (default: every one it can)
        for reg, spec in (("tv", self.tv), ("eikonal", self.eikonal)):
            if spec is not None:
                if not isinstance(spec, dict) or "weight" not in spec:
                    raise ConfigError("expected {weight: w, params: [names]}", f, f"optimize.{reg}")
                names = spec.get("params", [n for n in self.popts if reg != "eikonal" or n in sc.sdf_params])
                for n in names:
                    if n not in self.popts:
                        raise ConfigError(f"'{n}' is not an optimised parameter", f, f"optimize.{reg}.params")
                    if reg == "eikonal" and n not in sc.sdf_params:
                        raise ConfigError(f"'{n}' is not an SDF grid's values (eikonal applies to differentiable "
                                          f"sdfgrid shapes' <id>.grid)", f, "optimize.eikonal.params")
                self.reg_params[reg] = names
        self.multires = {}
        for n, spec in (o.get("multires") or {}).items():
            if n not in self.popts or sc.params.info(n).kind not in ("texture", "grid"):
                raise ConfigError("multires applies to optimised bitmap textures and 3D grids", f,
                                  f"optimize.multires.{n}")
            self.multires[n] = parse_multires(spec, f, f"optimize.multires.{n}")
        self.target_spec = o.get("target", {"type": "render"}) or {"type": "render"}
        self.holdout = o.get("holdout", []) or []
        if not isinstance(self.holdout, list) or any(
                not isinstance(v, int) or not 0 <= v < len(sc.sensors) or v in views for v in self.holdout):
            raise ConfigError(f"holdout must list sensor indices in [0, {len(sc.sensors)}) that are not views", f,
                              "optimize.holdout")
        self.resume = resume
        self.workers, self.address, self.worker_threads = workers, address, worker_threads
        self.loss_watch = o["loss_watch"]

    def _watch(self, history):
        """A LossWatch (None when optimize.loss_watch is off), fed the history of a resumed run
        silently (its warnings are kept, not printed again)."""
        if self.loss_watch is None:
            return None
        names = list(self.popts)
        lr_keys = " / ".join(f"optimize.params.{n}.lr" for n in names)
        w = LossWatch(self.loss_watch["factor"], self.loss_watch["window"], log=lambda *_: None,
                      settings={"stage_change": "optimize.multires and " + lr_keys,
                                "window": lr_keys + " (or optimize.optimizer.lr, optimize.lr_decay)"})
        for h in history:
            self._watch_stage(w, int(h[0]))
            w.update(int(h[0]), h[1])
        w.log = print
        return w

    def _watch_stage(self, watch, it):
        """Tell the watch about the multires stage changes that happen at iteration it."""
        if it == 0:
            return
        for n, stages in self.multires.items():
            a, b = resolution_at(it - 1, stages), resolution_at(it, stages)
            if a != b:
                watch.end_stage()
                watch.stage_change(f"{n} {a} → {b}")

    # ---------------------------------------------------------------------------------------
    def _targets(self):
        os.makedirs(self.out, exist_ok=True)
        t = self.target_spec
        sc = self.scene
        f = self.file
        if not isinstance(t, dict):
            raise ConfigError("expected a mapping", f, "optimize.target")
        targets = []
        if "images" in t:
            imgs = t["images"]
            if not isinstance(imgs, list) or len(imgs) != len(self.views):
                raise ConfigError(f"expected one image per view ({len(self.views)})", f, "optimize.target.images")
            base = self.cfg.get("_dir", ".")
            for v, p in zip(self.views, imgs):
                full = p if os.path.isabs(p) else os.path.join(base, p)
                img = load_image(full)
                img = (img[..., None] if img.ndim == 2 else img)[..., :3]
                if img.shape[2] != 3:                 # grey (or grey + alpha): the same in every channel
                    img = np.repeat(img[..., :1], 3, axis=2)
                s = sc.sensors[v]
                if img.shape[:2] != (s.height, s.width):
                    raise ConfigError(f"target image is {img.shape[1]}x{img.shape[0]}, the sensor's film is "
                                      f"{s.width}x{s.height}", full, "optimize.target.images")
                targets.append(img.astype(np.float32))
            self.synthetic = False
        else:
            if t.get("type", "render") != "render" or set(t) - {"type", "spp", "seed"}:
                raise ConfigError("expected {type: render, spp, seed} or {images: [...]}", f, "optimize.target")
            t_spp = Integer("spp", lo=1, hi=1 << 24).parse(t.get("spp", 256), f, "optimize.target.spp")
            t_seed = Integer("seed", lo=0, hi=(1 << 31)).parse(t.get("seed", 100000), f, "optimize.target.seed")
            from ..api import render
            self.synthetic = True
            self.target_spp = t_spp
            for v in self.views:
                cache = os.path.join(self.out, f"target_view{v}.npy")
                if self.resume and os.path.exists(cache):
                    img = load_npy(cache, "cached target image")
                    s = sc.sensors[v]
                    if img.shape != (s.height, s.width, 3) or not np.all(np.isfinite(img)):
                        raise ConfigError(f"cached target image has shape {img.shape} or non-finite values, expected "
                                          f"{(s.height, s.width, 3)}; delete it to re-render it", cache)
                    targets.append(img)
                    continue
                img = render(sc, spp=t_spp, seed=t_seed + v, sensor=v)
                save_npy(cache, img)
                targets.append(img)
            self.holdout_targets = {v: render(sc, spp=t_spp, seed=t_seed + v,
                                              sensor=v, progress=False) for v in self.holdout}
        if self.holdout and not self.synthetic:
            raise ConfigError("holdout views need a synthetic target ({type: render})", f, "optimize.holdout")
        for v, img in zip(self.views, targets):
            save_png(os.path.join(self.out, f"target_view{v}.png"), img)
        return targets

    def _normalize_targets(self, targets):
        """target.normalize: initial — scale each target image so that its mean equals the mean of the
        starting scene's render of that view (e.g. caustic design: the light's total power is fixed
        by the emitter, the target gives only its distribution)."""
        from ..api import render
        out = []
        for v, img in zip(self.views, targets):
            r = render(self.scene, spp=max(self.spp, 16), seed=view_seed(self.seed, 10 ** 6 + 1, v, 0), sensor=v,
                       progress=False)
            m = float(np.mean(img))
            out.append((img * (float(np.mean(r)) / m if m > 0 else 1.0)).astype(np.float32))
            save_png(os.path.join(self.out, f"target_view{v}.png"), out[-1])
        return out

    def _apply_init(self):
        sc = self.scene
        for n, po in self.popts.items():
            info = sc.params.info(n)
            if n in self.multires:
                resize_param(sc, n, _stage_shape(info, resolution_at(0, self.multires[n])))
                info = sc.params.info(n)
            if isinstance(po["init"], str) and po["init"] == "sphere":
                from .geometry import sphere_init
                sc.params[n] = sphere_init(sc, n)
            elif po["init"] is not None:
                v = np.asarray(po["init"], np.float32)
                try:
                    sc.params[n] = np.broadcast_to(v, info.shape) if v.size in (1, info.shape[-1]) else v
                except ConfigError as e:
                    raise ConfigError(e.problem, self.file, f"optimize.params.{n}.init")

    def _make_optimizer(self, state=None):
        """Adam/SGD over the scene's device pool; lr = 0 outside the optimised slices."""
        sc = self.scene
        st = sc.bind()
        cap = st.caps["pool"]
        lr = np.zeros(cap, np.float32)
        lo = np.full(cap, -np.inf, np.float32)
        hi = np.full(cap, np.inf, np.float32)
        plo, phi = sc.params.bounds_arrays()
        n = plo.size
        lo[:n], hi[:n] = plo, phi
        for name, po in self.popts.items():
            i = sc.params.info(name)
            lr[i.offset:i.offset + i.size] = 0.0 if self.geo.device_lr_mask(name) else \
                np.broadcast_to(np.asarray(po["lr"], np.float32), i.shape).reshape(-1)
            if po.get("min") is not None:   # user bounds, intersected with the model's
                lo[i.offset:i.offset + i.size] = np.maximum(lo[i.offset:i.offset + i.size], po["min"])
            if po.get("max") is not None:
                hi[i.offset:i.offset + i.size] = np.minimum(hi[i.offset:i.offset + i.size], po["max"])
        o = self.opt_cfg
        segs = [(sc.params.info(name).offset, sc.params.info(name).offset + sc.params.info(name).size)
                for name in self.popts]
        opt = getattr(self, "_opt_obj", None)   # a stage change keeps the optimiser (its compiled kernels)
        if opt is not None and opt.x is st.pool and opt.g is st.grad and opt.reconfigure(lr, lo, hi, segs):
            opt.reset()
        elif o.get("type", "adam") == "adam":
            eps = o.get("eps")
            opt = Adam(st.pool, st.grad, lr=lr, beta1=float(o.get("beta1", 0.9)), beta2=float(o.get("beta2", 0.999)),
                       eps=None if eps is None else float(eps), lo=lo, hi=hi,
                       eps_mode=o.get("eps_mode", DEFAULT_EPS_MODE), segments=segs)
        else:
            opt = SGD(st.pool, st.grad, lr=lr, momentum=float(o.get("momentum", 0.0)), lo=lo, hi=hi)
        self._opt_obj = opt
        self._lr_base, self._lr_mult = lr, 1.0
        if state is not None:
            m = np.zeros(cap, np.float32)
            v = np.zeros(cap, np.float32)
            for name in self.popts:
                i = sc.params.info(name)
                if f"m:{name}" in state and state[f"m:{name}"].size == i.size:
                    m[i.offset:i.offset + i.size] = state[f"m:{name}"].ravel()
                    v[i.offset:i.offset + i.size] = state[f"v:{name}"].ravel()
            opt.load_state_dict({"m": m, "v": v, "t": int(state["t"])})
        self.geo.reset(state)
        return opt

    def _opt_state(self, opt):
        sc = self.scene
        s = opt.state_dict()
        out = {"t": np.array(s["t"])}
        for name in self.popts:
            i = sc.params.info(name)
            out[f"m:{name}"] = s["m"][i.offset:i.offset + i.size].reshape(i.shape)
            out[f"v:{name}"] = s["v"][i.offset:i.offset + i.size].reshape(i.shape)
        out.update(self.geo.state())          # large-step meshes: the host's moments (same t)
        return out

    def _checkpoint(self, it, opt, history, elapsed):
        sc = self.scene
        arrays = {f"param:{n}": sc.params[n] for n in sc.params.keys()}
        arrays.update(self._opt_state(opt))
        arrays["iteration"] = np.array(it)
        arrays["loss_history"] = np.array(history, np.float64).reshape(-1, 5)
        arrays["elapsed"] = np.array(elapsed)
        save_checkpoint(os.path.join(self.out, "checkpoint.npz"), **arrays)

    def _unit_normals(self):
        """Project optimised normal-map texels back to unit normals (c = 2 t - 1, |c| = 1, c_z > 0): the
        renderer sees only normalize(c), so the length is not a property of the scene and would drift."""
        sc = self.scene
        for row in sc.desc.bsdfs:
            name = f"{row.id}.normalmap"
            if row.model.NAME == "normalmap" and name in self.popts:
                c = sc.params[name].astype(np.float64) * 2.0 - 1.0
                c[..., 2] = np.maximum(c[..., 2], 1e-3)
                c /= np.linalg.norm(c, axis=-1, keepdims=True)
                sc.params[name] = np.clip((c + 1.0) * 0.5, 0.0, 1.0).astype(np.float32)

    def _rmse(self, name):
        cur = self.scene.params[name]
        tru = self.truth[name]
        if cur.shape != tru.shape:
            cur = _resample(cur, tru.shape[:-1])
        return float(np.sqrt(((cur - tru) ** 2).mean()))

    # ---------------------------------------------------------------------------------------
    def run(self, callback=None):
        from ..api import render, set_gradients
        sc = self.scene
        ckpath = os.path.join(self.out, "checkpoint.npz")
        ck = self._read_checkpoint(ckpath) if self.resume else None   # before any render: fail early
        rpath = os.path.join(self.out, "rmse_start.json")
        rmse_cached = self._read_rmse_start(rpath) if ck is not None else None
        targets = self._targets()
        self._apply_init()
        if not self.synthetic and self.target_spec.get("normalize", "none") == "initial":
            targets = self._normalize_targets(targets)
        rmse_start = {n: self._rmse(n) for n in self.popts} if self.synthetic else {}
        holdout_start = self._holdout("start")
        chamfer_start = self._chamfer_start(ck is not None)
        start, history, elapsed0 = 0, [], 0.0
        state = None
        if ck is not None:
            for name in sc.params.keys():
                v = ck.get(f"param:{name}")
                if v is None:
                    continue
                info = sc.params.info(name)
                try:
                    if v.shape != info.shape and info.kind in ("texture", "grid"):
                        if v.ndim != len(info.shape):
                            raise ConfigError(f"has shape {v.shape}, the parameter {info.shape}")
                        resize_param(sc, name, v.shape[:-1])
                    sc.params[name] = v
                except ConfigError as e:
                    raise ConfigError(e.problem, ckpath, f"param:{name}") from None
            start = int(ck["iteration"])
            history = [tuple(r) for r in ck["loss_history"]]
            elapsed0 = float(ck["elapsed"])
            state = ck
            print(f"resuming from iteration {start} ({os.path.join(self.out, 'checkpoint.npz')})")
        elif self.resume:
            print(f"no checkpoint in {self.out}: starting from scratch")
        if ck is not None and self.synthetic:
            if rmse_cached is not None:
                rmse_start = rmse_cached
        elif self.synthetic:
            atomic_write_bytes(rpath, json.dumps(rmse_start).encode())
        eval_start = self._eval_start(targets, ck is not None)
        opt = self._make_optimizer(state)
        view = None
        if self.gui:
            from ..viewer import LiveOptimizationView
            s0 = sc.sensors[self.views[0]]
            view = LiveOptimizationView("tirender optimize", s0.width, s0.height, out_dir=self.out)
        abort_at = int(os.environ.get("TIRENDER_TEST_ABORT_AT", "-1"))  # test hook: simulate a kill
        t_start = time.perf_counter()
        stopped = False
        it = start
        nv = len(self.views)
        pipe_imgs = {}  # pipelined methods: each view's image from the previous iteration
        names = tuple(self.popts)
        evaluator = self._evaluator(dict(zip(self.views, targets)))
        watch = self._watch(history)
        with evaluator, Progress(self.iters - start, "optimize", unit="it", delay=0.0) as bar:
            for it in range(start, self.iters):
                if it == abort_at:
                    os._exit(3)
                # coarse-to-fine: resize textures when a new stage begins
                changed = False
                for n, stages in self.multires.items():
                    shape = _stage_shape(sc.params.info(n), resolution_at(it, stages))
                    if sc.params.info(n).shape[:len(shape)] != shape:
                        ost = self._opt_state(opt)
                        resize_param(sc, n, shape)
                        ost[f"m:{n}"] = _resample(ost[f"m:{n}"], shape)
                        ost[f"v:{n}"] = _resample(ost[f"v:{n}"], shape)
                        opt = None
                        state = ost
                        changed = True
                if changed:
                    opt = self._make_optimizer(state)
                if self.lr_decay is not None:      # step decay, a function of the iteration (resume-safe)
                    mult = self.lr_decay["factor"] ** (it // self.lr_decay["every"])
                    if mult != self._lr_mult:
                        opt.set_lr(self._lr_base * mult)
                        self._lr_mult = mult
                spp = spp_at(it, self.spp, self.sched.get("double_every"), self.sched.get("max"))
                spp_g = spp_at(it, self.spp_grad, self.sched.get("double_every"), self.sched.get("max"))
                tasks = [ViewTask(it, v, nv, spp, spp_g, self.seed, self.method, self.loss_name, names,
                                  pipe_imgs.get(v)) for v in self.views]
                results, grads = evaluator.evaluate(tasks, self._current_params)
                loss = combine(results, nv)
                imgs = [r.image for r in results]
                if self.method.endswith("_pipelined"):
                    pipe_imgs = {r.view: r.image for r in results}
                if self.tv is not None:
                    w = float(self.tv["weight"])
                    for n in self.reg_params["tv"]:
                        if sc.params.info(n).kind in ("texture", "grid"):
                            if sc.params.info(n).kind == "grid":  # 3D total variation (media)
                                from ..media.grid import tv_grid
                                val, g = tv_grid(sc.params[n])
                            else:
                                val, g = tv_reg(sc.params[n])
                            grads[n] = grads[n] + w * g
                            loss += w * val
                if self.eikonal is not None:
                    w = float(self.eikonal["weight"])
                    for n in self.reg_params["eikonal"]:
                        val, g = eikonal_reg(sc.params[n])
                        grads[n] = grads[n] + w * g
                        loss += w * val
                set_gradients(sc, grads)
                opt.step()
                sc.mark_device_params_changed()
                self.geo.step(grads, self._lr_mult)    # large-step meshes: uniform Adam on u (optim/geometry.py)
                self._unit_normals()
                el = elapsed0 + time.perf_counter() - t_start
                perr = float(np.mean([self._rmse(n) for n in self.popts])) if self.synthetic else float("nan")
                history.append((it, loss, el, spp, perr))
                if watch is not None:
                    self._watch_stage(watch, it)
                    watch.update(it, loss)
                bar.update(1, postfix=f"loss {loss:.4g}")
                if callback is not None:
                    callback(it, loss, imgs)
                last = it + 1 == self.iters
                if (it + 1) % self.save_every == 0 or last:
                    for k, v in enumerate(self.views):
                        save_png(os.path.join(self.out, "renders", f"iter{it + 1:04d}_view{v}.png"), imgs[k])
                    self.geo.save_meshes(os.path.join(self.out, "meshes"), f"iter{it + 1:04d}_")
                    self._checkpoint(it + 1, opt, history, el)
                    self._write_loss(history)
                if view is not None:
                    if not view.update(it, imgs[0], targets[0], [h[1] for h in history]):
                        self._checkpoint(it + 1, opt, history, el)
                        self._write_loss(history)
                        stopped = True
                        print(f"window closed: checkpoint written at iteration {it + 1}")
                        break
        if view is not None:
            view.close()
        if watch is not None:
            watch.end_stage()
        seconds = elapsed0 + time.perf_counter() - t_start
        self._write_loss(history)
        self._save_params()
        for v in self.views:
            montage(os.path.join(self.out, "renders"), f"_view{v}.png",
                    os.path.join(self.out, f"sequence_view{v}.png"))
        final = {}
        for k, v in enumerate(self.views):
            img = render(sc, spp=max(self.spp, 16), seed=view_seed(self.seed, 10 ** 6, v, 0), sensor=v, progress=False)
            save_image_set(os.path.join(self.out, "final"), img, f"view{v}")
            final[v] = img
        metrics = standard({"method": self.method, "views": self.views, "stopped_early": stopped,
                            "warnings": [] if watch is None else watch.events},
                           history[0][1] if history else None, history[-1][1] if history else None,
                           len(history) and int(history[-1][0]) + 1, seconds)
        if self.workers:
            metrics["workers"] = {"count": self.workers, "lost": evaluator.lost}
        if self.synthetic:
            metrics["params"] = {n: {"rmse_start": rmse_start.get(n), "rmse_end": self._rmse(n),
                                     "value": sc.params[n].tolist() if sc.params[n].size <= 16 else None,
                                     "truth": self.truth[n].tolist() if self.truth[n].size <= 16 else None}
                                 for n in self.popts}
        if eval_start is not None:
            metrics["eval_loss"] = {"spp": self.eval_spp, "start": eval_start, "end": self._eval_loss(targets)}
        if self.holdout:
            end = self._holdout("end")
            metrics["holdout"] = {str(v): {"rmse_start": holdout_start[v], "rmse_end": end[v]} for v in self.holdout}
        if self.geo.meshes:
            end = self.geo.chamfer() if self.synthetic else {}
            if self.synthetic:
                metrics["chamfer"] = {k: {"start": chamfer_start.get(k), "end": end[k]} for k in end}
            self.geo.turntable(self.out, max(self.spp, 16), view_seed(self.seed, 10 ** 6 + 2, 0, 0), self.views[0])
        atomic_write_bytes(os.path.join(self.out, "metrics.json"), json.dumps(metrics, indent=2).encode())
        return metrics

    def _eval_loss(self, targets):
        """The loss of every view rendered at eval_spp (its own seeds) against its target: the image loss
        with little of the iterations' noise."""
        from ..api import render
        total = 0.0
        for v, t in zip(self.views, targets):
            img = render(self.scene, spp=self.eval_spp, seed=view_seed(self.seed, 10 ** 6 + 3, v, 0), sensor=v,
                         progress=False)
            total += float(self.loss_fn(img, t)[0])
        return total / len(self.views)

    def _eval_start(self, targets, resumed):
        """eval_loss at the start (eval_spp > 0): computed and saved (eval_start.json), read back on resume."""
        if not self.eval_spp:
            return None
        path = os.path.join(self.out, "eval_start.json")
        if resumed and os.path.exists(path):
            d = self._read_rmse_start(path)
            if "loss" in d:
                return float(d["loss"])
        loss = self._eval_loss(targets)
        atomic_write_bytes(path, json.dumps({"loss": loss}).encode())
        return loss

    def _chamfer_start(self, resumed):
        """Chamfer distance of the differentiable meshes to the truth at the start (synthetic targets):
        computed and saved (chamfer_start.json) unless resuming, then read back."""
        if not (self.geo.meshes and self.synthetic):
            return {}
        path = os.path.join(self.out, "chamfer_start.json")
        if resumed and os.path.exists(path):
            d = self._read_rmse_start(path)
            if d is not None:
                return d
        d = self.geo.chamfer()
        atomic_write_bytes(path, json.dumps(d).encode())
        return d

    def _evaluator(self, targets):
        """Where the views are evaluated: this process, or ``--workers`` Ray workers."""
        if not self.workers:
            return LocalViews(self.scene, targets)
        from ..distributed import WorkerPool
        return WorkerPool(self.cfg, targets, self.workers, address=self.address, threads=self.worker_threads)

    def _current_params(self):
        """The optimised parameters' current values (name -> float32 array), for workers."""
        return {n: self.scene.params[n] for n in self.popts}

    @staticmethod
    def _read_rmse_start(path):
        """The parameter errors at the start of a resumed run ({name: rmse}), None if not saved."""
        if not os.path.exists(path):
            return None
        try:
            with open(path) as fh:
                d = json.load(fh)
            if not isinstance(d, dict):
                raise ValueError("not a mapping")
            return d
        except (ValueError, TypeError, OSError) as e:
            raise ConfigError(f"corrupt file ({e}); delete it to start from scratch", path) from None

    def _read_checkpoint(self, path):
        """The checkpoint at `path` (None if there is none), its bookkeeping arrays checked: one
        ConfigError line naming it when it is empty, corrupt, incomplete or inconsistent."""
        ck = load_checkpoint(path, required=("iteration", "loss_history", "elapsed", "t"))
        if ck is None:
            return None
        it, hist, el, t = ck["iteration"], ck["loss_history"], ck["elapsed"], ck["t"]
        problems = []
        if it.shape != () or it.dtype.kind not in "iu" or not 0 <= int(it) <= max(self.iters, int(it)):
            problems.append(f"iteration {it!r}")
        if hist.ndim != 2 or hist.shape[1] != 5 or hist.dtype.kind != "f":
            problems.append(f"loss_history of shape {hist.shape}")
        if el.shape != () or el.dtype.kind not in "fiu" or not np.isfinite(el):
            problems.append(f"elapsed {el!r}")
        if t.shape != () or t.dtype.kind not in "iu" or int(t) < 0:
            problems.append(f"t {t!r}")
        for name in self.popts:
            for k in (f"m:{name}", f"v:{name}", f"param:{name}"):
                if k in ck and (ck[k].dtype.kind != "f" or not np.all(np.isfinite(ck[k]))):
                    problems.append(f"{k} is not finite floats")
        for name in self.scene.params.keys():
            v = ck.get(f"param:{name}")
            if v is None:
                continue
            info = self.scene.params.info(name)
            resizable = info.kind in ("texture", "grid")
            if v.shape != info.shape and not (resizable and v.ndim == len(info.shape)
                                              and v.shape[-1] == info.shape[-1] and min(v.shape) > 0):
                problems.append(f"param:{name} has shape {v.shape}, the parameter {info.shape}")
        if problems:
            raise ConfigError(f"inconsistent checkpoint ({'; '.join(problems)}); delete it to start from scratch",
                              path)
        return ck

    def _holdout(self, stage):
        """Render the held-out views with the current parameters at the target's spp (the error is the
        scene's, not Monte Carlo noise): image RMSE vs the truth (and PNGs)."""
        from ..api import render
        err = {}
        for v in self.holdout:
            img = render(self.scene, spp=max(self.spp, 16, getattr(self, "target_spp", 16)),
                         seed=view_seed(self.seed, 10 ** 6 + 1, v, 0), sensor=v, progress=False)
            err[v] = float(np.sqrt(((img - self.holdout_targets[v]) ** 2).mean()))
            save_png(os.path.join(self.out, f"holdout_view{v}_{stage}.png"), img)
            if stage == "start":
                save_png(os.path.join(self.out, f"holdout_view{v}_target.png"), self.holdout_targets[v])
        return err

    def _write_loss(self, history):
        from ..io.plot import save_line_plot
        tmp = os.path.join(self.out, "loss.csv.tmp")
        with open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["iteration", "loss", "seconds", "spp", "param_rmse"])
            for h in history:
                w.writerow([int(h[0]), f"{h[1]:.8g}", f"{h[2]:.3f}", int(h[3]), f"{h[4]:.8g}"])
        os.replace(tmp, os.path.join(self.out, "loss.csv"))
        if history:
            x = np.array([h[0] for h in history], float)
            y = np.array([max(h[1], 1e-30) for h in history], float)
            series = {f"{self.loss_name} loss": (x, y)}
            if len(y) >= 8:  # low-spp losses are dominated by Monte Carlo noise: show the trend too
                series["running mean"] = (x, running_mean(y, max(3, len(y) // 10)))
            save_line_plot(os.path.join(self.out, "loss.png"), series,
                           title="tirender optimize: image loss", xlabel="iteration", ylabel="loss", logy=True)
            if self.synthetic:
                e = np.array([max(h[4], 1e-30) for h in history], float)
                save_line_plot(os.path.join(self.out, "param_rmse.png"), {"parameter RMSE vs truth": (x, e)},
                               title="tirender optimize: parameter error", xlabel="iteration", ylabel="RMSE",
                               logy=True)

    def _save_params(self):
        from ..io.exr import write_exr
        d = os.path.join(self.out, "params")
        os.makedirs(d, exist_ok=True)
        sc = self.scene
        self.geo.save_meshes(d)                    # differentiable meshes as optimised: <id>.ply
        for n in self.popts:
            v = sc.params[n]
            np.save(os.path.join(d, f"{n}.npy"), v)
            if n in sc.sdf_params:            # an SDF grid as optimised, ready to load as an sdfgrid
                from ..media.volfile import write_vol
                write_vol(os.path.join(d, f"{n}.vol"), v)
            elif v.ndim == 3:
                img = v if v.shape[2] == 3 else np.repeat(v, 3, axis=2)
                write_exr(os.path.join(d, f"{n}.exr"), img.astype(np.float32))
                save_png(os.path.join(d, f"{n}.png"), img)
            if n in sc.heightfield_params:    # the displaced mesh, ready to fabricate; heights min-max scaled
                from ..scene.mesh_io import save_ply
                m = sc.heightfield_mesh(sc.heightfield_params.index(n))
                save_ply(os.path.join(d, f"{n}.ply"), m["positions"], m["faces"])
                lo, hi = float(v.min()), float(v.max())
                save_png(os.path.join(d, f"{n}.png"), np.repeat((v - lo) / max(hi - lo, 1e-30), 3, axis=2))
            elif v.ndim == 4:  # 3D grid (media): z-slices as PNG (same scale as the truth's), and .vol
                from ..media.grid import grid_slices
                from ..media.volfile import write_vol
                vmax = max(float(self.truth[n].max()), 1e-12) if self.synthetic else None
                save_png(os.path.join(d, f"{n}_slices.png"), grid_slices(v, vmax=vmax))
                if self.synthetic:
                    save_png(os.path.join(d, f"{n}_truth_slices.png"), grid_slices(self.truth[n], vmax=vmax))
                write_vol(os.path.join(d, f"{n}.vol"), v)


def run_optimization(cfg, out=None, iters=None, resume=False, gui=False, callback=None, described=None, workers=None,
                     address=None, worker_threads=None):
    """Run `tirender optimize` for a loaded config (see tirender.config.load_config). workers: shard
    the views over that many Ray workers (address: an existing Ray cluster; tirender/distributed.py)."""
    return OptimizationRun(cfg, out=out, iters=iters, resume=resume, gui=gui, described=described, workers=workers,
                           address=address, worker_threads=worker_threads).run(callback)
