"""The GPU subset (marker ``gpu``): on every GPU backend this machine has, each integrator's image and gradient,
the radiance field's training steps, MCMC's ``threads`` schedule, torch's in-place device tensors, the BVH
build (a valid tree, as good as the CPU's) and the non-mesh shapes and instances agree with the CPU backend's on small scenes (the same seeds: the same random numbers, so the same paths up to
float rounding).

Which backends: ``cuda`` where the CUDA driver library loads (``backend.has_cuda_driver``), ``vulkan`` where a
hardware Vulkan device exists (``backend.has_hardware_vulkan``; the software rasteriser lavapipe is covered by
the ``vulkan`` tests of test_backend_vulkan.py); a test for a backend the machine lacks is skipped, saying so.
``TIRENDER_GPU_DRY=1`` adds the CPU itself as a "device" (``benchmarks/gpu_check.py --dry-run``): the children
and comparisons then run end to end before any GPU exists (and must agree bit for bit).

Each (part, backend) test runs the part in two child processes, one on the CPU and one on the device (one
``ti.init`` per process), at the same time on a GPU machine, one after the other on the CPU alone (the second
then finds the first's kernels in Taichi's offline cache). Run a child by hand:
``TIRENDER_ARCH=cuda python tests/test_gpu.py --child surface``.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tirender.backend as backend  # noqa: E402

DRY = os.environ.get("TIRENDER_GPU_DRY") == "1"
CBOX = os.path.join(ROOT, "configs", "cbox.yaml")
SMALL = ["sensors.0.film.width=32", "sensors.0.film.height=32"]
CBOX_GRADS = ("red.reflectance", "white.reflectance", "light.radiance")


def device_archs():
    """[(arch, why-not or None)]: the GPU backends and whether this machine has each."""
    out = [("cuda", None if backend.has_cuda_driver() else "no CUDA driver (libcuda) on this machine"),
           ("vulkan", None if backend.has_hardware_vulkan() else "no hardware Vulkan device on this machine")]
    if DRY:
        out.append(("cpu", None))
    return out


# ----------------------------------------------------------------------------- the parts (run in children)

def _flat(a):
    return np.asarray(a, np.float64).reshape(-1).tolist()


def _grads(g, names):
    return {n: _flat(g[n]) for n in names}


def part_surface():
    """The Cornell box at 32²: path, direct, aov and moment images; the PRB gradient."""
    import tirender
    from tirender.api import render_grad, render_moments
    sc = tirender.load_scene(CBOX, overrides=SMALL)
    ones = np.ones((32, 32, 3), np.float32)
    return {"img_path": _flat(tirender.render(sc, spp=16, seed=5, progress=False)),
            "img_direct": _flat(tirender.render(sc, spp=16, seed=5, integrator="direct", progress=False)),
            "img_aov": _flat(tirender.render(sc, spp=4, seed=5, integrator="aov", progress=False)),
            "img_moment": _flat(render_moments(sc, spp=8, seed=5, progress=False)[1]),
            "grad_prb": _grads(render_grad(sc, ones, spp=16, seed=3, progress=False), CBOX_GRADS)}


def part_surface_more():
    """The Cornell box at 32²: the light tracer's image and gradient, the RB gradient, forward mode (CPU and
    CUDA: Vulkan lacks the per-thread tangent accumulators)."""
    import tirender
    from tirender.api import render_forward, render_grad
    sc = tirender.load_scene(CBOX, overrides=SMALL)
    ones = np.ones((32, 32, 3), np.float32)
    out = {"img_ptracer": _flat(tirender.render(sc, spp=8, seed=6, integrator="ptracer", progress=False)),
           "grad_rb": _grads(render_grad(sc, ones, spp=8, seed=3, method="rb", progress=False), CBOX_GRADS)}
    ps = tirender.load_scene(CBOX, overrides=SMALL + ["integrator.type=ptracer"])
    out["grad_ptracer"] = _grads(render_grad(ps, ones, spp=8, seed=7, progress=False), CBOX_GRADS)
    if backend.current_arch() != "vulkan":
        out["img_forward"] = _flat(render_forward(sc, {"red.reflectance": 1.0}, spp=8, seed=4, progress=False))
    return out


def part_volume():
    """A heterogeneous medium in a null-BSDF cube (test_backend_vulkan.VOLUME): volpath and prbvolpath images,
    the prbvolpath gradient."""
    import tirender
    from test_backend_vulkan import VOLUME
    vs = tirender.load_scene(VOLUME)
    img = tirender.render(vs, spp=8, seed=1, progress=False)
    g = tirender.render_grad(vs, np.ones_like(img), spp=8, seed=2, progress=False)
    return {"img_prbvolpath": _flat(img),
            "img_volpath": _flat(tirender.render(vs, spp=8, seed=1, integrator="volpath", progress=False)),
            "grad_prbvolpath": _grads(g, ("smoke.density", "smoke.albedo", "smoke.g"))}


def part_mcmc():
    """pssmlt and coherent_mcmc in their `threads` schedule (one thread per path: the GPU schedule;
    counter-based random numbers, so the same proposals on every backend)."""
    import tirender
    out = {}
    for t in ("pssmlt", "coherent_mcmc"):
        ms = tirender.load_scene(CBOX, overrides=["sensors.0.film.width=24", "sensors.0.film.height=24",
                                                  f"integrator.type={t}", "integrator.hide_emitters=true",
                                                  "integrator.chains=256", "integrator.schedule=threads"])
        out[f"mcmc_{t}"] = _flat(tirender.render(ms, spp=32, seed=4, progress=False))
    return out


def part_attached():
    """Attached PRB gradients through a height field (configs/caustic.yaml at 24²)."""
    import tirender
    from test_backend_vulkan import caustic_scene
    cs = caustic_scene()
    img = tirender.render(cs, spp=4, seed=8, progress=False)
    g = tirender.render_grad(cs, np.ones_like(img), spp=4, seed=9, progress=False)
    return {"img_caustic": _flat(img), "grad_attached": _grads(g, ("lens.height",))}


def part_radiance_field():
    """Six training steps of the radiance field (test_backend_vulkan.rf_training): losses, parameters, held-out PSNR."""
    from test_backend_vulkan import rf_training
    r = rf_training()
    return {"rf_losses": r["losses"], "rf_params": r["params"], "rf_psnr": r["heldout_psnr"]}


def part_torch():
    """tirender.torch on the backend's own device: a float32 tensor on Taichi's device is read in place
    (Scene.write_param_device; CUDA tensors on CUDA, CPU tensors on the CPU; Vulkan takes the host path);
    image and gradient of a scalar loss."""
    try:
        import torch
    except ImportError:
        return {"skip": "torch is not installed"}
    import tirender
    import tirender.torch as tt
    sc = tirender.load_scene(CBOX, overrides=SMALL)
    dev = "cuda" if backend.current_arch() == "cuda" else "cpu"
    t = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float32, device=dev, requires_grad=True)
    in_place = []
    orig = sc.write_param_device
    sc.write_param_device = lambda n, x: in_place.append(bool(orig(n, x))) or in_place[-1]
    img = tt.render(sc, {"red.reflectance": t}, spp=8, seed=2, spp_grad=8)
    (img * img).mean().backward()
    return {"img_torch": _flat(img.detach().cpu().numpy()), "grad_torch": {"red": _flat(t.grad.cpu().numpy())},
            "in_place": any(in_place), "img_device": str(img.device), "grad_device": str(t.grad.device)}


def part_polarized():
    """The stokes integrator in spectral_polarized (TIRENDER_VARIANT set by the parent): S0..S3 of the box."""
    import tirender
    from tirender.api import render_stokes
    sc = tirender.load_scene(CBOX, overrides=["sensors.0.film.width=24", "sensors.0.film.height=24"])
    return {"img_stokes": _flat(render_stokes(sc, spp=8, seed=3, progress=False))}


def part_bvh():
    """The BVH kernels (scene/bvh_build.py) on test_bvh_build's structured mesh (12k triangles: the top nodes
    binned in parallel chunks): the binary tree's arrays."""
    from test_bvh_build import structured_mesh
    from tirender.scene.bvh_build import build_bvh
    b = build_bvh(*structured_mesh(np.random.default_rng(11)))
    return {"bvh_" + k: np.asarray(getattr(b, k)).tolist()
            for k in ("node_min", "node_max", "node_first", "node_count", "prim_order")}


