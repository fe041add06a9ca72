"""The BLAS under the core: loading it, reporting it, and warning when its kernels are below the CPU.

The core links OpenBLAS from the scipy-openblas32 wheel (the build numpy and SciPy ship) unless it was
built against a system OpenBLAS (``_build_config.BLAS``). Importing ``scipy_openblas32`` loads that
library into the process before ``_core`` is imported, so the extension binds to the copy in the user's
site-packages (its RPATH points there too), never to the build environment's.

OpenBLAS picks its kernels ("core") when it loads, from the CPU it recognises, and a CPU newer than the
library gets its oldest ones (seen: Prescott, SSE3, on an Emerald Rapids Xeon with Debian's 0.3.21:
everything 4x slower, silently). ``warn_if_slow_core`` says so once, naming the fix. A user's own
OPENBLAS_CORETYPE is obeyed by OpenBLAS and never overridden here; the warning then names it.
"""
import warnings


class BLASCoreWarning(RuntimeWarning):
    """OpenBLAS runs kernels below what this CPU offers (products slower than they could be)."""


def load():
    """Load the BLAS library the core was linked against, where it is a Python package."""
    try:
        from ._build_config import BLAS
    except ImportError:
        return
    if BLAS == "scipy-openblas32":
        try:
            import scipy_openblas32  # noqa: F401 (loads libscipy_openblas.so, RTLD_GLOBAL)
        except ImportError as e:
            raise ImportError("ctransformer's core runs on OpenBLAS from the scipy-openblas32 package, which is "
                              "not installed here: pip install scipy-openblas32") from e


def warn_if_slow_core(core):
    advice = core._blas_core_advice()
    if advice:
        warnings.warn(advice, BLASCoreWarning, stacklevel=3)
    return advice


def show_config(core, mode="stdout"):
    info = core.build_info()
    blas, cpu, loops = info["blas"], info["cpu"], info["loops"]
    features = [name for name in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
                                  "amx_tile", "amx_bf16", "amx_int8", "dotprod", "i8mm", "bf16", "sve") if cpu[name]]
    config = {
        # the -march of everything but the kernels (which choose their level at run time: "Kernels" below)
        "Build": {"march": info["march"] or "(compiler default)", "rest of the core": f"{info['simd']}, "
                  f"{info['float_lanes']} floats a vector" + ("" if info["fused_multiply_add"] else ", no FMA"),
                  "mpi": info["mpi"]},
        "BLAS": {"name": blas["name"], "version": blas["version"], "source": blas["source"],
                 "library": blas["library"], "core": f"{blas['core']} ({blas['core_level'] or 'unknown level'})",
                 "threads": blas["threads"]},
        "CPU": {"vendor": cpu["vendor"], "best SIMD level": cpu["simd_level"],
                "features": " ".join(features) or "(none of note)",
                "bf16 units": "AMX-BF16" if cpu["amx_bf16"] else "AVX512_BF16" if cpu["avx512_bf16"]
                else "BF16 (BFDOT, BFMMLA)" if cpu["bf16"] else "no",
                "int8 units": "AMX-INT8" if cpu["amx_int8"] else "AVX512_VNNI" if cpu["avx512_vnni"]
                else "AVX_VNNI" if cpu["avx_vnni"] else "I8MM (SMMLA)" if cpu["i8mm"]
                else "DotProd (SDOT)" if cpu["dotprod"] else "no"},
        # the kernels ctransformer runs on them (ct.set_kernel_level; ct.amp.bf16_kernel, ct.quantization.int8_kernel)
        "Kernels": {"level": f"{core.kernel_level()} (this CPU runs {', '.join(core.kernel_levels())})",
                    "SIMD loops": f"{loops['simd']}, {loops['float_lanes']} floats a vector"
                                  + ("" if loops["fused_multiply_add"] else ", no FMA"),
                    "bf16": core.amp.bf16_kernel(), "int8": core.quantization.int8_kernel()},
        "Products": {row["product"]: f"{row['kernel']}; {row['when']}" for row in core._kernel_table()},
    }
    advice = core._blas_core_advice()
    if advice:
        config["Warnings"] = {"blas core": advice}
    if mode == "dicts":
        return config
    if mode != "stdout":
        raise ValueError(f"show_config: mode must be 'stdout' or 'dicts', got {mode!r}")
    for section, items in config.items():
        print(f"{section}:")
        for key, value in items.items():
            print(f"  {key}: {value}")
    return None
