"""ctransformer-serve (issue 49, item 2, and item 3's short version): the HTTP application in-process and the
command in a subprocess on 127.0.0.1, every request and every server bounded in count and seconds.

The models: a random Marian directory as transformers writes it (tests/marian_dirs.py, the weights made lively
as in test_marian_generate.py, so rows end at different steps) named like opus-mt's (opus-mt-de-en), and a tiny
random multi30k checkpoint. No network.

What is compared, and how (DEVELOPING.md, "Parity tests and knife edges"): the server's translations equal
``Translator.translate([text], ...)`` of each text alone with the same options, text for text. The engine decodes
each text in a batch of whatever else is running, so its logits differ from the offline call's in the last bits;
the sentences compared are therefore kept off the knife edge and the check is made on every run: each one's
greedy decoding, alone, has a gap of at least KNIFE between its two best logits at every step it chose. Beam
requests are compared on those sentences too, which keeps their greedy steps off the edge but proves nothing of
a beam's; the engine's own tests answer for beams in batches. int8 is checked for answers only (its knife edges
are its own). Everything else is checked for what it promises: statuses, shapes, messages that name the field,
counters, exit codes.
"""
import asyncio
import base64
import contextlib
import ctypes
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import numpy as np
import pytest

pytest.importorskip("starlette", reason="the serve extra is not installed: pip install '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install '.[serve]'")
import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ctransformer as ct  # noqa: E402
from ctransformer.data.parallel_corpus import multi30k  # noqa: E402
from ctransformer.serve import AsyncEngine, create_app  # noqa: E402
from ctransformer.serve.cli import language_pair, load_translator, parse_languages, parse_model  # noqa: E402
from marian_dirs import write_generation, write_marian_dir  # noqa: E402
from waiting import HANG, async_wait_until, wait_until  # noqa: E402

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

KNIFE = 1e-4   # the logits are O(1); two batch compositions' float32 logits differ by ~1e-6
MARIAN = "opus-mt-de-en"
TINY = "tiny"
GREEDY = {"beam_size": 1}


# --- models -----------------------------------------------------------------------------------------------------

def _lively(hf, pad):
    """Weights of std 0.3 and a small logits bias (test_marian_generate.py's lively): at transformers' init the
    logits bias decides every step and every row repeats one token to the length limit."""
    import torch

    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() > 1 and p.requires_grad:
                p.normal_(0, 0.3)
        hf.final_logits_bias.mul_(0.1)
        hf.final_logits_bias[0, 0] += 0.0   # (no push towards the end: seed 1's rows end anywhere from 0 to 46 words)
        hf.final_logits_bias[0, pad] += 2.5   # the ban on pad must be applied


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """(Marian directory, multi30k checkpoint file), both random."""
    pytest.importorskip("transformers")
    from ctransformer.checkpoint import save_checkpoint
    from ctransformer.data.subword import train_subword_vocab
    from ctransformer.translator import TASK, build_model

    folder = tmp_path_factory.mktemp("models")
    marian = folder / MARIAN
    hf = write_marian_dir(marian, seed=1)
    pad = hf.config.pad_token_id
    _lively(hf, pad)
    hf.save_pretrained(str(marian))
    write_generation(marian, pad, {"num_beams": 1, "max_length": 48})

    corpus = multi30k("train")
    vocab = train_subword_vocab(corpus.src[:1000] + corpus.tgt[:1000], vocab_size=200)
    cfg = {"d_model": 32, "d_inner": 64, "n_layers": 2, "n_head": 4, "dropout": 0.0, "n_position": 64,
           "scale_emb_or_prj": "emb", "beam_size": 4, "length_penalty": 0.6, "max_len_ratio": 1.5, "train_src": ""}
    ct.manual_seed(3)
    model = build_model(cfg, len(vocab))
    checkpoint = folder / f"{TINY}.ckpt"
    save_checkpoint(str(checkpoint), model, config=cfg, extra={"task": TASK, "sentencepiece": vocab.as_array()})
    return str(marian), str(checkpoint)


@pytest.fixture(scope="module")
def translators(model_files):
    """The Translators the server builds from those files, by name (cli.load_translator: the same options)."""
    return {name: load_translator(path)[0] for name, path in (parse_model(p) for p in model_files)}


def _off_the_knife_edge(translator, sentence):
    """Whether greedy decoding of `sentence` alone has a gap of at least KNIFE between its two best (allowed)
    logits at every step that chose a token."""
    ids = translator.encode([sentence])[0] + [translator.end_id]
    src = np.array([ids], dtype=np.int64)
    with ct.no_grad():
        out, logits = ct.decode.greedy_decode(translator.model, src, ct.nn.get_pad_mask(src, translator.pad_id),
                                              translator.max_len(len(ids)), translator.start_id, translator.end_id,
                                              return_logits=True, banned=translator.banned,
                                              force_end=translator.force_end)
    logits = np.array(logits[0], dtype=np.float64)
    logits[:, translator.banned] = -np.inf
    steps = logits[~np.isnan(logits).any(-1)]
    if translator.force_end and len(steps) == logits.shape[0]:
        steps = steps[:-1]   # the last step is forced to the end id, whatever the logits
    top2 = np.sort(steps, -1)[:, -2:]
    return bool((top2[:, 1] - top2[:, 0] >= KNIFE).all())


@pytest.fixture(scope="module")
def sentences(translators):
    """{model name: Multi30k validation sentences off the knife edge for that model} (at least 40 for the Marian)."""
    pool = [s for s in multi30k("val").src[:90] if s.strip()]
    chosen = {name: [s for s in pool if _off_the_knife_edge(t, s)] for name, t in translators.items()}
    assert len(chosen[MARIAN]) >= 40 and len(chosen[TINY]) >= 4, {k: len(v) for k, v in chosen.items()}
    return chosen


@pytest.fixture(scope="module")
def offline(translators):
    """offline(name, text, **options): Translator.translate([text], **options)[0], remembered."""
    memo = {}

    def translate(name, text, **options):
        key = (name, text, tuple(sorted(options.items())))
        if key not in memo:
            memo[key] = translators[name].translate([text], **options)[0]
        return memo[key]
    return translate


# --- the application in-process ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine(translators):
    engine = AsyncEngine(max_queue=64, max_rows=16)
    engine.add_translator(MARIAN, translators[MARIAN], "float32", source_language="de", target_language="en")
    engine.add_translator(MARIAN, translators[MARIAN], "int8", source_language="de", target_language="en")
    engine.add_translator(TINY, translators[TINY], "float32")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def app(engine):
    return create_app(engine, max_texts=8, max_text_chars=300, max_body_bytes=4096)


def call(app, *requests, timeout=HANG):
    """The responses to (method, url, httpx keywords) requests made concurrently to the app, in order."""
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test",
                                     timeout=timeout) as client:
            return await asyncio.gather(*(client.request(method, url, **kw) for method, url, kw in requests))
    return asyncio.run(asyncio.wait_for(run(), timeout))


def one(app, method, url, **kw):
    return call(app, (method, url, kw))[0]


def events(body):
    """The JSON objects of a server-sent-events body, in order."""
    return [json.loads(line[len("data: "):]) for line in body.split("\n") if line.startswith("data: ")]


