"""``no_grad``: run code without recording a graph (inference, decoding, optimizer updates)."""
import functools

from ._core import is_grad_enabled, set_grad_enabled


class no_grad:
    """Context manager and decorator, as ``torch.no_grad``."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        return wrapper
