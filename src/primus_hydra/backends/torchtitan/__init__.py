"""backend=torchtitan: pytorch/torchtitan's JobConfig and Trainer. Importing this package imports neither."""
