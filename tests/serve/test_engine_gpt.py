"""The continuous-batching engine with a GPT (decode::GenerationBatch): prompts continued under mixed arrivals equal
each prompt continued alone by decode.generate, the context cropped to max_seq_len as it does (max_seq_len 16,
prompts of 3 to 20 ids, up to 30 new ids: windows that slide and caches rebuilt).

- int8, sampled (temperature 0.8, top_k 5) and greedy: bit for bit, every request (the products are exact; a
  request's generator is seeded as manual_seed(seed) seeds decode.generate's);
- float32, greedy (temperature 0): ids equal the torch reference's arg-max loop, whose every step's top-2 logit gap
  is checked to exceed 1e-3 (as tests/decode/test_gpt_generate_cache.py: the knife edge kept away).
"""
import time

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer._core.serve import SequenceOptions
from reference.gpt_pairs import SMALL, make_pair, prompts
from reference.gpt_reference import greedy
from waiting import HANG

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load


def run(model, requests, max_rows=4, end=None):
    """requests: (prompt, new ids, temperature, top_k, seed); submitted in three waves into running batches.
    Returns each request's new ids."""
    engine = ct._core.serve.Engine(max_queue=64, max_rows=max_rows, max_batch_tokens=256)
    engine.add_model("gpt", model, end_symbol=end)
    index, out = {}, {}   # engine request id -> position in requests; position -> new ids
    deadline = time.monotonic() + HANG

    def collect(events):
        for event in events:
            assert event.kind in ("token", "finished"), event.message
            if event.kind == "finished":
                out[index[event.request]] = event.ids

    for wave in (range(0, len(requests), 3), range(1, len(requests), 3), range(2, len(requests), 3)):
        for i in wave:
            prompt, n, temperature, top_k, seed = requests[i]
            request = engine.submit("gpt", [int(t) for t in prompt], SequenceOptions(
                max_len=len(prompt) + n, temperature=temperature, top_k=top_k, seed=seed))
            index[request] = i
        steps = engine.stats()["steps_total"]
        while engine.stats()["steps_total"] < steps + 3 and len(out) < len(index) and time.monotonic() < deadline:
            collect(engine.poll(0.01))
    while len(out) < len(requests) and time.monotonic() < deadline:
        collect(engine.poll(0.05))
    engine.stop()
    assert len(out) == len(requests), f"{len(out)} of {len(requests)} requests ended in {HANG} s"
    return [out[i] for i in range(len(requests))]


def test_int8_generation_is_bit_for_bit_generate_alone():
    _, model = make_pair(SMALL, sharp=True)
    model = ct.quantize_dynamic(model, inplace=True)
    rng = np.random.default_rng(0)
    requests = []
    for i in range(9):
        prompt = tuple(prompts(SMALL, 1, int(rng.integers(3, 21)), seed=i)[0])
        sampled = i % 3 != 0
        requests.append((prompt, int(rng.integers(5, 31)), 0.8 if sampled else 0.0, 5 if sampled else 0, 100 + i))
    outputs = run(model, requests)
    for (prompt, n, temperature, top_k, seed), ids in zip(requests, outputs):
        ct.manual_seed(seed)
        if temperature:
            expected = ct.decode.generate(model, np.array([prompt]), n, temperature, top_k)
        else:
            expected = ct.decode.generate(model, np.array([prompt]), n, top_k=1)
        np.testing.assert_array_equal(ids, expected[0, len(prompt):], err_msg=f"prompt {prompt}")


