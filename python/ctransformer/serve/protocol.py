"""The requests ``ctransformer-serve`` takes, parsed and checked once at the edge into typed objects (as vLLM's
server parses into its protocol models and TGI's router validates once): ``TranslateRequest`` (``/v1/translate``),
``LibreTranslateRequest`` (``/translate``), ``CompletionRequest`` (``/v1/completions``) and ``ChatRequest``
(``/v1/chat/completions``). Every refusal is a 400 (413 past a limit) whose message starts with the field at fault.

Dataclasses checked by hand, not pydantic models: the checks are the ones the server always made, with their
messages (``field: expected ..., got ...``), and either way parsing is a small part of the server's Python per
request (docs/serve.md, "The server's own Python per request", has both measured). serve/openapi.py describes the
bodies from the same field lists."""
import dataclasses
import math
from typing import List, Optional, Tuple, Union

from ctransformer import precision as _precision
from ctransformer.serve.engine import MAX_LOGPROBS, Sampling
from ctransformer.serve.http_io import HTTPError, describe

PRECISIONS = _precision.SERVING
MAX_CHOICES = 16   # n: the choices of one request (each a request in the engine's queue)
# The sampling fields both of OpenAI's endpoints take (their meanings: the engine's Sampling).
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "logit_bias", "presence_penalty",
                   "frequency_penalty", "logprobs")
COMPLETION_FIELDS = ("prompt", "model", "precision", *SAMPLING_FIELDS, "echo", "stream", "stream_options", "n", "user",
                     "timeout_ms", "api_key")
CHAT_FIELDS = ("messages", "model", "precision", *SAMPLING_FIELDS, "max_completion_tokens", "top_logprobs", "stream",
               "stream_options", "n", "user", "timeout_ms", "api_key")
# Fields OpenAI defines that this server does not honour: taken only with a value that asks for nothing (the last one
# listed is named in the refusal), refused by name otherwise.
NEUTRAL = {"best_of": (None, 1), "suffix": (None, ""), "tools": (None, []), "tool_choice": (None, "none"),
           "response_format": (None, {"type": "text"}), "parallel_tool_calls": (None, False, True),
           "store": (None, False), "metadata": (None, {}), "service_tier": (None, "auto", "default")}
# A chat's roles (developer is OpenAI's newer name for system), as the plain template (openai_api.chat_prompt) and a
# model's own template read them.
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
V1_FIELDS = ("texts", "model", "precision", "beam_size", "max_decoding_length", "length_penalty", "stream",
             "timeout_ms", "api_key")
LIBRETRANSLATE_FORMATS = ("text", "html")


@dataclasses.dataclass
class TranslateOptions:
    """A translation's options (None: the served translator's own)."""
    model: Optional[str] = None
    precision: Optional[str] = None
    beam_size: Optional[int] = None
    max_decoding_length: Optional[int] = None
    length_penalty: Optional[float] = None
    timeout_ms: Optional[float] = None

    def engine_options(self):
        """The keywords of AsyncEngine.translate (spelled out: dataclasses.asdict copies deeply)."""
        return {"model": self.model, "precision": self.precision, "beam_size": self.beam_size,
                "max_decoding_length": self.max_decoding_length, "length_penalty": self.length_penalty,
                "timeout_ms": self.timeout_ms}


@dataclasses.dataclass
class TranslateRequest:
    """POST /v1/translate: texts translated with the options, whole or (one text) streamed."""
    texts: List[str]
    options: TranslateOptions
    stream: bool = False
    api_key: Optional[str] = None

    @classmethod
    def parse(cls, data, limits):
        unknown = sorted(set(data) - set(V1_FIELDS))
        if unknown:
            raise HTTPError(400, f"{unknown[0]}: not a field of /v1/translate (fields: {', '.join(V1_FIELDS)})")
        if "texts" not in data:
            raise HTTPError(400, "texts: required (a list of strings)")
        if isinstance(data["texts"], str):
            raise HTTPError(400, "texts: expected a list of strings, got a string (wrap it in a list)")
        texts = texts_of(data["texts"], "texts", limits)
        options = translate_options(data, limits)
        stream = data.get("stream", False)
        if not isinstance(stream, bool):
            raise HTTPError(400, f"stream: expected true or false, got {describe(stream)}")
        return cls(texts, options, stream, data.get("api_key"))


