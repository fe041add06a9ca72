"""A GPT under load: OpenAI's chat against its legacy completions on the same served GPT, paired.

    python benchmarks/serve_load gpt [--precision int8] [--clients 1,32] [--rounds 3] [--seconds 10] [--out F.json]

The model: a Hugging Face GPT-2 directory with random weights (the shape --layers/--d-model, distilgpt2's by
default: 6 layers, d 768, 12 heads) and a byte-level BPE of --vocab ids trained on Tiny Shakespeare, served by
`ctransformer-serve` as any GPT-2 directory is. The prompts: Tiny Shakespeare's speeches (mixed lengths, 10-60
words), in a fixed shuffled order.

Each request asks for max_tokens 50, greedy (temperature 0). A chat sends the speech as one user message, which the
server makes a prompt with its plain template (the directory has no chat_template); a completion sends that same
prompt as its text (openai_api.chat_prompt), so the engine decodes the same tokens for both and the difference is
the endpoint's own cost: parsing, the template, the answer's shape. Output tokens are the server's own count
(usage.completion_tokens; in streams, stream_options.include_usage).

For each number of clients, rounds of --seconds each: completions, then chat (the order alternating by round), whole
answers and streams, on the one running server. Printed per round: output tokens/s, p50 and p99 latency, the
server's CPU; then chat / completions by round and their median. And whether each chat answered the same text as
the completion of the same prompt (greedy, so it must)."""
import argparse
import datetime
import gzip
import json
import os
import random
import statistics
import sys
import tempfile
import time

