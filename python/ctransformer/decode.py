"""Decoding: greedy (as the Annotated Transformer) and beam search for the encoder-decoder Transformer,
and GPT generation.

The work runs in C++ (``ctransformer._core.decode``) without recording a graph and with the GIL
released. By default it uses key/value caches: each decoder layer keeps the keys and values of the
target positions decoded so far and of the encoder output (projected once per source), so a new
token costs one position's work instead of the whole prefix's. ``use_cache=False`` runs the Annotated
Transformer's loop instead (the whole prefix decoded at every step); both give the same tokens, and logits equal up
to float32 rounding (tests/decode/test_decode.py). The model is used as it is: call ``model.eval()`` first,
or dropout stays active.
"""
import contextlib as _contextlib
import numbers as _numbers

import numpy as np

from ._core import decode as _decode
from ._core.decode import GPTCache, PackedWeights, StepDecoder
from ._core.nn import Module as _Module
from ._core.nn import Transformer as _Transformer
from ._core.nn.gpt import GPT as _GPT
from .amp import autocast
from .hf_beam_search import hf_beam_search
from . import precision as _precision

PRECISIONS = _precision.DECODING
"""What a decoding call's precision may be: the model's own ("default"), or float32, bfloat16 or int8 for this
call (ctransformer.precision; "fp32" and "bf16" are aliases)."""
COMPUTE_TYPES = PRECISIONS
"""The old name of PRECISIONS (CTranslate2's word for it)."""

__all__ = ["greedy_decode", "beam_search", "hf_beam_search", "search_batches", "runs_in_lanes", "generate", "length_penalty", "StepDecoder", "GPTCache", "PackedWeights",
           "DEFAULT_BEAM_SIZE", "DEFAULT_ALPHA", "PRECISIONS", "COMPUTE_TYPES", "using_precision", "using_compute_type"]


def _check_model(model, caller, expected, kind=None):
    if not isinstance(model, kind or _Module):
        raise TypeError(f"{caller}: model must be a {expected}, got {type(model).__name__}")


def _check_number(caller, **values):
    for name, value in values.items():
        if not isinstance(value, _numbers.Real) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{caller}: {name} must be a number, got {type(value).__name__}")


def _check_flags(caller, **flags):
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{caller}: {name} must be True or False, got {type(value).__name__}")


def _ids(banned, caller):
    """banned as a list of ids: an iterable of ints (a lone int is one id)."""
    if isinstance(banned, (int, np.integer)) and not isinstance(banned, bool):
        return [int(banned)]
    try:
        return list(banned)
    except TypeError:
        raise TypeError(f"{caller}: banned must be a list of token ids, got {type(banned).__name__}") from None


@_contextlib.contextmanager
def using_precision(model, precision, caller="using_precision"):
    """The model computing in `precision` for one call: "default" (as the model is, under whatever ct.autocast
    region encloses the call), "float32", "bfloat16" (the products under ct.autocast) or "int8"
    (ctransformer.quantization; a float32 model is quantised for the call), as CTranslate2's compute_type.
    The model is left as it was."""
    _check_model(model, caller, "ctransformer model (a ct.nn.Module)")
    precision = _precision.canonical(precision, PRECISIONS, caller)
    was = model.quantization
    if precision == "int8" and was is None:
        model.quantize("int8")
    elif precision in ("float32", "bfloat16") and was is not None:
        model.dequantize()
    try:
        if precision == "default":  # an enclosing ct.autocast region stays in force
            yield
        else:
            with autocast(enabled=precision == "bfloat16"):
                yield
    finally:
        if was is None and model.quantization is not None:
            model.dequantize()
        elif was is not None and model.quantization is None:
            model.quantize(was)


def using_compute_type(model, compute_type, caller="using_compute_type"):
    """using_precision under CTranslate2's name for the setting (an alias)."""
    return using_precision(model, compute_type, caller)


def _using(model, precision, compute_type, caller):
    return using_precision(model, _precision.from_arguments(precision, compute_type, PRECISIONS, caller), caller)


