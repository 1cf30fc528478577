"""An environment put back as it was after a block: what the block set, changed or removed is undone."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def restored_environment() -> Iterator[None]:
    """os.environ as it was before the block, once the block ends (also by an exception). A job's own variables
    stay its own (the next job a launcher runs in this process sees its values, not these), and a library imported
    in the orchestrator leaves no trace (importing megatron-core imports torch._inductor, which sets
    TORCHINDUCTOR_CACHE_DIR, and a later sweep would take that for the user's choice)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
