"""Reservations: each run reserves the tree of the next one like it and asks the spawner
for a zygote prepared ahead for it (see the comment below); the next run takes it when
that zygote is offered already."""

from __future__ import annotations

import asyncio
import atexit
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from sandbox.bash.linux.child import ChildSetup
from sandbox.bash.linux.confinement import (
    Confinement,
    ConfinementRequest,
    plan,
)
from sandbox.bash.linux.spawner import Spawner, remove_tree
from sandbox.bash.run.containment import (
    Tree,
    open_tree,
)

# How long the child may take to hand the proxy's listeners over (its set-up, before
# exec: milliseconds unless the machine is overloaded).
_HANDOVER_SECONDS = 30.0

def _live_spawner() -> Spawner | None:
    """This process's spawner if it runs, without starting one."""
    running = Spawner._shared
    if (running is None or running._broken or running._proc.poll() is not None
            or running._pid_changed()):  # fmt: skip
        return None
    return running


#
# A cgroup move waits for an RCU grace period (~10-20 ms here) once no move has happened
# for a few tens of milliseconds: the kernel's cgroup_threadgroup_rwsem falls back to
# its fast reader mode when idle, and a writer must wait a grace period to leave it.
# An agent calls its tool after waiting for its model, so nearly every command would
# pay it. Instead, each run reserves the tree of the next one (same mechanism, a pids
# cgroup whether or not the next run limits processes) and asks the spawner for a
# zygote prepared ahead for it: that zygote joins the cgroups while the agent waits
# for its model. The next run takes the reservation only if that zygote is offered
# already; a reservation no run takes is discarded when the next one is made.

_RESERVABLE = ("cgroup2", "cgroup1-freezer", "killpg")


@dataclass
class _Reservation:
    signature: tuple[Any, ...]  # what the run asked for: see run_bash
    key: ChildSetup  # the zygote's spawn_key
    tree: Tree
    tmpdir: str | None
    confinement: Confinement | None
    protections: dict[str, str] | None
    spawner: Spawner
    made: float

    def forget(self) -> None:
        """No run will take this one: its zygote goes, then its tree and TMPDIR."""
        try:
            self.spawner.forget(self.key)
        except OSError:
            pass
        finally:
            self.discard()

    def discard(self) -> None:
        try:
            self.tree.discard()
        finally:
            if self.tmpdir is not None:
                remove_tree(self.tmpdir)


# By signature, least recently reserved first (an agent may alternate tools with
# different policies), each a list: back to back, one run takes a reservation while the
# next is still being made, and a second one ready absorbs it.
_reservations: dict[tuple[Any, ...], list[_Reservation]] = {}
_MAX_RESERVATIONS = 4  # signatures
_RESERVED_PER_SIGNATURE = 2
_reservation_lock = threading.Lock()
_reservations_taken = 0  # how many runs took one (for tests and benchmarks)
_last_signature: tuple[Any, ...] | None = None  # of the last run that could take one
# Whether a run reserves the next ones like it. A process that runs one command and
# exits (`sandbox run`) turns it off: its reservations would be made (trees, TMPDIRs,
# zygotes) only to be discarded at its exit.
reserve_ahead = True
# A reservation whose zygote has not been offered by then is made again.
_RESERVATION_PATIENCE = 2.0


def _private_tmpdir(uid: int | None, gid: int | None) -> str:
    tmpdir = tempfile.mkdtemp(prefix="sandbox-tmp-")
    if uid is not None and gid is not None:
        os.chown(tmpdir, uid, gid)
    return tmpdir


def _take_reservation(signature: tuple[Any, ...]) -> _Reservation | None:
    """A run reserved for one like this, whose zygote is offered now (the oldest)."""
    global _reservations_taken
    with _reservation_lock:
        kept = _reservations.get(signature)
        if not kept:
            return None
        offered = kept[0].spawner.offered_keys()  # one spawner: see _reserve
        ready = [r for r in kept if r.key in offered]
        if not ready:
            return None
        held = ready[0]
        _reservations[signature].remove(held)
        if held.tmpdir is not None and not os.path.isdir(held.tmpdir):
            gone = held  # removed from under us (a /tmp cleaner): not usable
        else:
            _reservations_taken += 1
            return held
    gone.forget()
    return None


