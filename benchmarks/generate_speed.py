"""GPT generation, ctransformer against the engines people run GPTs on CPUs with (issue 71).

    python benchmarks/generate_speed.py [--models gpt2,distilgpt2] [--engines ours,ct2,llama,transformers]
        [--rounds 3] [--quick] [--out FILE.json]

The models: GPT-2 124M (12 layers, d 768, 12 heads) and distilgpt2's shape (6 layers), GPT-2's vocabulary of 50257
ids (a byte-level BPE trained on Tiny Shakespeare, padded with unused ids to GPT-2's size: the head's 50257 x 768 is
what decoding pays for, whatever the ids mean), random weights, saved as Hugging Face GPT-2 directories that every
engine reads: ours (`GPT.from_pretrained`), CTranslate2 (its TransformersConverter), llama.cpp (its
convert_hf_to_gguf.py, benchmarks/llama_peer.py) and transformers.

Each engine at its documented best, in a process of its own (the lesson of benchmarks/ct2_process.py: engines'
thread pools in one process slow each other), 2 threads:
- ours: float32, bfloat16 (one `ct.autocast` region for the engine's life, so the weights are rounded to bf16 once, as
  the server does) and int8 (`ct.quantize_dynamic`), `ct.decode.generate` greedy;
- CTranslate2's Generator: float32 and int8, each in every CPU setting of ct2_process.CONFIGS the CPU has
  (CT2_USE_MKL, CT2_FORCE_CPU_ISA), the fastest kept per cell and named;
- llama.cpp (llama-cpp-python built from its sdist, cached: benchmarks/llama_peer.py): f32, f16 and q8_0;
- transformers float32 (`generate(do_sample=False)`), as the floor.

The cells, each the best of --rounds, the engines taking turns round by round:
- prefill of 128 and 512 tokens: the time to the first new token of one prompt;
- decode at batch 1 after a 128-token prompt, and a step at batch 8 and 32 (engines that batch): the time of
  n + 1 new tokens less that of 1, over n (the best of the longer runs less the best of the one-token runs: the best
  of each round's difference would flatter, a one-token run slowed by noise making a small difference).
Then, per cell, our time against each peer's (peer / ours: above 1, ours is faster), and for batch 1 the memory
bound: the weights' bytes a token reads (every parameter once, at the precision's width) against a copy's bandwidth
measured in the same run (STREAM's copy: read + write of 256 MiB arrays), each engine's share of it.
"""
import argparse
import contextlib
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

THREADS = 2
# The pause before each timed call, measure.GAP_S's value (not imported: measure imports ctransformer, which the
# peers' worker processes must not load beside their own engines).
GAP_S = 0.3
VOCAB = 50257
SHAPES = {"gpt2": dict(n_layers=12, d_model=768, n_head=12, d_inner=3072),
          "distilgpt2": dict(n_layers=6, d_model=768, n_head=12, d_inner=3072)}
MAX_POSITIONS = 1024
ENGINES = {"ours": ("float32", "bfloat16", "int8"), "ct2": ("float32", "int8"), "llama": ("f32", "f16", "q8_0"),
           "transformers": ("float32",)}
BYTES_PER_WEIGHT = {"float32": 4.0, "f32": 4.0, "bfloat16": 2.0, "f16": 2.0, "int8": 1.0, "q8_0": 34 / 32}


