"""backend=megatron: Megatron-LM (megatron.core + megatron.training). Importing this package imports neither."""
