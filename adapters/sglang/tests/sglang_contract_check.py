"""Validate unillm's SGLang request bodies and launch argv with SGLang's own models.

Runs INSIDE the SGLang env (``cpu_env.py``), so it imports SGLang itself; no GPU is needed for
these modules. Checks (through :mod:`unillm.testing.verdicts`)
``{"name": {"kind": ..., "body" | "argv": ...}}`` as JSON on stdin and prints
``{"name": "ok" | "<why it was rejected>"}``.

Kinds: ``generate`` (``/generate``: the ``sglang.api.v1`` wire contract, which rejects unknown
sampling keys, and ``GenerateReqInput``), ``completions`` / ``chat`` (the OpenAI server's
pydantic request models; every key must be a declared field), ``load_lora`` / ``unload_lora``
/ ``abort`` (``/abort_request``'s body; the request structs) and ``argv`` (``launch_server``'s
argument parser).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


def _sglang(module: str, name: str) -> Any:
    return getattr(import_module(f"sglang.{module}"), name)


def check(case: dict[str, Any]) -> None:
    kind = case["kind"]
    if kind == "generate":
        _sglang("api.v1.api_types", "GenerateRequest").from_json_value(case["body"])
        _sglang("srt.managers.io_struct", "GenerateReqInput")(**case["body"])
    elif kind in ("completions", "chat"):
        name = "CompletionRequest" if kind == "completions" else "ChatCompletionRequest"
        model = _sglang("srt.entrypoints.openai.protocol", name)
        unknown = set(case["body"]) - set(model.model_fields)
        if unknown:
            raise ValueError(f"fields {sorted(unknown)} are not in {name}")
        model.model_validate(case["body"])
    elif kind in ("load_lora", "unload_lora", "abort"):
        name = {"load_lora": "LoadLoRAAdapterReqInput", "unload_lora": "UnloadLoRAAdapterReqInput"}.get(
            kind, "AbortReq"
        )
        # a keyword-only struct: unknown or missing fields raise TypeError
        _sglang("srt.managers.io_struct", name)(**case["body"])
    elif kind == "argv":
        args = _sglang("srt.server_args", "prepare_server_args")(case["argv"])
        for attr, want in case.get("expect", {}).items():
            got = getattr(args, attr)
            if got != want and str(got) != str(want):
                raise ValueError(f"{attr}={got!r}, expected {want!r}")
    else:
        raise ValueError(f"unknown kind {kind!r}")
