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

__all__ = ["ahead"]

_warmed_in: int | None = None  # the pid of the process warmed (or being warmed)
_lock = threading.Lock()


def _forget_the_parents_lock() -> None:
    """In a child forked while a thread of the parent held it."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_lock)


def ahead(*, confined: bool) -> None:
    """Start the spawner and the probes in a daemon thread, once per process.
    ``confined``: the tool's commands run under OS confinement (then its layers are
    probed too). Returns at once; never raises."""
    global _warmed_in
    with _lock:
        if _warmed_in == os.getpid():
            return
        _warmed_in = os.getpid()
    try:
        # Two threads: each mostly waits for processes (the spawner's start-up, test
        # children), so on two cores they take the time of the longer one.
        threading.Thread(target=_spawner, name="sandbox-warm-spawner", daemon=True).start()
        threading.Thread(target=_probes, args=(confined,), name="sandbox-warm-probes",
                         daemon=True).start()
    except RuntimeError:  # no thread to be had (interpreter shutting down): the run does it
        with _lock:
            _warmed_in = None


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
