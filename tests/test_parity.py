"""CI subset of the Mitsuba 3 parity suite (benchmarks/parity/run.py): a few XML scenes rendered by
tirender and by Mitsuba 3 from the same file; per-channel means that a Welch test does not tell apart
(p >= 0.0027, the 3σ tail), image RMSE <= 1.2x the combined noise, and (when Mitsuba's LLVM variant
works) PRB gradients by the same test, with the same sign where both are clear of 0. Skipped when
mitsuba is not installed (it is a test-only extra)."""
import importlib.util
import os
import sys

import pytest

pytestmark = pytest.mark.parity
mi = pytest.importorskip("mitsuba")

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks", "parity"))
LLVM = os.environ.get("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM-19.so")


def _llvm_ok():
    if not os.path.exists(LLVM):
        return False
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", LLVM)
    try:
        mi.set_variant("llvm_ad_rgb")
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def run():
    if not _llvm_ok():
        pytest.skip("Mitsuba's llvm_ad_rgb variant needs libLLVM (DRJIT_LIBLLVM_PATH)")
    spec = importlib.util.spec_from_file_location("parity_run", os.path.join(HERE, "..", "benchmarks", "parity",
                                                                              "run.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.mark.parametrize("name", ["diffuse_area", "point_directional", "tent_filter"])   # run.CI_SUBSET
def test_parity_images_and_gradients(run, name):
    r = run.run_scene(name, res=32, spp=16, seeds=4, grad_spp=8)
    print(run.table([r], ""))
    assr = f"{name}: z={r['z']}, Welch p={r['p']}, RMSE/noise={r['rmse_ratio']:.2f}"
    assert all(p >= run.P_FAIL for p in r["p"]), assr
    assert r["rmse_ratio"] <= 1.2, assr
    for key, ma, sa, mb, sb, z, p, ok in r["grads"]:
        assert ok, f"{name}: {key}: tirender {ma} ± {sa}, Mitsuba {mb} ± {sb} (z {z:+.2f}, Welch p {p:.3g})"


def test_parity_projector_and_spot_texture(run):
    """projector.xml (a projector with a bitmap irradiance, a spot light projecting a bitmap): images, and
    PRB gradients of the projector's irradiance and scale and the spot's texture and intensity, each clear
    of 0 in Mitsuba (6 seeds: the RMSE's noise estimate is steadier at this small budget)."""
    r = run.run_scene("projector", res=16, spp=32, seeds=6, grad_spp=8)
    print(run.table([r], ""))
    assr = f"projector: z={r['z']}, Welch p={r['p']}, RMSE/noise={r['rmse_ratio']:.2f}"
    assert all(p >= run.P_FAIL for p in r["p"]), assr
    assert r["rmse_ratio"] <= 1.2, assr
    assert len(r["grads"]) == 4
    for key, ma, sa, mb, sb, z, p, ok in r["grads"]:
        assert ok and abs(mb) > 3 * sb, f"{key}: tirender {ma} ± {sa}, Mitsuba {mb} ± {sb} (z {z:+.2f}, p {p:.3g})"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["thinlens", "orthographic"])   # the sensor models (tests/test_sensors.py)
def test_parity_sensor_models(run, name):
    test_parity_images_and_gradients(run, name)


@pytest.mark.slow
# the models (tests/test_hair_pplastic.py, tests/test_bsdfs.py): whole-scene parity is the extended lane (hair's
# scene compiles its PRB megakernel for ~300 s cold, pplastic's for ~70 s); the default lane checks both models'
# values against Mitsuba's (tests/test_hair_pplastic.py) and their adjoints in f64 (tests/test_bsdfs.py)
@pytest.mark.extended
@pytest.mark.parametrize("name", ["pplastic", "hair"])
def test_parity_pplastic_and_hair(run, name):
    """Mitsuba's pplastic (its unpolarized branch: a GGX floor, the documentation's purple sphere) and hair (on a mesh
    of fibres with Mitsuba's curve frame): images, and PRB gradients of pplastic's ρ, α and η and of each of hair's
    parameters (benchmarks/parity/scenes/pplastic.xml, hair.xml)."""
    test_parity_images_and_gradients(run, name)


@pytest.mark.slow
def test_parity_texture_wrap_volume(run):
    """Mitsuba's texture meanings beyond the unit square: mirrored bitmaps (bilinear, nearest), a volume texture
    under a rotating to_world, a rawconstant (benchmarks/parity/scenes/texture_wrap_volume.xml)."""
    test_parity_images_and_gradients(run, "texture_wrap_volume")