@dataclasses.dataclass
class LibreTranslateRequest:
    """POST /translate (LibreTranslate's): q (a text, or a list: translatedText has its shape), the languages, the
    format, and the beam's alternatives wanted."""
    q: Union[str, List[str]]
    texts: List[str]
    source: str = "auto"
    target: Optional[str] = None
    format: str = "text"
    alternatives: int = 0
    api_key: Optional[str] = None

    @classmethod
    def parse(cls, data, limits):
        if "q" not in data:
            raise HTTPError(400, "q: required (a string or a list of strings)")
        texts = texts_of(data["q"], "q", limits)
        source, target = languages(data)
        fmt = data.get("format") or "text"
        if not isinstance(fmt, str):
            raise HTTPError(400, f"format: expected a string, got {describe(fmt)}")
        if fmt not in LIBRETRANSLATE_FORMATS:
            raise HTTPError(400, f"format: expected 'text' or 'html', got {describe(fmt)}")
        alternatives = data.get("alternatives")
        if isinstance(alternatives, str) and alternatives.isdigit():   # a form's fields are strings
            alternatives = int(alternatives)
        if alternatives is not None and (isinstance(alternatives, bool) or not isinstance(alternatives, int)
                                         or not 0 <= alternatives < limits.max_beam_size):
            raise HTTPError(400, f"alternatives: expected an integer from 0 to {limits.max_beam_size - 1}, got "
                                 f"{describe(alternatives)}")
        if alternatives and fmt == "html":
            raise HTTPError(400, "alternatives: not with format html (a page's texts are translated apart)")
        return cls(data["q"], texts, source, target, fmt, alternatives or 0, data.get("api_key"))


def languages(data):
    """LibreTranslate's source ("auto" when not given) and target (None when not given)."""
    for field in ("source", "target"):
        if data.get(field) is not None and not isinstance(data[field], str):
            raise HTTPError(400, f"{field}: expected a string, got {describe(data[field])}")
    return data.get("source") or "auto", data.get("target")


@dataclasses.dataclass
class GenerationRequest:
    """What completions and chats share: the model's fields, the sampling (the engine's Sampling, made once here),
    the stream's, n and user. (Every field has a default, so that the requests below add theirs after these on
    Python 3.9, which has no keyword-only dataclass fields.)"""
    sampling: Sampling = dataclasses.field(default_factory=Sampling)
    model: Optional[str] = None
    precision: Optional[str] = None
    timeout_ms: Optional[float] = None
    stream: bool = False
    include_usage: bool = False
    n: int = 1
    user: Optional[str] = None
    api_key: Optional[str] = None


@dataclasses.dataclass
class CompletionRequest(GenerationRequest):
    """POST /v1/completions (OpenAI's legacy completions): prompts continued by a GPT; echo leads each answer with
    its prompt."""
    prompts: List[str] = dataclasses.field(default_factory=list)
    echo: bool = False

    @classmethod
    def parse(cls, data, limits):
        check_fields(data, COMPLETION_FIELDS, "/v1/completions")
        if "prompt" not in data:
            raise HTTPError(400, "prompt: required (a string or a list of strings)")
        prompts = texts_of(data["prompt"], "prompt", limits)
        if any(not p for p in prompts):
            raise HTTPError(400, "prompt: a prompt is empty (it needs one character at least)")
        common = generation_common(data, limits)
        echo = data.get("echo")   # the legacy completions' echo: the prompt, then its continuation
        if echo is not None and not isinstance(echo, bool):
            raise HTTPError(400, f"echo: expected true or false, got {describe(echo)}")
        if echo and common["sampling"].logprobs is not None:
            raise HTTPError(400, "echo: not with logprobs (the prompt's log-probabilities are not computed)")
        return cls(prompts=prompts, echo=bool(echo), **common)


