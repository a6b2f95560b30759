"""mkdocs hook: tables the docs would otherwise copy from the code, generated at build time.

* ``<!-- adapters: launch settings -->``: every ``LaunchSpec`` field, what it means (its docstring),
  and how the conformance kit checks it (``LAUNCH_PROBES``) or that the core consumes it
  (``CORE_LAUNCH_SETTINGS``);
* ``<!-- adapters: class attributes -->``: the class attributes an adapter declares (``Adapter``,
  ``OpenAICompatAdapter``), with their defaults and ``#:`` comments;
* ``<!-- errors: hierarchy -->``: the tree of ``unillm.errors`` and what each ``except`` catches.

Each table is committed into its page between its marker and the matching end marker
(``<!-- /adapters: launch settings -->``), so the raw Markdown (GitHub, an editor) shows it too.
``python docs/hooks/tables.py`` rewrites them from the code; ``--check`` only reports stale ones
(``tests/test_docs.py`` runs it). At build time the hook fills them in again, so a site is never stale.
"""

from __future__ import annotations

import ast
import html
import inspect
import re
from pathlib import Path
from typing import Any

SETTINGS = "<!-- adapters: launch settings -->"
ATTRIBUTES = "<!-- adapters: class attributes -->"
ERRORS = "<!-- errors: hierarchy -->"
OPTIONS = "<!-- adapters: openai body fields -->"
ROOT = Path(__file__).resolve().parents[2]


def _cell(text: str) -> str:
    """One table cell of markdown: no pipes, no newlines, no reST roles or double backticks."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")
    return " ".join(text.replace("|", "\\|").split())


def _code(text: str) -> str:
    """Inline code that may hold a ``|`` (a table cell's backticks would show the escape)."""
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"


def _show(value: Any) -> str:
    """A probe value as one would write it: ``Parallel(tensor=2)``, not every default."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        fields = sorted(value.model_fields_set, key=list(type(value).model_fields).index)
        return f"{type(value).__name__}({', '.join(f'{k}={_show(getattr(value, k))}' for k in fields)})"
    return repr(value)


def _docstring_attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring: name -> text."""
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    out: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        found = re.match(r"^ {4}(\w+): (.*)", line)
        if found:
            name, out[found[1]] = found[1], found[2]
        elif name and line.startswith(" " * 8):
            out[name] += " " + line.strip()
        elif line.strip():
            break
    return out


def settings_table() -> str:
    """Every ``LaunchSpec`` field: meaning, and the kit's probe or the core's use of it."""
    from unillm.adapter.launch_spec import LaunchSpec
    from unillm.testing.conformance import CORE_LAUNCH_SETTINGS, LAUNCH_PROBES

    meaning = _docstring_attributes(LaunchSpec)
    lines = ["| setting | means | checked by the kit with (probe: value, needs) |", "|---|---|---|"]
    for field in LaunchSpec.model_fields:
        probes = [(n, p) for n, p in LAUNCH_PROBES.items() if re.split(r"[.=]", n)[0] == field]
        if field in CORE_LAUNCH_SETTINGS:
            checked = f"*the core:* {CORE_LAUNCH_SETTINGS[field]}"
        else:
            checked = "<br>".join(
                f"`{name}`: `{', '.join(f'{k}={_show(v)}' for k, v in p.value.items()) or 'renamed'}`"
                + (
                    f" (needs `{', '.join(f'{k}={_show(v)}' for k, v in p.needs.items())}`)"
                    if p.needs
                    else ""
                )
                for name, p in probes
            )
        lines.append(f"| `{field}` | {_cell(meaning.get(field, ''))} | {_cell(checked)} |")
    return "\n".join(lines)


def _class_attributes(path: Path, class_name: str) -> list[tuple[str, str, str, str]]:
    """(name, type, default, comment) of each ``ClassVar`` in ``class_name`` of ``path``."""
    source = path.read_text()
    lines = source.splitlines()
    [cls] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name]
    out: list[tuple[str, str, str, str]] = []
    shared = ""  # a `#:` comment over several attributes in a row belongs to each of them
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            shared = ""
            continue
        comment: list[str] = []
        above = node.lineno - 2
        while above >= 0 and lines[above].strip().startswith("#:"):
            comment.insert(0, lines[above].strip()[2:].strip())
            above -= 1
        kind = ast.unparse(node.annotation)
        if not (kind.startswith("ClassVar[") or comment):
            continue
        kind = kind[len("ClassVar[") : -1] if kind.startswith("ClassVar[") else kind
        shared = " ".join(comment) or lines[node.lineno - 1].partition("  # ")[2] or shared
        default = ast.unparse(node.value) if node.value is not None else "*required*"
        out.append((node.target.id, kind, default, shared))
    return out


def attributes_table() -> str:
    """The class attributes of ``Adapter`` and ``OpenAICompatAdapter``, as declared in the code."""
    rows = ["| attribute | type | default | declares |", "|---|---|---|---|"]
    for path, cls in (("base.py", "Adapter"), ("openai_compat.py", "OpenAICompatAdapter")):
        for name, kind, default, comment in _class_attributes(ROOT / "unillm" / "adapter" / path, cls):
            if cls != "Adapter" and name == "name":
                continue
            default = default if default.startswith("*") else f"`{default}`"
            rows.append(
                f"| `{cls}.{name}` | {_code(kind)} | {_cell(default)} | {_cell(comment.replace('``', '`'))} |"
            )
    return "\n".join(rows)


