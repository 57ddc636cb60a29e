"""CI subset of the Mitsuba 3 parity suite (benchmarks/parity/run.py): a few XML scenes rendered by
tirender and by Mitsuba 3 from the same file; per-channel means within 3 combined standard errors,
image RMSE <= 1.2x the combined noise, and (when Mitsuba's LLVM variant works) PRB gradients within
3 SE with the same sign. Skipped when mitsuba is not installed (it is a test-only extra)."""
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


@pytest.mark.parametrize("name", ["diffuse_area", "point_directional"])
def test_parity_images_and_gradients(run, name):
    r = run.run_scene(name, res=32, spp=16, seeds=4, grad_spp=8)
    print(run.table([r], ""))
    assr = f"{name}: z={r['z']}, RMSE/noise={r['rmse_ratio']:.2f}"
    assert all(abs(z) <= 3 for z in r["z"]), assr
    assert r["rmse_ratio"] <= 1.2, assr
    for key, ma, sa, mb, sb, z, same in r["grads"]:
        assert abs(z) <= 3 and same, f"{name}: {key}: tirender {ma} ± {sa}, Mitsuba {mb} ± {sb}"


def test_missing_model_reported(run):
    """A parity scene with a model tirender lacks is reported by name and line (loading is enough to know)."""
    import tirender
    from tirender.errors import ConfigError
    for name, word in (("checkerboard", "checkerboard"), ("anisotropic", "alpha_u"), ("principled", "principled"),
                       ("plastic", "plastic"), ("bumpmap", "bumpmap")):
        try:
            tirender.load_scene(os.path.join(run.SCENES_DIR, name + ".xml"), defines={"res": "16", "spp": "1"})
        except ConfigError:
            r = run.run_scene(name, res=16, spp=1, seeds=2, grad_spp=1)
            assert "missing" in r and "line" in r["missing"] and word in r["missing"], r
            return
    pytest.skip("tirender has every model of the parity scenes now")
