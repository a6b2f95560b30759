"""The probe's JSON schema on SGLang-CPU at temperature 1, three ways: raw, through unillm on the
server it launched, and through unillm connected to it (``unillm.connect``: the backend learnt from
``/get_server_info``). Counts the complete answers that are not JSON (a raw control character
inside a string) on each path.

xgrammar (SGLang's default grammar backend) compiles a string with ``maxLength`` to a class that
admits raw control characters; unillm sends such strings as a pattern over the same count that
admits none (``unillm.adapter.schemas.xgrammar_strings``). SGLang-CPU cannot replay a seed
(``--enable-deterministic-inference`` needs a GPU attention backend), so each path draws its own
samples.

    .venv/bin/python benchmarks/sglang_control_chars.py --samples 40

Writes ``benchmarks/results/sglang_control_chars.json``. Last line: JSON
``{"samples", "raw_complete", "raw_invalid", "launched_invalid", "connected_invalid", ...}``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "sglang_control_chars.json"
CONTROL = re.compile(r"[\x00-\x1f]")
PATHS = ("raw", "launched", "connected")


def strict_json(text: str) -> bool:
    """Whether ``text`` is JSON as RFC 8259 has it (no raw control character in a string)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


async def measure(samples: int, max_tokens: int) -> dict[str, Any]:
    """Each sample's answer on every path: raw (the probe's schema as it is) and through unillm."""
    import unillm
    from unillm.probing.cells import PROMPT, SCHEMA

    sys.path.insert(0, str(ROOT / "adapters" / "sglang" / "tests"))
    import cpu_env

    from unillm.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model()
    with tempfile.TemporaryDirectory(prefix="unillm-sglang-cc-") as d:
        launch = unillm.launch(
            "sglang", **cpu_env.launch_settings(tiny.path, Path(d)), log_path=Path(d) / "log"
        )
        async with launch as launched:
            key = launch.spec.key()
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            fmt = {"type": "json_schema", "json_schema": {"name": "probe", "schema": SCHEMA}}
            body = {"model": "tiny", "messages": list(PROMPT), "temperature": 1.0,
                    "max_tokens": max_tokens, "response_format": fmt}  # fmt: skip
            rows = []
            async with (
                httpx.AsyncClient(base_url=launch.base_url, headers=headers, timeout=120) as client,
                unillm.connect("sglang", launch.base_url, api_key=key) as connected,
            ):
                for sample in range(samples):
                    raw = (await client.post("/v1/chat/completions", json=body)).json()["choices"][0]
                    answers = {
                        "raw": (raw["message"]["content"] or "", raw["finish_reason"]),
                        "launched": await _through_unillm(launched, max_tokens),
                        "connected": await _through_unillm(connected, max_tokens),
                    }
                    rows.append(_row(sample, answers))
            return {"version": (await launched.info()).version, "rows": rows}


async def _through_unillm(llm: Any, max_tokens: int) -> tuple[str, str | None]:
    """The text and finish reason through unillm (an answer that does not parse: its raw text)."""
    import unillm
    from unillm.probing.cells import PROMPT, SCHEMA

    try:
        r = await llm.generate(
            messages=list(PROMPT), temperature=1.0, max_tokens=max_tokens, output=unillm.JsonSchema(SCHEMA)
        )
    except unillm.OutputParseError as e:
        return e.text, e.finish_reason
    return r.text, r.finish_reason


def _row(sample: int, answers: dict[str, tuple[str, str | None]]) -> dict[str, Any]:
    row: dict[str, Any] = {"sample": sample}
    for path, (text, finish) in answers.items():
        row[path] = {
            "text": text,
            "finish": finish,
            "control": bool(CONTROL.search(text)),
            "json": strict_json(text),
        }
    return row


def summary(version: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The last line: per path, complete answers, those not JSON, and the samples with a control character."""
    line: dict[str, Any] = {"engine": f"sglang {version}", "samples": len(rows)}
    for path in PATHS:
        complete = [r[path] for r in rows if r[path]["finish"] != "length"]
        line[f"{path}_complete"] = len(complete)
        line[f"{path}_invalid"] = sum(not a["json"] for a in complete)
        line[f"{path}_control_samples"] = [r["sample"] for r in rows if r[path]["control"]]
    return line


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    result = anyio.run(measure, args.samples, args.max_tokens)
    line = summary(result["version"], result["rows"])
    goals = {
        "unillm_invalid": line["launched_invalid"] + line["connected_invalid"],
        "goal": "0 complete answers through unillm (launched or connected) that are not JSON",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"goals": goals, "summary": line, "rows": result["rows"]}, indent=1) + "\n")
    print(json.dumps({**line, "goals": goals}))


if __name__ == "__main__":
    main()
