"""The batch output file as a journal: durable appends, the resume scan, the torn-line repair.

Durability policy (group commit): finished results are appended as whole lines, the lines
waiting at that moment in one ``write`` on an ``O_APPEND`` descriptor, then ``fsync``; only
after the ``fsync`` returns does any of them count as done (progress, summary, the concurrency
slot it held). A crash therefore loses at most the results not yet fsynced, never a result
that was reported done, and can leave at most one torn last line (no newline, or not JSON),
which the next run's scan cuts off and redoes. The file is created with its directory fsynced,
and held under an exclusive ``flock`` so two runs never write one output.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unillm.batch.render import failed
from unillm.errors import InvalidOptions


@dataclass
class Resume:
    """What an existing output already holds: ids done (with or without success), a torn tail."""

    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    torn_bytes: int = 0  # bytes of a torn last line that were cut off

    @property
    def done(self) -> set[str]:
        """Every id with a result line, success or failure."""
        return self.succeeded | self.failed


class Journal:
    """An output file opened for appending under an exclusive lock: ``with Journal(path) as j:``.

    Args:
        path: The output JSONL file (created if absent).

    Raises:
        InvalidOptions: Another process holds the file (a second run on the same output), or
            it cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = self._open()

    def _open(self) -> int:
        existed = self.path.exists()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise InvalidOptions(f"cannot open the output {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise InvalidOptions(
                f"another unillm batch is writing {self.path}; wait for it or pick another --out"
            ) from None
        if not existed:
            _fsync_dir(self.path.parent)
        return fd

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock and close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def scan(self, ids: Collection[str]) -> Resume:
        """Read what the output holds, cutting off (and fsyncing away) a torn last line.

        Args:
            ids: The input's custom_ids; a line for any other id means a different batch's output.

        Returns:
            The ids already done, split into succeeded and failed.

        Raises:
            InvalidOptions: A line that is not a result (not the last one), an id the input
                does not have, or an id written twice.
        """
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1
        lines = data[:whole].split(b"\n")[:-1]
        resume = Resume(torn_bytes=len(data) - whole)
        parsed: list[dict[str, Any] | None] = [_result(line) for line in lines]
        if parsed and parsed[-1] is None:  # written whole but unreadable: torn by the file system
            resume.torn_bytes += len(lines[-1]) + 1
            whole -= len(lines[-1]) + 1
            parsed.pop()
        if resume.torn_bytes:
            os.ftruncate(self._fd, whole)
            os.fsync(self._fd)
        for number, line in enumerate(parsed, start=1):
            if line is None:
                raise InvalidOptions(
                    f"{self.path} line {number} is not a batch result; is --out the right file?"
                )
            custom_id = line["custom_id"]
            if custom_id not in ids:
                raise InvalidOptions(
                    f"{self.path} holds a result for custom_id {custom_id!r}, which the input does not "
                    "have: it is another batch's output. Pick another --out"
                )
            if custom_id in resume.succeeded or custom_id in resume.failed:
                raise InvalidOptions(f"{self.path} holds custom_id {custom_id!r} twice (line {number})")
            (resume.failed if failed(line) else resume.succeeded).add(custom_id)
        return resume

    def drop(self, ids: Collection[str]) -> int:
        """Remove the lines of ``ids`` (to redo failed requests), atomically: a new file replaces it.

        Returns:
            How many lines were removed.
        """
        kept: list[bytes] = []
        removed = 0
        for line in self.path.read_bytes().splitlines(keepends=True):
            result = _result(line.rstrip(b"\n"))
            if result is not None and result["custom_id"] in ids:
                removed += 1
            else:
                kept.append(line)
        if not removed:
            return 0
        tmp = self.path.with_name(self.path.name + ".compact")
        with open(tmp, "wb") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self.close()  # the lock was on the replaced file: take it on the new one
        self._fd = self._open()
        return removed

    def append(self, lines: list[bytes]) -> None:
        """Append whole lines in one write and fsync before returning (the group commit)."""
        data = b"".join(lines)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)


def _result(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("custom_id"), str):
        return None
    return value


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_lines(path: str | Path) -> Iterator[str]:
    """The lines of an input file (UTF-8).

    Raises:
        InvalidOptions: The file cannot be read or is not UTF-8.
    """
    try:
        with open(path, encoding="utf-8") as f:
            yield from f
    except OSError as e:
        raise InvalidOptions(f"cannot read the batch input {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InvalidOptions(f"the batch input {path} is not UTF-8 text ({e.reason})") from None
