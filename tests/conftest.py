import os
import sys

# Tests import the shared helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

# Same thread count as the core's BLAS; deterministic reference numbers.
torch.set_num_threads(2)
