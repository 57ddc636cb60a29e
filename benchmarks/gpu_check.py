"""The GPU check: one command for the day a GPU is lent (an NVIDIA H200 with CUDA; see docs/performance.md).

    python benchmarks/gpu_check.py              # on the GPU machine: at most --budget seconds (default 480)
    python benchmarks/gpu_check.py --dry-run    # anywhere: every step on the CPU at toy sizes (< 10 minutes)
    python benchmarks/gpu_check.py --fetch      # beforehand, on a machine that reaches PyPI and Debian: what
                                                # the GPU machine cannot fetch itself, into .whl/ and .gl/

Steps, each timed and reported in one table (printed, and written to benchmarks/results/gpu_check.md
and .json; ``--out DIR`` elsewhere; a dry run writes gpu_check_dry.*):

1. setup: installs the carried wheels (``.whl/**/*.whl``: Taichi, dill, OpenImageIO, Mitsuba 3 + Dr.Jit; Python 3.12
   manylinux builds, slimmed by --fetch to what the check needs) into ``.gpu-site/`` (git-ignored, kept on a
   warm machine between calls, so the wheels can travel in two calls under the 64 MiB limit), unpacks the
   carried Vulkan loader (``.gl/*.deb``) when the machine has none, points Vulkan at the NVIDIA driver's ICD
   and the children at the driver's libraries (Mitsuba's ``cuda_ad_rgb`` loads the machine's libcuda and
   OptiX); then reports the versions and the GPU.
2. tests: ``pytest -m gpu tests/test_gpu.py`` (every integrator's image and gradient, the radiance field,
   MCMC's ``threads`` schedule and torch's in-place device tensors on ``cuda`` and on ``vulkan`` against the
   CPU backend's), one row per part and backend.
3. timings on CUDA beside Mitsuba 3's ``cuda_ad_rgb``, each renderer in fresh processes: the Cornell-box
   forward (256², 64 spp), the PRB step (red wall, 64 + 64 spp), the texture task's and the radiance field's
   iteration (benchmarks/time_to_quality.py's children). Absolute times are valid on a GPU.

The dry run uses the CPU backend for the "devices" (tests: TIRENDER_GPU_DRY=1) and Mitsuba's
``llvm_ad_rgb`` (``scalar_rgb`` without libLLVM) at toy sizes; tests/test_gpu_check.py runs it.

With the device tool (docs/performance.md has the commands): after ``--fetch`` here, one call carrying
``.whl/taichi`` runs ``python3 benchmarks/gpu_check.py --setup-only``, then (while the machine is warm)
one carrying ``.whl/mitsuba`` and ``.gl`` runs ``python3 benchmarks/gpu_check.py``.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import sidebyside  # noqa: E402

SITE = os.path.join(ROOT, ".gpu-site")
WHEELS = os.path.join(ROOT, ".whl")
DEBS = os.path.join(ROOT, ".gl")
NVIDIA = "/usr/local/nvidia"
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
CBOX_XML = os.path.join(ROOT, "tests", "data", "cbox.xml")
# --fetch: (folder under .whl, requirement, path prefixes inside the wheel left out: not needed by the check)
FETCH = [("taichi", "taichi==1.7.4", ("taichi/_lib/c_api/", "taichi-1.7.4.data/", "taichi/assets/")),
         ("taichi", "dill", ()),
         ("taichi", "OpenImageIO==3.2.2.0", ()),      # the texture task's PNG (tirender/io/bitmap.py)
         ("mitsuba", "mitsuba==3.9.1", tuple(f"mitsuba/{v}." for v in (
             "llvm_ad_rgb", "llvm_ad_mono", "llvm_ad_spectral", "llvm_ad_mono_polarized", "llvm_ad_spectral_polarized",
             "cuda_ad_mono", "cuda_ad_spectral", "cuda_ad_mono_polarized", "cuda_ad_spectral_polarized",
             "scalar_mono", "scalar_spectral", "scalar_mono_polarized", "scalar_spectral_polarized"))),
         ("mitsuba", "drjit==1.5.0", ())]
FETCH_DEBS = ("libvulkan1", "libegl1", "libglvnd0", "libopengl0", "libgl1", "libglx0", "libgles2")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


# ----------------------------------------------------------------------------- --fetch (here, before)

def slim_wheel(path, drop):
    """Rewrite wheel `path` without the members whose names start with a prefix in `drop` (and their RECORD
    lines): what travels must fit the device tool's 64 MiB per call."""
    if not drop:
        return
    tmp = path + ".tmp"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if item.filename.startswith(drop):
                continue
            data = zin.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                data = "".join(ln for ln in data.decode().splitlines(True) if not ln.startswith(drop)).encode()
            zout.writestr(item, data)
    os.replace(tmp, path)


