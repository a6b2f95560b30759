"""JSON-schema ``$ref`` s that stay inside the schema: unillm never fetches a schema.

A tool's parameters or an ``output=`` schema may point into itself (``#/$defs/...``,
``#/definitions/...``, an ``$anchor``, an embedded ``$id``); a ``$ref`` to anything else
(``http://``, ``file://``, a relative file) would make validation fetch it, so it is refused before
sending (:func:`check_refs`), and the validators unillm runs (:func:`local_validator`) resolve
through a ``referencing`` registry whose retrieve function refuses every URI.

    check_refs({"$ref": "https://example.com/s.json"}, "tool 'f'")   # InvalidOptions
    local_validator(schema).iter_errors(value)                      # never touches the network
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from unillm.errors import InvalidOptions

if TYPE_CHECKING:  # ``referencing`` is imported on first use: ``connect`` needs none of it
    from referencing import Registry, Resource

__all__ = ["check_refs", "local_validator"]

_REF_KEYWORDS = ("$ref", "$dynamicRef")


class _NotFetched(LookupError):
    """A ``$ref`` outside the schema: unillm does not fetch schemas."""


def _refuse(uri: str) -> NoReturn:
    raise _NotFetched(uri)


def _registry() -> Registry[Any]:
    from referencing import Registry

    return Registry(retrieve=_refuse)  # type: ignore[call-arg]


def local_validator(schema: Any, cls: Any = None) -> Any:
    """A jsonschema validator for ``schema`` that resolves only refs inside it (never fetches).

    Args:
        schema: The JSON schema.
        cls: The validator class (default: the one ``schema``'s ``$schema`` names).

    Returns:
        The validator; a ref outside the schema raises ``referencing.exceptions.Unresolvable``
        while validating, instead of being fetched.
    """
    from jsonschema import validators

    return (cls or validators.validator_for(schema))(schema, registry=_registry())


def check_refs(schema: Any, what: str) -> None:
    """Refuse a schema with a ``$ref`` that points outside it or to nothing in it.

    Args:
        schema: The JSON schema (tool parameters or an ``output=`` schema).
        what: What the schema is, for the message (e.g. ``"tool 'get_weather'"``).

    Raises:
        InvalidOptions: A remote ``$ref`` (never fetched), one that resolves to nothing, or a
            schema nested too deeply to check.
    """
    from referencing.jsonschema import DRAFT202012, specification_with

    dialect = schema.get("$schema") if isinstance(schema, Mapping) else None
    specification = specification_with(dialect if isinstance(dialect, str) else "", default=DRAFT202012)
    root = specification.create_resource(schema)
    base = root.id() or ""
    resolver = _registry().with_resource(base, root).crawl().resolver(base_uri=base)
    try:
        _check(root, resolver, what)
    except RecursionError:
        raise InvalidOptions(f"{what}: the schema is nested too deeply to check") from None


def _check(resource: Resource[Any], resolver: Any, what: str) -> None:
    if resource.id() is not None:
        resolver = resolver.in_subresource(resource)
    contents = resource.contents
    for keyword in _REF_KEYWORDS:
        ref = contents.get(keyword) if isinstance(contents, Mapping) else None
        if isinstance(ref, str):
            _lookup(resolver, keyword, ref, what)
    for sub in resource.subresources():
        _check(sub, resolver, what)


def _lookup(resolver: Any, keyword: str, ref: str, what: str) -> None:
    from referencing.exceptions import Unresolvable, Unretrievable

    try:
        resolver.lookup(ref)
    except Unresolvable as e:
        if isinstance(e.__cause__, Unretrievable):
            raise InvalidOptions(
                f"{what}: {keyword} {ref!r} points outside the schema, and unillm never fetches "
                "schemas; copy the referenced schema under $defs and point to it with "
                "'#/$defs/<name>'"
            ) from None
        raise InvalidOptions(
            f"{what}: {keyword} {ref!r} resolves to nothing in the schema; define it (e.g. under "
            "$defs) or fix the reference"
        ) from None
