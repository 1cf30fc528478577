"""`python -m primus_hydra` and the `primus-hydra` console script: the command line (primus_hydra/cli.py).

Python's garbage collector is paused before anything is imported: importing Hydra, composing, validating and
preparing one job make ~10^5 objects and almost no garbage (~2 MB of reference cycles), and the collector's ~140
passes over them were ~20 ms of Hydra's import and ~20 ms of a command's work on this machine (docs/benchmarks.md).
It is switched on when a task runs (cli._hydra_main), with what start-up made frozen (never scanned again: the
config and the modules live as long as the run), and stays off for a command that runs none or ends right after
(--cfg, --help, task=plan, a projection, a dry run). A sweep (-m) composes a config for every point and keeps it on.
"""


def console_script() -> None:
    import gc
    import sys

    if not {"-m", "--multirun"}.intersection(sys.argv[1:]):
        gc.disable()
    from primus_hydra.config.hydra_import import fast_hydra_import

    with fast_hydra_import():  # the CLI imports Hydra
        from primus_hydra.cli import main

    main()


# Imported as __mp_main__ by every spawned worker: keep the CLI (and Hydra) out of workers' start-up.
if __name__ == "__main__":
    import sys

    # Hydra writes the commands it suggests (--hydra-help) and the shell completion it installs (--shell-completion
    # install=bash) for argv[0], and knows `python <file>.py` or an installed command, not `python -m`: name the
    # console script, which completes the same config.
    if {"--hydra-help", "--shell-completion", "-sc"}.intersection(sys.argv[1:]):
        sys.argv[0] = "primus-hydra"
    console_script()
