"""Check cases with an engine's own code, inside its env: ``{"name": "ok" | "<why rejected>"}``.

A checker is a script with ``check(*args, case)`` that imports the engine (vLLM's argument parser,
SGLang's request models, a router's launcher) and raises when the engine would refuse ``case``.
:func:`verdicts` runs this file as a script under the engine env's interpreter, which has no
unillm (so the script part imports only the standard library)::

    python verdicts.py CHECKER.py [ARG ...] < cases.json    # prints {"name": "ok" | why}
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def verdicts(
    python: Path | None,
    checker: Path,
    cases: Mapping[str, Any],
    *args: str,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Each case's verdict from ``checker`` run by ``python`` (an engine's managed env).

    Args:
        python: The engine env's interpreter; None (the env is missing) fails the test.
        checker: The checker script (its ``check(*args, case)`` raises on a refused case).
        cases: Name -> case, as JSON.
        *args: Passed to ``check`` before each case (e.g. the router's name).
        env: The checker's environment (default: this process's).

    Returns:
        Name -> ``"ok"`` or why the engine refused the case.
    """
    assert python is not None, f"the managed env for {checker.name} is missing: run ./run setup"
    done = subprocess.run(
        [str(python), __file__, str(checker), *args],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: dict[str, str] = json.loads(done.stdout)
    return results


def _main(checker: str, *args: str) -> None:
    spec = importlib.util.spec_from_file_location("checker", checker)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = {}
    for name, case in json.load(sys.stdin).items():
        try:
            module.check(*args, case)
            results[name] = "ok"
        except BaseException as e:  # argparse exits (SystemExit): every rejection is a result
            results[name] = f"{type(e).__name__}: {e}"[:1000]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    sys.path.pop(0)  # this folder: its modules must not shadow the engine's imports
    _main(*sys.argv[1:])
