"""Every request of a batch checked against an in-process engine before it starts (pure).

An in-process engine's mode decides what it can honour (``adapter.expected_version(spec)``
names it, e.g. ``+in-process``), so the whole input is checked against it before the engine
loads: each request's options against the mode's capabilities, the call the adapter builds
against what the in-process engine takes (``adapter.in_process_refusal``).
"""

from __future__ import annotations

from collections.abc import Iterable

from unillm.adapter.base import Adapter, EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.batch.lines import BatchItem
from unillm.capabilities import Feature, check
from unillm.errors import InvalidOptions, UnillmError, clip_message
from unillm.options import make_request

__all__ = ["refuse_in_process"]

_MAX_PROBLEMS, _PROBLEM = 10, 600


def refuse_in_process(adapter: Adapter, spec: LaunchSpec, items: Iterable[BatchItem]) -> None:
    """Refuse the batch if the in-process engine of ``spec`` cannot run any of ``items``.

    Args:
        adapter: The engine's adapter (bound to ``spec`` as the launch binds it).
        spec: The resolved launch settings (``in_process=True``).
        items: The requests still to run.

    Raises:
        InvalidOptions: Some requests ask for what the in-process engine cannot honour; the
            message lists up to ten by line number. Nothing was started.
    """
    version = adapter.expected_version(spec)
    capabilities = adapter.capabilities(version)
    info = EngineInfo(engine=adapter.name, model=spec.served_name or spec.model, version=version)
    problems: list[str] = []
    count = 0
    for item in items:
        try:
            if item.endpoint == "embeddings":
                capabilities.require(Feature.EMBEDDINGS)
                continue
            request = make_request(item.prompt, item.messages, item.output, item.options, stream=False)
            check(capabilities, request)
            refusal = adapter.in_process_refusal(adapter.build(request, info))
            if refusal is not None:
                raise refusal
        except UnillmError as e:
            count += 1
            if len(problems) < _MAX_PROBLEMS:
                problems.append(clip_message(f"line {item.line} ({item.custom_id}): {e}", _PROBLEM))
    if problems:
        more = f"\n... and {count - len(problems)} more" if count > len(problems) else ""
        raise InvalidOptions(
            f"{count} request(s) ask for what in-process {adapter.name} cannot honour; nothing was "
            "started. Drop those options, or run the batch on a server (without --in-process):\n"
            + "\n".join(problems)
            + more
        )
