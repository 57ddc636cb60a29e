"""What the model registries share (bsdfs/registry.py, emitters/registry.py, media/registry.py,
media/phase.py): a model's tag is its index in its registry's tuple."""


def register(models):
    """Number `models` (tag = index) and return {YAML name or alias: model}."""
    for tag, m in enumerate(models):
        m.TAG = tag
    return {n: m for m in models for n in (m.NAME,) + tuple(getattr(m, "ALIASES", ()))}


def mask_of(by_name, names):
    """Bitmask of the tags of the models called `names`."""
    return sum(1 << by_name[n].TAG for n in names)
