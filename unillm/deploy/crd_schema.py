"""Check a rendered manifest against the CRD's own OpenAPI schema, kept in ``schemas/`` (see its README).

    validate_manifest(manifest)     # InvalidOptions naming each problem, or None

The schemas are KServe's, verbatim. A CRD's structural schema lets unknown fields through (the
API server prunes them, or refuses them under strict field validation, ``kubectl``'s default);
the check here is strict as well: an object that lists its ``properties`` and does not preserve
unknown fields refuses any other, so a misspelt field is an error and not silently dropped. An
integer's ``format`` (``int32``, ``int64``) is its range, checked as the API server does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache, partial
from importlib import resources
from typing import Any

import jsonschema

from unillm.errors import InvalidOptions

__all__ = ["INT32_MAX", "SCHEMAS", "schema_for", "validate_manifest"]

#: (apiVersion, kind) -> the vendored schema file under ``unillm/deploy/schemas``.
SCHEMAS = {
    ("serving.kserve.io/v1alpha1", "LLMInferenceService"): "llminferenceservice.v1alpha1.json",
}
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
#: The largest value of an ``int32`` field (replicas, parallelism, ...).
INT32_MAX = 2**31 - 1
# An integer format -> its (least, greatest) value; the only formats these schemas use.
_INT_RANGES = {"int32": (-(2**31), INT32_MAX), "int64": (-(2**63), 2**63 - 1)}
_MAX_PROBLEMS = 10


def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` for a resource, strict about unknown fields.

    Args:
        api_version: The manifest's ``apiVersion``, e.g. ``serving.kserve.io/v1alpha1``.
        kind: Its ``kind``, e.g. ``LLMInferenceService``.

    Returns:
        The schema (a fresh copy; changing it changes nothing here).

    Raises:
        InvalidOptions: No schema is kept for that apiVersion and kind.
    """
    copy: dict[str, Any] = json.loads(json.dumps(_strict_schema(api_version, kind)))
    return copy


def validate_manifest(manifest: Mapping[str, Any]) -> None:
    """Refuse a manifest its CRD's schema does not accept.

    Args:
        manifest: One Kubernetes resource (``apiVersion``, ``kind``, ``metadata``, ``spec``).

    Raises:
        InvalidOptions: Each problem, with the path to the field (the first ten).
    """
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise InvalidOptions("a manifest needs apiVersion and kind (strings)")
    validator = jsonschema.Draft7Validator(_strict_schema(api_version, kind), format_checker=_int_formats())
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        name = (manifest.get("metadata") or {}).get("name", "?")
        lines = [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {_problem(e)}" for e in errors]
        shown = "; ".join(lines[:_MAX_PROBLEMS]) + ("; ..." if len(lines) > _MAX_PROBLEMS else "")
        raise InvalidOptions(f"{kind} {name!r} does not validate against its CRD's schema: {shown}")


def _problem(error: jsonschema.ValidationError) -> str:
    """What is wrong, in words: an integer out of its format's range says the range."""
    if error.validator == "format" and error.validator_value in _INT_RANGES:
        low, high = _INT_RANGES[error.validator_value]
        bound = f"at most {high}" if error.instance > high else f"at least {low}"
        return f"{error.instance} does not fit an {error.validator_value} field ({bound})"
    return str(error.message)


@cache
def _int_formats() -> jsonschema.FormatChecker:
    """A checker of the integer formats' ranges (jsonschema checks no format without a checker)."""
    checker = jsonschema.FormatChecker(formats=())
    for name, (low, high) in _INT_RANGES.items():
        checker.checks(name)(partial(_in_range, low, high))
    return checker


def _in_range(low: int, high: int, value: object) -> bool:
    return not isinstance(value, int) or low <= value <= high


@cache
def _strict_schema(api_version: str, kind: str) -> dict[str, Any]:
    file = SCHEMAS.get((api_version, kind))
    if file is None:
        kept = ", ".join(f"{v} {k}" for v, k in SCHEMAS)
        raise InvalidOptions(f"no schema is kept for {api_version} {kind} (kept: {kept})")
    schema: dict[str, Any] = json.loads(
        resources.files(__package__).joinpath("schemas").joinpath(file).read_text()
    )
    _close_objects(schema)
    return schema


def _close_objects(schema: Any) -> None:
    """Refuse unknown fields wherever the schema lists its fields and does not preserve others."""
    if not isinstance(schema, dict):
        return
    if "properties" in schema and not schema.get(_PRESERVE) and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for sub in (schema.get("properties") or {}).values():
        _close_objects(sub)
    for key in ("items", "additionalProperties", "not"):
        _close_objects(schema.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            _close_objects(sub)