def test_health_ready_models_languages_metrics_page(app):
    assert one(app, "GET", "/health").json() == {"status": "ok"}
    ready = one(app, "GET", "/ready")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    models = one(app, "GET", "/v1/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["precision"], m["kind"]) for m in models["data"]] == [
        (MARIAN, "model", "float32", "translator"), (MARIAN, "model", "int8", "translator"),
        (TINY, "model", "float32", "translator")]
    assert one(app, "GET", "/languages").json() == [{"code": "de", "name": "German", "targets": ["en"]}]
    page = one(app, "GET", "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="translate"' in page.text and "v1/models" in page.text and "http" not in page.text.split("<script>")[1]
    metrics = one(app, "GET", "/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    for name in ("ctransformer_queue_depth", "ctransformer_rows_in_use", "ctransformer_lanes 1.0",
                 "ctransformer_requests_total", "ctransformer_tokens_total", "ctransformer_rejected_total",
                 "ctransformer_cancelled_total", "ctransformer_timed_out_total", "ctransformer_step_seconds_count",
                 "ctransformer_ready 1.0", "ctransformer_request_seconds_bucket",
                 "ctransformer_time_to_first_token_seconds_bucket",
                 'ctransformer_http_responses_total{endpoint="/v1/models",status="200"}'):
        assert name in metrics.text, name
    gpt = one(app, "POST", "/v1/completions", json={"prompt": "Hello", "max_tokens": 5})
    assert gpt.status_code == 404 and "a generator is not served" in gpt.json()["error"]["message"]
    nowhere = one(app, "GET", "/nowhere")
    assert nowhere.status_code == 404 and nowhere.json()["error"].startswith("/nowhere")
    wrong = one(app, "GET", "/v1/translate")   # the routing is the app's own: the answers Starlette's router gave
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST" and "/v1/translate" in wrong.json()["error"]
    assert one(app, "DELETE", "/health").headers["allow"] == "GET, HEAD"
    head = one(app, "HEAD", "/health")
    assert head.status_code == 200 and head.content == b""


def test_v1_translate_equals_offline(app, sentences, offline):
    """Greedy, several texts a request (each as translated alone), the empty text, beam 4 with a length penalty,
    max_decoding_length, and the tiny checkpoint's model; all requests at once."""
    texts = sentences[MARIAN][:8]
    cases = [({"texts": texts, **GREEDY}, [offline(MARIAN, t, beam_size=1) for t in texts]),
             ({"texts": texts[:3] + ["", "  "]}, [offline(MARIAN, t) for t in texts[:3]] + ["", ""]),
             ({"texts": [texts[3]], "beam_size": 4, "length_penalty": 0.5},
              [offline(MARIAN, texts[3], beam_size=4, length_penalty=0.5)]),
             ({"texts": texts[4:6], "max_decoding_length": 5, **GREEDY},
              [offline(MARIAN, t, beam_size=1, max_decoding_length=5) for t in texts[4:6]]),
             ({"texts": sentences[TINY][:4], "model": TINY, **GREEDY},
              [offline(TINY, t, beam_size=1) for t in sentences[TINY][:4]]),
             ({"texts": [], "model": MARIAN, "precision": "float32"}, [])]
    answers = call(app, *[("POST", "/v1/translate", {"json": body}) for body, _ in cases])
    for (body, expected), answer in zip(cases, answers):
        assert answer.status_code == 200, (body, answer.text)
        assert answer.json() == {"translations": expected}, body
    assert sum(bool(t) for t in cases[0][1]) >= 6, "the model translates to nothing: a weak test"
    int8 = one(app, "POST", "/v1/translate", json={"texts": texts[:2], "precision": "int8"})
    assert int8.status_code == 200 and len(int8.json()["translations"]) == 2   # int8: knife edges of its own


def test_stream_pieces_join_to_the_greedy_translation(app, sentences, offline):
    several_words = (t for t in sentences[MARIAN] if len(offline(MARIAN, t, beam_size=1).split()) >= 3)
    texts = list(itertools.islice(several_words, 4))
    answers = call(app, *[("POST", "/v1/translate", {"json": {"texts": [t], "stream": True, **GREEDY}})
                          for t in texts])
    for text, answer in zip(texts, answers):
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        got = events(answer.text)
        expected = offline(MARIAN, text, beam_size=1)
        assert got[-1] == {"done": True, "translation": expected}
        pieces = [e["text"] for e in got[:-1]]
        assert "".join(pieces) == expected and len(pieces) >= 2, pieces
    # A beam's words are final only at the end: one event with the result.
    beam = one(app, "POST", "/v1/translate", json={"texts": [texts[0]], "stream": True, "beam_size": 4})
    assert events(beam.text) == [{"done": True, "translation": offline(MARIAN, texts[0], beam_size=4)}]
    empty = one(app, "POST", "/v1/translate", json={"texts": [" "], "stream": True, **GREEDY})
    assert events(empty.text) == [{"done": True, "translation": ""}]


def test_libretranslate_shape_json_and_forms(app, sentences, offline):
    text, other = sentences[MARIAN][12:14]
    default = offline(MARIAN, text)
    answers = call(app,
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en", "format": "text"}}),
                   ("POST", "/translate", {"json": {"q": [text, other], "source": "auto", "target": "en"}}),
                   ("POST", "/translate", {"data": {"q": text, "source": "de", "target": "en"}}),
                   ("POST", "/translate", {"data": {"q": text, "source": "de", "target": "en"},
                                           "files": {"unused": ("f.txt", b"x")}}),
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "fr"}}),
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en", "format": "rtf"}}),
                   ("POST", "/translate", {"json": {"source": "de", "target": "en"}}))
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 400, 400, 400]
    assert answers[0].json() == {"translatedText": default}
    assert answers[1].json() == {"translatedText": [default, offline(MARIAN, other)]}
    assert answers[2].json() == answers[3].json() == {"translatedText": default}
    assert "'fr'" in answers[4].json()["error"] and answers[5].json()["error"].startswith("format")
    assert answers[6].json()["error"].startswith("q")


def test_libretranslate_alternatives_come_from_the_beams_n_best(app, sentences):
    """alternatives: n asks the beam for its n + 1 best (AsyncEngine.hypotheses, whose ids and scores equal the
    offline search's n-best bit for bit in int8: tests/serve/test_engine.py): the best is translatedText, the rest
    the alternatives, in LibreTranslate's shape (a list, or a list a text); a form sends the count as a string."""
    text, other = sentences[MARIAN][20:22]
    answers = call(app,
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en", "alternatives": 2}}),
                   ("POST", "/translate", {"json": {"q": [text, other], "source": "de", "target": "en",
                                                    "alternatives": 2}}),
                   ("POST", "/translate", {"data": {"q": text, "source": "de", "target": "en", "alternatives": "2"}}),
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en", "alternatives": -1}}),
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en", "alternatives": 2,
                                                    "format": "html"}}),
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en", "alternatives": 0}}))
    assert [a.status_code for a in answers] == [200, 200, 200, 400, 400, 200]
    single, both, form = (a.json() for a in answers[:3])
    assert isinstance(single["translatedText"], str) and len(single["alternatives"]) == 2
    assert all(isinstance(t, str) for t in single["alternatives"])
    # Shapes only: the requests run in float32 batches of whichever rows, so equal texts across them would assert
    # the summation order (the numbers are proven in int8 at the engine).
    assert isinstance(form["translatedText"], str) and len(form["alternatives"]) == 2
    assert len(both["translatedText"]) == 2 and [len(a) for a in both["alternatives"]] == [2, 2]
    assert answers[3].json()["error"].startswith("alternatives") and "html" in answers[4].json()["error"]
    assert "alternatives" not in answers[5].json()


