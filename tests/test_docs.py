"""Documentation stays true: the model reference is generated from the models' declarations, and
the README links every page of docs/."""
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def test_model_reference_is_current():
    from tirender.docgen import markdown
    with open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8") as f:
        assert f.read() == markdown(), "docs/models.md is stale: python -m tirender.docgen > docs/models.md"


def test_readme_links_every_doc_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if name.endswith(".md"):
            assert f"docs/{name}" in readme, f"README does not link docs/{name}"


def test_every_model_documents_its_keys():
    from tirender.bsdfs import registry as bsdfs
    from tirender.emitters import registry as emitters
    from tirender.media import phase, registry as media
    from tirender.sensors import registry as sensors
    for m in bsdfs.MODELS + emitters.MODELS + media.MEDIA + phase.PHASES + sensors.MODELS:
        for k in m.KEYS:
            assert k.doc, f"{m.NAME}.{k.name} has no documentation"
