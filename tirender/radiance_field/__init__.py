"""Radiance-field reconstruction (voxel density σ + SH colour) with path-replay gradients."""
from .field import RadianceField, sh_basis_np, sh_count, channels  # noqa: F401
from .render import render_rays, backward_rays, loss_and_adjoint, render_and_backward  # noqa: F401
