"""What a task=benchmark (or task=preflight) run measures, case by case, and the memory each case holds at once.

Computed from the config alone, without torch: the orchestrator checks the largest case against this machine before
any worker starts (tasks/benchmark.py, through orchestrator/fit_checks.py), and the workers measure the same list
(runner.py). A case's bytes are its tensors at their peak, measured against the process's peak RSS on the CPU:
- gemm: A (M x K), B (K x N) and the product (M x N) at the dtype's width; fp8 operands are drawn in float32 and
  cast, and the product comes out in bf16.
- attention: q, k, v, the output and the output's gradient, the three input gradients, the GQA-expanded k and v,
  and the math backend's score-sized tensors (b x heads x s x s, float32 whatever the dtype; up to 8 at once in
  the backward).
- collectives: the input and output buffers twice (the libraries' staging copies), and the check's slice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

GIB = 1024.0 ** 3
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
DTYPE_NAMES = tuple(DTYPE_BYTES)
CPU_DTYPES = ("fp32", "bf16", "fp16")
CPU_GEMM_SIZES = (256, 512, 1024, 2048)
GPU_GEMM_SIZES = (1024, 2048, 4096, 8192, 16384)
CPU_MESSAGE_BYTES = tuple(4 ** power for power in range(6, 13))  # 4 KiB .. 16 MiB
GPU_MESSAGE_BYTES = tuple(4 ** power for power in range(5, 15))  # 1 KiB .. 256 MiB
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
FLOAT32 = 4  # collectives move float32 elements
CHECK_SLICE = 1 << 22  # elements a collective's check compares at once (its temporaries: 13 bytes each)
SCORE_TENSORS = 8  # the math SDPA backend's score-sized float32 tensors alive at once (forward and backward)
# task=preflight: one GEMM (M = N = K, dtype) on a GPU and on the CPU, and one all_reduce
PREFLIGHT_GEMM = {True: (8192, "bf16"), False: (1024, "fp32")}
PREFLIGHT_ALL_REDUCE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class GemmCase:
    shape: str  # "square", or "<model>.<layer>" for the configured model's layer shapes
    m: int
    n: int
    k: int
    dtype: str

    @property
    def label(self) -> str:
        return f"gemm {self.m}^3 {self.dtype}" if self.shape == "square" else f"gemm {self.shape} {self.dtype}"

    @property
    def nbytes(self) -> int:
        a, b, c = self.m * self.k, self.k * self.n, self.m * self.n
        if self.dtype == "fp8":
            return a + b + 2 * c + FLOAT32 * max(a, b)
        return DTYPE_BYTES[self.dtype] * (a + b + c)


@dataclass(frozen=True)
class AttentionCase:
    batch: int
    heads: int  # per tp rank
    kv_heads: int
    head_dim: int
    seq: int
    dtype: str

    @property
    def label(self) -> str:
        return f"attention b={self.batch} heads={self.heads}/{self.kv_heads} s={self.seq} d={self.head_dim} {self.dtype}"

    @property
    def nbytes(self) -> int:
        q = self.batch * self.heads * self.seq * self.head_dim
        kv = self.batch * self.kv_heads * self.seq * self.head_dim
        scores = self.batch * self.heads * self.seq * self.seq
        return DTYPE_BYTES[self.dtype] * (8 * q + 4 * kv) + FLOAT32 * SCORE_TENSORS * scores


@dataclass(frozen=True)
class CollectiveCase:
    op: str
    requested_bytes: int  # the size asked for (task.sizes or the default)
    group: str  # intra_node | inter_node
    ranks: int  # the group's size

    @property
    def elements(self) -> int:
        return elements_for(self.requested_bytes, self.ranks)

    @property
    def buffer_bytes(self) -> int:
        return self.elements * FLOAT32

    @property
    def rounded(self) -> bool:
        return self.buffer_bytes != self.requested_bytes

    @property
    def label(self) -> str:
        return f"{self.op} {self.buffer_bytes:,} B ({self.group})"

    @property
    def nbytes(self) -> int:
        chunk = self.elements // self.ranks
        inputs = chunk if self.op == "all_gather" else self.elements
        outputs = {"all_gather": self.elements, "reduce_scatter": chunk, "all_to_all": self.elements,
                   "send_recv": self.elements}.get(self.op, 0)
        return 2 * FLOAT32 * (inputs + outputs) + 13 * min(CHECK_SLICE, self.elements)


Case = Union[GemmCase, AttentionCase, CollectiveCase]


def elements_for(nbytes: int, ranks: int) -> int:
    """The float32 elements of a buffer of about `nbytes`, a multiple of the group size (chunks split evenly)."""
    return max(ranks, -(-nbytes // (FLOAT32 * ranks)) * ranks)


def rounding_note(case: CollectiveCase) -> Optional[str]:
    """Why a collective's buffer is not the size asked for (None when it is)."""
    if not case.rounded:
        return None
    return (f"{case.requested_bytes:,} B measured as {case.buffer_bytes:,} B: {case.elements:,} float32 elements, "
            f"a multiple of the group's {case.ranks} ranks")


