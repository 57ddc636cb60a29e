"""The GRIN caustic optimisation (Mitsuba 2 §4.3, Fig. 10 d–e): one cube of refractive index, lit
from several directions, whose index grid is optimised so that each beam projects its target image.

Each iteration renders every view with fresh ray jitter (seed = f(config seed, iteration)),
forms the loss ℒ = Σ_v w_v·mean((I_v − T_v)²) and its adjoint images, replays the same rays
backwards into the grid gradient (project.py / trace.py), and takes one Adam step, after which
every index is clamped to [n_min, n_max]. The grid is refined in stages (coarse to fine: the
previous stage's grid resampled by ``train.upsample``; Adam restarts at each stage). Targets are
scaled to the energy the beam delivers to the screen through the starting grid (a lens only moves
light).

Outputs in the output folder: ``grid.npy`` (final (D, H, W) float32 indices), ``final_<view>.png``
and ``target_<view>.png`` (display-scaled by the target's maximum), ``iter_<NNNN>_<view>.png`` every
``train.save_every`` iterations, ``loss.png`` and ``loss.csv`` (per-view MSE per iteration),
``metrics.json`` (errors before and after, reduction factors, time per iteration, peak RSS) and
``checkpoint.npz`` (written atomically; ``--resume`` continues from it bit for bit, except on
software Vulkan, whose float accumulation is not bit-reproducible: field.py).

Adam is Dr.Jit's scale-invariant form (tirender/optim/adam.py) on the host over the grid (numpy;
the grid is small), with the relative ε of tirender's Adam:
    m ← β₁m + (1 − β₁)g,  v ← β₂v + (1 − β₂)g²,  x ← x − lr·√(1 − β₂ᵗ)/(1 − β₁ᵗ)·m/√(v + ε²),
    ε = eps·RMS(√v) over the grid.
"""
import csv
import hashlib
import io
import json
import os
import time

import numpy as np

from ..errors import ConfigError
from ..optim.metrics import standard
from ..schema import Choice, Integer, Number, String, Vec3, validate
from .field import RESAMPLE_METHODS, load_grid, resample

CUBE_KEYS = (
    Vec3("bbox_min", default=(-0.5, -0.5, -0.5), doc="box corner (scene units)"),
    Vec3("bbox_max", default=(0.5, 0.5, 0.5), doc="box corner (scene units)"),
    Number("n_init", default=1.3, lo=0.01, hi=10.0, doc="uniform starting index"),
    String("init", default=None, doc="a (D, H, W) .npy grid to start from instead (resampled to the first stage)"),
    Number("n_min", default=1.0, lo=0.01, hi=10.0, doc="lower bound of every index"),
    Number("n_max", default=1.6, lo=0.01, hi=10.0, doc="upper bound of every index"),
    Number("n_outside", default=1.0, lo=0.01, hi=10.0, doc="index around the cube"),
)
TRACE_KEYS = (
    Number("step", default=0.05, lo=0.0, strict_lo=True, hi=1e6, doc="longest RK4 step (scene units)"),
    Integer("max_steps", default=None, lo=1, hi=1 << 24, doc="steps per ray before it is dropped (default: 4 box "
            "diagonals)"),
)
VIEW_KEYS = (
    Vec3("direction", doc="beam direction (normalised)"),
    String("target", doc="target image (PNG/EXR/NPY; luminance; its size is the screen's resolution)"),
    String("name", default=None, doc="output name (default view<k>)"),
    Number("screen_distance", default=2.0, lo=0.0, strict_lo=True, doc="screen distance from the cube centre"),
    Number("screen_size", default=1.2, lo=0.0, strict_lo=True, doc="screen width (scene units)"),
    Number("aperture", default=0.45, lo=0.0, strict_lo=True, doc="half-size of the square beam (scene units)"),
    Integer("rays_per_side", default=64, lo=1, hi=4096, doc="R: R² rays per iteration (stratified, jittered)"),
    Number("weight", default=1.0, lo=0.0, doc="weight of this view's loss"),
)
TRAIN_KEYS = (
    Number("lr", default=0.003, lo=0.0, doc="Adam learning rate (index units per step)"),
    Number("beta1", default=0.9, lo=0.0, hi=1.0, strict_hi=True, doc="Adam β₁"),
    Number("beta2", default=0.999, lo=0.0, hi=1.0, strict_hi=True, doc="Adam β₂"),
    Number("eps", default=1e-3, lo=0.0, doc="Adam ε relative to the RMS gradient"),
    Choice("upsample", RESAMPLE_METHODS, default="cubic", doc="resampling between stages"),
    Integer("save_every", default=50, lo=0, hi=1 << 30, doc="intermediate images every N iterations (0: none)"),
    Integer("checkpoint_every", default=50, lo=0, hi=1 << 30, doc="checkpoint every N iterations (0: stage ends)"),
    Integer("eval_seed", default=1000003, lo=0, hi=(1 << 31) - 1, doc="ray seed of the before/after evaluation"),
)
TOP_KEYS = ("seed", "cube", "trace", "splat_stddev", "views", "train")
STAGE_KEYS = (Integer("res", lo=2, hi=512, doc="grid resolution (res³)"),
              Integer("iters", lo=0, hi=1 << 30, doc="iterations"),
              Number("lr_scale", default=1.0, lo=0.0, doc="learning-rate factor"))
