"""One ti.init per test session (CPU unless TIRENDER_ARCH says otherwise).

Lanes: the default lane (``python -m pytest -q tests``, CI) runs every test not marked ``extended``, ``slow`` ones
included; the fast lane (``-m "not slow"``) leaves the slow ones out; ``--extended`` adds the heavier variants.
Every extended test is a heavier variant (more parameters, samples, pairs, workers, views or variants) of a check
the default lane makes on the same feature: the default lane fails when a feature breaks, the extended lane
measures it more closely.

Kernels: volume kernels are compiled for a superset of models in this process (TIRENDER_SHARE_KERNELS=1, also in
child processes through the environment: tirender/backend.py share_kernels), so that the suite's many volume scenes
share them; a user's process compiles exactly its scene's models. The default lane proves both the same
(tests/test_prbvolpath.py test_exact_kernels_match_shared_ones, and that no other family reads the setting) and
runs forward mode on volumes, a spectral medium's image and the polarized medium on the exact kernels."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TIRENDER_SHARE_KERNELS", "1")      # see the module doc
# one BLAS thread per process (before numpy's import; the xdist workers and children inherit it): the lane runs a
# worker per core, and OpenBLAS's extra threads only spin against the other worker (the spectral table's fit,
# spectra/fit_srgb_table.py: 37 CPU-s with OpenBLAS's two threads, 19 with one, at about the same wall time)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tirender.backend as backend  # noqa: E402

backend.init(os.environ.get("TIRENDER_ARCH", "cpu"))

REFERENCE_DIR = os.path.join(os.path.dirname(__file__), "data", "reference")   # copies of the Mitsuba references


@pytest.fixture(scope="session")
def reference_dir():
    return os.path.abspath(REFERENCE_DIR)


# Test files that share compiled kernels (the same scene specialisations) run on one worker
# (pytest-xdist --dist loadgroup, see pyproject.toml); every other file is a group of its own.
KERNEL_GROUPS = {
    "surface": ("test_prb_gradients", "test_rb", "test_gradcheck", "test_forward", "test_forward_mode", "test_optimize",
                "test_errors", "test_distributed", "test_python_optimizer"),
    "volume": ("test_media", "test_prbvolpath", "test_backend_vulkan", "test_torch"),
    # prb_attached's geometry kernels (edges, light-aimed boundary samples) on plain-mesh storages
    "geometry": ("test_geometry_gradients", "test_curves", "test_instancing", "test_batch_sensor", "test_shadow_edges",
                 "test_shadow_art"),
    # prb_attached under the four Dirac lights, a floor and an SDF sheet (tests/scenes.moving_under_point_lights)
    "point_lights": ("test_point_lights_moving", "test_sdfgrid"),
    # the light tracer's and the path tracer's kernels of the emitter scenes (a beam, a constant environment)
    "lights": ("test_ptracer", "test_emitters"),
}
_GROUP_OF = {f: g for g, files in KERNEL_GROUPS.items() for f in files}

# Seconds each group took in a cold default lane (python3 tools/lane_group_seconds.py on its --durations=0 output;
# groups under 15 s left out). The groups are handed to the two workers longest first (pyproject.toml:
# --no-loadscope-reorder keeps this order; pytest-xdist's own order is by number of tests, which left a 59-s group
# of one test for the end of the lane, while the other worker idled); the groups not listed follow in file order.
GROUP_SECONDS = {"surface": 334, "volume": 282, "geometry": 237, "test_bsdfs": 176, "lights": 163, "test_variants": 127,
                 "test_mitsuba_suite": 103, "test_radiance_field": 79, "point_lights": 78, "test_attached_prb": 76,
                 "test_dispersion_gradients": 68, "test_polarization": 63, "test_mcmc": 61, "test_parity": 56,
                 "test_quadric_gradients": 56, "test_polarized_gradients": 54, "test_grin": 49,
                 "test_sampled_spectra": 48, "test_hostile": 43, "test_mesh_attributes": 39, "test_optics_adjoints": 33,
                 "test_textures_mitsuba": 25, "test_plugins": 23, "test_film": 22, "test_projector": 18,
                 "test_caustic": 15, "test_bumpmap_mitsuba": 15}


@pytest.fixture(scope="session")
def extended(request):
    """Whether this run is the extended lane (--extended): children and parametrised checks take its budget."""
    return request.config.getoption("--extended")


def pytest_addoption(parser):
    parser.addoption("--extended", action="store_true",
                     help="also run the tests marked `extended` (left out by default to keep CI under 20 minutes)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Group the tests by shared kernels (xdist_group), the longest groups first (GROUP_SECONDS), and run the Vulkan
    subset last in its group: its CPU halves reuse the kernels the other tests of its group compiled. Tests marked
    `extended` are skipped unless --extended is given."""
    skip_ext = None if config.getoption("--extended") else pytest.mark.skip(
        reason="extended lane: a heavier variant of a check the default lane also makes (run with --extended)")
    group, first = {}, {}
    for i, item in enumerate(items):
        if skip_ext is not None and item.get_closest_marker("extended") is not None:
            item.add_marker(skip_ext)
        stem = os.path.splitext(os.path.basename(str(item.fspath)))[0]
        group[item] = g = _GROUP_OF.get(stem, stem)
        first.setdefault(g, i)
        item.add_marker(pytest.mark.xdist_group(g))
    items.sort(key=lambda item: (-GROUP_SECONDS.get(group[item], 0), first[group[item]],
                                 item.get_closest_marker("vulkan") is not None))
