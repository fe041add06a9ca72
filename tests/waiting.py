"""Waiting in tests: for a condition, never for a duration (torch-free: the ThreadSanitizer run imports it).

A test that waits for something to happen (every request's end, a server to listen, a row to be freed) polls the
condition and gives up only after HANG seconds, which no machine reaches unless something hangs; the time it took is
never asserted (CPython's test.support waits the same way, with LONG_TIMEOUT of 5 minutes). What a clock decides is
measured in benchmarks/, not asserted here."""
import asyncio
import time

HANG = 300.0


def wait_until(condition, what, timeout=HANG, interval=0.01):
    """Polls condition() until it is true; AssertionError naming `what` after `timeout` seconds (a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


async def async_wait_until(condition, what, timeout=HANG, interval=0.001):
    """wait_until for a coroutine: the event loop runs between polls."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(interval)
