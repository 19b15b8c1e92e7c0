"""Confining, on Linux, with the standard library only: detection and the plan
(`confinement`), protected paths (`protected`), the child's set-up between fork and exec
(`child`), cgroups, the spawner and its zygotes (`spawner`, `spawner_main`) and the
subreaper. Handed what to enforce as data; knows nothing of policies or humans. The
measured facts it is built on (Landlock ABIs, namespaces, cgroups): docs/platform.md."""
