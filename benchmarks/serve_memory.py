"""Memory of one ctransformer-serve replica per model size and precision (issue 49 item 5: sizing a fleet).

    python benchmarks/serve_memory.py [--sizes small,base] [--precisions float32,int8] [--clients 64]

For each shape of cases.POST_NORM (random weights, a Multi30k vocabulary of the shape's size, saved as a multi30k
checkpoint as benchmarks/serve_load/ builds it) and each precision: start `ctransformer-serve` on 127.0.0.1,
read its resident memory once ready (VmRSS), send `--clients` requests at once (Multi30k test2016 sentences, greedy,
50 tokens each) twice, and read the peak (VmHWM) and the resident memory after. One server at a time; each stops
by itself (SIGTERM) when measured.
"""
import argparse
import asyncio
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from serve_load.checkpoints import build_checkpoint  # noqa: E402
from serve_load.client import closed_loop  # noqa: E402
from serve_load.servers import Server  # noqa: E402


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="small,base")
    p.add_argument("--precisions", default="float32,int8")
    p.add_argument("--clients", type=int, default=64)
    a = p.parse_args(argv)

    import ctransformer as ct
    from cases import POST_NORM
    from ctransformer.data.parallel_corpus import multi30k
    from ctransformer.data.subword import train_subword_vocab

    test = multi30k("test2016").src[:a.clients]
    train = multi30k("train")
    folder = tempfile.mkdtemp(prefix="serve_memory_")
    rows = []
    for size in a.sizes.split(","):
        vocab = train_subword_vocab(train.src + train.tgt, vocab_size=POST_NORM[size]["vocab"])
        checkpoint, cfg = build_checkpoint(size, folder, vocab)
        weights_mib = os.path.getsize(checkpoint) / 2**20
        for precision in a.precisions.split(","):
            argv = [sys.executable, "-m", "ctransformer.serve.cli", "--model", f"{size}={checkpoint}",
                    "--precision", precision, "--port", "0", "--threads", "2"]
            server = Server(f"{size}-{precision}", argv, dict(os.environ), folder, 180)
            try:
                idle = status_kib(server.process.pid, "VmRSS")
                for _ in range(2):
                    records, _, _ = asyncio.run(closed_loop(server.port, test, a.clients, a.clients, 120, False, 120))
                    failed = [r for r in records if getattr(r, "status", 200) != 200]
                    if failed:
                        raise RuntimeError(f"{len(failed)} requests failed under load")
                peak = status_kib(server.process.pid, "VmHWM")
                after = status_kib(server.process.pid, "VmRSS")
            finally:
                server.stop()
            rows.append((size, precision, weights_mib, idle / 1024, peak / 1024, after / 1024))
            print(f"{size} {precision}: checkpoint {weights_mib:.0f} MiB; resident idle {idle / 1024:.0f} MiB, "
                  f"peak under {a.clients} clients {peak / 1024:.0f} MiB, after {after / 1024:.0f} MiB", flush=True)
    print(f"\n{a.clients} clients at once, twice; greedy, at most 50 tokens each; OpenBLAS core "
          f"{ct.build_info()['blas']['core']}\n")
    print("| model | precision | checkpoint MiB | resident when ready | peak under load | resident after |")
    print("|---|---|---:|---:|---:|---:|")
    for size, precision, w, idle, peak, after in rows:
        print(f"| {size} | {precision} | {w:.0f} | {idle:.0f} | {peak:.0f} | {after:.0f} |")


if __name__ == "__main__":
    main()
