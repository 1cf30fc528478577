"""`python -m primus_hydra`: the command line (primus_hydra/cli.py), as the `primus-hydra` console script runs it."""
# Imported as __mp_main__ by every spawned worker: keep the CLI (and Hydra) out of workers' start-up.
if __name__ == "__main__":
    import sys

    from primus_hydra.cli import main

    # Hydra writes the commands it suggests (--hydra-help) and the shell completion it installs (--shell-completion
    # install=bash) for argv[0], and knows `python <file>.py` or an installed command, not `python -m`: name the
    # console script, which completes the same config.
    if {"--hydra-help", "--shell-completion", "-sc"}.intersection(sys.argv[1:]):
        sys.argv[0] = "primus-hydra"
    main()
