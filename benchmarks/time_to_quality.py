"""Reconstruction quality per second (issue 20): a tirender reconstruction task and its exact
Mitsuba 3 port run one after the other (never both at once), each in a fresh process; per iteration
the wall time since the first iteration started, the image loss and the parameter RMSE against the
ground truth; then one table: s/iteration and its ratio, the error of each at equal iterations, the
time each needs to reach the other's final error, first-iteration (cold) time, held-out image error,
peak RSS; and a PNG of parameter RMSE vs wall seconds.

    export DRJIT_LIBLLVM_PATH=/usr/lib/x86_64-linux-gnu/libLLVM-19.so   # set here when unset and present
    python3 benchmarks/time_to_quality.py [--task volume|texture|cbox|radiance_field] [--iters N] [--out DIR]
                                          [--skip-mitsuba] [--order tirender-first|mitsuba-first] [--gradient-check]

Tasks (TASKS below):

volume   configs/volume_recovery.yaml: the 64^3 smoke density (configs/volumes/smoke64.vol) from
         6 views (64^2, fov 40) under the sky envmap, prbvolpath (max_depth 8, rr_depth 5), 32^3 for
         100 iterations then 64^3 for 40 (--iters N moves the switch to round(100 N / 140)), Adam
         (lr 0.05, Dr.Jit's absolute eps 1e-6), L2, 8 + 8 spp (16 + 16 at 64^3), density projected
         onto [0, inf) (the model's bounds: what tirender's driver does), targets rendered by each
         renderer from the truth at 128 spp, view 6 held out. tirender runs through its own driver
         (tirender.optim.driver.OptimizationRun); Mitsuba 3 (llvm_ad_rgb) through a port of that
         driver loop: mi.render(spp, spp_grad) per view, dr.backward of the per-view L2 / n_views,
         mi.ad.Adam(lr=0.05, epsilon=1e-6) (Dr.Jit's step is tirender's absolute-eps step), the
         coarse-to-fine switch resampling the density and Adam's moments by tirender's trilinear
         resampling (voxel centres aligned) and keeping Adam's step count, as the driver does.
         Density RMSE as the driver's param_rmse (OptimizationRun._rmse): the current grid
         trilinearly resampled to the truth's 64^3, RMS difference over voxels.

texture  configs/texture_recovery.yaml: a 256^2 diffuse bitmap on a rectangle under a rectangular
         area light, one 128^2 view (Gaussian filter), PRB with max_depth 3, 8 + 8 spp, Adam (each
         renderer's own defaults: both Dr.Jit's absolute eps 1e-8), lr 0.03 from 0.5 grey,
         coarse to fine 32^2 -> 64^2 -> 128^2 -> 256^2 at iterations 0/20/40/60 (value and Adam's
         moments resampled bilinearly, step count kept, in both), values clipped to [0, 1]. Mitsuba
         gets the same linear texture (the PNG decoded from sRGB as tirender does, raw bitmap).
cbox     configs/cbox_red_wall.yaml: the Cornell box's red wall RGB reflectance from 0.5 grey, one
         128^2 view, PRB max_depth 6, 8 + 8 spp, Adam lr 0.04, 40 iterations; Mitsuba renders the
         XML twin tests/data/cbox.xml at res 128 with its prb integrator.
texture and cbox: tirender runs its own driver on the config (tirender_task); Mitsuba a port of
the driver's loop (mitsuba_task); parameter error = the driver's param_rmse against the scene as written.
The spec's lr, spp, spp_grad, betas and stages ([[0, None]]: no multires) are applied to the config
in both children, and spec["optimizer"] (eps_mode, eps) to tirender's (benchmarks/defaults_sweep.py).
radiance_field
         configs/radiance_field.yaml: tirender's voxel radiance field (density and SH degree-2
         colour, 28 values per voxel, box [-1, 1]^3) from its procedural dataset: 8 training and 2
         held-out 128^2 views (fov 45), generated once by a data child (tirender_rf_data, not timed)
         into <task>/data/ (images.npy; cameras.json: origin, target, up, fov, resolution and the
         camera-to-world matrix per view, the view split; cfg.json: the normalised config;
         truth.npy: the ground-truth field); both renderers train on exactly these images and
         cameras. 16^3 -> 32^3 -> 64^3 x 200 iterations, 64^3 at lr_scale 0.5 (--iters N spreads N
         over the stages as `tirender optimize --iters` does). Batch: one full training view per
         iteration, views in order (train.batch: view, view_order: sequential, overriding the
         config's 4096 random rays: Mitsuba's tutorial renders one sensor per step). Model: one ray
         through each pixel centre, one uniform march jitter per ray, points t_near + (i + j) delta,
         delta = 1 voxel, ReLU density and colour (no clip), init density 0.01 and colour 0.5,
         stop once T < 1e-4, black background; loss L2 (mean over pixels and channels) + TV
         (density 0.002, colour 0.002: weight / R^3 times the sum of squared forward differences);
         Adam, lr 0.2 density / 0.05 SH times the stage's lr_scale (each renderer's own epsilon:
         the config's relative 1e-3 in tirender, Dr.Jit's 1e-8 in Mitsuba). Stage changes as
         tirender's defaults in both: cubic upsampling
         (Catmull-Rom clamped to the local range of the coarse grid, the ReLU clamp), Adam's moments
         carried (train.adam_state: carry: bias-corrected, resampled trilinearly, |m| <= sqrt(v),
         rescaled to the finer voxels, re-entered as a 10-step prior); the Mitsuba child loads
         tirender's own resample.py by path (numpy only). Options for benchmarks/defaults_sweep.py
         (radiance_field_spec): another radiance_field section (L1 or L2, any activations,
         upsample / adam_state), the training-view PSNR (eval_train), and the Mitsuba tutorial's
         own stage change (mitsuba_stage_change="tutorial": dr.upsample, Adam reset).
         tirender: its Trainer (prepare, then enter_stage / step as Trainer.run, no checkpoints).
         Mitsuba 3: the approach of Mitsuba's radiance-field tutorial: a Python RBIntegrator
         (RadianceFieldPRB) marching mi.Texture3f grids (density: 1 channel, SH: 27) in a symbolic
         dr.while_loop whose adjoint pass replays the march and back-propagates each point (PRB),
         mi.render of one sensor per iteration, dr.backward, mi.ad.Adam with per-grid learning
         rates; the TV gradient is added in gather form (one kernel, as tirender's). Its model is
         tirender's where the tutorial differs: the box, step and initial values, pixel-centre rays
         (sample_rays overridden), T < t_min termination, no colour clip to [0, 1], L2 instead of
         L1, one view per step instead of the tutorial's ray loader. At a fixed jitter the two
         render the same image and the same L2 and TV gradients to float rounding (relative
         differences 6e-6 and 2e-7).
         Error column: held-out image RMSE (both held-out views, renders clipped to [0, 1] as
         tirender's PSNR clips, against the same images; PSNR = 20 log10(1 / RMSE)), measured every
         RF_EVAL_EVERY = 10 iterations and at each stage end with the clock paused; the rows in
         between carry the last measurement. Loss floor row: the ground truth (64^3) rendered by
         the model against the training images. Timed: the iterations and the stage changes'
         upsampling (as Trainer.run times it); tirender compiles its kernels in prepare() (setup),
         Mitsuba in the first iteration of each stage.

Timing: seconds since the first iteration started (after scene loading, target renders and the
held-out start render; both renderers keep their kernels' on-disk caches, Taichi's offline cache
and Dr.Jit's ~/.drjit, so the "cold" first iteration includes compilation or a cache load of the
gradient kernels). Peak RSS: each child process's ru_maxrss. The machines here are shared: the
load average before and after is printed.

--gradient-check (volume): instead of optimising, both renderers' density gradients at the start
(32^3 at the init): the correlation of independent per-voxel estimates (variance), of their means
(agreement), and <grad, 1> of a fixed linear image functional by PRB in both and by central finite
differences in Mitsuba 3 (bias).

Outputs in --out (default out/time_to_quality): <task>/tirender/ (the driver's own outputs,
loss.csv ...), <task>/mitsuba/loss.csv (same columns), <task>/data/ (radiance_field: the data both
train on), <task>_time_to_quality.csv (both), <task>_rmse_vs_seconds.png (matplotlib if installed,
else tirender's own headless line plot).
"""
import argparse
import csv
import json
import os
import resource
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import sidebyside  # noqa: E402

VOLUME_CONFIG = os.path.join(ROOT, "configs", "volume_recovery.yaml")


# -- numpy helpers shared by both children (no Taichi, no Mitsuba) ----------------------------------
def read_vol(path):
    """Mitsuba .vol (float32 or uint8, as tirender.media.volfile.read_vol) -> (data (D, H, W, C)
    float32, bbox_min, bbox_max)."""
    with open(path, "rb") as f:
        raw = f.read()
    enc, xr, yr, zr, ch = struct.unpack("<5i", raw[4:24])
    bbox = np.array(struct.unpack("<6f", raw[24:48]), np.float64)
    n = xr * yr * zr * ch
    if enc == 1:
        data = np.frombuffer(raw, "<f4", count=n, offset=48).astype(np.float32)
    elif enc == 3:
        data = np.frombuffer(raw, "u1", count=n, offset=48).astype(np.float32) / 255.0
    else:
        raise ValueError(f"{path}: unsupported .vol encoding {enc}")
    return data.reshape(zr, yr, xr, ch), bbox[:3], bbox[3:]


def write_vol_f32(path, data, bmin, bmax):
    zr, yr, xr, ch = data.shape
    head = b"VOL" + bytes([3]) + struct.pack("<5i", 1, xr, yr, zr, ch)
    head += struct.pack("<6f", *[float(v) for v in bmin], *[float(v) for v in bmax])
    with open(path, "wb") as f:
        f.write(head + np.ascontiguousarray(data, "<f4").tobytes())


