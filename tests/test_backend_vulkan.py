"""Backend choice and the Vulkan subset.

* The Vulkan probe's decision logic on fake device lists (no Vulkan needed), and that the probe
  never raises.
* In child processes (one ``ti.init`` per process): "auto" never picks a CPU-type (software) Vulkan
  device, no Taichi banner reaches stdout, ``verbose`` prints one line, and fp='f64' after
  tirender.core.math was imported is a ConfigError.
* Where a Vulkan device exists (Mesa's lavapipe counts: ``apt-get install mesa-vulkan-drivers``):
  radiance-field training steps on Vulkan agree with the CPU's; so do the GRIN images, ray counts
  and gradients (tirender/grin); the BVH kernels (scene/bvh_build.py) build the CPU's tree.

Run the child of the last test by hand: ``TIRENDER_ARCH=vulkan python tests/test_backend_vulkan.py --rf-child``
(``--grin-child`` for the GRIN test's).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import tirender.backend as backend  # noqa: E402
from tirender import vkprobe  # noqa: E402

CPU = backend.VK_PHYSICAL_DEVICE_TYPE_CPU


def _child(code=None, args=(), **env):
    e = dict(os.environ, PYTHONPATH=ROOT)
    e.pop("TIRENDER_ARCH", None)
    e.pop("TIRENDER_FP", None)
    e.update(env)
    cmd = [sys.executable] + (["-c", code] if code is not None else list(args))
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=900)


# ----------------------------------------------------------------------------- probe logic (no Vulkan needed)

def test_hardware_filter_drops_cpu_type_devices():
    lavapipe = ("llvmpipe (LLVM 15.0.6, 256 bits)", CPU)
    swiftshader = ("SwiftShader Device (Subzero)", CPU)
    assert backend.hardware_vulkan_devices([]) == []
    assert backend.hardware_vulkan_devices([lavapipe, swiftshader]) == []
    for t in (0, 1, 2, 3):   # other, integrated, discrete, virtual GPU
        assert backend.hardware_vulkan_devices([lavapipe, ("gpu", t)]) == [("gpu", t)]


def test_has_hardware_vulkan_uses_the_probe(monkeypatch):
    monkeypatch.setattr(backend, "vulkan_devices", lambda: [("llvmpipe", CPU)])
    assert not backend.has_hardware_vulkan()
    monkeypatch.setattr(backend, "vulkan_devices", lambda: [("llvmpipe", CPU), ("NVIDIA H100", 2)])
    assert backend.has_hardware_vulkan()
    monkeypatch.setattr(backend, "vulkan_devices", lambda: [])
    assert not backend.has_hardware_vulkan()


def test_software_vulkan(monkeypatch):
    monkeypatch.setattr(backend, "vulkan_devices", lambda: [("llvmpipe", CPU)])
    monkeypatch.setitem(backend._state, "arch", "vulkan")
    assert backend.software_vulkan()
    monkeypatch.setattr(backend, "vulkan_devices", lambda: [("llvmpipe", CPU), ("Radeon", 1)])
    assert not backend.software_vulkan()
    monkeypatch.setitem(backend._state, "arch", "cpu")
    assert not backend.software_vulkan()


class _FakeFn:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *a):
        return self.fn(*a)


class _FakeLoader:
    """A libvulkan stand-in whose vkCreateInstance fails (or raises)."""

    def __init__(self, result=-9, exc=None):
        def create(*a):
            if exc:
                raise exc
            return result
        self.vkCreateInstance = _FakeFn(create)
        self.vkEnumeratePhysicalDevices = _FakeFn(lambda *a: 0)
        self.vkGetPhysicalDeviceProperties = _FakeFn(lambda *a: None)
        self.vkDestroyInstance = _FakeFn(lambda *a: None)


@pytest.mark.parametrize("loader", ["missing", "init_fails", "raises"])
def test_probe_never_raises(monkeypatch, loader):
    def cdll(name, *a, **k):
        if loader == "missing":
            raise OSError(f"{name}: cannot open shared object file")
        if loader == "init_fails":
            return _FakeLoader(result=-9)          # VK_ERROR_INCOMPATIBLE_DRIVER
        return _FakeLoader(exc=RuntimeError("broken ICD"))
    monkeypatch.setattr(vkprobe.ctypes, "CDLL", cdll)
    assert vkprobe.devices() == []


def test_probe_runs_in_a_child_and_agrees_with_an_in_process_probe():
    """vulkan_devices() runs tirender/vkprobe.py in a child process (the drivers it loads stay out of
    this one); it reports what the same probe reports here."""
    assert backend.vulkan_devices() == [tuple(d) for d in vkprobe.devices()]


def test_probe_is_cached_and_cheap():
    import time
    backend.vulkan_devices()
    t = time.perf_counter()
    for _ in range(100):
        backend.vulkan_devices()
    assert time.perf_counter() - t < 0.05


# ----------------------------------------------------------------------------- init in child processes

def test_auto_never_picks_a_software_vulkan_device_and_is_silent():
    devs = backend.vulkan_devices()
    r = _child("import tirender.backend as b; print('CHOSEN', b.init('auto'))")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == [f"CHOSEN {lines[-1].split()[-1]}"], r.stdout   # nothing but our line: no Taichi banner
    chosen = lines[-1].split()[-1]
    if devs and not backend.hardware_vulkan_devices(devs):
        assert chosen in ("cpu", "cuda"), (chosen, devs)             # lavapipe & co. present, never chosen
    from child_util import machine_has_cuda
    if machine_has_cuda():                                           # what the machine has decides
        assert chosen == "cuda", chosen
    elif not backend.hardware_vulkan_devices(devs):
        assert chosen == "cpu", (chosen, devs)
    if chosen == "cpu":
        for noise in ("libcuda", "falling back", "[Taichi]"):        # the failed CUDA trial stays quiet
            assert noise not in r.stderr, r.stderr


def test_verbose_prints_one_line_and_no_banner():
    r = _child("import tirender.backend as b; b.init('cpu', verbose=True)")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1 and r.stdout.startswith("[tirender] backend: cpu (f32"), r.stdout
    assert "[Taichi]" not in r.stdout + r.stderr


def test_f64_after_core_math_import_is_a_config_error():
    r = _child("import tirender.backend as b, tirender.core.math\n"
               "try:\n    b.init('cpu', fp='f64')\nexcept b.ConfigError as e:\n    print('ERR', e)\n"
               "else:\n    print('no error')")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERR") and "f64" in r.stdout and "tirender.core.math" in r.stdout, r.stdout


def test_f64_before_core_math_import_still_works():
    r = _child("import tirender.backend as b; b.init('cpu', fp='f64'); import tirender.core.math as m, taichi as ti;"
               " print(m.vec3.dtype == ti.f64)")
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr


# ----------------------------------------------------------------------------- radiance field on Vulkan vs CPU

RF_STEPS = 6
RF_CFG = {
    "seed": 3,
    "dataset": {"type": "procedural", "views": 3, "heldout": 1, "width": 24, "height": 24, "gt_res": 16},
    "field": {"sh_degree": 1, "init_density": 0.05},
    "train": {"stages": [{"res": 10, "iters": RF_STEPS}], "batch": 512, "eval_spp": 1},
}


def rf_training():
    """Prepare a Trainer of RF_CFG (compiles every radiance-field kernel the loop uses) and run RF_STEPS
    training steps: {"losses", "params" (flat list), "heldout_psnr" (dB)}."""
    import importlib
    T = importlib.import_module("tirender.radiance_field.train")   # the package's `train` is a function
    cfg = T.parse_config(RF_CFG)
    ds = T.load_dataset(cfg)
    tr = T.Trainer(cfg, ds, log=lambda *a: None)
    tr.prepare()
    tr.enter_stage(0)
    losses = [float(tr.step(it)) for it in range(RF_STEPS)]
    p = tr.field.to_numpy().astype(np.float64)
    img = tr.render_views(ds.heldout)[0]
    return {"losses": losses, "params": p.reshape(-1).tolist(),
            "heldout_psnr": float(T.psnr(img, ds.images[ds.heldout[0]]))}


def _rf_child():
    """Child process: rf_training() on TIRENDER_ARCH, printed as JSON on the last line."""
    arch = backend.init(os.environ.get("TIRENDER_ARCH", "cpu"))
    print("RF-RESULT " + json.dumps(dict(rf_training(), arch=arch)))


def _run_rf(arch):
    r = _child(args=[os.path.abspath(__file__), "--rf-child"], TIRENDER_ARCH=arch)
    if r.returncode != 0 and arch == "vulkan" and "not available" in r.stderr:
        pytest.skip("Taichi cannot start its Vulkan backend here")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RF-RESULT ")][-1]
    return json.loads(line[len("RF-RESULT "):])


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_radiance_field_training_on_vulkan_matches_cpu():
    cpu, vk = _run_rf("cpu"), _run_rf("vulkan")
    assert vk["arch"] == "vulkan" and cpu["arch"] == "cpu"
    # Same rays, same initial grid, same Adam: only float rounding differs (f32 atomic scatter in
    # another order on Vulkan, other summation orders, SPIR-V vs LLVM math). Measured (lavapipe,
    # Mesa 22.3): losses within 7e-7 relative, parameters within 6.5e-5 (mean 1.8e-6), held-out PSNR
    # within 1e-6 dB. Losses are sums over 512 rays: rtol 1e-4 leaves 100x room for the grids drifting
    # apart over the steps.
    np.testing.assert_allclose(vk["losses"], cpu["losses"], rtol=1e-4)
    # Adam moves a value by about lr per step whatever the gradient's size, so a ~0 gradient whose sign
    # differs by rounding can put that one value up to 2·lr·steps apart (lr_density = 0.2): the worst
    # value is bounded by that, the 99th percentile by 1e-3 and the mean by 2e-5 (10x the measured).
    dp = np.abs(np.asarray(vk["params"]) - np.asarray(cpu["params"]))
    assert dp.max() <= 2 * 0.2 * RF_STEPS, dp.max()
    assert np.percentile(dp, 99) < 1e-3, np.percentile(dp, 99)
    assert np.mean(dp) < 2e-5, np.mean(dp)
    assert abs(vk["heldout_psnr"] - cpu["heldout_psnr"]) < 0.01, (vk["heldout_psnr"], cpu["heldout_psnr"])


# ----------------------------------------------------------------------------- path tracer, PRB, prbvolpath on Vulkan

VOLUME = {
    "integrator": {"type": "prbvolpath", "max_depth": 6},   # the in-scattering quadrature (8 points)
    "sensors": [{"fov": 40, "to_world": {"look_at": {"origin": [0, 0, 4], "target": [0, 0, 0], "up": [0, 1, 0]}},
                 "film": {"width": 24, "height": 24, "filter": {"type": "box"}}}],
    "media": {"smoke": {"type": "grid", "density": {"type": "grid", "resolution": 4, "value": 1.0}, "scale": 1.5,
                        "albedo": 0.8, "phase": {"type": "hg", "g": 0.3}}},
    "shapes": [{"id": "box", "type": "cube", "bsdf": {"type": "null"}, "interior": "smoke",
                "to_world": {"scale": 0.8}},
               {"id": "floor", "type": "rectangle", "bsdf": {"type": "diffuse", "reflectance": 0.5},
                "to_world": [{"scale": 3}, {"rotate": {"axis": [1, 0, 0], "angle": -90}}, {"translate": [0, -1, 0]}]}],
    "emitters": [{"type": "constant", "radiance": 1.0}],
}


def caustic_scene():
    """configs/caustic.yaml at 24² with a wavy height field on its lens (attached PRB gradients)."""
    import tirender
    from tirender.config import load_config
    cc = load_config(os.path.join(ROOT, "configs", "caustic.yaml"))["scene"]
    cc["sensors"][0]["film"].update(width=24, height=24)
    cs = tirender.load_scene(cc)
    y, x = np.mgrid[0:16, 0:16] / 16.0
    cs.params["lens.height"] = (0.03 * np.sin(6 * x) * np.cos(5 * y))[..., None]
    return cs


def _render_results(part):
    """On this process's backend: part "core": the cbox image, a PRB gradient of it, a prbvolpath image
    ("core_full": and its gradient); part "extras": coherent MCMC, the light tracer (image and gradients) and a height field's image and
    attached gradients (caustic design); part "lite": of those the MCMC image, the light tracer's image and the
    height field's gradients (one kernel each)."""
    import tirender
    out = {"arch": backend.current_arch()}
    cbox = os.path.join(ROOT, "configs", "cbox.yaml")
    if part in ("core", "core_full"):
        sc = tirender.load_scene(cbox, overrides=["sensors.0.film.width=48", "sensors.0.film.height=48"])
        img = tirender.render(sc, spp=16, seed=5, progress=False)
        g = tirender.render_grad(sc, np.ones_like(img), spp=16, seed=3, progress=False)
        vs = tirender.load_scene(VOLUME)
        vimg = tirender.render(vs, spp=8, seed=1, progress=False)
        out.update({"img": img.reshape(-1).tolist(), "vimg": vimg.reshape(-1).tolist(),
                    "grad": {k: g[k].reshape(-1).tolist() for k in ("red.reflectance", "white.reflectance", "light.radiance")}})
        if part == "core_full":     # prbvolpath's replay kernel: the largest lavapipe compile
            vg = tirender.render_grad(vs, np.ones_like(vimg), spp=8, seed=2, progress=False)
            out["vgrad"] = {k: vg[k].reshape(-1).tolist() for k in ("smoke.density", "smoke.albedo", "smoke.g")}
        return out
    full = part == "extras"     # "lite": one kernel per feature (the default lane); "extras": every one
    px = 48 if full else 24
    sc = tirender.load_scene(cbox, overrides=[f"sensors.0.film.width={px}", f"sensors.0.film.height={px}"])
    ms = tirender.load_scene(cbox, overrides=["sensors.0.film.width=24", "sensors.0.film.height=24",
                                              "integrator.type=coherent_mcmc", "integrator.hide_emitters=true",
                                              "integrator.chains=256", "integrator.schedule=threads"])
    mimg = tirender.render(ms, spp=64 if full else 32, seed=4, progress=False)
    pt = tirender.render(sc, spp=8, seed=6, integrator="ptracer", progress=False)   # light tracing: splats
    cs = caustic_scene()     # height field: attached gradients
    cg = tirender.render_grad(cs, np.ones((24, 24, 3), np.float32), spp=4, seed=9, progress=False)
    out.update({"mimg": mimg.reshape(-1).tolist(), "ptimg": pt.reshape(-1).tolist(),
                "cgrad": {"lens.height": cg["lens.height"].reshape(-1).tolist()}})
    if full:
        ps = tirender.load_scene(cbox, overrides=["sensors.0.film.width=24", "sensors.0.film.height=24",
                                                  "integrator.type=ptracer"])
        pg = tirender.render_grad(ps, np.ones((24, 24, 3), np.float32), spp=8, seed=7, progress=False)
        cimg = tirender.render(cs, spp=4, seed=8, progress=False)
        out.update({"cimg": cimg.reshape(-1).tolist(),
                    "ptgrad": {k: pg[k].reshape(-1).tolist() for k in ("red.reflectance", "white.reflectance",
                                                                       "light.radiance")}})
    return out


