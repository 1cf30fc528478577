"""The rails every trainer stands on: the step loop, checkpoints, metrics, process groups, token data, weights drawn
shard by shard, peak memory. The native backend (backends/torch), megatron, torchtitan and the benchmark worker build
on them; nothing here knows a backend by name."""
