"""Speed of cached vs uncached greedy decoding (not a test: timings depend on the machine).

    PYTHONPATH=python python scripts/bench_decode.py [--tokens 50] [--repeats 3] [--threads N]

Decodes `tokens` tokens (no end symbol, so every row runs to the end) from random 50-id sources, for
the toy translator's tiny pre-norm preset (d_model 32, 4 heads, 3 + 3 layers, vocabulary 39) and a small
post-norm model (d_model 256, 8 heads of 32, d_inner 1024, 3 + 3 layers, vocabulary 1000), batch 1 and
32, and prints the best of `repeats` wall-clock times of each and the speed-up. Both paths first check
they decode the same ids.
"""
import argparse
import time

import numpy as np

import ctransformer as ct


def models():
    ct.manual_seed(0)
    tiny = ct.nn.Transformer.small_pre_norm().eval()
    small = ct.nn.Transformer(1000, 1000, 0, 0, d_word_vec=256, d_model=256, d_inner=1024, n_layers=3, n_head=8,
                              d_k=32, d_v=32, n_position=200).eval()
    return {"tiny (toy translator)": (tiny, 39, 2), "small (256, 8 heads, 3+3)": (small, 1000, 0)}


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: the library's)")
    args = parser.parse_args()
    if args.threads:
        ct.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"greedy decoding of {args.tokens} tokens, best of {args.repeats}; BLAS threads {ct.get_num_threads()}")
    print(f"{'model':28s} {'batch':>5s} {'uncached s':>11s} {'cached s':>9s} {'speed-up':>8s}")
    for name, (model, vocab, pad) in models().items():
        for batch in (1, 32):
            src = rng.integers(3, vocab, (batch, 50))
            mask = ct.nn.get_pad_mask(src, pad)
            run = lambda use_cache: ct.decode.greedy_decode(model, src, mask, args.tokens + 1, 1,  # noqa: E731
                                                            use_cache=use_cache)
            assert np.array_equal(run(True), run(False))
            uncached = best_time(lambda: run(False), args.repeats)
            cached = best_time(lambda: run(True), args.repeats)
            print(f"{name:28s} {batch:5d} {uncached:11.4f} {cached:9.4f} {uncached / cached:7.1f}x")


if __name__ == "__main__":
    main()