#: One request per row of the option table: (chat?, output, options, stream). Each row shows what
#: ``OpenAICompatAdapter.build`` adds to the body of the same request without the option.
OPTION_PROBES: tuple[tuple[bool, Any, dict[str, Any], bool], ...] = (
    (False, None, {}, True),
    (False, None, {"max_tokens": 8}, False),
    (False, None, {"temperature": 0.5}, False),
    (False, None, {"top_p": 0.9}, False),
    (False, None, {"top_k": 5}, False),
    (False, None, {"min_p": 0.1}, False),
    (False, None, {"repetition_penalty": 1.1}, False),
    (False, None, {"presence_penalty": 0.5}, False),
    (False, None, {"frequency_penalty": 0.5}, False),
    (False, None, {"seed": 7}, False),
    (False, None, {"stop": ["."]}, False),
    (False, None, {"n": 2}, False),
    (False, None, {"logprobs": True, "top_logprobs": 2}, False),
    (True, None, {"logprobs": True, "top_logprobs": 2}, False),
    (False, None, {"priority": 1}, False),
    (False, None, {"lora": "sql"}, False),
    (False, "json", {}, False),
    (True, None, {"tools": [{"name": "f", "parameters": {"type": "object"}}], "tool_choice": "auto"}, False),
    (True, None, {"thinking": False}, False),
    (True, None, {"thinking_budget": 64}, False),
    (True, None, {"reasoning_effort": "low"}, False),
    (False, None, {"extra_body": {"ignore_eos": True}}, False),
)


#: Options that change no body field of their own: the client's (timeouts, a fleet's session) or
#: how the messages are laid out (``replay_reasoning``, in ``messages``).
NOT_A_FIELD = ("timeout", "session", "deadline", "replay_reasoning")


def _openai_adapters() -> dict[str, Any]:
    """``OpenAICompatAdapter`` as it is (key ``""``), and with each opt-in class attribute set."""
    from unillm.adapter import EXTRA_SAMPLING, OpenAICompatAdapter
    from unillm.options import REASONING_OPTIONS

    class Probe(OpenAICompatAdapter):
        name = "probe"

        def constraint_fields(self, output: Any, info: Any) -> dict[str, Any]:
            return {"(constraint_fields)": "..."}

        # only build() runs: the rest is never called
        capabilities = discovery = parse_info = command = None  # type: ignore[assignment]

    optins = {"extra_sampling_fields": EXTRA_SAMPLING, "thinking_options": tuple(REASONING_OPTIONS)}
    adapters: dict[str, type[OpenAICompatAdapter]] = {"": Probe}
    adapters.update({k: type(f"Probe_{k}", (Probe,), {k: v}) for k, v in optins.items()})
    return {k: cls() for k, cls in adapters.items()}


