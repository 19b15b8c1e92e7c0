from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class SideEffect:
    """A real file a tool appends to: the proof of whether, and how often, it ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")

    @property
    def happened(self) -> bool:
        return self.path.exists()

    @property
    def lines(self) -> list[str]:
        return self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []


@pytest.fixture
def effect(tmp_path: Path) -> SideEffect:
    return SideEffect(tmp_path / "effect.txt")


class Processes:
    """Starts the helper programs in tests/programs and kills every one of them at teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, program: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(PROGRAMS / program), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            **kwargs,  # type: ignore[call-overload]
        )
        self.started.append(proc)
        return proc

    def run(self, program: str, *args: str, timeout: float = 30) -> str:
        """Run a program to completion; return its stdout, failing the test on an error."""
        proc = self.start(program, *args)
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{program} {args} failed ({proc.returncode}):\n{err}"
        return out

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()


@pytest.fixture
def processes() -> Iterator[Processes]:
    procs = Processes()
    try:
        yield procs
    finally:
        procs.kill_all()
