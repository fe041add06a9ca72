"""The BLAS under ctransformer, measured: the CPU's FMA peak, and OpenBLAS sgemm at the models' shapes
for each library and kernel core this machine can run.

    python benchmarks/blas.py                                  # ct's BLAS at its own core, + Debian's if installed
    python benchmarks/blas.py --cores Haswell,SkylakeX,Prescott --libraries wheel,debian

OpenBLAS picks its core when the library loads, so every (library, core) pair runs in a fresh process
(OPENBLAS_CORETYPE set for it; "auto" = as the library picks by itself; the environment's
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed for "auto"). Pairs alternate round by round and the
best of the rounds is kept, so load from elsewhere on this shared machine hits each alike.
The FMA peak is a compiled loop of independent fused multiply-adds on the widest vectors this CPU has
(g++ -O2 -march=native), one copy per thread: the ceiling sgemm is measured against.
"""
import argparse
import ctypes.util
import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# (m, n, k): the base model's Linear products at 4096 rows (batch x length) and smaller, the decoding
# step's 32 rows, and the tiny model's (the toy translator at batch 128 x length 50 splits into pieces like these).
SHAPES = [(4096, 512, 512), (4096, 2048, 512), (4096, 512, 2048), (1024, 512, 512), (32, 512, 512),
          (128, 64, 128), (128, 128, 64)]
