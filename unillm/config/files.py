"""Configuration files read into plain data: TOML, YAML or JSON, chosen by the suffix."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from unillm.errors import ConfigError

#: How deep tables and lists may nest in a config (a JSON schema in ``[defaults]`` needs a few
#: dozen levels); deeper is refused before anything recurses through it.
MAX_DEPTH = 100


def read_config_file(path: Path) -> dict[str, Any]:
    text = read_text(path)
    try:
        if path.suffix in (".yaml", ".yml"):
            data = load_yaml(text, str(path))
        elif path.suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib
            data = tomllib.loads(text)
        else:
            raise ConfigError(f"{path}: use a .toml, .yaml or .yml file")
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{path}: tables or lists nest too deeply to read") from None
    except Exception as e:
        raise ConfigError(f"{path} does not parse: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a table/mapping at the top level")
    check_depth(data, str(path))
    return data


def check_depth(value: Any, where: str) -> None:
    """Refuse a config value whose tables and lists nest deeper than :data:`MAX_DEPTH` (walked
    without recursion, so any depth, or a table that holds itself, is refused typed).

    Args:
        value: The value as read (a file's data, an environment variable's JSON).
        where: What holds it, for the message (a file, a variable's name).

    Raises:
        ConfigError: The value nests too deeply.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ConfigError(f"{where}: tables or lists nest more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)


def read_text(path: Path) -> str:
    """The text of a config file (UTF-8).

    Raises:
        ConfigError: the file does not exist, cannot be read, or is not UTF-8 text.
    """
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {e.start} is not UTF-8); save it as UTF-8"
        ) from None


def load_yaml(text: str, where: str = "the YAML") -> Any:
    """Parse YAML as a config: safe types only, and no aliases (``*name``), so nothing is expanded.

    Aliases are refused rather than bounded: a config never needs them, and a few nested ones
    expand into gigabytes ("billion laughs").

    Raises:
        ConfigError: PyYAML is missing, the text uses an alias, or it does not parse.
    """
    try:
        import yaml
    except ImportError:
        raise ConfigError("YAML configs need PyYAML: pip install 'unillm-sdk[yaml]'") from None

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ConfigError(
                    f"{where}: YAML aliases (*name) are not allowed (line {mark.line + 1}): "
                    "write the value out"
                )
            return super().compose_node(parent, index)

    try:
        return yaml.load(text, Loader=NoAliases)  # a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where_in = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise ConfigError(f"{where} does not parse{where_in}: {problem}") from None
