"""Configuration files read into plain data: TOML, YAML or JSON, chosen by the suffix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from unillm.errors import ConfigError


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
    except Exception as e:
        raise ConfigError(f"{path} does not parse: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a table/mapping at the top level")
    return data


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
        raise ConfigError("YAML configs need PyYAML: pip install 'unillm[yaml]'") from None

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
