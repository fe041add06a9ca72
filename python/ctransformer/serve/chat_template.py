"""A model's own chat template: the Jinja text of its ``tokenizer_config.json`` (``chat_template``), rendered the
way transformers' ``apply_chat_template(messages, add_generation_prompt=True)`` renders it, so that a chat reaches
the model as the prompt it was trained on.

As transformers does: a sandboxed environment (a template is data from a model's directory, not code to trust),
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter, and
``raise_exception(message)``, whose message reaches the client as a 400 naming ``messages``.
"""
import datetime
import functools
import json

__all__ = ["render", "TemplateRefusal"]


class TemplateRefusal(ValueError):
    """The template refused the conversation (its raise_exception), or could not render it."""


def render(template, messages, bos_token="", eos_token=""):
    """The prompt of `messages` ([{"role", "content"}]) under `template`, ending where the assistant's answer
    starts (add_generation_prompt)."""
    import jinja2

    try:
        return _compiled(template).render(messages=messages, add_generation_prompt=True, bos_token=bos_token,
                                          eos_token=eos_token)
    except TemplateRefusal:
        raise
    except jinja2.TemplateError as error:
        raise TemplateRefusal(f"the model's chat template failed: {error}") from None


@functools.lru_cache(maxsize=16)
def _compiled(template):
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as error:   # pragma: no cover - the serve extra brings it
        raise ImportError("a chat template needs jinja2: pip install \"ctransformer[serve]\"") from error

    def raise_exception(message):
        raise TemplateRefusal(str(message))

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                               extensions=[jinja2.ext.loopcontrols])
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    environment.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    try:
        return environment.from_string(template)
    except jinja2.TemplateError as error:
        raise TemplateRefusal(f"the model's chat template does not compile: {error}") from None
