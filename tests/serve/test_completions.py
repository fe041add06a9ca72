"""POST /v1/completions (OpenAI's legacy completions) for a GPT served by ctransformer-serve's app, in-process: the
text equals decode.generate's continuation of the prompt alone after manual_seed(seed) (an int8 model: bit for bit,
see test_engine_gpt.py), streamed or not; a list of prompts gives a choice each; refusals name the field."""
import asyncio
import json

import numpy as np
import pytest

pytest.importorskip("starlette", reason="the serve extra is not installed: pip install '.[serve]'")
import httpx  # noqa: E402

import ctransformer as ct  # noqa: E402
from ctransformer.data.shakespeare import CharTokenizer  # noqa: E402
from ctransformer.serve import AsyncEngine, create_app  # noqa: E402
from waiting import HANG, async_wait_until  # noqa: E402

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

CHARS = "\n !',.:;?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@pytest.fixture(scope="module")
def served():
    ct.manual_seed(5)
    tokenizer = CharTokenizer(CHARS)
    model = ct.quantize_dynamic(ct.nn.GPT(len(tokenizer), 24, 2, 32, 4, 64, dropout=0.0).eval())
    engine = AsyncEngine(max_queue=16, max_rows=8)
    engine.add_generator("bard", model, tokenizer, "int8")
    yield create_app(engine, max_new_tokens=64), model, tokenizer
    engine.close()


def post(app, *bodies):
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test",
                                     timeout=HANG) as client:
            return await asyncio.gather(*(client.post("/v1/completions", json=b) for b in bodies))
    return asyncio.run(asyncio.wait_for(run(), HANG))


def generate(model, tokenizer, prompt, n, temperature, top_k, seed):
    ct.manual_seed(seed)
    ids = ct.decode.generate(model, np.array([tokenizer.encode(prompt)]), n, temperature, top_k)
    return tokenizer.decode(ids[0, len(prompt):])