HTML = ('<!DOCTYPE html>\n<html lang="de"><head><meta charset="utf-8"><title>{0}</title>'
        '<style>p {{ color: red }}</style></head>\n<body><p class="a" data-x=\'1 &amp; 2\'>  {1}</p>\n'
        '<!-- a comment: <p>not text</p> -->\n<div>&nbsp;<b>{2}</b>\t</div><br/>'
        '<script>var s = "<p>Nicht übersetzen</p>";</script></body></html>')


def test_html_pieces_join_back_byte_for_byte_and_escape_the_translations():
    from ctransformer.serve import html_text

    doc = HTML.format("Ein Titel", "Ein Mann fährt Fahrrad.", "Zwei Hunde &amp; eine Katze")
    pieces = html_text.split(doc)
    assert "".join(raw for _, raw in pieces) == doc
    words = html_text.texts(pieces)
    assert [w for w in words if w] == ["Ein Titel", "Ein Mann fährt Fahrrad.", "Zwei Hunde & eine Katze"]
    assert all(kind == "markup" for kind, raw in pieces if "Nicht" in raw or "not text" in raw or "color" in raw)
    out = html_text.join(pieces, ["<T> & 'x'" if w else None for w in words])
    assert out == HTML.format("&lt;T&gt; &amp; 'x'", "&lt;T&gt; &amp; 'x'", "&lt;T&gt; &amp; 'x'")
    assert html_text.split("") == [] and html_text.split("just text") == [("text", "just text")]
    assert html_text.join(html_text.split("a &lt; b"), ["c < d"]) == "c &lt; d"


def test_libretranslate_html_translates_the_text_and_keeps_the_markup(engine, sentences, offline):
    """format "html": each text between the tags is translated as its own sentence (as offline, alone), and
    everything else comes back byte for byte: tags, attributes, entities in them, comments, the insides of <script>
    and <style>, the whitespace around the words."""
    from ctransformer.serve import html_text

    app = create_app(engine, max_texts=8)   # the module's app takes 300 characters a text; a page has more
    doc = HTML.format(*sentences[MARIAN][20:23])
    answer = one(app, "POST", "/translate", json={"q": [doc, "<p></p>"], "source": "de", "target": "en",
                                                  "format": "html"})
    assert answer.status_code == 200, answer.text
    got, empty = answer.json()["translatedText"]
    pieces = html_text.split(doc)
    expected = html_text.join(pieces, [offline(MARIAN, w) if w else None for w in html_text.texts(pieces)])
    assert got == expected and empty == "<p></p>"
    markup = lambda text: [raw for kind, raw in html_text.split(text) if kind == "markup"]  # noqa: E731
    assert markup(got) == markup(doc)
    too_many = one(app, "POST", "/translate", json={"q": "<p>a</p>" * 9, "target": "en", "format": "html"})
    assert too_many.status_code == 413 and too_many.json()["error"].startswith("q: the HTML holds 9 texts")


def test_translate_file_translates_txt_line_by_line_and_html_as_a_page(engine, sentences, offline):
    """LibreTranslate's /translate_file: a .txt file's lines each translated as offline (blank lines and line ends
    kept: CRLF, none at the end), more lines than one request's limit; an .html file as format html; the answer's
    translatedFileUrl fetches the file, named as it came. Refusals name the field."""
    from ctransformer.serve import html_text

    app = create_app(engine, max_texts=2)   # three lines: two of the engine's requests
    a, b, c = sentences[MARIAN][23:26]
    txt = f"{a}\r\n\n{b}\n  \n{c}"
    page = HTML.format(a, b, c)
    answers = call(app, ("POST", "/translate_file", {"data": {"source": "de", "target": "en"},
                                                     "files": {"file": ("notes.txt", txt.encode())}}),
                   ("POST", "/translate_file", {"data": {"target": "en"},
                                                "files": {"file": ("dir/Seite.HTML", page.encode())}}))
    assert [x.status_code for x in answers] == [200, 200], [x.text for x in answers]
    got = []
    for answer, name in zip(answers, ("notes.txt", "Seite.HTML")):
        url = answer.json()["translatedFileUrl"]
        assert url.startswith("http://serve.test/download_file/") and url.endswith("/" + name)
        fetched = one(app, "GET", url[len("http://serve.test"):])
        assert fetched.status_code == 200 and name in fetched.headers["content-disposition"]
        got.append(fetched.content.decode())
    t = lambda text: offline(MARIAN, text)  # noqa: E731
    assert got[0] == f"{t(a)}\r\n\n{t(b)}\n  \n{t(c)}"
    pieces = html_text.split(page)
    assert got[1] == html_text.join(pieces, [t(w) if w else None for w in html_text.texts(pieces)])
    refused = call(app, ("POST", "/translate_file", {"data": {"target": "en"}}),
                   ("POST", "/translate_file", {"data": {"target": "en"}, "files": {"file": ("a.pdf", b"%PDF")}}),
                   ("POST", "/translate_file", {"json": {"target": "en"}}),
                   ("POST", "/translate_file", {"data": {"target": "fr"}, "files": {"file": ("a.txt", b"Hallo")}}),
                   ("GET", "/download_file/nothing/a.txt", {}))
    assert [x.status_code for x in refused] == [400, 400, 400, 400, 404]
    assert all(x.json()["error"].startswith(f) for x, f in zip(refused, ("file", "file", "file", "source", "file")))
    assert one(app, "GET", "/frontend/settings").json()["supportedFilesFormat"] == [".txt", ".html", ".htm"]


BAD = [   # (body as bytes or JSON, status, the start of the error message: the field at fault)
    (b"{texts: 1}", 400, "body"), (b"[1, 2]", 400, "body"), (b'{"texts": ["\xff\xfe"]}', 400, "body"),
    (b'{"texts": ["a"], "beam_size": NaN}', 400, "body"), (b"[" * 3000, 400, "body"), (b"", 400, "body"),
    (b'{"texts": ["\\ud800"]}', 400, "texts[0]"), ({}, 400, "texts"), ({"texts": "ein Satz"}, 400, "texts"),
    ({"texts": ["a", 3]}, 400, "texts[1]"), ({"texts": {"a": 1}}, 400, "texts"), ({"texts": ["a"] * 9}, 413, "texts"),
    ({"texts": ["a" * 301]}, 413, "texts[0]"), ({"texts": ["a"], "beam": 4}, 400, "beam"),
    ({"texts": ["a"], "beam_size": 0}, 400, "beam_size"), ({"texts": ["a"], "beam_size": "4"}, 400, "beam_size"),
    ({"texts": ["a"], "beam_size": True}, 400, "beam_size"), ({"texts": ["a"], "beam_size": 10**30}, 400, "beam_size"),
    ({"texts": ["a"], "beam_size": 2.0}, 400, "beam_size"),
    ({"texts": ["a"], "length_penalty": -1}, 400, "length_penalty"),
    ({"texts": ["a"], "max_decoding_length": 0}, 400, "max_decoding_length"),
    ({"texts": ["a"], "timeout_ms": 0}, 400, "timeout_ms"), ({"texts": ["a"], "timeout_ms": "1"}, 400, "timeout_ms"),
    ({"texts": ["a"], "stream": "yes"}, 400, "stream"), ({"texts": ["a", "b"], "stream": True}, 400, "texts"),
    ({"texts": ["a"], "model": 5}, 400, "model"), ({"texts": ["a"], "model": "nope"}, 404, "model"),
    ({"texts": ["a"], "precision": "float64"}, 400, "precision"), ({"texts": ["a"], "precision": "bf16"}, 404, "model"),
    ({"texts": ["a"], "model": TINY, "precision": "int8"}, 404, "model"),
    (b'{"texts": ["' + b"a" * 5000 + b'"]}', 413, "body"),
]