def resample_grid(data, r):
    """tirender.media.grid.resample_grid without Taichi: trilinear, voxel centres aligned, clamped."""
    data = np.asarray(data, np.float64)
    r = (int(r),) * 3 if np.isscalar(r) else tuple(int(x) for x in r)
    if data.shape[:3] == r:
        return data.astype(np.float32)
    D, H, W, C = data.shape

    def axis(n_out, n):
        p = (np.arange(n_out) + 0.5) / n_out * n - 0.5
        pf = np.floor(p)
        i = pf.astype(int)
        return np.clip(i, 0, n - 1), np.clip(i + 1, 0, n - 1), p - pf
    z0, z1, fz = axis(r[0], D)
    y0, y1, fy = axis(r[1], H)
    x0, x1, fx = axis(r[2], W)
    out = np.zeros(r + (C,))
    for k in range(8):
        zi, wz = (z1, fz) if k & 4 else (z0, 1 - fz)
        yi, wy = (y1, fy) if k & 2 else (y0, 1 - fy)
        xi, wx = (x1, fx) if k & 1 else (x0, 1 - fx)
        w = wz[:, None, None] * wy[None, :, None] * wx[None, None, :]
        out += w[..., None] * data[zi[:, None, None], yi[None, :, None], xi[None, None, :]]
    return out.astype(np.float32)


def grid_rmse(cur, truth):
    """The driver's param_rmse (OptimizationRun._rmse): cur resampled to the truth's shape."""
    if cur.shape != truth.shape:
        cur = resample_grid(cur, truth.shape[:3])
    return float(np.sqrt(((cur.astype(np.float64) - truth) ** 2).mean()))


def driver_seed(base, it, view, k):
    """tirender.optim.views.view_seed: k = 0 primal, 1 adjoint."""
    return (int(base) * 1000003 + it * 4099 + view * 67 + k * 7919 + 1) & 0xFFFFFFFF


def _schedules():
    """tirender/optim/schedules.py loaded alone: importing tirender imports taichi, and the Mitsuba child (whose peak
    RSS is measured) must not load it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_tq_schedules", os.path.join(ROOT, "tirender", "optim", "schedules.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_SCHEDULES = _schedules()
spp_at = _SCHEDULES.spp_at
stage_res = _SCHEDULES.resolution_at


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def add_row(rows, iters, it, loss, seconds, spp, err):
    """Append a Mitsuba child's per-iteration row (the driver's loss.csv columns); progress on stderr."""
    rows.append(dict(iteration=it, loss=loss, seconds=seconds, spp=spp, param_rmse=err))
    if (it + 1) % 10 == 0 or it + 1 == iters:
        print(f"mitsuba it {it + 1}/{iters} {seconds:.1f} s loss {loss:.4g} rmse {err:.4f}", file=sys.stderr, flush=True)


def write_rows(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["iteration", "loss", "seconds", "spp", "param_rmse"])
        for r in rows:
            w.writerow([r["iteration"], f"{r['loss']:.8g}", f"{r['seconds']:.3f}", r["spp"], f"{r['param_rmse']:.8g}"])


def read_rows(path):
    with open(path) as fh:
        return [{"iteration": int(r["iteration"]), "loss": float(r["loss"]), "seconds": float(r["seconds"]),
                 "spp": int(r["spp"]), "param_rmse": float(r["param_rmse"])} for r in csv.DictReader(fh)]


# -- volume task ------------------------------------------------------------------------------------
def volume_spec(iters=None):
    """The task as both children run it: read from configs/volume_recovery.yaml (checked against
    what the Mitsuba port supports), the multires switch and spp doubling scaled to `iters`."""
    import yaml
    with open(VOLUME_CONFIG) as fh:
        cfg = yaml.safe_load(fh)
    sc, op = cfg["scene"], cfg["optimize"]
    (mname, med), = sc["media"].items()
    (pname, popt), = op["params"].items()
    (mr_name, stages), = op["multires"].items()
    assert pname == mr_name == f"{mname}.density" and med["type"] == "grid" and med["phase"]["type"] == "hg"
    assert op["optimizer"]["type"] == "adam" and op["optimizer"]["eps_mode"] == "absolute" and op["loss"] == "l2"
    assert sc["integrator"]["type"] == "prbvolpath" and len(sc["emitters"]) == 1 and len(sc["shapes"]) == 1
    full = int(op["iters"])
    iters = full if iters is None else int(iters)
    scale = iters / full
    stages = [[int(round(s * scale)), int(r)] for s, r in stages]
    de = op["spp_schedule"]["double_every"]
    sensors = []
    for s in sc["sensors"]:
        la = s["to_world"]["look_at"]
        f = s["film"]
        assert f.get("filter", {}).get("type") == "box"
        sensors.append(dict(fov=float(s["fov"]), origin=la["origin"], target=la["target"], up=la["up"],
                            width=int(f["width"]), height=int(f["height"])))
    env = sc["emitters"][0]
    return dict(
        config=VOLUME_CONFIG, iters=int(iters), full_iters=full, stages=stages, param=pname,
        double_every=max(1, int(round(de * scale))), spp_max=int(op["spp_schedule"]["max"]),
        spp=int(op["spp"]), spp_grad=int(op.get("spp_grad", op["spp"])),
        init=float(popt["init"]), lr=float(popt["lr"]), eps=float(op["optimizer"]["eps"]),
        beta1=float(op["optimizer"].get("beta1", 0.9)), beta2=float(op["optimizer"].get("beta2", 0.999)),
        views=list(op["views"]), holdout=list(op["holdout"]), target_spp=int(op["target"]["spp"]),
        target_seed=int(op["target"]["seed"]), seed=int(op.get("seed", 0)),
        max_depth=int(sc["integrator"]["max_depth"]), rr_depth=int(sc["integrator"]["rr_depth"]),
        sensors=sensors, vol=os.path.join(ROOT, "configs", med["density"]["filename"]),
        scale=float(med["scale"]), albedo=[float(a) for a in med["albedo"]], g=float(med["phase"]["g"]),
        env=os.path.join(ROOT, "configs", env["data"]), env_scale=float(env.get("scale", 1.0)))


def mitsuba_volume_scene(spec, out):
    """The volume task's scene in Mitsuba 3 (llvm_ad_rgb): (mi, dr, scene, sensors, params, key, truth)."""
    import mitsuba as mi
    mi.set_variant(sidebyside.MI_VARIANT)
    import drjit as dr
    os.makedirs(out, exist_ok=True)
    truth, bmin, bmax = read_vol(spec["vol"])
    vol = os.path.join(out, "truth_f32.vol")   # Mitsuba 3 reads float32 .vol only (the config's is uint8)
    write_vol_f32(vol, truth, bmin, bmax)
    T = mi.ScalarTransform4f
    # Mitsuba 3's gridvolume maps [0, 1]^3 through its to_world and ignores the .vol header's
    # bbox (tirender uses it): the bbox is given as to_world
    grid_to_world = T().translate([float(x) for x in bmin]).scale([float(b - a) for a, b in zip(bmin, bmax)])
    d = {"type": "scene",
         "integrator": {"type": "prbvolpath", "max_depth": spec["max_depth"], "rr_depth": spec["rr_depth"]},
         "medium": {"type": "heterogeneous", "scale": spec["scale"],
                    "sigma_t": {"type": "gridvolume", "filename": vol, "to_world": grid_to_world},
                    "albedo": {"type": "constvolume", "value": {"type": "rgb", "value": spec["albedo"]}},
                    "phase": {"type": "hg", "g": spec["g"]}},
         "bounds": {"type": "cube", "bsdf": {"type": "null"}, "interior": {"type": "ref", "id": "medium"}},
         "sky": {"type": "envmap", "bitmap": mi.Bitmap(np.load(spec["env"]).astype(np.float32)),
                 "scale": spec["env_scale"]}}
    for i, s in enumerate(spec["sensors"]):
        d[f"sensor{i}"] = {
            "type": "perspective", "fov": s["fov"],
            "to_world": T().look_at(origin=s["origin"], target=s["target"], up=s["up"]),
            "film": {"type": "hdrfilm", "width": s["width"], "height": s["height"], "rfilter": {"type": "box"},
                     "pixel_format": "rgb"},
            "sampler": {"type": "independent", "sample_count": spec["spp"]}}
    scene = mi.load_dict(d)
    sensors = {s.id(): s for s in scene.sensors()}
    sensors = [sensors[f"sensor{i}"] for i in range(len(spec["sensors"]))]
    return mi, dr, scene, sensors, mi.traverse(scene), "medium.sigma_t.data", truth


def mitsuba_volume(spec, out):
    """Child: the same task ported to Mitsuba 3 (llvm_ad_rgb), the driver's loop step by step."""
    t_proc = time.perf_counter()
    mi, dr, scene, sensors, params, key, truth = mitsuba_volume_scene(spec, out)

    def render(v, spp, seed):
        img = mi.render(scene, sensor=sensors[v], spp=spp, seed=seed)
        return np.array(img)[..., :3]
    targets = {v: mi.TensorXf(render(v, spec["target_spp"], spec["target_seed"] + v)) for v in spec["views"]}
    hold_t = {v: render(v, spec["target_spp"], spec["target_seed"] + v) for v in spec["holdout"]}
    for v, img in targets.items():
        np.save(os.path.join(out, f"target_view{v}.npy"), np.array(img))
    stages = spec["stages"]
    r0 = stage_res(0, stages)
    params[key] = mi.TensorXf(np.full((r0, r0, r0, truth.shape[3]), spec["init"], np.float32))
    params.update()
    opt = mi.ad.Adam(lr=spec["lr"], beta_1=spec["beta1"], beta_2=spec["beta2"], epsilon=spec["eps"])
    opt[key] = params[key]
    params.update(opt)
    rmse_start = grid_rmse(np.array(params[key]), truth)

    def holdout():
        return {v: float(np.sqrt(((render(v, max(spec["spp"], 16), driver_seed(spec["seed"], 10 ** 6 + 1, v, 0))
                                    - hold_t[v]) ** 2).mean())) for v in spec["holdout"]}
    hold_start = holdout()
    nv = len(spec["views"])
    rows = []
    t_start = time.perf_counter()
    setup = t_start - t_proc
    for it in range(spec["iters"]):
        r = stage_res(it, stages)
        cur = opt[key]
        if tuple(cur.shape[:3]) != (r, r, r):
            # coarse-to-fine as the driver: value, m and v resampled, Adam's step count kept
            # (assigning a new shape resets Dr.Jit's state: it is put back resampled)
            value, promoted, lr, (t, m, v, vmax) = opt.state[key]
            shape = tuple(cur.shape)
            new = resample_grid(np.array(cur), r)
            m2 = resample_grid(np.array(m).reshape(shape), r).ravel()
            v2 = resample_grid(np.array(v).reshape(shape), r).ravel()
            opt[key] = mi.TensorXf(new)
            value, promoted, lr, (_, m0, v0, _) = opt.state[key]
            opt.state[key] = (value, promoted, lr, (t, type(m0)(m2), type(v0)(v2), vmax))
            params.update(opt)
        spp = spp_at(it, spec["spp"], spec["double_every"], spec["spp_max"])
        spp_g = spp_at(it, spec["spp_grad"], spec["double_every"], spec["spp_max"])
        loss = 0.0
        for v in spec["views"]:
            img = mi.render(scene, params, sensor=sensors[v], spp=spp, spp_grad=spp_g,
                            seed=driver_seed(spec["seed"], it, v, 0), seed_grad=driver_seed(spec["seed"], it, v, 1))
            lv = dr.mean(dr.square(img - targets[v]), axis=None) / nv
            dr.backward(lv)
            loss += float(np.array(dr.detach(lv)).ravel()[0])
        opt.step()
        opt[key] = dr.maximum(opt[key], 0.0)   # the model's bounds [0, inf), as tirender's driver projects
        params.update(opt)
        cur = np.array(params[key])            # waits for the step
        add_row(rows, spec["iters"], it, loss, time.perf_counter() - t_start, spp, grid_rmse(cur, truth))
    hold_end = holdout()
    peak = _rss_mb()
    np.save(os.path.join(out, "density.npy"), np.array(params[key]))
    params[key] = mi.TensorXf(truth)   # the loss's noise floor (as in the tirender child)
    params.update()
    floor = float(np.mean([((render(v, rows[-1]["spp"], driver_seed(7, 0, v, 0)) - np.array(targets[v])) ** 2).mean()
                           for v in spec["views"]]))
    write_rows(os.path.join(out, "loss.csv"), rows)
    hv = str(spec["holdout"][0])
    return dict(rows=rows, rmse_start=rmse_start, holdout_start=hold_start[int(hv)], holdout_end=hold_end[int(hv)],
                setup_s=setup, loss_floor=floor, peak_rss_mb=peak, renderer=f"Mitsuba {mi.__version__} (llvm_ad_rgb)")


