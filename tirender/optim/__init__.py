"""Optimisation toolkit: losses, Adam/SGD over a scene's named parameters (scene_optimizer: the Python API) and
over flat device fields (adam: FieldAdam / FieldSGD, what the YAML driver and the radiance field use), regularisers,
schedules, driver."""
from . import losses  # noqa: F401
from .adam import SGD as FieldSGD  # noqa: F401
from .adam import Adam as FieldAdam  # noqa: F401
from .scene_optimizer import SGD, Adam  # noqa: F401
