"""Multi30k German→English (or any parallel corpus) on the post-norm Transformer, with subwords and BLEU.

The pipeline a user of fairseq or Marian expects, in one task:
- a joint de+en sentencepiece model (``vocab_size``, ``subword_model``) trained on the training text
  and cached beside the checkpoint (``<checkpoint>.spm.model``; without one, in the user cache);
  its bytes also travel inside every checkpoint, so a checkpoint translates on its own;
- batches of about ``batch_tokens`` padded positions, length-bucketed and reshuffled every epoch
  from the seed (``ctransformer.data.token_batches``);
- the post-norm Transformer with source/target embeddings and output projection all one matrix, Adam
  (0.9, 0.98, 1e-9) on the Noam rate (or a schedule laid over the run's steps), label smoothing, dropout;
- validation at every epoch's end (or every ``eval_every`` steps; the fitted schedule: at the models kept for
  averaging): loss, perplexity and BLEU (sacrebleu,
  detokenised, cased); the training loop keeps the best-BLEU model in ``<checkpoint stem>.best.safetensors``,
  the last ``average_last`` validated models in ``.stepN.safetensors`` and averages them at the end into
  ``.averaged.safetensors`` (ctransformer.kept_models).

``--set train_src=FILE train_tgt=FILE valid_src=FILE valid_tgt=FILE`` (plain or gzipped, one sentence
a line) trains on another corpus; ``test_src``/``test_tgt`` add a final test BLEU (Multi30k's
default: test2016).
"""
import math
import os
import time

import numpy as np

import ctransformer as ct
from ctransformer.data.parallel_corpus import corpus_from_options, multi30k
from ctransformer.data.paths import cache_dir
from ctransformer.data.marian_tokenizer import MarianTokenizer
from ctransformer.data.subword import BOS_ID, EOS_ID, PAD_ID, cached_subword_vocab, training_key
from ctransformer.data.token_batches import TokenBatcher
from ctransformer.kept_models import stem
from ctransformer.translator import TASK, Translator, build_model, corpus_bleu

from .base import Task


