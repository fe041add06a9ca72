"""Two (or more) installed versions of ctransformer under the same closed-loop load, in turn: is one faster?

    python benchmarks/serve_load versions before=FOLDER,after=FOLDER [--size small] [--precision int8]
        [--clients 32] [--rounds 8] [--seconds 20]

FOLDER: where a version is installed (`pip install --no-deps --no-build-isolation --target FOLDER .` in a checkout
of it); an empty FOLDER is the environment's own install. Each round starts each version's server on the same
checkpoint (a random-weight translator of the shape --size, as the main run builds it, with the vocabulary of this
environment's ctransformer), warms it up, then sends --clients closed-loop clients for --seconds; the versions' order
alternates by round, so that the machine's drift (on a shared machine, 10-30% over minutes) falls on both alike.
Printed per round: output tokens/s (the engine's own count over the level's time) and its mean step time; then each
version's median and range, and in how many rounds each was the faster. One level of one run compared with one of
another, minutes apart, is no comparison here: the rounds are."""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time

from .client import closed_loop, run_client
from .servers import Server, engine_counters
from .settings import THREADS


def main(argv=None):
    p = argparse.ArgumentParser(prog="serve_load versions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("versions", help="NAME=FOLDER,NAME=FOLDER (an empty FOLDER: this environment's install)")
    p.add_argument("--size", default="small", help="a shape of cases.POST_NORM (default small)")
    p.add_argument("--precision", default="int8")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--start-timeout", type=float, default=180.0)
    a = p.parse_args(argv)
    versions = dict(v.split("=", 1) for v in a.versions.split(","))

    from ctransformer.data.parallel_corpus import multi30k
    from ctransformer.data.subword import train_subword_vocab

    from cases import POST_NORM

    from .checkpoints import build_checkpoint

    folder = tempfile.mkdtemp(prefix="serve_load_versions_")
    train = multi30k("train")
    vocab = train_subword_vocab(train.src + train.tgt, vocab_size=POST_NORM[a.size]["vocab"])
    checkpoint, _ = build_checkpoint(a.size, folder, vocab)
    test = multi30k("test2016").src
    random.Random(0).shuffle(test)

    results = {name: [] for name in versions}
    for r in range(a.rounds):
        for name in (list(versions) if r % 2 == 0 else list(reversed(versions))):
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)
            if versions[name]:
                env["PYTHONPATH"] = versions[name]
            argv_ = [sys.executable, "-m", "ctransformer.serve.cli", "--model", f"{a.size}={checkpoint}",
                     "--precision", a.precision, "--host", "127.0.0.1", "--port", "0", "--threads", str(THREADS)]
            server = Server(f"{name}-{r}", argv_, env, folder, a.start_timeout)
            try:
                run_client(closed_loop(server.port, test, 4, 200, 60.0, False, 60.0))   # warm-up
                time.sleep(1.0)
                before = engine_counters(server.get("/metrics"))
                records, wall, _ = run_client(closed_loop(server.port, test, a.clients, 10**6, a.seconds, False,
                                                          60.0))
                after = engine_counters(server.get("/metrics"))
            finally:
                server.stop()
            d = {k: after[k] - before.get(k, 0.0) for k in after}
            failed = sum(rec.status != 200 for rec in records)
            row = {"tokens_per_s": d["tokens"] / wall, "step_ms": 1000.0 * d["step_seconds"] / d["steps"],
                   "rows_per_step": d["tokens"] / d["steps"], "requests": len(records), "failed": failed}
            results[name].append(row)
            print(f"round {r} {name:10s} {row['tokens_per_s']:8.0f} tok/s  {row['step_ms']:.3f} ms a step  "
                  f"{row['rows_per_step']:.1f} rows a step  {len(records)} requests, {failed} failed", flush=True)
            time.sleep(2.0)
    for name, rows in results.items():
        t = [x["tokens_per_s"] for x in rows]
        wins = sum(all(x["tokens_per_s"] > results[other][i]["tokens_per_s"] for other in versions if other != name)
                   for i, x in enumerate(rows))
        print(f"{name:10s} tokens/s median {statistics.median(t):.0f} (range {min(t):.0f}-{max(t):.0f}); step "
              f"median {statistics.median(x['step_ms'] for x in rows):.3f} ms; the faster in {wins} of {len(rows)} "
              "rounds")
    return 0 if all(x["failed"] == 0 for rows in results.values() for x in rows) else 1