def greedy_decode(model, src, src_mask, max_len, start_symbol, end_symbol=None, *, use_cache=True,
                  return_logits=False, precision=None, banned=(), force_end=False, compute_type=None):
    """(b, max_len) int64 ids, starting with start_symbol, for the (b, ls) source ids `src`.

    As the Annotated Transformer's greedy_decode: the encoder runs once; each step appends the arg-max (the first
    maximum) of the next-token logits; the target side is masked with the no-peek mask only.

    src_mask: (b or 1, 1, ls), True where a source position may be attended (``get_pad_mask(src,
    pad)``), or None for no mask. max_len counts start_symbol (max_len - 1 steps).
    end_symbol: when given, a row that produces it is done: its later positions hold the model's
    trg_pad_idx, and decoding stops once every row is done.
    use_cache: key/value-cached steps (default) or the Annotated Transformer's full-prefix loop.
    return_logits: also return the float32 logits of every step, (b, max_len - 1, n_trg_vocab), row
    r's step t predicting ids[r, t + 1] (NaN after the row ended).
    precision: "default" (the model as it is; None too), "float32", "bfloat16" or "int8" (ctransformer.precision);
    compute_type is its alias, CTranslate2's name.
    banned: ids never chosen (Hugging Face's bad_words_ids of single ids; a Marian model bans its pad id).
    force_end: a row that reaches its last position ends with end_symbol there (Hugging Face's
    forced_eos_token_id). The returned logits are the model's, before these rules.
    """
    _check_model(model, "greedy_decode", "ct.nn.Transformer", _Transformer)
    _check_flags("greedy_decode", use_cache=use_cache, return_logits=return_logits, force_end=force_end)
    with _using(model, precision, compute_type, "greedy_decode"):
        return _decode.greedy_decode(model, src, src_mask, max_len, start_symbol, end_symbol,
                                     use_cache=use_cache, return_logits=return_logits, banned=_ids(banned, "greedy_decode"),
                                     force_end=force_end)


DEFAULT_BEAM_SIZE = _decode.DEFAULT_BEAM_SIZE
"""beam_search's default beam size (4), the core's (decode/beam_search.hpp), stated there once."""
DEFAULT_ALPHA = _decode.DEFAULT_ALPHA
"""beam_search's default length penalty alpha (0.6), GNMT's."""


def beam_search(model, src, src_mask, max_len, start_symbol, end_symbol, beam_size=DEFAULT_BEAM_SIZE,
                alpha=DEFAULT_ALPHA, *,
                n_best=None, use_cache=True, precision=None, banned=(), force_end=False, compute_type=None):
    """Beam search with GNMT's length penalty; returns (ids (b, max_len) int64, scores (b,) float64).

    A hypothesis y after start_symbol, of |y| tokens (end_symbol included when it ended), scores
    ``log P(y | src) / ((5 + |y|) / 6) ** alpha`` (Wu et al. 2016), log P summing the log-softmax of
    its tokens. Each source (a row of src, (b, ls); b may be 1) is searched on its own: each step
    extends every live hypothesis by every token and keeps the beam_size of highest log P (ties: the
    earlier hypothesis, then the smaller id); those ending with end_symbol are finished, the rest stay
    live; at max_len positions the live ones are finished as they are. A source's search stops once no
    live hypothesis can still beat its n-th best finished score (log P only falls with length and the
    penalty only grows, alpha >= 0). beam_size=1 is greedy decoding stopped at end_symbol.

    ids are padded with the model's trg_pad_idx after the hypothesis. With n_best=k (<= beam_size),
    returns the k best: (ids (b, k, max_len), scores (b, k)), best first, -inf where fewer finished.
    src_mask, use_cache, precision (compute_type), banned and force_end as in greedy_decode (banned ids are dropped after
    the log-softmax, as Hugging Face's beam search does: the other words' log-probabilities are unchanged).
    """
    _check_model(model, "beam_search", "ct.nn.Transformer", _Transformer)
    _check_flags("beam_search", use_cache=use_cache, force_end=force_end)
    _check_number("beam_search", alpha=alpha)
    with _using(model, precision, compute_type, "beam_search"):
        return _decode.beam_search(model, src, src_mask, max_len, start_symbol, end_symbol, beam_size, alpha,
                                   n_best=n_best, use_cache=use_cache, banned=_ids(banned, "beam_search"),
                                   force_end=force_end)


