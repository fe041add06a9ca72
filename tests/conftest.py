import os
import sys

# Tests import the shared helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

# Same thread count as the core's BLAS; deterministic reference numbers.
torch.set_num_threads(2)

import pytest  # noqa: E402

# The fixtures that put the maths' threads and kernel level back, and the `threads` mark of a test that sets the threads
# (a plugin of their own: the ThreadSanitizer run, which has no conftest and no torch, loads it with -p runtime_fixtures).
from runtime_fixtures import (  # noqa: E402,F401
    _runtime_left_as_found, kernel_level, num_threads, pytest_collection_modifyitems, set_kernel_level)