# -- texture and cbox tasks: one tirender child (the driver on the config) and one Mitsuba child --------
TEXTURE_CONFIG = os.path.join(ROOT, "configs", "texture_recovery.yaml")
CBOX_CONFIG = os.path.join(ROOT, "configs", "cbox_red_wall.yaml")
CBOX_XML = os.path.join(ROOT, "tests", "data", "cbox.xml")   # the XML twin of configs/cbox.yaml


def resample_texture(tex, h, w):
    """tirender.textures.resample_texture without Taichi: bilinear, texel centres aligned."""
    tex = np.asarray(tex, np.float64)
    H, W, C = tex.shape
    if (H, W) == (h, w):
        return tex.astype(np.float32)
    ys = (np.arange(h) + 0.5) * H / h - 0.5
    xs = (np.arange(w) + 0.5) * W / w - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, H - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, W - 1)
    y1, x1 = np.clip(y0 + 1, 0, H - 1), np.clip(x0 + 1, 0, W - 1)
    fy = np.clip(ys - np.floor(ys), 0, 1)[:, None, None]
    fx = np.clip(xs - np.floor(xs), 0, 1)[None, :, None]
    a, b, c, d = tex[y0][:, x0], tex[y0][:, x1], tex[y1][:, x0], tex[y1][:, x1]
    return ((1 - fy) * ((1 - fx) * a + fx * b) + fy * ((1 - fx) * c + fx * d)).astype(np.float32)


def from_srgb(x):
    """tirender.io.images.from_srgb (IEC 61966-2-1) without Taichi."""
    x = np.maximum(np.asarray(x, np.float32), 0)
    return np.where(x <= 0.04045, x / 12.92, np.power((x + 0.055) / 1.055, 2.4)).astype(np.float32)


def param_rmse(cur, truth):
    """The driver's param_rmse: cur resampled to the truth's shape (grids, textures), RMS difference."""
    cur = np.asarray(cur, np.float64)
    truth = np.asarray(truth, np.float64)
    if cur.shape != truth.shape:
        cur = resample_grid(cur, truth.shape[:3]) if truth.ndim == 4 else resample_texture(cur, *truth.shape[:2])
    return float(np.sqrt(((cur - truth) ** 2).mean()))


def _common_spec(path, iters):
    """What every task reads from its config: the optimised parameter, schedule and optimiser."""
    import yaml
    with open(path) as fh:
        cfg = yaml.safe_load(fh)
    op = cfg["optimize"]
    (pname, popt), = op["params"].items()
    assert op["loss"] == "l2" and op.get("optimizer", {}).get("type", "adam") == "adam"
    assert op.get("method", "prb") == "prb" and "spp_schedule" not in op
    full = int(op["iters"])
    iters = full if iters is None else int(iters)
    stages = [[0, None]]
    if op.get("multires"):
        (mr, st), = op["multires"].items()
        assert mr == pname
        stages = [[int(round(s * iters / full)), int(r)] for s, r in st]
    o = op.get("optimizer", {})
    return cfg, dict(config=path, iters=iters, full_iters=full, stages=stages, param=pname,
                     init=popt["init"], lr=float(popt["lr"]), beta1=float(o.get("beta1", 0.9)),
                     beta2=float(o.get("beta2", 0.999)), spp=int(op["spp"]), spp_grad=int(op.get("spp_grad", op["spp"])),
                     double_every=None, spp_max=None, views=[0], holdout=[],
                     target_spp=int(op["target"]["spp"]), target_seed=int(op["target"]["seed"]),
                     seed=int(op.get("seed", 0)))


def texture_spec(iters=None):
    """configs/texture_recovery.yaml: a 256^2 diffuse texture from one 128^2 view (area light,
    path max_depth 3), 32^2 -> 64^2 -> 128^2 -> 256^2."""
    cfg, s = _common_spec(TEXTURE_CONFIG, iters)
    sc = cfg["scene"]
    cam, = sc["sensors"]
    la, f = cam["to_world"]["look_at"], cam["film"]
    canvas, light = sc["shapes"]
    (lscale, llook) = light["to_world"]
    refl = sc["bsdfs"]["canvas"]["reflectance"]
    assert s["param"] == "canvas.reflectance" and canvas["type"] == light["type"] == "rectangle"
    assert "to_world" not in canvas and refl["type"] == "bitmap" and f["filter"]["type"] == "gaussian"
    s.update(kind="texture", dims="^2", max_depth=int(sc["integrator"]["max_depth"]), fov=float(cam["fov"]),
             fov_axis=cam["fov_axis"], origin=la["origin"], target=la["target"], up=la["up"], width=int(f["width"]),
             height=int(f["height"]), stddev=float(f["filter"]["stddev"]), wrap=refl.get("wrap", "repeat"),
             texture=os.path.join(ROOT, "configs", refl["filename"]), light_scale=float(lscale["scale"]),
             light_look_at=llook["look_at"], radiance=[float(x) for x in light["emitter"]["radiance"]])
    return s


def cbox_spec(iters=None):
    """configs/cbox_red_wall.yaml: the Cornell box's red wall colour (RGB) from one 128^2 view
    (Mitsuba: its XML twin tests/data/cbox.xml at res 128)."""
    cfg, s = _common_spec(CBOX_CONFIG, iters)
    assert s["param"] == "red.reflectance"
    res = {x.split("=")[0]: int(x.split("=")[1]) for x in cfg["scene"]["set"]}
    s.update(kind="cbox", dims="", xml=CBOX_XML, res=res["sensors.0.film.width"], max_depth=6, rr_depth=5)
    return s


def tirender_task(spec, out):
    """Child: tirender's own driver on the task's config (iterations, multires and the spp schedule
    scaled), then the loss's noise floor: the truth rendered at the last iteration's spp against the
    targets."""
    t_proc = time.perf_counter()
    import tirender
    tirender.init(sidebyside.BENCH_ARCH)
    from tirender.api import render
    from tirender.config import load_config
    from tirender.optim.driver import OptimizationRun
    from tirender.optim.losses import l2
    cfg = load_config(spec["config"])
    o = cfg["optimize"]
    o["iters"] = spec["iters"]
    o["seed"] = spec["seed"]
    o["params"][spec["param"]]["lr"] = spec["lr"]         # the spec's (a sweep may scale the config's)
    o["spp"], o["spp_grad"] = spec["spp"], spec["spp_grad"]
    o["optimizer"] = dict(o.get("optimizer") or {}, beta1=spec["beta1"], beta2=spec["beta2"], **spec.get("optimizer", {}))
    if spec["stages"][0][1] is not None:
        o["multires"] = {spec["param"]: spec["stages"]}
    else:
        o.pop("multires", None)
    if spec["double_every"]:
        o["spp_schedule"] = {"double_every": spec["double_every"], "max": spec["spp_max"]}
    o["save_every"] = spec["iters"]   # renders + checkpoint once, at the end (not timed work of the task)
    stamps = []
    run = OptimizationRun(cfg, out=out)
    m = run.run(callback=lambda it, loss, imgs: stamps.append(time.perf_counter()))
    rows = read_rows(os.path.join(out, "loss.csv"))
    sc, name = run.scene, spec["param"]
    truth = run.truth[name]
    if sc.params.info(name).shape != truth.shape:
        if truth.ndim == 4:
            sc.resize_grid(name, truth.shape[:3])
        else:
            sc.resize_texture(name, *truth.shape[:2])
    sc.params[name] = truth
    floor = float(np.mean([l2(render(sc, spp=rows[-1]["spp"], seed=driver_seed(7, 0, v, 0), sensor=v, progress=False),
                              np.load(os.path.join(out, f"target_view{v}.npy")))[0] for v in spec["views"]]))
    h = m["holdout"][str(spec["holdout"][0])] if spec["holdout"] else {"rmse_start": None, "rmse_end": None}
    setup = (stamps[0] - rows[0]["seconds"]) - t_proc if stamps else float("nan")
    return dict(rows=rows, rmse_start=m["params"][name]["rmse_start"], holdout_start=h["rmse_start"],
                holdout_end=h["rmse_end"], setup_s=setup, loss_floor=floor, peak_rss_mb=_rss_mb(),
                renderer=f"tirender ({tirender.current_arch()})")


