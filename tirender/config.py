"""Job configs (YAML): loading, `--set key=value` overrides and section validation.

A config has a ``scene:`` section (inline mapping or a path to a scene YAML) and job sections
(``render:``, ``optimize:``, ``radiance_field:``, ``grin:``, ``viewer:``); ``arch:`` picks the backend.
A file without ``scene:`` is itself a scene file.
"""
import copy
import os

import yaml

from .errors import ConfigError
from .scene.description import load_yaml
from .schema import Integer, String, validate

TOP_KEYS = {"arch", "variant", "scene", "render", "optimize", "radiance_field", "grin", "viewer", "seed"}


def apply_overrides(data, overrides, file=None):
    """Apply ["a.b.c=value", ...] to a nested dict (values parsed as YAML). List items can be
    addressed by index (``shapes.2.bsdf``) or by their ``id`` (``shapes.floor.bsdf``)."""
    data = copy.deepcopy(data)
    for ov in overrides or []:
        if "=" not in ov:
            raise ConfigError(f"override '{ov}' must look like key=value", file, "--set")
        key, val = ov.split("=", 1)
        try:
            value = yaml.safe_load(val)
        except yaml.YAMLError:
            raise ConfigError(f"cannot parse value '{val}'", file, key)
        parts = key.strip().split(".")
        cur = data
        for i, p in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(cur, list):
                idx = None
                if p.isdigit() and int(p) < len(cur):
                    idx = int(p)
                else:
                    for j, item in enumerate(cur):
                        if isinstance(item, dict) and str(item.get("id")) == p:
                            idx = j
                if idx is None:
                    raise ConfigError(f"no list item '{p}'", file, key)
                if last:
                    cur[idx] = value
                else:
                    cur = cur[idx]
            elif isinstance(cur, dict):
                if last:
                    cur[p] = value
                else:
                    if p not in cur or cur[p] is None:
                        cur[p] = {}
                    cur = cur[p]
            else:
                raise ConfigError(f"cannot set '{p}' inside a {type(cur).__name__}", file, key)
    return data


