"""backend=megatron_bridge: NVIDIA-NeMo/Megatron-Bridge. Importing this package does not import it."""