def fetch():
    """Download the Python 3.12 x86-64 wheels the GPU machine lacks into .whl/<group>/ (slimmed) and the
    Vulkan/EGL loader packages into .gl/ (device README), and exclude both (and .gpu-site) from git."""
    for group, req, drop in FETCH:
        d = os.path.join(WHEELS, group)
        os.makedirs(d, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", "-d", d, req]
        for p in PLATFORMS:
            cmd[5:5] = ["--platform", p]
        subprocess.run(cmd, check=True)
        name = req.split("==")[0].lower().replace("-", "_")
        for f in os.listdir(d):          # pip may have replaced a slimmed wheel by the full one: slim again
            if f.lower().startswith(name + "-"):
                slim_wheel(os.path.join(d, f), drop)
    os.makedirs(DEBS, exist_ok=True)
    if shutil.which("apt-get"):
        o = ["-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64", "-oDir::State::Lists=/tmp/amd64"]
        os.makedirs("/tmp/amd64/partial", exist_ok=True)
        subprocess.run(["apt-get", *o, "-qq", "update"], check=False)
        subprocess.run(["apt-get", *o, "-qq", "download", *FETCH_DEBS], cwd=DEBS, check=False)
    r = subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], capture_output=True, text=True, cwd=ROOT)
    exclude = os.path.join(ROOT, r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else ""
    if exclude and os.path.isdir(os.path.dirname(exclude)):
        have = open(exclude).read() if os.path.exists(exclude) else ""
        with open(exclude, "a") as fh:
            for pat in ("/.whl/", "/.gl/", "/.gpu-site/"):
                if pat not in have.split():
                    fh.write(pat + "\n")
    for group in sorted({g for g, _, _ in FETCH}):
        mb = sum(os.path.getsize(f) for f in glob.glob(os.path.join(WHEELS, group, "*.whl"))) / 2 ** 20
        print(f".whl/{group}: {mb:.1f} MiB")
    print(f".gl: {len(glob.glob(os.path.join(DEBS, '*.deb')))} packages")


# ----------------------------------------------------------------------------- 1. setup (there)

def child_env(dry):
    """The children's environment: the installed wheels first on PYTHONPATH, the driver's libraries on
    LD_LIBRARY_PATH, Vulkan pointed at the NVIDIA ICD where the driver ships one."""
    env = sidebyside.child_env()
    site = SITE if os.path.isdir(SITE) and not dry else None   # the GPU machine's Python 3.12 wheels: not here
    paths = [p for p in (site, ROOT, env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    libs = [d for d in (os.path.join(NVIDIA, "lib64"), os.path.join(NVIDIA, "lib")) if os.path.isdir(d)]
    if libs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
    icd = os.path.join(NVIDIA, "share", "vulkan", "icd.d", "nvidia_icd.json")
    if os.path.exists(icd) and "VK_DRIVER_FILES" not in env:
        env["VK_DRIVER_FILES"] = icd
        egl = os.path.join(NVIDIA, "share", "glvnd", "egl_vendor.d", "10_nvidia.json")
        if os.path.exists(egl):
            env["__EGL_VENDOR_LIBRARY_FILENAMES"] = egl
    env["PYTHONUNBUFFERED"] = "1"
    if dry:
        env["TIRENDER_GPU_DRY"] = "1"
    return env


def install_wheels(dry):
    """pip-install every carried wheel not installed yet into .gpu-site (no index, no dependencies);
    returns the wheels installed by this call. A dry run installs none: they are built for the GPU
    machine's Python (3.12), which need not be this one."""
    if dry:
        return []
    done_file = os.path.join(SITE, ".installed")
    done = set(open(done_file).read().split()) if os.path.exists(done_file) else set()
    todo = sorted(w for w in glob.glob(os.path.join(WHEELS, "**", "*.whl"), recursive=True)
                  if os.path.basename(w) not in done)
    if todo:
        os.makedirs(SITE, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", SITE, *todo], check=True)
        with open(done_file, "a") as fh:
            fh.write("".join(os.path.basename(w) + "\n" for w in todo))
    return [os.path.basename(w) for w in todo]


def unpack_vulkan_loader(dry):
    """The device README's loader step: unpack .gl/*.deb into / and run ldconfig when no libvulkan is known."""
    debs = sorted(glob.glob(os.path.join(DEBS, "*.deb")))
    known = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout if shutil.which("ldconfig") else ""
    if "libvulkan.so" in known or not debs:
        return "present" if "libvulkan.so" in known else "none carried"
    if dry:
        return f"{len(debs)} carried (left packed: dry run)"
    for d in debs:
        subprocess.run(["dpkg", "-x", d, "/"], check=True)
    subprocess.run(["ldconfig"], check=False)
    return f"unpacked {len(debs)} packages"


PROBE = r"""
import json, os, sys
out = {"python": sys.version.split()[0]}
for m in ("taichi", "numpy", "torch", "mitsuba", "drjit"):
    try:
        mod = __import__(m)
        v = getattr(mod, "__version__", "?")
        out[m] = ".".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    except Exception as e:
        out[m] = "missing (%s)" % str(e).splitlines()[0][:80]
import tirender.backend as b
out["cuda_driver"] = b.has_cuda_driver()
out["vulkan_devices"] = [n for n, t in b.vulkan_devices()]
try:
    import mitsuba as mi
    mi.set_variant(os.environ["MITSUBA_BENCH_VARIANT"])
    out["mitsuba_variant"] = mi.variant()
except Exception as e:
    out["mitsuba_variant"] = "unavailable (%s)" % (str(e).splitlines() or ["?"])[-1][:120]
print("PROBE " + json.dumps(out))
"""


def setup(dry, env):
    t0 = time.perf_counter()
    info = {"wheels_installed": install_wheels(dry), "vulkan_loader": unpack_vulkan_loader(dry)}
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("PROBE ")]
    info.update(json.loads(line[-1][6:]) if line else {"probe": (r.stderr.strip().splitlines() or ["failed"])[-1]})
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        info["gpu"] = q.stdout.strip() or q.stderr.strip()[:160]
    info["seconds"] = time.perf_counter() - t0
    return info


# ----------------------------------------------------------------------------- 2. tests

def run_tests(dry, env, timeout):
    """pytest -m gpu tests/test_gpu.py; returns ({test id: outcome}, summary line, seconds)."""
    import xml.etree.ElementTree as ET
    t0 = time.perf_counter()
    junit = os.path.join(tempfile.mkdtemp(prefix="gpu_check_"), "junit.xml")
    workers = "0" if dry else str(max(1, min(8, (os.cpu_count() or 2) // 2)))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "-n", workers,
           "--dist", "load", f"--junitxml={junit}", os.path.join(ROOT, "tests", "test_gpu.py")]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
        tail = r.stdout.strip().splitlines()[-1:] or ["no output"]
        summary = tail[0]
        log = r.stdout[-6000:] + r.stderr[-3000:]
    except subprocess.TimeoutExpired as e:
        summary, log = f"timed out after {timeout} s", str(e.stdout or "")[-6000:]
    outcomes = {}
    if os.path.exists(junit):
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = case.get("name", "?")
            kids = {c.tag for c in case}
            outcomes[name] = ("failed" if kids & {"failure", "error"} else
                              "skipped: " + (case.find("skipped").get("message", "") or "")[:90] if "skipped" in kids
                              else "passed")
    return outcomes, summary, log, time.perf_counter() - t0


# ----------------------------------------------------------------------------- 3. timings

def _forward(arch, spp, runs, size):
    import numpy as np
    import tirender
    tirender.init(arch)
    sc = tirender.load_scene(CBOX, overrides=[f"sensors.0.film.width={size}", f"sensors.0.film.height={size}"])
    ts = sidebyside.timed(lambda k: tirender.render(sc, spp=spp, seed=k, progress=False), runs)
    return {"seconds": ts, "median": float(np.median(ts)), "peak_rss_mb": sidebyside._rss_mb()}


def _prb_step(arch, spp, runs, size):
    import numpy as np
    import tirender
    tirender.init(arch)
    from tirender.optim import losses
    sc = tirender.load_scene(CBOX, overrides=[f"sensors.0.film.width={size}", f"sensors.0.film.height={size}"])
    target = tirender.render(sc, spp=4, seed=99, progress=False)
    sc.params["red.reflectance"] = [0.5, 0.5, 0.5]

    def step(k):
        img = tirender.render(sc, spp=spp, seed=2 * k, progress=False)
        return tirender.render_grad(sc, losses.l2(img, target)[1], spp=spp, seed=2 * k + 1, progress=False)
    ts = sidebyside.timed(step, runs)
    return {"seconds": ts, "median": float(np.median(ts)), "peak_rss_mb": sidebyside._rss_mb()}


CHILDREN = {"forward": _forward, "prb_step": _prb_step}


def _child(env, args, timeout):
    """This file's --child in a fresh process; its dict (or {"error": last line})."""
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(args)],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _mitsuba(env, name, args, timeout, **kw):
    payload = json.dumps([name, args, kw])
    try:
        r = subprocess.run([sys.executable, os.path.join(HERE, "sidebyside.py"), "--child", payload],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    d = json.loads(r.stdout.strip().splitlines()[-1])
    d["median"] = sorted(d["seconds"])[len(d["seconds"]) // 2]
    return d


def _task(env, task, iters, timeout):
    """(tirender, Mitsuba) seconds per iteration of a time_to_quality task (iterations 2..n: the first
    carries the kernels' compilation)."""
    import time_to_quality as tq
    spec_fn, ti_child, mi_child, _, _ = tq.TASKS[task]
    spec = spec_fn(iters)
    out = tempfile.mkdtemp(prefix=f"gpu_check_{task}_")
    res = {}
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)           # time_to_quality.run_child builds its children's environment from ours
    try:
        if spec.get("data_child"):
            tq.run_child(spec["data_child"], spec, os.path.join(out, "data"), os.path.join(out, "data.log"))
        for label, child in (("tirender", ti_child), ("mitsuba", mi_child)):
            try:
                rows = tq.run_child(child, spec, os.path.join(out, label), os.path.join(out, f"{label}.log"))["rows"]
                secs = [r["seconds"] for r in rows]
                res[label] = {"median": (secs[-1] - secs[0]) / max(len(secs) - 1, 1), "iterations": len(secs)}
            except RuntimeError as e:
                res[label] = {"error": str(e)[-200:]}
    finally:
        os.environ.clear()
        os.environ.update(old)
    return res


def run_bench(dry, env, deadline):
    """Rows (workload, tirender, Mitsuba): seconds on CUDA beside cuda_ad_rgb (dry: CPU beside llvm_ad_rgb)."""
    arch = "cpu" if dry else "cuda"
    spp, size, runs, iters = (4, 64, 1, 2) if dry else (64, 256, 3, 12)
    rows = []
    plan = [("Cornell-box forward, %d², %d spp" % (size, spp), lambda t: _child(env, ["forward", arch, spp, runs, size], t),
             lambda t: _mitsuba(env, "mitsuba_forward", [CBOX_XML, spp, runs], t, res=size)),
            ("PRB step (red wall), %d² %d + %d spp" % (size, spp, spp),
             lambda t: _child(env, ["prb_step", arch, spp, runs, size], t),
             lambda t: _mitsuba(env, "mitsuba_prb_step", [CBOX_XML, "red.reflectance.value", 0.5, spp, spp,
                                                          runs], t, res=size)),
            ("texture task, per iteration (%d iterations)" % iters, None, "texture"),
            ("radiance field, per iteration (%d iterations)" % iters, None, "radiance_field")]
    for title, ti_fn, mi_fn in plan:
        left = deadline - time.time()
        if left < 30:
            rows.append((title, {"error": "skipped: the time budget is spent"}, {"error": "skipped"}))
            continue
        if ti_fn is None:
            r = _task(env, mi_fn, iters, left)
            rows.append((title, r.get("tirender", {"error": "?"}), r.get("mitsuba", {"error": "?"})))
        else:
            t = ti_fn(left)
            rows.append((title, t, mi_fn(deadline - time.time()) if deadline - time.time() > 20 else {"error": "skipped"}))
    return rows


# ----------------------------------------------------------------------------- the table

def _cell(d):
    if "error" in d:
        return "— (" + d["error"] + ")"
    return f"{d['median']:.3f} s" + (f", {d['peak_rss_mb']:.0f} MB" if d.get("peak_rss_mb") else "")


def table(info, tests, bench, dry, total):
    outcomes, summary, _, t_tests = tests
    arch, variant = ("cpu", info.get("mitsuba_variant")) if dry else ("cuda", "cuda_ad_rgb")
    lines = [f"# GPU check{' (dry run: the CPU stands in for the devices)' if dry else ''}", "",
             f"{time.strftime('%Y-%m-%d %H:%M')}; GPU: {info.get('gpu', 'none')}; Python {info.get('python')}, "
             f"Taichi {info.get('taichi')}, Mitsuba {info.get('mitsuba')} ({info.get('mitsuba_variant')}), "
             f"torch {info.get('torch')}; CUDA driver: {info.get('cuda_driver')}; Vulkan devices: "
             f"{', '.join(info.get('vulkan_devices') or []) or 'none'}; Vulkan loader: {info.get('vulkan_loader')}; "
             f"wheels installed now: {len(info.get('wheels_installed') or [])}; setup {info.get('seconds', 0):.0f} s",
             "", f"## Tests (`pytest -m gpu tests/test_gpu.py`, {t_tests:.0f} s): {summary}", "",
             "| case | outcome |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in sorted(outcomes.items())]
    lines += ["", f"## Timings: tirender on `{arch}` beside Mitsuba 3 `{variant}` (fresh processes, medians after a "
              "warm-up)", "", "| workload | tirender | Mitsuba 3 | ratio |", "| --- | --- | --- | --- |"]
    for title, t, m in bench:
        ratio = f"{t['median'] / m['median']:.2f}×" if "error" not in t and "error" not in m and m["median"] > 0 else "—"
        lines.append(f"| {title} | {_cell(t)} | {_cell(m)} | {ratio} |")
    lines += ["", f"Total {total:.0f} s."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU at toy sizes")
    ap.add_argument("--fetch", action="store_true", help="download what the GPU machine needs into .whl/ and .gl/")
    ap.add_argument("--setup-only", action="store_true", help="install the carried wheels and stop")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="folder of gpu_check.md / .json")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check (default 480)")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        name, *args = json.loads(a.child)
        print(json.dumps(CHILDREN[name](*args)))
        return
    if a.fetch:
        fetch()
        return
    t0 = time.time()
    deadline = t0 + a.budget
    env = child_env(a.dry_run)
    if a.dry_run:
        env["TIRENDER_BENCH_ARCH"] = "cpu"
        ok = os.path.exists(env.get("DRJIT_LIBLLVM_PATH", ""))
        env["MITSUBA_BENCH_VARIANT"] = "llvm_ad_rgb" if ok else "scalar_rgb"
    else:
        env["TIRENDER_BENCH_ARCH"] = "cuda"
        env["MITSUBA_BENCH_VARIANT"] = "cuda_ad_rgb"
    info = setup(a.dry_run, env)
    print("setup: " + json.dumps(info), flush=True)
    if a.setup_only:
        return
    tests = ({}, "skipped (--skip-tests)", "", 0.0) if a.skip_tests else \
        run_tests(a.dry_run, env, max(60.0, 0.55 * (deadline - time.time())))
    print(f"tests: {tests[1]} ({tests[3]:.0f} s)", flush=True)
    if "failed" in tests[1] or "error" in tests[1]:
        print(tests[2])
    bench = [] if a.skip_bench else run_bench(a.dry_run, env, deadline)
    text = table(info, tests, bench, a.dry_run, time.time() - t0)
    print(text)
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, "gpu_check_dry" if a.dry_run else "gpu_check")
    with open(stem + ".md", "w") as fh:
        fh.write(text)
    with open(stem + ".json", "w") as fh:
        json.dump({"info": info, "tests": {"outcomes": tests[0], "summary": tests[1], "seconds": tests[3]},
                   "bench": [{"workload": t, "tirender": x, "mitsuba": m} for t, x, m in bench]}, fh, indent=1)
    print(f"written: {stem}.md, {stem}.json")
    failed = any(v == "failed" for v in tests[0].values()) or ("failed" in tests[1])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