def _reserve(signature: tuple[Any, ...], plan_request: ConfinementRequest | None) -> None:
    """Reserve the next runs like this one (their trees, their TMPDIRs) and ask the
    spawner for a zygote set up for each (see above). Never raises: without a
    reservation the next run sets itself up as usual."""
    mechanism, shell, _, workdir, uid, gid = signature
    made: list[Any] = []
    dropped: list[_Reservation] = []
    try:
        # Never started here (on the event loop): the next run starts it, in a thread.
        live = _live_spawner()
        if live is None:
            return
        spawner = live
        with _reservation_lock:
            # Those of a spawner that is gone, and those whose zygote is overdue, are
            # discarded (then made again); this signature becomes the most recent.
            now = time.monotonic()
            for sig in list(_reservations):
                kept = []
                for other in _reservations.pop(sig):
                    if other.spawner is spawner and (
                            now - other.made < _RESERVATION_PATIENCE
                            or other.spawner.offered(other.key)):  # fmt: skip
                        kept.append(other)
                    else:
                        dropped.append(other)
                if kept or sig == signature:
                    _reservations[sig] = kept
            held = _reservations.pop(signature, [])
            _reservations[signature] = held
            while len(held) < _RESERVED_PER_SIGNATURE:
                tmpdir = None
                if plan_request is not None and plan_request.mode != "none":
                    # Ours (0700) until a run takes it: nobody else's files in it by then.
                    tmpdir = _private_tmpdir(None, None)
                    made.append(tmpdir)
                confinement, protections = None, None
                if plan_request is not None:
                    confinement, protections = plan(
                        plan_request, workspace=workdir, tmpdir=tmpdir,
                        drops_to_uid=uid is not None)  # fmt: skip
                tree = open_tree(mechanism, limit_processes=True, shell=shell,
                                 own_pid_namespace=mechanism == "pidns")  # fmt: skip
                made.append(tree)
                key = ChildSetup(cgroup_procs=tree.placement_files, uid=uid, gid=gid,
                                 confinement=confinement)  # fmt: skip
                spawner.prepare(key)
                held.append(_Reservation(signature, key, tree, tmpdir, confinement,
                                         protections, spawner, time.monotonic()))  # fmt: skip
                made.clear()
            while len(_reservations) > _MAX_RESERVATIONS:
                dropped.extend(_reservations.pop(next(iter(_reservations))))
    except Exception:  # an optimisation: the next run does without
        for thing in made:
            if isinstance(thing, str):
                remove_tree(thing)
            else:
                thing.discard()
    finally:
        for other in dropped:
            other.forget()


def _reserve_soon(signature: tuple[Any, ...], plan_request: ConfinementRequest | None) -> None:
    """`_reserve`, after the result is handed back: on asyncio, at the event loop's
    next turn (an agent's next await is usually its model call, while which the
    zygote sets itself up); elsewhere, now."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        _reserve(signature, plan_request)
    else:
        loop.call_soon(_reserve, signature, plan_request)


def _forget_the_parents_reservations() -> None:
    """In a child forked from the agent: the reservations are the parent's (their
    zygotes are offered to the parent's spawner, their TMPDIRs and cgroups meant for
    the parent's runs): never taken, never discarded here."""
    global _reservations, _reservation_lock
    _reservations = {}
    _reservation_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_reservations)


def _discard_reservations() -> None:
    with _reservation_lock:
        held = [r for kept in _reservations.values() for r in kept]
        _reservations.clear()
    for reservation in held:
        reservation.discard()


atexit.register(_discard_reservations)
