"""``ctransformer-serve``: translation over HTTP with continuous batching (docs/serve.md).

``AsyncEngine`` (engine.py) batches the requests of every client into one decoding loop; ``create_app``
(app.py) is the ASGI application in front of it, routing to the endpoints of each API (libretranslate.py,
openai_api.py, v1_translate.py) over the requests' typed objects (protocol.py) and the server's state (server.py);
``main`` (cli.py) is the command. The HTTP side needs the ``serve`` extra: ``pip install "ctransformer[serve]"``
(Starlette, uvicorn, prometheus-client).
"""
from .engine import AsyncEngine, EngineClosed, QueueFull, UnknownModel

__all__ = ["AsyncEngine", "EngineClosed", "QueueFull", "UnknownModel", "create_app", "main"]


def __getattr__(name):
    # create_app and main import Starlette and uvicorn on first use, so the engine alone works without the
    # serve extra (its tests, a program of one's own).
    if name == "create_app":
        from .app import create_app
        return create_app
    if name == "main":
        from .cli import main
        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
