"""Nothing a model writes and nothing a command leaves behind freezes the agent's event
loop (issue 16, item 6). A crafted 4,096-byte command kept tree-sitter busy for 2-8 s in
the agent's process, on the loop; a run's TMPDIR holding 200,000 files was removed on
the loop (9 s). The bounds asserted here are generous (a second against those seconds):
bench/stall.py measures the real figures."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.run import process as process_module
from sandbox.bash.syntax import guard
from sandbox.bash.syntax import parse as parse_module
from sandbox.bash.syntax import script as script_module
from sandbox.bash.syntax.parse import ParseOffLoop, loop_budget

pytestmark = pytest.mark.timeout(120)

# Under the parse worker's guard (4,096 bytes, 100 openers) and superlinear for
# tree-sitter-bash 0.25's error recovery: 2-8 s in one go.
BOMB = "(" * 100 + ")~" * 1998
PLAIN_BOMB_SECONDS = 1.5  # a tree-sitter parse of BOMB takes longer than this here


def ctx() -> ToolContext:
    return ToolContext(function_call_id="stall",
                       tool_confirmation=ToolConfirmation(confirmed=True))


def test_the_bomb_stays_under_the_worker_guard() -> None:
    data = BOMB.encode()
    assert len(data) == parse_module.GUARDED_PARSE_ABOVE
    assert not parse_module._needs_guard(data)


def test_a_crafted_short_command_is_cut_at_max_parse_seconds() -> None:
    # policy.check called by a user, not on a loop: still time-bounded.
    policy = BashToolPolicy(max_parse_seconds=0.2)
    started = time.perf_counter()
    decision = policy.check(BOMB)
    elapsed = time.perf_counter() - started
    assert not decision.allowed and decision.rule == "R6"
    assert "longer than 0.2 s to parse" in decision.reason
    assert elapsed < PLAIN_BOMB_SECONDS, elapsed


def test_a_parse_cut_short_on_a_loop_is_neither_refused_nor_remembered() -> None:
    # ParseOffLoop passes through check() (which turns Exceptions into R6) and its memo.
    policy = BashToolPolicy(allowed_command_prefixes=("ls",))
    command = "ls " + "'a' " * 200
    with pytest.raises(ParseOffLoop), loop_budget(10.0, 100):
        policy.check(command)  # longer than the budget's characters
    with pytest.raises(ParseOffLoop), loop_budget(-1.0, 100_000):
        policy.check(command)  # the budget's deadline has passed
    with pytest.raises(ParseOffLoop), loop_budget(10.0, 100_000):
        policy.check("ls " + "a " * 3000)  # one for the parse worker: not waited for here
    assert policy.check(command).allowed
    with loop_budget(10.0, 100_000):
        assert policy.check("ls -la").allowed  # cheap: decided within the budget


async def _max_lag_during(call: Any) -> tuple[float, Any]:
    """Run ``call`` while a ticker measures the loop's worst lateness (seconds)."""
    lag = 0.0
    done = False

    async def ticker() -> None:
        nonlocal lag
        while not done:
            before = time.perf_counter()
            await anyio.sleep(0.002)
            lag = max(lag, time.perf_counter() - before - 0.002)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(0.01)
        result = await call()
        done = True
    return lag, result


@pytest.mark.anyio
async def test_the_bash_tool_decides_a_slow_command_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    finished_in: list[int] = []
    bounded = script_module._parse_bounded

    def recording(data: bytes, seconds: float) -> Any:
        root = bounded(data, seconds)
        finished_in.append(threading.get_ident())
        return root

    monkeypatch.setattr(script_module, "_parse_bounded", recording)
    tool = ExecuteBashTool(workspace=tmp_path, policy=BashToolPolicy(max_parse_seconds=5.0))
    lag, result = await _max_lag_during(
        lambda: tool.run_async(args={"command": BOMB}, tool_context=ctx()))
    assert result.get("rule") == "R6", result
    assert lag < 1.0, f"the event loop stalled {lag:.2f} s"
    # Whatever tree-sitter finished, it finished in a worker thread.
    assert loop_thread not in finished_in
    # An ordinary command is still decided on the loop (no thread hop).
    finished_in.clear()
    assert (await tool._check("ls -la | grep x > /dev/null")).allowed
    assert finished_in == [loop_thread]


