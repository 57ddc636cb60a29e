"""tirender: a physically based differentiable renderer written with Taichi."""
from .backend import init, current_arch  # noqa: F401
from .errors import ConfigError, TirenderError  # noqa: F401

__version__ = "0.1.0"
