"""hydra/sweeper=primus_basic: Hydra's basic sweeper, preparing or checking each batch without composing every point again."""
