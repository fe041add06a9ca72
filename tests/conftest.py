import os
import sys

# Tests import the shared helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

# Same thread count as the core's BLAS; deterministic reference numbers.
torch.set_num_threads(2)

import pytest  # noqa: E402


@pytest.fixture
def kernel_level(request):
    """The kernel level a test runs at (parametrise it indirectly, with kernel_levels.levels_for); "auto" after."""
    from kernel_levels import at_level

    with at_level(request.param) as level:
        yield level
