"""Hugging Face's beam search (``transformers`` 5's ``generate(num_beams=k)``) on ctransformer's decoder.

``decode.beam_search`` is GNMT's search (length penalty ((5 + |y|) / 6) ** alpha, its own stopping rule). A
pretrained Marian model was tuned with Hugging Face's, which differs in each rule; this one follows that step for
step, in C++ (``cpp/include/ctransformer/decode/hf_beam_search.hpp``: one source's step is shared with the server's
continuous batch, so a request served there searches by the same code):
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
same logits give the same choices up to float32 rounding, which can only decide a step where two candidates tie
(tests/decode/test_marian_generate.py).
"""
import numbers

import numpy as np

from . import _arguments
from ._core import decode as _decode

__all__ = ["hf_beam_search"]


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
    return _decode.hf_beam_search(model, src, src_mask, max_len, start_symbol, end_symbol, num_beams=int(num_beams),
                                  length_penalty=float(length_penalty),
                                  early_stopping=early_stopping if early_stopping == "never" else bool(early_stopping),
                                  n_best=n_best,
                                  banned=[int(i) for i in banned], force_end=force_end)
