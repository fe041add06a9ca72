"""Hugging Face's beam search (``transformers`` 5's ``generate(num_beams=k)``) on ctransformer's decoder.

``decode.beam_search`` is GNMT's search (length penalty ((5 + |y|) / 6) ** alpha, its own stopping rule), in
C++. A pretrained Marian model was tuned with Hugging Face's, which differs in each rule; this module follows
that one step for step, in NumPy over ``decode.StepDecoder`` (the model's work stays in C++):
- every source keeps num_beams running hypotheses (the first alone at the start); each step adds the
  log-softmax of the next token, with the banned ids at -inf and, with force_end, every id but eos at -inf and
  eos at 0 on the last step (bad_words_ids, forced_eos_token_id), and takes the 2 * num_beams best
  continuations over all beams and words;
- a continuation that ends (eos, or the length limit) and is among the first num_beams is scored
  log P / generated_length ** length_penalty and joins the finished pool, which keeps the num_beams best;
  the best num_beams continuations that do not end run on;
- early_stopping False (the default): a source is done once its pool is full and the best running
  hypothesis, scored at its current length, cannot beat the pool's worst; True: once the pool is full;
  "never": as False, but a positive length_penalty scores the running one at the maximum length.
Arithmetic is float32 where Hugging Face's is (log-probabilities, running sums, the length division), so the
same logits give the same choices; the logits themselves differ by float32 rounding, which can only decide a
step where two candidates tie (tests/decode/test_marian_generate.py).
"""
import numbers

import numpy as np

from . import _arguments
from ._core.decode import StepDecoder

__all__ = ["hf_beam_search"]

_NEG = np.float32(-1.0e9)


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32)


def _top(values, k):
    """Indices of the k largest of each row, largest first (ties: the lower index). A partition first: a row
    holds num_beams * vocabulary candidates, of which 2 * num_beams are wanted."""
    if k < values.shape[-1]:
        part = np.argpartition(-values, k - 1, axis=-1)[..., :k]
        part.sort(axis=-1)                       # index order, so the stable sort below breaks ties by index
        order = np.argsort(-np.take_along_axis(values, part, axis=-1), axis=-1, kind="stable")
        return np.take_along_axis(part, order, axis=-1)
    return np.argsort(-values, axis=-1, kind="stable")[..., :k]