@pytest.mark.parametrize("options", [
    dict(tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=True, activation_function="silu",
         layer_norm_epsilon=1e-3),
    dict(scale_attn_weights=False, activation_function="gelu"),
    dict(activation_function="relu", scale_attn_by_inverse_layer_idx=True),
], ids=["untied-by-layer-silu-eps", "unscaled-gelu", "relu-by-layer"])
def test_a_gpt2_variant_generates_in_the_engine_as_alone(options):
    """GPT-2's variants (an untied head, scores scaled by layer or not at all, the other activations, another eps)
    reach the engine's one-position step as they reach decode.generate (which test_gpt2_pretrained.py proves against
    transformers): int8, greedy and sampled, bit for bit, as test_int8_generation_is_bit_for_bit_generate_alone."""
    ct.manual_seed(5)
    model = ct.nn.GPT(vocab_size=SMALL["vocab_size"], max_seq_len=SMALL["max_seq_len"], n_layers=2, d_model=32, n_head=4,
                      d_inner=64, **options)
    model.eval()
    model = ct.quantize_dynamic(model, inplace=True)
    rng = np.random.default_rng(1)
    requests = []
    for i in range(6):
        prompt = tuple(prompts(SMALL, 1, int(rng.integers(3, 21)), seed=40 + i)[0])
        sampled = i % 2 == 1
        requests.append((prompt, int(rng.integers(5, 31)), 0.9 if sampled else 0.0, 7 if sampled else 0, 200 + i))
    for (prompt, n, temperature, top_k, seed), ids in zip(requests, run(model, requests)):
        ct.manual_seed(seed)
        expected = ct.decode.generate(model, np.array([prompt]), n, temperature or 1.0, top_k if temperature else 1)
        np.testing.assert_array_equal(ids, expected[0, len(prompt):], err_msg=f"prompt {prompt}")


def test_float32_greedy_generation_equals_the_reference():
    tm, model = make_pair(SMALL, sharp=True)
    requests = []
    for i, (length, n) in enumerate([(5, 8), (5, 25), (20, 10), (3, 12), (9, 30), (14, 4)]):
        prompt = tuple(prompts(SMALL, 1, length, seed=20 + i)[0])
        requests.append((prompt, n, 0.0, 0, 0))
    outputs = run(model, requests, max_rows=3)
    for (prompt, n, *_), ids in zip(requests, outputs):
        expected, margins = greedy(tm, torch.tensor([prompt]), n)
        assert min(margins) > 1e-3, "near-tie in the reference: the comparison would be fragile"
        np.testing.assert_array_equal(ids, expected[0, len(prompt):].numpy())


def test_generation_ends_at_its_end_symbol_and_refuses_bad_prompts():
    _, model = make_pair(SMALL, sharp=True)
    prompt = [int(i) for i in prompts(SMALL, 1, 5)[0]]
    alone = ct.decode.generate(model, np.array([prompt]), 12, top_k=1)[0, 5:]
    end = int(alone[4])   # the fifth new id ends it
    (ids,) = run(model, [(tuple(prompt), 12, 0.0, 0, 0)], end=end)
    first = int(np.flatnonzero(alone == end)[0])
    np.testing.assert_array_equal(ids, alone[:first])
    engine = ct._core.serve.Engine()
    engine.add_model("gpt", model)
    with pytest.raises(IndexError, match="prompt holds token id 50"):
        engine.submit("gpt", [1, 50], SequenceOptions(max_len=5))
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.submit("gpt", [], SequenceOptions(max_len=5))
    with pytest.raises(ValueError, match="room for one new id"):
        engine.submit("gpt", [1, 2], SequenceOptions(max_len=2))
    with pytest.raises(ValueError, match="temperature"):
        engine.submit("gpt", [1, 2], SequenceOptions(max_len=5, temperature=-1.0))
    with pytest.raises(ValueError, match="beam_size 1"):
        engine.submit("gpt", [1, 2], SequenceOptions(max_len=5, beam_size=2))
    with pytest.raises(TypeError, match="ct.nn.Transformer or a ct.nn.GPT"):
        engine.add_model("x", "not a model")
    engine.stop()


