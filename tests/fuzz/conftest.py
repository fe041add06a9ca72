"""Hypothesis profiles for the property-based tests in this folder.

- "ci" (the default): 100 examples per test, derandomized (the examples follow from
  each test's code, not a random seed), so a CI run is repeatable; the whole folder takes about a
  quarter of a minute on 2 cores (docs/proof.md, "Fuzzing").
- "long": `python -m pytest tests/fuzz --hypothesis-profile=long`, 1,000 examples per test (over
  10,000 in all), random each run: for hunting, not for CI.
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

_quiet = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=100, derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=_quiet)
settings.register_profile("long", max_examples=1000, deadline=None, print_blob=True, suppress_health_check=_quiet)


@pytest.fixture(scope="module", autouse=True)
def _cap_address_space(room=2 << 30):
    """Hostile sizes below physical memory (e.g. a shape of [2**31] floats, 8 GiB) are valid
    requests the allocator grants; capped, they fail with MemoryError instead of filling the
    machine. The cap holds for this folder's test modules only and is lifted after each: set for the
    whole process, it starved the tests that run after the fuzzing in the same `pytest tests` (torch
    could not allocate a base model). Not under a sanitizer: its runtime maps terabytes of shadow
    memory on its own."""
    if "LD_PRELOAD" in os.environ:
        yield
        return
    import resource

    with open("/proc/self/statm") as f:
        cap = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + room
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def pytest_configure(config):
    # hypothesis's plugin has already loaded a profile named on the command line; otherwise "ci".
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci")
