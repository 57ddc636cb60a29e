"""Hand-written adjoints of textures and emitters vs central finite differences of their primal.

The texture lookup (bilinear, repeat/clamp, 1 and 3 channels) and the emitters' radiance (area,
constant, environment map) are linear in their parameters; their adjoints must reproduce the
finite differences of the primal lookups texel by texel (relative error <= 1e-3 in f32)."""
import numpy as np
import pytest
import taichi as ti

import tirender
from tirender.core.fixed_point import grad_scale_for
from tirender.core.math import vec2, vec3
from tirender.emitters.base import env_record
from tirender.emitters.envmap import Envmap
from tirender.textures import tex_eval, tex_eval_adjoint

from scenes import camera


@ti.kernel
def _lookup(st: ti.template(), tid: ti.i32, uv: ti.types.ndarray(), w: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(uv.shape[0]):
        v = tex_eval(st, tid, vec2(uv[k, 0], uv[k, 1]))
        out[k] = v.dot(vec3(w[k, 0], w[k, 1], w[k, 2]))


@ti.kernel
def _lookup_adjoint(st: ti.template(), tid: ti.i32, uv: ti.types.ndarray(), w: ti.types.ndarray()):
    for k in range(uv.shape[0]):
        tex_eval_adjoint(st, tid, vec2(uv[k, 0], uv[k, 1]), vec3(w[k, 0], w[k, 1], w[k, 2]))


@ti.kernel
def _env(st: ti.template(), e: ti.i32, d: ti.types.ndarray(), w: ti.types.ndarray(), out: ti.types.ndarray()):
    for k in range(d.shape[0]):
        q = env_record(e, vec3(0.0), vec3(d[k, 0], d[k, 1], d[k, 2]))
        out[k] = Envmap.eval(st, e, q).dot(vec3(w[k, 0], w[k, 1], w[k, 2]))


@ti.kernel
def _env_adjoint(st: ti.template(), e: ti.i32, d: ti.types.ndarray(), w: ti.types.ndarray()):
    for k in range(d.shape[0]):
        q = env_record(e, vec3(0.0), vec3(d[k, 0], d[k, 1], d[k, 2]))
        Envmap.eval_adjoint(st, e, q, vec3(w[k, 0], w[k, 1], w[k, 2]))


def _scene():
    return tirender.load_scene({
        "sensors": [camera([0, 0, 3], [0, 0, 0])],
        "bsdfs": {"a": {"type": "diffuse", "reflectance": {"type": "bitmap", "width": 7, "height": 5, "value": 0.5}},
                  "b": {"type": "roughconductor",
                        "roughness": {"type": "bitmap", "width": 4, "height": 6, "value": 0.3, "wrap": "clamp"}}},
        "shapes": [{"id": "p", "type": "rectangle", "bsdf": "a"}, {"id": "q", "type": "rectangle", "bsdf": "b"}],
        "emitters": [{"id": "sky", "type": "envmap", "width": 8, "height": 4}],
    })


def _check(sc, name, primal, adjoint, n_in=40, seed=0):
    rng = np.random.default_rng(seed)
    info = sc.params.info(name)
    sc.params[name] = rng.uniform(0.2, 0.8, info.shape).astype(np.float32)
    st = sc.bind()
    x = primal.make_inputs(rng, n_in)
    w = rng.uniform(-1, 1, (n_in, 3)).astype(np.float32)
    from tirender.launch import read_gradients, reset_gradients
    reset_gradients(st, grad_scale_for(1.0))
    adjoint(st, x, w)
    g = read_gradients(sc, st)[name].astype(np.float64)
    v0 = sc.params[name]
    flat = v0.reshape(-1)
    h = 1e-2
    out = np.zeros(n_in, np.float32)
    for i in range(flat.size):
        vp = flat.copy()
        vp[i] += h
        sc.params[name] = vp.reshape(v0.shape)
        sc.bind()
        primal(st, x, w, out)
        a = out.astype(np.float64).sum()
        vm = flat.copy()
        vm[i] -= h
        sc.params[name] = vm.reshape(v0.shape)
        sc.bind()
        primal(st, x, w, out)
        b = out.astype(np.float64).sum()
        fd = (a - b) / (2 * h)
        assert abs(g.reshape(-1)[i] - fd) <= 1e-3 * max(abs(fd), 1e-2), (name, i, g.reshape(-1)[i], fd)
    sc.params[name] = v0


class _UV:
    @staticmethod
    def make_inputs(rng, n):
        return rng.uniform(-0.3, 1.3, (n, 2)).astype(np.float32)  # outside [0,1] too: wrap / clamp


class _Dirs:
    @staticmethod
    def make_inputs(rng, n):
        d = rng.normal(size=(n, 3))
        return (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("name", [pytest.param("a.reflectance", marks=pytest.mark.slow, id="rgb_repeat"),
                                  pytest.param("b.roughness", id="scalar_clamp")])
def test_texture_adjoint(name):
    sc = _scene()
    tid = [t.name for t in sc.desc.textures].index(name)

    def primal(st, x, w, out):
        _lookup(st, tid, x, w, out)
    primal.make_inputs = _UV.make_inputs
    _check(sc, name, primal, lambda st, x, w: _lookup_adjoint(st, tid, x, w))


def test_envmap_emitter_adjoint():
    sc = _scene()

    def primal(st, x, w, out):
        _env(st, 0, x, w, out)
    primal.make_inputs = _Dirs.make_inputs
    _check(sc, "sky.radiance", primal, lambda st, x, w: _env_adjoint(st, 0, x, w))
