"""A served GPT against llama.cpp's own server: our /v1/completions and llama-server's, under the same load.

    python benchmarks/serve_load llama [--model gpt2] [--pairs float32=f32,int8=q8_0,bfloat16=f16]
        [--clients 1,32] [--rounds 3] [--seconds 20] [--out F.json]

The model: GPT-2 124M's shape (or distilgpt2's, --model distilgpt2) with random weights and a byte-level BPE trained on
Tiny Shakespeare, padded to GPT-2's 50257 ids (generate_speed.build_directory: the same directory the offline
generation figures use), served by `ctransformer-serve --precision P` as any GPT-2 directory is, and converted to
GGUF by the converter vendored in llama-cpp-python's sdist (llama_peer.to_gguf: f32, f16 or q8_0) for llama-server,
built from the same sdist with llama.cpp's CPU defaults (llama_peer.build: GGML_NATIVE, OpenMP, llamafile's sgemm).

llama-server runs as its documentation sets it up for many users: `--parallel 32 --cont-batching` (32 slots,
continuous batching), `-t 2 -tb 2` (the machine's cores for decoding and prompts), `-c 8192` (256 positions a slot:
a prompt and its 50 tokens fit), its other settings its defaults (flash attention auto, f16 KV cache, prompt cache).
Ours runs `--threads 2`, its defaults otherwise (continuous batching up to 32 sequences a step).

The prompts: Tiny Shakespeare's speeches (10-60 words), shuffled, each round from its own offset, the same for both
servers. Each request: POST /v1/completions, max_tokens 50, temperature 0 (greedy), a whole answer. Output tokens
are each server's own count (usage.completion_tokens): random weights seldom choose the end, so nearly every answer
is 50 tokens in both.

One server runs at a time: for each pair and round, one server is started, warmed (16 requests, 4 clients), loaded
at each number of clients for --seconds (closed loop: a client sends its next request when its last is answered),
and stopped; then the other. The order alternates by round, and the ratios are taken round by round (ours over
llama-server's, each round's pair run minutes apart), so that the shared machine's drift is paired out. Printed per
level: output tokens/s over the level's wall time, p50 and p99 latency, the server's CPU and everything else's; then
per pair and clients the ratio by round, its median, and the p99s. And the share of prompts both answered with the
same text (a sanity check, not a claim: llama-server keeps its KV cache in f16, so float32 near-ties may differ)."""
import argparse
import datetime
import gzip
import json
import os
import socket
import statistics
import sys
import tempfile
import time

from .apis import Completions
from .client import closed_loop, run_client
from .cpu import CPUWatch, cpu_description
from .gpt import round_figures, speeches
from .servers import Server
from .settings import LEVEL_GAP_S, MAX_BATCH, MAX_DECODING_LENGTH, THREADS

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLOT_POSITIONS = 256   # llama-server's positions a slot: the longest prompt (~90 tokens) and its 50 tokens fit


