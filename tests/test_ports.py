"""Ports unillm picks for the engines it starts: free, and out of the way of outgoing connections."""

from __future__ import annotations

import socket
from pathlib import Path

from unillm.launching.ports import LOWEST, ephemeral_low, free_port


def write_range(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return path


def test_the_port_lies_below_the_ephemeral_range(tmp_path: Path) -> None:
    range_file = write_range(tmp_path, "40000\t60999\n")
    ports = {free_port(range_file=range_file) for _ in range(20)}
    assert all(LOWEST <= port < 40000 for port in ports)


def test_the_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_given(tmp_path: Path) -> None:
    range_file = write_range(tmp_path, f"{LOWEST + 64} 60999")  # 64 candidates: every one is tried
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", LOWEST))
        assert all(free_port(range_file=range_file) != LOWEST for _ in range(20))


def test_no_room_below_the_range_falls_back_to_a_kernel_port(tmp_path: Path) -> None:
    range_file = write_range(tmp_path, f"{LOWEST + 10} 60999")
    assert free_port(range_file=range_file) >= ephemeral_low()


def test_an_unreadable_range_is_taken_as_ianas(tmp_path: Path) -> None:
    assert ephemeral_low(tmp_path / "missing") == 49152
    assert ephemeral_low(write_range(tmp_path, "garbage")) == 49152
