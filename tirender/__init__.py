"""tirender: a physically based differentiable renderer written with Taichi.

Public API::

    import tirender
    tirender.init("cpu")                          # optional; "auto" picks CUDA > Vulkan > CPU
    scene = tirender.load_scene("configs/cbox.yaml")
    img = tirender.render(scene, spp=64, seed=0)  # float32 (H, W, 3), linear RGB
    scene.params["red.reflectance"]               # numpy view of a named parameter
    grads = tirender.render_grad(scene, adjoint_image, spp=64, seed=1)   # PRB
"""
from .backend import current_arch, init  # noqa: F401
from .errors import ConfigError, TirenderError  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    # lazy imports keep `import tirender` cheap (no Taichi kernels are defined until used)
    if name in ("load_scene", "render"):
        from . import renderer as _r
        return getattr(_r, name)
    if name == "render_grad":
        from .integrators.prb import render_grad
        return render_grad
    if name in ("losses", "Adam", "SGD", "Optimizer"):
        from . import optim
        return getattr(optim, name)
    if name == "Scene":
        from .scene.scene import Scene
        return Scene
    raise AttributeError(name)