def part_geometry():
    """Mitsuba's non-mesh shapes and instances (core/implicit.py): test_instancing's scene (cylinders and rectangles
    in a group placed four times, one mirrored: the two-level traversal), test_quadrics' analytic sphere, disk and
    cylinders with a sphere light, test_sdfgrid's torus grids (a shape and an instance): path images."""
    import pathlib
    import tempfile
    import tirender
    from test_instancing import instanced_xml
    from test_quadrics import _lit as quadrics_xml
    from test_sdfgrid import _lit as sdf_xml
    d = pathlib.Path(tempfile.mkdtemp())
    out = {}
    for name, text in (("instances", instanced_xml()), ("quadrics", quadrics_xml()), ("sdf", sdf_xml(d, "smooth"))):
        (d / f"{name}.xml").write_text(text)
        sc = tirender.load_scene(str(d / f"{name}.xml"))
        out[f"img_{name}"] = _flat(tirender.render(sc, spp=8, seed=5, progress=False))
    return out


PARTS = {"surface": part_surface, "surface_more": part_surface_more, "volume": part_volume, "mcmc": part_mcmc, "attached": part_attached,
         "radiance_field": part_radiance_field, "torch": part_torch, "polarized": part_polarized, "bvh": part_bvh,
         "geometry": part_geometry}