def free_port():
    """A free 127.0.0.1 port for llama-server (which takes --port as given)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ours_server(folder, precision, log_folder, timeout):
    argv = [sys.executable, "-m", "ctransformer.serve.cli", "--model", f"gpt={folder}", "--precision", precision,
            "--host", "127.0.0.1", "--port", "0", "--threads", str(THREADS)]
    return Server(f"ours-{precision}", argv, dict(os.environ), log_folder, timeout)


def llama_server(binary, gguf, log_folder, timeout, repack=True):
    argv = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(free_port()),
            "-t", str(THREADS), "-tb", str(THREADS), "--parallel", str(MAX_BATCH), "--cont-batching",
            "-c", str(MAX_BATCH * SLOT_POSITIONS), "--no-webui"] + ([] if repack else ["--no-repack"])
    return Server(f"llama-{os.path.basename(gguf)}", argv, dict(os.environ), log_folder, timeout,
                  ready_path="/health")


def main(argv=None):
    p = argparse.ArgumentParser(prog="serve_load llama", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2", help="gpt2 (124M, default) or distilgpt2 (6 layers)")
    p.add_argument("--pairs", default="float32=f32,int8=q8_0,bfloat16=f16",
                   help="ours' precision=llama.cpp's GGUF type, comma-separated (default float32=f32,int8=q8_0,"
                        "bfloat16=f16)")
    p.add_argument("--clients", default="1,32", help="comma-separated closed-loop clients (default 1,32)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per pair, the order alternating (default 3)")
    p.add_argument("--no-repack", action="store_true",
                   help="llama-server without its weight repacking (--no-repack): on a Xeon with AMX its q8_0 "
                        "repacked for AMX segfaults at the first decode (llama.cpp issue 20824)")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of load per level (default 20)")
    p.add_argument("--prompts", type=int, default=1000)
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--start-timeout", type=float, default=180.0)
    p.add_argument("--out", help="JSON file (default benchmarks/results/serve_load_llama_<date>.json)")
    a = p.parse_args(argv)

    import ctransformer as ct
    from ctransformer.data.download import fetch

    import generate_speed
    import llama_peer

    if a.model not in generate_speed.SHAPES:
        p.error(f"--model must be one of {sorted(generate_speed.SHAPES)}")
    pairs = [tuple(pair.split("=", 1)) for pair in a.pairs.split(",") if pair]
    for pair in pairs:
        if len(pair) != 2 or pair[1] not in llama_peer.OUTTYPES:
            p.error(f"--pairs: each is ours=llama with llama one of {llama_peer.OUTTYPES}, not {'='.join(pair)!r}")
    clients_levels = [int(c) for c in a.clients.split(",") if c]

    with gzip.open(fetch("tinyshakespeare/input.txt.gz"), "rt", encoding="utf-8") as f:
        texts = speeches(f.read(), a.prompts)
    folder = tempfile.mkdtemp(prefix="serve_load_llama_")
    generate_speed.build_directory(folder, generate_speed.SHAPES[a.model])
    entry = llama_peer.build()
    binary = entry.server
    ggufs = {kind: llama_peer.to_gguf(folder, os.path.join(folder, f"model-{kind}.gguf"), kind)
             for kind in sorted({llama for _, llama in pairs})}
    api = Completions(MAX_DECODING_LENGTH)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu_description(ct),
            "model": a.model, "shape": generate_speed.SHAPES[a.model], "vocab": generate_speed.VOCAB,
            "pairs": pairs, "max_tokens": MAX_DECODING_LENGTH, "rounds": a.rounds, "seconds": a.seconds,
            "prompts": len(texts), "llama_cpp": {k: entry.manifest.get(k) for k in
                                                ("llama_cpp_python", "llama_cpp_commit", "cmake_args")},
            "llama_server_args": {"parallel": MAX_BATCH, "cont_batching": True, "threads": THREADS,
                                  "ctx": MAX_BATCH * SLOT_POSITIONS, "repack": not a.no_repack}}
    print(f"Served GPT against llama-server: {a.model} {meta['shape']}, {len(texts)} Tiny Shakespeare prompts, "
          f"max_tokens {MAX_DECODING_LENGTH} greedy; {meta['cpu']['model']}, OpenBLAS core "
          f"{meta['cpu']['blas_core']}; llama.cpp {meta['llama_cpp']['llama_cpp_commit']}", flush=True)

    rows, answers = [], {}
    for ours_precision, llama_kind in pairs:
        starters = {"ours": lambda: ours_server(folder, ours_precision, folder, a.start_timeout),
                    "llama": lambda: llama_server(binary, ggufs[llama_kind], folder, a.start_timeout,
                                                  repack=not a.no_repack)}
        for r in range(a.rounds):
            for name in (("ours", "llama") if r % 2 == 0 else ("llama", "ours")):
                server = starters[name]()
                try:
                    run_client(closed_loop(server.port, texts, 4, 16, 60.0, False, a.request_timeout, api=api))
                    for clients in clients_levels:
                        first = (r * len(clients_levels) + clients_levels.index(clients)) * 97
                        time.sleep(LEVEL_GAP_S)
                        watch = CPUWatch(server.process.pid)
                        records, wall, _ = run_client(closed_loop(server.port, texts, clients, 10**6, a.seconds,
                                                                  False, a.request_timeout, first, api))
                        row = {"pair": f"{ours_precision}={llama_kind}", "server": name, "clients": clients,
                               "round": r, **round_figures(records, wall, watch)}
                        rows.append(row)
                        for rec in records:
                            if rec.status == 200:
                                answers.setdefault((row["pair"], name), {})[rec.index] = rec.text
                        print(f"  {row['pair']:15s} round {r} {name:5s} {clients:3d} clients {row['ok']:5d} ok "
                              f"{row['errors']:3d} err {row['tokens_per_s']:8.1f} tok/s "
                              f"({row['tokens_per_request'] or 0:.1f} a request)  p50 {row['p50_ms'] or 0:8.1f} "
                              f"p99 {row['p99_ms'] or 0:8.1f} ms  server {row['server_cpu_pct']:.0f}% "
                              f"others {row['others_cpu_pct']:.0f}%"
                              + (f"  errors: {row['error_kinds']}" if row["errors"] else ""), flush=True)
                finally:
                    server.stop()
                time.sleep(LEVEL_GAP_S)

    print("\n| ours = llama.cpp | clients | ours tok/s (median) | llama-server tok/s (median) | ours / llama-server "
          "by round | median | p99 ours / llama-server (median, ms) |\n|---|---|---|---|---|---|---|")
    summary = []
    for ours_precision, llama_kind in pairs:
        pair = f"{ours_precision}={llama_kind}"
        for clients in clients_levels:
            pick = {(row["server"], row["round"]): row for row in rows
                    if row["pair"] == pair and row["clients"] == clients}
            ratios = [pick["ours", r]["tokens_per_s"] / pick["llama", r]["tokens_per_s"] for r in range(a.rounds)
                      if pick["llama", r]["tokens_per_s"]]
            median = (lambda name, key: statistics.median(
                [pick[name, r][key] for r in range(a.rounds) if pick[name, r][key] is not None] or [0.0]))
            entry_ = {"pair": pair, "clients": clients, "ratios": ratios,
                      "median_ratio": statistics.median(ratios) if ratios else None,
                      "ours_tokens_per_s": median("ours", "tokens_per_s"),
                      "llama_tokens_per_s": median("llama", "tokens_per_s"),
                      "ours_p99_ms": median("ours", "p99_ms"), "llama_p99_ms": median("llama", "p99_ms")}
            summary.append(entry_)
            print(f"| {pair} | {clients} | {entry_['ours_tokens_per_s']:.1f} | {entry_['llama_tokens_per_s']:.1f} | "
                  f"{', '.join(f'{x:.2f}' for x in ratios)} | {entry_['median_ratio'] or 0:.2f} | "
                  f"{entry_['ours_p99_ms']:.0f} / {entry_['llama_p99_ms']:.0f} |")
    same = {}
    for ours_precision, llama_kind in pairs:
        pair = f"{ours_precision}={llama_kind}"
        ours, llama = answers.get((pair, "ours"), {}), answers.get((pair, "llama"), {})
        both = set(ours) & set(llama)
        same[pair] = [sum(ours[i] == llama[i] for i in both), len(both)]
        print(f"same text for the same prompt, {pair}: {same[pair][0]} of {same[pair][1]}")
    out = a.out or os.path.join(BENCHMARKS, "results",
                                f"serve_load_llama_{datetime.datetime.now():%Y-%m-%d_%H%M}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": meta, "levels": rows, "summary": summary, "same_text": same}, f, indent=1)
    print(f"wrote {out}")
    return 0 if rows and all(row["errors"] == 0 for row in rows) else 1
