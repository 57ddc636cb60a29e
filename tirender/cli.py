"""Command line: ``tirender render | optimize | view | gradcheck | gradimage`` (also ``python -m tirender``).

Bad input prints one line ``error: <file>: <key>: <problem>`` and exits with code 2.
"""
import argparse
import os
import sys
import time
import warnings

from .errors import ConfigError, TirenderError


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: argument --spp: invalid int value: 'abc'`` (exit 2)."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message}\n")


def _common(p):
    p.add_argument("--arch", default=None, help="auto | cpu | cuda | vulkan (default: config 'arch' or auto)")
    p.add_argument("--variant", default=None,
                   help="rgb | mono | spectral | spectral_polarized: how light is represented (default: config 'variant', $TIRENDER_VARIANT "
                        "or rgb; docs/variants.md)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set scene.integrator.max_depth=3")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME=VALUE",
                   help="Mitsuba XML scenes: override a <default name=...> parameter, e.g. -D spp=64")
    p.add_argument("--verbose", action="store_true",
                   help="print the backend chosen and let Taichi's own log lines through")
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="memory limit for inputs (textures, meshes, grids, films), e.g. 16G "
                        "(default: $TIRENDER_MAX_MEMORY or half the physical memory)")


def _arch(args, cfg):
    """(arch name, (file, key) it comes from)."""
    if args.arch:
        return args.arch, (None, "--arch")
    if cfg.get("arch") is not None:
        return cfg["arch"], (cfg.get("_file"), "arch")
    if os.environ.get("TIRENDER_ARCH"):
        return os.environ["TIRENDER_ARCH"], (None, "TIRENDER_ARCH")
    return "auto", (None, "--arch")


def _set_variant(args, cfg):
    """The process's variant from --variant, else the config's top-level ``variant:`` (tirender/variants.py)."""
    from . import variants
    if getattr(args, "variant", None):
        variants.set_variant(args.variant, None, "--variant")
    elif isinstance(cfg, dict) and cfg.get("variant") is not None:
        variants.set_variant(cfg["variant"], cfg.get("_file"), "variant")


def _check_arch(args, cfg):
    from .backend import ARCHS
    _set_variant(args, cfg)
    arch, (file, key) = _arch(args, cfg)
    if arch not in ARCHS:
        raise ConfigError(f"unknown arch {arch!r} (choose one of {', '.join(ARCHS)})", file, key)


def _init(args, cfg):
    from . import backend
    arch, (file, key) = _arch(args, cfg)
    try:
        return backend.init(arch, verbose=getattr(args, "verbose", False))
    except ConfigError as e:
        raise ConfigError(e.problem, file, key) from None


def _starter(args, cfg, check_backend=None):
    """start(): once, check the arch, start Taichi on it and run check_backend() (a refusal of the backend it chose,
    before any kernel compiles); returns the arch."""
    arch = []

    def start():
        if not arch:
            _check_arch(args, cfg)
            arch.append(_init(args, cfg))
            if check_backend is not None:
                check_backend()
        return arch[0]
    return start


def _describe(cfg, start):
    """api.describe(cfg): every check of the scene before Taichi starts, except for a scene of large mesh files,
    which a forked child reads while ``start()`` runs and the BVH build's kernels load (scene/prefetch.py; a
    problem in a later shape or emitter is then reported after that)."""
    from .api import describe, overlapped
    return describe(cfg, overlapped(start))


def _scene(args, cfg, check_backend=None):
    """Validate the scene (and its integrator), start Taichi (_starter) and build the scene."""
    from .api import scene_from_config
    _set_variant(args, cfg)
    start = _starter(args, cfg, check_backend)
    described = _describe(cfg, start)
    arch = start()
    return scene_from_config(cfg, described), arch


def _defines(args):
    from .scene.mitsuba_xml import parse_defines
    return parse_defines(getattr(args, "define", None), getattr(args, "config", None))


def _flag(key, value, flag):
    """A CLI flag's value checked by the same schema key as its config counterpart."""
    return None if value is None else key.parse(value, None, flag)


