"""Writes docs/http-api.md: the endpoints of ctransformer-serve as GET /openapi.json describes them (the installed
package's python/ctransformer/serve/openapi.py), each request body's fields in a table. tests/serve/test_openapi.py
checks that the committed page is this script's output; after changing a field, reinstall and run

    .venv/bin/python scripts/openapi_docs.py
"""
import json
import pathlib

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "http-api.md"


def kind(schema):
    """A field's JSON type in a few words."""
    if "oneOf" in schema:
        return " or ".join(kind(s) for s in schema["oneOf"])
    if schema.get("type") == "array":
        return f"array of {kind(schema['items'])}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return schema.get("type", "any")


def render(document):
    lines = ["# HTTP API reference", "",
             "Every endpoint of `ctransformer-serve`, as `GET /openapi.json` describes it (OpenAPI "
             f"{document['openapi']}). This page is generated from that description by `scripts/openapi_docs.py`; "
             "[Serving over HTTP](serve.md) says what each endpoint does and shows each client's call.", ""]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            lines += [f"## `{method.upper()} {path}`", "", operation["summary"], ""]
            body = operation.get("requestBody")
            if body is None:
                continue
            schema = body["content"]["application/json"]["schema"]
            lines += ["| field | type | required | what it does |", "|---|---|---|---|"]
            for name, field in schema["properties"].items():
                required = "yes" if name in schema["required"] else ""
                lines.append(f"| `{name}` | {kind(field)} | {required} | {field['description']} |")
            lines.append("")
    return "\n".join(lines)


def main():
    from ctransformer.serve.openapi import document
    PAGE.write_text(render(json.loads(json.dumps(document()))), encoding="utf-8")
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
