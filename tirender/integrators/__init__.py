"""integrators."""