def _refuse(args, flags, why):
    """ConfigError for the first of `flags` that was given (they do not apply here)."""
    for f in flags:
        v = getattr(args, f.lstrip("-").replace("-", "_"), None)
        if not (v is None or v is False or (isinstance(v, list) and not v)):
            raise ConfigError(f"does not apply {why}", key=f)


def _npz(args):
    return isinstance(args.config, str) and args.config.lower().endswith(".npz")


def cmd_render(args):
    from .config import RENDER_KEYS, load_config, render_settings
    from .io.paths import check_output_dir, write_outputs
    from .schema import Integer
    if _npz(args):
        _refuse(args, ("--seed", "--sensor", "--integrator", "--set"), "to a radiance field (.npz)")
        spp = _flag(RENDER_KEYS["spp"], args.spp, "--spp") or 1
        frames = _flag(Integer("frames", lo=1, hi=100000), args.frames, "--frames") or 36
        w = _flag(Integer("width", lo=1, hi=1 << 15), args.width, "--width")
        h = _flag(Integer("height", lo=1, hi=1 << 15), args.height, "--height")
        out = check_output_dir(args.out or "out/render", "--out")
        _init(args, {})
        from .radiance_field.cli import render_main
        paths = render_main(args.config, out, frames=frames, width=w, height=h, spp=spp)
        print(f"rendered {len(paths) if paths else frames} frames of {args.config} -> {out}")
        return 0
    _refuse(args, ("--frames",), "to scene configs (only to radiance fields, .npz)")
    cfg = load_config(args.config, args.set, defines=_defines(args))
    if isinstance(cfg, dict) and "grin" in cfg:
        raise ConfigError("a GRIN config has no scene to render: `tirender optimize` writes its projections "
                          "(final_*.png)", args.config, "grin")
    rs = render_settings(cfg, args)
    if rs["width"] is not None or rs["height"] is not None:
        sc = cfg["scene"]
        single = "sensors" not in sc and isinstance(sc.get("sensor"), dict)
        prefix = "sensor" if single else f"sensors.{rs['sensor']}"
        sets = [f"{prefix}.film.{k}={rs[k]}" for k in ("width", "height") if rs[k] is not None]
        n = len(sc["sensors"]) if isinstance(sc.get("sensors"), list) else 1
        if rs["sensor"] >= n:
            raise ConfigError(f"sensor {rs['sensor']} does not exist (the scene has {n})", rs["sensor_file"],
                              rs["sensor_key"])
        cfg = load_config(args.config, args.set, scene_overrides=sets, defines=_defines(args))
    from .api import scene_from_config
    _set_variant(args, cfg)
    start = _starter(args, cfg)
    described = _describe(cfg, start)
    nsens = len(described[0].sensors)
    if rs["sensor"] >= nsens:
        raise ConfigError(f"sensor index must be < {nsens} (the scene has {nsens})", rs["sensor_file"],
                          rs["sensor_key"])
    stokes = (rs["integrator"] or described[1]["type"]) == "stokes"
    moments = bool(described[1].get("moment")) and not stokes   # a moment integrator: also the second moments
    from .io.stokes import NAMES as STOKES_NAMES
    out = check_output_dir(rs["out"], rs["out_key"], rs["out_file"],
                           names=("image.png", "image.exr", "image.npy") + (STOKES_NAMES if stokes else ())
                           + (("m2.exr", "m2.npy") if moments else ()))
    arch = start()
    scene = scene_from_config(cfg, described)
    from .api import render, render_moments, render_stokes
    spp, sensor = rs["spp"], rs["sensor"]
    t0 = time.perf_counter()
    m2 = None
    if stokes:
        S = render_stokes(scene, spp=spp, seed=rs["seed"], sensor=sensor)
        img = S[0]
    elif moments:
        img, m2 = render_moments(scene, spp=spp, seed=rs["seed"], sensor=sensor, integrator=rs["integrator"])
    else:
        img = render(scene, spp=spp, seed=rs["seed"], sensor=sensor, integrator=rs["integrator"])
    dt = time.perf_counter() - t0
    s = scene.sensors[sensor]
    from .io.images import save_image_set

    def write():
        save_image_set(out, img, "image")
        if m2 is not None:      # XYZ second moments, as Mitsuba's m2_* channels (in R, G, B: X, Y, Z)
            from .io.exr import write_exr
            from .io.checkpoints import save_npy
            write_exr(os.path.join(out, "m2.exr"), m2)
            save_npy(os.path.join(out, "m2.npy"), m2)
        if stokes:
            from .io.stokes import save_stokes_set
            save_stokes_set(out, S)
    write_outputs(write)
    ms = s.width * s.height * spp / dt / 1e6
    mean = [round(float(x), 6) for x in img.reshape(-1, 3).mean(0)]
    print(f"rendered {s.width}x{s.height} at {spp} spp on {arch} in {dt:.2f} s ({ms:.2f} Msamples/s, "
          f"incl. compile on first use), mean RGB {mean} -> {os.path.join(out, 'image.png')} (.exr, .npy)"
          + (" and Stokes S0-S3 (S*.exr/.npy, stokes.npy, dolp.png, aolp.png, docp.png)" if stokes else "")
          + (" and the second moments of the samples in XYZ (m2.exr, m2.npy)" if moments else ""))
    return 0