def _render_child(part):
    backend.init(os.environ.get("TIRENDER_ARCH", "cpu"))
    print("RENDER-RESULT " + json.dumps(_render_results(part)))


def _start_render_vulkan(part):
    """Start the Vulkan child (it runs while this process computes the CPU half); ``_finish`` collects it."""
    e = dict(os.environ, PYTHONPATH=ROOT, TIRENDER_ARCH="vulkan")
    e.pop("TIRENDER_FP", None)
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--render-child", part], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e)


def _finish_render_vulkan(p):
    try:
        out, err = p.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 0, out[-2000:] + err[-4000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RENDER-RESULT ")][-1]
    return json.loads(line[len("RENDER-RESULT "):])


def _compare_with_vulkan(part, images, gradients):
    """The same seeds give the same paths on both backends: images agree to float rounding (the film
    accumulates in fixed point on both); gradients to float rounding of the atomic adds (fixed point on
    the CPU, f32 on the software Vulkan device)."""
    if backend.current_arch() != "cpu":
        pytest.skip("compares with this test process's CPU results")
    child = _start_render_vulkan(part)
    try:
        cpu = json.loads(json.dumps(_render_results(part)))   # this (the CPU test) process, meanwhile
    finally:
        vk = _finish_render_vulkan(child)
    assert vk["arch"] == "vulkan" and cpu["arch"] == "cpu"
    for key in images:
        a, b = np.asarray(cpu[key]), np.asarray(vk[key])
        assert np.abs(a - b).max() < 1e-3 * max(a.max(), 1.0), (key, np.abs(a - b).max())
        assert abs(a.mean() - b.mean()) < 1e-5 * a.mean(), key
    for grads in gradients:
        for name, a in cpu[grads].items():
            a, b = np.asarray(a), np.asarray(vk[grads][name])
            assert np.abs(a - b).max() <= 1e-3 * np.abs(a).max() + 1e-6, (name, a[:6], b[:6])


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_path_tracer_prb_and_prbvolpath_on_vulkan_match_cpu():
    """The path tracer and PRB (image and gradients) and prbvolpath (image) on Vulkan equal the CPU's (the
    extended lane: prbvolpath's gradients too)."""
    _compare_with_vulkan("core", ("img", "vimg"), ("grad",))


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.extended     # prbvolpath's replay kernel on lavapipe and on the CPU: ~2 min of the default lane
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_prbvolpath_gradients_on_vulkan_match_cpu():
    """prbvolpath's gradients (a grid medium's density, albedo and g) on Vulkan equal the CPU's."""
    _compare_with_vulkan("core_full", ("img", "vimg"), ("grad", "vgrad"))


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.extended     # lavapipe compiles these kernels in minutes (390 s measured): the CPU lane checks the
#                           features, the default lane checks Vulkan on the path tracer, PRB and the radiance field
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_mcmc_light_tracer_and_caustic_on_vulkan_match_cpu_lite():
    """One kernel per feature on Vulkan against the CPU: coherent MCMC in its `threads` schedule (counter-based
    random numbers), the light tracer's image, attached gradients through a height field (the extended lane:
    the light tracer's gradients and the height field's image too)."""
    _compare_with_vulkan("lite", ("mimg", "ptimg"), ("cgrad",))


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.extended     # 200 s of compilation cold (lavapipe and CPU): run with --extended
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_mcmc_light_tracer_and_caustic_on_vulkan_match_cpu():
    """Coherent MCMC in its `threads` schedule (counter-based random numbers: the same decisions on both
    backends), the light tracer (image, gradients) and attached gradients through a height field."""
    _compare_with_vulkan("extras", ("mimg", "ptimg", "cimg"), ("ptgrad", "cgrad"))


# ----------------------------------------------------------------------------- GRIN optics on Vulkan vs CPU

GRIN_RAYS = 32      # rays per side and view
GRIN_RES = 8


def _grin_child(backward=True):
    """Child process: configs/grin.yaml's two views (GRIN_RAYS² rays each) through a perturbed
    GRIN_RES³ grid: images, ray counts and loss gradient (render, loss, replayed adjoint), at the
    config's step (~26 RK4 steps per ray) and at h = 0.0035 (~290: the checkpoint spacing K doubles
    to 8 and the backward pass replays segments of 8 steps). The same two kernels serve both (lavapipe compiles
    each big kernel for ~40 s when its shader cache is cold). JSON on the last line."""
    arch = backend.init(os.environ.get("TIRENDER_ARCH", "cpu"))
    from tirender.config import load_config
    from tirender.grin.train import Trainer, parse_config
    cfg = parse_config(load_config(os.path.join(ROOT, "configs", "grin.yaml")))
    for v in cfg["views"]:
        v["rays_per_side"] = GRIN_RAYS
    tr = Trainer(cfg, log=lambda *a: None)
    tr.prepare()
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, GRIN_RES),) * 3, indexing="ij")
    data = 1.3 + 0.08 * np.sin(2.1 * x + 0.3) * np.cos(1.7 * y) + 0.06 * np.sin(2.5 * z + 1.1 * x)
    g = tr.grid
    g.set(data)
    out = {"arch": arch}
    for name, step in (("", tr.proj.step), ("long_", 0.0035)):
        tr.proj.step = step
        imgs = tr.proj.render(g, 1)
        out.update({name + "img": [im.reshape(-1).tolist() for im in imgs], name + "stats": tr.proj.last_stats})
        if backward:
            _loss, _per, adj = tr.loss(imgs)
            tr.proj.backward(g, adj, 1)
            out[name + "grad"] = g.grad_numpy().reshape(-1).tolist()
    print("GRIN-RESULT " + json.dumps(out))