DEFAULT_STAGES = [{"res": 8, "iters": 60}, {"res": 16, "iters": 140}]


def _load_target(path, file, key):
    from ..io.images import load_image
    try:
        img = load_image(path)
    except ConfigError as e:
        raise ConfigError(e.problem, file, key) from None
    img = np.asarray(img, np.float64)
    if img.ndim == 3:
        c = img.shape[2]
        img = img[..., :3].mean(2) if c >= 3 else img[..., 0]
    if not np.all(np.isfinite(img)) or img.min() < 0 or img.max() <= 0:
        raise ConfigError("target image must be finite, non-negative and not all zero", file, key)
    if max(img.shape) > 1024:
        raise ConfigError(f"target image is {img.shape[1]}x{img.shape[0]}; at most 1024 pixels a side", file, key)
    return img


def parse_config(cfg, file=None, base_dir=None):
    """Validate the ``grin:`` section (or a dict that is that section, or a whole config with it)
    → normalised dict, with the target images loaded (key ``image`` of each view). Every problem
    is a ConfigError naming the file and key."""
    if isinstance(cfg, dict) and "grin" in cfg:
        file = file or cfg.get("_file")
        base_dir = base_dir or cfg.get("_dir")
        cfg = cfg["grin"]
    if not isinstance(cfg, dict):
        raise ConfigError("expected a mapping", file, "grin")
    base_dir = base_dir or (os.path.dirname(os.path.abspath(file)) if file else os.getcwd())
    for k in cfg:
        if k not in TOP_KEYS:
            raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(TOP_KEYS)})", file, f"grin.{k}")
    out = {"seed": Integer("seed", lo=0, hi=(1 << 31) - 1).parse(cfg.get("seed", 0), file, "grin.seed")}
    out["splat_stddev"] = Number("splat_stddev", lo=0.25, hi=16.0).parse(cfg.get("splat_stddev", 0.75), file,
                                                                         "grin.splat_stddev")
    out["cube"] = validate(cfg.get("cube") or {}, CUBE_KEYS, file, "grin.cube")
    cube = out["cube"]
    cube["bbox_min"] = np.asarray(cube["bbox_min"], np.float64).tolist()
    cube["bbox_max"] = np.asarray(cube["bbox_max"], np.float64).tolist()
    if not np.all(np.asarray(cube["bbox_max"]) > np.asarray(cube["bbox_min"])):
        raise ConfigError("bbox_max must exceed bbox_min on every axis", file, "grin.cube.bbox_max")
    if cube["n_max"] < cube["n_min"]:
        raise ConfigError(f"n_max ({cube['n_max']}) is below n_min ({cube['n_min']})", file, "grin.cube.n_max")
    if not cube["n_min"] <= cube["n_init"] <= cube["n_max"]:
        raise ConfigError(f"n_init must lie in [n_min, n_max] = [{cube['n_min']}, {cube['n_max']}]", file,
                          "grin.cube.n_init")
    if cube.get("init"):
        p = cube["init"] if os.path.isabs(cube["init"]) else os.path.join(base_dir, cube["init"])
        cube["init_grid"] = load_grid(p, "grin.cube.init", file)
    out["trace"] = validate(cfg.get("trace") or {}, TRACE_KEYS, file, "grin.trace")
    views = cfg.get("views")
    if not isinstance(views, list) or not views:
        raise ConfigError("expected a non-empty list of views" if views is not None else "missing required key",
                          file, "grin.views")
    out["views"] = []
    names = set()
    for i, v in enumerate(views):
        where = f"grin.views[{i}]"
        vv = validate(v, VIEW_KEYS, file, where)
        d = np.asarray(vv["direction"], np.float64)
        if np.linalg.norm(d) < 1e-9:
            raise ConfigError("direction must not be zero", file, f"{where}.direction")
        vv["direction"] = (d / np.linalg.norm(d)).tolist()
        vv["name"] = vv.get("name") or f"view{i}"
        if vv["name"] in names or not vv["name"].replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"view names must be unique and alphanumeric, got {vv['name']!r}", file, f"{where}.name")
        names.add(vv["name"])
        p = vv["target"] if os.path.isabs(vv["target"]) else os.path.join(base_dir, vv["target"])
        vv["target_path"] = p
        vv["image"] = _load_target(p, file, f"{where}.target")
        out["views"].append(vv)
    tr = cfg.get("train") or {}
    if not isinstance(tr, dict):
        raise ConfigError("expected a mapping", file, "grin.train")
    stages = tr.get("stages", DEFAULT_STAGES)
    out["train"] = validate({k: v for k, v in tr.items() if k != "stages"}, TRAIN_KEYS, file, "grin.train")
    if not isinstance(stages, list) or not stages:
        raise ConfigError("expected a non-empty list of {res, iters}", file, "grin.train.stages")
    out["train"]["stages"] = [validate(s, STAGE_KEYS, file, f"grin.train.stages[{i}]") for i, s in enumerate(stages)]
    return out


