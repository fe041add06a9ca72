"""Each int8 kernel this CPU runs, against the others, on an int8 Linear at decoding's shapes.

    python benchmarks/int8_kernels.py                      # every kernel of ct.quantization.int8_kernels_available()
    python benchmarks/int8_kernels.py --rows 1,32,160 --threads 2

For a new CPU first (an ARM machine: neon, dotprod, i8mm; x86: avx2, avx_vnni, avx512_vnni), the kernels' own
speed where qemu could only prove their bits. One process, the kernels forced in turn (ct.quantization.
set_int8_kernel) and taking turns (measure.interleaved, as every benchmark here), so a drifting machine hits each
alike; each one's median. A timed call is enough products of the shape for about 10^8 multiply-adds, so forcing
the kernel at its start weighs nothing. G multiply-adds/s of the whole Linear (quantising the rows and the float32
epilogue included), and each kernel's ratio to the portable C++ one. Shapes: the small model's (d_model 256, feed-forward 1024, 8,000 words) and the
base model's (512, 2048, 8,000 words).
"""
import argparse
import pathlib
import sys

import numpy as np

import ctransformer as ct
from ctransformer import quantization as Q

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import measure  # noqa: E402

SHAPES = {   # name: (in_features, out_features)
    "small q/k/v": (256, 768), "small ffn in": (256, 1024), "small ffn out": (1024, 256), "small logits": (256, 8000),
    "base q/k/v": (512, 1536), "base ffn in": (512, 2048), "base ffn out": (2048, 512), "base logits": (512, 8000),
}
MACS_A_CALL = 1e8   # multiply-adds in one timed call: ~2 ms at 50 G/s


def products(linear, x, kernel, count):
    """A call: `count` products of linear(x), with `kernel` forced first."""
    def call():
        Q.set_int8_kernel(kernel)
        for _ in range(count):
            linear(x)
    return call


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="1,8,32,160", help="rows of activations (1: batch 1; 160: 32 sentences x beam 5)")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, from: " + ", ".join(SHAPES))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3, help="turns of each kernel (measure.interleaved's repeats)")
    p.add_argument("--gap", type=float, default=measure.GAP_S, help="seconds of pause before each turn")
    a = p.parse_args(argv)
    ct.set_num_threads(a.threads)
    kernels = Q.int8_kernels_available()
    rows = [int(r) for r in a.rows.split(",")]
    shapes = [s.strip() for s in a.shapes.split(",")]
    for s in shapes:
        if s not in SHAPES:
            p.error(f"--shapes: unknown shape {s!r} (from: {', '.join(SHAPES)})")
    print(f"int8 kernels on {measure.cpu_model()} ({ct.build_info()['cpu']['simd_level']}): {', '.join(kernels)}; "
          f"{a.threads} thread(s), median of {a.rounds} turns")
    rng = np.random.default_rng(0)
    header = "| shape | rows | " + " | ".join(f"{k} GMAC/s" for k in kernels) + " | " + \
        " | ".join(f"{k}/portable" for k in kernels if k != "portable") + " |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    try:
        for name in shapes:
            k, n = SHAPES[name]
            linear = ct.nn.Linear(k, n)
            linear.quantize("int8")
            for m in rows:
                x = ct.tensor(rng.standard_normal((m, k)).astype(np.float32))
                count = max(1, int(MACS_A_CALL / (m * k * n)))
                with ct.no_grad():
                    median, _ = measure.interleaved({kernel: products(linear, x, kernel, count) for kernel in kernels},
                                                    a.rounds, 1, gap=a.gap)
                rate = {kernel: count * m * k * n / median[kernel] / 1e9 for kernel in kernels}
                cells = [f"{rate[kernel]:.1f}" for kernel in kernels]
                ratios = [f"{rate[kernel] / rate['portable']:.1f}x" for kernel in kernels if kernel != "portable"]
                print(f"| {name} | {m} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |", flush=True)
    finally:
        Q.set_int8_kernel("auto")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