class Multi30k(Task):
    """Multi30k de→en (or --set train_src=... for any corpus) with subwords, token batches and BLEU."""

    name = "multi30k"

    defaults = {
        "seed": 0, "steps": 8000, "log_every": 100, "epochs": 0,   # epochs > 0 (--epochs N) replaces steps
        "precision": "float32",   # or "bfloat16" ("bf16"): train steps under ct.autocast (the loop reads it)
        # The corpus: Multi30k unless files are named; max_train_pairs > 0 keeps the first N pairs.
        "train_src": "", "train_tgt": "", "valid_src": "", "valid_tgt": "", "test_src": "", "test_tgt": "",
        "max_train_pairs": 0,
        # Fine-tuning: a Hugging Face Marian directory (an opus-mt model; --init-from) gives the model, its weights
        # and its tokenizer, in place of the subword and model settings below; save_pretrained (--save-pretrained)
        # writes the trained model back as such a directory.
        "init_from": "", "save_pretrained": "",
        # Subwords and batches. Pairs with a side of more than max_len subwords are left out of training.
        "vocab_size": 8000, "subword_model": "bpe", "max_len": 100, "batch_tokens": 1024,
        # The short-run recipe: a time budget that buys fewer than short_run_tokens batch tokens (steps x
        # batch_tokens: 2500 steps of 1024, ~5 epochs; more than an AVX2-only CPU's half hour) trains on smaller
        # batches, short_run_batch_tokens, without dropout (short_run_dropout), planned again with them. Measured
        # at a Zen 1's half hour (docs/translation.md, "Recipes measured"): 512-token batches reached validation
        # BLEU 22.8-26.6 with dropout 0.1 where 1024-token ones reached 20.1-23.7, and without dropout 34.6. A run
        # of a few epochs does not overfit; dropout only slows it. short_run_tokens=0 keeps the settings above.
        "short_run_tokens": 2_560_000, "short_run_batch_tokens": 512, "short_run_dropout": 0.0,
        # The model (the post-norm Transformer, tied embeddings; d_k = d_v = d_model / n_head).
        # scale_emb_or_prj 'emb' (the tied embedding times sqrt(d_model)), not the reference's default 'prj'
        # (logits times d_model^-0.5): with 'prj' the Xavier-initialised embedding (std ~0.016 at 8000 x 256)
        # is a whisper beside the +-1 sinusoids. Measured, 160 steps of warmup 150 / lr_factor 0.3 on
        # Multi30k: val loss 5.36 / 4.77 at steps 80 / 160 with 'emb', 8.25 / 6.37 with 'prj'.
        # dropout 0.1 with the fitted schedule below (docs/translation.md, "Recipes measured"); the Noam recipe the
        # guide's first hour was measured with used 0.2 (--set schedule=noam batch_tokens=4096 dropout=0.2).
        "d_model": 256, "d_inner": 1024, "n_layers": 3, "n_head": 4, "dropout": 0.1, "n_position": 200,
        "scale_emb_or_prj": "emb",
        # One side's own layers, heads and FFN width (0: n_layers, n_head, d_inner), e.g. the distilled
        # students' deep encoder and shallow decoder: --set encoder_n_layers=6 decoder_n_layers=2.
        "encoder_n_layers": 0, "decoder_n_layers": 0, "encoder_n_head": 0, "decoder_n_head": 0,
        "encoder_d_inner": 0, "decoder_d_inner": 0,
        # Optimisation. schedule "fitted" (the default) lays the rate over the run's steps (--steps, or the steps
        # a --max-minutes budget buys, ctransformer.budget): a linear warmup over warmup_fraction of them to lr,
        # then a cosine decay to lr * final_lr_fraction at the last step. schedule "noam" is the Annotated
        # Transformer's rate, written in steps: lr = lr_factor * d_model^-0.5 * min(step^-0.5, step *
        # warmup^-1.5), peaking at 1.1e-3 at step 800, whatever the run's length.
        # Measured (docs/translation.md, "Recipes measured") at the tokens of an AVX2 Zen 1's half hour and of
        # a Zen 4's: lr 5e-4, a 5% warmup, clipping at 1.0, dropout 0.1 and batches of 1024 tokens reach test2016
        # BLEU 28.5 and 41.8 where Noam on 4096-token batches reached 6.8 and 38.3 (bf16). The post-norm model
        # takes a short warmup only at this rate with clipping; for the same tokens, more and smaller batches
        # won by far (7.3 / 18.4 / 28.5 / 30.8 at 4096 / 2048 / 1024 / 512 tokens).
        "schedule": "fitted", "lr": 5e-4, "warmup_fraction": 0.05, "final_lr_fraction": 0.1,
        "lr_factor": 0.5, "warmup": 800, "label_smoothing": 0.1, "grad_clip": 1.0,
        # Validation: schedule "fitted" validates at the average_last models it keeps for averaging, spread
        # evenly over the last average_span of the run; "noam" at every epoch's end. eval_every N > 0 adds
        # a validation every N steps. val_sentences > 0 scores the first N.
        "eval_every": 0, "val_beam_size": 1, "val_sentences": 0, "best_metric": "bleu", "average_last": 5,
        "average_span": 0.2,
        # Translation settings: the final evaluation's, and ctransformer-translate's defaults.
        "beam_size": ct.decode.DEFAULT_BEAM_SIZE, "length_penalty": ct.decode.DEFAULT_ALPHA, "max_len_ratio": 1.5,
        "eval_batch_size": 64,
        "target_bleu": 35.0,
    }

    # --- data ------------------------------------------------------------------------------------------
    def _load_data(self):
        cfg = self.cfg
        train = corpus_from_options(cfg["train_src"], cfg["train_tgt"], "train", "train")
        valid = corpus_from_options(cfg["valid_src"], cfg["valid_tgt"], "val", "valid")
        if cfg["test_src"] or cfg["test_tgt"]:
            test = corpus_from_options(cfg["test_src"], cfg["test_tgt"], "test2016", "test")
        else:
            test = None if cfg["train_src"] else multi30k("test2016")
        train, empty = train.without_empty()
        if cfg["max_train_pairs"] > 0:
            train.src, train.tgt = train.src[:cfg["max_train_pairs"]], train.tgt[:cfg["max_train_pairs"]]
        self.train_corpus, self.valid_corpus, self.test_corpus = train, valid, test
        return empty

    def _vocab_path(self, sentences):
        if self.run.checkpoint:
            return stem(self.run.checkpoint) + ".spm.model"
        key = training_key(sentences, vocab_size=self.cfg["vocab_size"], model_type=self.cfg["subword_model"])
        return str(cache_dir() / "subword" / f"{key}.model")

    def build(self):
        cfg = self.cfg
        if cfg["max_len"] + 1 > cfg["n_position"]:
            raise ValueError(f"multi30k: max_len ({cfg['max_len']}) + 1 must fit in n_position ({cfg['n_position']})")
        if cfg["best_metric"] not in ("bleu", "loss"):
            raise ValueError(f"multi30k: best_metric must be 'bleu' or 'loss', got {cfg['best_metric']!r}")
        if cfg["schedule"] not in ("fitted", "noam"):
            raise ValueError(f"multi30k: schedule must be 'fitted' or 'noam', got {cfg['schedule']!r}")
        if not (0 <= cfg["warmup_fraction"] < 1 and 0 <= cfg["final_lr_fraction"] <= 1 and 0 < cfg["average_span"] <= 1):
            raise ValueError(f"multi30k: warmup_fraction must be in [0, 1), final_lr_fraction in [0, 1] and average_span "
                             f"in (0, 1], got {cfg['warmup_fraction']!r}, {cfg['final_lr_fraction']!r}, "
                             f"{cfg['average_span']!r}")
        empty = self._load_data()
        if cfg["init_from"]:
            model = ct.nn.Transformer.from_pretrained(cfg["init_from"])
            model.train()
            self.vocab = MarianTokenizer(cfg["init_from"])
            self.pad_id, self.eos_id = model.config.trg_pad_idx, self.vocab.eos_id
            start = model.config.decoder_start_idx
            self.bos_id = self.pad_id if start is None else start
            encode = lambda sentences, target=False: self.vocab.encode(sentences, target=target, add_eos=False)
            self.log(f"multi30k: fine-tuning {cfg['init_from']} (its model, weights and tokenizer; the subword and "
                     f"model settings are not used)")
        else:
            text = self.train_corpus.src + self.train_corpus.tgt
            self.vocab = cached_subword_vocab(text, self._vocab_path(text), cfg["vocab_size"], cfg["subword_model"],
                                              log=self.log)
            self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
            encode = lambda sentences, target=False: self.vocab.encode(sentences)
            model = None
        src = encode(self.train_corpus.src)
        tgt = encode(self.train_corpus.tgt, target=True)
        keep = [i for i in range(len(src)) if len(src[i]) <= cfg["max_len"] and len(tgt[i]) <= cfg["max_len"]]
        special = dict(pad=self.pad_id, bos=self.bos_id, eos=self.eos_id)
        self.batcher = TokenBatcher([src[i] for i in keep], [tgt[i] for i in keep], cfg["batch_tokens"], cfg["seed"],
                                    **special)
        room = cfg["n_position"] - 1 if model is None else model.config.n_position - 1
        self.valid_ids = ([s[:room] for s in encode(self.valid_corpus.src)],
                          [t[:room] for t in encode(self.valid_corpus.tgt, target=True)])
        self.valid_batcher = TokenBatcher(*self.valid_ids, max(cfg["batch_tokens"], room + 1), seed=0, **special)
        self.log(f"multi30k: {len(keep)} training pairs ({empty} with an empty side and {len(src) - len(keep)} "
                 f"over {cfg['max_len']} subwords left out), {len(self.vocab)} subwords, {len(self.batcher)} "
                 f"batches of <= {cfg['batch_tokens']} tokens an epoch, padding "
                 f"{100 * self.batcher.padding_fraction(0):.1f}%; {len(self.valid_corpus)} validation pairs")
        if cfg["epochs"] > 0:
            cfg["steps"] = cfg["epochs"] * len(self.batcher)
        if model is None:
            model = build_model(cfg, len(self.vocab))
        optimizer = ct.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        self.restart_clocks()
        self._minutes_before = 0.0
        return model, optimizer, self.schedule(optimizer)

    # --- the recipe and the schedule over the run's steps ------------------------------------------------
    def short_run_config(self, planned_steps):
        """The settings a budgeted run that buys `planned_steps` steps of batch_tokens trains with instead (the
        short-run recipe, when those steps hold fewer than short_run_tokens batch tokens), as overrides of its
        config; {} for none. A batch is never made larger."""
        cfg = self.cfg
        if planned_steps * cfg["batch_tokens"] >= cfg["short_run_tokens"]:
            return {}
        smaller = 0 < cfg["short_run_batch_tokens"] < cfg["batch_tokens"]
        recipe = {"batch_tokens": cfg["short_run_batch_tokens"] if smaller else cfg["batch_tokens"],
                  "dropout": cfg["short_run_dropout"]}
        return {key: value for key, value in recipe.items() if value != cfg[key]}

    @property
    def fits_budget(self):
        """A --max-minutes run plans its steps first (ctransformer.budget) when the schedule is laid over them."""
        return self.cfg["schedule"] == "fitted"

    def schedule(self, optimizer):
        """The learning-rate scheduler of this configuration, laid over cfg["steps"] when "fitted"."""
        cfg = self.cfg
        if cfg["schedule"] == "noam":
            for group in optimizer.param_groups:
                group["lr"] = 1.0
            return ct.optim.LambdaLR(optimizer, ct.optim.NoamLambda(cfg["d_model"], cfg["lr_factor"], cfg["warmup"]))
        for group in optimizer.param_groups:
            group["lr"] = cfg["lr"]
        warmup, decay_end, min_lr = self._fitted()
        return ct.optim.CosineWarmupLR(optimizer, warmup_iters=warmup, lr_decay_iters=decay_end, min_lr=min_lr)

    def _fitted(self):
        """(warmup_iters, lr_decay_iters, min_lr) of the fitted schedule over cfg["steps"]. nanoGPT's
        cosine_with_warmup counts iterations from 0: lr * (it + 1) / (warmup + 1) while warming up, then the
        cosine from lr down to min_lr at it = steps - 1, the run's last step."""
        cfg = self.cfg
        warmup = round(cfg["warmup_fraction"] * cfg["steps"])
        return warmup, max(cfg["steps"] - 1, warmup + 1), cfg["lr"] * cfg["final_lr_fraction"]

    def learning_rate(self, step):
        """The rate schedule() gives optimizer step `step` (0-based): for a twin written in another framework."""
        cfg = self.cfg
        if cfg["schedule"] == "noam":
            return ct.optim.rate(step, cfg["d_model"], cfg["lr_factor"], cfg["warmup"])
        warmup, decay_end, min_lr = self._fitted()
        return ct.optim.cosine_with_warmup(step, warmup, decay_end, cfg["lr"], min_lr)

    def describe_schedule(self):
        """What the fitted schedule does over this run (logged when a run lays it over its steps)."""
        warmup, _, min_lr = self._fitted()
        return (f"schedule fitted to {self.cfg['steps']} steps: warmup {warmup} to lr {self.cfg['lr']:g}, cosine to "
                f"{min_lr:.3g}; models kept for averaging after steps {', '.join(map(str, self.kept_steps()))}")

    def kept_steps(self, steps=None):
        """The steps whose models the fitted schedule validates and keeps for averaging: average_last of them,
        evenly spread over the last average_span of `steps` (cfg["steps"] by default), ending at the last."""
        steps = self.cfg["steps"] if steps is None else steps
        count = max(1, self.cfg["average_last"])
        spacing = max(1, round(self.cfg["average_span"] * steps / count))
        return sorted({steps - i * spacing for i in range(count) if steps - i * spacing > 0})

    def validation_steps(self, steps):
        """Every step after which a run of `steps` steps validates (ctransformer.budget counts them)."""
        due = set(self.kept_steps(steps)) if self.cfg["schedule"] == "fitted" else \
            set(range(len(self.batcher), steps + 1, len(self.batcher))) | {steps}
        if self.cfg["eval_every"]:
            due |= set(range(self.cfg["eval_every"], steps + 1, self.cfg["eval_every"]))
        return sorted(due)

    def validation_seconds(self, model, sentences=64):
        """The measured time of one validation, its translations timed on the first `sentences` and scaled
        (an untrained model translates to its length limit, so this errs long)."""
        began = time.perf_counter()
        model.eval()
        with ct.no_grad():
            for indices in self.valid_batcher.epoch(0):
                src, tgt = self.valid_batcher.arrays(indices)
                model(src, tgt[:, :-1])
            loss_seconds = time.perf_counter() - began
            n = min(sentences, len(self.valid_corpus))
            began = time.perf_counter()
            self.translator(model, self.cfg["val_beam_size"]).translate(self.valid_corpus.src[:n])
        model.train()
        total = self.cfg["val_sentences"] or len(self.valid_corpus)
        return loss_seconds + (time.perf_counter() - began) * total / n

    def restart_clocks(self):
        """Throughput and wall time count from here (after build, and after ctransformer.budget's probe)."""
        self._tokens, self._clock = 0, time.perf_counter()
        self._began = None      # wall time of training, validation included, from the first batch

    # --- checkpoint hooks ------------------------------------------------------------------------------
    def model_extra(self):
        if self.cfg["init_from"]:   # the tokenizer stays in the Marian directory the run started from
            return {"task": TASK, "init_from": self.cfg["init_from"]}
        return {"task": TASK, "sentencepiece": self.vocab.as_array()}

    def best_metric(self):
        return ("val_bleu", "max") if self.cfg["best_metric"] == "bleu" else ("val_loss", "min")

    def restore_extra(self, extra):
        stored = extra.get("sentencepiece")
        if stored is not None and np.asarray(stored, dtype=np.uint8).tobytes() != self.vocab.model_bytes:
            from ctransformer.checkpoint import CheckpointError

            raise CheckpointError(f"multi30k: {self.run.checkpoint} was trained with another subword model than the one "
                                  f"built now (another sentencepiece version, or the cached .spm.model changed); "
                                  f"its token ids would not mean the same subwords")
        timed = [h["wall_min"] for h in extra.get("history", []) if "wall_min" in h]
        self._minutes_before = timed[-1] if timed else 0.0

    # --- training --------------------------------------------------------------------------------------
    def train_batch(self, step, rng):
        if self._began is None:
            self._began = time.perf_counter()
        _, _, indices = self.batcher.at_step(step)
        batch = self.batcher.arrays(indices)               # the global batch (src, tgt), padded to its lengths
        self._tokens += self.loss_count(batch)             # the job's tokens, over every process
        return batch

    def loss_count(self, batch):
        _, tgt = batch
        return int((tgt[:, 1:] != self.pad_id).sum())

    def loss(self, model, batch):
        src, tgt = batch
        logits = model(src, tgt[:, :-1])                    # (b * lt, vocab)
        loss = ct.functional.cross_entropy(logits, tgt[:, 1:].reshape(-1), ignore_index=self.pad_id,
                                           label_smoothing=self.cfg["label_smoothing"])  # mean over real tokens
        return loss, {}

    def log_due(self, step):
        """Validate (and so log) at the steps validation_steps names."""
        if self.cfg["schedule"] == "fitted":
            return step in self.kept_steps() or bool(self.cfg["eval_every"]) and step % self.cfg["eval_every"] == 0
        every = self.cfg["eval_every"] or len(self.batcher)
        return step % every == 0

    def periodic_eval(self, model, rng, step, final=False):
        now = time.perf_counter()
        metrics = {"epoch": round(step / len(self.batcher), 2)}
        if self._tokens:
            metrics["tok/s"] = round(self._tokens / max(now - self._clock, 1e-9))
        if not (self.log_due(step) or final):
            self._tokens, self._clock = 0, time.perf_counter()
            return metrics
        model.eval()
        with ct.no_grad():
            metrics.update(self.validate(model, beam_size=self.cfg["val_beam_size"]))
        model.train()
        metrics["wall_min"] = round(self._minutes_before + (time.perf_counter() - self._began) / 60, 3)
        self._tokens, self._clock = 0, time.perf_counter()     # validation time is not training throughput
        return metrics

    def validate(self, model, beam_size, sentences=None):
        """{val_loss (per target token, no smoothing), val_ppl, val_bleu} on the validation corpus."""
        total, count = 0.0, 0
        for indices in self.valid_batcher.epoch(0):
            src, tgt = self.valid_batcher.arrays(indices)
            target = tgt[:, 1:].reshape(-1)
            loss = ct.functional.cross_entropy(model(src, tgt[:, :-1]), target, ignore_index=self.pad_id,
                                               reduction="sum")
            total += loss.item()
            count += int((target != self.pad_id).sum())
        n = sentences if sentences is not None else (self.cfg["val_sentences"] or len(self.valid_corpus))
        hypotheses = self.translator(model, beam_size).translate(self.valid_corpus.src[:n])
        score, _ = corpus_bleu(hypotheses, self.valid_corpus.tgt[:n])
        return {"val_loss": total / count, "val_ppl": math.exp(min(total / count, 50.0)), "val_bleu": score.score}

    def translator(self, model, beam_size=None):
        cfg = self.cfg
        return Translator(model, self.vocab, beam_size=beam_size or cfg["beam_size"],
                          length_penalty=cfg["length_penalty"], max_len_ratio=cfg["max_len_ratio"],
                          batch_size=cfg["eval_batch_size"], warn=lambda message: None)

    def save_pretrained(self, model):
        """Write the model fine-tuned from init_from as a Hugging Face Marian directory (cfg save_pretrained),
        with the tokenizer and generation files of the directory it started from."""
        import shutil

        from ctransformer.marian import save_pretrained

        out = self.cfg["save_pretrained"]
        save_pretrained(model, out)
        for name in ("source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer_config.json",
                     "generation_config.json"):
            if os.path.isfile(os.path.join(self.cfg["init_from"], name)):
                shutil.copyfile(os.path.join(self.cfg["init_from"], name), os.path.join(out, name))
        return out

    # --- the end ---------------------------------------------------------------------------------------
    def evaluate(self, model, rng):
        cfg = self.cfg
        result = self.validate(model, beam_size=cfg["beam_size"], sentences=len(self.valid_corpus))
        result["padding"] = round(self.batcher.padding_fraction(0), 4)
        if self.test_corpus is not None:
            hyps = self.translator(model).translate(self.test_corpus.src)
            score, signature = corpus_bleu(hyps, self.test_corpus.tgt)
            result["test_bleu"] = score.score
            result["bleu_signature"] = str(signature)
        return result

    def samples(self, model, rng):
        n = min(5, len(self.valid_corpus))
        hyps = self.translator(model).translate(self.valid_corpus.src[:n])
        lines = []
        for src, ref, hyp in zip(self.valid_corpus.src[:n], self.valid_corpus.tgt[:n], hyps):
            lines += [f"source     {src}", f"reference  {ref}", f"translated {hyp}", ""]
        return lines

    def check(self, evaluation):
        if "test_bleu" not in evaluation:
            return True, f"val BLEU {evaluation['val_bleu']:.2f} (no test set named)"
        target = self.cfg["target_bleu"]
        ok = evaluation["test_bleu"] >= target
        return ok, (f"test BLEU {evaluation['test_bleu']:.2f} ({evaluation['bleu_signature']}), target >= {target}: "
                    f"{'reached' if ok else 'NOT reached'}")
