"""BSDF models. Each module holds one model: its schema and flags, eval / pdf / sample, and the
hand-written adjoints (parameters and directions) side by side; ``registry.py`` lists the models and
generates the dispatch; ``base.py`` documents the model interface. Shared maths: ``fresnel.py``
(Fresnel equations and their derivatives), ``microfacet.py`` (GGX / Beckmann D, anisotropic,
Smith G, visible-normal sampling and their derivatives).
"""