def cmd_optimize(args):
    from .config import load_config
    from .io.paths import check_output_dir
    from .schema import Integer
    cfg = load_config(args.config, args.set, defines=_defines(args))
    iters = _flag(Integer("iters", lo=0, hi=1 << 30), args.iters, "--iters")
    stem = os.path.splitext(os.path.basename(args.config))[0]
    workers = _flag(Integer("workers", lo=1, hi=4096), args.workers, "--workers")
    wthreads = _flag(Integer("worker-threads", lo=1, hi=4096), args.worker_threads, "--worker-threads")
    if workers is None:
        _refuse(args, ("--address", "--worker-threads"), "without --workers N")
    else:
        from .distributed import require_ray
        require_ray()
    if "radiance_field" in cfg:
        _refuse(args, ("--gui",), "to radiance-field configs (no live view of their training)")
        _refuse(args, ("--workers",), "to radiance-field configs (their trainer draws every batch from all views)")
        out = check_output_dir(args.out or os.path.join("out", stem), "--out")
        _check_arch(args, cfg)
        _init(args, cfg)
        from .radiance_field.cli import optimize_main
        m = optimize_main(cfg, args.config, out, iters, args.resume) or {}
        psnr = m.get("heldout_psnr", m.get("psnr"))
        print(f"optimized radiance field {args.config}" + (f": held-out PSNR {psnr:.2f} dB" if isinstance(psnr, (int, float)) else "")
              + f" -> {out} (field.npz, metrics.json)")
        return 0
    if "grin" in cfg:
        _refuse(args, ("--gui",), "to GRIN configs (no live view of their optimisation)")
        _refuse(args, ("--workers",), "to GRIN configs (one process renders every view)")
        from .grin.cli import check, optimize_main, summary
        parsed = check(cfg, args.config)
        out = check_output_dir(args.out or os.path.join("out", stem), "--out")
        _check_arch(args, cfg)
        _init(args, cfg)
        m = optimize_main(cfg, args.config, out, iters, args.resume, parsed=parsed)
        print(summary(m, args.config, out))
        return 0
    from .config import optimization_scene
    from .optim.driver import check_optimize_config, run_optimization
    cfg = optimization_scene(cfg)           # optimize.sensors: the views it renders through
    start = _starter(args, cfg)
    described = _describe(cfg, start)
    check_optimize_config(cfg, described)
    out = check_output_dir(args.out or os.path.join("out", stem), "--out" if args.out else "--out (default)")
    start()
    m = run_optimization(cfg, out=out, iters=iters, resume=args.resume, gui=args.gui, described=described,
                         workers=workers, address=args.address, worker_threads=wthreads)
    print(summary_line(m, out))
    return 0


