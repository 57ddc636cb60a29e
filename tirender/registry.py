"""What the model registries share (bsdfs/registry.py, emitters/registry.py, media/registry.py,
media/phase.py): a model's tag is its index in its registry's tuple."""


def register(models):
    """Number `models` (tag = index); returns ({YAML name or alias: model}, the mask of them all)."""
    for tag, m in enumerate(models):
        m.TAG = tag
    return {n: m for m in models for n in (m.NAME,) + tuple(getattr(m, "ALIASES", ()))}, (1 << len(models)) - 1


def mask_of(by_name, names):
    """Bitmask of the tags of the models called `names`."""
    return sum(1 << by_name[n].TAG for n in names)
