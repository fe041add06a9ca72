"""Generation as transformers' ``generate`` does it, for the GPT: its logits processors in its order and with its
defaults, greedy or sampled, seedable per call, and streamed a token at a time.

The step from logits to a token is split in three, so each can be checked on its own against transformers:
``process_scores`` (the processors: repetition penalty, no-repeat n-grams, then when sampling temperature, top-k,
top-p and min-p, as ``GenerationMixin._get_logits_processor`` orders them), ``probabilities`` (the softmax) and
``choose`` (the id a uniform number in [0, 1) picks: the first whose cumulative probability exceeds it). transformers
draws with ``torch.multinomial``; fed the same uniforms, inverse-CDF picks on both sides agree wherever a uniform is
not within rounding of a cumulative probability.

Defaults are transformers' (``GenerationConfig``): greedy unless ``do_sample``; when sampling, temperature 1, top_k 50
(an unset top_k is 50: pass top_k=0 for none), top_p 1, no min_p; repetition_penalty 1; no_repeat_ngram_size 0.
``generation_config.json`` in a model directory overrides them (``GenerationOptions.from_pretrained``), and the
arguments of a call override both. CTranslate2's names are accepted too: ``sampling_topk``, ``sampling_topp`` and
``sampling_temperature``.

``generate`` returns the ids; ``generate_tokens`` yields one ``StepResult`` per row and step while the model runs
(each step's C++ forward pass releases the GIL), with the text the step completes when a tokenizer is given: pieces
end at word boundaries and never split a UTF-8 character, so they join to the decoded continuation. Closing the
iterator stops the loop before its next step.
"""
import json
import os
from collections import namedtuple

import numpy as np

__all__ = ["GenerationOptions", "StepResult", "process_scores", "probabilities", "choose", "generate",
           "generate_tokens"]

ALIASES = {"sampling_topk": "top_k", "sampling_topp": "top_p", "sampling_temperature": "temperature"}

# generation_config.json's fields that would change the tokens and are not built here: refused by name when set
# to anything but their no-op value.
_NOT_BUILT = {"num_beams": 1, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None,
              "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None, "sequence_bias": None,
              "min_length": 0, "min_new_tokens": None, "encoder_repetition_penalty": 1.0, "penalty_alpha": None,
              "diversity_penalty": 0.0, "forced_bos_token_id": None, "forced_eos_token_id": None,
              "exponential_decay_length_penalty": None, "renormalize_logits": False}

class StepResult(namedtuple("StepResult", "step batch_id token_id text log_prob is_last")):
    """One generated token of one row: step (0 for the first new token), batch_id (the row), token_id, text (the
    decoded text this token completes: whole words, possibly '' while a word is still growing; None without a
    tokenizer), log_prob (the token's log-probability under the processed scores it was chosen from) and is_last
    (the row ends here: its end-of-sequence token, or the last of max_new_tokens)."""

    __slots__ = ()


class GenerationOptions:
    """What transformers' ``GenerationConfig`` says of greedy and sampled generation, with its defaults."""

    FIELDS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None,
              "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "max_new_tokens": None, "max_length": 20,
              "eos_token_id": None, "pad_token_id": None}

    def __init__(self, **options):
        for name, value in self.FIELDS.items():
            setattr(self, name, value)
        self.update(**options)

    @classmethod
    def from_pretrained(cls, source=None, **overrides):
        """The options of a model directory's generation_config.json (or of a dict of its contents), over
        transformers' defaults, then `overrides`. A field that changes the tokens and is not built here (typical_p,
        bad_words_ids, num_beams > 1, ...) is refused by name."""
        config = {}
        if isinstance(source, dict):
            config = dict(source)
        elif source is not None:
            file = os.path.join(source, "generation_config.json") if os.path.isdir(source) else source
            if os.path.isfile(file):
                with open(file, encoding="utf-8") as f:
                    config = json.load(f)
        for name, no_op in _NOT_BUILT.items():
            value = config.get(name, no_op)
            if value != no_op and value not in (None, [], {}):
                raise ValueError(f"generation_config: {name} = {value!r} is not built in ctransformer.sampling "
                                 f"(only {', '.join(cls.FIELDS)} are)")
        known = {k: v for k, v in config.items() if k in cls.FIELDS}
        return cls(**{**known, **overrides})

    def update(self, **options):
        """Set options by transformers' names or CTranslate2's aliases; None leaves one as it is."""
        for name, value in options.items():
            field = ALIASES.get(name, name)
            if field not in self.FIELDS:
                raise TypeError(f"generate: unexpected option {name!r} (options: {', '.join(self.FIELDS)}; "
                                f"CTranslate2's {', '.join(ALIASES)})")
            if value is not None:   # None is "unset", as in transformers: top_k=None stays 50
                setattr(self, field, value)
        self._check()
        return self

    def _check(self):
        if not isinstance(self.do_sample, (bool, np.bool_)):
            raise TypeError(f"generate: do_sample must be a bool, got {self.do_sample!r}")
        if self.do_sample:
            if not (isinstance(self.temperature, (int, float)) and np.isfinite(self.temperature)
                    and self.temperature > 0):
                raise ValueError(f"generate: temperature must be a positive finite number, got {self.temperature!r}")
            if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer))
                                           or self.top_k < 0):
                raise ValueError(f"generate: top_k must be an int >= 0 (0: no top-k), got {self.top_k!r}")
            if self.top_p is not None and not (isinstance(self.top_p, (int, float)) and 0.0 <= self.top_p <= 1.0):
                raise ValueError(f"generate: top_p must be a number in [0, 1], got {self.top_p!r}")
            if self.min_p is not None and not (isinstance(self.min_p, (int, float)) and 0.0 <= self.min_p <= 1.0):
                raise ValueError(f"generate: min_p must be a number in [0, 1] or None, got {self.min_p!r}")
        if not (isinstance(self.repetition_penalty, (int, float)) and self.repetition_penalty > 0):
            raise ValueError(f"generate: repetition_penalty must be a positive number, got {self.repetition_penalty!r}")
        if isinstance(self.no_repeat_ngram_size, bool) or not isinstance(self.no_repeat_ngram_size, (int, np.integer)) \
                or self.no_repeat_ngram_size < 0:
            raise ValueError(f"generate: no_repeat_ngram_size must be an int >= 0, got {self.no_repeat_ngram_size!r}")

    def pad_id(self):
        """What a finished row takes: pad_token_id, else its first eos_token_id (as transformers pads), else 0."""
        ends = self.end_ids()
        return self.pad_token_id if self.pad_token_id is not None else (ends[0] if ends else 0)

    def end_ids(self):
        ids = self.eos_token_id
        if ids is None:
            return []
        return [int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])]

    def __repr__(self):
        return "GenerationOptions(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"