# --- the models ------------------------------------------------------------------------------------------------------
def build_directory(folder, shape):
    """A GPT-2 directory of `shape` with random weights and a BPE padded to VOCAB ids."""
    import gzip

    import tokenizers

    import ctransformer as ct
    from ctransformer.data.download import fetch

    with gzip.open(fetch("tinyshakespeare/input.txt.gz"), "rt", encoding="utf-8") as f:
        text = f.read()
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(text.splitlines(), vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    bpe.save_model(folder)
    vocab_file = os.path.join(folder, "vocab.json")   # padded to GPT-2's size: CTranslate2 checks the two agree
    with open(vocab_file, encoding="utf-8") as f:
        vocab = json.load(f)
    vocab.update({f"<|unused{i}|>": i for i in range(len(vocab), VOCAB)})
    with open(vocab_file, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    ct.manual_seed(0)
    ct.nn.GPT(vocab_size=VOCAB, max_seq_len=MAX_POSITIONS, **shape).save_pretrained(folder)
    return folder


def parameters(shape):
    """The weights a token reads: every layer's, the positions' row, and the head (the tied embedding) whole."""
    d, f, n = shape["d_model"], shape["d_inner"], shape["n_layers"]
    return n * (4 * d * d + 2 * d * f + 9 * d + f) + VOCAB * d + 2 * d


def prompts(batch, length, seed=0):
    return np.random.default_rng(seed).integers(1, VOCAB - 1, (batch, length)).tolist()


# --- the workers: one engine and precision each, answering {"op": ...} lines ---------------------------------------
class Worker:
    """An engine in a child process (generate_speed.py --worker ENGINE PRECISION PATH); `ask(op, **kw)` returns
    the seconds it measured."""

    def __init__(self, engine, precision, path, env=None):
        self.engine, self.precision, self.env = engine, precision, dict(env or {})
        full = {k: v for k, v in os.environ.items() if not k.startswith("CT2_")}
        full.update(self.env)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", engine, precision, path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=full)
        self.ask("ready")

    def ask(self, op, **kw):
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.engine} {self.precision} {self.env}: the worker ended (code "
                               f"{self.proc.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.engine} {self.precision}: {answer['error']}")
        return answer.get("seconds")

    def close(self):
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        self.proc.wait(60)


def _ours(precision, path):
    import ctransformer as ct

    ct.set_num_threads(THREADS)
    model = ct.nn.GPT.from_pretrained(path)
    if precision == "int8":
        model = ct.quantize_dynamic(model)

    if precision == "bfloat16":
        # One autocast region for the engine's life, as the server holds one for a bf16 model: the weights' bf16
        # copies are made at the first call and read by every later one, as llama.cpp reads an f16 file's. (A
        # region per call rounds all 124 M weights again: ~40 ms of a prompt's time on an Intel Xeon with AMX.)
        region = ct.autocast()
        region.__enter__()

    def generate(ids, n):
        with ct.no_grad():
            ct.decode.generate(model, np.array(ids), n, top_k=1)
    generate.region = region if precision == "bfloat16" else None  # held as long as the engine
    return generate


def _ct2(precision, path):
    import ctranslate2

    out = os.path.join(path, f"ct2-{precision}")
    if not os.path.isdir(out):
        ctranslate2.converters.TransformersConverter(path).convert(out, quantization=None if precision == "float32"
                                                                    else precision, force=True)
    holder = {}
    # Loaded on a short-lived thread (ct2_process.py: an int8 model quantises in an OpenMP region whose team the
    # loading thread keeps; the main thread would then hold more OpenMP threads than cores).
    loader = threading.Thread(target=lambda: holder.update(g=ctranslate2.Generator(
        out, device="cpu", compute_type=precision, intra_threads=THREADS, inter_threads=1)))
    loader.start()
    loader.join()
    generator = holder["g"]
    with open(os.path.join(path, "vocab.json"), encoding="utf-8") as f:
        pieces = {i: p for p, i in json.load(f).items()}

    def generate(ids, n):
        tokens = [[pieces.get(i, "<|endoftext|>") for i in row] for row in ids]
        generator.generate_batch(tokens, max_length=n, min_length=n, sampling_topk=1, include_prompt_in_result=False,
                                 max_batch_size=len(tokens))
    return generate


def _transformers(precision, path):
    import torch
    import transformers

    torch.set_num_threads(THREADS)
    model = transformers.GPT2LMHeadModel.from_pretrained(path).eval()

    def generate(ids, n):
        x = torch.tensor(ids)
        with torch.no_grad():
            model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0)
    return generate


def worker(engine, precision, path):
    try:
        generate = {"ours": _ours, "ct2": _ct2, "transformers": _transformers}[engine](precision, path)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which names the engine
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
        return
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["op"] == "ready":
                answer = {}
            else:
                ids = prompts(command["batch"], command["length"], command.get("seed", 0))
                t0 = time.perf_counter()
                generate(ids, command["tokens"])
                answer = {"seconds": time.perf_counter() - t0}
        except Exception as error:  # noqa: BLE001
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


# --- the run -------------------------------------------------------------------------------------------------------
def copy_bandwidth(mib=256, rounds=5):
    """STREAM's copy in bytes/s (read + write), THREADS threads each copying its half, best of `rounds`."""
    n = mib * 2**20 // 8
    src, dst = np.random.default_rng(0).random(n), np.empty(n)
    parts = np.array_split(np.arange(n), THREADS)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
    best = 0.0
    for _ in range(rounds):
        threads = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = max(best, 2 * src.nbytes / (time.perf_counter() - t0))
    return best


