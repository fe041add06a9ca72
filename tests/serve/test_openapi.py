"""GET /openapi.json: a valid OpenAPI 3.1 document (openapi-spec-validator) that describes every route the app
serves and every field each JSON endpoint takes (the field lists the requests are checked against), and the guide's
page docs/http-api.md is its rendering (scripts/openapi_docs.py)."""
import asyncio
import importlib.util
import pathlib

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette", reason="the serve extra is not installed: pip install '.[serve]'")

from ctransformer.serve import AsyncEngine, create_app  # noqa: E402
from ctransformer.serve import openapi, protocol  # noqa: E402
from ctransformer.serve.app import routes_of  # noqa: E402
from waiting import HANG  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fetched():
    engine = AsyncEngine()

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(engine)),
                                     base_url="http://serve.test", timeout=HANG) as client:
            return await client.get("/openapi.json")
    try:
        return asyncio.run(asyncio.wait_for(run(), HANG))
    finally:
        engine.close()


def test_openapi_json_is_valid_and_describes_every_route_and_field():
    from openapi_spec_validator import validate

    answer = fetched()
    assert answer.status_code == 200
    document = answer.json()
    validate(document)
    served = {path.replace("/download_file/", "/download_file/{key}/{name}") for path in routes_of(None)}
    assert set(document["paths"]) == served
    for path, methods in routes_of(None).items():
        described = document["paths"][path.replace("/download_file/", "/download_file/{key}/{name}")]
        assert set(described) <= {m.lower() for m in methods}, path
    bodies = {"/v1/translate": protocol.V1_FIELDS, "/v1/completions": protocol.COMPLETION_FIELDS,
              "/v1/chat/completions": protocol.CHAT_FIELDS}
    for path, fields in bodies.items():
        (operation,) = document["paths"][path].values()
        properties = operation["requestBody"]["content"]["application/json"]["schema"]["properties"]
        assert list(properties) == list(fields), path
        assert all(properties[name]["description"] for name in fields)


def test_the_guides_page_renders_the_document():
    spec = importlib.util.spec_from_file_location("openapi_docs", ROOT / "scripts" / "openapi_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (ROOT / "docs" / "http-api.md").read_text(encoding="utf-8")
    assert committed == module.render(openapi.document()), \
        "docs/http-api.md is stale: run .venv/bin/python scripts/openapi_docs.py"