VARIANT = {"polarized": "spectral_polarized"}


def _child_main(part):
    arch = backend.init(os.environ.get("TIRENDER_ARCH", "cpu"))
    out = dict(PARTS[part](), arch=arch)
    print("GPU-RESULT " + json.dumps(out))


# ----------------------------------------------------------------------------- the parent

def _start(part, arch):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TIRENDER_ARCH=arch)
    env.pop("TIRENDER_FP", None)
    env.pop("TIRENDER_VARIANT", None)
    if part in VARIANT:
        env["TIRENDER_VARIANT"] = VARIANT[part]
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", part], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _collect(p, what):
    try:
        out, err = p.communicate(timeout=1200)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 0, f"{what} child failed:\n{out[-2000:]}\n{err[-4000:]}"
    line = [ln for ln in out.splitlines() if ln.startswith("GPU-RESULT ")][-1]
    return json.loads(line[len("GPU-RESULT "):])


def run_pair(part, arch):
    """(cpu results, device results) of one part: both children at once on a GPU machine; on the CPU alone
    (dry run) one after the other, so the second loads the first's kernels from Taichi's offline cache."""
    if arch == "cpu":
        cpu = _collect(_start(part, "cpu"), "cpu")
        return cpu, _collect(_start(part, "cpu"), "device (cpu)")
    dev = _start(part, arch)
    try:
        cpu = _collect(_start(part, "cpu"), "cpu")
    finally:
        got = _collect(dev, arch)
    return cpu, got


def _rel_l1(a, b):
    return float(np.abs(a - b).sum() / max(np.abs(a).sum(), 1e-30))


