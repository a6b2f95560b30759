"""TGI's published OpenAPI document as JSON-schema validators for request and answer bodies.

    contract = Contract.load()
    contract.check_request("/generate", body)  # raises jsonschema.ValidationError
    contract.check_response("/generate", 200, "application/json", answer)

The document is OpenAPI 3.0.3: ``nullable: true`` becomes ``anyOf [..., {"type": "null"}]``
(JSON Schema has no ``nullable``), then it is registered whole in a ``referencing`` registry
so every ``#/components/schemas/...`` reference resolves as published. Request schemas are
made strict: TGI (serde) silently ignores fields it does not know, so a field the schema does
not declare is a contract violation here rather than an option silently dropped there.

The contract lives in the repository (``data/tgi_openapi.json``): TGI 3.3.x's published OpenAPI
document (``docs/openapi.json`` of huggingface/text-generation-inference, version 3.3.6-dev0)
with its prose (descriptions, summaries, examples, tags, contact) removed and every schema,
path, status and content type kept. Refresh it from a newer published document with
``python adapters/tgi/tests/tgi_openapi.py <openapi.json>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

OPENAPI = Path(__file__).resolve().parent / "data" / "tgi_openapi.json"
SOURCE = (
    "TGI's published OpenAPI document (huggingface/text-generation-inference docs/openapi.json, "
    "3.3.x), prose removed by adapters/tgi/tests/tgi_openapi.py"
)
PROSE = frozenset({"description", "summary", "example", "examples", "tags", "contact", "license"})
URI = "urn:tgi-openapi"
STRICT = (
    "GenerateRequest",
    "CompatGenerateRequest",
    "GenerateParameters",
    "ChatRequest",
    "CompletionRequest",
    "StreamOptions",
    "JsonSchemaConfig",
)


def _pointer(*parts: str) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_nullable(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items()}
    if out.pop("nullable", False) is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _strict(schemas: dict[str, Any]) -> None:
    for name in STRICT:
        schemas[name]["additionalProperties"] = False
    for variant in schemas["GrammarType"]["oneOf"]:
        variant["additionalProperties"] = False


class Contract:
    """Validators for TGI's published request and answer schemas."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        doc = json.loads(json.dumps(document))
        _strict(doc["components"]["schemas"])
        self.document: dict[str, Any] = _nullable(doc)
        self.version = str(self.document["info"]["version"])
        resource = Resource.from_contents(self.document, default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(URI, resource)

    @classmethod
    def load(cls) -> Contract:
        """The contract kept in the repository (``data/tgi_openapi.json``)."""
        return _load()

    def validator(self, *pointer: str) -> Draft202012Validator:
        """A validator for the schema at a JSON pointer into the document."""
        return Draft202012Validator({"$ref": f"{URI}#/{_pointer(*pointer)}"}, registry=self._registry)

    def request_validator(self, path: str, method: str = "post") -> Draft202012Validator:
        """The request-body schema of ``method path``."""
        return self.validator("paths", path, method, "requestBody", "content", "application/json", "schema")

    def response_validator(
        self, path: str, status: int, content_type: str, method: str = "post"
    ) -> Draft202012Validator:
        """The answer schema of ``method path`` for one status and content type."""
        return self.validator(
            "paths", path, method, "responses", str(status), "content", content_type, "schema"
        )

    def check_request(self, path: str, body: Any, method: str = "post") -> None:
        """Raise ``jsonschema.ValidationError`` unless ``body`` fits the published request schema."""
        self.request_validator(path, method).validate(body)

    def check_response(
        self, path: str, status: int, content_type: str, body: Any, method: str = "post"
    ) -> None:
        """Raise ``jsonschema.ValidationError`` unless ``body`` fits the published answer schema."""
        self.response_validator(path, status, content_type, method).validate(body)

    def check_schema(self, name: str, value: Any) -> None:
        """Validate against ``#/components/schemas/<name>``."""
        self.validator("components", "schemas", name).validate(value)


def without_prose(node: Any, *, names: bool = False) -> Any:
    """The document minus prose keys; ``names``: ``node`` maps property names (all are kept)."""
    if isinstance(node, list):
        return [without_prose(x) for x in node]
    if not isinstance(node, dict):
        return node
    return {
        k: without_prose(v, names=k == "properties" and not names)
        for k, v in node.items()
        if names or k not in PROSE
    }


@cache
def _load() -> Contract:
    return Contract(json.loads(OPENAPI.read_text()))


if __name__ == "__main__":
    import sys

    slim = without_prose(json.loads(Path(sys.argv[1]).read_text()))
    slim["info"]["x-unillm-source"] = SOURCE
    OPENAPI.write_text(json.dumps(slim, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OPENAPI} ({OPENAPI.stat().st_size} bytes)")
