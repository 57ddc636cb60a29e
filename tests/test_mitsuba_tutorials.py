"""Mitsuba 3's tutorial scenes (mitsuba-renderer/mitsuba-tutorials, ``scenes/``), loaded unchanged and rendered by
both renderers from the same file (benchmarks/mitsuba_tutorials.py: Welch's test on the per-channel means over
seeds, RMSE of the seed-averaged images against their combined noise).

The scenes are read from $TIRENDER_MITSUBA_TUTORIALS (a clone of mitsuba-tutorials or its scenes/ folder, never
copied into the repository); without it the module is skipped. Mitsuba runs its llvm_ad_rgb variant
(DRJIT_LIBLLVM_PATH)."""
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("mitsuba_tutorials",
                                               os.path.join(HERE, "..", "benchmarks", "mitsuba_tutorials.py"))
tut = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tut)
DATA = tut.scenes_dir()
pytestmark = pytest.mark.skipif(DATA is None, reason=f"no mitsuba-tutorials scenes (${tut.ENV})")


def test_quickstart_camera_is_mitsubas():
    """simple.xml gives no fov: Mitsuba's perspective sensor then uses focal_length 50 mm over the 36 × 24 mm
    film's diagonal — for its square film, an x field of view of 2·atan(√(36² + 24²) / 2 / 50 / √2) ≈ 39.6°."""
    import math
    import tirender
    sc = tirender.load_scene(os.path.join(DATA, "simple.xml"))
    diag = math.hypot(36.0, 24.0)
    want = math.degrees(2 * math.atan(diag / 2 / 50 / math.sqrt(2)))
    assert sc.sensor_params["sensor.x_fov"] == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["simple", "cbox", "shadow_art"])
def test_tutorial_scene_renders_as_mitsuba(name):
    pytest.importorskip("mitsuba")
    if not os.environ.get("DRJIT_LIBLLVM_PATH"):
        pytest.skip("Mitsuba's llvm_ad_rgb needs DRJIT_LIBLLVM_PATH")
    (got, r), = tut.run(DATA, [name], "rgb", res=32, spp=32, seeds=3)
    assert "missing" not in r, r
    assert r["pass_img"], (r["mean_ti"], r["mean_mi"], r["p"], r["rmse_ratio"])
