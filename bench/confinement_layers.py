"""Per-command cost of each OS confinement layer (sandbox/bash/linux/confinement.py).

Each row spawns `/bin/true` with subprocess and a preexec_fn that applies one layer
(preparation before the fork included, as a run does it: the prepared Landlock rules
and BPF program are reused from run to run, as the spawner reuses them), and reports
the median wall time per command and the difference against an empty preexec_fn. The
private /proc row forks inside a new PID namespace, as the spawner does. The last rows
run `bash -c true` through `run_bash` (the spawner, with its zygote) with confinement
"none", the default, and the default without a private /proc, so the whole cost of
the second wall in a real run shows too.

    .venv/bin/python bench/confinement_layers.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from sandbox.bash.linux import confinement as confinement_module
from sandbox.bash.linux.confinement import (
    UNAVAILABLE_ENV,
    Confinement,
    ConfinementRequest,
    detect,
    fork_in_pid_namespace,
    plan,
    prepare,
)
from sandbox.bash.run.process import Limits, run_bash

TRUE = "/bin/true"


def _time(fn: Callable[[], None], runs: int) -> float:
    fn()  # warm up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def _interleaved(fns: list[Callable[[], None]], runs: int) -> list[float]:
    """Median µs of each, measured round-robin so that load drifting on a shared
    machine weighs on every row alike."""
    samples: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()  # warm up
    for _ in range(runs):
        for i, fn in enumerate(fns):
            started = time.perf_counter()
            fn()
            samples[i].append(time.perf_counter() - started)
    return [statistics.median(s) * 1e6 for s in samples]


def _spawn(confinement: Confinement | None) -> Callable[[], None]:
    def once() -> None:
        if confinement is None:
            subprocess.run([TRUE], check=True)
            return
        prepared = prepare(confinement)
        try:
            if not confinement.private_proc:
                subprocess.run([TRUE], check=True, preexec_fn=prepared.apply)
                return
            # The first process of a PID namespace of its own, as the spawner forks it.
            pid = fork_in_pid_namespace(confinement)
            if pid == 0:
                try:
                    prepared.apply()
                    os.execv(TRUE, [TRUE])
                finally:
                    os._exit(127)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
        finally:
            prepared.close()

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    kernel = detect()
    workspace = tempfile.mkdtemp(prefix="sandbox-bench-")
    full, _ = plan(ConfinementRequest(), workspace=workspace, tmpdir=workspace)
    assert full is not None
    abi = kernel.landlock_abi
    nothing = Confinement(drop_capabilities=False, no_new_privs=False)
    rows: list[tuple[str, Confinement | None]] = [
        ("no preexec_fn (vfork)", None),
        ("empty preexec_fn (fork)", nothing),
        ("capabilities dropped", Confinement(no_new_privs=False)),
        ("no_new_privs", Confinement(drop_capabilities=False)),
        ("seccomp filter", Confinement(drop_capabilities=False, seccomp=True)),
        # The default's rules, with the host's /proc granted (the private /proc row
        # adds the namespaces that cover /etc's secrets and mount a fresh /proc).
        ("landlock fs (the default's rules)", Confinement(
            drop_capabilities=False, landlock_abi=abi, landlock_fs=True,
            read_paths=(*full.read_paths, "/proc"), write_paths=full.write_paths,
            private_paths=full.private_paths, device_paths=full.device_paths)),
        ("landlock fs (/etc piecewise, ~170 rules)", Confinement(
            drop_capabilities=False, landlock_abi=abi, landlock_fs=True,
            read_paths=(*[p for p in full.read_paths if p != "/etc"], "/proc",
                        *confinement_module._etc_rules()),
            write_paths=full.write_paths, private_paths=full.private_paths,
            device_paths=full.device_paths)),
        ("landlock net + scopes", Confinement(
            drop_capabilities=False, landlock_abi=abi, landlock_net=True,
            landlock_scopes=True)),
        ("network namespace (shared, setns)", Confinement(
            drop_capabilities=False, new_netns=True, new_userns=full.new_userns,
            euid=full.euid, egid=full.egid)),
        ("network namespace (new, loopback)", Confinement(
            drop_capabilities=False, new_netns=True, loopback_up=True,
            new_userns=full.new_userns, euid=full.euid, egid=full.egid)),
        ("private /proc (PID+mount ns, /etc covers)", Confinement(
            drop_capabilities=False, private_proc=True,
            hide_etc_secrets=full.hide_etc_secrets)),
        ("all layers (the default)", full),
    ]  # fmt: skip
    print(f"Landlock ABI {abi}; missing: {dict(kernel.missing) or 'nothing'}; {runs} runs each; "
          f"{len(full.read_paths) + len(full.write_paths)} Landlock path rules; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'layer':40} {'median µs':>10} {'vs empty preexec_fn':>20}")
    medians = _interleaved([_spawn(c) for _, c in rows], runs)
    base = medians[1]
    for i, ((name, _), micros) in enumerate(zip(rows, medians, strict=True)):
        delta = f"{micros - base:+.0f}" if i >= 2 else ""
        print(f"{name:40} {micros:10.0f} {delta:>20}")
    prep = _time(lambda: prepare(full).close(), runs)
    print(f"{'  of which prepare() in the parent':40} {prep:10.0f}")

    async def through_run_bash(mode: str) -> float:
        request = ConfinementRequest(mode=mode)
        samples = []
        for _ in range(runs // 2 + 1):
            started = time.perf_counter()
            await run_bash("true", cwd=Path(workspace), env={"PATH": "/usr/bin:/bin"},
                           timeout=10, limits=Limits(), confinement=request)  # fmt: skip
            samples.append(time.perf_counter() - started)
            await anyio.sleep(0.005)  # as between an agent's commands: the zygote is ready
        return statistics.median(samples[1:]) * 1e6

    print()
    print("through run_bash and the spawner (a zygote forked ahead of each command):")
    for label, mode, without in (("confinement='none'", "none", ""),
                                 ("the default (best-effort)", "best-effort", ""),
                                 ("the default without private /proc", "best-effort",
                                  "private-proc")):  # fmt: skip
        os.environ[UNAVAILABLE_ENV] = without
        confinement_module._reset_detection_for_tests()
        micros = anyio.run(through_run_bash, mode)
        print(f"{'run_bash bash -c true, ' + label:52} {micros:10.0f}")
    os.environ.pop(UNAVAILABLE_ENV, None)


if __name__ == "__main__":
    main()
