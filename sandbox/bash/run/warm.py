"""Getting a process ready for its first command, ahead of it.

The first command of a process pays for what every later one finds done: starting the
spawner (a ``python -I -S`` process that forks the commands, `sandbox.bash.linux.spawner`:
~100-250 ms), probing which containment mechanism works here (`containment.choose`:
a few test processes) and which confinement layers the kernel offers
(`confinement.detect`: a few test children). An agent builds its tools, then waits for
its model; `ExecuteBashTool` calls `ahead` when it is built, so that this happens in
that wait, in a daemon thread, and the first command finds it done.

Nothing here decides anything: each step is the very function the first run calls,
behind the same lock and cache. A run that comes while a step is under way waits for
that step (on its lock) instead of doing it again; a step that failed here is done
again by the run, which reports the failure as it always did. Once per process (a
forked child, whose spawner is not its parent's, warms again when it builds a tool).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["ahead", "spawner_ahead"]

# What was started, by the pid of the process it was started in ("spawner", "probes").
_started: dict[str, int] = {}
_lock = threading.Lock()


def _forget_the_parents_lock() -> None:
    """In a child forked while a thread of the parent held it."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_lock)


def _first(step: str) -> bool:
    """Whether `step` is to be started in this process (then it counts as started)."""
    with _lock:
        if _started.get(step) == os.getpid():
            return False
        _started[step] = os.getpid()
        return True


def _start(step: str, target: Callable[..., None], *args: object) -> None:
    try:
        threading.Thread(target=target, args=args, name=f"sandbox-warm-{step}",
                         daemon=True).start()
    except RuntimeError:  # no thread to be had (interpreter shutting down): the run does it
        with _lock:
            _started.pop(step, None)


def ahead(*, confined: bool) -> None:
    """Start the spawner and the probes, once per process, each in a daemon thread
    (each mostly waits for processes: the spawner's start-up, test children; on two
    cores they take the time of the longer one). ``confined``: the tool's commands run
    under OS confinement (then its layers are probed too). Returns at once; never
    raises."""
    if _first("spawner"):
        _start("spawner", _spawner)
    if _first("probes"):
        _start("probes", _probes, confined)


def spawner_ahead() -> None:
    """Only the spawner, before any tool is built: for `sandbox run`, which imports the
    policy and the gate first (the spawner starts meanwhile, in a process of its own).
    Its module is imported here, in the caller's thread, so that the thread imports
    nothing while the caller goes on importing."""
    from sandbox.bash.linux import spawner  # noqa: F401

    if _first("spawner"):
        _start("spawner", _spawner)


def _spawner() -> None:
    try:
        from sandbox.bash.linux.spawner import Spawner

        Spawner.shared()
    except Exception:  # the first run starts it, and says why it cannot
        pass


def _probes(confined: bool) -> None:
    try:
        from sandbox.bash.run.containment import choose
        from sandbox.bash.run.process import find_bash

        choose("auto", find_bash())
    except Exception:  # the run chooses again and reports
        pass
    if confined:
        try:
            from sandbox.bash.linux.confinement import detect

            detect()
        except Exception:  # the run detects again and reports
            pass