def scale_schedule(stages, iters):
    """The stages with a total of ``iters`` iterations spread in proportion to their counts."""
    from ..radiance_field.train import scale_schedule as ss
    return ss(stages, iters)


def config_digest(cfg):
    """A hash of everything a checkpoint depends on (views, cube, trace, schedule, optimiser)."""
    keep = {k: v for k, v in cfg.items() if k != "views"}
    keep["views"] = [{k: v for k, v in vw.items() if k not in ("image", "target_path")} for vw in cfg["views"]]
    keep["targets"] = [hashlib.sha1(np.ascontiguousarray(vw["image"], np.float64).tobytes()).hexdigest()
                       for vw in cfg["views"]]
    keep["cube"] = {k: v for k, v in cfg["cube"].items() if k != "init_grid"}
    return hashlib.sha1(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


class HostAdam:
    """Adam in Dr.Jit's form (see the module doc) over a numpy array, with bounds."""

    def __init__(self, lr, beta1=0.9, beta2=0.999, eps=1e-3):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = self.v = None
        self.t = 0

    def reset(self, shape):
        self.m = np.zeros(shape)
        self.v = np.zeros(shape)
        self.t = 0

    def step(self, x, g, lo, hi):
        g = np.where(np.isfinite(g), g, 0.0)
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * g
        self.v = self.beta2 * self.v + (1 - self.beta2) * g * g
        e2 = (self.eps ** 2) * float(self.v.mean())
        q = self.v + e2
        step = np.where(q > 0, self.m / np.sqrt(np.where(q > 0, q, 1.0)), 0.0)
        scale = np.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        return np.clip(x - self.lr * scale * step, lo, hi)


def _display(img, vmax):
    return np.clip(np.asarray(img, np.float64) / max(vmax, 1e-30), 0.0, 1.0)


class Trainer:
    """The optimisation loop of a parsed ``grin`` config (see the module doc). ``prepare`` allocates
    the grid (capacity: the finest stage), the projector and compiles every kernel; the loop then
    creates no field and compiles nothing."""

    def __init__(self, cfg, out_dir=None, log=print):
        from ..backend import ensure_init
        ensure_init()
        from .field import IndexGrid
        from .project import Projector, View
        self.cfg, self.out_dir, self.log = cfg, out_dir, log
        cube, tr = cfg["cube"], cfg["train"]
        self.lo, self.hi = cube["n_min"], cube["n_max"]
        self.stages = tr["stages"]
        cap = max(s["res"] for s in self.stages) ** 3
        if cube.get("init_grid") is not None:
            cap = max(cap, int(np.asarray(cube["init_grid"]).size))
        self.grid = IndexGrid(np.full((2, 2, 2), cube["n_init"]), cube["bbox_min"], cube["bbox_max"],
                              n_out=cube["n_outside"], capacity=cap)
        self.views = [View(v["direction"], v["screen_distance"], v["screen_size"], v["aperture"], v["rays_per_side"],
                           target=v["image"], name=v["name"]) for v in cfg["views"]]
        self.weights = [v["weight"] for v in cfg["views"]]
        self.proj = Projector(self.views, (self.grid.bmin, self.grid.bmax), cfg["trace"]["step"],
                              splat_stddev=cfg["splat_stddev"], max_steps=cfg["trace"].get("max_steps"),
                              n_out=cube["n_outside"])
        self.adam = HostAdam(tr["lr"], tr["beta1"], tr["beta2"], tr["eps"])
        self.targets = None
        self.history = []          # [iteration, stage res, loss, per-view MSE...]
        self.train_time = 0.0
        self.data = None

    # -- grids
    def initial_grid(self, res):
        cube = self.cfg["cube"]
        if cube.get("init_grid") is not None:
            return resample(cube["init_grid"], res, self.cfg["train"]["upsample"], self.lo, self.hi)
        return np.full((res, res, res), float(cube["n_init"]))

    def seed(self, it):
        return (self.cfg["seed"] * 1000003 + 7919 * it + 1) & 0x7FFFFFFF

    def loss(self, images):
        from .project import l2_loss
        return l2_loss(images, self.targets, self.weights)

    def prepare(self):
        """Targets (scaled to the energy the starting grid delivers), and every kernel compiled."""
        self.grid.set(self.initial_grid(self.stages[0]["res"]))
        ev = self.proj.render(self.grid, self.cfg["train"]["eval_seed"])
        self.start_images = ev
        self.targets = []
        for v, im in zip(self.views, ev):
            t = v.target
            self.targets.append(t * (im.sum() / t.sum()))
        self.proj.backward(self.grid, [np.zeros_like(t) for t in self.targets], 0)   # compiles the adjoint
        self.start = self.evaluate(ev)

    def evaluate(self, images=None):
        """Per view: MSE and relative L2 (‖I − T‖/‖T‖) of the evaluation render (seed eval_seed)."""
        from .project import relative_l2
        if images is None:
            self.grid.set(self.data)
            images = self.proj.render(self.grid, self.cfg["train"]["eval_seed"])
        _, per, _ = self.loss(images)
        return {"images": images, "mse": per, "rel_l2": [relative_l2(i, t) for i, t in zip(images, self.targets)],
                "stats": self.proj.last_stats}

    def step(self, it, stage):
        """One iteration: render, loss, replayed adjoint, Adam → the loss and per-view MSE."""
        self.grid.set(self.data)
        s = self.seed(it)
        images = self.proj.render(self.grid, s)
        total, per, adj = self.loss(images)
        self.proj.backward(self.grid, adj, s)
        g = self.grid.grad_numpy()
        self.data = self.adam.step(self.data, g, self.lo, self.hi)
        return total, per, images

    # -- outputs
    def save_images(self, images, stem):
        from ..io.images import save_png
        for v, im, t in zip(self.views, images, self.targets):
            save_png(os.path.join(self.out_dir, f"{stem}_{v.name}.png"), _display(im, t.max()))

    def _ckpt_path(self):
        return os.path.join(self.out_dir, "checkpoint.npz") if self.out_dir else None

    def save_checkpoint(self, stage, it_in_stage, global_it):
        if not self.out_dir:
            return
        from ..io.checkpoints import save_checkpoint
        save_checkpoint(self._ckpt_path(), grid=self.data, stage=stage, it=it_in_stage, global_it=global_it,
                        m=self.adam.m, v=self.adam.v, t=self.adam.t, train_time=self.train_time,
                        history=np.asarray(self.history, np.float64).reshape(len(self.history), 3 + len(self.views)),
                        digest=config_digest(self.cfg))

    def load_checkpoint(self):
        from ..io.checkpoints import load_checkpoint
        p = self._ckpt_path()
        if not p:
            return None
        c = load_checkpoint(p, required=("grid", "stage", "it", "global_it", "m", "v", "t", "train_time", "history",
                                         "digest"))
        if c is None:
            return None
        if str(c["digest"]) != config_digest(self.cfg):
            raise ConfigError("checkpoint was written for another configuration; delete it or run without --resume", p)
        st = int(c["stage"])
        if st >= len(self.stages) or c["grid"].shape != (self.stages[st]["res"],) * 3:
            raise ConfigError("checkpoint does not match the stage schedule; delete it or run without --resume", p)
        return c

    # -- the loop
    def run(self, resume=False, stop_after=None):
        """Optimise through every stage; returns the metrics (None when stopped by stop_after, with a
        checkpoint written)."""
        from ..progress import Progress
        tr = self.cfg["train"]
        self.prepare()
        start_stage, start_it, global_it = 0, 0, 0
        ck = self.load_checkpoint() if resume else None
        if ck is not None:
            start_stage, start_it, global_it = int(ck["stage"]), int(ck["it"]), int(ck["global_it"])
            self.data = np.asarray(ck["grid"], np.float64)
            self.adam.m, self.adam.v, self.adam.t = np.asarray(ck["m"]), np.asarray(ck["v"]), int(ck["t"])
            self.train_time = float(ck["train_time"])
            self.history = [list(r) for r in np.asarray(ck["history"])]
            self.log(f"resuming at stage {start_stage + 1}, iteration {start_it} (global {global_it})")
        total = sum(s["iters"] for s in self.stages)
        bar = Progress(total, "grin")
        bar.n = global_it
        save_every, ck_every = tr["save_every"], tr["checkpoint_every"]
        if self.out_dir and global_it == 0 and save_every:
            self.save_images(self.start["images"], "iter_0000")
        for si in range(start_stage, len(self.stages)):
            st = self.stages[si]
            if ck is None or si != start_stage:
                t0 = time.perf_counter()
                self.data = self.initial_grid(st["res"]) if self.data is None else \
                    resample(self.data, st["res"], tr["upsample"], self.lo, self.hi)
                self.adam.reset(self.data.shape)
                self.train_time += time.perf_counter() - t0
                it0 = 0
            else:
                it0 = start_it
            self.adam.lr = tr["lr"] * st["lr_scale"]
            for it in range(it0, st["iters"]):
                t0 = time.perf_counter()
                loss, per, _images = self.step(global_it, si)
                self.train_time += time.perf_counter() - t0
                global_it += 1
                self.history.append([global_it, st["res"], loss] + per)
                bar.update(1, f"{st['res']}³ loss {loss:.3e}")
                if self.out_dir and save_every and global_it % save_every == 0:
                    self.grid.set(self.data)
                    self.save_images(self.proj.render(self.grid, tr["eval_seed"]), f"iter_{global_it:04d}")
                last = it + 1 == st["iters"]
                if (ck_every and global_it % ck_every == 0) or last or global_it == stop_after:
                    self.save_checkpoint(si, it + 1, global_it)
                if global_it == stop_after:
                    bar.__exit__(None, None, None)
                    return None
            if ck is not None and si == start_stage and it0 == st["iters"]:
                pass   # resumed from an end-of-stage checkpoint
            self.log(f"stage {si + 1}/{len(self.stages)}: {st['res']}³, {st['iters']} iterations, "
                     f"{self.train_time:.1f} s")
        bar.__exit__(None, None, None)
        return self.finish(global_it)

    def finish(self, iterations):
        end = self.evaluate()
        per_view = {}
        for k, v in enumerate(self.views):
            s0, s1 = self.start, end
            per_view[v.name] = {
                "direction": list(map(float, v.a)), "mse_start": s0["mse"][k], "mse_final": s1["mse"][k],
                "mse_reduction": s0["mse"][k] / max(s1["mse"][k], 1e-300),
                "rel_l2_start": s0["rel_l2"][k], "rel_l2_final": s1["rel_l2"][k],
                "rel_l2_reduction": s0["rel_l2"][k] / max(s1["rel_l2"][k], 1e-300),
                "rays": v.n_rays, "rays_final": s1["stats"][k]}
        from ..radiance_field.train import peak_rss_mb
        n_it_timed = max(iterations, 1)
        self.metrics = {"iterations": iterations, "train_time_s": round(self.train_time, 3),
                        "seconds_per_iteration": round(self.train_time / n_it_timed, 4),
                        "final_res": list(self.data.shape), "n_range": [float(self.data.min()), float(self.data.max())],
                        "views": per_view, "peak_rss_mb": round(peak_rss_mb(), 1)}
        self.end_images = end["images"]
        return self.metrics

    def write_outputs(self, metrics):
        from ..io.atomic import atomic_write_bytes
        from ..io.plot import save_line_plot
        from .field import save_grid
        d = self.out_dir
        save_grid(os.path.join(d, "grid.npy"), self.data)
        self.save_images(self.end_images, "final")
        self.save_images(self.targets, "target")
        h = np.asarray(self.history, np.float64)
        if len(h):
            series = {f"{v.name} MSE": (h[:, 0], h[:, 3 + k]) for k, v in enumerate(self.views)}
            save_line_plot(os.path.join(d, "loss.png"), series, title="GRIN caustics: training loss per view",
                           xlabel="iteration", ylabel="MSE", logy=True)
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(["iteration", "res", "loss"] + [f"mse_{v.name}" for v in self.views])
            for r in h:
                w.writerow([int(r[0]), int(r[1])] + [f"{x:.9g}" for x in r[2:]])
            atomic_write_bytes(os.path.join(d, "loss.csv"), buf.getvalue().encode())
        atomic_write_bytes(os.path.join(d, "metrics.json"), json.dumps(metrics, indent=2).encode())


def train(cfg, cfg_path=None, out_dir=None, iters=None, resume=False, log=print, parsed=None):
    """Run a ``grin`` config end to end → metrics (also written to out_dir)."""
    cfg = parsed or parse_config(cfg, cfg_path)
    if iters is not None:
        cfg["train"]["stages"] = scale_schedule(cfg["train"]["stages"], iters)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    tr = Trainer(cfg, out_dir=out_dir, log=log)
    metrics = tr.run(resume=resume)
    metrics["wall_s"] = round(time.perf_counter() - t0, 3)
    views = metrics.get("views", {}).values()      # the objective: the views' mean MSE against their targets
    mse = [np.mean([v[k] for v in views]) if views else None for k in ("mse_start", "mse_final")]
    metrics = standard(metrics, mse[0], mse[1], metrics["iterations"], metrics["wall_s"])
    if out_dir:
        tr.write_outputs(metrics)
    return metrics