# Every OpenBLAS x86-64 core worth naming here, with what it needs of the CPU (/proc/cpuinfo flags).
CORES = {"Prescott": {"pni"}, "Nehalem": {"sse4_2"}, "Sandybridge": {"avx"}, "Haswell": {"avx2", "fma"},
         "Zen": {"avx2", "fma"}, "SkylakeX": {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
         "Cooperlake": {"avx512f", "avx512_bf16"}, "SapphireRapids": {"avx512f", "amx_bf16", "avx512_fp16"}}

FMA_SOURCE = r"""
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
// 12 independent accumulators hide the FMA latency (4 cycles, 2-3 ports).
#if defined(__AVX512F__)
typedef __m512 V; static V fma_(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); } static V set1(float x) { return _mm512_set1_ps(x); }
static float first(V v) { return _mm512_cvtss_f32(v); } enum { LANES = 16 };
#elif defined(__FMA__)
typedef __m256 V; static V fma_(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); } static V set1(float x) { return _mm256_set1_ps(x); }
static float first(V v) { return _mm256_cvtss_f32(v); } enum { LANES = 8 };
#else
typedef __m128 V; static V fma_(V a, V b, V c) { return _mm_add_ps(_mm_mul_ps(a, b), c); } static V set1(float x) { return _mm_set1_ps(x); }
static float first(V v) { return _mm_cvtss_f32(v); } enum { LANES = 4 };
#endif
static double run(long iters) {
    // Named accumulators, so each stays in a register (an array was kept in memory at -O2).
    V c0 = set1(0.0f), c1 = set1(0.1f), c2 = set1(0.2f), c3 = set1(0.3f), c4 = set1(0.4f), c5 = set1(0.5f),
      c6 = set1(0.6f), c7 = set1(0.7f), c8 = set1(0.8f), c9 = set1(0.9f), c10 = set1(1.0f), c11 = set1(1.1f);
    const V a = set1(0.999999f), b = set1(1e-7f);
    for (long it = 0; it < iters; ++it) {
        c0 = fma_(c0, a, b); c1 = fma_(c1, a, b); c2 = fma_(c2, a, b); c3 = fma_(c3, a, b);
        c4 = fma_(c4, a, b); c5 = fma_(c5, a, b); c6 = fma_(c6, a, b); c7 = fma_(c7, a, b);
        c8 = fma_(c8, a, b); c9 = fma_(c9, a, b); c10 = fma_(c10, a, b); c11 = fma_(c11, a, b);
    }
    return first(c0) + first(c1) + first(c2) + first(c3) + first(c4) + first(c5) + first(c6) + first(c7) +
           first(c8) + first(c9) + first(c10) + first(c11);
}
int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const long iters = 400000000L / 12;
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        std::vector<std::thread> pool; volatile double sink = 0;
        auto t0 = std::chrono::steady_clock::now();
        for (int t = 0; t < threads; ++t) pool.emplace_back([&] { sink = sink + run(iters); });
        for (auto& t : pool) t.join();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double gflops = 2.0 * LANES * 12 * iters * threads / s / 1e9;
        if (gflops > best) best = gflops;
    }
    printf("%f %d\n", best, (int)LANES);
}
"""


def fma_peak(threads):
    """GFLOP/s of independent FMAs on `threads` threads, and the vector width used (None without g++)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = pathlib.Path(tmp) / "fma.cpp", pathlib.Path(tmp) / "fma"
        src.write_text(FMA_SOURCE)
        build = subprocess.run(["g++", "-O2", "-march=native", "-pthread", str(src), "-o", str(exe)],
                               capture_output=True, text=True)
        if build.returncode != 0:
            return None
        gflops, lanes = subprocess.run([str(exe), str(threads)], capture_output=True, text=True,
                                       check=True).stdout.split()
        return {"gflops": float(gflops), "lanes": int(lanes), "threads": threads}


def libraries():
    """{name: (path, symbol prefix)} of the OpenBLAS builds this machine has."""
    found = {}
    try:
        import scipy_openblas32
        found["wheel"] = (os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(True)), "scipy_")
    except ImportError:
        pass
    debian = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0")) or \
        [p for p in [ctypes.util.find_library("openblas")] if p]
    if debian:
        found["debian"] = (debian[0], "")
    return found


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def child(path, prefix, threads, min_time):
    """In this process: one library at whatever core it loaded with, every shape."""
    import measure

    lib = measure.OpenBLAS(path, prefix)
    shapes = [(m, n, k, False, True, 1) for m, n, k in SHAPES]   # y = x W^T, as a Linear's forward
    rate = measure.sgemm_rate(shapes, threads=threads, min_time=min_time, blas=lib)
    print(json.dumps(rate))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--libraries", default="wheel,debian", help="wheel (scipy-openblas32), debian, or both")
    p.add_argument("--cores", default="auto", help="comma-separated OpenBLAS cores to force, or auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--out", help="JSON file for the results")
    p.add_argument("--child", nargs=2, metavar=("PATH", "PREFIX"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.child[0], "" if a.child[1] == "-" else a.child[1], a.threads, a.min_time)

    libs = {k: v for k, v in libraries().items() if k in a.libraries.split(",")}
    flags = cpu_flags()
    cores = [c for c in a.cores.split(",") if c == "auto" or CORES.get(c, set()) <= flags]
    peak = fma_peak(a.threads)
    if peak:
        print(f"FMA peak, {a.threads} threads, {peak['lanes']} floats a vector: {peak['gflops']:.0f} GFLOP/s")
    best = {}
    for _ in range(a.rounds):
        for lib, (path, prefix) in libs.items():
            for core in cores:
                env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
                if core != "auto":
                    env["OPENBLAS_CORETYPE"] = core
                run = subprocess.run([sys.executable, __file__, "--child", path, prefix or "-", "--threads",
                                      str(a.threads), "--min-time", str(a.min_time)],
                                     env=env, capture_output=True, text=True, check=True)
                r = json.loads(run.stdout)
                key = (lib, core)
                if key not in best:
                    best[key] = r
                else:
                    for old, new in zip(best[key]["shapes"], r["shapes"]):
                        old["gflops"] = max(old["gflops"], new["gflops"])
    header = "| library | version | core asked | core run | " + " | ".join(f"{m}x{n}x{k}" for m, n, k in SHAPES) + " |"
    print(header)
    print("|" + "---|" * (4 + len(SHAPES)))
    for (lib, core), r in best.items():
        version = r["config"].split()[1]
        cells = " | ".join(f"{s['gflops']:.0f}" for s in r["shapes"])
        print(f"| {lib} | {version} | {core} | {r['core']} | {cells} |")
    if peak:
        top = max(s["gflops"] for r in best.values() for s in r["shapes"])
        print(f"Best sgemm {top:.0f} GFLOP/s = {100 * top / peak['gflops']:.0f}% of the FMA peak "
              f"({peak['gflops']:.0f} GFLOP/s). GFLOP/s are best of {a.rounds} rounds, {a.threads} threads "
              f"(OpenBLAS's own), shapes m x n x k of y = x W^T.")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"fma_peak": peak, "results": [{"library": k[0], "core_asked": k[1], **v}
                                                     for k, v in best.items()]}, f, indent=1)


if __name__ == "__main__":
    main()
