"""OpenAI's own Python SDK (openai) against the command on 127.0.0.1: chat and legacy completions, sync and async,
whole and streamed, stop strings, a translator in a chat, and the SDK's own error classes for the refusals.

The GPT is a random shakespeare-task checkpoint served in int8, whose continuations are bit for bit decode.generate's
alone after manual_seed(seed) (tests/serve/test_engine_gpt.py); the translator is the random Marian directory of
test_server.py, in int8 too, compared with its offline int8 translation."""
import asyncio

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install '.[serve]'")

import ctransformer as ct  # noqa: E402
from ctransformer.serve.openai_api import chat_prompt  # noqa: E402
from test_server import MARIAN, Server, model_files, sentences, translators  # noqa: E402,F401 (fixtures)
from waiting import HANG  # noqa: E402

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

CHARS = "\n !',.:;?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@pytest.fixture(scope="module")
def bard(tmp_path_factory):
    """(checkpoint path, its GPT quantised as the server quantises it, its tokenizer)."""
    from ctransformer.checkpoint import save_checkpoint
    from ctransformer.tasks.shakespeare import Shakespeare, load_gpt_checkpoint

    cfg = {**Shakespeare.defaults, "n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 64}
    ct.manual_seed(2)
    model = ct.nn.GPT(len(CHARS) + 1, cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["n_head"],
                      4 * cfg["n_embd"], dropout=0.0)
    path = save_checkpoint(str(tmp_path_factory.mktemp("bard") / "bard.safetensors"), model, step=0, config=cfg,
                           extra={"task": "shakespeare", "chars": CHARS})
    loaded, tokenizer = load_gpt_checkpoint(path)
    return path, ct.quantize_dynamic(loaded), tokenizer


@pytest.fixture(scope="module")
def server(tmp_path_factory, bard, model_files):
    running = Server(tmp_path_factory.mktemp("openai"), "--model", f"bard={bard[0]}", "--model", model_files[0],
                     "--precision", "int8")
    yield running
    assert running.stop() == 0, running.output()


def continuation(bard, prompt, n, temperature, top_k, seed):
    _, model, tokenizer = bard
    ct.manual_seed(seed)
    ids = tokenizer.encode(prompt)
    return tokenizer.decode(ct.decode.generate(model, np.array([ids]), n, temperature, top_k)[0, len(ids):])


def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=HANG)


def test_sync_completions_and_chat(server, bard):
    sdk = client(server)
    full = continuation(bard, "ROMEO:", 30, 0.8, 10, 3)
    done = sdk.completions.create(model="bard", prompt="ROMEO:", max_tokens=30, temperature=0.8, seed=3,
                                  extra_body={"top_k": 10})
    assert done.object == "text_completion" and done.choices[0].text == full
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 30
    stop = full[12:14]
    cut = sdk.completions.create(model="bard", prompt="ROMEO:", max_tokens=30, temperature=0.8, seed=3, stop=[stop],
                                 extra_body={"top_k": 10})
    assert cut.choices[0].text == full[:full.find(stop)] and cut.choices[0].finish_reason == "stop"

    messages = [{"role": "system", "content": "Speak."}, {"role": "user", "content": "Who art thou?"}]
    prompt = chat_prompt([("system", "Speak."), ("user", "Who art thou?")])
    chat = sdk.chat.completions.create(model="bard", messages=messages, max_tokens=20, temperature=0.7, seed=5,
                                       extra_body={"top_k": 8})
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == continuation(bard, prompt, 20, 0.7, 8, 5)
    assert chat.usage.prompt_tokens == len(prompt) and chat.usage.completion_tokens == 20


