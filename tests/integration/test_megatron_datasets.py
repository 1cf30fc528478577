"""backend=megatron reads megatron.core.datasets: the default text source built once per run dir into an indexed
dataset with megatron-core's builder (the byte tokens backend=torch reads), Megatron's own .bin/.idx prefixes and
weighted blends (whose index files are cached in the run dir, never next to the data), MockGPTDataset; its batches
are the same whatever the layout, and a dataset it cannot read is one line before any worker starts."""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import primus
from helpers.curves import assert_same_curve, losses
from helpers.indexed_data import write_indexed
from helpers.libraries import needs_megatron_core
from helpers.overrides import SHORT_RUN

pytestmark = [pytest.mark.slow, needs_megatron_core]

QUICK = SHORT_RUN


def train(run_dir: Path, *args: str) -> tuple[dict[int, float], str]:
    """The run's curve and rank 0's log."""
    result = primus(f"hydra.run.dir={run_dir}", *QUICK, *args, cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return losses(run_dir), (run_dir / "logs" / "rank_0.log").read_text()


@pytest.fixture(scope="module")
def text_datasets(tmp_path_factory) -> Path:
    """Two indexed datasets of byte tokens, each document one file of Python's own sources."""
    root = tmp_path_factory.mktemp("data")
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:60]
    documents = [np.frombuffer(f.read_bytes(), dtype=np.uint8) for f in files]
    write_indexed({root / "stdlib_a": documents[:30], root / "stdlib_b": documents[30:]})
    return root


def test_the_default_text_becomes_one_indexed_dataset_of_backend_torchs_byte_tokens(tmp_path):
    """(A resume in the same run dir reuses it: test_megatron_training.py's dp2 -> tp2 resume.)"""
    from primus_hydra.backends.common.data import load_text_tokens
    from primus_hydra.backends.common.indexed_file import read_index

    curve, log = train(tmp_path / "run", "backend=megatron")
    assert "megatron-core GPTDataset over" in log
    prefix = tmp_path / "run" / ".primus" / "megatron_data" / "text_bytes"
    np.testing.assert_array_equal(read_index(str(prefix)).tokens(), load_text_tokens(None))
    assert read_index(str(prefix)).documents > 100  # one document per file
    assert curve[5] < curve[1]


def test_a_megatron_prefix_feeds_both_backends_and_a_blend_trains_on_two_processes(tmp_path, text_datasets):
    before = sorted(p.name for p in text_datasets.iterdir())
    prefix = text_datasets / "stdlib_a"
    indexed = ["module.data.source=indexed", f"module.data.path={prefix}"]
    native, _ = train(tmp_path / "torch", "backend=torch", *indexed)
    same_batches, _ = train(tmp_path / "megatron_native", "backend=megatron", "backend.dataset=native", *indexed)
    assert_same_curve(same_batches, native)
    assert native[5] < native[1]
    # on two processes: every megatron layout test reads GPTDataset batches (test_megatron_training.py)
    blend = ["module.data.source=indexed", f"module.data.path='0.3 {prefix} 0.7 {text_datasets / 'stdlib_b'}'"]
    blended, log = train(tmp_path / "blend", "backend=megatron", "launch.nproc_per_node=2", *blend)
    assert "megatron-core BlendedDataset over" in log
    assert blended[5] < blended[1]
    assert sorted(p.name for p in text_datasets.iterdir()) == before  # the index cache is in the run dirs
    assert list((tmp_path / "blend" / ".primus" / "megatron_data" / "cache").glob("*BlendedDataset*"))


def test_megatrons_mock_dataset_on_request(tmp_path):
    curve, log = train(tmp_path / "run", "backend=megatron", "module.data.source=mock", "backend.dataset=megatron")
    assert "megatron-core MockGPTDataset over mock tokens" in log and sorted(curve) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("args, expected", [
    (["backend=megatron", "module.data.source=tokens", "module.data.path={data}/stdlib_a.bin", "backend.dataset=megatron"],
     "error: backend.dataset=megatron: a flat token file (module.data.source=tokens) has no document boundaries"),
    (["backend=megatron", "module.data.source=indexed", "module.data.path={data}/nothing"],
     "error: module.data.path={data}/nothing: no nothing.idx or nothing.bin (source=indexed reads Megatron's"),
    (["backend=torch", "module.data.source=indexed", "module.data.path='1 {data}/stdlib_a 1 {data}/stdlib_b'"],
     "error: module.data.path=1 {data}/stdlib_a 1 {data}/stdlib_b: a blend of 2 datasets is read by backend=megatron"),
    (["backend=megatron", "module.data.source=indexed", "module.data.path='1 {data}/stdlib_a {data}/stdlib_b'"],
     "error: module.data.path=1 {data}/stdlib_a {data}/stdlib_b: a blend is 'weight prefix weight prefix ...'"),
    (["backend=maxtext", "module.data.source=indexed", "module.data.path={data}/stdlib_a"],
     "error: module.data.source=indexed: backend=maxtext does not read Megatron's indexed datasets"),
    (["backend=megatron", "module.data.source=indexed"],
     "error: module.data.path is required with module.data.source=indexed"),
], ids=["tokens_as_megatron", "missing_prefix", "blend_on_torch", "odd_blend", "maxtext", "no_path"])
def test_data_the_run_cannot_read_is_one_line_before_any_worker(tmp_path, text_datasets, args, expected):
    args = [arg.format(data=text_datasets) for arg in args]
    result = primus("module.train_iters=2", *args, cwd=tmp_path, env={"PRIMUS_OUTPUT_ROOT": str(tmp_path / "out")})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[0].startswith(expected.format(data=text_datasets)), result.stderr[-2000:]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("metrics.jsonl"))
