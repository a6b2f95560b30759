"""The Ray leg of benchmarks/batch.py: `unillm batch` from a config whose ``[launch.cluster]`` is Ray.

On a local two-node Ray cluster (each node one CPU, its engine's threads bound to a core of its
own, as ``tests/integration/test_ray_cluster.py`` sets up its cluster), one launch from a config
of two vLLM-CPU replicas (STRICT_SPREAD: one per node) serves:

* **1 replica against 2**, interleaved rounds on the same input: `unillm batch` (the API the CLI
  runs, :func:`unillm.batch.run`) through replica 0 alone (the other idle), then through the
  fleet of both; ``ray_2_replicas_vs_1`` is the median over rounds of the fleet's requests/s over
  the one replica's in the same round;
* **a node kill**: a fresh batch through the fleet; once a third of the results is written, the
  worker node (its ``ray start`` process group, the raylet in it) and its engine get SIGKILL. Every
  custom_id must be written exactly once; ``redone`` counts the requests sent to replicas beyond
  one per id (the fleet's per-replica counters), the bound being ``--ray-concurrency``.

``ray_data_llm`` says why ``ray.data.llm`` does not run here, from the installed packages'
metadata: what Ray's ``llm`` extra pins against what the vLLM env holds.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from unillm.launching.ray_watchdog import stop_groups
from unillm.testing.ray_local import LocalCluster, local_cluster


def write_config(path: Path, settings: dict[str, Any], address: str, replicas: int) -> Path:
    """A unillm config: the engine's launch settings, ``replicas`` on the Ray cluster at ``address``."""
    import tomli_w

    cluster = {"kind": "ray", "address": address, "placement": "STRICT_SPREAD", "host": "127.0.0.1"}
    kept = {k: v for k, v in settings.items() if v is not None}  # TOML has no null: unset is the default
    launch = {**kept, "replicas": replicas, "cluster": cluster}
    path.write_text(tomli_w.dumps({"engine": "vllm", "launch": launch}))
    return path


def worker_replica(run: Any, cluster: LocalCluster) -> int:
    """The index of the replica placed on the worker node (found by the node's socket paths)."""
    import ray

    for node in ray.nodes():
        if str(node.get("RayletSocketName", "")).startswith(cluster.temp["worker"]):
            return int(run.node_ids.index(node["NodeID"]))
    raise SystemExit(f"no replica on the worker node: {run.node_ids}")


async def timed_batch(inp: Path, out: Path, client: Any, cap: int, progress: Any = None) -> dict[str, Any]:
    """One `unillm.batch.run` into a fresh ``out``: its summary's rates and the sent counters."""
    import unillm.batch

    await anyio.Path(out).unlink(missing_ok=True)
    summary = await unillm.batch.run(
        inp, out, client, max_concurrency=cap, progress=progress or (lambda s: None)
    )
    return {
        "requests_per_s": summary.requests_per_s,
        "tokens_per_s": summary.tokens_per_s,
        "seconds": summary.seconds,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
    }


async def scaling(args: Any, inp: Path, d: Path, fleet: Any, check: Any) -> list[dict[str, Any]]:
    """Interleaved rounds of replica 0 alone and of the fleet of both, on the same input."""
    rounds = []
    for r in range(args.rounds):
        order = ["1", "2"] if r % 2 == 0 else ["2", "1"]
        row: dict[str, Any] = {"order": order, "load_before": os.getloadavg()[0]}
        for leg in order:
            client = fleet.replicas[0] if leg == "1" else fleet
            out = d / f"ray-{leg}-out.jsonl"
            row[leg] = await timed_batch(inp, out, client, args.ray_concurrency)
            row[leg]["check"] = check(out, args.requests)
            print(f"[batch] ray round {r + 1}: {leg} replica(s) {row[leg]}", file=sys.stderr, flush=True)
        row["2_vs_1"] = row["2"]["requests_per_s"] / row["1"]["requests_per_s"]
        rounds.append(row)
    return rounds


async def node_kill(
    args: Any, inp: Path, d: Path, fleet: Any, victims: list[int], check: Any
) -> dict[str, Any]:
    """A batch through the fleet; a third of the way, SIGKILL to the process groups ``victims``: the
    worker node's (its ``ray start``, the raylet in it) and its engine's, as if the machine were gone."""
    out = d / "ray-kill-out.jsonl"
    before = [r.requests for r in fleet.stats().replicas]
    killed: list[int] = []

    def kill_at_a_third(summary: Any) -> None:
        if summary.done >= args.requests // 3 and not killed:
            killed.append(summary.done)
            for group in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
            print(f"[batch] ray: worker node killed at {summary.done} results", file=sys.stderr, flush=True)

    run = await timed_batch(inp, out, fleet, args.ray_concurrency, kill_at_a_third)
    sent = [r.requests - b for r, b in zip(fleet.stats().replicas, before, strict=True)]
    lines = [json.loads(x) for x in (await anyio.Path(out).read_text()).splitlines() if x.strip()]
    ids = [x["custom_id"] for x in lines]
    given = (await anyio.Path(inp).read_text()).splitlines()
    expected = {json.loads(x)["custom_id"] for x in given if x.strip()}
    return {
        "unique": len(set(ids)),
        "redone": sum(sent) - args.requests,
        "lines": len(lines),
        "every_id_once": len(ids) == len(set(ids)) and set(ids) == expected,
        "killed_at": killed,
        "sent_per_replica": sent,
        "bound": args.ray_concurrency,
        "run": run,
        "check": check(out, args.requests),
    }


