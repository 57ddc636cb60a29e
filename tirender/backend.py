"""Taichi initialisation and backend choice.

One ``ti.init`` per process: :func:`init` is idempotent and every public entry point
calls it lazily, so ``import tirender; tirender.render(...)`` just works on the CPU.

"auto" tries CUDA, then Vulkan — but only when the Vulkan loader reports a device that is not
a CPU (a software rasteriser such as Mesa's lavapipe/llvmpipe or SwiftShader runs our kernels
about 10× slower than Taichi's own CPU backend) — then the CPU. Taichi's banners are silenced.
"""
import contextlib
import ctypes
import io
import json
import os
import subprocess
import sys

# Taichi prints a version header at import unless told otherwise (an entry point may have imported
# taichi before us: then the header is already out, and that is fine).
os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "false")

import taichi as ti  # noqa: E402

from . import frontend, vkprobe  # noqa: E402
from .errors import ConfigError  # noqa: E402

frontend.install()

ARCHS = ("auto", "cpu", "cuda", "vulkan")
_state = {"arch": None, "fp": None, "verbose": False,
          "share_kernels": os.environ.get("TIRENDER_SHARE_KERNELS", "") not in ("", "0")}


def set_verbose(on):
    """Let Taichi's own log lines through (the CLI's --verbose); otherwise init mutes them."""
    _state["verbose"] = bool(on)

# VkPhysicalDeviceType
VK_DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
VK_PHYSICAL_DEVICE_TYPE_CPU = 4


def _ti_arch(name):
    return {"cpu": ti.cpu, "cuda": ti.cuda, "vulkan": ti.vulkan}[name]


_vk_cache = []


def vulkan_devices():
    """[(device name, VkPhysicalDeviceType)] reported by the Vulkan loader; [] when there is no loader,
    no device, or anything goes wrong. Probed once per process, in a child process (tirender/vkprobe.py,
    ~40 ms): the probe loads every installed Vulkan driver (Mesa's lavapipe brings its own LLVM), whose
    pages would otherwise stay in this process (+47 MB of RSS for a CPU run)."""
    if not _vk_cache:
        devs = []
        try:
            out = subprocess.run([sys.executable, "-I", "-S", vkprobe.__file__], capture_output=True, text=True,
                                 timeout=60)
            if out.returncode == 0:
                devs = [(str(n), int(t)) for n, t in json.loads(out.stdout.strip().splitlines()[-1])]
        except Exception:  # noqa: BLE001  (no interpreter, timeout, garbled output: no Vulkan)
            devs = []
        _vk_cache.append(devs)
    return list(_vk_cache[0])


def hardware_vulkan_devices(devices):
    """The devices of [(name, type)] worth running on: every type but VK_PHYSICAL_DEVICE_TYPE_CPU."""
    return [(n, t) for n, t in devices if t != VK_PHYSICAL_DEVICE_TYPE_CPU]