CELLS = {"prefill 128": dict(batch=1, length=128, kind="prefill"), "prefill 512": dict(batch=1, length=512,
                                                                                         kind="prefill"),
         "decode b1": dict(batch=1, length=128, kind="decode"), "decode b8": dict(batch=8, length=128, kind="decode"),
         "decode b32": dict(batch=32, length=128, kind="decode")}


def measure(w, cell, tokens, warm):
    """The cell's seconds on worker `w` (a step's, for decode); the first time a worker sees a cell it runs the cell's
    shapes once untimed (`warm`: the set of what was warmed), so lazy setup and first-touch pages are not timed."""
    if (cell["batch"], cell["length"]) not in warm:
        w.ask("run", batch=cell["batch"], length=cell["length"], tokens=2)
        warm.add((cell["batch"], cell["length"]))
    def run(**kw):
        # A pause first (GAP_S): the last engine's spinning OpenMP threads (libgomp's and Intel's spin for
        # up to 200 ms after a parallel region) would otherwise take a core from this one's timed call.
        time.sleep(GAP_S)
        return w.ask("run", **kw)

    if cell["kind"] == "prefill":
        return run(batch=1, length=cell["length"], tokens=1)
    first = run(batch=cell["batch"], length=cell["length"], tokens=1)
    more = run(batch=cell["batch"], length=cell["length"], tokens=tokens + 1)
    return first, more, tokens   # a step: (best more - best first) / tokens over the rounds (seconds)


