"""Optimisation toolkit: losses, Adam/SGD over the parameter pool, regularisers, schedules, driver."""
from . import losses  # noqa: F401
from .adam import SGD, Adam  # noqa: F401