def test_a_translator_in_a_chat_translates_the_last_user_message(server, model_files, sentences):
    from ctransformer.serve.cli import load_translator

    translator = load_translator(model_files[0])[0]
    translator.model = ct.quantize_dynamic(translator.model, "int8")
    text = sentences[MARIAN][1]
    chat = client(server).chat.completions.create(model=MARIAN, messages=[
        {"role": "system", "content": "Translate."}, {"role": "user", "content": "Hallo"},
        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": text}])
    assert chat.choices[0].message.content == translator.translate([text])[0]
    assert chat.choices[0].finish_reason == "stop"


def test_streams_join_to_the_whole_answer(server, bard):
    sdk = client(server)
    full = continuation(bard, "JULIET:", 25, 0.9, 6, 7)
    pieces = [chunk.choices[0].text for chunk in sdk.completions.create(
        model="bard", prompt="JULIET:", max_tokens=25, temperature=0.9, seed=7, stream=True, extra_body={"top_k": 6})]
    assert "".join(pieces) == full
    stop = full[9:12]
    chunks = list(sdk.chat.completions.create(
        model="bard", messages=[{"role": "user", "content": "JULIET:"}], max_tokens=25, temperature=0.9, seed=7,
        stop=stop, stream=True, stream_options={"include_usage": True}, extra_body={"top_k": 6}))
    said = continuation(bard, chat_prompt([("user", "JULIET:")]), 25, 0.9, 6, 7)
    cut = said[:said.find(stop)] if stop in said else said
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == cut
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == ("stop" if stop in said else "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == len(chat_prompt([("user", "JULIET:")]))


def test_async_client(server, bard):
    async def run():
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                                      timeout=HANG) as sdk:
            whole, streamed = await asyncio.gather(
                sdk.chat.completions.create(model="bard", messages=[{"role": "user", "content": "Speak!"}],
                                            max_tokens=15, temperature=0.5, seed=11, extra_body={"top_k": 4}),
                sdk.chat.completions.create(model="bard", messages=[{"role": "user", "content": "Speak!"}],
                                            max_tokens=15, temperature=0.5, seed=11, stream=True,
                                            extra_body={"top_k": 4}))
            return whole, [chunk async for chunk in streamed]

    whole, chunks = asyncio.run(asyncio.wait_for(run(), HANG))
    expected = continuation(bard, chat_prompt([("user", "Speak!")]), 15, 0.5, 4, 11)
    assert whole.choices[0].message.content == expected
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected


def test_refusals_raise_the_sdks_own_errors(server):
    sdk = client(server)
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.completions.create(model="bard", prompt="x", best_of=2)
    assert refused.value.param == "best_of" and "not supported" in refused.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        sdk.chat.completions.create(model="bard", messages=[])
    assert empty.value.param == "messages" and empty.value.type == "invalid_request_error"


def test_logprobs_in_completions_and_chat_whole_and_streamed(server):
    """logprobs through the SDK's own types: each token's text, in order, makes the choice's text (text_offset says
    where each starts); greedy decoding chose each token, so its logprob is the first of its alternatives' (the same
    number: exact). The numbers themselves are proven against PyTorch in tests/serve/test_engine_gpt.py."""
    sdk = client(server)
    whole = sdk.completions.create(model="bard", prompt="ROMEO:", max_tokens=12, temperature=0, logprobs=3,
                                   stop=["zz"])
    choice = whole.choices[0]
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text and len(lp.tokens) == whole.usage.completion_tokens
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 3 and logprob == max(top.values()) and top[token] == logprob and logprob < 0

    chat = sdk.chat.completions.create(model="bard", messages=[{"role": "user", "content": "Speak!"}], max_tokens=10,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token
        assert t.top_logprobs[0].logprob == t.logprob and bytes(t.bytes).decode() == t.token

    chunks = list(sdk.chat.completions.create(model="bard", messages=[{"role": "user", "content": "Speak!"}],
                                              max_tokens=10, temperature=0, logprobs=True, top_logprobs=2,
                                              stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model="bard", messages=[{"role": "user", "content": "x"}], top_logprobs=2)
    assert refused.value.param == "top_logprobs"


def test_a_chat_stream_of_several_choices_joins_to_the_whole_answer(server):
    """n in a stream: the SDK's chunks carry each choice's index, interleaved; joined by index they are the whole
    answer's choices (the same seeds: choice i samples from seed + i; int8, bit for bit)."""
    sdk = client(server)
    ask = dict(model="bard", messages=[{"role": "user", "content": "Speak!"}], max_tokens=12, temperature=0.9,
               seed=3, n=3)
    whole = sdk.chat.completions.create(**ask)
    texts = ["", "", ""]
    for chunk in sdk.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == [c.message.content for c in whole.choices]
