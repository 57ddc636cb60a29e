"""PRB equals the gradient of the same Monte Carlo estimator differentiated another way
(per-path finite differences with identical random numbers, float64) to 1e-4 relative."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_prb_reproduces_the_estimator_gradient_f64():
    r = subprocess.run([sys.executable, os.path.join(HERE, "oracle_prb_f64.py")], capture_output=True, text=True,
                       cwd=os.path.join(HERE, ".."), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for name, v in res.items():
        assert v["rel"] < 1e-4, (name, v)
