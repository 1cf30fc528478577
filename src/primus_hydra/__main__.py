# Imported as __mp_main__ by every spawned worker: keep the CLI (and Hydra) out of workers' start-up.
if __name__ == "__main__":
    from primus_hydra.cli import main

    main()
