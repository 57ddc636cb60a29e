"""io."""
import importlib

from ..errors import ConfigError


def require(module, needs):
    """The imported pip dependency ``module``, or the ConfigError "<needs> the <module> package (pip install
    <module>)" where it is not installed (needs: e.g. "reading images needs")."""
    try:
        return importlib.import_module(module)
    except ImportError:                                  # pragma: no cover - a dependency
        raise ConfigError(f"{needs} the {module} package (pip install {module})") from None