def test_async_completion_of_a_shakespeare_checkpoint(tmp_path):
    """A shakespeare-task checkpoint served through AsyncEngine: load_gpt_checkpoint gives the GPT and its
    characters; complete() equals decode.generate after manual_seed(seed) (int8: bit for bit), and the streamed
    pieces join to the same text."""
    import asyncio

    from ctransformer.checkpoint import save_checkpoint
    from ctransformer.serve.engine import AsyncEngine
    from ctransformer.tasks.shakespeare import Shakespeare, load_gpt_checkpoint

    chars = "\n !',.:;?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    cfg = {**Shakespeare.defaults, "n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16}
    ct.manual_seed(1)
    model = ct.nn.GPT(len(chars) + 1, cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["n_head"],
                      4 * cfg["n_embd"], dropout=0.0)
    path = save_checkpoint(str(tmp_path / "gpt.safetensors"), model, step=0, config=cfg,
                           extra={"task": "shakespeare", "chars": chars})
    loaded, tokenizer = load_gpt_checkpoint(path)
    assert tokenizer.decode(tokenizer.encode("To be, or not")) == "To be, or not"
    with pytest.raises(ValueError, match="does not know"):
        tokenizer.encode("naïve")

    async def serve():
        engine = AsyncEngine()
        engine.add_generator("bard", loaded, tokenizer, "int8")
        try:
            done = await engine.complete("ROMEO:", max_tokens=25, temperature=0.9, top_k=8, seed=11)
            pieces = [p async for p in engine.stream_completion("ROMEO:", max_tokens=25, temperature=0.9, top_k=8,
                                                                seed=11)]
            with pytest.raises(ValueError, match="max_tokens"):
                await engine.complete("x", max_tokens=0)
            return done, pieces
        finally:
            engine.close()

    done, pieces = asyncio.run(serve())
    ct.manual_seed(11)
    int8 = ct.quantize_dynamic(loaded)   # a copy: the generator's state is left as it was
    expected = ct.decode.generate(int8, np.array([tokenizer.encode("ROMEO:")]), 25, 0.9, 8)[0, 6:]
    assert done.text == tokenizer.decode(expected)
    assert done.finish_reason == "length" and done.completion_tokens == 25 and done.prompt_tokens == 6
    assert "".join(p.text for p in pieces) == done.text and pieces[-1] == ("", "length", None)


def run_events(model, prompt, options):
    """One request's token events, in order (logprobs asked for: they come with them)."""
    engine = ct._core.serve.Engine(max_queue=4, max_rows=2, max_batch_tokens=64)
    engine.add_model("gpt", model)
    request = engine.submit("gpt", [int(t) for t in prompt], options, tokens=False)
    tokens, ended, deadline = [], False, time.monotonic() + HANG
    while not ended and time.monotonic() < deadline:
        for event in engine.poll(0.05):
            assert event.request == request and event.kind in ("token", "finished"), event.message
            if event.kind == "token":
                tokens.append(event)
            ended = ended or event.kind == "finished"
    engine.stop()
    assert ended, f"the request did not end in {HANG} s"
    return tokens


@torch.no_grad()
def adjusted_greedy(tm, prompt, n, bias, presence, frequency):
    """The torch reference's arg-max loop over OpenAI's adjusted logits, logit + bias - presence * (c > 0) -
    frequency * c (c: the times the id was chosen so far), with each step's log_softmax of the raw logits and the
    gap between the two best adjusted logits."""
    idx, made, steps = torch.tensor([prompt]), [], []
    for _ in range(n):
        logits = tm(idx[:, -tm.max_seq_len:])[0][0, -1]
        adjusted = logits.clone()
        for token, b in bias.items():
            adjusted[token] += b
        for token in set(made):
            adjusted[token] -= presence + made.count(token) * frequency
        top2 = torch.topk(adjusted, 2).values
        word = int(adjusted.argmax())
        steps.append((word, torch.log_softmax(logits, -1), float(top2[0] - top2[1])))
        made.append(word)
        idx = torch.cat((idx, torch.tensor([[word]])), dim=1)
    return steps


@pytest.mark.parametrize("bias,presence,frequency", [({}, 0.0, 0.0), ({3: 2.5, 7: -100.0}, 0.0, 0.0),
                                                     ({}, 0.8, 0.0), ({}, 0.0, 0.6), ({11: 1.5}, -0.4, 1.1)])