def hf_beam_search(model, src, src_mask, max_len, start_symbol, end_symbol, num_beams=4, length_penalty=1.0,
                   early_stopping=False, banned=(), force_end=False, n_best=None):
    """Beam search as transformers' generate(num_beams=...) does it; returns (ids (b, max_len), scores (b,)), or
    with n_best=k (<= num_beams) the k best: (ids (b, k, max_len), scores (b, k)), best first.

    max_len counts start_symbol (generate's max_length); ids are padded with the model's trg_pad_idx after the
    end symbol. banned and force_end as decode.greedy_decode's. A score is the hypothesis's summed
    log-probabilities over its generated length (end included) ** length_penalty."""
    _arguments.transformer(model, "hf_beam_search: model")
    max_len = _arguments.integer(max_len, "hf_beam_search: max_len")
    start_symbol = _arguments.integer(start_symbol, "hf_beam_search: start_symbol")
    end_symbol = _arguments.integer(end_symbol, "hf_beam_search: end_symbol")
    if isinstance(length_penalty, (bool, np.bool_)) or not isinstance(length_penalty, numbers.Real):
        raise TypeError(f"hf_beam_search: length_penalty must be a number, got {type(length_penalty).__name__}")
    _arguments.flag(force_end, "hf_beam_search: force_end")
    if isinstance(num_beams, bool) or not isinstance(num_beams, (int, np.integer)) or num_beams < 1:
        raise ValueError(f"hf_beam_search: num_beams must be an int >= 1, got {num_beams!r}")
    if early_stopping not in (False, True, "never"):
        raise ValueError(f"hf_beam_search: early_stopping must be False, True or 'never', got {early_stopping!r}")
    if n_best is not None and not 1 <= n_best <= num_beams:
        raise ValueError(f"hf_beam_search: n_best must be between 1 and num_beams = {num_beams}, got {n_best!r}")
    if max_len < 2:
        raise ValueError(f"hf_beam_search: max_len must be at least 2 (the start symbol and one token), got {max_len}")
    src = np.asarray(src)
    k, pad = int(num_beams), model.config.trg_pad_idx
    banned = [int(i) for i in banned]
    decoder = StepDecoder(model, src, src_mask)
    b = decoder.rows
    decoder.select([s for s in range(b) for _ in range(k)])
    running = np.full((b, k, max_len), pad, dtype=np.int64)
    running[:, :, 0] = start_symbol
    running_scores = np.zeros((b, k), dtype=np.float32)
    running_scores[:, 1:] = _NEG
    finished_ids, finished_scores = running.copy(), np.full((b, k), _NEG, dtype=np.float32)
    finished = np.zeros((b, k), dtype=bool)
    improvable = np.ones(b, dtype=bool)
    top_mask = np.arange(2 * k) < k
    cur_len = 1
    while True:
        logits = decoder.step(running[:, :, cur_len - 1].reshape(-1)).numpy()
        log_probs = _log_softmax(logits)
        if banned:
            log_probs[:, banned] = -np.inf
        if force_end and cur_len == max_len - 1:
            log_probs[:] = -np.inf
            log_probs[:, end_symbol] = 0.0
        V = log_probs.shape[-1]
        total = (log_probs.reshape(b, k, V) + running_scores[:, :, None]).reshape(b, k * V)
        best = _top(total, 2 * k)                                     # (b, 2k) into beam * V + word
        top_scores = np.take_along_axis(total, best, axis=1)
        parent, word = best // V, best % V
        candidates = np.take_along_axis(running, parent[:, :, None], axis=1)
        candidates[:, :, cur_len] = word
        ends = (word == end_symbol) | (cur_len + 1 >= max_len)

        run_scores = (top_scores + ends.astype(np.float32) * _NEG).astype(np.float32)
        keep = _top(run_scores, k)
        running = np.take_along_axis(candidates, keep[:, :, None], axis=1)
        running_scores = np.take_along_axis(run_scores, keep, axis=1)
        parents = np.take_along_axis(parent, keep, axis=1)

        new_scores = (top_scores / np.float32(float(cur_len) ** length_penalty)).astype(np.float32)
        if early_stopping is True:
            new_scores += np.where(finished.all(axis=1, keepdims=True), _NEG, np.float32(0))
        new_scores += np.where(improvable[:, None], np.float32(0), _NEG)
        just_finished = ends & top_mask[None, :]
        new_scores += np.where(just_finished, np.float32(0), _NEG)
        merged_scores = np.concatenate([finished_scores, new_scores], axis=1)
        order = _top(merged_scores, k)
        finished_ids = np.take_along_axis(np.concatenate([finished_ids, candidates], axis=1), order[:, :, None], axis=1)
        finished_scores = np.take_along_axis(merged_scores, order, axis=1)
        finished = np.take_along_axis(np.concatenate([finished, just_finished], axis=1), order, axis=1)

        decoder.select([s * k + int(p) for s in range(b) for p in parents[s]])
        cur_len += 1
        hypothetical = max_len - 1 if early_stopping == "never" and length_penalty > 0 else cur_len - 1
        best_running = running_scores[:, 0] / np.float32(float(hypothetical) ** length_penalty)
        worst = np.where(finished, finished_scores.min(axis=1, keepdims=True), _NEG)
        improvable &= (best_running[:, None] > worst).any(axis=1)
        open_beams = not (finished.all() and early_stopping is True)
        if not (improvable.any() and open_beams and not ends.all()):
            break

    # ids after the end symbol are the pad (a finished hypothesis holds nothing after it already)
    if n_best is None:
        return finished_ids[:, 0], finished_scores[:, 0].astype(np.float64)
    return finished_ids[:, :n_best], finished_scores[:, :n_best].astype(np.float64)
