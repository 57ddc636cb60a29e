"""What the model registries share (bsdfs/registry.py, emitters/registry.py, media/registry.py,
media/phase.py): a model's tag is its index in its registry's tuple."""
from .errors import ConfigError


def register(models):
    """Number `models` (tag = index); returns ({YAML name or alias: model}, the mask of them all)."""
    for tag, m in enumerate(models):
        m.TAG = tag
    return {n: m for m in models for n in (m.NAME,) + tuple(getattr(m, "ALIASES", ()))}, (1 << len(models)) - 1


def mask_of(by_name, names):
    """Bitmask of the tags of the models called `names`."""
    return sum(1 << by_name[n].TAG for n in names)


def refuse_wider(used, needs):
    """ConfigError (one line, without the caller's prefix) where a model added to a registry ``needs`` (pairs
    (what, n)) more table columns than ``used`` (the widths the scenes already built have; None: none built)."""
    if used is None:
        return
    for (what, n), have in zip(needs, used):
        if n > have:
            raise ConfigError(f"its {n} {what} exceed the {have} of the scenes already built: register models before "
                              f"loading scenes")
