"""Run every cell against one engine through one client and collect the report.

report = await unillm.probe(llm, samples=3)             # through unillm
report = await run_cells(OpenAIClient(url, model), engine="vllm", samples=3)   # a peer client
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from unillm.client.calls import ClientCalls
from unillm.probing.asking import Answer, Ask, NotExpressible, ProbeClient, Refused, Rejected, UnillmClient
from unillm.probing.cells import CELLS
from unillm.probing.judge import Judged
from unillm.probing.report import Cell, ProbeReport

#: ``progress(option, done, total)``, called before each cell and once at the end.
Progress = Callable[[str, int, int], None]


class _Counting:
    """A client that counts the requests it is asked to send."""

    def __init__(self, inner: ProbeClient) -> None:
        self.inner, self.name, self.sent = inner, inner.name, 0

    async def ask(self, ask: Ask) -> Answer:
        answer = await self.inner.ask(ask)
        self.sent += 1
        return answer

    async def loras(self) -> list[str]:
        return await self.inner.loras()


async def run_cells(
    client: ProbeClient,
    *,
    engine: str,
    model: str,
    version: str | None = None,
    samples: int = 3,
    only: Collection[str] | None = None,
    progress: Progress | None = None,
) -> ProbeReport:
    """Every cell (or those in ``only``) through ``client``.

    Args:
        client: What sends the requests (:class:`UnillmClient` or a peer).
        engine: The engine's name, for the report.
        model: The served model, for the report.
        version: The engine's version, for the report.
        samples: Samples per cell that samples (determinism, constraints).
        only: The options to probe (names as in the report); None: all.
        progress: Called with (option, done, total) before each cell and at the end.

    Returns:
        One cell per option.
    """
    chosen = [name for name in CELLS if only is None or name in only]
    cells = []
    for i, name in enumerate(chosen):
        if progress is not None:
            progress(name, i, len(chosen))
        counting = _Counting(client)
        verdict, evidence = await _judged(CELLS[name], counting, samples)
        cells.append(Cell(option=name, verdict=verdict, evidence=evidence, requests=counting.sent))
    if progress is not None:
        progress("", len(chosen), len(chosen))
    return ProbeReport(
        engine=engine, version=version, model=model, client=client.name, samples=samples, cells=cells
    )


async def _judged(cell: Any, client: ProbeClient, samples: int) -> Judged:
    try:
        judged: Judged = await cell(client, samples)
    except Refused as e:
        return "refused", str(e)
    except NotExpressible as e:
        return "unmeasurable", str(e)
    except Rejected as e:
        return "rejected", str(e)
    return judged


async def probe(
    llm: ClientCalls,
    *,
    samples: int = 3,
    only: Collection[str] | None = None,
    progress: Progress | None = None,
) -> ProbeReport:
    """Measure, by effect, which options the engine behind ``llm`` honours.

        report = await unillm.probe(unillm.connect("vllm", "http://127.0.0.1:8000"))
        print(report.text())

    Each option becomes a cell: honoured (with the evidence), refused before sending (unillm
    raised, nothing sent), rejected by the engine (an error answer), ignored by the engine (a
    silent drop: sent, accepted, no effect) or not measurable here (why).

    Args:
        llm: A unillm client (``connect(...)`` or a launched engine).
        samples: Samples per cell that samples (determinism, constraint validity).
        only: The options to probe (names as in the report); None: all.
        progress: Called with (option, done, total) before each cell and at the end.

    Returns:
        The report: ``.text()``, ``.markdown()``, ``.model_dump_json()``.

    Raises:
        InvalidOptions: ``samples`` below 1, or an unknown name in ``only``.
        EngineError: Discovery failed (the engine is not reachable or not that engine).
    """
    from unillm.errors import InvalidOptions

    if samples < 1:
        raise InvalidOptions(f"samples must be at least 1, got {samples}")
    unknown = sorted(set(only or ()) - set(CELLS))
    if unknown:
        raise InvalidOptions(f"unknown probe option(s) {unknown}; known: {list(CELLS)}")
    info = await llm.info()
    return await run_cells(
        UnillmClient(llm),
        engine=llm.engine,
        model=info.model,
        version=info.version,
        samples=samples,
        only=only,
        progress=progress,
    )
