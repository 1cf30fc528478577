"""hydra/sweeper=primus_basic: Hydra's basic sweeper, validating points without composing each one again."""