def search_batches(model, batches, start_symbol, end_symbol, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA, *,
                   search="gnmt", early_stopping=False, banned=(), force_end=False, lanes=True):
    """Many batches' searches in one call: for each (src, src_mask, max_len) in `batches`, its (ids (b, max_len)
    int64, scores (b,) float64), as ``beam_search`` (search="gnmt", alpha GNMT's length penalty) or
    ``hf_beam_search`` (search="hf", alpha transformers' length_penalty, early_stopping its) gives them.

    With lanes (default), 2 batches or more and 2 threads or more, outside an autocast region, each thread takes
    the next batch and searches it whole with its operations inline, instead of every batch's products split
    over the threads (the serial work between the products leaves a thread waiting; docs/DESIGN.md, "Lanes").
    Each batch gives what it gives alone: the same products over the same rows (int8 bit for bit; float32 wherever
    the BLAS's split products sum as its whole ones). The float32 weights are packed once, for every thread.
    ``runs_in_lanes(len(batches))`` says whether a call would.
    """
    _check_model(model, "search_batches", "ct.nn.Transformer", _Transformer)
    _check_flags("search_batches", force_end=force_end, lanes=lanes)
    _check_number("search_batches", alpha=alpha)
    if not isinstance(batches, (list, tuple)):
        raise TypeError(f"search_batches: batches must be a list of (src, src_mask, max_len), got "
                        f"{type(batches).__name__}")
    if early_stopping not in (False, True, "never"):
        raise ValueError(f"search_batches: early_stopping must be False, True or 'never', got {early_stopping!r}")
    early_stopping = early_stopping if early_stopping == "never" else bool(early_stopping)
    return _decode.search_batches(model, [tuple(b) if isinstance(b, list) else b for b in batches], start_symbol,
                                  end_symbol, beam_size, float(alpha), search=search, early_stopping=early_stopping,
                                  banned=_ids(banned, "search_batches"), force_end=bool(force_end), lanes=bool(lanes))


def runs_in_lanes(batches, lanes=True):
    """Whether ``search_batches`` would search this many batches in lanes now (the threads, an autocast region
    and the count deciding)."""
    return _decode.runs_in_lanes(batches, lanes)


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, *, use_cache=True, precision=None,
             compute_type=None):
    """The GPT reference's generate for a GPT: (b, t + max_new_tokens) int64 ids (not squeezed).

    Each new id is drawn from softmax(logits[:, -1] / temperature) restricted to the top_k largest
    logits, from the generator seeded by ``ctransformer.manual_seed``; the context is cropped to its
    last max_seq_len ids. With use_cache (default) each layer's keys/values are kept, so a token costs
    one position's work while the context fits in max_seq_len. Once it is longer, every crop moves
    every kept token to a new (learned, absolute) position and the cached keys depend on the dropped
    tokens, so the cache is rebuilt from the cropped window at each step (the uncached cost); the ids
    are the same as use_cache=False (``GPT.generate(..., use_cache=False)``, the GPT reference's loop).
    precision (compute_type) as in greedy_decode.
    """
    _check_model(model, "generate", "ct.nn.GPT", _GPT)
    _check_flags("generate", use_cache=use_cache)
    _check_number("generate", temperature=temperature)
    with _using(model, precision, compute_type, "generate"):
        return _decode.generate(model, idx, max_new_tokens, temperature, top_k, use_cache=use_cache)


def length_penalty(length, alpha):
    """GNMT's length penalty ((5 + length) / 6) ** alpha."""
    return _decode.length_penalty(length, alpha)
