"""A large scene's mesh files read by a forked child while the parent compiles (tirender/scene/prefetch.py): the
description is the serial load's, bit for bit, errors and warnings included; a child that fails costs nothing but
its time; nothing forks for small scenes."""
import os
import sys

import numpy as np
import pytest

from mesh_writers import icosphere, write_ply
from tirender.api import describe
from tirender.config import load_config
from tirender.errors import ConfigError
from tirender.scene import prefetch
from tirender.scene.mesh_io import save_obj

pytestmark = pytest.mark.skipif(not prefetch.enabled(), reason="the forked reader needs Linux (os.fork)")


def _scene(tmp_path, extra=()):
    """A scene of mesh files: PLY with and without normals, an OBJ, degenerate triangles, a mirroring to_world,
    flipped normals, a shapegroup placed twice."""
    pos, faces = icosphere(2)
    pos = pos.astype(np.float32)
    rng = np.random.default_rng(3)
    write_ply(str(tmp_path / "ball.ply"), pos + rng.normal(0, 0.01, pos.shape).astype(np.float32), faces)
    deg = np.concatenate([faces, [[0, 0, 1], [2, 2, 2]]]).astype(np.int32)      # two degenerate triangles
    write_ply(str(tmp_path / "deg.ply"), pos, deg)
    save_obj(str(tmp_path / "ball.obj"), pos * 0.5, faces)
    shapes = [
        {"id": "a", "type": "ply", "filename": str(tmp_path / "ball.ply")},
        {"id": "b", "type": "ply", "filename": str(tmp_path / "deg.ply"),
         "to_world": {"scale": [-1, 1, 2], "translate": [2, 0, 0]}},
        {"id": "c", "type": "obj", "filename": str(tmp_path / "ball.obj"), "flip_normals": True,
         "to_world": {"translate": [0, 2, 0]}},
        {"id": "d", "type": "ply", "filename": str(tmp_path / "ball.ply"), "face_normals": True,
         "to_world": {"rotate": {"axis": [0, 1, 0], "angle": 30}}},
        {"id": "g", "type": "shapegroup", "shapes": [
            {"id": "m", "type": "ply", "filename": str(tmp_path / "deg.ply")}]},
        {"id": "i1", "type": "instance", "shapegroup": "g", "to_world": {"translate": [0, 0, 3]}},
        {"id": "i2", "type": "instance", "shapegroup": "g", "to_world": {"translate": [0, 0, -3]}},
        {"id": "floor", "type": "rectangle"},
    ] + list(extra)
    return {"scene": {"sensor": {"type": "perspective", "film": {"width": 8, "height": 8}},
                      "emitters": [{"type": "constant"}], "shapes": shapes}}


def _fingerprint(described):
    d, _ = described
    out = [d.warnings]
    for s in d.shapes:
        out.append((s.id, s.group, s.proto, s.bsdf) + tuple(
            None if a is None else (a.dtype.str, a.shape, a.tobytes()) for a in (s.positions, s.faces, s.normals,
                                                                                 s.uvs)))
    return out


@pytest.fixture
def spy(monkeypatch):
    """prefetch with no size threshold; records how many shapes each child returned (-1: none)."""
    monkeypatch.setattr(prefetch, "MIN_BYTES", 0)
    seen = []
    result = prefetch._Child.result

    def counted(self, timeout):
        r = result(self, timeout)
        seen.append(-1 if r is None else len(r))
        return r
    monkeypatch.setattr(prefetch._Child, "result", counted)
    return seen


def test_the_forked_reader_gives_the_serial_description(tmp_path, spy):
    cfg = _scene(tmp_path)
    serial = _fingerprint(describe(load_config(cfg)))
    ran = []
    forked = _fingerprint(describe(load_config(cfg), lambda: ran.append(os.getpid())))
    assert ran == [os.getpid()] and spy == [5], spy          # a, b, c, d and the group's member (built once, placed by
    assert forked == serial                                  # i1 and i2)
    assert any("degenerate" in w for w in forked[0])


def test_a_bad_mesh_file_fails_as_in_a_serial_load(tmp_path, spy):
    (tmp_path / "broken.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 100\n"
                                          b"property float x\nproperty float y\nproperty float z\nend_header\n\0\0")
    cfg = _scene(tmp_path, [{"id": "bad", "type": "ply", "filename": str(tmp_path / "broken.ply")}])
    with pytest.raises(ConfigError) as serial:
        describe(load_config(cfg))
    with pytest.raises(ConfigError) as forked:
        describe(load_config(cfg), lambda: None)
    assert str(forked.value) == str(serial.value) and "shapes.bad" in str(serial.value)
    assert spy == [5]                                      # the child left the bad shape to the parent


def test_a_child_that_dies_costs_only_its_time(tmp_path, spy, monkeypatch):
    cfg = _scene(tmp_path)
    serial = _fingerprint(describe(load_config(cfg)))
    monkeypatch.setattr(prefetch, "_geometries", lambda builder, todo: os._exit(3))
    assert _fingerprint(describe(load_config(cfg), lambda: None)) == serial
    assert spy == [-1]


def test_a_child_that_hangs_is_killed(tmp_path, spy, monkeypatch):
    import time
    cfg = _scene(tmp_path)
    serial = _fingerprint(describe(load_config(cfg)))
    monkeypatch.setattr(prefetch, "_geometries", lambda builder, todo: time.sleep(60))
    monkeypatch.setattr(prefetch, "WAIT_S", 0.5)
    t = time.perf_counter()
    assert _fingerprint(describe(load_config(cfg), lambda: None)) == serial
    assert time.perf_counter() - t < 10 and spy == [-1]


def test_a_failing_meanwhile_reaps_the_child(tmp_path, spy, monkeypatch):
    pids = []
    init = prefetch._Child.__init__

    def recorded(self, fn):
        init(self, fn)
        pids.append(self.pid)
    monkeypatch.setattr(prefetch._Child, "__init__", recorded)

    def fail():
        raise ConfigError("no backend", key="arch")
    with pytest.raises(ConfigError, match="no backend"):
        describe(load_config(_scene(tmp_path)), fail)
    assert len(pids) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(pids[0], os.WNOHANG)                     # reaped: no zombie left


def test_small_scenes_do_not_fork(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(prefetch._Child, "__init__", lambda self, fn: ran.append("fork"))
    describe(load_config(_scene(tmp_path)), lambda: ran.append("meanwhile"))     # ~100 kB of files < MIN_BYTES
    monkeypatch.setattr(prefetch, "MIN_BYTES", 0)
    monkeypatch.setenv("TIRENDER_PREFETCH", "0")
    describe(load_config(_scene(tmp_path)), lambda: ran.append("meanwhile"))
    assert ran == []


@pytest.mark.skipif(sys.platform != "linux", reason="Linux")
def test_load_scene_overlaps_the_bvh_kernels(tmp_path, spy):
    import tirender
    from tirender.scene import bvh_build
    with pytest.warns(UserWarning, match="4 degenerate"):
        sc = tirender.load_scene(_scene(tmp_path))
    assert bvh_build.warmed() and sc.n_triangles > 1000
    assert spy in ([5], [])           # [] when an earlier test of this process loaded the kernels (nothing to overlap)