@dataclasses.dataclass
class ChatRequest(GenerationRequest):
    """POST /v1/chat/completions: messages as (role, text), roles system, user and assistant. A GPT continues them
    with the sampling (max_tokens from max_completion_tokens or max_tokens; up to the server's limit without
    either); a translator translates the last user message and takes no sampling field (`given` names those sent)."""
    messages: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    given: Tuple[str, ...] = ()

    @classmethod
    def parse(cls, data, limits):
        check_fields(data, CHAT_FIELDS, "/v1/chat/completions")
        messages = messages_of(data.get("messages"), limits)
        given = data.get("max_completion_tokens")   # chat's newer name for max_tokens
        if given is not None and data.get("max_tokens") not in (None, given):
            raise HTTPError(400, "max_completion_tokens: differs from max_tokens (give one of them)")
        if given is None:
            given = data.get("max_tokens") if data.get("max_tokens") is not None else limits.max_new_tokens
        named = tuple(name for name in (*SAMPLING_FIELDS, "max_completion_tokens", "top_logprobs")
                      if data.get(name) not in (None, False)) + (("n",) if data.get("n") not in (None, 1) else ())
        return cls(messages=messages, given=named, **generation_common({**data, "max_tokens": given}, limits))


def generation_common(data, limits):
    """GenerationRequest's fields, checked: the model's, the sampling's, the stream's, n and user."""
    options = translate_options({k: v for k, v in data.items() if k in ("model", "precision", "timeout_ms")}, limits)
    stream = False if data.get("stream") is None else data["stream"]   # null: the default
    if not isinstance(stream, bool):
        raise HTTPError(400, f"stream: expected true or false, got {describe(stream)}")
    n = data.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES):
        raise HTTPError(400, f"n: expected an integer from 1 to {MAX_CHOICES}, got {describe(n)}")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise HTTPError(400, f"user: expected a string, got {describe(user)}")
    return dict(sampling=sampling_of(data, limits), model=options.model, precision=options.precision,
                timeout_ms=options.timeout_ms, stream=stream, include_usage=include_usage(data, stream), n=n or 1,
                user=user, api_key=data.get("api_key"))