def _flat(body: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}`` (lists and the messages kept whole)."""
    if not isinstance(body, dict) or prefix in ("messages", "tools"):
        return {prefix: body}
    return {
        k: v for key, value in body.items() for k, v in _flat(value, f"{prefix}.{key}".lstrip(".")).items()
    }


def _option_row(probe: tuple[bool, Any, dict[str, Any], bool], adapters: dict[str, Any]) -> str:
    import json

    from unillm.adapter import EngineInfo, UnsupportedFeature
    from unillm.capabilities import features_of
    from unillm.options import JsonSchema, make_request

    chat, output, options, stream = probe
    output = JsonSchema({"type": "object"}) if output == "json" else None
    prompt, messages = (None, [{"role": "user", "content": "Hi"}]) if chat else ("Hi", None)
    request = make_request(prompt, messages, output, options, stream=stream)
    plain = make_request(prompt, messages, None, {}, stream=False)
    info = EngineInfo(engine="probe", model="m")
    fields: dict[str, Any] = {}
    needs = ""
    for optin, adapter in adapters.items():
        try:
            before, after = _flat(adapter.build(plain, info).json), _flat(adapter.build(request, info).json)
        except UnsupportedFeature:
            continue
        fields = {k: v for k, v in after.items() if before.get(k) != v}
        if fields:
            needs = optin
            break
    said = [f"{k}={v!r}" for k, v in options.items() if k != "tools"]
    said = (["tools=[...]"] if "tools" in options else []) + said
    said += ["output=JsonSchema(...)"] if output is not None else []
    said += ["stream=True"] if stream else []
    used = [f.name for f in features_of(request) if f not in features_of(plain)]

    def shown(value: Any) -> str:
        text = json.dumps(value)
        return text if len(text) <= 30 else "..."

    sent = "<br>".join(f"`{k}: {shown(v)}`" for k, v in fields.items()) or "*nothing*"
    sent = sent.replace('`(constraint_fields): "..."`', "your `constraint_fields(output, info)`")
    sent += f" (needs `{needs}`)" if needs else ""
    checked = ", ".join(f"`{u}`" for u in used) or "-"
    return f"| `{', '.join(said)}` ({'chat' if chat else 'prompt'}) | {checked} | {sent} |"


def options_table() -> str:
    """What ``OpenAICompatAdapter.build`` sends for each option: the body fields, and the class
    attribute the adapter must set first when it sends nothing by default."""
    adapters = _openai_adapters()
    rows = [
        "| option (request kind) | `Feature` checked before sending | body fields sent |",
        "|---|---|---|",
    ]
    return "\n".join(rows + [_option_row(probe, adapters) for probe in OPTION_PROBES])


def _summary(cls: type) -> str:
    return (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ").replace("``", "`")


def error_tree() -> str:
    """``unillm.errors`` as a tree (with the built-in exceptions each also is), then what each
    ``except`` clause catches."""
    import unillm.errors as errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and c.__module__ == errors.__name__]
    classes = [c for c in classes if issubclass(c, errors.UnillmError)]

    def children(parent: type) -> list[type]:
        return [c for c in classes if c.__bases__[0] is parent]

    def branch(cls: type, depth: int) -> list[str]:
        also = [b.__name__ for b in cls.__bases__[1:]]
        extra = f" (also a `{'`, `'.join(also)}`)" if also else ""
        line = f"{'    ' * depth}- **`{cls.__name__}`**{extra}: {_summary(cls)}"
        return [line] + [x for child in children(cls) for x in branch(child, depth + 1)]

    lines = branch(errors.UnillmError, 0)
    lines += ["", "| `except` | catches |", "|---|---|"]
    for cls in classes:
        caught = [c.__name__ for c in classes if c is not cls and issubclass(c, cls)]
        if caught:
            lines.append(f"| `{cls.__name__}` | {', '.join(f'`{n}`' for n in caught)} |")
    builtins = sorted(
        {b for c in classes for b in c.__mro__ if b.__module__ == "builtins"}, key=lambda b: b.__name__
    )
    for base in builtins:
        if base in (object, BaseException, Exception):
            continue
        caught = [c.__name__ for c in classes if issubclass(c, base)]
        lines.append(f"| `{base.__name__}` (built-in) | {', '.join(f'`{n}`' for n in caught)} |")
    return "\n".join(lines)


GENERATED = {
    SETTINGS: settings_table,
    ATTRIBUTES: attributes_table,
    OPTIONS: options_table,
    ERRORS: error_tree,
}
REPL_TITLE = (
    "REPL cell: top-level await (python -m asyncio, IPython, Jupyter); in a file, put it in async def main()"
)
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _awaits_at_top_level(code: str) -> bool:
    """True for a snippet that runs only where top-level ``await`` does (a REPL or a notebook)."""
    try:
        compile(code, "<docs>", "exec", dont_inherit=True)
    except SyntaxError:
        try:
            compile(code, "<docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except SyntaxError:
            return False
        return True
    return False


def mark_repl_cells(markdown: str) -> str:
    """Title each python block that awaits at top level as a REPL cell, saying how to run it."""

    def title(block: re.Match[str]) -> str:
        if not _awaits_at_top_level(block[1]):
            return block[0]
        return f'```python title="{REPL_TITLE}"\n{block[1]}```'

    return _PYTHON_BLOCK.sub(title, markdown)


#: The pages that carry generated tables (relative to ``docs/``).
PAGES = ("adapters.md", "guide/errors.md")
REGENERATE = "python docs/hooks/tables.py"


def end_marker(placeholder: str) -> str:
    """The comment that closes a generated table: ``<!-- /adapters: launch settings -->``."""
    return placeholder.replace("<!-- ", "<!-- /", 1)


def fill(markdown: str) -> str:
    """Each placeholder followed by its table, generated now, and its end marker (replacing the
    table committed between them, if any)."""
    for placeholder, render in GENERATED.items():
        end = end_marker(placeholder)
        block = re.compile(re.escape(placeholder) + r"(?:\n.*?\n" + re.escape(end) + ")?", re.S)
        filled = f"{placeholder}\n\n{render()}\n\n{end}"
        markdown = block.sub(filled.replace("\\", "\\\\"), markdown)
    return markdown


def stale_pages(write: bool = False) -> list[str]:
    """The pages of :data:`PAGES` whose committed tables differ from the code's (rewritten if ``write``)."""
    stale = []
    for name in PAGES:
        path = ROOT / "docs" / name
        text = path.read_text()
        current = fill(text)
        if current != text:
            stale.append(f"docs/{name}")
            if write:
                path.write_text(current)
    return stale


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Fill in each generated table on a page (from the code, as now); title the REPL cells."""
    return mark_repl_cells(fill(markdown))


if __name__ == "__main__":
    import sys

    check = "--check" in sys.argv[1:]
    pages = stale_pages(write=not check)
    for stale in pages:
        print(f"{'stale' if check else 'rewrote'}: {stale}")
    if check and pages:
        print(f"regenerate them: {REGENERATE}")
    sys.exit(1 if check and pages else 0)