def has_cuda_driver():
    """Whether the CUDA driver library (libcuda, which Taichi's CUDA backend loads) can be loaded."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def has_hardware_vulkan():
    """True when a non-CPU Vulkan device exists (what "auto" requires before trying Vulkan)."""
    return bool(hardware_vulkan_devices(vulkan_devices()))


# ----------------------------------------------------------------------------- quiet ti.init
@contextlib.contextmanager
def _silenced(fds=False):
    """Swallow Python-level stdout (Taichi's "[Taichi] Starting on arch=..." is a bare print());
    fds=True also points file descriptors 1 and 2 at /dev/null (C++ loggers, drivers)."""
    saved = []
    try:
        if fds:
            try:
                for s in (sys.stdout, sys.stderr):
                    try:
                        s.flush()
                    except Exception:  # noqa: BLE001
                        pass
                null = os.open(os.devnull, os.O_WRONLY)
                try:
                    for fd in (1, 2):
                        saved.append((fd, os.dup(fd)))
                        os.dup2(null, fd)
                finally:
                    os.close(null)
            except OSError:
                pass
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for fd, dup in reversed(saved):
            try:
                os.dup2(dup, fd)
            finally:
                os.close(dup)


def quiet():
    """Context manager muting Taichi's own output (its Python prints and, unless verbose, its C++ log
    lines on file descriptors 1 and 2), e.g. around a ti.GUI that may fail to open a window."""
    return _silenced(fds=not _state["verbose"])


def _try_init(name, fp, quiet_fds=False, **kw):
    if name != "cuda":
        # make_thread_local=False: Taichi's pass that turns a loop's atomics on one global address into
        # thread-local sums is ~80 % of its IR lowering on our adjoint megakernels (prbvolpath's gradient
        # kernel: 67 s -> 34 s cold compile) and changes nothing there: our atomics scatter over gradient
        # fields (cbox PRB at 64 spp: same gradients to the last bit, 7.5 s -> 6.9 s). Kept on CUDA, where
        # thousands of threads contend on one address.
        kw.setdefault("make_thread_local", False)
    with _silenced(fds=quiet_fds):
        ti.init(arch=_ti_arch(name), default_fp=fp, **kw)
    got = ti.lang.impl.current_cfg().arch
    return got == _ti_arch(name) or (name == "cpu" and got in (ti.x64, ti.arm64))


KERNEL_CACHE_MB = 1024


def kernel_cache_bytes():
    """The cap of Taichi's kernel cache (bytes): $TIRENDER_KERNEL_CACHE_MB, else KERNEL_CACHE_MB. Taichi's own
    default (100 MB) holds less than a varied workflow's kernels (the default test lane writes 166 MB): past the
    cap, each process's exit drops a quarter of the cache (least recently used first), which later runs compile
    again."""
    v = os.environ.get("TIRENDER_KERNEL_CACHE_MB", "")
    try:
        mb = float(v) if v.strip() else KERNEL_CACHE_MB
    except ValueError:
        mb = float("nan")
    if not (mb > 0 and mb < float("inf")):
        raise ConfigError(f"TIRENDER_KERNEL_CACHE_MB={v!r}: give the kernel cache's cap as a positive number of "
                          f"megabytes", key="TIRENDER_KERNEL_CACHE_MB")
    return int(mb * (1 << 20))


def _check_fp_frozen(fp):
    """tirender.core.math's vector types froze Taichi's `float` when they were created: once that module
    is imported, another default float type would silently mix precisions."""
    m = sys.modules.get("tirender.core.math")
    vec3 = getattr(m, "vec3", None) if m is not None else None
    if vec3 is None:
        return
    want = ti.f64 if fp == "f64" else ti.f32
    if getattr(vec3, "dtype", want) != want:
        have = "f64" if vec3.dtype == ti.f64 else "f32"
        raise ConfigError(
            f"fp='{fp}' requested, but tirender's kernels were already defined with {have} "
            f"(tirender.core.math was imported before init); call tirender.backend.init(fp='{fp}') "
            f"(or set TIRENDER_FP={fp}) before anything imports tirender's kernels, one fp per process",
            key="fp")


def init(arch="auto", fp=None, debug=False, verbose=False, **kwargs):
    """Initialise Taichi once for this process.

    arch: "auto" (CUDA, then Vulkan if a non-CPU Vulkan device exists, then CPU), "cpu", "cuda" or
          "vulkan" (any Vulkan device Taichi picks, software ones included).
    fp:   "f32" (default) or "f64" (used by the f64 test oracle paths); also read from
          the environment variable ``TIRENDER_FP``. Must be chosen before tirender.core.math is
          imported (ConfigError otherwise).
    verbose: print one line naming the backend chosen and let Taichi's warnings through (also set by
          ``set_verbose``); otherwise Taichi logs errors only and its start-up lines (e.g. "libcuda.so
          lib not found" when CUDA is asked for and missing) are muted at the file descriptors.
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
    _check_fp_frozen(fp)
    tfp = ti.f64 if fp == "f64" else ti.f32
    # advanced_optimization=False: Taichi's extra IR passes cost ~4x compile time on our
    # megakernels (22 s -> 5.4 s for the path tracer) and do not make them faster.
    verbose = verbose or _state["verbose"]
    # num_compile_threads=1: Taichi's default (4 here) compiles a kernel's offloaded tasks in parallel,
    # each thread with its own LLVM state; our kernels are one big task, so the extra threads only
    # add memory (cold compile of the cbox path + PRB kernels: peak RSS 338 -> 263 MB, the volume
    # task's 387 -> 328 MB; same seconds).
    # offline_cache_max_size_of_files: Taichi's default cap (100 MB, then a quarter of the files dropped, least
    # recently used first) is smaller than the kernels of one of our workflows with its variants; past it every
    # process's exit evicts kernels that the next run compiles again (KERNEL_CACHE_MB)
    kw = dict(offline_cache=True, log_level=ti.WARN if verbose else ti.ERROR, random_seed=0, debug=debug,
              advanced_optimization=False, num_compile_threads=1,
              offline_cache_max_size_of_files=kernel_cache_bytes())
    kw.update(kwargs)
    if arch == "auto":
        chosen = "cpu"
        for cand in ("cuda", "vulkan"):
            if cand == "cuda" and not has_cuda_driver():
                continue   # no CUDA driver library: skip the trial (an initialised-then-reset Taichi keeps ~47 MB)
            if cand == "vulkan" and not has_hardware_vulkan():
                continue   # no Vulkan, or only a software (CPU-type) one: the CPU backend is faster
            try:
                # silent trial: no fallback to the CPU, errors only, fds 1/2 muted
                if _try_init(cand, tfp, quiet_fds=True, enable_fallback=False, **dict(kw, log_level=ti.ERROR)):
                    chosen = cand
                    ti.set_logging_level(kw["log_level"])   # back from the trial's ERROR
                    break
                ti.reset()
            except Exception:  # noqa: BLE001
                ti.reset()
        if chosen == "cpu":
            _try_init("cpu", tfp, quiet_fds=not verbose, **kw)
    else:
        ok = False
        try:
            ok = _try_init(arch, tfp, quiet_fds=not verbose, enable_fallback=False, **kw)
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            ti.reset()
            raise ConfigError(f"arch '{arch}' is not available on this machine", key="arch")
        chosen = arch
    _state["arch"], _state["fp"] = chosen, fp
    if verbose:
        print(describe())
    return chosen


def describe():
    """One line naming the backend in use (or "not initialised")."""
    arch = _state["arch"]
    if arch is None:
        return "[tirender] backend: not initialised"
    extra = ""
    if arch == "cpu":
        extra = f", {cpu_threads()} threads"
    elif arch == "vulkan":
        devs = vulkan_devices()
        if devs:
            hw = hardware_vulkan_devices(devs)
            n, t = (hw or devs)[0]
            extra = f", {n} ({VK_DEVICE_TYPES.get(t, t)})"
    return f"[tirender] backend: {arch} ({_state['fp']}{extra})"


def software_vulkan():
    """True when running on Vulkan with no non-CPU Vulkan device about, i.e. on a software rasteriser
    such as lavapipe (whose integer atomics inside loops are unreliable in Mesa 22.3, see tests)."""
    return _state["arch"] == "vulkan" and not has_hardware_vulkan()


def np_float():
    """numpy dtype of Taichi's default float: float64 when initialised with fp='f64', else float32."""
    import numpy as np
    return np.float64 if _state.get("fp") == "f64" else np.float32


CPU_BLOCK = 512   # Taichi 1.7's CPU range-for hands threads blocks of up to 512 iterations


def cpu_threads():
    """Threads of the CPU backend (1 on other backends)."""
    if _state["arch"] != "cpu":
        return 1
    return max(1, int(ti.lang.impl.current_cfg().cpu_max_num_threads))


def spread(n):
    """Stride s for a parallel loop over n long-running items written as ``for i in range(n * s)``
    with the work at i % s == 0: Taichi's CPU scheduler cuts a loop into blocks of up to 512
    iterations (``ti.loop_config(block_dim=...)`` does not change that in 1.7.4), so a loop of 64
    chains runs on one thread; spread over >= 4 blocks per thread, every thread gets items
    (measured: 64 items of equal work, 1 thread -> 2 threads). 1 on GPUs."""
    if _state["arch"] != "cpu" or n <= 0:
        return 1
    want = CPU_BLOCK * 4 * cpu_threads()
    return max(1, -(-want // n))


def current_arch():
    """Name of the backend in use ("cpu", "cuda", "vulkan"), or None before init."""
    return _state["arch"]


def share_kernels(on=None):
    """Whether CPU volume kernels are compiled for a superset of the models volume scenes use, so
    that many different scenes in one process (a test suite) share one compiled kernel; otherwise
    (default) each kernel holds exactly its scene's models: measured on the volume task's gradient
    kernel, a cold compile of 16.0 s instead of 26.2 s and 85 MB less peak RSS. ``on`` sets it
    (the environment variable TIRENDER_SHARE_KERNELS=1 sets it at import); returns the setting."""
    if on is not None:
        _state["share_kernels"] = bool(on)
    return _state["share_kernels"]


def ensure_init():
    if _state["arch"] is None:
        init(os.environ.get("TIRENDER_ARCH", "auto"))
    return _state["arch"]
