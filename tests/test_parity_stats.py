"""The parity runner's own logic (benchmarks/parity/run.py), without Mitsuba: the Welch test behind its
verdicts, and the report of a scene whose model tirender lacks (known from loading alone)."""
import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("parity_run_stats", os.path.join(HERE, "..", "benchmarks", "parity",
                                                                                    "run.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_welch_test(run):
    """The parity verdict's statistics: Student-t tails against tabulated values, and the verdict on
    clear differences, on noise, and on a sign flip of a gradient that is clear of 0 on both sides."""
    t_p = lambda t, df: run.betainc(0.5 * df, 0.5, df / (df + t * t))   # noqa: E731
    assert abs(t_p(2.776445, 4) - 0.05) < 1e-6 and abs(t_p(10.2145, 3) - 0.002) < 1e-6
    assert abs(t_p(3.0, 1e7) - 0.0026998) < 1e-6
    assert run.welch_p(10.0, 1.0, 4, 10.5, 1.0, 4) > 0.5                 # within noise
    assert run.welch_p(10.0, 0.1, 8, 12.0, 0.1, 8) < run.P_FAIL           # 14 combined SE apart
    # z = 3.5 passes at 4 seeds per side (t with ~6 degrees of freedom), fails at 400
    assert run.welch_p(0.0, 1.0, 4, 4.95, 1.0, 4) > run.P_FAIL
    assert run.welch_p(0.0, 1.0, 400, 4.95, 1.0, 400) < run.P_FAIL
    assert not run.grad_ok(-5.0, 1.0, 5.0, 1.0, 1.0)                      # both clear of 0, opposite signs
    assert run.grad_ok(0.7, 23.0, -48.7, 7.2, 0.05)                       # one within noise of 0: sign ignored


def test_missing_model_reported(run, tmp_path, monkeypatch):
    """A parity scene with a model tirender lacks is reported by name and line, and the table says so (loading
    is enough to know: Mitsuba is never started)."""
    xml = ('<scene version="3.0.0">\n  <default name="spp" value="4"/>\n  <default name="res" value="8"/>\n'
           '  <shape type="sphere">\n    <bsdf type="no_such_bsdf"/>\n  </shape>\n</scene>\n')
    (tmp_path / "lacking.xml").write_text(xml)
    monkeypatch.setattr(run, "SCENES_DIR", str(tmp_path))
    monkeypatch.setitem(run.SCENES, "lacking", ["ball.bsdf.reflectance.value"])
    monkeypatch.setattr(run, "mitsuba_run", lambda *a, **k: pytest.fail("Mitsuba started for a missing model"))
    r = run.run_scene("lacking", res=8, spp=1, seeds=2, grad_spp=1)
    assert set(r) == {"name", "missing"}, r
    assert "lacking.xml" in r["missing"] and "line 5" in r["missing"] and "no_such_bsdf" in r["missing"], r
    assert "| lacking | model missing: " in run.table([r], "")