def test_completions_equal_generate_alone(served):
    app, model, tokenizer = served
    bodies = [{"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0.8, "top_k": 10, "seed": 3},
              {"prompt": ["First Citizen:", "JULIET:"], "max_tokens": 12, "temperature": 1.2, "seed": 9},
              {"prompt": "KING", "max_tokens": 40, "temperature": 0.5, "seed": -4}]
    answers = post(app, *bodies)
    assert [a.status_code for a in answers] == [200, 200, 200]
    first = answers[0].json()
    assert first["object"] == "text_completion" and first["model"] == "bard" and first["id"].startswith("cmpl-")
    assert first["choices"] == [{"text": generate(model, tokenizer, "ROMEO:", 30, 0.8, 10, 3), "index": 0,
                                 "logprobs": None, "finish_reason": "length"}]
    assert first["usage"] == {"prompt_tokens": 6, "completion_tokens": 30, "total_tokens": 36}
    two = answers[1].json()["choices"]
    assert [c["index"] for c in two] == [0, 1]
    assert [c["text"] for c in two] == [generate(model, tokenizer, p, 12, 1.2, None, 9)
                                        for p in ("First Citizen:", "JULIET:")]
    ct.manual_seed(-4 % 2**64)
    ids = ct.decode.generate(model, np.array([tokenizer.encode("KING")]), 40, 0.5)
    assert answers[2].json()["choices"][0]["text"] == tokenizer.decode(ids[0, 4:])


def test_streamed_completion_joins_to_the_same_text(served):
    app, model, tokenizer = served
    body = {"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0.8, "top_k": 10, "seed": 3, "stream": True}
    (answer,) = post(app, body)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    lines = [line[len("data: "):] for line in answer.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == generate(model, tokenizer, "ROMEO:", 30, 0.8, 10, 3)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_nucleus_sampling_is_seeded(served):
    """top_p < 1 draws from the nucleus: the same seed gives the same text; a small nucleus follows the most likely
    id at every step (greedy)."""
    app, model, tokenizer = served
    same = post(app, *[{"prompt": "ROMEO:", "max_tokens": 20, "top_p": 0.6, "seed": 1}] * 2)
    assert same[0].json()["choices"][0]["text"] == same[1].json()["choices"][0]["text"]
    (tiny,) = post(app, {"prompt": "ROMEO:", "max_tokens": 20, "top_p": 1e-6, "seed": 1})
    (greedy,) = post(app, {"prompt": "ROMEO:", "max_tokens": 20, "temperature": 0})
    assert tiny.json()["choices"][0]["text"] == greedy.json()["choices"][0]["text"]
    assert greedy.json()["choices"][0]["text"] == tokenizer.decode(
        ct.decode.generate(model, np.array([tokenizer.encode("ROMEO:")]), 20, top_k=1)[0, 6:])


@pytest.mark.parametrize("body,status,field", [
    ({}, 400, "prompt"),
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": 5}, 400, "prompt"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 65}, 400, "max_tokens"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"prompt": "x", "top_k": -2}, 400, "top_k"),
    ({"prompt": "x", "seed": 2**64}, 400, "seed"),
    ({"prompt": "x", "n": 0}, 400, "n"),
    ({"prompt": "x", "n": 17}, 400, "n"),
    ({"prompt": "x", "echo": "yes"}, 400, "echo"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"prompt": "x", "stop": ""}, 400, "stop"),
    ({"prompt": "x", "logprobs": 21}, 400, "logprobs"),
    ({"prompt": "x", "logprobs": True}, 400, "logprobs"),
    ({"prompt": "x", "logprobs": 2, "echo": True}, 400, "echo"),
    ({"prompt": "x", "presence_penalty": 2.5}, 400, "presence_penalty"),
    ({"prompt": "x", "frequency_penalty": "1"}, 400, "frequency_penalty"),
    ({"prompt": "x", "logit_bias": {"five": 10}}, 400, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": 101}}, 400, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"500": 1}}, 400, "logit_bias"),
    ({"prompt": "x", "best_of": 2}, 400, "best_of"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    ({"prompt": ["a", ""], "stream": True}, 400, "prompt"),
    ({"prompt": "x", "model": "other"}, 404, "model"),
    ({"prompt": "naïve"}, 400, "does not know"),
])
def test_refusals_name_the_field(served, body, status, field):
    """In OpenAI's shape, which its SDKs read: {"error": {"message", "type", "param", "code"}}, the field at fault
    named first in the message and as the param."""
    app, _, _ = served
    (answer,) = post(app, body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert field in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    if field != "does not know":
        assert error["message"].startswith(f"{field}:") and error["param"] == field
    assert error["code"] == ("model_not_found" if status == 404 else None)


def test_neutral_values_of_unsupported_fields_are_taken(served):
    """What the SDKs send by default (logprobs null, penalties 0, best_of 1, user; n and stream null) is no
    refusal."""
    app, _, _ = served
    (answer,) = post(app, {"prompt": "ROMEO:", "max_tokens": 3, "temperature": 0, "logprobs": None, "echo": False,
                           "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "best_of": 1, "user": "u1",
                           "n": None, "stream": None})
    assert answer.status_code == 200, answer.text


def test_a_gpt2_directory_is_served(tmp_path):
    """ctransformer-serve's loader takes a Hugging Face GPT-2 directory: the GPT, its byte-level BPE and
    <|endoftext|> as the end; greedy completions (temperature 0) of the int8 model equal its arg-max continuation
    alone, cut at the end, bit for bit (test_engine_gpt.py)."""
    tokenizers = pytest.importorskip("tokenizers")
    from ctransformer.serve.cli import load_model

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(["Now is the winter of our discontent."] * 40, vocab_size=280,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(tmp_path))
    ct.manual_seed(2)
    ct.nn.GPT(vocab_size=280, max_seq_len=48, n_layers=2, d_model=32, n_head=4, d_inner=64).save_pretrained(
        str(tmp_path))
    kind, (model, tokenizer, end), languages = load_model(str(tmp_path))
    assert kind == "generator" and languages is None and end == 0 and tokenizer.encode("Now is")
    engine = AsyncEngine(max_queue=8, max_rows=4)
    engine.add_generator("gpt2", model, tokenizer, "int8", end_id=end)
    try:
        (answer,) = post(create_app(engine, max_new_tokens=32), {"prompt": "Now is the", "max_tokens": 20,
                                                                  "temperature": 0})
    finally:
        engine.close()
    assert answer.status_code == 200, answer.text
    prompt = tokenizer.encode("Now is the")
    ids = list(ct.decode.generate(ct.quantize_dynamic(model), np.array([prompt]), 20, top_k=1)[0, len(prompt):])
    ids = ids[:ids.index(end)] if end in ids else ids
    assert answer.json()["choices"][0]["text"] == tokenizer.decode(ids)


def test_stop_strings_cut_where_the_first_appears_and_hold_back_their_starts():
    from ctransformer.serve.engine import held_back, stop_at, stop_strings

    assert stop_strings(None) == () and stop_strings("\n") == ("\n",) and stop_strings(["a", "bc"]) == ("a", "bc")
    for bad in ("", [], ["a"] * 5, ["a", ""], [3], {"a": 1}, 3):
        with pytest.raises(ValueError, match="stop"):
            stop_strings(bad)
    assert stop_at("hello world", ("wor", "lo")) == 3 and stop_at("hello", ("x",)) is None
    assert held_back("the end is ne", ("near",)) == 2 and held_back("the end", ("near",)) == 0
    assert held_back("abcab", ("abd", "bcabx")) == 4 and held_back("xa", ("aa",)) == 1


def completion_text(answer):
    return answer.json()["choices"][0]["text"], answer.json()["choices"][0]["finish_reason"]


def streamed_text(answer):
    lines = [line[len("data: "):] for line in answer.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line)["choices"][0] for line in lines[:-1]]
    return [c["text"] for c in chunks], chunks[-1]["finish_reason"]


def test_a_stop_string_ends_the_text_before_it_and_never_leaks_into_a_stream(served):
    """The text ends before the first stop string to appear (finish_reason "stop"), whole or streamed; a stream never
    sends a character of a stop string, wherever the string falls: here every 2- and 3-character stop taken from
    the continuation at every position (the character tokenizer makes a piece of each character, so every boundary
    is a cut). Without a stop string in it, the text is as generate makes it."""
    app, model, tokenizer = served
    sampling = {"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0.8, "top_k": 10, "seed": 3}
    full = generate(model, tokenizer, "ROMEO:", 30, 0.8, 10, 3)
    stops = sorted({full[i:i + k] for k in (2, 3) for i in range(len(full) - k + 1)})
    answers = []
    for i in range(0, len(stops), 8):   # the queue holds 16
        answers += post(app, *[body for stop in stops[i:i + 8] for body in
                               ({**sampling, "stop": stop}, {**sampling, "stop": stop, "stream": True})])
    for stop, whole, stream in zip(stops, answers[0::2], answers[1::2]):
        cut = full[:full.find(stop)]
        assert completion_text(whole) == (cut, "stop"), stop
        pieces, reason = streamed_text(stream)
        assert "".join(pieces) == cut and reason == "stop", stop
    two = post(app, {**sampling, "stop": [full[20:22], full[5:7], "qqqq"]}, {**sampling, "stop": "qqqq"})
    assert completion_text(two[0]) == (full[:min(full.find(full[20:22]), full.find(full[5:7]))], "stop")
    assert completion_text(two[1]) == (full, "length")


def test_chat_continues_the_conversation_as_its_prompt(served):
    """A chat for a GPT without a template of its own is its messages as "Role: text" lines and "Assistant:", which
    the model continues exactly as a completion of that prompt; streamed, the chunks give the role, then the
    content, then the finish reason, then the usage (stream_options.include_usage)."""
    from ctransformer.serve.openai_api import chat_prompt

    app, model, tokenizer = served
    messages = [{"role": "system", "content": "Speak in verse."}, {"role": "user", "content": "Who art thou?"},
                {"role": "assistant", "content": "A knight."}, {"role": "user", "content": [
                    {"type": "text", "text": "Whence "}, {"type": "text", "text": "comest thou?"}]}]
    prompt = chat_prompt([("system", "Speak in verse."), ("user", "Who art thou?"), ("assistant", "A knight."),
                          ("user", "Whence comest thou?")])
    assert prompt == "System: Speak in verse.\nUser: Who art thou?\nAssistant: A knight.\nUser: Whence comest thou?\n" \
                     "Assistant:"
    expected = generate(model, tokenizer, prompt, 20, 0.7, 8, 4)
    body = {"model": "bard", "messages": messages, "max_completion_tokens": 20, "temperature": 0.7, "top_k": 8,
            "seed": 4}

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test",
                                     timeout=HANG) as client:
            return await asyncio.gather(
                client.post("/v1/chat/completions", json=body),
                client.post("/v1/chat/completions", json={**body, "stream": True,
                                                          "stream_options": {"include_usage": True}}),
                client.post("/v1/chat/completions", json={**body, "messages": [{"role": "tool", "content": "x"}]}))
    whole, stream, bad = asyncio.run(asyncio.wait_for(run(), HANG))
    answer = whole.json()
    assert answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
    assert answer["choices"] == [{"index": 0, "message": {"role": "assistant", "content": expected}, "logprobs": None,
                                  "finish_reason": "length"}]
    assert answer["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 20, "total_tokens": len(prompt) + 20}
    lines = [line[len("data: "):] for line in stream.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1]) == expected
    assert chunks[-2]["choices"][0]["delta"] == {} and chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == answer["usage"]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages[0].role"


CHAT_TEMPLATE = ("{{ bos_token }}{% if messages[0]['role'] == 'assistant' %}"
                 "{{ raise_exception('the user speaks first') }}{% endif %}\n"
                 "{% for message in messages %}\n"
                 "  {% if message['role'] == 'system' %}[{{ message['content'] | trim }}]\n"
                 "  {% else %}<{{ message['role'] }}> {{ message['content'] }}{{ eos_token }}\n"
                 "  {% endif %}\n"
                 "{% endfor %}\n"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_a_gpt2_chat_goes_through_its_own_template_as_transformers_renders_it(tmp_path):
    """A GPT-2 directory whose tokenizer_config.json has a chat_template: the chat's prompt is that template
    rendered as transformers' apply_chat_template renders it (the reference: transformers itself, on the same
    directory), and the answer is the model's greedy continuation of it (int8, bit for bit); what the template
    refuses (raise_exception) is a 400 naming messages."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from ctransformer.serve.cli import load_model

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(["Now is the winter of our discontent. <user> <assistant> [ ]"] * 40, vocab_size=300,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE}))
    ct.manual_seed(3)
    ct.nn.GPT(vocab_size=300, max_seq_len=96, n_layers=2, d_model=32, n_head=4, d_inner=64).save_pretrained(
        str(tmp_path))
    _, (model, tokenizer, end), _ = load_model(str(tmp_path))
    assert tokenizer.chat_template == CHAT_TEMPLATE and tokenizer.eos_token == "<|endoftext|>"
    messages = [{"role": "system", "content": "  Be brief. "}, {"role": "user", "content": "Now is the winter"}]
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path)).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    assert reference.startswith("<|endoftext|>[Be brief.]") and reference.endswith("<assistant>")

    engine = AsyncEngine(max_queue=8, max_rows=4)
    engine.add_generator("gpt2", model, tokenizer, "int8", end_id=end)
    app = create_app(engine, max_new_tokens=32)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test",
                                     timeout=HANG) as client:
            return await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for body in (
                {"messages": messages, "max_tokens": 12, "temperature": 0},
                {"messages": [{"role": "assistant", "content": "Hi"}], "max_tokens": 2})))
    try:
        chat, refused = asyncio.run(asyncio.wait_for(run(), HANG))
    finally:
        engine.close()
    prompt = tokenizer.encode(reference)
    ids = list(ct.decode.generate(ct.quantize_dynamic(model), np.array([prompt]), 12, top_k=1)[0, len(prompt):])
    ids = ids[:ids.index(end)] if end in ids else ids
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] == tokenizer.decode(ids)
    assert chat.json()["usage"]["prompt_tokens"] == len(prompt)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages"
    assert refused.json()["error"]["message"] == "messages: the user speaks first"


def test_chat_settings_read_named_templates_and_token_objects(tmp_path):
    """tokenizer_config.json as older transformers wrote it too: special tokens as objects, and named templates
    (the one called "default" is the chat's); a directory without one has no template."""
    from ctransformer.gpt2 import _chat_settings

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
        "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}))
    assert _chat_settings(str(tmp_path)) == ("D", "<s>", "</s>")
    assert _chat_settings(str(tmp_path / "nowhere")) == (None, "", "")


def test_n_choices_sample_from_seed_plus_their_index_and_echo_leads_with_the_prompt(served):
    """n: each prompt's choices, prompt by prompt; choice i of a request with a seed is generate alone after
    manual_seed(seed + i), and the prompt's tokens count once in the usage, whole or streamed (a stream's chunks
    carry their choice's index, interleaved as they come). echo: the text starts with the prompt, whole or
    streamed."""
    app, model, tokenizer = served
    body = {"prompt": ["ROMEO:", "KING"], "max_tokens": 10, "temperature": 0.9, "top_k": 12, "seed": 2**63 - 2,
            "n": 3}
    many, echoed, stream, streamed_many = post(
        app, body, {"prompt": "ROMEO:", "max_tokens": 10, "temperature": 0.9, "seed": 5, "echo": True},
        {"prompt": "ROMEO:", "max_tokens": 10, "temperature": 0.9, "seed": 5, "echo": True, "stream": True},
        {**body, "stream": True, "stream_options": {"include_usage": True}})
    choices = many.json()["choices"]
    seeds = [2**63 - 2, 2**63 - 1, -2**63]   # seed + i, wrapped as a seed must be
    assert [c["index"] for c in choices] == list(range(6))
    assert [c["text"] for c in choices] == [generate(model, tokenizer, p, 10, 0.9, 12, s % 2**64)
                                            for p in ("ROMEO:", "KING") for s in seeds]
    assert many.json()["usage"]["prompt_tokens"] == len("ROMEO:") + len("KING")
    assert many.json()["usage"]["completion_tokens"] == 60
    continued = generate(model, tokenizer, "ROMEO:", 10, 0.9, None, 5)
    assert completion_text(echoed)[0] == "ROMEO:" + continued
    assert "".join(streamed_text(stream)[0]) == "ROMEO:" + continued
    lines = [line[len("data: "):] for line in streamed_many.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    texts, reasons = [""] * 6, [None] * 6
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"] is not None:
            assert reasons[choice["index"]] is None, "a choice finished twice"
            reasons[choice["index"]] = choice["finish_reason"]
    assert texts == [c["text"] for c in choices] and reasons == ["length"] * 6
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == many.json()["usage"]


def test_logit_bias_and_the_penalties_reach_the_engine(served):
    """The fields as the engine reads them. The model's initial weights are N(0, 0.02), so its logits lie within a
    few tenths of each other: a bias of 100 on "x" makes every greedy token "x", and a penalty of 2 (presence or
    frequency) on each id already chosen makes 20 greedy tokens all different, far from any tie either way."""
    app, _, tokenizer = served
    (x,) = tokenizer.encode("x")
    biased, presence, frequency = post(
        app, {"prompt": "ROMEO:", "max_tokens": 20, "temperature": 0, "logit_bias": {str(x): 100}},
        {"prompt": "ROMEO:", "max_tokens": 20, "temperature": 0, "presence_penalty": 2},
        {"prompt": "ROMEO:", "max_tokens": 20, "temperature": 0, "frequency_penalty": 2.0})
    assert biased.json()["choices"][0]["text"] == "x" * 20
    for answer in (presence, frequency):
        text = answer.json()["choices"][0]["text"]
        assert len(text) == 20 and len(set(text)) == 20, text


def test_a_stop_string_is_no_cancellation_in_the_metrics():
    """A completion cut at its stop string frees its row (the engine cancels the rest of the decoding) without
    counting as cancelled. The request asks for 100,000 tokens, so it is still decoding when the stop string comes
    (by construction, not by a race); the count is read once the engine has let it go (no row in use). The engine's
    counting itself: tests/serve/test_engine_gpt.py."""
    ct.manual_seed(5)
    tokenizer = CharTokenizer(CHARS)
    model = ct.quantize_dynamic(ct.nn.GPT(len(tokenizer), 24, 2, 32, 4, 64, dropout=0.0).eval())

    async def run():
        engine = AsyncEngine(max_queue=4, max_rows=2)
        engine.add_generator("bard", model, tokenizer, "int8")
        try:
            whole = await engine.complete("ROMEO:", max_tokens=40, temperature=0)
            stop = whole.text[2:4]   # greedy: the same first characters, whatever the length asked for
            cut = await engine.complete("ROMEO:", max_tokens=100_000, temperature=0, stop=stop)
            assert cut.finish_reason == "stop" and len(cut.text) <= 2
            await async_wait_until(lambda: engine.stats()["rows_in_use"] == 0, "the stopped request left")
            return engine.stats()["cancelled_total"]
        finally:
            engine.close()

    assert asyncio.run(asyncio.wait_for(run(), HANG)) == 0
