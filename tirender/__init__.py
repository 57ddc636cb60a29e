"""tirender: a physically based differentiable renderer written with Taichi.

Public API::

    import tirender
    tirender.init("cpu")                          # optional; "auto" picks CUDA > GPU Vulkan > CPU
    tirender.set_variant("spectral")              # optional, before rendering: rgb | mono | spectral |
                                                  # spectral_polarized
    scene = tirender.load_scene("configs/cbox.yaml")
    img = tirender.render(scene, spp=64, seed=0)  # float32 (H, W, 3), linear RGB
    scene.params["red.reflectance"]               # numpy view of a named parameter
    grads = tirender.render_grad(scene, adjoint_image, spp=64, seed=1)   # PRB
    jv = tirender.render_forward(scene, {"red.reflectance": 1.0}, spp=64)   # forward mode: J v
    S = tirender.render_stokes(scene, spp=64)     # (4, H, W, 3): Stokes S0..S3 (spectral_polarized)
    img, m2 = tirender.render_moments(scene, spp=64)   # and the samples' second moments (XYZ, per pixel)
    tirender.register_bsdf(MyBsdf)                # a user model (tirender/plugins.py, docs/plugins.md); also
                                                  # register_emitter, register_medium, register_integrator
"""
from .backend import current_arch, init  # noqa: F401
from .errors import ConfigError, TirenderError  # noqa: F401

__version__ = "0.1.0"
_API = ("load_scene", "render", "render_grad", "render_and_grad", "render_forward", "render_progressive",
        "render_stokes", "render_moments", "scene_from_config", "set_gradients")


def __getattr__(name):
    # lazy imports keep `import tirender` cheap (no Taichi kernels are defined until used)
    if name in _API:
        from . import api
        return getattr(api, name)
    if name in ("losses", "Adam", "SGD"):
        from . import optim
        return getattr(optim, name)
    if name in ("register_bsdf", "register_emitter", "register_medium", "register_integrator"):
        from . import plugins
        return getattr(plugins, name)
    if name == "set_variant":
        from .variants import set_variant
        return set_variant
    if name == "Scene":
        from .scene.scene import Scene
        return Scene
    raise AttributeError(name)
