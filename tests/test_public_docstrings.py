"""Every public callable documents its parameters, so the API reference has parameter tables.

Walks `__all__` of `unillm`, `unillm.adapter`, `unillm.semantic`, `unillm.bench`, `unillm.batch` and
`unillm.deploy`: each
public function, method and constructor that takes parameters (besides self/cls) has a
Google-style `Args:` section naming each one (`*args`/`**kwargs` only need to be mentioned by
name). Pydantic models, dataclasses and exceptions are built from their fields, so their
constructors are not checked but their methods are; models need a class docstring, and the ones
users build (dataclasses in `unillm.__all__`, the launch settings) list each field.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pydantic

import unillm
import unillm.adapter
import unillm.batch
import unillm.bench
import unillm.deploy
import unillm.semantic
from unillm.client.blocking import BlockingLoras
from unillm.client.llm import Loras

#: The public namespaces the API reference documents.
_MODULES = (unillm, unillm.adapter, unillm.semantic, unillm.bench, unillm.batch, unillm.deploy)
#: Public classes reached through an attribute rather than a name (``llm.loras``, ``blocking.loras``).
_REACHABLE = (Loras, BlockingLoras)
#: Pydantic settings users construct for a launch: each field is documented under Attributes:.
_SETTINGS = (
    unillm.LaunchSpec,
    unillm.Parallel,
    unillm.Speculative,
    unillm.Nodes,
    unillm.Disaggregation,
    unillm.deploy.DeploySettings,
    unillm.deploy.KubernetesSettings,
)

_ARG_LINE = re.compile(r"^\s+\*{0,2}(\w+)(?:\s*\([^)]*\))?:")
_SECTION = re.compile(r"^\w[\w ]*:\s*$")


def _documented(doc: str, section: str = "Args:") -> set[str]:
    """Names listed in the docstring's ``section`` (``Args:``, ``Attributes:``)."""
    lines = doc.splitlines()
    names: set[str] = set()
    for index, line in enumerate(lines):
        if line.strip() != section:
            continue
        entries = [entry for entry in lines[index + 1 :] if entry.strip()]
        indent = _indent(entries[0]) if entries else -1
        for entry in entries:
            if _SECTION.match(entry):
                break
            if _indent(entry) == indent and (match := _ARG_LINE.match(entry)):
                names.add(match.group(1))
    return names


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_model(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) or (isinstance(cls, type) and issubclass(cls, pydantic.BaseModel))


def _ours(obj: object) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module == "unillm" or module.startswith("unillm.")


def _parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _property_classes(cls: type) -> Iterator[type]:
    """Classes returned by `cls`'s public properties (e.g. `LLM.loras`), to walk them too."""
    for name, member in vars(cls).items():
        if name.startswith("_") or not isinstance(member, property) or member.fget is None:
            continue
        try:
            hints = typing.get_type_hints(member.fget)
        except (NameError, TypeError, AttributeError):  # an unresolvable hint is not followed
            continue
        returned = hints.get("return")
        if isinstance(returned, type) and _ours(returned) and not _is_model(returned):
            yield returned


def _callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    """(qualified name, callable) for every public callable that must document its arguments."""
    seen: set[int] = set()
    queue: list[tuple[str, object]] = [
        (f"{module.__name__}.{name}", getattr(module, name)) for module in _MODULES for name in module.__all__
    ] + [(cls.__qualname__, cls) for cls in _REACHABLE]
    while queue:
        label, obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if inspect.isclass(obj):
            if not _ours(obj) or issubclass(obj, enum.Enum):
                continue
            queue.extend((f"{obj.__qualname__}", cls) for cls in _property_classes(obj))
            init = vars(obj).get("__init__")
            documented_by_fields = _is_model(obj) or issubclass(obj, BaseException)
            if init is not None and _ours(init) and not documented_by_fields:
                yield f"{obj.__qualname__}.__init__", init
            for name, member in inspect.getmembers(obj):
                if name.startswith("_"):
                    continue
                func = member.__func__ if inspect.ismethod(member) else member
                if inspect.isfunction(func) and _ours(func) and id(func) not in seen:
                    seen.add(id(func))
                    yield func.__qualname__, func
        elif inspect.isfunction(obj) and _ours(obj):
            yield label, obj


def _args_problems(func: Callable[..., Any], owner_doc: str) -> list[str]:
    doc = inspect.getdoc(func) or ""
    if func.__name__ == "__init__":
        doc = f"{doc}\n{owner_doc}"
    listed = _documented(doc)
    missing = []
    params = _parameters(func)
    missing += [f"{name} (not a parameter)" for name in sorted(listed - {p.name for p in params})]
    for param in params:
        variadic = param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD)
        if variadic and re.search(rf"\b{param.name}\b", doc):
            continue
        if param.name not in listed:
            missing.append(param.name)
    return missing


def _owner_doc(func: Callable[..., Any]) -> str:
    owner = getattr(inspect.getmodule(func), func.__qualname__.rsplit(".", 1)[0], None)
    return (inspect.getdoc(owner) or "") if owner is not None else ""


def test_every_public_callable_documents_each_parameter_under_args() -> None:
    problems = [
        f"{label}: {', '.join(missing)}"
        for label, func in _callables()
        if (missing := _args_problems(func, _owner_doc(func)))
    ]
    assert not problems, "Args: out of step with the signature:\n" + "\n".join(sorted(problems))


def _has_own_docstring(cls: type) -> bool:
    """A written docstring, not the `Name(field, ...)` one dataclasses generate."""
    doc = (vars(cls).get("__doc__") or "").strip()
    return bool(doc) and not doc.startswith(f"{cls.__name__}(")


def test_every_public_model_has_a_class_docstring() -> None:
    undocumented = sorted(
        f"{module.__name__}.{name}"
        for module in _MODULES
        for name in module.__all__
        if inspect.isclass(obj := getattr(module, name)) and _is_model(obj) and not _has_own_docstring(obj)
    )
    assert not undocumented, f"models without a docstring: {undocumented}"


def test_every_user_built_dataclass_and_launch_setting_documents_each_field() -> None:
    built: list[tuple[type, list[str]]] = [
        (obj, [f.name for f in dataclasses.fields(obj) if f.init])
        for name in unillm.__all__
        if inspect.isclass(obj := getattr(unillm, name)) and dataclasses.is_dataclass(obj)
    ]
    built += [(cls, list(cls.model_fields)) for cls in _SETTINGS]
    problems = []
    for cls, fields in built:
        doc = inspect.getdoc(cls) or ""
        listed = _documented(doc) | _documented(doc, "Attributes:")
        if missing := [f for f in fields if f not in listed]:
            problems.append(f"{cls.__qualname__}: {', '.join(missing)}")
    assert not problems, "fields missing from Args:/Attributes:\n" + "\n".join(problems)
