"""The medium registry (one line per model). Media are attached to shapes (``interior`` /
``exterior``); their coefficients are pool volumes (grid.py); the walk treats HOMOGENEOUS media
analytically and the others by delta / ratio tracking (walk/media.py). Phase functions have their
own registry (phase.py)."""
from ..registry import register
from .heterogeneous import Heterogeneous
from .homogeneous import Homogeneous

MEDIA = (
    Homogeneous,
    Heterogeneous,
)
BY_NAME, ALL = register(MEDIA)


def add(model):
    """Append ``model`` (a user model: a declaration, tirender/plugins.py) as tag len(MEDIA); BY_NAME and ALL
    recomputed."""
    global MEDIA, BY_NAME, ALL
    MEDIA = MEDIA + (model,)
    BY_NAME, ALL = register(MEDIA)