@pytest.mark.parametrize("body,status,field", BAD, ids=[f"{i}-{s}-{f}" for i, (_, s, f) in enumerate(BAD)])
def test_bad_requests_get_a_4xx_naming_the_field(app, body, status, field):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    answer = one(app, "POST", "/v1/translate", headers={"content-type": "application/json"}, **kw)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"].startswith(field + ":") or answer.json()["error"].startswith(field + ","), answer.text


def test_odd_but_valid_texts_are_translated(app):
    """Control characters, NUL, emoji, right-to-left text and a text of spaces: answers, never a 5xx."""
    texts = ["\x00", "a\tb\r\nc", "😀 🚲", "שלום עולם", "\u200b\u200b", "…" * 300]
    answer = one(app, "POST", "/v1/translate", json={"texts": texts})
    assert answer.status_code == 200 and len(answer.json()["translations"]) == len(texts)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
_texts = st.text(max_size=24)


def _shapes(wild):
    """The two endpoints' bodies: each field a value of the right kind (in range or just out of it), and with
    `wild` sometimes any JSON at all in its place."""
    def field(plausible):
        return st.one_of(plausible, _json_values) if wild else plausible

    v1 = st.fixed_dictionaries({"texts": field(st.lists(_texts, max_size=4))}, optional={
        "model": field(st.sampled_from([MARIAN, TINY, "nope"])),
        "precision": field(st.sampled_from(["float32", "int8", "bf16", "fp32", "float64"])),
        "beam_size": field(st.integers(0, 17)), "max_decoding_length": field(st.integers(0, 70)),
        "length_penalty": field(st.floats(-1, 3)), "stream": field(st.booleans()),
        "timeout_ms": field(st.floats(0, 2000)), "api_key": field(_texts)})
    libre = st.fixed_dictionaries({"q": field(_texts | st.lists(_texts, max_size=3)),
                                   "target": field(st.sampled_from(["de", "en", ""]))}, optional={
        "source": field(st.sampled_from(["de", "en", "auto", ""])), "format": field(st.sampled_from(["text", "html"])),
        "api_key": field(_texts), "alternatives": _json_values})
    return v1, libre


@st.composite
def _requests_(draw, wild):
    """(path, content type, body): the endpoint's own shape, any JSON, any bytes, or a form."""
    path = draw(st.sampled_from(["/v1/translate", "/v1/translate", "/translate", "/v1/completions",
                                 "/v1/chat/completions"]))
    v1, libre = _shapes(wild)
    shaped = libre if path == "/translate" else v1
    kind = draw(st.sampled_from(["shaped", "shaped", "shaped", "json", "bytes", "form"]))
    if kind == "shaped":
        body = json.dumps(draw(shaped)).encode()
    elif kind == "json":
        body = json.dumps(draw(_json_values)).encode()
    elif kind == "bytes":
        body = draw(st.binary(max_size=64))
    else:
        form = {k: v for k, v in draw(shaped).items() if isinstance(v, str)}
        body = urllib.parse.urlencode(form).encode()
    content_type = "application/x-www-form-urlencoded" if kind == "form" else draw(st.sampled_from(
        ["application/json"] * 4 + ["application/x-www-form-urlencoded", "multipart/form-data; boundary=b",
                                    "text/plain", ""]))
    return path, content_type, body


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(wild=st.sampled_from([False, True]), data=st.data())
def test_no_body_gets_a_5xx(app, wild, data):
    """Hypothesis: whatever the body (the endpoint's fields with values of the right kind, in range or out of it,
    or anything in their place; any JSON, any bytes, forms) and whatever type it claims, every endpoint answers
    below 500, and a refusal is a JSON error."""
    path, content_type, body = data.draw(_requests_(wild))
    answer = one(app, "POST", path, content=body, headers={"content-type": content_type} if content_type else {})
    assert answer.status_code < 500, (answer.status_code, answer.text)
    if answer.status_code >= 400:   # OpenAI's shape on its endpoints, {"error": message} on the others
        error = answer.json()["error"]
        assert isinstance(error["message"] if path.endswith("completions") else error, str)
    elif not answer.headers["content-type"].startswith("text/event-stream"):
        assert set(answer.json()) & {"translations", "translatedText", "choices"}


def test_api_key(engine, sentences, offline):
    keyed = create_app(engine, api_key="s3cret")
    text = sentences[MARIAN][0]
    body = {"texts": [text], **GREEDY}
    answers = call(keyed, ("POST", "/v1/translate", {"json": body}),
                   ("POST", "/v1/translate", {"json": {**body, "api_key": "wrong"}}),
                   ("POST", "/v1/translate", {"json": body, "headers": {"Authorization": "Bearer s3creT"}}),
                   ("POST", "/v1/translate", {"json": {**body, "api_key": "s3cret"}}),
                   ("POST", "/v1/translate", {"json": body, "headers": {"Authorization": "Bearer s3cret"}}),
                   ("POST", "/translate", {"data": {"q": text, "source": "de", "target": "en", "api_key": "s3cret"}}),
                   ("POST", "/translate", {"json": {"q": text, "source": "de", "target": "en"}}),
                   ("POST", "/v1/translate", {"json": {**body, "api_key": 7}}),
                   ("GET", "/health", {}), ("GET", "/v1/models", {}))
    assert [a.status_code for a in answers] == [401, 403, 403, 200, 200, 200, 401, 403, 200, 200]
    assert answers[0].json()["error"].startswith("api_key") and answers[0].headers["www-authenticate"] == "Bearer"
    assert answers[3].json() == answers[4].json() == {"translations": [offline(MARIAN, text, beam_size=1)]}


def test_timeout_ms_answers_504(app, sentences):
    answer = one(app, "POST", "/v1/translate", json={"texts": sentences[MARIAN][:8], "timeout_ms": 0.001})
    assert answer.status_code == 504 and answer.json()["error"].startswith("timeout_ms")


def test_a_full_queue_answers_429_and_the_rest_are_answered(translators, sentences, offline):
    """30 requests at once on a queue of 2 and one row: each is answered as offline or refused with a 429 that is
    counted. How many are refused is the engine's pace against the event loop's (a race, not asserted); the server's
    test with 400-token translations makes the 429s certain."""
    engine = AsyncEngine(max_queue=2, max_rows=1)
    try:
        engine.add_translator(MARIAN, translators[MARIAN])
        app = create_app(engine)
        texts = sentences[MARIAN][:30]
        answers = call(app, *[("POST", "/v1/translate", {"json": {"texts": [t], **GREEDY}}) for t in texts])
        statuses = assert_answered_or_refused(texts, answers, offline)
        assert engine.stats()["rejected_total"] == statuses.count(429)
    finally:
        engine.close()


