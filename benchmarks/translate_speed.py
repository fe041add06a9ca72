"""Translation speed on Multi30k test2016: ctransformer against CTranslate2 (float32, int8) and PyTorch.

    python benchmarks/translate_speed.py --checkpoint runs/multi30k.safetensors [--sentences 1000]

One checkpoint of ``ctransformer-train multi30k``, six engines on the same weights:
- ctransformer: ``ctransformer.translator.Translator`` (batched beam search on the key/value caches;
  beam 1 is greedy), in float32, under ``ct.autocast`` (bf16 products, ``--precision bf16``) and with
  the model quantised to int8 (``--compute-type int8``; a second copy of the model, quantised once);
- CTranslate2 float32 and int8 (weights quantised at load time): the model written by
  ``ct.export.to_ctranslate2``, its sources the same subwords plus end-of-sentence, each in a process
  of its own as its docs run it (ct2_process.py; the time is taken there, around translate_batch), in
  the fastest of its documented backend/ISA settings for the setting (ct2_process.fastest);
- PyTorch 2.13: the post-norm reference (jadore801120's model, tests/reference/post_norm.py) with the
  checkpoint's state dict, decoded by the Annotated Transformer's greedy loop (the whole prefix at every
  step), batched; the blog posts' code has no beam search, so PyTorch has greedy rows only.
For each setting (beam 5 and greedy; batch 1 and 32) the engines take turns, round after round, each
call after a pause (measure.GAP_S) so that no engine's idle threads spin into the next one's call, and
the table gives the median over rounds of sentences/s and output subwords/s (each engine's own
output counted), 2 threads each. Every engine sorts the sentences by length before batching.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

import numpy as np

# As benchmarks/run.py: torch's OpenMP threads sleep when idle rather than spin (it reads this at start).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # tests/reference: the post-norm reference

import level_cap  # noqa: E402

STAND_IN = level_cap.apply()  # ct capped at a smaller CPU's level: its peers too (before any of them loads)

import measure  # noqa: E402
from ct2_process import Call, fastest  # noqa: E402

THREADS = 2


def ctransformer_engine(model, vocab, beam, batch, bf16=False):
    """bf16: the whole call under ct.autocast (ctransformer-translate --precision bf16): products in bf16,
    the weights rounded once per call."""
    import ctransformer as ct
    from ctransformer.translator import Translator
    translator = Translator(model, vocab, beam_size=beam, length_penalty=0.6, batch_size=batch)

    def run(ids):
        with ct.autocast(enabled=bf16):
            return translator.translate_ids(ids)
    return run


class CTranslate2Engine(Call):
    """CTranslate2 in a process of its own (ct2_process.py), on the sentences `ids` given once; a call
    returns the output tokens the worker counted, `last_seconds` its time taken in that process."""

    def __init__(self, path, compute_type, vocab, ids, beam, batch, max_len):
        pieces = [vocab.processor.id_to_piece(i) for i in range(len(vocab))]
        options = dict(beam_size=beam, max_batch_size=batch, max_decoding_length=max_len,
                       length_penalty=0.6 if beam > 1 else 0.0)
        # Batches in parallel tried too (inter_threads): ctransformer's Translator takes its batches a thread each.
        worker = fastest(path, compute_type, THREADS, [[pieces[i] for i in s] + ["</s>"] for s in ids], options,
                         calls=1, batches_in_parallel=True)
        super().__init__(worker, **options)

    def __call__(self, ids):
        return super().__call__()["tokens"]


def call(run, ids):
    """(seconds, output tokens, voluntary context switches or None) of one call of an engine after the pause;
    an engine in another process gives its own time, token count and context switches."""
    out = []
    seconds = measure.timed(lambda: out.append(run(ids)), measure.GAP_S)
    seconds = getattr(run, "last_seconds", None) or seconds
    return seconds, out[0] if isinstance(out[0], int) else sum(len(o) for o in out[0]), getattr(run, "last_switches", None)


def torch_engine(state, cfg, vocab_size, batch, max_len):
    import torch
    from reference.post_norm import Transformer, get_pad_mask, get_subsequent_mask
    from ctransformer.data.subword import BOS_ID, EOS_ID, PAD_ID
    from ctransformer.data.token_batches import make_arrays
    d, h = cfg["d_model"], cfg["n_head"]
    model = Transformer(vocab_size, vocab_size, PAD_ID, PAD_ID, d_word_vec=d, d_model=d, d_inner=cfg["d_inner"],
                        n_layers=cfg["n_layers"], n_head=h, d_k=d // h, d_v=d // h, dropout=cfg["dropout"],
                        n_position=cfg["n_position"], scale_emb_or_prj=cfg["scale_emb_or_prj"])
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()})
    model.eval()

    def greedy(src):
        src = torch.from_numpy(src)
        src_mask = get_pad_mask(src, PAD_ID)
        with torch.no_grad():
            memory, *_ = model.encoder(src, src_mask)
            ys = torch.full((src.size(0), 1), BOS_ID, dtype=src.dtype)
            done = torch.zeros(src.size(0), dtype=torch.bool)
            for _ in range(max_len - 1):
                out, *_ = model.decoder(ys, get_subsequent_mask(ys), memory, src_mask)
                logits = model.trg_word_prj(out[:, -1])
                if model.scale_prj:
                    logits = logits * model.d_model ** -0.5
                nxt = logits.argmax(dim=1)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                done |= nxt == EOS_ID
                if bool(done.all()):
                    break
        return ys.numpy()

    def run(ids):
        out = [None] * len(ids)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            src, _ = make_arrays([ids[i] for i in rows], None)
            ys = greedy(src)
            for r, i in enumerate(rows):
                h = ys[r, 1:]
                end = np.flatnonzero(h == EOS_ID)
                out[i] = h[:end[0]].tolist() if len(end) else h.tolist()
        return out
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="a checkpoint of ctransformer-train multi30k")
    p.add_argument("--sentences", type=int, default=1000, help="the first N sentences of test2016 (default all 1000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--settings", default="greedy/1,greedy/32,beam5/1,beam5/32",
                   help="comma-separated beam/batch settings: greedy/B or beamK/B")
    p.add_argument("--out", help="JSON file (default benchmarks/results/translate_<date>.json)")
    a = p.parse_args()

    import torch
    import ctransformer as ct
    from ctransformer.checkpoint import read_checkpoint
    from ctransformer.data.parallel_corpus import multi30k
    from ctransformer.translator import load_translation_checkpoint
    torch.set_num_threads(THREADS)
    ct.set_num_threads(THREADS)

    model, vocab, cfg = load_translation_checkpoint(a.checkpoint)
    model_int8 = load_translation_checkpoint(a.checkpoint)[0].quantize("int8")
    tensors, _ = read_checkpoint(a.checkpoint)
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    sentences = multi30k("test2016").src[:a.sentences]
    ids = [s[:cfg["n_position"] - 1] for s in vocab.encode(sentences)]
    max_len = min(cfg["n_position"], int(1.5 * max(len(s) for s in ids)) + 11)

    import tempfile
    folder = tempfile.mkdtemp()
    pieces = [vocab.processor.id_to_piece(i) for i in range(len(vocab))]
    ct2_path = ct.export.to_ctranslate2(model, os.path.join(folder, "ct2"), pieces,
                                        unk_token=pieces[vocab.unk_id], bos_token=pieces[vocab.bos_id],
                                        eos_token=pieces[vocab.eos_id])

    rows = []
    for setting in a.settings.split(","):
        kind, batch = setting.split("/")
        beam, batch = (1 if kind == "greedy" else int(kind[len("beam"):])), int(batch)
        engines = {"ctransformer": ctransformer_engine(model, vocab, beam, batch),
                   "ctransformer bf16": ctransformer_engine(model, vocab, beam, batch, bf16=True),
                   "ctransformer int8": ctransformer_engine(model_int8, vocab, beam, batch),
                   "CTranslate2 float32": CTranslate2Engine(ct2_path, "float32", vocab, ids, beam, batch, max_len),
                   "CTranslate2 int8": CTranslate2Engine(ct2_path, "int8", vocab, ids, beam, batch, max_len)}
        if beam == 1:
            engines["PyTorch (greedy loop)"] = torch_engine(state, cfg, len(vocab), batch, max_len)
        times = {name: [] for name in engines}
        switches = {name: [] for name in engines}
        tokens = {}
        for _ in range(a.rounds):
            for name, run in engines.items():
                seconds, tokens[name], n = call(run, ids)
                times[name].append(seconds)
                if n is not None:
                    switches[name].append(n)
        for name in engines:
            s = statistics.median(times[name])
            row = {"setting": setting, "beam": beam, "batch": batch, "engine": name, "seconds": s,
                   "sentences_per_s": len(ids) / s, "tokens_per_s": tokens[name] / s, "times": times[name]}
            if hasattr(engines[name], "config"):
                row["ct2_config"] = engines[name].config
            if switches[name]:  # CTranslate2's worker: a throttled OpenMP runtime shows here (ct2_process.py)
                row["context_switches_per_call"] = statistics.median(switches[name])
            rows.append(row)
            extra = (f"  {row['context_switches_per_call']:.0f} context switches/call, {row['ct2_config'] or 'its defaults'}"
                     if "context_switches_per_call" in row else "")
            print(f"{setting:10s} {name:24s} {row['sentences_per_s']:8.1f} sent/s {row['tokens_per_s']:9.0f} tok/s{extra}",
                  flush=True)

    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": measure.cpu_model(),
            "threads": THREADS, "sentences": len(ids), "checkpoint": a.checkpoint, "rounds": a.rounds,
            "torch": torch.__version__, "build": ct.build_info(), "loadavg_1min": os.getloadavg()[0],
            "stand_in": STAND_IN or None}
    out = a.out or measure.result_path(os.path.join(HERE, "results"),
                                       "translate_" + datetime.datetime.now().strftime("%Y-%m-%d_%H%M"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    print(f"\nMulti30k test2016, {len(ids)} sentences, {THREADS} threads each, medians of {a.rounds} rounds, "
          f"{meta['cpu']}, load {meta['loadavg_1min']:.1f}\n")
    if STAND_IN:
        print("A stand-in for a smaller CPU: ct and its peers held to one instruction set (level_cap.py): "
              + ", ".join(f"{k}={v}" for k, v in meta["stand_in"].items()) + "\n")
    print("| setting | engine | sentences/s | subwords/s | time / ctransformer's (int8: ctransformer int8's) "
          "| CTranslate2's voluntary context switches a call |\n|---|---|---:|---:|---:|---:|")
    for r in rows:
        mine = "ctransformer int8" if r["engine"].endswith("int8") else "ctransformer"
        base = next(x for x in rows if x["setting"] == r["setting"] and x["engine"] == mine)
        print(f"| {r['setting']} | {r['engine']} | {r['sentences_per_s']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['seconds'] / base['seconds']:.2f}x |"
              + (f" {r['context_switches_per_call']:.0f} |" if "context_switches_per_call" in r else " |"))


if __name__ == "__main__":
    main()
