"""Generate docs/models.md — the key tables of every registered model — from the models' schemas.

    python -m tirender.docgen > docs/models.md      (tests/test_docs.py checks it is current)
"""
import sys

from .bsdfs import registry as bsdfs
from .emitters import registry as emitters
from .emitters.base import COMMON_KEYS
from .integrators import registry as integrators
from .media import phase, registry as media
from .schema import keys_table
from .sensors import registry as sensors

HEADER = """# Model reference

Generated from the models' own declarations (`python -m tirender.docgen > docs/models.md`); every
key below is validated before rendering starts (type, YAML booleans only, range, finiteness).
Texture keys accept a number, an RGB list or a bitmap mapping (see [scenes.md](scenes.md)) and become
differentiable parameters named `<id>.<key>` (`roughness` for `alpha`).
"""


def _first_line(doc):
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ")


def _mitsuba_note(defaults, name=None):
    """One line naming Mitsuba 3's defaults that differ from the YAML ones (what an XML scene gets)."""
    if not defaults:
        return ""
    if callable(defaults):        # defaults that depend on the given properties: the function says which
        doc = " ".join((defaults.__doc__ or "").split())
        return f"\nIn Mitsuba XML scenes{' (' + name + ')' if name else ''}: {doc}\n"
    items = ", ".join(f"`{k}` = `{v}`" for k, v in defaults.items())
    return f"\nIn Mitsuba XML scenes{' (' + name + ')' if name else ''}, Mitsuba's defaults: {items}.\n"


def _section(title, models, names=lambda m: (m.NAME,)):
    out = [f"\n## {title}\n"]
    for m in models:
        mod = sys.modules[m.__module__]
        out.append(f"\n### `{'` / `'.join(names(m))}`\n\n{_first_line(m.__doc__ or mod.__doc__)}\n")
        if m.KEYS:
            out.append("\n" + keys_table(m.KEYS) + "\n")
            out.append(_mitsuba_note(getattr(m, "MITSUBA_DEFAULTS", {})))
        else:
            out.append("\nNo keys.\n")
    return "".join(out)


def markdown():
    parts = [HEADER]
    parts.append(_section("BSDFs (`bsdfs:` entries, `shapes[i].bsdf`)", bsdfs.MODELS))
    parts.append("\nAny BSDF also accepts `twosided: true` and `normalmap: <texture>`, which wrap it in the "
                 "models of the same names.\n")
    parts.append(_section("Emitters (`emitters:` entries; `area` on `shapes[i].emitter`)", emitters.MODELS))
    parts.append("\nAny emitter also accepts:\n\n" + keys_table(COMMON_KEYS) + "\n")
    parts.append(_section("Media (`media:` entries, `shapes[i].interior` / `exterior`)", media.MEDIA,
                          lambda m: (m.NAME,) + m.ALIASES))
    parts.append(_section("Phase functions (`phase:` of a medium)", phase.PHASES))
    parts.append(_section("Sensors (`sensors:` entries; `film:` in docs/scenes.md)", sensors.MODELS))
    out = ["\n## Integrators (`integrator:`)\n"]
    for mod in integrators.PRIMAL_MODULES:
        out.append(f"\n### `{'` / `'.join(mod.NAMES)}`\n\n{_first_line(mod.__doc__)}\n\n{keys_table(mod.KEYS)}\n")
        for name, d in getattr(mod, "MITSUBA_DEFAULTS", {}).items():
            out.append(_mitsuba_note(d, f"`{name}`"))
    methods = ", ".join(f"`{m}`" for m in integrators.METHODS)
    out.append(f"\nGradient methods (`render_grad(method=...)`, `optimize.method`): {methods}.\n")
    parts.append("".join(out))
    return "".join(parts)


if __name__ == "__main__":
    print(markdown(), end="")