def process_scores(input_ids, scores, options):
    """transformers' processors on the next-token scores (b, V) of rows whose ids so far are input_ids (b, t), in
    its order: repetition penalty, no-repeat n-grams, and when sampling temperature, top-k, top-p, min-p. Returns
    new float32 scores, -inf where a processor removed a token."""
    scores = np.array(scores, dtype=np.float32)   # a copy: the caller's logits stay as they were
    ids = np.asarray(input_ids, dtype=np.int64)
    b, vocab = scores.shape
    if options.repetition_penalty != 1.0 and ids.shape[1]:
        penalty = np.float32(options.repetition_penalty)
        for r in range(b):
            seen = np.unique(ids[r][ids[r] < vocab])
            s = scores[r, seen]
            scores[r, seen] = np.where(s < 0, s * penalty, s / penalty)
    n = options.no_repeat_ngram_size
    if n and ids.shape[1] >= n:
        for r in range(b):
            row = ids[r]
            prefix = row[len(row) + 1 - n:]
            windows = np.lib.stride_tricks.sliding_window_view(row, n)
            banned = windows[(windows[:, :-1] == prefix).all(axis=1), -1]
            scores[r, banned[banned < vocab]] = -np.inf
    if not options.do_sample:
        return scores
    if options.temperature != 1.0:
        scores = (scores / np.float32(options.temperature)).astype(np.float32)
    if options.top_k:
        k = min(int(options.top_k), vocab)
        kth = np.partition(scores, vocab - k, axis=-1)[:, vocab - k][:, None]
        scores[scores < kth] = -np.inf
    if options.top_p is not None and options.top_p < 1.0:
        # transformers: sort ascending; drop the tokens whose cumulative probability (from the least likely up)
        # stays <= 1 - top_p; the most likely token always stays.
        order = np.argsort(scores, axis=-1, kind="stable")
        cumulative = np.cumsum(probabilities(np.take_along_axis(scores, order, axis=-1)), axis=-1, dtype=np.float32)
        drop_sorted = cumulative <= np.float32(1 - options.top_p)
        drop_sorted[:, -1] = False
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        scores[drop] = -np.inf
    if options.min_p is not None:
        p = probabilities(scores)
        drop = p < np.float32(options.min_p) * p.max(axis=-1, keepdims=True)
        drop[np.arange(b), p.argmax(axis=-1)] = False
        scores[drop] = -np.inf
    return scores


def probabilities(scores):
    """softmax over the last axis in float32, 0 where a score is -inf."""
    scores = np.asarray(scores, dtype=np.float32)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)


def choose(probs, uniforms):
    """The id each row's uniform number u in [0, 1) picks from its probabilities (b, V): the first id whose
    cumulative probability exceeds u times the row's total (inverse-CDF sampling; a probability of 0 is never
    picked)."""
    probs = np.asarray(probs, dtype=np.float64)
    cumulative = np.cumsum(probs, axis=-1)
    target = np.asarray(uniforms, dtype=np.float64) * cumulative[:, -1]
    ids = (cumulative > target[:, None]).argmax(axis=-1)
    return ids.astype(np.int64)


