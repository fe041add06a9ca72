"""A smaller CPU stood in for: when ct's kernels are capped (CTRANSFORMER_KERNEL_LEVEL), hold its peers to
the same instruction set, so a table made on an AVX-512 machine compares what an AVX2-only CPU would run.

CTRANSFORMER_KERNEL_LEVEL caps ct alone. Without this, `CTRANSFORMER_KERNEL_LEVEL=avx2 benchmarks/run.py`
timed ct's AVX2 kernels against CTranslate2 at AVX-512 with Intel MKL and torch at AVX-512: a comparison no
CPU makes. Each peer has its own documented switch, read when its library loads (so `apply()` runs before
torch, ctransformer or a CTranslate2 worker is imported or started):

- OpenBLAS (ct's products, torch's none): OPENBLAS_CORETYPE, the core an AVX2 CPU's OpenBLAS picks;
- torch's own kernels: ATEN_CPU_CAPABILITY;
- Intel MKL (torch's sgemm, CTranslate2's GEMM on Intel CPUs): MKL_ENABLE_INSTRUCTIONS;
- oneDNN (torch's bf16 products, CTranslate2's GEMM without MKL): ONEDNN_MAX_CPU_ISA;
- CTranslate2's own kernels: CT2_FORCE_CPU_ISA, which ct2_process.configs() then fixes in every setting.

What stays of the bigger CPU: its caches, its clock and its FMA units (a Zen 1 splits a 256-bit FMA in two
128-bit halves; an AVX-512 CPU runs two 256-bit FMAs a cycle), so the figures are a stand-in, named as such
in the tables, and not an AVX2 CPU's own. A variable already set is left as it is.
"""
import os

# CTRANSFORMER_KERNEL_LEVEL's names (cpp/src/runtime/cpu_features.cpp) -> the x86-64 level the peers are held to.
LEVELS = {"portable": "x86-64", "x86-64": "x86-64", "x86-64-v2": "x86-64",
          "avx2": "x86-64-v3", "avx2_vnni": "x86-64-v3", "x86-64-v3": "x86-64-v3"}
# Each level's settings for the peers, by their documented names.
PEERS = {
    "x86-64-v3": {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                  "ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"},
    "x86-64": {"OPENBLAS_CORETYPE": "Prescott", "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
               "ONEDNN_MAX_CPU_ISA": "SSE41", "CT2_FORCE_CPU_ISA": "GENERIC"},
}


def level(environ=os.environ):
    """The x86-64 level ct is capped at, if it is one the peers can be held to; None otherwise (no cap, or an
    AVX-512 one: the peers' own choice on this CPU is then the fair one)."""
    return LEVELS.get(environ.get("CTRANSFORMER_KERNEL_LEVEL", "").strip().lower())


def apply(environ=os.environ):
    """Set the peers' switches for ct's capped level in `environ` (those not already set); returns the run's
    record of it, ct's own cap ("kernel_level") and what the peers are held to ({} when ct is not capped below
    AVX-512). CT2_FORCE_CPU_ISA is returned but not set: CTranslate2's workers take their CT2_ settings from
    ct2_process.configs() alone."""
    held = PEERS.get(level(environ), {})
    if not held:
        return {}
    for name, value in held.items():
        if not name.startswith("CT2_"):
            environ.setdefault(name, value)
    return {"kernel_level": environ["CTRANSFORMER_KERNEL_LEVEL"],
            **{name: (value if name.startswith("CT2_") else environ[name]) for name, value in held.items()}}