def compare(cpu, dev, key):
    """The same seeds on both backends: images agree to float rounding and the few paths it sends another way
    (relative L1 ≤ 5e-3, mean ≤ 2e-3; MCMC chains, whose acceptance a last bit can flip, ≤ 5e-2); gradients to
    rounding of their sums (relative L2 ≤ 2e-2 per parameter, ≤ 1e-3 for the exact fixed-point CPU twin)."""
    a, b = cpu[key], dev[key]
    if isinstance(a, dict):
        for name in a:
            x, y = np.asarray(a[name]), np.asarray(b[name])
            assert np.all(np.isfinite(y)), (key, name)
            assert np.abs(x).max() > 0, (key, name, "the CPU gradient is zero: the case tests nothing")
            err = float(np.linalg.norm(x - y) / np.linalg.norm(x))
            assert err <= 2e-2, (key, name, err, x[:6], y[:6])
        return
    x, y = np.asarray(a), np.asarray(b)
    assert x.shape == y.shape and np.all(np.isfinite(y)), key
    assert x.mean() > 0, (key, "the CPU image is black: the case tests nothing")
    tol = 5e-2 if key.startswith("mcmc_") else 5e-3
    assert _rel_l1(x, y) <= tol, (key, _rel_l1(x, y))
    assert abs(x.mean() - y.mean()) <= max(tol / 2.5, 2e-3) * abs(x.mean()), (key, x.mean(), y.mean())


CASES = [(part, arch, why) for part in PARTS for arch, why in device_archs()]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("part,arch,why", CASES, ids=[f"{p}-{a}" for p, a, _ in CASES])
def test_device_matches_cpu(part, arch, why):
    if why:
        pytest.skip(why)
    cpu, dev = run_pair(part, arch)
    assert cpu["arch"] == "cpu" and dev["arch"] == arch, (cpu["arch"], dev["arch"])
    if "skip" in cpu:
        pytest.skip(cpu["skip"])
    if part == "radiance_field":   # tolerances of test_backend_vulkan's radiance-field test (same steps)
        np.testing.assert_allclose(dev["rf_losses"], cpu["rf_losses"], rtol=1e-4)
        dp = np.abs(np.asarray(dev["rf_params"]) - np.asarray(cpu["rf_params"]))
        assert np.percentile(dp, 99) < 1e-3 and np.mean(dp) < 2e-5, (np.percentile(dp, 99), np.mean(dp))
        assert abs(dev["rf_psnr"] - cpu["rf_psnr"]) < 0.01
        return
    if part == "bvh":       # a valid tree (every closest hit the brute force's) as good as the CPU's
        from test_bvh_build import check_layout, check_traversal, structured_mesh
        from tirender.scene.bvh import BVH
        from tirender.scene.bvh_build import sah_cost
        v = structured_mesh(np.random.default_rng(11))
        trees = [BVH(**{k: np.asarray(r["bvh_" + k], np.float32 if k.startswith("node_m") else np.int32)
                        for k in ("node_min", "node_max", "node_first", "node_count", "prim_order")})
                 for r in (cpu, dev)]
        check_layout(trees[1], *v)
        check_traversal(trees[1], *v, np.random.default_rng(5), R=3000)
        assert sah_cost(trees[1]) <= 1.01 * sah_cost(trees[0]), (sah_cost(trees[1]), sah_cost(trees[0]))
        return
    if part == "torch":
        assert dev["in_place"] == (arch in ("cpu", "cuda")), dev["in_place"]   # read where it lies
        want = "cuda:0" if arch == "cuda" else "cpu"
        assert dev["img_device"] == want and dev["grad_device"] == want, (dev["img_device"], dev["grad_device"])
    keys = [k for k in cpu if k.startswith(("img_", "grad_", "mcmc_"))]
    assert set(keys) - {"img_forward"} <= set(dev), (keys, list(dev))
    for k in keys:
        if k in dev:
            compare(cpu, dev, k)
    if arch == "cpu":   # the dry run's "device" is this CPU: the same kernels give the same bits
        for k in keys:
            assert cpu[k] == dev[k], k


if __name__ == "__main__" and "--child" in sys.argv:
    _child_main(sys.argv[sys.argv.index("--child") + 1])