def summary_line(m, out):
    """One closing line of `tirender optimize`: iterations, time, loss, parameter error, outputs."""
    def g(x):
        return "n/a" if x is None else f"{x:.4g}"
    parts = [f"optimized {m.get('iterations', 0)} iterations in {m.get('seconds', 0.0):.1f} s",
             f"loss {g(m.get('initial_loss'))} -> {g(m.get('final_loss'))}"]
    for n, p in (m.get("params") or {}).items():
        parts.append(f"{n} RMSE {g(p.get('rmse_start'))} -> {g(p.get('rmse_end'))}")
    return ", ".join(parts) + f" -> {out} (metrics.json, loss.csv, final/, params/)"


VIEW_FLAGS = (("spp", 1, 1 << 24, True), ("spp_per_frame", 1, 1 << 16, True), ("frames", 1, 1 << 30, True),
              ("sensor", 0, 1 << 16, True), ("seed", 0, (1 << 32) - 1, True), ("width", 1, 1 << 15, True),
              ("height", 1, 1 << 15, True), ("exposure", -64, 64, False), ("orbit", -360, 360, False))


def cmd_view(args):
    from .config import load_config
    from .schema import Number
    for name, lo, hi, integer in VIEW_FLAGS:
        _flag(Number(name, lo=lo, hi=hi, integer=integer), getattr(args, name, None), "--" + name.replace("_", "-"))
    if _npz(args):
        _refuse(args, ("--set", "--integrator", "--sensor", "--seed"), "to a radiance field (.npz)")
        _init(args, {})
        from .viewer import view_field
        return view_field(args.config, args)
    cfg = load_config(args.config, args.set, defines=_defines(args))
    from .config import RENDER_KEYS
    from .schema import Integer, Number, String, validate
    f = cfg.get("_file")
    validate(cfg.get("render") or {}, tuple(RENDER_KEYS.values()), f, "render")
    validate(cfg.get("viewer") or {}, (
        Integer("spp", default=None, lo=1, hi=1 << 24), Integer("spp_per_frame", default=None, lo=1, hi=1 << 16),
        Number("exposure", default=None, lo=-64, hi=64), Integer("sensor", default=None, lo=0, hi=1 << 16),
        String("integrator", default=None), Integer("seed", default=None, lo=0, hi=(1 << 32) - 1)), f, "viewer")
    start = _starter(args, cfg)
    described = _describe(cfg, start)
    start()
    from .viewer import view
    return view(cfg, args, described=described)


def cmd_gradcheck(args):
    from .config import load_config
    from .schema import Integer, Number
    _flag(Integer("spp", lo=1, hi=1 << 24), args.spp, "--spp")
    _flag(Integer("seeds", lo=1, hi=1 << 16), args.seeds, "--seeds")
    _flag(Number("h", lo=0.0, strict_lo=True, hi=1.0), args.h, "--h")
    cfg = load_config(args.config, args.set, defines=_defines(args))
    scene, _ = _scene(args, cfg)
    from .gradcheck import gradcheck_main
    return gradcheck_main(cfg, args, scene)


