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


# aarch64's /proc/cpuinfo names no model, only the implementer and part numbers (MIDR_EL1): the cores people rent
# and own, by (implementer, part), from ARM's and Apple's published part numbers.
ARM_PARTS = {(0x41, 0xd0c): "ARM Neoverse-N1", (0x41, 0xd40): "ARM Neoverse-V1", (0x41, 0xd49): "ARM Neoverse-N2",
             (0x41, 0xd4f): "ARM Neoverse-V2", (0x41, 0xd8e): "ARM Neoverse-N3", (0x41, 0xd84): "ARM Neoverse-V3",
             (0x41, 0xd08): "ARM Cortex-A72", (0x41, 0xd0b): "ARM Cortex-A76", (0x41, 0xd41): "ARM Cortex-A78",
             (0xc0, 0xac3): "Ampere-1", (0xc0, 0xac4): "Ampere-1a", (0x61, 0x022): "Apple M1 (Icestorm)",
             (0x61, 0x023): "Apple M1 (Firestorm)", (0x61, 0x032): "Apple M2 (Blizzard)",
             (0x61, 0x033): "Apple M2 (Avalanche)"}


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name (Linux), for messages and figures that depend on it; None where it cannot be read.
    On aarch64, the core's name from its implementer and part (or those numbers, for a part not listed)."""
    fields = {}
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    return value.strip()
                if key in ("CPU implementer", "CPU part") and key not in fields:
                    fields[key] = value.strip()
    except OSError:
        return None
    if len(fields) == 2:
        try:
            ids = (int(fields["CPU implementer"], 16), int(fields["CPU part"], 16))
        except ValueError:
            return None
        return ARM_PARTS.get(ids, f"aarch64 implementer {ids[0]:#x} part {ids[1]:#x}")
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
