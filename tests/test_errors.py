"""Bad input: one clear line naming the file, the key and the problem; exit code 2; no traceback."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import yaml

import tirender
from tirender.cli import main
from tirender.scene.mesh_io import save_obj

ROOT = os.path.join(os.path.dirname(__file__), "..")
BASE = {"sensors": [{"film": {"width": 8, "height": 8}}],
        "bsdfs": {"w": {"type": "diffuse", "reflectance": 0.5}},
        "shapes": [{"id": "floor", "type": "rectangle", "bsdf": "w"}],
        "emitters": [{"type": "constant"}]}


def _write(tmp_path, data, name="bad.yaml"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(p)


def _run_cli(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def _variant(**changes):
    import copy
    d = copy.deepcopy(BASE)
    for k, v in changes.items():
        d[k] = v
    return d


CASES = [
    ("malformed", "shapes: [ {id: a\n  type: : :", ["malformed YAML"]),
    ("unknown_top", {"render": {}, "scene": BASE, "bogus": 1}, ["bogus", "unknown key"]),
    ("unknown_shape_key", _variant(shapes=[{"id": "floor", "type": "rectangle", "colour": 1}]),
     ["shapes[0].colour", "unknown key"]),
    ("unknown_type", _variant(shapes=[{"id": "floor", "type": "teapot"}]), ["shapes.floor.type", "teapot"]),
    ("unknown_bsdf", _variant(bsdfs={"w": {"type": "velvet"}}), ["bsdfs.w.type", "velvet"]),
    ("missing_mesh", _variant(shapes=[{"id": "bunny", "type": "obj", "filename": "nope.obj"}]),
     ["shapes.bunny.filename", "not found"]),
    ("negative_roughness", _variant(bsdfs={"w": {"type": "roughconductor", "roughness": -0.1}}),
     ["bsdfs.w.roughness", "-0.1 is out of range"]),
    ("negative_roughness", _variant(bsdfs={"w": {"type": "roughplastic", "alpha": -0.1}}), ["bsdfs.w.alpha"]),
    ("negative_reflectance", _variant(bsdfs={"w": {"type": "diffuse", "reflectance": [0.5, -0.2, 0.1]}}),
     ["bsdfs.w.reflectance", "out of range"]),
    ("bad_integrator", _variant(integrator={"type": "bdpt"}), ["integrator.type", "bdpt"]),
    ("missing_texture", _variant(bsdfs={"w": {"type": "diffuse", "reflectance": {"type": "bitmap",
                                                                                "filename": "gone.png"}}}),
     ["bsdfs.w.reflectance.filename", "not found"]),
    ("bad_transform", _variant(shapes=[{"id": "floor", "type": "rectangle", "to_world": {"spin": 3}}]),
     ["shapes.floor.to_world", "unknown transform"]),
]


@pytest.mark.parametrize("name,data,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_config_one_line(tmp_path, capsys, name, data, needles):
    path = _write(tmp_path, data)
    code, err = _run_cli(capsys, ["render", path, "--spp", "1", "--out", str(tmp_path / "o")])
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and path in err[0], err
    for n in needles:
        assert n in err[0], (n, err[0])


def test_missing_config_file(tmp_path, capsys):
    code, err = _run_cli(capsys, ["render", str(tmp_path / "nothing.yaml")])
    assert code == 2 and len(err) == 1 and "file not found" in err[0]


def test_nan_mesh_vertices(tmp_path, capsys):
    pos = np.array([[0, 0, 0], [1, 0, 0], [np.nan, 1, 0], [0, 1, 0]], np.float32)
    with open(tmp_path / "nan.obj", "w") as f:
        for p in pos:
            f.write(f"v {p[0]} {p[1]} {p[2]}\n")
        f.write("f 1 2 3\nf 1 2 4\n")
    path = _write(tmp_path, _variant(shapes=[{"id": "m", "type": "obj", "filename": str(tmp_path / "nan.obj")}]))
    code, err = _run_cli(capsys, ["render", path, "--spp", "1"])
    assert code == 2 and len(err) == 1 and "NaN" in err[0], err


def test_degenerate_triangles_are_skipped_with_a_warning(tmp_path):
    pos = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [2, 0, 0], [3, 0, 0]], np.float32)
    faces = np.array([[0, 1, 2], [0, 3, 4], [1, 1, 2]], np.int32)  # a collinear and a repeated-index triangle
    save_obj(str(tmp_path / "deg.obj"), pos, faces)
    d = _variant(shapes=[{"id": "m", "type": "obj", "filename": str(tmp_path / "deg.obj")}])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sc = tirender.load_scene(d)
    assert sc.n_triangles == 1
    assert any("degenerate" in str(x.message) for x in w)
    img = tirender.render(sc, spp=1)
    assert np.all(np.isfinite(img))


def test_unavailable_arch_cli_subprocess(tmp_path):
    """End to end through `python -m tirender --arch cuda`: on a machine without CUDA (whatever backend this test
    process runs on) one line, exit 2; on a machine with CUDA the render."""
    from child_util import machine_has_cuda
    path = _write(tmp_path, BASE, "ok.yaml")
    r = subprocess.run([sys.executable, "-m", "tirender", "render", path, "--arch", "cuda", "--spp", "1",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if machine_has_cuda():
        assert r.returncode == 0 and os.path.exists(tmp_path / "out" / "image.exr"), r.stderr
        return
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert lines[-1].startswith("error:") and "arch 'cuda' is not available" in lines[-1]
    assert "Traceback" not in r.stderr and not os.path.exists(tmp_path / "out" / "image.exr")


def test_kernel_cache_cap(tmp_path, monkeypatch):
    """tirender sets the cap of Taichi's kernel cache (TIRENDER_KERNEL_CACHE_MB, else backend.KERNEL_CACHE_MB):
    Taichi's own 100 MB held less than the test lane's kernels, and past it every process's exit evicted kernels
    that the next run compiled again. A bad value is one line naming the variable (exit 2 from the CLI)."""
    import taichi as ti
    from tirender import backend
    from tirender.errors import ConfigError
    if not os.environ.get("TIRENDER_KERNEL_CACHE_MB"):
        assert ti.lang.impl.current_cfg().offline_cache_max_size_of_files == backend.KERNEL_CACHE_MB << 20
    monkeypatch.setenv("TIRENDER_KERNEL_CACHE_MB", "256")
    assert backend.kernel_cache_bytes() == 256 << 20
    for bad in ("lots", "0", "-5", "nan", "inf"):
        monkeypatch.setenv("TIRENDER_KERNEL_CACHE_MB", bad)
        with pytest.raises(ConfigError, match="TIRENDER_KERNEL_CACHE_MB"):
            backend.kernel_cache_bytes()
    path = _write(tmp_path, BASE, "ok.yaml")
    r = subprocess.run([sys.executable, "-m", "tirender", "render", path, "--arch", "cpu", "--spp", "1",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=dict(os.environ, TIRENDER_KERNEL_CACHE_MB="lots"))
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert lines[-1].startswith("error:") and "TIRENDER_KERNEL_CACHE_MB='lots'" in lines[-1], r.stderr
    assert not os.path.exists(tmp_path / "out" / "image.exr")


def test_malformed_yaml_cli_subprocess(tmp_path):
    path = _write(tmp_path, "scene: {shapes: [\n")
    r = subprocess.run([sys.executable, "-m", "tirender", "render", path], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")][0].count(path) == 1
