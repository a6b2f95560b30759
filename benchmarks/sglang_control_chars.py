"""The probe's JSON schema on SGLang-CPU at temperature 1, raw and through unillm: how many
answers carry a raw control character inside a string (not JSON), with each seed.

xgrammar (SGLang's default grammar backend) compiles a string with ``maxLength`` to a class that
admits raw control characters; unillm sends such strings as a pattern over the same count that
admits none (``unillm.adapter.schemas.xgrammar_strings``). SGLang is launched with
``--enable-deterministic-inference`` so every seed's answer can be replayed.

    .venv/bin/python benchmarks/sglang_control_chars.py --seeds 40

Writes ``benchmarks/results/sglang_control_chars.json``. Last line: JSON
``{"seeds", "raw_invalid", "raw_control_seeds", "unillm_invalid", ...}``.
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


def strict_json(text: str) -> bool:
    """Whether ``text`` is JSON as RFC 8259 has it (no raw control character in a string)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


async def measure(seeds: int, max_tokens: int) -> dict[str, Any]:
    """Each seed's answer raw (the probe's schema as it is) and through unillm (rewritten)."""
    import unillm
    from unillm.probing.cells import PROMPT, SCHEMA

    sys.path.insert(0, str(ROOT / "adapters" / "sglang" / "tests"))
    import cpu_env

    from unillm.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model()
    with tempfile.TemporaryDirectory(prefix="unillm-sglang-cc-") as d:
        settings = cpu_env.launch_settings(
            tiny.path, Path(d), extra_args=["--enable-deterministic-inference"]
        )
        launch = unillm.launch("sglang", **settings, log_path=Path(d) / "engine.log")
        async with launch as llm:
            key = launch.spec.key()
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            fmt = {"type": "json_schema", "json_schema": {"name": "probe", "schema": SCHEMA}}
            rows = []
            async with httpx.AsyncClient(base_url=launch.base_url, headers=headers, timeout=120) as client:
                for seed in range(seeds):
                    body = {"model": "tiny", "messages": list(PROMPT), "temperature": 1.0,
                            "max_tokens": max_tokens, "seed": seed, "response_format": fmt}  # fmt: skip
                    raw = (await client.post("/v1/chat/completions", json=body)).json()["choices"][0]
                    ours = await _through_unillm(llm, seed, max_tokens)
                    rows.append(_row(seed, raw["message"]["content"] or "", raw["finish_reason"], ours))
            return {"version": (await llm.info()).version, "rows": rows}


async def _through_unillm(llm: Any, seed: int, max_tokens: int) -> tuple[str, str | None]:
    """The text and finish reason through unillm (an answer that does not parse: its raw text)."""
    import unillm
    from unillm.probing.cells import PROMPT, SCHEMA

    try:
        r = await llm.generate(
            messages=list(PROMPT), temperature=1.0, max_tokens=max_tokens, seed=seed,
            output=unillm.JsonSchema(SCHEMA),
        )  # fmt: skip
    except unillm.OutputParseError as e:
        return e.text, e.finish_reason
    return r.text, r.finish_reason


def _row(seed: int, raw: str, raw_finish: str | None, ours: tuple[str, str | None]) -> dict[str, Any]:
    return {
        "seed": seed,
        "raw": raw,
        "raw_finish": raw_finish,
        "raw_control": bool(CONTROL.search(raw)),
        "raw_json": strict_json(raw),
        "unillm": ours[0],
        "unillm_finish": ours[1],
        "unillm_control": bool(CONTROL.search(ours[0])),
        "unillm_json": strict_json(ours[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    result = anyio.run(measure, args.seeds, args.max_tokens)
    rows = result["rows"]
    complete = [r for r in rows if r["raw_finish"] != "length"]
    ours_complete = [r for r in rows if r["unillm_finish"] != "length"]
    line = {
        "engine": f"sglang {result['version']}",
        "seeds": len(rows),
        "raw_complete": len(complete),
        "raw_invalid": sum(not r["raw_json"] for r in complete),
        "raw_control_seeds": [r["seed"] for r in rows if r["raw_control"]],
        "unillm_complete": len(ours_complete),
        "unillm_invalid": sum(not r["unillm_json"] for r in ours_complete),
        "unillm_control_seeds": [r["seed"] for r in rows if r["unillm_control"]],
    }
    goals = {
        "unillm_invalid": line["unillm_invalid"],
        "goal": "0 complete answers through unillm that are not JSON",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"goals": goals, "summary": line, "rows": rows}, indent=1) + "\n")
    print(json.dumps({**line, "goals": goals}))


if __name__ == "__main__":
    main()
