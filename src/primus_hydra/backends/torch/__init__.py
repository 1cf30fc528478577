"""The built-in PyTorch backend (backend=torch): a native Llama-style model and training loop."""