from .apis import Chat, Completions
from .client import closed_loop, run_client
from .cpu import CPUWatch, cpu_description
from .report import ms, percentile
from .servers import Server
from .settings import LEVEL_GAP_S, MAX_DECODING_LENGTH, THREADS

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_gpt2_directory(folder, vocab, n_layers, d_model, n_head, text):
    """A GPT-2 directory (config.json, model.safetensors, vocab.json, merges.txt) of random weights, with a
    byte-level BPE of `vocab` ids trained on `text`."""
    import ctransformer as ct
    import tokenizers

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(text.splitlines(), vocab_size=vocab, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    bpe.save_model(folder)
    ct.manual_seed(0)
    model = ct.nn.GPT(vocab_size=bpe.get_vocab_size(), max_seq_len=512, n_layers=n_layers, d_model=d_model,
                      n_head=n_head, d_inner=4 * d_model)
    model.save_pretrained(folder)
    return folder


def speeches(text, n, seed=0):
    """Tiny Shakespeare's speeches of 10-60 words (a speaker's lines, joined), shuffled."""
    out = []
    for block in text.split("\n\n"):
        lines = block.strip().split("\n")[1:]   # the speaker's name is the first line
        words = " ".join(lines).split()
        if 10 <= len(words) <= 60:
            out.append(" ".join(words))
    random.Random(seed).shuffle(out)
    return out[:n]


def round_figures(records, wall, watch):
    ok = [r for r in records if r.status == 200]
    latency = [r.latency for r in ok]
    tokens = sum(r.tokens or 0 for r in ok)
    return {"requests": len(records), "ok": len(ok), "errors": len(records) - len(ok),
            "error_kinds": sorted({f"{r.status}: {r.error}"[:160] for r in records if r.status != 200})[:3],
            "tokens_per_s": tokens / wall if wall else 0.0, "tokens_per_request": tokens / len(ok) if ok else None,
            "p50_ms": ms(percentile(latency, 50)), "p99_ms": ms(percentile(latency, 99)),
            "ttft_p50_ms": ms(percentile([r.ttft for r in ok if r.ttft is not None], 50)),
            **watch.stop()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="serve_load gpt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", default="int8", help="float32, bfloat16 or int8 (default int8)")
    p.add_argument("--clients", default="1,32", help="comma-separated closed-loop clients (default 1,32)")
    p.add_argument("--rounds", type=int, default=3, help="paired rounds per number of clients (default 3)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of each endpoint in a round (default 10)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=8192, help="the BPE's ids, trained on Tiny Shakespeare")
    p.add_argument("--prompts", type=int, default=500)
    p.add_argument("--no-stream", action="store_true", help="whole answers only")
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--start-timeout", type=float, default=180.0)
    p.add_argument("--out", help="JSON file (default benchmarks/results/serve_load_gpt_<date>.json)")
    a = p.parse_args(argv)

    import ctransformer as ct
    from ctransformer.data.download import fetch
    from ctransformer.serve.openai_api import chat_prompt

    with gzip.open(fetch("tinyshakespeare/input.txt.gz"), "rt", encoding="utf-8") as f:
        text = f.read()
    texts = speeches(text, a.prompts)
    folder = tempfile.mkdtemp(prefix="serve_load_gpt_")
    build_gpt2_directory(folder, a.vocab, a.layers, a.d_model, a.heads, text)
    # The same prompt through both endpoints: a completion's text is what the chat's plain template makes.
    plain = [chat_prompt([("user", t)]) for t in texts]
    apis = {"completions": (Completions(MAX_DECODING_LENGTH), plain), "chat": (Chat(MAX_DECODING_LENGTH), texts)}
    clients_levels = [int(c) for c in a.clients.split(",") if c]
    streams = (False,) if a.no_stream else (False, True)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu_description(ct),
            "precision": a.precision, "shape": {"n_layers": a.layers, "d_model": a.d_model, "n_head": a.heads,
                                                 "vocab": a.vocab},
            "max_tokens": MAX_DECODING_LENGTH, "rounds": a.rounds, "seconds": a.seconds, "prompts": len(texts)}
    print(f"GPT under load: {meta['shape']}, {a.precision}, {len(texts)} Tiny Shakespeare prompts, max_tokens "
          f"{MAX_DECODING_LENGTH} greedy; {meta['cpu']['model']}, OpenBLAS core {meta['cpu']['blas_core']}",
          flush=True)

    argv_ = [sys.executable, "-m", "ctransformer.serve.cli", "--model", f"gpt={folder}", "--precision", a.precision,
             "--host", "127.0.0.1", "--port", "0", "--threads", str(THREADS)]
    server = Server("gpt", argv_, dict(os.environ), folder, a.start_timeout)
    rows, same = [], []
    try:
        warm_api, warm_texts = apis["completions"]
        run_client(closed_loop(server.port, warm_texts, 4, 16, 60.0, False, a.request_timeout, api=warm_api))
        for clients in clients_levels:
            for stream in streams:
                for r in range(a.rounds):
                    order = ("completions", "chat") if r % 2 == 0 else ("chat", "completions")
                    answers = {}
                    first = r * 1000   # each round its own prompts, the same for both endpoints
                    for name in order:
                        api, prompts = apis[name]
                        time.sleep(LEVEL_GAP_S)
                        watch = CPUWatch(server.process.pid)
                        records, wall, _ = run_client(closed_loop(server.port, prompts, clients, 10**6, a.seconds,
                                                                  stream, a.request_timeout, first, api))
                        row = {"endpoint": name, "clients": clients, "stream": stream, "round": r,
                               **round_figures(records, wall, watch)}
                        rows.append(row)
                        answers[name] = {rec.index: rec.text for rec in records if rec.status == 200}
                        print(f"  {clients:3d} clients {'stream' if stream else 'whole ':6s} round {r} {name:11s} "
                              f"{row['ok']:5d} ok {row['errors']:3d} err {row['tokens_per_s']:8.0f} tok/s  "
                              f"p50 {row['p50_ms'] or 0:7.1f} p99 {row['p99_ms'] or 0:7.1f} ms  "
                              f"server {row['server_cpu_pct']:.0f}% others {row['others_cpu_pct']:.0f}%"
                              + (f"  errors: {row['error_kinds']}" if row["errors"] else ""), flush=True)
                    both = set(answers["chat"]) & set(answers["completions"])
                    same.extend(answers["chat"][i] == answers["completions"][i] for i in both)
    finally:
        server.stop()

    print("\n| clients | answers | chat / completions, output tokens/s by round | median | chat p99 / completions p99 "
          "(median) |\n|---|---|---|---|---|")
    summary = []
    for clients in clients_levels:
        for stream in streams:
            pick = [row for row in rows if row["clients"] == clients and row["stream"] == stream]
            pairs = [(c, h) for c in pick for h in pick
                     if c["endpoint"] == "completions" and h["endpoint"] == "chat" and c["round"] == h["round"]]
            ratios = [h["tokens_per_s"] / c["tokens_per_s"] for c, h in pairs if c["tokens_per_s"]]
            p99s = [h["p99_ms"] / c["p99_ms"] for c, h in pairs if c["p99_ms"] and h["p99_ms"]]
            entry = {"clients": clients, "stream": stream, "chat_over_completions": ratios,
                     "median": statistics.median(ratios) if ratios else None,
                     "p99_ratio_median": statistics.median(p99s) if p99s else None}
            summary.append(entry)
            print(f"| {clients} | {'streamed' if stream else 'whole'} | {', '.join(f'{x:.3f}' for x in ratios)} | "
                  f"{entry['median']:.3f} | {entry['p99_ratio_median']:.3f} |" if ratios else
                  f"| {clients} | {'streamed' if stream else 'whole'} | (no answers) | | |")
    print(f"\nA chat's text equal to the completion's of the same prompt: {sum(same)} of {len(same)}")
    out = a.out or os.path.join(BENCHMARKS, "results",
                                f"serve_load_gpt_{datetime.datetime.now():%Y-%m-%d_%H%M}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": meta, "rounds": rows, "summary": summary, "same_text": [sum(same), len(same)]}, f,
                  indent=1)
    print(f"wrote {out}")
    return 0 if rows and all(row["errors"] == 0 for row in rows) and all(same) else 1
