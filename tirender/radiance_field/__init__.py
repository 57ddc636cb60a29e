"""Radiance-field reconstruction (voxel density σ + SH colour) with path-replay gradients.

See docs/radiance_field.md. Main entry points: :class:`RadianceField` (grid storage),
:func:`render_rays` / :func:`backward_rays` (forward march and its path-replay adjoint),
:func:`train` (the ``radiance_field:`` config driver) and the datasets in :mod:`.dataset`.
"""
from .field import RadianceField, channels, sh_basis_np, sh_count  # noqa: F401
from .render import backward_rays, loss_and_adjoint, render_and_backward, render_rays  # noqa: F401
from .dataset import (Dataset, load_nerf, orbit_cameras, path_traced_dataset, pixel_rays,  # noqa: F401
                      procedural_dataset, render_field_views, sphere_cameras)
from .train import Trainer, parse_config, psnr, train  # noqa: F401

__all__ = ["RadianceField", "channels", "sh_basis_np", "sh_count", "backward_rays", "loss_and_adjoint",
           "render_and_backward", "render_rays", "Dataset", "load_nerf", "orbit_cameras", "path_traced_dataset",
           "pixel_rays", "procedural_dataset", "render_field_views", "sphere_cameras", "Trainer", "parse_config",
           "psnr", "train"]
