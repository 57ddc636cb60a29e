"""Emitters. One module per model holding sampling, evaluation, pdf and the adjoint of the
emitted radiance (a texture adjoint into the parameter pool).

Type tags match scene/description.py: AREA=0, POINT=1, DIRECTIONAL=2, CONSTANT=3, ENVMAP=4.
"""
AREA, POINT, DIRECTIONAL, CONSTANT, ENVMAP = range(5)
