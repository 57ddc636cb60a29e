"""Command line: ``tirender render | optimize | view | gradcheck`` (also ``python -m tirender``).

Bad input prints one line ``error: <file>: <key>: <problem>`` and exits with code 2.
"""
import argparse
import os
import sys
import time

from .errors import TirenderError


def _common(p):
    p.add_argument("--arch", default=None, help="auto | cpu | cuda | vulkan (default: config 'arch' or auto)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set scene.integrator.max_depth=3")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME=VALUE",
                   help="Mitsuba XML scenes: override a <default name=...> parameter, e.g. -D spp=64")
    p.add_argument("--verbose", action="store_true", help="print the backend that Taichi started on")


def _init(args, cfg):
    from . import backend
    arch = args.arch or cfg.get("arch") or os.environ.get("TIRENDER_ARCH") or "auto"
    return backend.init(arch, verbose=getattr(args, "verbose", False))


def _scene(args, cfg):
    """Validate the scene (and its integrator) before Taichi starts, then start it and build the scene."""
    from .api import describe, scene_from_config
    described = describe(cfg)
    arch = _init(args, cfg)
    return scene_from_config(cfg, described), arch


def _defines(args):
    from .scene.mitsuba_xml import parse_defines
    return parse_defines(getattr(args, "define", None), getattr(args, "config", None))


def _scene_overrides(args, sensor):
    sets = []
    for flag in ("width", "height"):
        v = getattr(args, flag, None)
        if v is not None:
            if v < 1:
                raise TirenderError(f"--{flag}: must be >= 1, got {v}")
            sets.append(f"scene.sensors.{sensor}.film.{flag}={v}")
    return sets


def cmd_render(args):
    import numpy as np
    from .config import load_config, section
    from .io.images import save_image_set
    if args.config.endswith(".npz"):
        from . import backend
        backend.init(args.arch or "auto")
        from .radiance_field.cli import render_main
        render_main(args.config, args.out or "out/render", frames=args.frames, width=args.width,
                    height=args.height, spp=args.spp or 1)
        return 0
    cfg = load_config(args.config, args.set, defines=_defines(args))
    rs = section(cfg, "render", {"spp", "seed", "out", "sensor", "integrator"})
    sensor = args.sensor if args.sensor is not None else rs.get("sensor", 0)
    if args.width is not None or args.height is not None:
        cfg = load_config(args.config, list(args.set) + _scene_overrides(args, sensor), defines=_defines(args))
    spp = args.spp if args.spp is not None else rs.get("spp", 64)
    seed = args.seed if args.seed is not None else rs.get("seed", 0)
    out = args.out or rs.get("out") or os.path.join("out", os.path.splitext(os.path.basename(args.config))[0])
    integ = args.integrator or rs.get("integrator")
    from .integrators.registry import check_type
    if integ is not None:
        check_type(integ, key="--integrator" if args.integrator else "render.integrator")
    scene, arch = _scene(args, cfg)
    from .api import render
    t0 = time.perf_counter()
    img = render(scene, spp=spp, seed=seed, sensor=sensor, integrator=integ)
    dt = time.perf_counter() - t0
    s = scene.sensors[sensor]
    os.makedirs(out, exist_ok=True)
    save_image_set(out, img, "image")
    ms = s.width * s.height * spp / dt / 1e6
    print(f"rendered {s.width}x{s.height} at {spp} spp on {arch} in {dt:.2f} s ({ms:.2f} Msamples/s, "
          f"incl. compile on first use) -> {os.path.join(out, 'image.png')}")
    print(f"mean RGB = {np.round(img.reshape(-1, 3).mean(0), 6).tolist()}")
    return 0


def cmd_optimize(args):
    from .config import load_config
    cfg = load_config(args.config, args.set, defines=_defines(args))
    if "radiance_field" in cfg:
        _init(args, cfg)
        from .radiance_field.cli import optimize_main
        out = args.out or os.path.join("out", os.path.splitext(os.path.basename(args.config))[0])
        optimize_main(cfg, args.config, out, args.iters, args.resume)
        return 0
    from .api import describe
    described = describe(cfg)
    _init(args, cfg)
    from .optim.driver import run_optimization
    run_optimization(cfg, out=args.out, iters=args.iters, resume=args.resume, gui=args.gui, described=described)
    return 0


def cmd_view(args):
    from .config import load_config
    if args.config.endswith(".npz"):
        from . import backend
        backend.init(args.arch or "auto")
        from .viewer import view_field
        return view_field(args.config, args)
    cfg = load_config(args.config, args.set, defines=_defines(args))
    from .api import describe
    described = describe(cfg)
    _init(args, cfg)
    from .viewer import view
    return view(cfg, args, described=described)


def cmd_gradcheck(args):
    from .config import load_config
    cfg = load_config(args.config, args.set, defines=_defines(args))
    scene, _ = _scene(args, cfg)
    from .gradcheck import gradcheck_main
    return gradcheck_main(cfg, args, scene)


def build_parser():
    ap = argparse.ArgumentParser(prog="tirender", description="Differentiable path tracer in Taichi.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render", help="render a scene config (or a saved radiance field .npz)")
    r.add_argument("config")
    r.add_argument("--spp", type=int, default=None)
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--out", default=None, help="output directory (image.png, image.exr, image.npy)")
    r.add_argument("--sensor", type=int, default=None)
    r.add_argument("--integrator", default=None, help="override the scene's integrator (path, direct, aov, volpath, ...)")
    r.add_argument("--frames", type=int, default=36, help="radiance fields: orbit frames")
    r.add_argument("--width", type=int, default=None, help="film width (overrides the sensor's)")
    r.add_argument("--height", type=int, default=None, help="film height (overrides the sensor's)")
    _common(r)
    o = sub.add_parser("optimize", help="run an inverse-rendering optimisation")
    o.add_argument("config")
    o.add_argument("--out", default=None)
    o.add_argument("--iters", type=int, default=None)
    o.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    o.add_argument("--gui", action="store_true", help="live view of the optimisation")
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
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    fn = {"render": cmd_render, "optimize": cmd_optimize, "view": cmd_view, "gradcheck": cmd_gradcheck}[args.cmd]
    try:
        return fn(args) or 0
    except TirenderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
