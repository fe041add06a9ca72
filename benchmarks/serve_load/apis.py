"""What the load client sends to an endpoint and reads back: the body of one text (whole or streamed), the answer's
text and, where the server counts them, its output tokens; a stream's events. One object per API, so that the client
(client.py) drives any of them alike: ctransformer's /v1/translate (every server of the translation runs takes it),
and OpenAI's /v1/completions and /v1/chat/completions (the GPT runs, gpt.py)."""
import functools
import json

from .settings import MAX_DECODING_LENGTH


class Event:
    """A stream's event, read: the text it brings (None for none), whether it ends the stream (then `text` is the
    whole answer where the API repeats it, else None), an error message, and the output tokens the server counted."""
    __slots__ = ("text", "done", "error", "status", "tokens")

    def __init__(self, text=None, done=False, error=None, status=None, tokens=None):
        self.text, self.done, self.error, self.status, self.tokens = text, done, error, status, tokens


class Translate:
    """ctransformer's POST /v1/translate: one text, greedy, at most MAX_DECODING_LENGTH output tokens. Its answers
    carry no token count: the run counts them with the vocabulary (count_tokens)."""
    path = "/v1/translate"

    @staticmethod
    @functools.lru_cache(maxsize=4096)   # the levels send the same sentences over and over
    def body(text, stream):
        return json.dumps({"texts": [text], "beam_size": 1, "max_decoding_length": MAX_DECODING_LENGTH,
                           **({"stream": True} if stream else {})}).encode("utf-8")

    @staticmethod
    def answer(data):
        """(text, output tokens or None) of a whole answer."""
        return json.loads(data)["translations"][0], None

    @staticmethod
    def event(payload):
        e = json.loads(payload)
        if "error" in e:
            return Event(error=e["error"], status=e.get("status", 500))
        if e.get("done"):
            return Event(done=True, text=e["translation"])
        return Event(text=e.get("text"))


class _OpenAI:
    """OpenAI's completions and chat completions: greedy (temperature 0), max_tokens output tokens, the usage
    asked for in streams too (stream_options.include_usage), so that the server's own count is what is summed."""
    path = None

    def __init__(self, max_tokens=MAX_DECODING_LENGTH, model=None):
        self.max_tokens, self.model = max_tokens, model
        self.body = functools.lru_cache(maxsize=4096)(self._body)

    def _fields(self, text):
        raise NotImplementedError

    def _body(self, text, stream):
        body = {**self._fields(text), "max_tokens": self.max_tokens, "temperature": 0}
        if self.model is not None:
            body["model"] = self.model
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return json.dumps(body).encode("utf-8")

    def answer(self, data):
        answer = json.loads(data)
        return self._text(answer["choices"][0]), answer["usage"]["completion_tokens"]

    def event(self, payload):
        if payload == b"[DONE]":
            return Event(done=True)
        e = json.loads(payload)
        if "error" in e:
            error = e["error"]
            return Event(error=error.get("message", error) if isinstance(error, dict) else error, status=500)
        if e.get("usage") and not e.get("choices"):
            return Event(tokens=e["usage"]["completion_tokens"])
        return Event(text=self._piece(e["choices"][0]) or None)


class Completions(_OpenAI):
    """POST /v1/completions: the text is the prompt."""
    path = "/v1/completions"

    def _fields(self, text):
        return {"prompt": text}

    @staticmethod
    def _text(choice):
        return choice["text"]

    @staticmethod
    def _piece(choice):
        return choice.get("text")


class Chat(_OpenAI):
    """POST /v1/chat/completions: the text is one user message."""
    path = "/v1/chat/completions"

    def _fields(self, text):
        return {"messages": [{"role": "user", "content": text}]}

    @staticmethod
    def _text(choice):
        return choice["message"]["content"]

    @staticmethod
    def _piece(choice):
        return choice.get("delta", {}).get("content")


TRANSLATE = Translate()
