"""The medium registry (one line per model). Media are attached to shapes (``interior`` /
``exterior``); their coefficients are pool volumes (grid.py); the walk treats HOMOGENEOUS media
analytically and the others by delta / ratio tracking (walk/media.py). Phase functions have their
own registry (phase.py)."""
from .heterogeneous import Heterogeneous
from .homogeneous import Homogeneous

MEDIA = (
    Homogeneous,
    Heterogeneous,
)
for _tag, _m in enumerate(MEDIA):
    _m.TAG = _tag
BY_NAME = {n: m for m in MEDIA for n in (m.NAME,) + m.ALIASES}
