"""The watchdog that stops a Ray actor's engines once the actor is gone (no Ray needed)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from unillm.launching.ray_watchdog import engine_groups, group_alive, stop_groups

# An "actor": starts an "engine" in a session of its own, which starts a worker; prints its pid.
ACTOR = """
import subprocess, sys, time
sleep = "import time; time.sleep(60)"
worker = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleep!r}]); time.sleep(60)"
engine = subprocess.Popen([sys.executable, "-c", worker], start_new_session=True)
print(engine.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def actor() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    process = subprocess.Popen([sys.executable, "-c", ACTOR], stdout=subprocess.PIPE)
    assert process.stdout is not None
    engine = int(process.stdout.readline())
    deadline = time.monotonic() + 10  # until the engine has started its worker
    while len(psutil.Process(engine).children()) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield process, engine
    process.kill()
    process.wait()
    stop_groups({engine}, grace=1.0)


def test_the_actors_engine_groups_are_the_children_leading_their_own(
    actor: tuple[subprocess.Popen[bytes], int],
) -> None:
    process, engine = actor
    assert engine_groups(psutil.Process(process.pid)) == {engine}


def test_stopping_a_group_stops_the_engine_and_its_workers(
    actor: tuple[subprocess.Popen[bytes], int],
) -> None:
    _, engine = actor
    stop_groups({engine}, grace=5.0)
    assert not group_alive(engine)


# An actor that starts its detached watchdog first, as ReplicaHost does.
WATCHED = (
    "from unillm.launching.ray_watchdog import start_detached; import os; start_detached(os.getpid())\n"
    + ACTOR
)


def test_a_killed_actors_engine_and_workers_are_stopped_by_its_watchdog() -> None:
    process = subprocess.Popen([sys.executable, "-c", WATCHED], stdout=subprocess.PIPE)
    assert process.stdout is not None
    engine = int(process.stdout.readline())
    time.sleep(1.0)  # two looks of the watchdog at the actor's children
    for child in psutil.Process(process.pid).children():  # as Ray does: the worker's children, then it
        child.kill()
    process.kill()
    process.wait()
    deadline = time.monotonic() + 15
    while group_alive(engine) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(engine)
