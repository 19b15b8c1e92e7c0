"""Running: `run_bash` (`process`), reservations, whole-tree containment and killing
(`containment`), bounded output (`capture`) and the git guard (`gitguard`). Uses
`sandbox.bash.linux` to confine; knows nothing of policies or humans. The measured
facts it is built on (what killpg misses, RLIMIT_NPROC under root, pipes that outlive
the shell): docs/platform.md."""
