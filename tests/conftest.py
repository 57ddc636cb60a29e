"""One ti.init per test session (CPU unless TIRENDER_ARCH says otherwise)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tirender.backend as backend  # noqa: E402

backend.init(os.environ.get("TIRENDER_ARCH", "cpu"))

REFERENCE_DIR = os.path.join(os.path.dirname(__file__), "data", "reference")   # copies of the Mitsuba references


@pytest.fixture(scope="session")
def reference_dir():
    return os.path.abspath(REFERENCE_DIR)