def cmd_gradimage(args):
    """Forward mode: the image's derivative w.r.t. one parameter (all its elements, or --index I),
    written as gradimage.npy / .exr (RGB) and gradimage.png (channel mean, diverging colours)."""
    import numpy as np
    from .config import load_config
    from .io.paths import check_output_dir, write_outputs
    from .schema import Integer, Number
    spp = _flag(Integer("spp", lo=1, hi=1 << 24), args.spp, "--spp") or 64
    seed = _flag(Integer("seed", lo=0, hi=(1 << 32) - 1), args.seed, "--seed")
    sensor = _flag(Integer("sensor", lo=0, hi=1 << 16), args.sensor, "--sensor") or 0
    index = _flag(Integer("index", lo=0, hi=1 << 40), args.index, "--index")
    scale = _flag(Number("scale", lo=0.0, strict_lo=True), args.scale, "--scale")
    cfg = load_config(args.config, args.set, defines=_defines(args))
    for kind in ("grin", "radiance_field"):
        if isinstance(cfg, dict) and kind in cfg:
            raise ConfigError(f"a {kind.replace('_', ' ')} config has no scene for forward mode", args.config, kind)
    stem = os.path.splitext(os.path.basename(args.config))[0]
    names = ("gradimage.png", "gradimage.exr", "gradimage.npy")
    out = check_output_dir(args.out or os.path.join("out", f"{stem}_gradimage"), "--out" if args.out else
                           "--out (default)", names=names)
    from .launch import check_forward_arch
    scene, arch = _scene(args, cfg, check_forward_arch)
    try:
        info = scene.params.info(args.param)
    except ConfigError as e:
        raise ConfigError(e.problem, key="--param") from None
    if index is not None and index >= info.size:
        raise ConfigError(f"must be < {info.size}, the number of values of {info.name} (shape {info.shape})",
                          key="--index")
    v = np.ones(info.size) if index is None else np.eye(1, info.size, index)[0]
    if sensor >= len(scene.sensors):
        raise ConfigError(f"sensor index must be < {len(scene.sensors)} (the scene has {len(scene.sensors)})",
                          key="--sensor")
    from .api import render_forward
    t0 = time.perf_counter()
    method = args.method or ("prb_attached" if info.name in scene.deform_params else "prb")
    jv = render_forward(scene, {info.name: v}, spp=spp, seed=1 if seed is None else seed, sensor=sensor,
                        method=method)
    dt = time.perf_counter() - t0
    from .io.images import save_diverging_png, save_image_set
    used = {}

    def write():
        save_image_set(out, jv, "gradimage", png=False)
        used["scale"] = save_diverging_png(os.path.join(out, "gradimage.png"), jv.mean(axis=2), scale)
    write_outputs(write)
    what = info.name if index is None else f"{info.name}[{index}]"
    print(f"d image / d {what} at {spp} spp on {arch} in {dt:.2f} s: range [{jv.min():.4g}, {jv.max():.4g}], "
          f"PNG red +{used['scale']:.4g} .. white 0 .. blue -{used['scale']:.4g} -> "
          f"{os.path.join(out, 'gradimage.png')} (.exr, .npy: RGB)")
    return 0


