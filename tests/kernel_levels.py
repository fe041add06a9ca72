"""Running a test at every kernel level this CPU has, in one process (ct.set_kernel_level).

`levels_for(key)` gives one level per kernel of a product (ct's kernel table: "few_rows", "packed",
"bf16", "int8", ...), best first, so a test runs each kernel once and not each level. Parametrise the
`kernel_level` fixture (conftest.py) with it, indirectly; the fixture sets the level and puts back "auto"
however the test ends. On a CPU with fewer levels the list is shorter: every test still runs at least the
portable level, and the kernels a smaller CPU would pick are the ones run here (CTRANSFORMER_KERNEL_LEVEL caps
them the same way).
"""
import contextlib

import ctransformer as ct


def kernel_at(key, level=None):
    """The kernel the product `key` runs at `level` (now, when None)."""
    rows = ct._core._kernel_table(level)
    return next(row["kernel"] for row in rows if row["key"] == key)


def levels_for(key):
    """For each kernel of the product, the smallest level running it (the CPUs most like the ones it is for:
    AVX2's float kernels at avx2, not avx2_vnni), best first."""
    levels, lowest = ct.kernel_levels(), {}
    for level in levels:                    # best first: a later level of the same kernel is smaller
        lowest[kernel_at(key, level)] = level
    return sorted(lowest.values(), key=levels.index)


@contextlib.contextmanager
def at_level(level):
    """The kernels of `level` inside the block, "auto" after it."""
    ct.set_kernel_level(level)
    try:
        yield level
    finally:
        ct.set_kernel_level("auto")


def every_level(key):
    """An autouse fixture running each test of a module once per kernel of product `key`:
    `at_every_level = every_level("loops")` at the module's top level."""
    import pytest

    @pytest.fixture(params=levels_for(key), autouse=True, ids=lambda level: f"level={level}")
    def fixture(request):
        with at_level(request.param):
            yield request.param

    return fixture