def _run_grin(arch, backward=True):
    r = _child(args=[os.path.abspath(__file__), "--grin-child"] + ([] if backward else ["--render-only"]),
               TIRENDER_ARCH=arch)
    if r.returncode != 0 and arch == "vulkan" and "not available" in r.stderr:
        pytest.skip("Taichi cannot start its Vulkan backend here")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("GRIN-RESULT ")][-1]
    return json.loads(line[len("GRIN-RESULT "):])


def _assert_grin_images_agree(cpu, vk, run):
    assert vk[run + "stats"] == cpu[run + "stats"], run
    for k, (a, b) in enumerate(zip(cpu[run + "img"], vk[run + "img"])):
        a, b = np.asarray(a), np.asarray(b)
        assert a.max() > 0, (run, k)
        assert np.abs(a - b).max() <= 1e-5 * a.max(), (run, k, np.abs(a - b).max(), a.max())
        assert abs(a.sum() - b.sum()) <= 1e-5 * a.sum(), (run, k, a.sum(), b.sum())


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.extended     # lavapipe compiles these kernels in minutes (390 s measured): the CPU lane checks the
#                           features, the default lane checks Vulkan on the path tracer, PRB and the radiance field
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_grin_images_on_vulkan_match_cpu():
    """The GRIN images (render kernel only) on both backends: the same ray counts, the images to float rounding
    (the splats' float atomics on a software Vulkan device; its integer atomics inside loops lost 39 % of a
    view's additions: 81 % image error). The extended lane: the gradients too."""
    cpu, vk = _run_grin("cpu", backward=False), _run_grin("vulkan", backward=False)
    assert vk["arch"] == "vulkan" and cpu["arch"] == "cpu"
    for run in ("", "long_"):
        _assert_grin_images_agree(cpu, vk, run)


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
@pytest.mark.extended
def test_grin_images_and_gradients_on_vulkan_match_cpu():
    """The same rays on both backends: the ray counts agree exactly, the images to float rounding and
    the gradients to the rounding of their sums (i64 fixed point on the CPU; float atomics on a
    software Vulkan device, whose integer atomics inside loops lose additions: tirender/grin/field.py).
    Measured (lavapipe, Mesa 22.3): images within 2.1e-6 of their maximum, gradients within 4e-6.
    Before the float path, view z's image was 81 % off (39 % of its splat additions lost) and the
    gradient 47 %."""
    cpu, vk = _run_grin("cpu"), _run_grin("vulkan")
    assert vk["arch"] == "vulkan" and cpu["arch"] == "cpu"
    for run in ("", "long_"):
        _assert_grin_images_agree(cpu, vk, run)
        a, b = np.asarray(cpu[run + "grad"]), np.asarray(vk[run + "grad"])
        assert np.abs(a).max() > 0, run
        assert np.abs(a - b).max() <= 1e-3 * np.abs(a).max(), (run, np.abs(a - b).max(), np.abs(a).max())
        assert np.linalg.norm(a - b) <= 1e-4 * np.linalg.norm(a), (run, np.linalg.norm(a - b) / np.linalg.norm(a))