def texts_of(value, field, limits):
    """A text or a list of them, each within the limits (413 past them), as a list."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise HTTPError(400, f"{field}: expected a list of strings, got {describe(value)}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise HTTPError(400, f"{field}[{i}]: expected a string, got {describe(text)}")
    if len(texts) > limits.max_texts:
        raise HTTPError(413, f"{field}: {len(texts)} texts, more than the limit of {limits.max_texts} per request")
    for i, text in enumerate(texts):
        if len(text) > limits.max_text_chars:
            raise HTTPError(413, f"{field}[{i}]: {len(text)} characters, more than the limit of "
                                 f"{limits.max_text_chars}")
        try:   # JSON may carry a lone surrogate (\ud800), which is no text the tokenizer can take
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPError(400, f"{field}[{i}]: holds a lone UTF-16 surrogate, not text") from None
    return texts


def translate_options(data, limits):
    def integer(name, low, high):
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
            raise HTTPError(400, f"{name}: expected an integer from {low} to {high}, got {describe(value)}")
        return value

    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise HTTPError(400, f"model: expected a string, got {describe(model)}")
    chosen = data.get("precision")
    if chosen is not None:
        try:
            chosen = _precision.canonical(chosen, PRECISIONS, "request")
        except ValueError:
            raise HTTPError(400, f"precision: expected one of {', '.join(PRECISIONS)}, got {describe(chosen)}") \
                from None
    return TranslateOptions(model=model, precision=chosen, beam_size=integer("beam_size", 1, limits.max_beam_size),
                            max_decoding_length=integer("max_decoding_length", 1, 65536),
                            length_penalty=_number(data, "length_penalty", 0, 100),
                            timeout_ms=_number(data, "timeout_ms", 0, 3_600_000, low_included=False))


def _number(data, name, low, high, low_included=True, default=None):
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            not (low <= value if low_included else low < value) or value > high:
        raise HTTPError(400, f"{name}: expected a number {'from' if low_included else 'above'} {low} to {high}, "
                             f"got {describe(value)}")
    return value


def check_fields(data, fields, endpoint):
    """Every field is one this endpoint takes; a field OpenAI defines that this server cannot honour is refused by
    name unless it asks for nothing (best_of 1, no tools), never ignored."""
    for name in sorted(data):
        if name in fields:
            continue
        if name in NEUTRAL and data[name] in NEUTRAL[name]:
            continue
        if name in NEUTRAL:
            raise HTTPError(400, f"{name}: not supported by this server (only {describe(NEUTRAL[name][-1])}), got "
                                 f"{describe(data[name])}")
        raise HTTPError(400, f"{name}: not a field this server's {endpoint} takes (fields: {', '.join(fields)})")


def messages_of(messages, limits):
    """[(role, text)] of a chat request's messages: system (developer), user and assistant ones, whose content is a
    string or a list of text parts."""
    if not isinstance(messages, list) or not messages:
        raise HTTPError(400, f"messages: expected a non-empty list of messages, got {describe(messages)}")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise HTTPError(400, f"messages[{i}]: expected an object, got {describe(message)}")
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise HTTPError(400, f"messages[{i}].role: expected one of {', '.join(CHAT_ROLES)}, got {describe(role)}")
        if isinstance(content, list):
            if not all(isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
                       for part in content):
                raise HTTPError(400, f"messages[{i}].content: only text parts are read "
                                     '([{"type": "text", "text": ...}])')
            content = "".join(part["text"] for part in content)
        if not isinstance(content, str):
            raise HTTPError(400, f"messages[{i}].content: expected a string, got {describe(content)}")
        texts_of([content], f"messages[{i}].content", limits)   # the limits of one text
        out.append((CHAT_ROLES[role], content))
    return out


def include_usage(data, stream):
    stream_options = data.get("stream_options")
    if stream_options is None:
        return False
    if not isinstance(stream_options, dict) or set(stream_options) - {"include_usage"} or \
            not isinstance(stream_options.get("include_usage", False), bool):
        raise HTTPError(400, f"stream_options: expected {{\"include_usage\": true or false}}, got "
                             f"{describe(stream_options)}")
    if not stream:
        raise HTTPError(400, "stream_options: only with stream true")
    return stream_options.get("include_usage", False)


def sampling_of(data, limits):
    """The request's Sampling (the engine's options, checked there), within the server's limit on max_tokens
    (default 16) and OpenAI's temperature range (0 to 2; default 1). A refusal names the field first."""
    max_tokens = data.get("max_tokens")
    max_tokens = 16 if max_tokens is None else max_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or \
            not 1 <= max_tokens <= limits.max_new_tokens:
        raise HTTPError(400, f"max_tokens: expected an integer from 1 to {limits.max_new_tokens}, got "
                             f"{describe(max_tokens)}")
    temperature = _number(data, "temperature", 0, 2, default=1.0)
    try:
        return Sampling(max_tokens=max_tokens, temperature=temperature, top_k=data.get("top_k"),
                        top_p=data.get("top_p"), seed=data.get("seed"), stop=data.get("stop"),
                        logit_bias=data.get("logit_bias"), presence_penalty=data.get("presence_penalty"),
                        frequency_penalty=data.get("frequency_penalty"), logprobs=logprobs_of(data))
    except ValueError as error:   # "NAME must ..." or "NAME: ...": the field first, as every 400 here
        name, _, rest = str(error).partition(" ")
        raise HTTPError(400, str(error) if name.endswith(":") else f"{name}: {rest}") from None


def logprobs_of(data):
    """The alternatives a token's logprobs list, or None for no logprobs: completions' logprobs (an integer), or
    chat's logprobs (true or false) with top_logprobs."""
    given, top = data.get("logprobs"), data.get("top_logprobs")
    if "messages" not in data:   # the legacy completions: logprobs is the count itself (Sampling checks it)
        return given
    if given is not None and not isinstance(given, bool):
        raise HTTPError(400, f"logprobs: expected true or false, got {describe(given)}")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_LOGPROBS):
        raise HTTPError(400, f"top_logprobs: expected an integer from 0 to {MAX_LOGPROBS}, got {describe(top)}")
    if top is not None and not given:
        raise HTTPError(400, "top_logprobs: only with logprobs true")
    return (top or 0) if given else None