def test_a_full_queue_refuses_before_reading_the_body(translators, sentences, offline):
    """With the queue full, a translation or completion is refused (429, Retry-After, counted) before its body is
    read: a body that is not even JSON gets the 429, not a 400. The queue is shown full by the C++ engine's stats
    reporting max_queue requests waiting (a real queue empties at the engine's pace, too fast to hold for a test)."""
    engine = AsyncEngine(max_queue=4)
    real = engine._engine

    class Full:   # the C++ engine as it looks with max_queue requests waiting
        def stats(self):
            return {**real.stats(), "queue_depth": engine.max_queue}

        def __getattr__(self, name):
            return getattr(real, name)

    try:
        engine.add_translator(MARIAN, translators[MARIAN])
        app = create_app(engine)
        engine._engine = Full()
        bad = {"content": b"{not json", "headers": {"content-type": "application/json"}}
        answers = call(app, *[("POST", path, bad) for path in ("/v1/translate", "/translate", "/v1/completions")],
                       ("GET", "/health", {}))
        for answer in answers[:3]:
            assert answer.status_code == 429, answer.text
            error = answer.json()["error"]
            message = error["message"] if isinstance(error, dict) else error   # OpenAI's shape on its endpoint
            assert int(answer.headers["retry-after"]) >= 1 and message.startswith("queue: ")
        assert answers[3].status_code == 200
        assert engine.stats()["rejected_total"] == 3
        assert 'ctransformer_http_responses_total{endpoint="/translate",status="429"} 1.0' in \
            one(app, "GET", "/metrics").text
        engine._engine = real   # room again: the same body is read, and refused for what it is
        assert one(app, "POST", "/v1/translate", **bad).status_code == 400
        text = sentences[MARIAN][0]
        assert one(app, "POST", "/v1/translate", json={"texts": [text], **GREEDY}).json() == {
            "translations": [offline(MARIAN, text, beam_size=1)]}
    finally:
        engine._engine = real
        engine.close()


def test_a_request_being_read_holds_its_place_in_the_queue(translators, sentences, offline):
    """A translation that has passed the queue's check holds a place until its text is sent to the engine: with
    one place left and one request still sending its body, the next is refused at once (429 before its body is
    read, so a body that is not JSON gets the 429); once the first is sent and answered, the place is free again.
    The queue is shown one short of full by the C++ engine's stats, as in the test above."""
    engine = AsyncEngine(max_queue=4)
    real = engine._engine

    class OneLeft:
        def stats(self):
            return {**real.stats(), "queue_depth": engine.max_queue - 1}

        def __getattr__(self, name):
            return getattr(real, name)

    text = sentences[MARIAN][0]
    body = json.dumps({"texts": [text], **GREEDY}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/translate", "raw_path": b"/v1/translate", "root_path": "", "query_string": b"",
             "headers": [(b"host", b"serve.test"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())], "client": ("127.0.0.1", 1), "server": None}

    async def run():
        app = create_app(engine)
        arrived, calls, sent = asyncio.Event(), [], []

        async def receive():   # the body comes when `arrived` is set; after it, nothing until the task ends
            calls.append(None)
            if len(calls) > 1:
                await asyncio.Event().wait()
            await arrived.wait()
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        first = asyncio.ensure_future(app(dict(scope), receive, send))
        while not calls:   # it has passed the check and waits for its body
            await asyncio.sleep(0.001)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test") as client:
            refused = await client.post("/v1/translate", content=b"{not json",
                                        headers={"content-type": "application/json"})
            assert refused.status_code == 429 and refused.json()["error"].startswith("queue: ")
            arrived.set()
            await asyncio.wait_for(first, HANG)
            assert sent[0]["status"] == 200
            assert json.loads(sent[1]["body"]) == {"translations": [offline(MARIAN, text, beam_size=1)]}
            assert app.state.serving.entering == 0
            assert (await client.post("/v1/translate", content=b"{not json",
                                      headers={"content-type": "application/json"})).status_code == 400

    try:
        engine.add_translator(MARIAN, translators[MARIAN])
        engine._engine = OneLeft()
        asyncio.run(asyncio.wait_for(run(), HANG))
    finally:
        engine._engine = real
        engine.close()


def test_async_translate_is_a_future_refused_by_the_call_and_freed_when_cancelled(translators, sentences, offline):
    """AsyncEngine.translate returns a Future: what refuses a request (here the queue, full at a call's second text)
    is raised by the call itself, and the texts it had sent are cancelled; cancelling the Future cancels (and
    counts) each text not finished; blank texts are answered "" without the engine."""
    from ctransformer import _core
    from ctransformer.serve import QueueFull

    engine = AsyncEngine(max_queue=64, max_rows=4)
    real = engine._engine

    class FullAtTheSecond:   # the C++ engine as it looks when the queue fills after one more request
        def __init__(self):
            self.sent, self.cancelled = [], []

        def submit(self, *args, **kwargs):
            if self.sent:
                raise _core.serve.QueueFull("Engine.submit: the queue is full (1 requests waiting)")
            self.sent.append(real.submit(*args, **kwargs))
            return self.sent[-1]

        def cancel(self, rid):
            self.cancelled.append(rid)
            return real.cancel(rid)

        def __getattr__(self, name):
            return getattr(real, name)

    async def run():
        texts = sentences[MARIAN][:3]
        done = engine.translate([texts[0], "", texts[1]], beam_size=1)
        assert isinstance(done, asyncio.Future)
        assert await done == [offline(MARIAN, texts[0], beam_size=1), "", offline(MARIAN, texts[1], beam_size=1)]
        assert await engine.translate(["", " "]) == ["", ""]

        engine._engine = full = FullAtTheSecond()
        with pytest.raises(QueueFull):
            engine.translate(texts[:2], beam_size=1)
        assert full.cancelled == full.sent and len(full.sent) == 1
        engine._engine = real

        async def settled(ended):
            # Every request sent has ended, and no row or place is held. A cancelled request ends at the engine's next
            # step, as cancelled, unless the engine finished it first (a machine that stalls this thread): both count.
            def done():
                stats = real.stats()
                return not stats["rows_in_use"] and not stats["queue_depth"] and \
                    stats["cancelled_total"] + stats["finished_total"] == ended
            await async_wait_until(done, f"{ended} requests ended and no row in use")
            return real.stats()["cancelled_total"] + real.stats()["finished_total"]

        before = await settled(2 + len(full.sent))   # the two texts translated, and the one cancelled
        waiting = engine.translate(texts * 4, beam_size=4)   # 12 beams of 4 on 4 rows: 11 wait in the queue
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.sleep(0)   # the Future's callbacks run
        assert not engine._waiting
        assert await settled(before + 12) == before + 12

    try:
        engine.add_translator(MARIAN, translators[MARIAN])
        asyncio.run(asyncio.wait_for(run(), HANG))
    finally:
        engine._engine = real
        engine.close()


def test_ready_is_503_until_the_models_are_loaded(translators):
    """The command line loads its models in the app's startup: until it returns, /ready and the translation
    endpoints answer 503 while /health answers; a startup that fails leaves /ready at 503 naming the error."""
    from starlette.testclient import TestClient

    release = threading.Event()

    async def load():
        await asyncio.to_thread(release.wait, HANG)
        engine.add_translator(MARIAN, translators[MARIAN])

    async def fail():
        raise ValueError("no such model")

    engine = AsyncEngine()   # closed by the app's shutdown
    with TestClient(create_app(engine, startup=load)) as client:
        loading = [client.get("/ready"), client.post("/v1/translate", json={"texts": ["a"]}), client.get("/health")]
        release.set()
        wait_until(lambda: client.get("/ready").status_code == 200, "/ready answering 200")
        loaded = client.post("/v1/translate", json={"texts": ["Hallo"]})
    assert [r.status_code for r in loading] == [503, 503, 200] and loading[0].json() == {"status": "loading"}
    assert loading[1].json()["error"].startswith("server: loading")
    assert loaded.status_code == 200
    with TestClient(create_app(AsyncEngine(), startup=fail)) as client:
        wait_until(lambda: "failed" in client.get("/ready").json()["status"], "/ready saying the startup failed")
        assert client.get("/ready").json() == {"status": "failed: no such model"}


