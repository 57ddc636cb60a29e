"""Taichi initialisation and backend choice.

One ``ti.init`` per process: :func:`init` is idempotent and every public entry point
calls it lazily, so ``import tirender; tirender.render(...)`` just works on the CPU.
"""
import os

import taichi as ti

from .errors import ConfigError

ARCHS = ("auto", "cpu", "cuda", "vulkan")
_state = {"arch": None, "fp": None}


def _ti_arch(name):
    return {"cpu": ti.cpu, "cuda": ti.cuda, "vulkan": ti.vulkan}[name]


def _try_init(name, fp, **kw):
    ti.init(arch=_ti_arch(name), default_fp=fp, **kw)
    got = ti.lang.impl.current_cfg().arch
    return got == _ti_arch(name) or (name == "cpu" and got in (ti.x64, ti.arm64))


def init(arch="auto", fp=None, debug=False, **kwargs):
    """Initialise Taichi once for this process.

    arch: "auto" (CUDA, then Vulkan, then CPU), "cpu", "cuda" or "vulkan".
    fp:   "f32" (default) or "f64" (used by the f64 test oracle paths); also read from
          the environment variable ``TIRENDER_FP``.
    Calling again with the same (or "auto") arch is a no-op; asking for another arch
    after initialisation raises ConfigError (Taichi allows one backend per process).
    """
    if arch is None:
        arch = "auto"
    if arch not in ARCHS:
        raise ConfigError(f"unknown arch '{arch}' (choose one of {', '.join(ARCHS)})", key="arch")
    fp = fp or os.environ.get("TIRENDER_FP", "f32")
    if fp not in ("f32", "f64"):
        raise ConfigError(f"unknown floating point type '{fp}' (f32 or f64)", key="fp")
    if _state["arch"] is not None:
        if arch not in ("auto", _state["arch"]):
            raise ConfigError(
                f"Taichi is already running on '{_state['arch']}' in this process; cannot switch to '{arch}'",
                key="arch")
        return _state["arch"]
    tfp = ti.f64 if fp == "f64" else ti.f32
    # advanced_optimization=False: Taichi's extra IR passes cost ~4x compile time on our
    # megakernels (22 s -> 5.4 s for the path tracer) and do not make them faster.
    kw = dict(offline_cache=True, log_level=ti.WARN, random_seed=0, debug=debug, advanced_optimization=False)
    kw.update(kwargs)
    if arch == "auto":
        chosen = "cpu"
        for cand in ("cuda", "vulkan"):
            try:
                if _try_init(cand, tfp, **dict(kw, log_level=ti.ERROR)):
                    chosen = cand
                    break
                ti.reset()
            except Exception:
                ti.reset()
        if chosen == "cpu":
            _try_init("cpu", tfp, **kw)
    else:
        ok = False
        try:
            ok = _try_init(arch, tfp, **kw)
        except Exception:
            ok = False
        if not ok:
            ti.reset()
            raise ConfigError(f"arch '{arch}' is not available on this machine", key="arch")
        chosen = arch
    _state["arch"], _state["fp"] = chosen, fp
    return chosen


def current_arch():
    """Name of the backend in use ("cpu", "cuda", "vulkan"), or None before init."""
    return _state["arch"]


def ensure_init():
    if _state["arch"] is None:
        init(os.environ.get("TIRENDER_ARCH", "auto"))
    return _state["arch"]