_BVH_CHILD = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import tirender.backend as backend
arch = backend.init(sys.argv[1])
from tirender.scene.bvh_build import build_bvh, build_wide
from test_bvh_build import structured_mesh
v0, v1, v2 = structured_mesh(np.random.default_rng(11))
b = build_bvh(v0, v1, v2)
T = len(v0)
w = build_wide(np.concatenate([v0, v1, v2]), np.arange(3 * T, dtype=np.int32).reshape(3, T).T).wide
np.savez(sys.argv[2], arch=arch, first=b.node_first, count=b.node_count, lo=b.node_min, hi=b.node_max,
         order=b.prim_order, wmin=w.box_min, wmax=w.box_max, wchild=w.child, wcount=w.count)
"""


@pytest.mark.slow
@pytest.mark.vulkan
@pytest.mark.skipif(not backend.vulkan_devices(), reason="no Vulkan device (apt-get install mesa-vulkan-drivers)")
def test_bvh_build_on_vulkan_matches_cpu(tmp_path):
    """The BVH kernels (scene/bvh_build.py) build the CPU's tree on Vulkan, bit for bit (binary and 4-wide), on a
    mesh whose top nodes are binned in parallel chunks (lavapipe: 40-160 s of compilation). Before the chunks'
    bins and bounds were merged without atomics and the big nodes' loops split into kernels, Taichi's SPIR-V
    backend failed to compile the build, and then built a valid tree that split one triangle off per level."""
    script = tmp_path / "bvh_child.py"
    script.write_text(_BVH_CHILD)
    trees = {}
    for arch in ("cpu", "vulkan"):
        out = tmp_path / f"{arch}.npz"
        r = _child(args=[str(script), arch, str(out), os.path.join(ROOT, "tests")])
        if r.returncode != 0 and arch == "vulkan" and "not available" in r.stderr:
            pytest.skip("Taichi cannot start its Vulkan backend here")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
        trees[arch] = np.load(out)
    assert str(trees["vulkan"]["arch"]) == "vulkan" and str(trees["cpu"]["arch"]) == "cpu"
    for k in set(trees["cpu"].files) - {"arch"}:
        assert np.array_equal(trees["cpu"][k], trees["vulkan"][k]), k


if __name__ == "__main__" and "--rf-child" in sys.argv:
    _rf_child()
if __name__ == "__main__" and "--grin-child" in sys.argv:
    _grin_child(backward="--render-only" not in sys.argv)
if __name__ == "__main__" and "--render-child" in sys.argv:
    _render_child(sys.argv[sys.argv.index("--render-child") + 1])
