"""TGI's published OpenAPI document as JSON-schema validators for request and answer bodies.

    contract = Contract.load()                 # None when the file is absent
    contract.check_request("/generate", body)  # raises jsonschema.ValidationError
    contract.check_response("/generate", 200, "application/json", answer)

The document is OpenAPI 3.0.3: ``nullable: true`` becomes ``anyOf [..., {"type": "null"}]``
(JSON Schema has no ``nullable``), then it is registered whole in a ``referencing`` registry
so every ``#/components/schemas/...`` reference resolves as published. Request schemas are
made strict: TGI (serde) silently ignores fields it does not know, so a field the schema does
not declare is a contract violation here rather than an option silently dropped there.
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

# the repository's parent holds shared/engines/...: <parent>/main/adapters/tgi/tests/<this file>
OPENAPI = Path(__file__).resolve().parents[4] / "shared" / "engines" / "tgi" / "openapi.json"
MISSING = (f"TGI's published OpenAPI schema is not at {OPENAPI} (expected next to the "
           "repository, in ../shared/engines/tgi/openapi.json); contract checks need it")
URI = "urn:tgi-openapi"
STRICT = ("GenerateRequest", "CompatGenerateRequest", "GenerateParameters", "ChatRequest",
          "CompletionRequest", "StreamOptions", "JsonSchemaConfig")


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
    def load(cls) -> Contract | None:
        """The contract from ``../shared/engines/tgi/openapi.json`` (None when absent)."""
        return _load()

    def validator(self, *pointer: str) -> Draft202012Validator:
        """A validator for the schema at a JSON pointer into the document."""
        return Draft202012Validator({"$ref": f"{URI}#/{_pointer(*pointer)}"}, registry=self._registry)

    def request_validator(self, path: str, method: str = "post") -> Draft202012Validator:
        """The request-body schema of ``method path``."""
        return self.validator("paths", path, method, "requestBody", "content", "application/json",
                              "schema")

    def response_validator(self, path: str, status: int, content_type: str,
                           method: str = "post") -> Draft202012Validator:
        """The answer schema of ``method path`` for one status and content type."""
        return self.validator("paths", path, method, "responses", str(status), "content",
                              content_type, "schema")

    def check_request(self, path: str, body: Any, method: str = "post") -> None:
        """Raise ``jsonschema.ValidationError`` unless ``body`` fits the published request schema."""
        self.request_validator(path, method).validate(body)

    def check_response(self, path: str, status: int, content_type: str, body: Any,
                       method: str = "post") -> None:
        """Raise ``jsonschema.ValidationError`` unless ``body`` fits the published answer schema."""
        self.response_validator(path, status, content_type, method).validate(body)

    def check_schema(self, name: str, value: Any) -> None:
        """Validate against ``#/components/schemas/<name>``."""
        self.validator("components", "schemas", name).validate(value)


@cache
def _load() -> Contract | None:
    if not OPENAPI.is_file():
        return None
    return Contract(json.loads(OPENAPI.read_text()))