def seconds(values):
    """A cell's time from its rounds: the best (a prefill, or a peer's own step figure), or for our decode cells
    the best of the longer runs less the best of the one-token runs, per token. The best of each round's
    difference would flatter: a round whose one-token run was slowed by noise gives a small difference."""
    if isinstance(values[0], tuple):
        firsts, mores, tokens = zip(*values)
        return (min(mores) - min(firsts)) / tokens[0]
    return min(values)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gpt2,distilgpt2")
    p.add_argument("--engines", default="ours,ct2,llama,transformers")
    p.add_argument("--cells", default=",".join(CELLS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32, help="new tokens a decode cell times (default 32)")
    p.add_argument("--quick", action="store_true", help="distilgpt2 only, 1 round, 8 tokens")
    p.add_argument("--out", help="JSON (default benchmarks/results/generate_speed_<date>.json)")
    p.add_argument("--worker", nargs=3, metavar=("ENGINE", "PRECISION", "PATH"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(*a.worker)
    if a.quick:
        a.models, a.rounds, a.tokens = "distilgpt2", 1, 8
    import ct2_process

    import ctransformer as ct

    engines = [e for e in a.engines.split(",") if e]
    cells = {name: CELLS[name] for name in a.cells.split(",") if name}
    bandwidth = copy_bandwidth()
    info = ct.build_info() if hasattr(ct, "build_info") else {}
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s; {THREADS} threads; {info.get('cpu', '')}", flush=True)
    results = []
    for model_name in [m for m in a.models.split(",") if m]:
        shape = SHAPES[model_name]
        folder = build_directory(tempfile.mkdtemp(prefix=f"generate_speed_{model_name}_"), shape)
        workers = []
        for engine in engines:
            for precision in ENGINES[engine]:
                settings = [{}]
                if engine == "ct2":
                    flags = ct2_process.cpu_flags()
                    settings = [c for c in ct2_process.configs() if not ct2_process.missing_features(c, flags)]
                if engine == "llama":   # timed by llama_peer.time_llama in a child of its own, below
                    continue
                for env in settings:
                    try:
                        workers.append(Worker(engine, precision, folder, env))
                    except RuntimeError as error:
                        print(f"  {engine} {precision} {env or ''}: not measured: {error}", flush=True)
        times = {}   # (engine, precision, setting, cell) -> [seconds]
        warmed = {}   # id(worker) -> the (batch, length) it has run
        for r in range(a.rounds):
            for name, cell in cells.items():
                order = workers if r % 2 == 0 else workers[::-1]
                for w in order:
                    key = (w.engine, w.precision, ct2_process.describe(w.env) if w.env else "", name)
                    try:
                        times.setdefault(key, []).append(measure(w, cell, a.tokens, warmed.setdefault(id(w), set())))
                    except RuntimeError as error:
                        print(f"  {key}: {error}", flush=True)
            if "llama" in engines:
                llama_round(folder, cells, a.tokens, times)
        for w in workers:
            w.close()
        results.extend(report(model_name, shape, cells, times, bandwidth))
    out = a.out or os.path.join(HERE, "results", f"generate_speed_{datetime.datetime.now():%Y-%m-%d_%H%M}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"bandwidth_bytes_per_s": bandwidth, "build_info": info, "results": results}, f, indent=1)
    print(f"wrote {out}")
    return 0


def llama_round(folder, cells, tokens, times):
    """One round of llama.cpp's cells, each precision's GGUF (converted once, beside the model) timed by
    llama_peer.time_llama in a child process: llama_decode's time alone (the batch filled, no sampling), prefill
    the logits of the prompt's last token, decode a step of one token per sequence after a 128-token prompt."""
    import llama_peer

    time.sleep(GAP_S)   # the other engines' spinning threads settle (measure)
    batches = sorted({c["batch"] for c in cells.values() if c["kind"] == "decode"})
    for precision in ENGINES["llama"]:
        gguf = os.path.join(folder, f"model-{precision}.gguf")
        if not os.path.exists(gguf):
            llama_peer.to_gguf(folder, gguf, precision)
        figures = {}
        if batches:
            figures = llama_peer.time_llama(gguf, threads=THREADS, prompt_len=128, decode_tokens=tokens,
                                            batch=batches, rounds=2)   # each its best of 2: warm
        for name, cell in cells.items():
            if cell["kind"] == "prefill":
                ms = (figures.get("prefill_ms") if cell["length"] == 128 and figures else
                      llama_peer.time_llama(gguf, threads=THREADS, prompt_len=cell["length"], decode_tokens=1,
                                            batch=1, rounds=2)["prefill_ms"])
            elif cell["batch"] == 1:
                ms = figures["decode_ms_per_token"]
            else:
                ms = figures["batched_decode"][str(cell["batch"])]["ms_per_step"]
            times.setdefault(("llama", precision, "", name), []).append(ms / 1000.0)


def report(model_name, shape, cells, times, bandwidth):
    best = {}
    for (engine, precision, setting, cell), values in times.items():
        k = (engine, precision, cell)
        if k not in best or seconds(values) < best[k][0]:
            best[k] = (seconds(values), setting)
    rows = []
    print(f"\n{model_name}: {shape}, vocabulary {VOCAB}; ms (best of rounds; decode: a step)")
    labels = sorted({(e, p) for e, p, _ in best}, key=lambda x: (list(ENGINES).index(x[0]), x[1]))
    print("| engine | " + " | ".join(cells) + " |\n|---|" + "---|" * len(cells))
    for e, p in labels:
        cellsf = []
        for name in cells:
            v = best.get((e, p, name))
            cellsf.append("-" if v is None else f"{1000 * v[0]:.1f}" + (f" ({v[1]})" if v[1] else ""))
            if v is not None:
                rows.append({"model": model_name, "engine": e, "precision": p, "cell": name, "seconds": v[0],
                             "setting": v[1]})
        print(f"| {e} {p} | " + " | ".join(cellsf) + " |")
    pairs = [(("ours", "float32"), ("ct2", "float32")), (("ours", "float32"), ("llama", "f32")),
             (("ours", "bfloat16"), ("llama", "f16")), (("ours", "int8"), ("llama", "q8_0")),
             (("ours", "int8"), ("ct2", "int8")), (("ours", "float32"), ("transformers", "float32"))]
    print("\npeer / ours (above 1: ours is faster)\n| ours | peer | " + " | ".join(cells) + " |\n|---|---|" +
          "---|" * len(cells))
    for mine, peer in pairs:
        ratios = []
        for name in cells:
            a_, b_ = best.get((*mine, name)), best.get((*peer, name))
            ratios.append("-" if a_ is None or b_ is None else f"{b_[0] / a_[0]:.2f}")
        if any(r != "-" for r in ratios):
            print(f"| {' '.join(mine)} | {' '.join(peer)} | " + " | ".join(ratios) + " |")
    weights = parameters(shape)
    print(f"\nbatch 1 decode against the memory bound ({weights / 1e6:.0f} M weights a token; copy "
          f"{bandwidth / 1e9:.1f} GB/s):")
    for e, p in labels:
        v = best.get((e, p, "decode b1"))
        if v is None:
            continue
        moved = weights * BYTES_PER_WEIGHT.get(p, 4.0)
        print(f"  {e} {p}: {moved / 1e6:.0f} MB a token in {1000 * v[0]:.2f} ms = {moved / v[0] / 1e9:.1f} GB/s, "
              f"{100 * moved / v[0] / bandwidth:.0f}% of the copy's")
    return rows


if __name__ == "__main__":
    sys.exit(main())
