"""``tirender gradcheck``: PRB against central finite differences with correlated random numbers."""

import pytest

import tirender
from tirender.cli import main
from tirender.gradcheck import check, format_table

from scenes import cornell_like


def test_gradcheck_passes_on_a_small_box(tmp_path, capsys):
    import yaml
    p = tmp_path / "box.yaml"
    p.write_text(yaml.safe_dump(cornell_like(w=16, max_depth=3)))
    code = main(["gradcheck", str(p), "--param", "red.reflectance", "--param", "light.radiance",
                 "--spp", "8", "--seeds", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "red.reflectance" in out and "light.radiance" in out and "z" in out and "pass" in out
    assert "2/2 parameters pass" in out


@pytest.mark.slow
def test_gradcheck_flags_a_wrong_gradient():
    """A deliberately wrong gradient (scaled by 1.5) must fail the check."""
    sc = tirender.load_scene(cornell_like(w=16, max_depth=3))
    from tirender import api
    real = api.render_grad

    def wrong(*a, **k):
        return {n: 1.5 * g for n, g in real(*a, **k).items()}
    api.render_grad = wrong
    try:
        rows = check(sc, ["red.reflectance"], spp=16, seeds=6)
    finally:
        api.render_grad = real
    assert not rows[0].ok, format_table(rows)
    assert abs(rows[0].grad / rows[0].fd - 1.5) < 0.2


def test_gradcheck_unknown_parameter_is_one_line(tmp_path, capsys):
    import yaml
    p = tmp_path / "box.yaml"
    p.write_text(yaml.safe_dump(cornell_like(w=8, max_depth=2)))
    assert main(["gradcheck", str(p), "--param", "nope.reflectance"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.reflectance" in err[0] and "unknown parameter" in err[0]
