"""Refuse, with a clear ImportError, to load an extension built for CPU features this machine lacks.

``pip install .`` builds for the x86-64 baseline and chooses its kernels at run time, so it runs on any
x86-64 CPU. A build with ``-march=native`` (``-C cmake.define.CTRANSFORMER_NATIVE=ON``) or a higher
``CTRANSFORMER_ARCH`` may use every instruction of the machine that built it: copied to an older CPU (a
wheel shared between machines, a cluster with mixed nodes), it would die of SIGILL at the first such one.
CMake records the features the build assumed (``_build_config.py``); here they are compared with
the running CPU's before ``_core`` is imported.
"""
import platform

FIX = ("Build it without CTRANSFORMER_NATIVE=ON and CTRANSFORMER_ARCH (pip install --force-reinstall . in "
       "the source tree): the default build runs on every x86-64 CPU and picks its kernels at run time; see "
       "docs/install.md, 'CPUs and portable builds'.")


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The running CPU's feature flags (Linux); None where they cannot be read."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name (Linux), for messages and figures that depend on it; None where it cannot be read."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def missing_features(required, available):
    """The required flags the CPU does not report, in the build's order."""
    if available is None:
        return []
    return [flag for flag in required if flag not in available]


def check_cpu(required=None, march=None, available=None):
    """Raise ImportError when the CPU lacks a feature the build needs (by default: this build's record)."""
    if required is None:
        try:
            from ._build_config import CPU_FLAGS, MARCH
        except ImportError:  # a build without the record (an older one): nothing to check against
            return
        required, march = CPU_FLAGS, MARCH
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return
    missing = missing_features(required, cpu_flags() if available is None else available)
    if missing:
        raise ImportError(
            f"this build of ctransformer was compiled for another CPU (-march={march or 'default'}) and uses "
            f"instructions this CPU does not have: {', '.join(missing)}. {FIX}")
