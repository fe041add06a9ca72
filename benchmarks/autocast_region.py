"""What a bf16 training step costs with one autocast region per step against one region around the loop.

    python benchmarks/autocast_region.py [--case base/train] [--rounds 4] [--steps 4]

A region's first product of each weight rounds it to bf16, and its end forgets the copies (their values may
change outside it, as torch's cast cache). A torch-style loop (and benchmarks/run.py's bf16 cases) opens a
region per step, so every step rounds every weight once; `ctransformer-train` holds one region around its
loop, and Adam.step() rewrites each weight's copy as it updates it. The three ways (a region per step, one
region, float32) take turns on the same model, `--steps` steps each per round; the medians are printed.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cases  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default="base/train", choices=[n for n, c in cases.CASES.items() if c["kind"] == "train"])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args()
    import ctransformer as ct
    ct.set_num_threads(2)
    step, _ = cases.CASES[a.case]["build"]("ct", share=False)

    def timed(n):
        out = []
        for _ in range(n):
            t = time.perf_counter()
            step()
            out.append(time.perf_counter() - t)
        return out

    def region_per_step(n):
        out = []
        for _ in range(n):
            with ct.autocast(dtype="bfloat16"):
                out += timed(1)
        return out

    def one_region(n):
        with ct.autocast(dtype="bfloat16"):
            step()  # the region's first step rounds every weight; later ones find Adam's copies
            return timed(n)

    ways = {"bf16, a region per step": region_per_step, "bf16, one region": one_region, "float32": timed}
    for run in ways.values():
        run(1)  # warm-up: buffers, packed panels, the cache
    times = {name: [] for name in ways}
    for _ in range(a.rounds):
        for name, run in ways.items():
            times[name] += run(a.steps)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"{a.case}, 2 threads, bf16 kernel {ct.amp.bf16_kernel()}, medians of {a.rounds * a.steps} steps:")
    for name, ms in med.items():
        print(f"  {name:26s} {ms:8.1f} ms   float32 / this {med['float32'] / ms:.3f}x")


if __name__ == "__main__":
    main()