def test_logit_bias_penalties_and_logprobs_equal_the_reference(bias, presence, frequency):
    """Greedy float32 generation with logit_bias and the presence and frequency penalties (OpenAI's definitions)
    chooses the ids of the torch reference's loop over the adjusted logits (every step's best adjusted logit at
    least 1e-3 above the second: off the knife edge), over 30 new ids (a window of 16 that slides). Each token's
    logprob is the raw logits' log_softmax; the 5 alternatives are the likeliest ids with theirs. Tolerance 2e-5:
    the two sides' logits differ by float32 rounding of sums over 32 to 64 terms (a few 1e-6 at these sizes), and
    the log-sum-exp adds a rounding of its own."""
    tm, model = make_pair(SMALL, sharp=True)
    prompt = [int(t) for t in prompts(SMALL, 1, 6, seed=40)[0]]
    options = SequenceOptions(max_len=len(prompt) + 30, logit_bias=bias, presence_penalty=presence,
                              frequency_penalty=frequency, logprobs=True, top_logprobs=5)
    events = run_events(model, prompt, options)
    steps = adjusted_greedy(tm, prompt, 30, bias, presence, frequency)
    assert min(gap for *_, gap in steps) > 1e-3, "near-tie in the reference: the comparison would be fragile"
    assert [e.token for e in events] == [word for word, *_ in steps]
    if bias.get(7) == -100.0:
        assert 7 not in [e.token for e in events]
    for event, (word, logprobs, _) in zip(events, steps):
        assert event.logprob == pytest.approx(float(logprobs[word]), abs=2e-5)
        top = event.top_logprobs
        assert len(top) == 5 and [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        for token, lp in top:
            assert lp == pytest.approx(float(logprobs[token]), abs=2e-5)
        # nothing left out that is clearly likelier than the last one listed
        assert float(torch.topk(logprobs, 6).values[5]) <= top[-1][1] + 1e-4


def test_the_penalties_change_what_greedy_generation_repeats():
    """The check that the penalties act at all (the parity test above holds for any adjustment both sides skip): a
    frequency penalty of 2 makes greedy decoding repeat fewer of its ids than none does."""
    _, model = make_pair(SMALL, sharp=True)
    prompt = [int(t) for t in prompts(SMALL, 1, 6, seed=40)[0]]
    plain = [e.token for e in run_events(model, prompt, SequenceOptions(max_len=36, logprobs=True))]
    penalised = [e.token for e in run_events(model, prompt, SequenceOptions(max_len=36, logprobs=True,
                                                                            frequency_penalty=2.0))]
    assert len(set(penalised)) > len(set(plain))


def test_generation_options_are_checked_by_name():
    tm, model = make_pair(SMALL, sharp=True)
    engine = ct._core.serve.Engine()
    engine.add_model("gpt", model)
    for options, match in [(dict(logit_bias={50: 1.0}), "logit_bias names token id 50"),
                           (dict(logit_bias={3: 101.0}), "logit_bias of token id 3"),
                           (dict(presence_penalty=2.5), "presence_penalty must be in"),
                           (dict(frequency_penalty=float("nan")), "frequency_penalty must be in"),
                           (dict(logprobs=True, top_logprobs=21), "top_logprobs must be at most 20")]:
        with pytest.raises(ValueError, match=match):
            engine.submit("gpt", [1, 2], SequenceOptions(max_len=5, **options))
    with pytest.raises(TypeError, match="logit_bias must be a dict"):
        SequenceOptions(max_len=5, logit_bias=[(1, 2.0)])
    with pytest.raises(ValueError, match="top_k"):
        SequenceOptions(max_len=5, top_k=-1)
    engine.stop()


def test_a_cancellation_counts_unless_it_is_said_not_to():
    """Engine.cancel(request) counts in cancelled_total; cancel(request, counted=False) (a stop string reached) does
    not. Each request asks for a million tokens, so it is decoding when cancelled (its first token seen) and leaves
    only by the cancellation (its Cancelled event awaited)."""
    _, model = make_pair(SMALL, sharp=True)
    engine = ct._core.serve.Engine(max_queue=4, max_rows=2, max_batch_tokens=64)
    engine.add_model("gpt", model)
    counts = []
    for counted in (False, True):
        request = engine.submit("gpt", [1, 2, 3], SequenceOptions(max_len=1_000_000), tokens=True)
        deadline, state = time.monotonic() + HANG, "submitted"
        while state != "cancelled" and time.monotonic() < deadline:
            for event in engine.poll(0.05):
                assert event.request == request and event.kind in ("token", "cancelled"), event.message
                if event.kind == "token" and state == "submitted":
                    assert engine.cancel(request, counted=counted)
                    state = "cancelling"
                elif event.kind == "cancelled":
                    state = "cancelled"
        assert state == "cancelled", f"no cancellation in {HANG} s"
        counts.append(engine.stats()["cancelled_total"])
    engine.stop()
    assert counts == [0, 1]