def load_config(source, overrides=None, base_dir=None, scene_overrides=None, defines=None):
    """A job config -> dict with a resolved ``scene`` (mapping) and ``_file``/``_dir``/``_scene_file``.

    source: a YAML file name (a job config with a ``scene:`` section, or a scene file) or an
    already loaded dict of either form (relative file names resolve against base_dir, default the
    working directory). ``overrides`` ("a.b=v") apply to the config, ``scene_overrides`` to the
    resolved scene mapping. A ``.xml`` file is a Mitsuba 3 scene (scene/mitsuba_xml.py; ``defines``
    {name: value} override its ``<default>`` parameters, the CLI's ``-D``). The one loading path of
    the API, the CLI, the optimiser and the viewer."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path.lower().endswith(".xml"):
            from .scene.mitsuba_xml import load_xml
            data = load_xml(path, defines)
        else:
            if defines:
                raise ConfigError("-D applies to Mitsuba XML scenes only (use --set)", path)
            data = load_yaml(path)
    elif isinstance(source, dict):
        path = None
        data = copy.deepcopy(source)
    else:
        raise ConfigError(f"expected a file name or a dict, got {type(source).__name__}")
    if "scene" not in data:
        # a scene file: "--set scene.x=v" / "--set render.spp=v" address the job, "--set x=v" the scene
        data = {"scene": data}
        top = [o for o in overrides or [] if str(o).split(".", 1)[0].split("=", 1)[0] in TOP_KEYS]
        inner = [o for o in overrides or [] if o not in top]
        data["scene"] = apply_overrides(data["scene"], inner, path)
        data = apply_overrides(data, top, path)
    else:
        data = apply_overrides(data, overrides, path)
    for k in data:
        if k not in TOP_KEYS:
            raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(sorted(TOP_KEYS))})", path, k)
    base = os.path.dirname(os.path.abspath(path)) if path else os.path.abspath(base_dir or os.getcwd())
    scene = data["scene"]
    if isinstance(scene, str):
        sp = scene if os.path.isabs(scene) else os.path.join(base, scene)
        if sp.lower().endswith(".xml"):
            from .scene.mitsuba_xml import load_xml
            scene = load_xml(sp, defines)["scene"]
        else:
            scene = load_yaml(sp)
        data["_scene_file"] = sp
    elif not isinstance(scene, dict):
        raise ConfigError("expected a mapping or a file name", path, "scene")
    elif "include" in scene:
        # scene: {include: other.yaml, set: ["sensors.0.film.width=128", ...]}
        if set(scene) - {"include", "set"}:
            raise ConfigError("with 'include', only 'set' may be given", path, "scene")
        inc = scene["include"]
        sp = inc if os.path.isabs(inc) else os.path.join(base, inc)
        inner = load_yaml(sp)
        if "scene" in inner and isinstance(inner["scene"], dict):
            inner = inner["scene"]
        sets = scene.get("set") or []
        if not isinstance(sets, list):
            raise ConfigError("expected a list of key=value strings", path, "scene.set")
        scene = apply_overrides(inner, sets, path)
        data["_scene_file"] = sp
    else:
        data["_scene_file"] = path
    data["scene"] = apply_overrides(scene, scene_overrides, path) if scene_overrides else scene
    data["_scene_dir"] = os.path.dirname(os.path.abspath(data["_scene_file"])) if data["_scene_file"] else base
    data["_file"] = path
    data["_dir"] = base
    return data


def section(cfg, name, allowed, required=()):
    """A validated job section (dict) of the config."""
    sec = cfg.get(name) or {}
    if not isinstance(sec, dict):
        raise ConfigError("expected a mapping", cfg.get("_file"), name)
    for k in sec:
        if k not in allowed:
            raise ConfigError(f"unknown key '{k}' (expected one of: {', '.join(sorted(allowed))})",
                              cfg.get("_file"), f"{name}.{k}")
    for k in required:
        if k not in sec:
            raise ConfigError("missing required key", cfg.get("_file"), f"{name}.{k}")
    return sec


# The ``render:`` section of a job config; the CLI flags of ``tirender render`` with the same names
# are checked by the same keys (the flag named in the error instead of the file and key).
RENDER_KEYS = {k.name: k for k in (
    Integer("spp", default=64, lo=1, hi=1 << 24, doc="samples per pixel"),
    Integer("seed", default=0, lo=0, hi=(1 << 32) - 1, doc="fixes the image (per backend)"),
    String("out", default=None, doc="output folder (default out/<config name>)"),
    Integer("sensor", default=0, lo=0, hi=1 << 16, doc="index of the sensor rendered"),
    String("integrator", default=None, doc="override the scene's integrator"),
)}
FILM_FLAGS = (Integer("width", lo=1, hi=1 << 15), Integer("height", lo=1, hi=1 << 15))


def render_settings(cfg, args):
    """The settings of ``tirender render``: the config's ``render:`` section overridden by the flags,
    every value checked by RENDER_KEYS. Returns a dict with spp, seed, out, sensor, integrator,
    width, height, and for each of them ``<name>_file`` / ``<name>_key``: where it came from."""
    f = cfg.get("_file")
    vals = validate(cfg.get("render") or {}, tuple(RENDER_KEYS.values()), f, "render")
    out = {}
    for name, key in RENDER_KEYS.items():
        flag = getattr(args, name, None)
        if flag is not None:
            out[name], out[f"{name}_file"], out[f"{name}_key"] = key.parse(flag, None, f"--{name}"), None, f"--{name}"
        else:
            out[name], out[f"{name}_file"], out[f"{name}_key"] = vals.get(name, key.default), f, f"render.{name}"
    for key in FILM_FLAGS:
        v = getattr(args, key.name, None)
        out[key.name] = None if v is None else key.parse(v, None, f"--{key.name}")
    if out["out"] is None:
        stem = os.path.splitext(os.path.basename(f or "render"))[0]
        out["out"], out["out_file"], out["out_key"] = os.path.join("out", stem), None, "--out (default)"
    if out["integrator"] is not None:
        from .integrators.registry import check_type
        try:
            check_type(out["integrator"])
        except ConfigError as e:
            raise ConfigError(e.problem, out["integrator_file"], out["integrator_key"]) from None
    return out


def optimization_scene(cfg):
    """The config an optimisation runs: its scene's sensors replaced by ``optimize.sensors`` where given (the
    sensors it renders through, as Mitsuba's mi.render(scene, sensor=...): e.g. a batch of views of a Mitsuba
    scene file loaded unchanged; `tirender render` and the viewer keep the scene's own). Idempotent."""
    opt = cfg.get("optimize")
    if not isinstance(opt, dict) or "sensors" not in opt or cfg.get("_optimize_sensors"):
        return cfg
    if not isinstance(opt["sensors"], list) or not opt["sensors"]:
        raise ConfigError("expected a non-empty list of sensors (they replace the scene's)", cfg.get("_file"),
                          "optimize.sensors")
    return dict(cfg, scene=dict(cfg["scene"], sensors=copy.deepcopy(opt["sensors"])), _optimize_sensors=True)