@pytest.mark.anyio
async def test_a_full_tmpdir_is_removed_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    removed: list[tuple[str, int]] = []
    remove_tree = process_module.remove_tree

    def recording(path: str) -> None:
        removed.append((path, threading.get_ident()))
        remove_tree(path)

    monkeypatch.setattr(process_module, "remove_tree", recording)
    tool = ExecuteBashTool(workspace=tmp_path, policy=BashToolPolicy(timeout_seconds=120))
    command = 'cd "$TMPDIR" && seq 1 20000 | xargs touch && pwd'
    lag, result = await _max_lag_during(
        lambda: tool.run_async(args={"command": command}, tool_context=ctx()))
    tmpdir = result["stdout"].strip()
    if not tmpdir.startswith("/") or "sandbox-tmp-" not in tmpdir:
        pytest.skip(f"no private TMPDIR here (confinement off): {result}")
    assert not os.path.exists(tmpdir)
    ours = [thread for path, thread in removed if path == tmpdir]
    assert ours and loop_thread not in ours  # (reserved, empty TMPDIRs may go too)
    assert lag < 1.0, f"the event loop stalled {lag:.2f} s"


@pytest.mark.anyio
async def test_large_output_is_decoded_in_slices_with_the_same_text() -> None:
    # bytes.decode holds the GIL: a thread would not help, slices do. The text is the
    # one BoundedCapture.text() gives, a character cut at a slice edge included.
    import random

    from sandbox.bash.run.capture import _DECODE_SLICE, BoundedCapture, decoded

    rng = random.Random(16)
    for limit in (0, 100, 3 * _DECODE_SLICE + 5, 8 * _DECODE_SLICE):
        for pieces in ([b"\xe2\x82\xac" * (_DECODE_SLICE // 3 + 7)],
                       [rng.randbytes(5 * _DECODE_SLICE), "é😀".encode() * 90_000],
                       [rng.randbytes(2 * _DECODE_SLICE + 1)]):
            capture = BoundedCapture(limit)
            for piece in pieces:
                capture.feed(piece)
            assert await decoded(capture) == capture.text()

    capture = BoundedCapture(8 * _DECODE_SLICE)
    capture.feed(rng.randbytes(8 * _DECODE_SLICE))
    steps = 0
    done = False

    async def count() -> None:
        nonlocal steps
        while not done:
            steps += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(count)
        await anyio.lowlevel.checkpoint()
        await decoded(capture)
        done = True
    assert steps >= 4  # the loop ran other tasks while the output was decoded


@pytest.mark.anyio
async def test_a_large_result_is_json_encoded_in_slices_with_the_same_text() -> None:
    # The store's JSON of a result with megabytes of output: same text as dump(), built
    # a slice per loop step.
    import random

    from sandbox.approval.gate.journal import _SLICE_CHARS, dump_sliced
    from sandbox.approval.store.records import Dumped, dump

    rng = random.Random(6)
    noise = rng.randbytes(3 * _SLICE_CHARS).decode("utf-8", "replace")
    result = {"stdout": noise, "stderr": "\x1b\u2028\"\\" * _SLICE_CHARS, "returncode": None,
              "containment": {"rlimits": "inactive", "n": [1, 2.5]}, "truncated": False}
    assert await dump_sliced({"stdout": "small"}) == {"stdout": "small"}
    encoded = await dump_sliced(result)
    assert type(encoded) is Dumped and dump(encoded) == dump(result)

    steps = 0
    done = False

    async def count() -> None:
        nonlocal steps
        while not done:
            steps += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(count)
        await anyio.lowlevel.checkpoint()
        await dump_sliced(result)
        done = True
    assert steps >= 4


def test_the_workers_parse_comes_back_in_pieces_and_whole() -> None:
    # A command for the worker is walked there; its ParsedScript comes back pickled in
    # pieces (unpickling holds the GIL), equal to the parse made in this process.
    from sandbox.bash.syntax.agreement import check_agreement

    for source in ("a;" * 3000, "echo" + " a" * 3000, "ls > a; " * 700,
                   "echo " + "$(ls) " * 900, "cat <<E\nx\nE\n" * 500):
        data = source.encode()
        assert parse_module._needs_guard(data)
        here = parse_module._parse_tree(source, data, 100, check_agreement)
        assert guard._unpickled(guard._pickled(here)) == here
        assert parse_module.parse(source) == here


def test_the_workers_reply_cannot_build_anything_but_the_parse_model() -> None:
    # A worker taken over through a parser bug must not run code here by its reply.
    import pickle

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, ("touch /tmp/holes-stall-pwned",))

    for reply in (pickle.dumps([("v", pickle.dumps(Evil()))]), pickle.dumps(Evil())):
        with pytest.raises(pickle.UnpicklingError):
            guard._unpickled(reply)
    assert not os.path.exists("/tmp/holes-stall-pwned")