def model_shapes(model: Any, tokens: int, tp: int) -> list[tuple[str, int, int, int]]:
    """(layer, M, N, K) of the configured model's matmuls for `tokens` tokens on one tp rank: QKV (column split),
    attention output (row split), FFN up (gate and up, column split), FFN down (row split), the output layer."""
    from primus_hydra.config.attention_math import attention_head_dim

    h = model.hidden_size
    hd = attention_head_dim(model)
    q, kv = model.num_attention_heads * hd, model.num_kv_heads * hd
    f = model.ffn_hidden_size
    return [("qkv", tokens, (q + 2 * kv) // tp, h), ("attention_out", tokens, h, q // tp),
            ("ffn_up", tokens, 2 * f // tp, h), ("ffn_down", tokens, h, f // tp),
            ("output", tokens, model.vocab_size // tp, h)]


def default_dtypes(suite: str, on_gpu: bool) -> list[str]:
    """The dtypes a suite tries when task.dtypes is null: gemm every one the device may run (the workers keep those
    it has a fast kernel for), attention the training dtype (bf16 on GPUs, fp32 on the CPU)."""
    if suite == "attention":
        return ["bf16" if on_gpu else "fp32"]
    return list(DTYPE_NAMES if on_gpu else CPU_DTYPES)


def collective_groups(nnodes: int, world: int) -> list[tuple[str, int]]:
    """(label, ranks): the world (inter_node when the job spans nodes) and, with several ranks per node, a node's."""
    groups = [("inter_node" if nnodes > 1 else "intra_node", world)]
    per_node = world // max(1, nnodes)
    if nnodes > 1 and per_node > 1:
        groups.append(("intra_node", per_node))
    return groups


def gemm_cases(cfg: Any, dtypes: Sequence[str], on_gpu: bool) -> list[GemmCase]:
    task, module, model = cfg.task, cfg.module, cfg.model
    sizes = list(task.sizes) if task.sizes else list(GPU_GEMM_SIZES if on_gpu else CPU_GEMM_SIZES)
    tokens, tp = int(module.micro_batch_size) * int(module.seq_length), int(module.parallel.tp)
    cases = []
    for dtype in dtypes:
        cases += [GemmCase("square", int(size), int(size), int(size), dtype) for size in sizes]
        cases += [GemmCase(f"{model.name}.{label}", m, n, k, dtype) for label, m, n, k in model_shapes(model, tokens, tp)]
    return cases


def attention_cases(cfg: Any, dtypes: Sequence[str]) -> list[AttentionCase]:
    from primus_hydra.config.attention_math import attention_head_dim

    model, module = cfg.model, cfg.module
    tp = int(module.parallel.tp)
    heads, kv_heads = model.num_attention_heads // tp, max(1, model.num_kv_heads // tp)
    return [AttentionCase(int(module.micro_batch_size), heads, kv_heads, attention_head_dim(model),
                          int(module.seq_length), dtype) for dtype in dtypes]


def collective_cases(cfg: Any, world: int, on_gpu: bool) -> list[CollectiveCase]:
    sizes = list(cfg.task.sizes) if cfg.task.sizes else list(GPU_MESSAGE_BYTES if on_gpu else CPU_MESSAGE_BYTES)
    return [CollectiveCase(op, int(size), label, ranks)
            for label, ranks in collective_groups(int(cfg.launch.nnodes), world)
            for op in COLLECTIVE_OPS for size in sizes]


def suite_cases(cfg: Any, *, on_gpu: bool, world: int, dtypes: Optional[Sequence[str]] = None) -> list:
    """Every case of cfg.task.suite, in the order the workers measure them. dtypes: task.dtypes when set, else the
    given list (the workers' choice), else every dtype the suite may try (what the orchestrator sizes memory by)."""
    suite = str(cfg.task.suite)
    chosen = list(cfg.task.dtypes) if cfg.task.dtypes else list(dtypes) if dtypes is not None else default_dtypes(suite, on_gpu)
    if suite == "gemm":
        return gemm_cases(cfg, chosen, on_gpu)
    if suite == "attention":
        return attention_cases(cfg, chosen)
    return collective_cases(cfg, max(1, world), on_gpu)


def preflight_cases(on_gpu: bool, world: int) -> list:
    """task=preflight's two measurements: one GEMM and, with several nodes, one all_reduce over the world."""
    size, dtype = PREFLIGHT_GEMM[on_gpu]
    cases: list = [GemmCase("square", size, size, size, dtype)]
    if world > 1:
        cases.append(CollectiveCase("all_reduce", PREFLIGHT_ALL_REDUCE_BYTES, "world", world))
    return cases


def largest(cases: Sequence) -> Any:
    return max(cases, key=lambda case: case.nbytes)
