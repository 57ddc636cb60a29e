"""Emitters: one module per model (schema, sampling, evaluation, pdf and the adjoint of the emitted
radiance side by side); ``registry.py`` lists them and generates the dispatch. See base.py."""
