"""Schedules: samples per pixel over iterations, and multi-resolution stages. (Plain Python without taichi: the
benchmarks' Mitsuba children load this file alone, benchmarks/time_to_quality.py.)"""


def spp_at(iteration, base, double_every=None, max_spp=None):
    """spp for an iteration: `base`, doubled every `double_every` iterations, capped at `max_spp`."""
    spp = int(base)
    if double_every:
        spp = base * (2 ** (iteration // int(double_every)))
    if max_spp:
        spp = min(spp, int(max_spp))
    return max(int(spp), 1)


def resolution_at(iteration, schedule):
    """schedule: list of [start_iteration, resolution] (sorted); the active resolution (int or [h, w])."""
    res = None
    for it, r in schedule:
        if iteration >= it:
            res = r
    return res


def parse_multires(spec, file, key):
    from ..errors import ConfigError
    if not isinstance(spec, list) or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in spec):
        raise ConfigError("expected a list of [iteration, resolution] pairs", file, key)
    out = sorted((int(a), b) for a, b in spec)
    if out[0][0] != 0:
        raise ConfigError("the first multi-resolution stage must start at iteration 0", file, key)
    return out
