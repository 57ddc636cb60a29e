"""Scene storage: Storage.upload (one kernel for all of a scene's arrays) writes exactly what
field.from_numpy of the zero-padded arrays would, for every field kind (scalar rank 1 and 2,
vector, matrix), also over a previous scene's larger contents."""
import os

import numpy as np

import tirender
from tirender.scene.storage import padded

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _check(sc):
    st = sc.bind()
    assert st.owner is sc
    for name, arr in sc._arrays.items():
        got = getattr(st, name).to_numpy()
        want = padded(arr, got.shape[0], got.dtype).reshape(got.shape)
        assert np.array_equal(got, want), name


def test_upload_writes_every_field_as_from_numpy_of_the_padded_array():
    big = tirender.load_scene(os.path.join(ROOT, "configs", "volume_recovery.yaml"))
    _check(big)
    small = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    _check(small)            # rows the volume scene wrote beyond the texture scene's counts are zero again
    kinds = {type(getattr(small.bind(), n)).__name__ + str(len(getattr(small.bind(), n).shape))
             for n in small._arrays}
    assert {"ScalarField1", "ScalarField2", "MatrixField1"} <= kinds


def test_upload_of_empty_arrays_zeroes_the_fields():
    sc = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    st = sc.bind()
    st.upload({"emtri_idx": np.zeros((0,), np.int32), "tri_p0": np.zeros((0, 3), np.float32),
               "bsdf_f": np.ones((1, st.bsdf_f.shape[1]), np.float32)})
    assert not st.emtri_idx.to_numpy().any() and not st.tri_p0.to_numpy().any()
    f = st.bsdf_f.to_numpy()
    assert (f[0] == 1).all() and not f[1:].any()
    sc2 = tirender.load_scene(os.path.join(ROOT, "configs", "texture_recovery.yaml"))
    _check(sc2)