def test_draining_refuses_new_requests_and_answers_the_accepted(translators, sentences, offline):
    engine = AsyncEngine(max_queue=64, max_rows=2)
    engine.add_translator(MARIAN, translators[MARIAN])
    app = create_app(engine)
    texts = sentences[MARIAN][:20]

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test",
                                     timeout=HANG) as client:
            accepted = [asyncio.ensure_future(client.post("/v1/translate", json={"texts": [t], **GREEDY}))
                        for t in texts]
            while engine.stats()["requests_total"] < len(texts):   # every one is in the engine
                await asyncio.sleep(0.001)
            drained = asyncio.ensure_future(app.state.drain(HANG))
            await asyncio.sleep(0)
            during = await asyncio.gather(client.get("/ready"), client.post("/v1/translate", json={"texts": ["x"]}),
                                          client.get("/health"))
            return await asyncio.gather(*accepted), during, await drained

    try:
        answers, (ready, refused, health), drained = asyncio.run(asyncio.wait_for(run(), HANG))
    finally:
        engine.close()
    assert drained is True
    assert ready.status_code == 503 and ready.json() == {"status": "draining"}
    assert refused.status_code == 503 and refused.json()["error"].startswith("server")
    assert health.status_code == 200
    assert [a.json() for a in answers] == [{"translations": [offline(MARIAN, t, beam_size=1)]} for t in texts]


# --- the command in a subprocess ------------------------------------------------------------------------------

def _die_with_parent():   # a server left by a killed test run gets SIGTERM and drains (Linux)
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


class Server:
    """`python -m ctransformer.serve.cli ARGS --port 0` on 127.0.0.1: its URL once it prints that it listens."""

    def __init__(self, tmp_path, *args):
        self.log_path = tmp_path / "server.log"
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen([sys.executable, "-m", "ctransformer.serve.cli", "--host", "127.0.0.1",
                                         "--port", "0", *args], stdout=self.log, stderr=subprocess.STDOUT,
                                        preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.started = time.monotonic()
        while True:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.output())
            if found:
                self.url = found.group(1)
                break
            if self.process.poll() is not None or time.monotonic() - self.started > HANG:
                self.stop()
                pytest.fail(f"ctransformer-serve did not start:\n{self.output()}")
            time.sleep(0.05)

    def output(self):
        return self.log_path.read_text()

    def stop(self):
        """SIGTERM, then the exit code (SIGKILL after HANG seconds: no server outlives its test)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            pytest.fail(f"ctransformer-serve did not stop within {HANG} s of SIGTERM:\n{self.output()}")
        finally:
            self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_files):
    marian, checkpoint = model_files
    running = Server(tmp_path_factory.mktemp("server"), "--model", marian, "--model", f"{TINY}={checkpoint}")
    yield running
    assert running.stop() == 0


def _rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024


def metric(text, name):
    found = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1))


async def _requests(url, bodies, timeout=HANG):
    """The answers to POST /v1/translate of each body, all at once, one connection each."""
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        return await asyncio.gather(*(client.post("/v1/translate", json=body) for body in bodies),
                                    return_exceptions=True)


def test_a_real_server_answers_200_concurrent_requests_as_offline_four_times(server, sentences, offline):
    with httpx.Client(base_url=server.url, timeout=HANG) as client:
        assert client.get("/ready").status_code == 200
        models = [(m["id"], m["precision"]) for m in client.get("/v1/models").json()["data"]]
        assert models == [(MARIAN, "float32"), (TINY, "float32")]   # names from the folder and NAME=
        assert client.get("/languages").json() == [{"code": "de", "name": "German", "targets": ["en"]}]
    texts = (sentences[MARIAN] * 5)[:192]   # with the 8 below, 200 requests at once (the load)
    bodies = [{"texts": [t], **GREEDY} for t in texts] + [{"texts": [t], "model": TINY} for t in sentences[TINY][:8]]
    expected = [offline(MARIAN, t, beam_size=1) for t in texts] + [offline(TINY, t) for t in sentences[TINY][:8]]
    rss = []
    for _ in range(4):   # the same load four times: no answer lost or swapped, and memory flat after warming up
        answers = asyncio.run(asyncio.wait_for(_requests(server.url, bodies), HANG))
        assert [a.json() if isinstance(a, httpx.Response) else repr(a) for a in answers] == \
            [{"translations": [e]} for e in expected]
        rss.append(_rss_bytes(server.process.pid))
    # Measured: +0.3-0.6 MiB a round at first, then flat (70 MiB after 60 rounds); a leak of 25 kB a request
    # would add 4 MiB over the last two rounds.
    assert rss[3] - rss[1] < 4 * 2**20, [r / 2**20 for r in rss]


@pytest.fixture(scope="module")
def slow_marian(tmp_path_factory):
    """A Marian directory whose translations are long and slow enough to leave halfway: base-sized layers,
    512 positions, the end id pushed down so rows run to the 400-token limit (about a second alone), and the
    pieces that start a word pushed up so the stream has words to send."""
    import torch

    path = tmp_path_factory.mktemp("slow") / "slow"
    hf = write_marian_dir(path, seed=1, d_model=256, n_layers=3, d_inner=1024, n_position=512)
    pad = hf.config.pad_token_id
    vocab = json.loads((path / "vocab.json").read_text())
    _lively(hf, pad)
    with torch.no_grad():
        hf.final_logits_bias[0, 0] -= 5.0
        hf.final_logits_bias[0, [i for piece, i in vocab.items() if piece.startswith("\u2581")]] += 3.0
    hf.save_pretrained(str(path))
    write_generation(path, pad, {"num_beams": 1, "max_length": 400})
    return str(path)


def test_clients_that_leave_are_cancelled_and_free_their_rows(tmp_path, slow_marian):
    """Four streams; two clients close theirs after two pieces, and a fifth client gives up on a plain request
    once the streams have begun: the engine counts exactly those three cancelled, the other two streams run to their
    end (their pieces joining to their result), and no row stays in use. A client leaves on what it has seen, never
    after a time; each translation runs to 400 tokens (slow_marian), far more steps than a client takes to leave."""
    running = Server(tmp_path, "--model", slow_marian)
    text = " ".join(multi30k("val").src[:12])   # a long source: up to 1.5 x its subwords + 10 tokens out

    begun, streams_begun = set(), None   # the streams that have had a piece; set when all four have

    async def stream(client, leave):
        async with client.stream("POST", "/v1/translate", json={"texts": [text], "stream": True}) as answer:
            assert answer.status_code == 200
            got = []
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    got.append(json.loads(line[len("data: "):]))
                    begun.add(id(got))
                    if len(begun) == 4:
                        streams_begun.set()
                    if leave and len(got) == 2:
                        return None
            return got

    async def give_up(client):
        plain = asyncio.ensure_future(client.post("/v1/translate", json={"texts": [text]}))
        await streams_begun.wait()
        metrics = None
        while metrics is None or metric(metrics, "ctransformer_requests_total") < 5:   # the engine has it too
            metrics = (await client.get("/metrics")).text
        assert not plain.done()
        plain.cancel()   # the client closes its connection

    async def run():
        nonlocal streams_begun
        streams_begun = asyncio.Event()
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=running.url, timeout=HANG, limits=limits) as client:
            *finished, _ = await asyncio.gather(*(stream(client, leave) for leave in (True, False, True, False)),
                                                give_up(client))
            text = None   # the engine frees the rows at its next step; the counters say so soon after

            async def freed():
                nonlocal text
                text = (await client.get("/metrics")).text
                return metric(text, "ctransformer_rows_in_use") == 0
            deadline = time.monotonic() + HANG
            while not await freed():
                assert time.monotonic() < deadline, f"rows still in use after {HANG} s"
                await asyncio.sleep(0.01)
            return finished, text

    try:
        (left, whole, _, other), metrics = asyncio.run(asyncio.wait_for(run(), HANG))
    finally:
        code = running.stop()
    assert code == 0, running.output()
    assert metric(metrics, "ctransformer_cancelled_total") == 3
    assert metric(metrics, "ctransformer_rows_in_use") == 0
    for got in (whole, other):
        pieces = [e["text"] for e in got[:-1]]
        assert got[-1]["done"] and "".join(pieces) == got[-1]["translation"] and len(pieces) > 2
    assert whole == other


class DevTools:
    """Headless Chromium driven over its DevTools pipe (--remote-debugging-pipe: commands go in on its fd 3 and
    answers come out on its fd 4, JSON messages ended by NUL). --dump-dom with --virtual-time-budget is not enough
    here: virtual time does not wait for a streamed body, so the page is dumped before the words arrive."""

    def __init__(self, browser):
        import fcntl

        commands, self.commands = os.pipe()
        self.answers, answers = os.pipe()
        # Above fd 4, so that moving them to 3 and 4 in the child cannot overwrite one with the other.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (commands, answers)]
        for fd in (commands, answers):
            os.close(fd)

        def pipes_to_3_and_4():
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)
            _die_with_parent()

        self.process = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                         "--remote-debugging-pipe", "about:blank"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=False,
                                        preexec_fn=pipes_to_3_and_4)
        for fd in high:
            os.close(fd)
        self.buffer, self.next_id = b"", 0

    def call(self, method, params=None, session=None, timeout=HANG):
        """The result of one DevTools command (a RuntimeError with its message if it failed)."""
        import select

        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self.next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                raise TimeoutError(f"chromium did not answer {method} in {timeout} s")
            chunk = os.read(self.answers, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self.buffer += chunk

    def open(self, url, width=1000, height=520):
        """A session on a new page of `url`, at that window size."""
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session)
        return session

    def evaluate(self, session, expression, timeout=HANG):
        """The value of a JavaScript expression (a promise is awaited); tried again while the page navigates."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                        "returnByValue": True}, session, timeout)
                if "exceptionDetails" not in result:
                    return result["result"].get("value")
                failure = result["exceptionDetails"]
            except RuntimeError as error:   # the context went with a navigation
                failure = error
            if time.monotonic() > deadline:
                raise RuntimeError(f"chromium could not evaluate {expression[:60]!r}: {failure}")
            time.sleep(0.05)

    def close(self):
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=5)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        for fd in (self.commands, self.answers):
            os.close(fd)


