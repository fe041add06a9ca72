"""Fixtures that put the process's runtime back as each test found it: the maths' thread count, the kernel level and,
where torch is loaded, torch's threads. tests/conftest.py takes them; the ThreadSanitizer run (scripts/sanitize.sh,
no conftest, no torch) loads this file as a plugin: -p runtime_fixtures."""
import sys

import pytest

import ctransformer as ct


def pytest_collection_modifyitems(items):
    """A test that sets the thread count (the num_threads fixture) is a threads test too."""
    for item in items:
        if "num_threads" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.threads)


def _runtime():
    torch = sys.modules.get("torch")
    return ct.get_num_threads(), ct.kernel_level(), torch.get_num_threads() if torch else None


@pytest.fixture(autouse=True)
def _runtime_left_as_found():
    """Every test leaves the thread counts and the kernel level as it found them: a test changes them through the
    fixtures below (num_threads, kernel_level), which put them back however it ends. A test that changes them by
    hand and forgets fails here, after its own result, and the next test runs as this one found them."""
    found = _runtime()
    yield
    left = _runtime()
    if left != found:
        ct.set_num_threads(found[0])
        ct.set_kernel_level("auto")
        if found[2] is not None:
            sys.modules["torch"].set_num_threads(found[2])
        pytest.fail(f"the test left (threads, kernel level, torch threads) at {left}, found at {found}: "
                    "use the num_threads or kernel_level fixture")


@pytest.fixture
def num_threads():
    """set(n): the maths run on n threads for the rest of the test; the count found is put back after it."""
    found = ct.get_num_threads()
    yield ct.set_num_threads
    ct.set_num_threads(found)


@pytest.fixture
def set_kernel_level():
    """ct.set_kernel_level for the test; "auto" (the CPU's best, or the cap's) is put back after it."""
    yield ct.set_kernel_level
    ct.set_kernel_level("auto")


@pytest.fixture
def kernel_level(request):
    """The kernel level a test runs at (parametrise it indirectly, with kernel_levels.levels_for); "auto" after."""
    from kernel_levels import at_level

    with at_level(request.param) as level:
        yield level
