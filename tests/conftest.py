import os
import sys

# Tests import the shared helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

# Same thread count as the core's BLAS; deterministic reference numbers.
torch.set_num_threads(2)

# make test-levels (scripts/test_levels.sh) runs the tests on a build for another CPU level, first on
# PYTHONPATH: stop at once if the package imported is not that build (the run would prove nothing).
_expected_march = os.environ.get("CTRANSFORMER_EXPECT_MARCH")
if _expected_march:
    import ctransformer  # noqa: E402

    _march = ctransformer.build_info()["march"]
    if _march != _expected_march:
        raise RuntimeError(f"CTRANSFORMER_EXPECT_MARCH={_expected_march}, but the ctransformer imported "
                           f"({ctransformer.__file__}) was built for -march={_march or 'the default'}")


import pytest  # noqa: E402


@pytest.fixture
def kernel_level(request):
    """The kernel level a test runs at (parametrise it indirectly, with kernel_levels.levels_for); "auto" after."""
    from kernel_levels import at_level

    with at_level(request.param) as level:
        yield level
