"""Refusing launch settings an engine cannot honour, before anything starts: what, why, what instead.

refuse = Refuse("mlx")
if spec.task == "embed":
    raise refuse('task="embed"', "mlx-lm serves generation only", 'Use unillm.launch("vllm", ...)')
refuse.set_settings(spec, {"dtype": "mlx-lm uses the dtype stored in the model"})
refuse.first_of(spec, RULES)  # a table: RULES = ((holds, setting, why, alternative), ...)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from unillm.adapter.launch_spec import LaunchSpec
from unillm.errors import UnsupportedFeature

#: One row of a refusal table: (holds for these settings, the setting's name, why, what instead).
RefusalRule = tuple[Callable[[LaunchSpec], object], str, str, str]


@dataclass(frozen=True, slots=True)
class Refuse:
    """The launch refusals of one engine (its adapter's name)."""

    engine: str

    def __call__(self, setting: str, why: str, alternative: str = "") -> UnsupportedFeature:
        """The error refusing ``setting``.

        Args:
            setting: The launch setting, as the caller wrote it (``'task="embed"'``, ``"parallel"``).
            why: Why the engine cannot honour it.
            alternative: What to do instead.
        """
        return UnsupportedFeature(self.engine, setting, why=why, alternative=alternative)

    def set_settings(self, spec: LaunchSpec, why: Mapping[str, str]) -> None:
        """Refuse the first of these settings that ``spec`` sets (neither None nor left at a
        default of ``False``, as ``runtime_lora``: an explicit ``prefix_caching=False`` is set),
        with ``Drop <name>=``.

        Args:
            spec: The launch settings.
            why: Setting name -> why the engine cannot honour it.

        Raises:
            UnsupportedFeature: A setting of ``why`` is set.
        """
        for setting, reason in why.items():
            value = getattr(spec, setting)
            default = type(spec).model_fields[setting].default
            if value is not None and not (value is False and default is False):
                raise self(setting, reason, f"Drop {setting}=")

    def first_of(self, spec: LaunchSpec, rules: Iterable[RefusalRule]) -> None:
        """Refuse the first rule of a table that holds for ``spec``, in the table's order.

        Args:
            spec: The launch settings.
            rules: ``(holds, setting, why, alternative)`` rows; ``holds(spec)`` is truthy to refuse.

        Raises:
            UnsupportedFeature: A rule holds.
        """
        for holds, setting, why, alternative in rules:
            if holds(spec):
                raise self(setting, why, alternative)

    def admission(self, spec: LaunchSpec, server: str, queue_alternative: str = "") -> None:
        """Refuse the admission settings unillm does not map for this engine: a queue cap
        (``max_queued_requests``) and ``scheduling="priority"`` (``"fcfs"`` is every engine's order).

        Args:
            spec: The launch settings.
            server: The server's name in the message (e.g. ``"Ollama"``).
            queue_alternative: The engine's own way to cap its queue, when it has one.

        Raises:
            UnsupportedFeature: ``spec`` sets one of them.
        """
        vllm_or_sglang = "launch vLLM or SGLang, which unillm starts with these settings"
        if spec.max_queued_requests is not None:
            raise self(
                "max_queued_requests",
                f"unillm has no queue cap to start {server} with",
                queue_alternative or f"Drop max_queued_requests=, or {vllm_or_sglang}",
            )
        if spec.scheduling == "priority":
            raise self(
                'scheduling="priority"',
                f"unillm knows no priority scheduling of {server} (it serves requests in arrival order)",
                f"Drop scheduling=, or {vllm_or_sglang}",
            )

    def key_without_auth(self, spec: LaunchSpec, server: str) -> None:
        """Refuse an API key for a server without authentication that listens beyond loopback
        (on 127.0.0.1 the key is simply not needed: nothing else can reach it).

        Args:
            spec: The launch settings.
            server: The server's name in the message (e.g. ``"Ollama"``).

        Raises:
            UnsupportedFeature: ``spec`` sets a key and a host other than a loopback address.
        """
        if spec.key() and not is_loopback(spec.host):
            raise self(
                "api_key",
                f"{server} has no API keys, so a key would not protect {spec.host}",
                "Bind 127.0.0.1, or put an authenticating proxy in front",
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["Refuse", "RefusalRule", "is_loopback"]
