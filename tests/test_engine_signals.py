"""Engines run on every CPU: AMX tile state is requested in each engine process, and a death by a
signal (the engine's or a worker's, before or after ready) is named with what to change."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from fake_adapter import FakeAdapter

import unillm
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec
from unillm.launching.cpu_features import BOOT_DIR, boot_env, cpu_has_amx
from unillm.launching.supervisor import Launch
from unillm.testing.fault_server import FaultServer

HERE = Path(__file__).resolve().parent
ENGINE = HERE / "signal_engine.py"
LINUX_X86 = sys.platform.startswith("linux") and platform.machine() == "x86_64"
needs_linux_x86 = pytest.mark.skipif(not LINUX_X86, reason="AMX tile permission is a Linux x86-64 request")

# What a process reports, and what it reports in a spawned child (an engine's worker).
REPORT = f"""
import multiprocessing, sys
sys.path.insert(0, {str(HERE)!r})
from amx_probe import amx_permitted
def child(q):
    q.put(amx_permitted())
if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print(amx_permitted(), q.get(timeout=60))
    p.join()
"""


class ScriptAdapter(FakeAdapter):
    """The fake adapter, launching ``signal_engine.py`` in the mode given by ``extra_args``."""

    name = "script"

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        argv = [spec.python or sys.executable, str(ENGINE), "--port", str(spec.port), *spec.extra_args]
        return LaunchCommand(argv=argv)


def _launch(tmp_path: Path, mode: str, **settings: object) -> Launch:
    spec = LaunchSpec(model="m", python=sys.executable, extra_args=["--mode", mode], **settings)
    return Launch(ScriptAdapter(), spec, progress=None, log_path=tmp_path / "engine.log")


async def _launch_error(tmp_path: Path, mode: str) -> unillm.LaunchError:
    with pytest.raises(unillm.LaunchError) as caught:
        async with _launch(tmp_path, mode):
            pass
    return caught.value


def _run(env: dict[str, str], tmp_path: Path) -> str:
    script = tmp_path / "report.py"  # a file: spawned children import their target from it
    script.write_text(REPORT)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_boot_env_puts_the_boot_folder_first_and_keeps_the_rest() -> None:
    env = boot_env({"A": "1"}, inherited={"PYTHONPATH": f"/x{os.pathsep}/y"})
    assert env == {"A": "1", "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), "/x", "/y"])}
    assert boot_env(env, inherited={}) == env  # applied once


def test_an_engine_pythonpath_wins_over_the_inherited_one() -> None:
    env = boot_env({"PYTHONPATH": "/mine"}, inherited={"PYTHONPATH": "/inherited"})
    assert env["PYTHONPATH"] == os.pathsep.join([str(BOOT_DIR), "/mine"])


@needs_linux_x86
def test_every_engine_process_and_its_spawned_workers_may_use_amx_exactly_when_the_cpu_has_it(
    tmp_path: Path,
) -> None:
    env = boot_env({}, inherited=os.environ)
    assert _run({**os.environ, **env}, tmp_path) == f"{cpu_has_amx()} {cpu_has_amx()}"


@needs_linux_x86
def test_without_the_boot_folder_no_process_asks_for_amx(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert _run(env, tmp_path) == "False False"


def test_the_environments_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITECUSTOMIZE = True\n")
    env = {**os.environ, **boot_env({"PYTHONPATH": str(tmp_path)}, inherited={})}
    out = subprocess.run(
        [sys.executable, "-c", "import builtins; print(getattr(builtins, 'OWN_SITECUSTOMIZE', False))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"
    assert out.stderr == ""


def test_cpu_has_amx_reads_the_flags_of_every_processor(tmp_path: Path) -> None:
    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("processor: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n" * 2)
    plain.write_text("processor: 0\nflags\t\t: fpu avx512f\n")
    assert cpu_has_amx(str(amx)) and not cpu_has_amx(str(plain))
    assert not cpu_has_amx(str(tmp_path / "missing"))


def test_dry_run_says_what_the_boot_folder_does(tmp_path: Path) -> None:
    command = _launch(tmp_path, "sleep").command()
    assert str(BOOT_DIR) in command.env["PYTHONPATH"]
    assert any("AMX" in note for note in command.notes)


def test_a_prefixed_launch_gets_no_boot_folder(tmp_path: Path) -> None:
    spec = LaunchSpec(model="m", python=sys.executable, prefix=["docker", "run", "img"])
    command = Launch(ScriptAdapter(), spec, progress=None).command()
    assert str(BOOT_DIR) not in command.env.get("PYTHONPATH", "")


@pytest.mark.anyio
async def test_an_engine_dying_of_sigill_names_the_signal_and_runs_with_the_amx_request(
    tmp_path: Path,
) -> None:
    error = await _launch_error(tmp_path, "sigill")
    assert any("died of SIGILL" in c and "instruction this CPU does not allow" in c for c in error.causes)
    assert f"amx-permitted={cpu_has_amx() and LINUX_X86}" in error.log_tail
    assert "code -4" in str(error)


@pytest.mark.anyio
async def test_a_worker_dying_of_sigill_is_named_although_the_engine_exits_normally(tmp_path: Path) -> None:
    error = await _launch_error(tmp_path, "worker-sigill")
    assert any(c.startswith("VllmWorker-0 died of SIGILL") for c in error.causes)
    assert "SIGILL" in str(error)


@pytest.mark.anyio
async def test_an_engine_that_dies_after_ready_is_named_in_the_next_error(tmp_path: Path) -> None:
    async with _launch(tmp_path, "serve-then-sigill") as llm:
        await llm.generate("hi", max_tokens=2)  # the second generation: the engine dies after it
        with anyio.fail_after(30):
            while llm.diagnose is None or llm.diagnose() is None:
                await anyio.sleep(0.05)
        with pytest.raises(unillm.EngineUnavailable) as caught:
            await llm.generate("hi", max_tokens=2)
    assert "died of SIGILL" in str(caught.value) and "full log:" in str(caught.value)


@pytest.mark.anyio
async def test_a_busy_port_is_refused_before_starting(tmp_path: Path) -> None:
    with FaultServer() as other:
        launch = _launch(tmp_path, "sleep", port=other.port)
        with pytest.raises(unillm.LaunchError, match="already in use"):
            async with launch:
                pass
        assert launch.pid is None  # nothing was started
        assert other.count() == 0


@pytest.mark.anyio
async def test_another_server_answering_for_the_engine_gets_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultServer() as other:
        launch = _launch(tmp_path, "sleep", port=other.port)
        monkeypatch.setattr(launch, "_refuse_busy_port", lambda: None)  # as if it bound just after the check
        with pytest.raises(unillm.LaunchError, match="not the script process unillm started"):
            async with launch:
                pass
        assert [s.path for s in other.requests] == ["/health"]
        assert all("authorization" not in {k.lower() for k in s.headers} for s in other.requests)
    assert launch.returncode is not None  # ours was stopped


def test_a_port_left_in_time_wait_by_a_stopped_engine_is_not_busy(tmp_path: Path) -> None:
    import socket

    with socket.socket() as listener:  # a stopped engine: it closed its connections first
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
    _launch(tmp_path, "sleep", port=port)._refuse_busy_port()  # a restarted replica may bind it


def test_a_hint_matched_while_starting_is_not_blamed_for_later_errors(tmp_path: Path) -> None:
    launch = _launch(tmp_path, "sleep")
    launch._log.add_cause("a known cause seen in the start-up log")
    assert launch.trouble() is None  # the engine runs and no process died
    launch._log.add("ERROR Worker proc VllmWorker-1 died unexpectedly (exit code: -9)")
    trouble = launch.trouble()
    assert trouble is not None and trouble.startswith("VllmWorker-1 died of SIGKILL")
    assert "known cause" not in trouble