def _prompt(model, input_ids, max_new_tokens):
    ids = np.asarray(input_ids)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[1] == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"generate: input_ids must be a (batch, length >= 1) integer array, got {ids.dtype} of "
                         f"shape {np.shape(input_ids)}")
    if ids.min() < 0 or ids.max() >= model.vocab_size:
        raise ValueError(f"generate: input_ids must be token ids in [0, {model.vocab_size})")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if ids.shape[1] + max_new_tokens > model.max_seq_len:
        raise ValueError(f"generate: the prompt's {ids.shape[1]} tokens and max_new_tokens = {max_new_tokens} exceed "
                         f"the model's context of max_seq_len = {model.max_seq_len} positions")
    return ids.astype(np.int64)


def _stable_text(text):
    """The part of a continuation that later tokens cannot change: up to its last whitespace. The last word may
    still grow, and a UTF-8 character whose bytes have not all come (decoded as U+FFFD for now) can only be in it:
    a whitespace byte ends any such sequence for good."""
    cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"))
    return text[:cut] if cut > 0 else ""


def generate_tokens(model, input_ids, max_new_tokens=None, *, tokenizer=None, seed=None, generation_config=None,
                    **options):
    """Yield a StepResult for each row's each new token while the GPT `model` generates after input_ids (b, t), as
    transformers' generate would with the same options (GenerationOptions: greedy by default; do_sample=True,
    temperature, top_k, top_p, min_p, repetition_penalty, no_repeat_ngram_size, eos_token_id; CTranslate2's
    sampling_* names). max_new_tokens: new tokens a row (default: the options', else max_length - t). seed: the
    uniform numbers' generator for this call (sampling only; None: fresh entropy). tokenizer: anything with
    decode(ids), for the StepResults' text. generation_config: a model directory, its generation_config.json or a
    dict, read before the options. A row ends at an eos_token_id; the loop ends when every row has."""
    from ._core.decode import GPTCache
    from .grad_mode import no_grad

    opts = GenerationOptions.from_pretrained(generation_config, **options)
    ids = np.asarray(input_ids)
    length = ids.shape[-1] if ids.ndim else 0
    n = max_new_tokens if max_new_tokens is not None else (opts.max_new_tokens or max(1, opts.max_length - length))
    ids = _prompt(model, input_ids, n)
    rng = np.random.default_rng(seed)
    ends = opts.end_ids()
    b = ids.shape[0]
    cache = GPTCache(model)
    alive = np.ones(b, dtype=bool)
    pad = opts.pad_id()
    new = [[] for _ in range(b)]
    sent = [""] * b
    with no_grad():
        logits = cache.step(ids).numpy()
        for step in range(n):
            fed = alive.copy()   # the rows that take this step's token; the others take the pad id
            scores = process_scores(ids, logits, opts)
            if opts.do_sample:
                probs = probabilities(scores)
                chosen = choose(probs, rng.random(b))
            else:
                chosen = scores.argmax(axis=-1).astype(np.int64)
            shifted = scores - scores.max(axis=-1, keepdims=True)
            log_probs = shifted[np.arange(b), chosen] - np.log(np.exp(shifted).sum(axis=-1))
            last_step = step == n - 1
            for r in np.flatnonzero(alive):
                token = int(chosen[r])
                new[r].append(token)
                is_last = last_step or token in ends
                text = None
                if tokenizer is not None:
                    full = tokenizer.decode(new[r])
                    stable = full if is_last else _stable_text(full)
                    text = stable[len(sent[r]):] if stable.startswith(sent[r]) else ""
                    sent[r] = stable if stable.startswith(sent[r]) else sent[r]
                yield StepResult(step, int(r), token, text, float(log_probs[r]), bool(is_last))
                if is_last:
                    alive[r] = False
            if not alive.any() or last_step:
                return
            # Finished rows keep being fed (the pad id, as transformers pads them) so the batch stays one product.
            feed = np.where(fed, chosen, pad)
            ids = np.concatenate([ids, feed[:, None]], axis=1)
            logits = cache.step(feed[:, None]).numpy()


def generate(model, input_ids, max_new_tokens=None, *, seed=None, generation_config=None, **options):
    """The ids (b, t + new) of generate_tokens' run: the prompt, then each row's tokens, and after a row's end its
    pad id (pad_token_id, else its first eos_token_id) up to the longest row, as transformers returns them."""
    ids = np.asarray(input_ids)
    ids = ids[None] if ids.ndim == 1 else ids
    rows = [[] for _ in range(ids.shape[0])]
    pad = GenerationOptions.from_pretrained(generation_config, **options).pad_id()
    for result in generate_tokens(model, ids, max_new_tokens, seed=seed, generation_config=generation_config,
                                  **options):
        rows[result.batch_id].append(result.token_id)
    width = max(len(r) for r in rows)
    out = np.full((ids.shape[0], ids.shape[1] + width), pad, dtype=np.int64)
    out[:, :ids.shape[1]] = ids
    for r, row in enumerate(rows):
        out[r, ids.shape[1]:ids.shape[1] + len(row)] = row
    return out