# What the page shows once it has translated (data-state "done" or "error"), waiting up to HANG seconds.
_PAGE_DONE = """new Promise((resolve, reject) => {
  const started = Date.now();
  const look = () => {
    const state = document.body && document.body.dataset.state;
    if (state === "done" || state === "error") {
      resolve({state, lines: [...document.querySelectorAll("#output .line")].map((e) => e.textContent),
               status: document.getElementById("status").textContent,
               models: [...document.querySelectorAll("#model option")].map((e) => e.value),
               precisions: [...document.querySelectorAll("#precision option")].map((e) => e.value)});
    } else if (Date.now() - started > HANG_MS) reject(new Error("the page did not finish: " + state));
    else setTimeout(look, 20);
  };
  look();
})""".replace("HANG_MS", str(int(HANG * 1000)))


def test_the_page_translates_in_headless_chromium(server, sentences, offline):
    """The page at / fills its selects from /v1/models and streams each line of its text box: what it shows is
    the greedy translation of each line. CTRANSFORMER_SERVE_SCREENSHOT=FILE saves a picture of it (docs/serve.md's
    images/serve-ui.png was made so)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed: scripts/setup.sh test installs it (apt-get install chromium)")
    texts = [t for t in sentences[MARIAN] if offline(MARIAN, t, beam_size=1)][:3]
    url = f"{server.url}/?" + urllib.parse.urlencode({"text": "\n".join(texts), "model": MARIAN, "translate": "1"})
    chromium = DevTools(browser)
    try:
        session = chromium.open(url)
        shown = chromium.evaluate(session, _PAGE_DONE, timeout=HANG + 30)
        if os.environ.get("CTRANSFORMER_SERVE_SCREENSHOT"):
            picture = chromium.call("Page.captureScreenshot", {"format": "png"}, session)["data"]
            with open(os.environ["CTRANSFORMER_SERVE_SCREENSHOT"], "wb") as f:
                f.write(base64.b64decode(picture))
    finally:
        chromium.close()
    assert shown["state"] == "done", shown
    assert shown["lines"] == [offline(MARIAN, t, beam_size=1) for t in texts]
    assert shown["models"] == [MARIAN, TINY] and shown["precisions"] == ["float32"]


def test_a_tiny_queue_gives_429s_and_answers_the_rest(tmp_path, slow_marian, sentences):
    """--max-queue 2 --max-rows 2 under 40 requests at once, each a translation 400 tokens long (slow_marian): two
    decode, two wait, and the rest arrive long before a row is free (hundreds of steps; sending takes a few
    milliseconds), so they get 429s with Retry-After; the answers equal the offline translation. int8, whose rows come
    out bit for bit in any batch (the answered ones are decoded in batches of one or two)."""
    translator = load_translator(slow_marian)[0]
    translator.model = ct.quantize_dynamic(translator.model, "int8")
    text = sentences[MARIAN][0]
    expected = translator.translate([text], beam_size=1)[0]
    running = Server(tmp_path, "--model", slow_marian, "--precision", "int8", "--max-queue", "2", "--max-rows", "2")
    try:
        answers = asyncio.run(asyncio.wait_for(_requests(running.url, [{"texts": [text], **GREEDY}] * 40), HANG))
    finally:
        code = running.stop()
    assert code == 0, running.output()
    statuses = [a.status_code if isinstance(a, httpx.Response) else repr(a) for a in answers]
    assert set(statuses) == {200, 429}, statuses
    for answer in answers:
        if answer.status_code == 429:
            assert int(answer.headers["retry-after"]) >= 1 and answer.json()["error"].startswith("queue")
        else:
            assert answer.json() == {"translations": [expected]}


def assert_answered_or_refused(texts, answers, offline):
    """An overload's answers: each a 429 (with Retry-After, the queue named) or the text's offline greedy
    translation, and nothing else. Returns the statuses."""
    statuses = [a.status_code if isinstance(a, httpx.Response) else repr(a) for a in answers]
    assert set(statuses) <= {200, 429}, statuses
    for text, answer in zip(texts, answers):
        if answer.status_code == 429:
            assert int(answer.headers["retry-after"]) >= 1 and answer.json()["error"].startswith("queue")
        else:
            assert answer.json() == {"translations": [offline(MARIAN, text, beam_size=1)]}
    return statuses


def test_sigterm_under_load_loses_no_accepted_request(tmp_path, model_files, sentences, offline):
    """SIGTERM once the engine holds requests: every request the server accepted is answered (200, as offline),
    later ones get 503 or find the port closed (never another error), /ready answers 503, and the process
    exits 0."""
    running = Server(tmp_path, "--model", model_files[0], "--max-rows", "2", "--shutdown-timeout", str(HANG))
    texts = sentences[MARIAN][:40]
    try:
        async def terminate_under_load():
            limits = httpx.Limits(max_connections=len(texts) + 4, max_keepalive_connections=0)
            async with httpx.AsyncClient(base_url=running.url, timeout=HANG, limits=limits) as client:
                sent = [asyncio.ensure_future(client.post("/v1/translate", json={"texts": [t], **GREEDY}))
                        for t in texts]
                while metric((await client.get("/metrics")).text, "ctransformer_requests_total") < 10:
                    await asyncio.sleep(0.005)
                running.process.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + HANG
                while True:   # /ready leaves 200 as soon as the signal is handled
                    try:
                        ready = (await client.get("/ready")).status_code
                    except httpx.TransportError:   # refused, or accepted by the kernel as uvicorn stopped
                        ready = "port closed"        # listening and closed unread: as for `sent` below
                    if ready != 200 or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.005)
                return await asyncio.gather(*sent, return_exceptions=True), ready

        answers, ready = asyncio.run(asyncio.wait_for(terminate_under_load(), HANG))
        code = running.process.wait(timeout=HANG)
    finally:
        running.stop()
    assert code == 0, running.output()
    assert ready in (503, "port closed"), ready
    answered = 0
    for text, answer in zip(texts, answers):
        if isinstance(answer, httpx.Response) and answer.status_code == 200:
            assert answer.json() == {"translations": [offline(MARIAN, text, beam_size=1)]}
            answered += 1
        else:   # refused: 503 while draining, or the connection closed before the app read the request (the port
            # closed, or a connection still in the listen backlog at exit): never another status
            assert isinstance(answer, httpx.TransportError) or answer.status_code == 503, answer
    assert answered >= 10
    assert "draining" in running.output()


def test_the_command_line_refuses_bad_arguments(tmp_path, capsys):
    from ctransformer.serve.cli import main

    for argv, message in ((["--model", str(tmp_path / "nope")], "no such file"),
                          (["--model", str(tmp_path), "--precision", "float16"], "--precision"),
                          (["--model", f"a={tmp_path}", "--model", f"a={tmp_path}"], "two models are named 'a'"),
                          (["--model", str(tmp_path), "--max-queue", "0"], "--max-queue"),
                          (["--model", str(tmp_path), "--nice", "20"], "--nice must be from 0 to 19"),
                          (["--model", str(tmp_path), "--nice", "-1"], "--nice must be from 0 to 19"),
                          (["--model", str(tmp_path), "--languages", "de"], "--languages de: expected SRC:TGT"),
                          (["--model", str(tmp_path), "--lane-rows", "-1"], "--lane-rows must be >= 0"),
                          (["--model", str(tmp_path), "--body-timeout", "0"], "--body-timeout must be above 0")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err, argv
    junk = tmp_path / "notes.txt"
    junk.write_text("not a model")
    # it listened, could not load, and said why (--nice 0: the pool's workers of this process keep their priority)
    assert main(["--model", str(junk), "--port", "0", "--nice", "0"]) == 1
    assert "could not load the models" in capsys.readouterr().err
    assert parse_model(f"de-en={tmp_path}") == ("de-en", str(tmp_path))
    assert parse_model(str(tmp_path / "run.ckpt")) == ("run", str(tmp_path / "run.ckpt"))
    assert parse_model(str(tmp_path) + "/") == (tmp_path.name, str(tmp_path) + "/")


def test_a_language_pair_comes_from_the_name_or_languages():
    assert language_pair("de-en") == ("de", "en") and language_pair("opus-mt-en-zh") == ("en", "zh")
    assert language_pair("pt_BR-en") == ("pt_BR", "en")
    for name in ("tiny", "multi30k", "opus-mt-en-ROMANCE", "de", "de-en-fr", "", None):
        assert language_pair(name) is None, name
    assert parse_languages(["de:en"], ["m"]) == {"m": ("de", "en")}
    assert parse_languages(["a=fr:en", "b=de:en"], ["a", "b"]) == {"a": ("fr", "en"), "b": ("de", "en")}
    for values, message in ((["de:en"], "name the model"), (["c=de:en"], "no --model is named 'c'"),
                            (["a=de"], "expected SRC:TGT"), (["a=German:English"], "expected SRC:TGT")):
        with pytest.raises(ValueError, match=message):
            parse_languages(values, ["a", "b"])


def test_libretranslate_clients_see_the_pairs_and_are_routed_by_them(tmp_path, model_files, sentences, offline):
    """LibreTranslate's own client (libretranslatepy) against the command: one Marian directory served under a name
    that says its pair (de-en) and under one that says none, given a pair by --languages (fr:en). /languages lists
    both sources with their names; a translation goes to the model of its pair; a pair nobody serves is a 400, as
    LibreTranslate answers it, and so is source "auto" with two sources served (nothing is detected)."""
    import urllib.error

    libretranslatepy = pytest.importorskip("libretranslatepy")
    marian = model_files[0]
    running = Server(tmp_path, "--model", f"de-en={marian}", "--model", f"other={marian}", "--languages",
                     "other=fr:en")
    try:
        client = libretranslatepy.LibreTranslateAPI(running.url)
        assert client.languages(timeout=HANG) == [{"code": "de", "name": "German", "targets": ["en"]},
                                                  {"code": "fr", "name": "French", "targets": ["en"]}]
        text = sentences[MARIAN][0]
        assert client.translate(text, "de", "en", timeout=HANG) == offline(MARIAN, text, beam_size=1)
        assert client.translate(text, "fr", "en", timeout=HANG) == offline(MARIAN, text, beam_size=1)
        for source, target, field in (("es", "en", "source, target"), ("de", "fr", "source, target"),
                                      ("auto", "en", "source")):
            with pytest.raises(urllib.error.HTTPError) as refused:
                client.translate(text, source, target, timeout=HANG)
            assert refused.value.code == 400
            assert json.loads(refused.value.read())["error"].startswith(f"{field}:"), (source, target)
        with httpx.Client(base_url=running.url, timeout=HANG) as http:
            models = http.get("/v1/models").json()["data"]
            settings = http.get("/frontend/settings").json()
        assert [(m["id"], m["source_language"], m["target_language"]) for m in models] == \
            [("de-en", "de", "en"), ("other", "fr", "en")]
        assert settings == {"charLimit": 5000, "frontendTimeout": 500, "apiKeys": False, "keyRequired": False,
                            "suggestions": False, "filesTranslation": True,
                            "supportedFilesFormat": [".txt", ".html", ".htm"],
                            "language": {"source": {"code": "auto", "name": "Auto Detect"},
                                         "target": {"code": "en", "name": "English"}}}
    finally:
        code = running.stop()
    assert code == 0, running.output()


def test_a_body_that_stops_coming_gets_408_and_frees_its_place(engine):
    """A request that declares 1,000 bytes and sends 2: after body_timeout without a part (nginx's
    client_body_timeout) it gets 408 with Connection: close, and the place it held in the queue is free again.
    What is asserted is that the answer comes, not when."""
    app = create_app(engine, body_timeout=0.2)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/translate", "raw_path": b"/v1/translate", "root_path": "", "query_string": b"",
             "headers": [(b"host", b"serve.test"), (b"content-type", b"application/json"),
                         (b"content-length", b"1000")], "client": ("127.0.0.1", 1), "server": None}

    async def run():
        parts = [{"type": "http.request", "body": b'{"', "more_body": True}]
        sent = []

        async def receive():
            if parts:
                return parts.pop()
            await asyncio.Event().wait()   # the rest never comes

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
        return sent

    sent = asyncio.run(asyncio.wait_for(run(), HANG))
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"].startswith("body: 2 bytes came, then nothing for 0.2 s")
    assert app.state.serving.entering == 0
