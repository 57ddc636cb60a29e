"""Taichi function libraries shared by all integrators (rng, warps, frames, camera, film, ray queries)."""