def build_parser():
    ap = _Parser(prog="tirender", description="Differentiable path tracer in Taichi.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("render", help="render a scene config (or a saved radiance field .npz)")
    r.add_argument("config")
    r.add_argument("--spp", type=int, default=None)
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--out", default=None, help="output directory (image.png, image.exr, image.npy)")
    r.add_argument("--sensor", type=int, default=None)
    r.add_argument("--integrator", default=None, help="override the scene's integrator (path, direct, aov, volpath, ...)")
    r.add_argument("--frames", type=int, default=None, help="radiance fields: orbit frames (36)")
    r.add_argument("--width", type=int, default=None, help="film width (overrides the sensor's)")
    r.add_argument("--height", type=int, default=None, help="film height (overrides the sensor's)")
    _common(r)
    o = sub.add_parser("optimize", help="run an inverse-rendering optimisation")
    o.add_argument("config")
    o.add_argument("--out", default=None)
    o.add_argument("--iters", type=int, default=None)
    o.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    o.add_argument("--gui", action="store_true", help="live view of the optimisation")
    o.add_argument("--workers", type=int, default=None, metavar="N",
                   help="shard the views over N Ray workers (bit-identical to one process; docs/scale_out.md)")
    o.add_argument("--address", default=None, metavar="ADDR",
                   help="with --workers: a running Ray cluster (default: a local Ray instance for this run)")
    o.add_argument("--worker-threads", type=int, default=None, metavar="T",
                   help="with --workers: Taichi CPU threads per worker (default: cores / N locally)")
    _common(o)
    v = sub.add_parser("view", help="interactive viewer (ti.GUI) of a scene config or a radiance field .npz")
    v.add_argument("config")
    v.add_argument("--headless", action="store_true",
                   help="no window: write the frames to --out DIR (frame_NNNN.png, last_frame.npy)")
    v.add_argument("--frames", type=int, default=None,
                   help="stop after N frames (headless default 4; with a window: run until closed)")
    v.add_argument("--out", default=None, help="folder for headless frames and 'p' screenshots")
    v.add_argument("--spp", type=int, default=None, help="spp target (accumulation stops there)")
    v.add_argument("--spp-per-frame", type=int, default=None, help="samples per pixel added each frame")
    v.add_argument("--orbit", type=float, default=0.0, help="turn the camera azimuth by DEG every frame")
    v.add_argument("--screenshot", default=None, metavar="PNG", help="save the last window frame on exit")
    v.add_argument("--integrator", default=None,
                   help="path | direct | aov:albedo | aov:normal | aov:depth (keys 1-5 / i)")
    v.add_argument("--exposure", type=float, default=None, help="exposure in stops (keys + / -)")
    v.add_argument("--sensor", type=int, default=None)
    v.add_argument("--seed", type=int, default=None)
    v.add_argument("--width", type=int, default=None, help="override the film / window width")
    v.add_argument("--height", type=int, default=None, help="override the film / window height")
    v.add_argument("--no-text", action="store_true", help="hide the status line")
    _common(v)
    g = sub.add_parser("gradcheck", help="compare PRB gradients with finite differences (a table; exit 0 if all pass)")
    g.add_argument("config")
    g.add_argument("--param", action="append", default=None, metavar="NAME",
                   help="parameter to check (repeatable; default: every parameter)")
    g.add_argument("--spp", type=int, default=16, help="samples per pixel of each estimate (16)")
    g.add_argument("--seeds", type=int, default=8, help="independent estimates per side (8)")
    g.add_argument("--h", type=float, default=0.01, help="finite-difference step relative to the parameter's RMS")
    g.add_argument("--method", default="prb", help="gradient method (prb, rb, rb_biased, ...)")
    g.add_argument("--sensor", type=int, default=None)
    _common(g)
    fm = sub.add_parser("gradimage", help="forward mode: the image's derivative w.r.t. one parameter "
                                          "(gradimage.npy/.exr, and a diverging-colour PNG)")
    fm.add_argument("config")
    fm.add_argument("--param", required=True, metavar="NAME", help="the parameter (e.g. red.reflectance)")
    fm.add_argument("--index", type=int, default=None, metavar="I",
                    help="one element (flat index) of the parameter; default: all of them together")
    fm.add_argument("--spp", type=int, default=None, help="samples per pixel (64)")
    fm.add_argument("--seed", type=int, default=None, help="seed (1)")
    fm.add_argument("--sensor", type=int, default=None)
    fm.add_argument("--method", default=None, help="derivative method with a forward mode: prb (default), prb_attached "
                                                   "(default for geometry parameters: docs/geometry.md)")
    fm.add_argument("--scale", type=float, default=None,
                    help="|derivative| shown fully red/blue in the PNG (default: the 99.5th percentile)")
    fm.add_argument("--out", default=None, help="output directory (default out/<config>_gradimage)")
    _common(fm)
    return ap


def main(argv=None):
    """Run the CLI; returns the exit code (2: bad input, one line on stderr, no traceback)."""
    args = build_parser().parse_args(argv)
    fn = {"render": cmd_render, "optimize": cmd_optimize, "view": cmd_view, "gradcheck": cmd_gradcheck,
          "gradimage": cmd_gradimage}[args.cmd]
    from . import backend, limits

    def one_line(message, category, filename, lineno, file=None, line=None):   # no source line, no path
        print(f"warning: {message}", file=sys.stderr)
    shown, warnings.showwarning = warnings.showwarning, one_line
    try:
        backend.set_verbose(args.verbose)
        if args.max_memory is not None:
            limits.set_max_memory(args.max_memory, "--max-memory")
        elif os.environ.get("TIRENDER_MAX_MEMORY"):
            limits.max_memory()   # a malformed value is reported before any work
        if not isinstance(args.config, str) or os.path.isdir(args.config):
            raise ConfigError("is a folder, expected a YAML config" + (" or a radiance field .npz" if args.cmd in (
                "render", "view") else ""), args.config)
        return fn(args) or 0
    except TirenderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # the file system failed us mid-run (a full device, a folder removed): one line
        name = e.filename or args.config
        print(f"error: {name}: {e.strerror or e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"error: {args.config}: out of memory (lower the input sizes or the --max-memory limit)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        limits.set_max_memory(None)
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