def mitsuba_texture_scene(spec):
    """The texture task in Mitsuba 3: (mi, dr, scene, integrator, sensors, params, key, truth, shape of a stage)."""
    import imageio.v3 as iio
    import mitsuba as mi
    mi.set_variant(sidebyside.MI_VARIANT)
    import drjit as dr
    T = mi.ScalarTransform4f
    truth = from_srgb(iio.imread(spec["texture"])[..., :3].astype(np.float32) / 255.0)   # tirender's decoding
    la = spec["light_look_at"]
    d = {"type": "scene",
         "sensor": {"type": "perspective", "fov": spec["fov"], "fov_axis": spec["fov_axis"],
                    "to_world": T().look_at(origin=spec["origin"], target=spec["target"], up=spec["up"]),
                    "film": {"type": "hdrfilm", "width": spec["width"], "height": spec["height"], "pixel_format": "rgb",
                             "rfilter": {"type": "gaussian", "stddev": spec["stddev"]}},
                    "sampler": {"type": "independent", "sample_count": spec["spp"]}},
         "canvas": {"type": "rectangle",
                    "bsdf": {"type": "diffuse", "reflectance": {"type": "bitmap", "bitmap": mi.Bitmap(truth), "raw": True,
                                                                "wrap_mode": spec["wrap"]}}},
         "light": {"type": "rectangle",
                   "to_world": T().look_at(origin=la["origin"], target=la["target"], up=la["up"]) @ T().scale(spec["light_scale"]),
                   "emitter": {"type": "area", "radiance": {"type": "rgb", "value": spec["radiance"]}}}}
    scene = mi.load_dict(d)
    integ = mi.load_dict({"type": "prb", "max_depth": spec["max_depth"]})
    return mi, dr, scene, integ, scene.sensors(), mi.traverse(scene), "canvas.bsdf.reflectance.data", truth, \
        lambda r: (r, r, truth.shape[2])


def mitsuba_cbox_scene(spec):
    """The cbox task in Mitsuba 3 (tests/data/cbox.xml at the config's resolution)."""
    import mitsuba as mi
    mi.set_variant(sidebyside.MI_VARIANT)
    import drjit as dr
    scene = mi.load_file(spec["xml"], res=spec["res"], spp=spec["spp"])
    integ = mi.load_dict({"type": "prb", "max_depth": spec["max_depth"], "rr_depth": spec["rr_depth"]})
    params = mi.traverse(scene)
    key = "red.reflectance.value"
    truth = np.array(params[key], np.float32).ravel()
    return mi, dr, scene, integ, scene.sensors(), params, key, truth, None


def mitsuba_task(spec, out):
    """Child: the driver's loop ported to Mitsuba 3 (llvm_ad_rgb): mi.render(spp, spp_grad) per view,
    L2, dr.backward, mi.ad.Adam (Dr.Jit's own defaults), parameters clipped to the model's [0, 1];
    coarse-to-fine as the driver (value, m and v resampled bilinearly, Adam's step count kept)."""
    t_proc = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    mi, dr, scene, integ, sensors, params, key, truth, stage_shape = \
        (mitsuba_texture_scene if spec["kind"] == "texture" else mitsuba_cbox_scene)(spec)

    def render(v, spp, seed):
        return np.array(mi.render(scene, sensor=sensors[v], integrator=integ, spp=spp, seed=seed))[..., :3]
    targets = {v: mi.TensorXf(render(v, spec["target_spp"], spec["target_seed"] + v)) for v in spec["views"]}
    for v, img in targets.items():
        np.save(os.path.join(out, f"target_view{v}.npy"), np.array(img))
    stages = spec["stages"]
    init = np.asarray(spec["init"], np.float32)
    if stage_shape:
        params[key] = mi.TensorXf(np.broadcast_to(init, stage_shape(stage_res(0, stages) or truth.shape[0])).copy())
    else:
        params[key] = type(params[key])(*np.broadcast_to(init, truth.shape).tolist())
    params.update()
    opt = mi.ad.Adam(lr=spec["lr"], beta_1=spec["beta1"], beta_2=spec["beta2"])
    opt[key] = params[key]
    params.update(opt)

    def value():
        return np.array(params[key], np.float32).reshape(truth.shape if not stage_shape else np.array(params[key]).shape)
    rmse_start = param_rmse(value(), truth)
    nv = len(spec["views"])
    rows = []
    t_start = time.perf_counter()
    for it in range(spec["iters"]):
        if stage_shape:
            r = stage_res(it, stages) or truth.shape[0]   # no multires: the truth's resolution
            cur = opt[key]
            if tuple(cur.shape[:2]) != (r, r):
                _, promoted, lr, (t, m, v, vmax) = opt.state[key]
                shape = tuple(cur.shape)
                new = resample_texture(np.array(cur), r, r)
                m2 = resample_texture(np.array(m).reshape(shape), r, r).ravel()
                v2 = resample_texture(np.array(v).reshape(shape), r, r).ravel()
                opt[key] = mi.TensorXf(new)
                value_, promoted, lr, (_, m0, v0, _) = opt.state[key]
                opt.state[key] = (value_, promoted, lr, (t, type(m0)(m2), type(v0)(v2), vmax))
                params.update(opt)
        spp, spp_g = spec["spp"], spec["spp_grad"]
        loss = 0.0
        for v in spec["views"]:
            img = mi.render(scene, params, sensor=sensors[v], integrator=integ, spp=spp, spp_grad=spp_g,
                            seed=driver_seed(spec["seed"], it, v, 0), seed_grad=driver_seed(spec["seed"], it, v, 1))
            lv = dr.mean(dr.square(img - targets[v]), axis=None) / nv
            dr.backward(lv)
            loss += float(np.array(dr.detach(lv)).ravel()[0])
        opt.step()
        opt[key] = dr.clip(opt[key], 0.0, 1.0)    # the model's bounds, as tirender's driver projects
        params.update(opt)
        cur = value()                             # waits for the step
        add_row(rows, spec["iters"], it, loss, time.perf_counter() - t_start, spp, param_rmse(cur, truth))
    peak = _rss_mb()
    np.save(os.path.join(out, "param.npy"), value())
    if stage_shape:
        params[key] = mi.TensorXf(truth)
    else:
        params[key] = type(params[key])(*truth.tolist())
    params.update()
    floor = float(np.mean([((render(v, rows[-1]["spp"], driver_seed(7, 0, v, 0)) - np.array(targets[v])) ** 2).mean()
                           for v in spec["views"]]))
    write_rows(os.path.join(out, "loss.csv"), rows)
    return dict(rows=rows, rmse_start=rmse_start, holdout_start=None, holdout_end=None, setup_s=t_start - t_proc,
                loss_floor=floor, peak_rss_mb=peak, renderer=f"Mitsuba {mi.__version__} (llvm_ad_rgb)")


# -- radiance_field task: a data child, then tirender's trainer and a Mitsuba 3 port on its data ----
RF_CONFIG = os.path.join(ROOT, "configs", "radiance_field.yaml")
RF_EVAL_EVERY = 10          # held-out image RMSE every N iterations (and at every stage end)
RF_ADAM_PRIOR_STEPS = 10    # tirender.radiance_field.train.Trainer.ADAM_PRIOR_STEPS
RF_SH_C0 = 0.28209479177387814
RF_TRAIN_OVERRIDES = {"batch": "view", "view_order": "sequential", "eval_every": 0, "checkpoint_every": 0,
                      "save_pngs": False}


def rf_scale_schedule(stages, iters):
    """tirender.radiance_field.train.scale_schedule: `iters` iterations spread over the stages in
    proportion to their counts (None: as they are)."""
    out = [dict(s) for s in stages]
    if iters is None:
        return out
    tot, acc = sum(s["iters"] for s in stages), 0
    for i, s in enumerate(out):
        n = int(iters) - acc if i == len(out) - 1 else int(round(int(iters) * s["iters"] / tot))
        s["iters"] = max(0, n)
        acc += s["iters"]
    return out