def ray_data_llm() -> dict[str, Any]:
    """Whether ``ray.data.llm`` can run here, and why not: Ray's ``llm`` extra against the vLLM env."""
    from unillm.launching.envs import managed_python

    pins = [
        r.split(";")[0].strip() for r in importlib.metadata.requires("ray") or [] if 'extra == "llm"' in r
    ]
    wanted = [p for p in pins if p.startswith(("vllm", "nixl"))]
    probe = (
        "import importlib.metadata as m, json\n"
        "d = [x for x in m.distributions() if (x.metadata['Name'] or '').lower().startswith('vllm')]\n"
        "try:\n    import ray.data.llm\n    err = None\n"
        "except Exception as e:\n    err = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps({'vllm': [f\"{x.metadata['Name']}=={x.version}\" for x in d],"
        " 'import_ray_data_llm': err or 'ok'}))\n"
    )
    pinned = pinned_vllm(wanted)
    pinned_cuda = pinned.get("cuda_requirements", [])
    python = managed_python("vllm")
    done = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    env = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-500:]}
    cuda = ", ".join(pinned_cuda) or "see pinned_vllm"
    why = (
        f"ray {importlib.metadata.version('ray')}'s llm extra pins {', '.join(wanted)} "
        f"(that vLLM wheel requires {cuda}; nixl-cu13 is NVIDIA's CUDA 13 transfer library); "
        f"the vLLM env here ({python}) holds {env.get('vllm')} and `import ray.data.llm` there gives "
        f"{env.get('import_ray_data_llm')}: no interpreter has both a CPU vLLM and ray[llm] to run "
        "vLLMEngineProcessor in, so no number is given"
    )
    return {"ran": False, "why": why, "ray_llm_extra_pins": wanted, "vllm_env": env, "pinned_vllm": pinned}


def pinned_vllm(pins: list[str]) -> dict[str, Any]:
    """The CUDA part of the vLLM that Ray's llm extra pins, from its metadata on the package index
    (``pip install --dry-run --no-deps --report``: the metadata only, no wheel)."""
    pin = next((p for p in pins if p.startswith("vllm")), None)
    if pin is None:
        return {"looked_up": False}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--quiet",
        ]
        done = subprocess.run(
            [*cmd, "--report", str(report), pin], capture_output=True, text=True, timeout=180
        )
        if done.returncode != 0 or not report.exists():
            return {"looked_up": False, "error": done.stderr[-300:]}
        item = json.loads(report.read_text())["install"][0]
    needs = item["metadata"].get("requires_dist", [])
    cuda = [
        r
        for r in needs
        if "extra ==" not in r and any(k in r.lower() for k in ("nvidia", "flashinfer", "cu1"))
    ]
    return {
        "looked_up": True,
        "wheel": item["download_info"]["url"].rsplit("/", 1)[-1],
        "cuda_requirements": cuda,
    }


def ray_leg(args: Any, inp: Path, d: Path, settings: dict[str, Any], check: Any) -> dict[str, Any]:
    """The whole Ray leg: cluster, one launch of two replicas, scaling rounds, then the node kill."""
    import unillm

    with local_cluster() as cluster:
        config = write_config(d / "ray.toml", settings, cluster.address, replicas=2)
        run = unillm.from_config(str(config))

        async def go() -> dict[str, Any]:
            started = time.monotonic()
            with contextlib.redirect_stdout(sys.stderr):  # the launch's progress lines
                fleet = await run.__aenter__()
            try:
                ready_s = time.monotonic() - started
                rounds = await scaling(args, inp, d, fleet, check)
                victim = worker_replica(run, cluster)
                victims = [g for g in (cluster.groups["worker"], run.ready[victim].pid) if g is not None]
                kill = await node_kill(args, inp, d, fleet, victims, check)
                kill["killed_replica"] = victim
            finally:
                engines = {r.pid for r in run.ready if r.pid is not None}
                with anyio.fail_after(120):
                    await run.__aexit__(None, None, None)
                stop_groups(engines)  # what the launch's teardown could not reach on the dead node
            return {
                "replicas_ready_s": ready_s,
                "node_ids": run.node_ids,
                "rounds": rounds,
                "node_kill": kill,
            }

        found = anyio.run(go)
    rounds = found["rounds"]
    return {
        "ray_2_replicas_vs_1": statistics.median(r["2_vs_1"] for r in rounds),
        "ray_1_replica_requests_per_s": statistics.median(r["1"]["requests_per_s"] for r in rounds),
        "ray_2_replicas_requests_per_s": statistics.median(r["2"]["requests_per_s"] for r in rounds),
        "ray_node_kill": found["node_kill"],
        "ray": {k: v for k, v in found.items() if k != "node_kill"},
    }
