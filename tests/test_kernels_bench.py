"""The asv kernel benchmarks are well formed (params match param_names) and run at all."""

import inspect

import pytest

import bench.bench_kernels as bk

CLASSES = [c for _, c in inspect.getmembers(bk, inspect.isclass) if c.__module__ == bk.__name__]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_params_match_param_names(cls):
    assert len(cls.params) == len(cls.param_names)
    assert any(name.startswith(("time_", "peakmem_", "track_")) for name in dir(cls))


def test_one_benchmark_of_each_class_runs():
    smallest = {
        "MatmulW4": (1, 128),
        "MatmulW8": (1,),
        "NormBiasGelu": (1,),
        "DecodeAttention": ("int8", 512),
        "MatmulPaths": (1, bk.MatmulPaths.params[1][-1], "w4-g32"),
        "MatmulPeer": (1, "q4_0 CPU"),
    }
    for cls in CLASSES:
        args = smallest[cls.__name__]
        bench = cls()
        try:
            bench.setup(*args)
        except NotImplementedError:  # asv's "skip": MatmulPeer without ggml's libraries
            assert cls.__name__ == "MatmulPeer"
            continue
        for name in dir(bench):
            if name.startswith(("time_", "track_")):
                getattr(bench, name)(*args)


def test_a_benchmark_setup_steadies_memory_and_restore_undoes_it():
    """pin_threads turns off NumPy's huge-page advice for the benchmark process (and glibc's
    per-call mmap); restore_memory, which tests/conftest.py calls after each test, turns the
    advice back on."""
    import numpy as np

    from bench import common

    set_advice = np._core.multiarray._set_madvise_hugepage  # returns the previous setting
    bk.NormBiasGelu().setup(1)
    assert set_advice(False) is False
    common.restore_memory()
    assert set_advice(True) is True
