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
from waiting import HANG  # noqa: E402

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
    ({"prompt": "x", "n": 2}, 400, "n"),
    ({"prompt": "x", "stop": "\n"}, 400, "stop"),
    ({"prompt": ["a", "b"], "stream": True}, 400, "prompt"),
    ({"prompt": "x", "model": "other"}, 404, "model"),
    ({"prompt": "naïve"}, 400, "does not know"),
])
def test_refusals_name_the_field(served, body, status, field):
    app, _, _ = served
    (answer,) = post(app, body)
    assert answer.status_code == status, answer.text
    assert field in answer.json()["error"]


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