def rf_resample_module():
    """tirender/radiance_field/resample.py loaded by path (numpy only: the Mitsuba child imports
    neither tirender nor Taichi): resample_field_params and carry_adam_moments, the stage change's
    grid and Adam-state rules, shared by both children."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "tirender_rf_resample", os.path.join(ROOT, "tirender", "radiance_field", "resample.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rf_image_rmse(imgs, refs):
    """Held-out image error: RMS over views, pixels and channels of the renders clipped to [0, 1]
    (as tirender's PSNR clips) against the reference images."""
    d = np.clip(np.asarray(imgs, np.float64), 0.0, 1.0) - np.asarray(refs, np.float64)
    return float(np.sqrt((d * d).mean()))


def radiance_field_spec(iters=None, rf=None, eval_train=False, mitsuba_stage_change="tirender"):
    """configs/radiance_field.yaml's radiance_field section with RF_TRAIN_OVERRIDES (one full view
    per iteration, views in order) and its stages scaled to `iters` as `tirender optimize --iters`
    scales them. rf: another radiance_field section instead (benchmarks/defaults_sweep.py's cells;
    taken as it is, stages scaled to `iters` when given). eval_train: also the mean training-view
    PSNR at each evaluation (row key train_psnr). mitsuba_stage_change: "tirender" (the Mitsuba child
    upsamples as tirender's train.upsample / train.adam_state) or "tutorial" (as Mitsuba's
    radiance-field tutorial: dr.upsample of the grids, whose new shape resets mi.ad.Adam's state)."""
    import yaml
    from_config = rf is None
    if from_config:
        with open(RF_CONFIG) as fh:
            rf = yaml.safe_load(fh)["radiance_field"]
        rf["train"] = dict(rf["train"], **RF_TRAIN_OVERRIDES)
    rf = json.loads(json.dumps(rf))
    stages = rf_scale_schedule(rf["train"]["stages"], iters)
    rf["train"]["stages"] = stages
    starts = np.cumsum([0] + [s["iters"] for s in stages])[:-1]
    return dict(kind="radiance_field", dims="^3", data_child="tirender_rf_data", config=RF_CONFIG, rf=rf,
                from_config=from_config, iters=int(sum(s["iters"] for s in stages)),
                stages=[[int(a), int(s["res"])] for a, s in zip(starts, stages)], eval_every=RF_EVAL_EVERY,
                eval_train=bool(eval_train), mitsuba_stage_change=mitsuba_stage_change)


def tirender_rf_data(spec, out):
    """Child (not timed): the task's data, written once for both renderers: the normalised config
    (cfg.json), the procedural dataset's images (images.npy, all views), cameras (cameras.json:
    origin, target, up, fov, resolution and the camera-to-world matrix per view; training and
    held-out view indices) and the ground-truth field padded to the model's SH degree (truth.npy)."""
    import tirender
    tirender.init(sidebyside.BENCH_ARCH)
    from tirender.radiance_field.dataset import procedural_params
    from tirender.radiance_field.field import channels
    from tirender.radiance_field.train import load_dataset, parse_config, scale_schedule
    import yaml
    os.makedirs(out, exist_ok=True)
    with open(RF_CONFIG) as fh:
        full = parse_config(yaml.safe_load(fh), RF_CONFIG)
    cfg = parse_config({"radiance_field": spec["rf"]}, RF_CONFIG)
    if spec.get("from_config", True):
        assert cfg["train"]["stages"] == scale_schedule(full["train"]["stages"], spec["iters"])
    assert cfg["dataset"]["type"] == "procedural"
    ds, fl = load_dataset(cfg, RF_CONFIG), cfg["field"]
    cams = []
    for c2w, fov in zip(ds.c2w, ds.fov_x):
        o = c2w[:3, 3]
        cams.append(dict(origin=o.tolist(), target=(o + c2w[:3, 2]).tolist(), up=c2w[:3, 1].tolist(), fov=float(fov),
                         width=ds.width, height=ds.height, c2w=c2w.tolist()))
    with open(os.path.join(out, "cameras.json"), "w") as fh:
        json.dump(dict(cameras=cams, train=ds.train.tolist(), heldout=ds.heldout.tolist(),
                       background=np.asarray(ds.background, float).tolist()), fh)
    with open(os.path.join(out, "cfg.json"), "w") as fh:
        json.dump(cfg, fh)
    np.save(os.path.join(out, "images.npy"), ds.images.astype(np.float32))
    gt = procedural_params(int(cfg["dataset"]["gt_res"]), 1, fl["bbox_min"], fl["bbox_max"])
    truth = np.zeros(gt.shape[:3] + (channels(fl["sh_degree"]),), np.float32)
    n = min(gt.shape[3], truth.shape[3])
    truth[..., :n] = gt[..., :n]
    np.save(os.path.join(out, "truth.npy"), truth)
    return dict(views=len(cams))


def rf_load_data(out, spec=None):
    """The data child's files (from <task>/data beside the child's own out dir): (cfg, images,
    cameras dict, truth). A spec with its own radiance_field section (not from_config: the sweep's
    cells share one dataset) overrides the data's field and train settings with its own."""
    data = os.path.join(os.path.dirname(out), "data")
    with open(os.path.join(data, "cfg.json")) as fh:
        cfg = json.load(fh)
    if spec is not None and not spec.get("from_config", True):
        for sec in ("field", "train"):
            cfg[sec].update(json.loads(json.dumps(spec["rf"].get(sec, {}))))
        cfg["train"]["stages"] = [dict({"lr_scale": 1.0}, **st) for st in cfg["train"]["stages"]]
    with open(os.path.join(data, "cameras.json")) as fh:
        cams = json.load(fh)
    return cfg, np.load(os.path.join(data, "images.npy")), cams, np.load(os.path.join(data, "truth.npy"))


def rf_loop(spec, stages, enter_stage, step, heldout, err, train_psnr=None):
    """The training loop of both radiance-field children (Trainer.run's, checkpoints left out):
    per stage enter_stage(si) (a stage change's upsampling is timed, as Trainer.run times it), then
    step(global iteration) -> image loss; the held-out RMSE every spec["eval_every"] iterations and
    at each stage end with the clock paused, carried forward in the rows in between (from `err`,
    the start's). With spec["eval_train"], train_psnr() (the mean training-view PSNR) too, at the
    same points, at every iteration of the first spec["eval_after_change"] (default 8) of a stage
    after the first and of the last spec["eval_last"] (default 0) of the run, and right after each
    upsampling (before any step). Returns (rows, changes): changes per stage change {iteration,
    from_res, to_res, train_psnr_before, train_psnr_after}."""
    rows, changes, clock, g = [], [], 0.0, 0
    tp = train_psnr() if spec.get("eval_train") else None
    dense, last = int(spec.get("eval_after_change", 8)), spec["iters"] - int(spec.get("eval_last", 0))
    for si, st in enumerate(stages):
        t0 = time.perf_counter()
        if si:
            enter_stage(si)
            clock += time.perf_counter() - t0
            if tp is not None:
                after = train_psnr()
                changes.append(dict(iteration=g, from_res=int(stages[si - 1]["res"]), to_res=int(st["res"]),
                                    train_psnr_before=tp, train_psnr_after=after))
                tp = after
        for it in range(st["iters"]):
            t0 = time.perf_counter()
            loss = step(g)
            clock += time.perf_counter() - t0
            g += 1
            if g % spec["eval_every"] == 0 or it + 1 == st["iters"]:
                err = heldout()
            if tp is not None and (g % spec["eval_every"] == 0 or it + 1 == st["iters"] or (si and it < dense)
                                   or g > last):
                tp = train_psnr()
            rows.append(dict(iteration=g - 1, loss=loss, seconds=clock, spp=1, param_rmse=err))
            if tp is not None:
                rows[-1]["train_psnr"] = tp
            if g % 50 == 0 or g == spec["iters"]:
                print(f"it {g}/{spec['iters']} {st['res']}^3 {clock:.1f} s loss {loss:.4g} held-out RMSE {err:.4f} "
                      f"({-20 * np.log10(err):.2f} dB)" + (f" training PSNR {tp:.2f} dB" if tp is not None else ""),
                      file=sys.stderr, flush=True)
    return rows, changes


def rf_train_psnr(imgs, refs):
    """Mean PSNR over views of the renders clipped to [0, 1] (tirender.radiance_field.train.psnr)."""
    out = []
    for im, ref in zip(imgs, refs):
        mse = float(np.mean((np.clip(np.asarray(im, np.float64), 0, 1) - np.asarray(ref, np.float64)) ** 2))
        out.append(100.0 if mse <= 1e-10 else -10.0 * np.log10(mse))
    return float(np.mean(out))


def rf_result(rows, changes, rmse_start, setup_s, floor, peak, renderer):
    """A radiance-field child's result (the held-out RMSE is the task's error column; its PSNR too;
    with eval_train the stage changes' training PSNR, see rf_loop)."""
    return dict(rows=rows, changes=changes, rmse_start=rmse_start, holdout_start=None, holdout_end=None,
                setup_s=setup_s, loss_floor=floor, peak_rss_mb=peak, renderer=renderer,
                psnr_start=-20 * np.log10(rmse_start), psnr_end=-20 * np.log10(rows[-1]["param_rmse"]))


def tirender_radiance_field(spec, out):
    """Child: tirender's radiance-field Trainer (prepare, enter_stage, step as Trainer.run) on the
    data child's dataset."""
    t_proc = time.perf_counter()
    import tirender
    tirender.init(sidebyside.BENCH_ARCH)
    from tirender.radiance_field.dataset import Dataset, render_field_views
    from tirender.radiance_field.field import RadianceField
    from tirender.radiance_field.train import Trainer, parse_config
    cfg, images, cams, truth = rf_load_data(out, spec)
    cfg = parse_config({"radiance_field": cfg})   # the spec's settings, validated
    c = cams["cameras"]
    ds = Dataset(images, np.array([x["c2w"] for x in c]), np.array([x["fov"] for x in c]), np.array(cams["train"]),
                 np.array(cams["heldout"]), linear=False, background=np.array(cams["background"]), name="procedural")
    tr = Trainer(cfg, ds, log=lambda *_: None)
    tr.prepare()
    tr.enter_stage(0)

    def heldout():
        return rf_image_rmse(tr.render_views(ds.heldout), ds.images[ds.heldout])
    rmse_start = heldout()
    t_start = time.perf_counter()
    rows, changes = rf_loop(spec, tr.stages, tr.enter_stage, tr.step, heldout, rmse_start,
                            lambda: rf_train_psnr(tr.render_views(ds.train), ds.images[ds.train]))
    peak = _rss_mb()
    write_rows(os.path.join(out, "loss.csv"), rows)
    np.save(os.path.join(out, "field.npy"), tr.field.to_numpy())
    # the loss's floor: the truth rendered by the model (in the trainer's field when it fits: a schedule
    # that ends below the truth's resolution gets a field of its own)
    if truth.shape[0] ** 3 * truth.shape[3] <= tr.field.capacity:
        tr.field.set_resolution(truth.shape[0])
        tr.field.from_numpy(truth)
        gt = tr.field
    else:
        gt = RadianceField(params=truth, **dict(tr.field.meta(), res=truth.shape[0]))
    floor = float(np.mean((render_field_views(gt, ds.c2w[ds.train], ds.fov_x[ds.train], ds.width, ds.height,
                                              spp=tr.cfg["train"]["eval_spp"],
                                              seed=12345).astype(np.float64) - ds.images[ds.train]) ** 2))
    return rf_result(rows, changes, rmse_start, t_start - t_proc, floor, peak, f"tirender ({tirender.current_arch()})")


def mitsuba_rf_integrator(mi, dr):
    """The Mitsuba 3 radiance-field integrator class: Mitsuba's tutorial RadianceFieldPRB
    (mi.Texture3f grids of density and SH coefficients, a symbolic ray-marching loop whose adjoint
    replays the march backward, PRB style) with tirender's model: box [bbox_min, bbox_max], points
    t_near + (i + j) delta with one jitter j per ray and delta = step * max extent / R, tirender's
    density (relu, softplus) and colour activations (none, relu, sigmoid; color_clip), early
    termination once T < t_min, background added with the final transmittance, pixel-centre rays."""
    class RadianceFieldPRB(mi.ad.integrators.common.RBIntegrator):
        def __init__(self, field, background, init):
            super().__init__(mi.Properties())
            self.bmin = mi.ScalarPoint3f(field["bbox_min"])
            self.size = mi.ScalarVector3f(np.subtract(field["bbox_max"], field["bbox_min"]).tolist())
            self.bbox = mi.ScalarBoundingBox3f(field["bbox_min"], field["bbox_max"])
            self.extent = float(np.max(np.subtract(field["bbox_max"], field["bbox_min"])))
            self.step, self.t_min, self.degree = float(field["step"]), float(field["t_min"]), int(field["sh_degree"])
            self.background = mi.ScalarColor3f(background)
            self.dact, self.cact = field["density_activation"], field["color_activation"]
            self.clip = bool(field["color_clip"])
            self.density = mi.Texture3f(mi.TensorXf(init[..., :1]))
            self.sh = mi.Texture3f(mi.TensorXf(init[..., 1:]))
            self.res = init.shape[0]

        def sample_rays(self, scene, sensor, sampler):
            """One ray through each pixel's centre (tirender's training and evaluation rays)."""
            film = sensor.film()
            size = film.crop_size()
            assert not film.sample_border() and film.rfilter().is_box_filter()
            idx = dr.arange(mi.UInt32, dr.prod(size) * sampler.sample_count()) // sampler.sample_count()
            pos = mi.Vector2f(mi.Vector2u(idx % size[0], idx // size[0]))
            with dr.resume_grad():
                ray, weight = sensor.sample_ray_differential(time=sensor.shutter_open(), sample1=0.0,
                                                             sample2=(pos + 0.5) / mi.ScalarVector2f(size),
                                                             sample3=mi.Vector2f(0.5))
            return ray, weight, pos

        def emission(self, p, d, active):
            """Colour act_c(sum_k Y_k(d) coef_k(p)) (none, relu or sigmoid; clamped to [0, 1] with
            color_clip), gathered only where active (sigma > 0)."""
            coef = self.sh.eval(p, active)
            c = mi.Color3f(0.0)
            for k, y in enumerate(dr.sh_eval(d, self.degree)):
                c += y * mi.Color3f(coef[3 * k:3 * k + 3])
            if self.cact == "relu":
                c = dr.maximum(c, 0.0)
            elif self.cact == "sigmoid":
                c = 1.0 / (1.0 + dr.exp(-c))
            return dr.clip(c, 0.0, 1.0) if self.clip else c

        def sigma(self, p):
            """Density act(s) of the raw grid value: relu, or softplus max(s, 0) + log(1 + e^-|s|)."""
            s = self.density.eval(p)[0]
            if self.dact == "relu":
                return dr.maximum(s, 0.0)
            return dr.maximum(s, 0.0) + dr.log(1.0 + dr.exp(-dr.abs(s)))

        def sample(self, mode, scene, sampler, ray, δL, state_in, active, **kwargs):
            primal = mode == dr.ADMode.Primal
            ray = mi.Ray3f(ray)
            hit, mint, maxt = self.bbox.ray_intersect(ray)
            delta = self.step * self.extent / self.res
            t0 = dr.maximum(mint, 0.0)
            j = sampler.next_1d(active)
            active = mi.Bool(active) & hit & (t0 + j * delta < maxt)
            if not primal:
                active &= dr.any(δL != 0)
            δL = mi.Spectrum(δL if δL is not None else 0)

            def march(L, T, i, active):
                """One point: L accumulates (primal) or is the radiance still to come (adjoint:
                the point's contribution is removed and its gradients are back-propagated)."""
                p = mi.Point3f((ray(t0 + (i + j) * delta) - self.bmin) / self.size)
                with dr.resume_grad(when=not primal):
                    sigma = self.sigma(p)
                    tr = dr.exp(-sigma * delta)
                    Le = T * (1.0 - tr) * self.emission(p, ray.d, sigma > 0.0)
                T = T * tr
                L = L + Le if primal else L - Le
                if not primal:
                    with dr.resume_grad():
                        dr.backward_from(δL * (L * tr / dr.detach(tr) + Le))
                i = i + 1.0
                return L, T, i, active & (T >= self.t_min) & (t0 + (i + j) * delta < maxt)
            L, T, _, _ = dr.while_loop(state=(mi.Spectrum(0.0 if primal else state_in), mi.Float(1.0), mi.Float(0.0),
                                              active),
                                       cond=lambda L, T, i, active: active, body=march)
            if primal:
                L += T * self.background
            return L if primal else δL, mi.Bool(True), [], L

        def traverse(self, cb):
            cb.put("density", self.density.tensor(), mi.ParamFlags.Differentiable)
            cb.put("sh", self.sh.tensor(), mi.ParamFlags.Differentiable)

        def parameters_changed(self, keys):
            self.density.update_inplace()
            self.sh.update_inplace()
            self.res = self.density.shape[0]

    return RadianceFieldPRB


def mitsuba_radiance_field(spec, out):
    """Child: the reconstruction ported to Mitsuba 3 (llvm_ad_rgb) on the data child's images and
    cameras: mi.render of one training view per iteration (in order) through RadianceFieldPRB,
    the config's loss (L2 or L1, mean over pixels and channels) + the same TV terms, dr.backward,
    mi.ad.Adam (Dr.Jit's ε, density and SH learning rates per stage). Stage changes
    (spec["mitsuba_stage_change"]): "tirender" as tirender's Trainer (train.upsample, with
    train.adam_state: carry the moments carried by tirender's own resample.carry_adam_moments, loaded
    by path) or "tutorial" as Mitsuba's radiance-field tutorial (dr.upsample of each grid tensor;
    assigning the new shape resets mi.ad.Adam's state)."""
    t_proc = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    import mitsuba as mi
    mi.set_variant(sidebyside.MI_VARIANT)
    import drjit as dr
    rs = rf_resample_module()
    cfg, images, cams, truth = rf_load_data(out, spec)
    fl, tr = cfg["field"], cfg["train"]
    mode = spec.get("mitsuba_stage_change", "tirender")
    assert tr["loss"] in ("l1", "l2") and tr["batch"] == "view" and tr["view_order"] == "sequential"
    assert tr["lr_decay"] == 1.0 and tr["l1_density"] == 0 and not tr["pixel_jitter"] and mode in ("tirender", "tutorial")
    stages = tr["stages"]
    C = 1 + 3 * (fl["sh_degree"] + 1) ** 2
    r0 = stages[0]["res"]
    init = np.zeros((r0, r0, r0, C), np.float32)
    init[..., 0] = fl["init_density"]
    init[..., 1:4] = fl["init_color"] / RF_SH_C0
    bg = fl["background"] if fl["background"] is not None else cams["background"]
    integ = mitsuba_rf_integrator(mi, dr)(fl, bg, init)
    scene = mi.load_dict({"type": "scene"})
    T = mi.ScalarTransform4f
    sensors = []
    for c in cams["cameras"]:
        s = mi.load_dict({"type": "perspective", "fov": c["fov"], "fov_axis": "x",
                          "to_world": T().look_at(origin=c["origin"], target=c["target"], up=c["up"]),
                          "film": {"type": "hdrfilm", "width": c["width"], "height": c["height"], "pixel_format": "rgb",
                                   "rfilter": {"type": "box"}, "sample_border": False}})
        assert np.allclose(np.array(s.world_transform().matrix, np.float64).reshape(4, 4), c["c2w"], atol=1e-5)
        sensors.append(s)
    train, held = cams["train"], cams["heldout"]
    targets = {v: mi.TensorXf(images[v]) for v in train}
    params = mi.traverse(integ)
    opt = mi.ad.Adam(lr=tr["lr_density"], params={k: params[k] for k in ("density", "sh")})

    def set_lr(si):
        sc = stages[si]["lr_scale"]
        opt.set_learning_rate({"density": tr["lr_density"] * sc, "sh": tr["lr_color"] * sc})
    set_lr(0)
    params.update(opt)

    def render(v, seed):
        return np.array(mi.render(scene, sensor=sensors[v], integrator=integ, spp=1, seed=seed))

    def heldout():
        return rf_image_rmse([render(v, 10 ** 6 + k) for k, v in enumerate(held)], images[held])

    def train_psnr():
        return rf_train_psnr([render(v, 2 * 10 ** 6 + k) for k, v in enumerate(train)], images[train])

    def add_tv_grad(key, weight):
        """Add to the gradient of opt[key] (R, R, R, S) the gradient of tirender's TV, weight / R^3 *
        the sum over voxels, axes and channels of squared forward differences, in gather form (each
        element reads its <= 6 neighbours: one kernel, as tirender's _tv_grad). dr.backward through
        tensor slices gives the same gradient but costs 0.27 s more per iteration at 64^3."""
        x = opt.state[key][0]
        R, S = x.shape[0], x.shape[3]
        e = dr.arange(mi.UInt32, R ** 3 * S)
        v = e // S
        a = dr.detach(x).array
        xa = dr.gather(mi.Float, a, e)
        acc = mi.Float(0.0)
        for c, stride in ((v % R, S), ((v // R) % R, R * S), (v // (R * R), R * R * S)):
            up, down = c < R - 1, c > 0
            acc += dr.select(up, xa - dr.gather(mi.Float, a, e + stride, up), 0.0)
            acc += dr.select(down, xa - dr.gather(mi.Float, a, e - stride, down), 0.0)
        dr.accum_grad(x, mi.TensorXf(acc * (2.0 * weight / R ** 3), x.shape))

    def step(g):
        v = train[g % len(train)]
        img = mi.render(scene, params, sensor=sensors[v], integrator=integ, spp=1, seed=g)
        d = img - targets[v]
        loss = dr.mean(dr.square(d) if tr["loss"] == "l2" else dr.abs(d), axis=None)
        dr.backward(loss)
        for key, weight in (("density", tr["tv_density"]), ("sh", tr["tv_color"])):
            if weight > 0:
                add_tv_grad(key, weight)
        opt.step()
        params.update(opt)
        value = float(loss.array[0])
        dr.sync_thread()
        return value

    def enter_stage(si):
        """Upsample: as tirender's Trainer.enter_stage (the grid by resample_field_params, Adam's
        moments carried by carry_adam_moments or reset) or as Mitsuba's tutorial (dr.upsample, Adam
        reset by the new shape); then the stage's learning rates."""
        res = stages[si]["res"]
        keys, split = ("density", "sh"), (slice(0, 1), slice(1, C))
        if mode == "tutorial":
            for k in keys:
                opt[k] = dr.upsample(opt[k], shape=[res, res, res])
        else:
            grid = np.concatenate([np.array(opt[k]) for k in keys], -1)
            t = int(opt.state["density"][3][0][0])   # Adam's step count (a Dr.Jit UInt32 of width 1)
            m, v = (np.concatenate([np.array(opt.state[k][3][q]).reshape(grid.shape[:3] + (-1,)) for k in keys], -1)
                    for q in (1, 2))
            new = rs.resample_field_params(grid, res, tr["upsample"], fl["density_activation"])
            for k, sl in zip(keys, split):
                opt[k] = mi.TensorXf(np.ascontiguousarray(new[..., sl]))   # a new shape: Adam's state reset
            if t and tr["adam_state"] == "carry":
                m2, v2, t2 = rs.carry_adam_moments(m, v, t, res, opt.beta_1, opt.beta_2, RF_ADAM_PRIOR_STEPS)
                for k, sl in zip(keys, split):
                    value, promoted, lr, (t0, m0, v0, vmax) = opt.state[k]
                    opt.state[k] = (value, promoted, lr, (type(t0)(t2), type(m0)(np.ascontiguousarray(m2[..., sl]).ravel()),
                                                          type(v0)(np.ascontiguousarray(v2[..., sl]).ravel()), vmax))
        set_lr(si)
        params.update(opt)
        dr.eval(opt["density"], opt["sh"])

    rmse_start = heldout()
    t_start = time.perf_counter()
    rows, changes = rf_loop(spec, stages, enter_stage, step, heldout, rmse_start, train_psnr)
    peak = _rss_mb()
    write_rows(os.path.join(out, "loss.csv"), rows)
    np.save(os.path.join(out, "field.npy"), np.concatenate([np.array(opt[k]) for k in ("density", "sh")], -1))
    params["density"], params["sh"] = mi.TensorXf(truth[..., :1]), mi.TensorXf(np.ascontiguousarray(truth[..., 1:]))
    params.update()   # the loss's floor: the truth rendered by the model (as in the tirender child)
    floor = float(np.mean([((render(v, 7 + v).astype(np.float64) - images[v]) ** 2).mean() for v in train]))
    return rf_result(rows, changes, rmse_start, t_start - t_proc, floor, peak,
                     f"Mitsuba {mi.__version__} (llvm_ad_rgb)")


# -- --gradient-check: the density gradient at the start of the volume task, both renderers ----------
GC_SEEDS = 8


def _gc_dy(spec, out):
    """Fixed adjoint images, the same for both renderers: 2 (I0 - T) / N / n_views with I0, T
    tirender's 128-spp renders at the start and of the truth (written by the tirender child)."""
    return np.load(os.path.join(out, "gc_dy.npy"))


def tirender_volume_grad(spec, out):
    """Child: (a) GC_SEEDS independent loss gradients at the start (the driver's first iteration:
    32^3 at init, spp + spp_grad, its own targets); (b) <grad, 1> of the linear functional
    sum_v <dy_v, I_v> (fixed dy) by PRB, mean and SE over seeds."""
    import tirender
    tirender.init(sidebyside.BENCH_ARCH)
    from tirender.api import render, render_grad
    from tirender.optim.losses import l2
    os.makedirs(out, exist_ok=True)
    sc = tirender.load_scene(VOLUME_CONFIG)
    name, r0 = spec["param"], stage_res(0, spec["stages"])
    T = {v: render(sc, spp=spec["target_spp"], seed=spec["target_seed"] + v, sensor=v, progress=False)
         for v in spec["views"]}
    sc.resize_grid(name, (r0,) * 3)
    sc.params[name] = np.full(sc.params[name].shape, spec["init"], np.float32)
    nv = len(spec["views"])
    dy = np.stack([2.0 * (render(sc, spp=spec["target_spp"], seed=5000 + v, sensor=v, progress=False) - T[v])
                   / T[v].size / nv for v in spec["views"]]).astype(np.float32)
    np.save(os.path.join(out, "gc_dy.npy"), dy)
    G, S = [], []
    for k in range(GC_SEEDS):
        g = 0.0
        for v in spec["views"]:
            img = render(sc, spp=spec["spp"], seed=driver_seed(100 + k, 0, v, 0), sensor=v, progress=False)
            g = g + render_grad(sc, l2(img, T[v])[1] / nv, spp=spec["spp_grad"], seed=driver_seed(100 + k, 0, v, 1),
                                sensor=v, progress=False)[name].astype(np.float64)
        G.append(g.ravel())
        S.append(sum(float(render_grad(sc, dy[i], spp=32, seed=driver_seed(300 + k, 0, v, 1), sensor=v,
                                       progress=False)[name].astype(np.float64).sum())
                     for i, v in enumerate(spec["views"])))
    np.save(os.path.join(out, "gc_grads.npy"), np.array(G))
    return dict(prb_sum=S)


def mitsuba_volume_grad(spec, out):
    """Child: as tirender_volume_grad in Mitsuba 3, plus a central finite difference of the linear
    functional along all-ones (1024 spp, h = init / 5, two independent pairs)."""
    mi, dr, scene, sensors, params, key, truth = mitsuba_volume_scene(spec, out)
    r0, nv = stage_res(0, spec["stages"]), len(spec["views"])
    T = {v: mi.TensorXf(np.array(mi.render(scene, sensor=sensors[v], spp=spec["target_spp"],
                                           seed=spec["target_seed"] + v))[..., :3]) for v in spec["views"]}
    dy = _gc_dy(spec, os.path.join(os.path.dirname(out), "tirender"))

    def const(x):
        params[key] = mi.TensorXf(np.full((r0, r0, r0, truth.shape[3]), x, np.float32))
        params.update()
    const(spec["init"])
    G, S = [], []
    for k in range(GC_SEEDS):
        for what in ("loss", "linear"):
            dr.enable_grad(params[key])
            params.update()
            for i, v in enumerate(spec["views"]):
                if what == "loss":
                    img = mi.render(scene, params, sensor=sensors[v], spp=spec["spp"], spp_grad=spec["spp_grad"],
                                    seed=driver_seed(100 + k, 0, v, 0), seed_grad=driver_seed(100 + k, 0, v, 1))
                    dr.backward(dr.mean(dr.square(img - T[v]), axis=None) / nv)
                else:
                    img = mi.render(scene, params, sensor=sensors[v], spp=4, spp_grad=32,
                                    seed=driver_seed(300 + k, 0, v, 0), seed_grad=driver_seed(300 + k, 0, v, 1))
                    dr.backward(dr.sum(img * mi.TensorXf(dy[i]), axis=None))
            g = np.array(dr.grad(params[key])).astype(np.float64).ravel()
            (G.append(g) if what == "loss" else S.append(float(g.sum())))
            dr.disable_grad(params[key])
            const(spec["init"])
    h = spec["init"] / 5

    def F(x, seed):
        const(x)
        return sum(float((np.array(mi.render(scene, sensor=sensors[v], spp=1024, seed=seed + v))[..., :3]
                          * dy[i]).sum()) for i, v in enumerate(spec["views"]))
    fd = [(F(spec["init"] + h, 7000 + 10 * k) - F(spec["init"] - h, 8000 + 10 * k)) / (2 * h) for k in range(2)]
    np.save(os.path.join(out, "gc_grads.npy"), np.array(G))
    return dict(prb_sum=S, fd=fd)


def gradient_check(spec, out):
    """Run both gradient children (sequentially) and print what they measured."""
    ti = run_child("tirender_volume_grad", spec, os.path.join(out, "tirender"), os.path.join(out, "tirender_gc.log"))
    mi = run_child("mitsuba_volume_grad", spec, os.path.join(out, "mitsuba"), os.path.join(out, "mitsuba_gc.log"))
    A = np.load(os.path.join(out, "tirender", "gc_grads.npy"))
    B = np.load(os.path.join(out, "mitsuba", "gc_grads.npy"))

    def corr(x, y):
        x, y = x - x.mean(), y - y.mean()
        return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))

    def pairs(G):
        return float(np.mean([corr(G[i], G[j]) for i in range(len(G)) for j in range(i + 1, len(G))]))
    n = len(A)
    print(f"\ngradient check at the start of the task ({stage_res(0, spec['stages'])}^3 at {spec['init']}, "
          f"{len(spec['views'])} views, {spec['spp']} + {spec['spp_grad']} spp, {n} seeds each, own targets):")
    print(f"  correlation of two independent per-voxel gradients (mean over pairs): tirender {pairs(A):.3f}, "
          f"Mitsuba 3 {pairs(B):.3f}; of the two {n}-seed means, tirender vs Mitsuba {corr(A.mean(0), B.mean(0)):.3f} "
          f"(ceilings: halves of tirender {corr(A[:n // 2].mean(0), A[n // 2:].mean(0)):.3f}, of Mitsuba "
          f"{corr(B[:n // 2].mean(0), B[n // 2:].mean(0)):.3f})")
    print(f"  RMS per-voxel gradient: tirender {np.sqrt((A ** 2).mean()):.3g}, Mitsuba 3 {np.sqrt((B ** 2).mean()):.3g}")
    ts, ms, fd = np.array(ti["prb_sum"]), np.array(mi["prb_sum"]), np.array(mi["fd"])

    def se(x):
        return x.std(ddof=1) / np.sqrt(len(x))
    print(f"  <grad, 1> of sum_v <dy_v, I_v> (fixed dy, 32 adjoint spp): tirender PRB {ts.mean():.5g} ± {se(ts):.2g}, "
          f"Mitsuba 3 PRB {ms.mean():.5g} ± {se(ms):.2g}, Mitsuba 3 central FD (1024 spp, 2 pairs) "
          f"{fd.mean():.5g} ({', '.join(f'{x:.4g}' for x in fd)})")


CHILDREN = {"mitsuba_volume": mitsuba_volume,
            "tirender_volume_grad": tirender_volume_grad, "mitsuba_volume_grad": mitsuba_volume_grad,
            "tirender_task": tirender_task, "mitsuba_task": mitsuba_task, "tirender_rf_data": tirender_rf_data,
            "tirender_radiance_field": tirender_radiance_field, "mitsuba_radiance_field": mitsuba_radiance_field}


def run_child(name, spec, out, log):
    """CHILDREN[name](spec, out) in a fresh process (stderr to `log`); its dict."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    env = sidebyside.child_env()
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log, "w") as err:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps([name, spec, out])],
                           stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        with open(log) as fh:
            tail = fh.read().strip().splitlines()[-5:]
        raise RuntimeError(f"{name} failed (exit {p.returncode}): " + " | ".join(tail))
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- comparison -------------------------------------------------------------------------------------
def time_to_reach(rows, level):
    """(seconds, iteration) of the first row whose param_rmse <= level; None if never."""
    for r in rows:
        if r["param_rmse"] <= level:
            return r["seconds"], r["iteration"]
    return None


def iteration_seconds(rows):
    """Per-iteration wall seconds (differences of the cumulative times)."""
    s = [r["seconds"] for r in rows]
    return np.diff([0.0] + s)


def stage_stats(rows, stages, dims="^3"):
    """Per multires stage: (label, first iteration's s, median s of the others); stages [[0, None]]:
    no multires."""
    dt = iteration_seconds(rows)
    out = []
    bounds = [s for s, _ in stages] + [len(rows)]
    for (start, res), stop in zip(stages, bounds[1:]):
        if start >= stop:
            continue
        seg = dt[start:stop]
        label = f"iterations {start}-{stop - 1}" if res is None else f"{res}{dims} iterations {start}-{stop - 1}"
        out.append((label, float(seg[0]),
                    float(np.median(seg[1:])) if len(seg) > 1 else float("nan")))
    return out


def table(title, ti, mi, stages, param_label, dims="^3"):
    """The issue's table (mi may be None: tirender's column only)."""
    def f(x, fmt="{:.3f}"):
        return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else fmt.format(x)
    rows = []
    cols = [("tirender", ti)] + ([("Mitsuba 3", mi)] if mi else [])

    def add(label, fn, fmt="{:.3f}", ratio=True):
        vals = [fn(r) for _, r in cols]
        rt = f(vals[0] / vals[1], "{:.2f}x") if ratio and mi and vals[1] not in (None, 0) and vals[0] is not None else ""
        rows.append((label, [f(v, fmt) for v in vals], rt))
    add("setup s (import, scene, targets, held-out start)", lambda r: r["setup_s"], "{:.1f}")
    st = {name: stage_stats(r["rows"], stages, dims) for name, r in cols}
    for k, (label, _, _) in enumerate(st["tirender"]):
        first = "" if stages[k][1] is None else f", {label.split(' ')[0]}"
        add(f"first iteration s{first} (cold: compile)", lambda r, k=k: stage_stats(r["rows"], stages, dims)[k][1])
        add(f"s/iteration warm (median), {label}", lambda r, k=k: stage_stats(r["rows"], stages, dims)[k][2])
    add("total optimisation s", lambda r: r["rows"][-1]["seconds"], "{:.1f}")
    add(f"{param_label} start", lambda r: r["rmse_start"], "{:.4f}", ratio=False)
    for start, res in stages[1:]:
        add(f"{param_label} at iteration {start} (end of previous stage)",
            lambda r, s=start: r["rows"][s - 1]["param_rmse"], "{:.4f}")
    n = len(ti["rows"])
    add(f"{param_label} final (iteration {n}, equal iterations)", lambda r: r["rows"][-1]["param_rmse"], "{:.4f}")
    add(f"{param_label} best", lambda r: min(x["param_rmse"] for x in r["rows"]), "{:.4f}")
    k = max(1, n // 10)
    add(f"L2 loss, mean of the last {k} iterations (vs own target)",
        lambda r: float(np.mean([x["loss"] for x in r["rows"][-k:]])), "{:.4g}")
    add("L2 loss of the truth at the last spp (noise floor)", lambda r: r["loss_floor"], "{:.4g}")
    if ti.get("psnr_start") is not None:
        add("held-out PSNR dB start (20 log10(1 / RMSE))", lambda r: r["psnr_start"], "{:.2f}", ratio=False)
        add("held-out PSNR dB final", lambda r: r["psnr_end"], "{:.2f}", ratio=False)
    if ti.get("holdout_start") is not None:
        add("held-out view image RMSE start (vs own target)", lambda r: r["holdout_start"], "{:.4f}", ratio=False)
        add("held-out view image RMSE end", lambda r: r["holdout_end"], "{:.4f}")
    add("peak RSS MB", lambda r: r["peak_rss_mb"], "{:.0f}")
    w = max(len(r[0]) for r in rows) + 2
    lines = [title, f"  {'':{w}}" + "".join(f"{c:>14}" for c, _ in cols) + ("   tirender/Mitsuba" if mi else "")]
    for label, vals, rt in rows:
        lines.append(f"  {label:{w}}" + "".join(f"{v:>14}" for v in vals) + (f"   {rt}" if rt else ""))
    if mi:
        for a, b, an, bn in ((ti, mi, "tirender", "Mitsuba 3"), (mi, ti, "Mitsuba 3", "tirender")):
            lvl = b["rows"][-1]["param_rmse"]
            hit = time_to_reach(a["rows"], lvl)
            own = b["rows"][-1]["seconds"]
            lines.append(f"  time for {an} to reach {bn}'s final {param_label} {lvl:.4f}: " +
                         (f"{hit[0]:.1f} s (iteration {hit[1] + 1}; {bn} took {own:.1f} s, ratio {hit[0] / own:.2f}x)"
                          if hit else f"not reached in {len(a['rows'])} iterations "
                          f"({a['rows'][-1]['seconds']:.1f} s; its best {min(x['param_rmse'] for x in a['rows']):.4f})"))
    return "\n".join(lines)


def plot(path, series, title, ylabel):
    """RMSE vs seconds, one line per renderer: matplotlib when installed, else tirender's headless
    line plot (tirender.io.plot, no extra dependency); returns a note on what was written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for name, (x, y) in series.items():
            ax.plot(x, y, label=name)
        ax.set_yscale("log")
        ax.set_xlabel("wall seconds since the first iteration")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        fig.savefig(path, dpi=100, bbox_inches="tight")
        return f"plot: {path} (matplotlib)"
    except ImportError:
        pass
    try:
        import tirender
        tirender.init(sidebyside.BENCH_ARCH)
        from tirender.io.plot import save_line_plot
        save_line_plot(path, {k: (np.asarray(x, float), np.asarray(y, float)) for k, (x, y) in series.items()},
                       title=title, xlabel="wall seconds since the first iteration", ylabel=ylabel, logy=True)
        return f"plot: {path} (matplotlib not installed: tirender.io.plot)"
    except Exception as e:  # noqa: BLE001
        return f"plot skipped (matplotlib not installed; tirender's plot failed: {e})"


def run_task(name, a):
    spec_fn, ti_child, mi_child, param_label, what = TASKS[name]
    spec = spec_fn(a.iters)
    if a.seed is not None:
        spec["seed"] = a.seed
    out = os.path.join(os.path.abspath(a.out), name)
    os.makedirs(out, exist_ok=True)
    ok, why = (False, "--skip-mitsuba") if a.skip_mitsuba else sidebyside.mitsuba_available()
    jobs = [("tirender", ti_child), ("Mitsuba 3", mi_child)][:2 if ok else 1]
    if a.order == "mitsuba-first":
        jobs.reverse()
    order = ", then ".join(j[0] for j in jobs)
    print(f"{name}: {what}; {spec['iters']} iterations, stages {spec['stages']}; sequentially, one process at "
          f"a time: {order}", flush=True)
    if spec.get("data_child"):   # data both children train on (not timed)
        run_child(spec["data_child"], spec, os.path.join(out, "data"), os.path.join(out, "data.log"))
    res, loads = {}, []
    for label, child in jobs:
        l0, t0 = os.getloadavg()[0], time.perf_counter()
        sub = "tirender" if label == "tirender" else "mitsuba"
        res[label] = run_child(child, spec, os.path.join(out, sub), os.path.join(out, f"{sub}.log"))
        loads.append(f"{label} {l0:.2f} -> {os.getloadavg()[0]:.2f}")
        print(f"  {label} done in {time.perf_counter() - t0:.0f} s", flush=True)
    ti, mi = res["tirender"], res.get("Mitsuba 3")
    with open(os.path.join(a.out, f"{name}_time_to_quality.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["renderer", "iteration", "seconds", "loss", "spp", "param_rmse"])
        for rn, r in (("tirender", ti), ("mitsuba", mi)):
            for x in (r["rows"] if r else []):
                w.writerow([rn, x["iteration"], f"{x['seconds']:.3f}", f"{x['loss']:.8g}", x["spp"],
                            f"{x['param_rmse']:.8g}"])
    title = (f"\nTime to quality, {name} task ({what}), {spec['iters']} iterations, run sequentially "
             f"({order}); 1-min load average on 2 cores: {'; '.join(loads)}\n"
             f"  tirender: {ti['renderer']}" + (f"; Mitsuba 3: {mi['renderer']}" if mi else ""))
    print(table(title, ti, mi, spec["stages"], param_label, spec.get("dims", "^3")))
    if not ok:
        print(f"  side by side with Mitsuba 3: skipped ({why})")
    series = {}
    for rn, r in (("tirender", ti), ("Mitsuba 3", mi)):
        if r:   # from (0 s, the start's error)
            series[rn] = ([0.0] + [x["seconds"] for x in r["rows"]], [r["rmse_start"]] + [x["param_rmse"] for x in r["rows"]])
    print("  " + plot(os.path.join(a.out, f"{name}_rmse_vs_seconds.png"), series,
                      f"{name} task: {param_label} vs wall time", param_label))
    print(f"  per-iteration CSV: {os.path.join(a.out, f'{name}_time_to_quality.csv')}")


# name -> (spec(iters), tirender child, Mitsuba child, parameter-error label, description)
TASKS = {
    "volume": (volume_spec, "tirender_task", "mitsuba_volume", "density RMSE",
               "configs/volume_recovery.yaml, 64^3 smoke density, 6 views 64^2, prbvolpath"),
    "texture": (texture_spec, "tirender_task", "mitsuba_task", "texture RMSE",
                "configs/texture_recovery.yaml, 256^2 diffuse texture, one 128^2 view, PRB"),
    "cbox": (cbox_spec, "tirender_task", "mitsuba_task", "reflectance RMSE",
             "configs/cbox_red_wall.yaml, the red wall's RGB reflectance, one 128^2 view, PRB"),
    "radiance_field": (radiance_field_spec, "tirender_radiance_field", "mitsuba_radiance_field", "held-out RMSE",
                       "configs/radiance_field.yaml, SH-2 voxel radiance field, one 128^2 view per iteration"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="volume", choices=sorted(TASKS))
    ap.add_argument("--iters", type=int, default=None, help="iterations (default: the config's); the "
                    "multires switch and spp doubling scale with it")
    ap.add_argument("--out", default=os.path.join("out", "time_to_quality"))
    ap.add_argument("--skip-mitsuba", action="store_true", help="tirender's column only")
    ap.add_argument("--order", default="tirender-first", choices=("tirender-first", "mitsuba-first"),
                    help="which renderer runs first (they never run at the same time)")
    ap.add_argument("--gradient-check", action="store_true", help="volume task only: compare both renderers' "
                    "density gradients at the start (variance, agreement, FD) instead of optimising")
    ap.add_argument("--seed", type=int, default=None, help="volume, texture, cbox: the optimisation's seed (default: the config's "
                    "optimize.seed) for both renderers: repeat with several to tell noise from a difference")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        name, spec, out = json.loads(a.child)
        print(json.dumps(CHILDREN[name](spec, out)))
        return
    if a.iters is not None and a.iters < 2:
        ap.error("--iters must be at least 2")
    if a.gradient_check:
        ok, why = sidebyside.mitsuba_available()
        if a.task != "volume" or not ok:
            ap.error(f"--gradient-check needs --task volume and Mitsuba 3 ({why or a.task})")
        gradient_check(volume_spec(a.iters), os.path.join(os.path.abspath(a.out), "volume_gradient_check"))
        return
    run_task(a.task, a)


if __name__ == "__main__":
    main()
