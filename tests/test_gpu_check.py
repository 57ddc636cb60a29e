"""benchmarks/gpu_check.py --dry-run: the GPU check's every step (setup, the `gpu` tests with the CPU standing in
for the devices, the timings beside Mitsuba, the table) runs end to end before any GPU exists."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PARTS = ("surface", "surface_more", "volume", "mcmc", "attached", "radiance_field", "torch", "polarized")


@pytest.mark.slow
@pytest.mark.extended      # about 8 minutes of compilation and rendering on 2 cores
def test_gpu_check_dry_run(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TIRENDER_ARCH", None)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--dry-run", "--out",
                        str(tmp_path), "--budget", "1200"], capture_output=True, text=True, env=env, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "gpu_check_dry.json").read_text())
    text = (tmp_path / "gpu_check_dry.md").read_text()
    assert text.startswith("# GPU check (dry run") and "| workload | tirender | Mitsuba 3 | ratio |" in text
    outcomes = res["tests"]["outcomes"]
    for part in PARTS:     # every part ran with the CPU as the device; none failed (torch may be missing)
        got = [v for k, v in outcomes.items() if f"[{part}-cpu]" in k]
        assert got and got[0] in ("passed", "skipped: torch is not installed"), (part, got)
    assert sum(v == "passed" for v in outcomes.values()) >= len(PARTS) - 1
    for cuda_or_vk in ("cuda", "vulkan"):   # this machine has no GPU: those cases are skipped, saying why
        assert all(v.startswith("skipped") for k, v in outcomes.items() if f"-{cuda_or_vk}]" in k)
    assert len(res["bench"]) == 4
    for row in res["bench"]:
        assert "error" not in row["tirender"] and row["tirender"]["median"] > 0, row
        if res["info"].get("mitsuba_variant", "").endswith("rgb"):
            assert "error" not in row["mitsuba"] and row["mitsuba"]["median"] > 0, row
