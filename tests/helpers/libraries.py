"""Skip markers for the optional backend libraries, found without importing them: importing megatron-core imports
torch._inductor, which sets TORCHINDUCTOR_CACHE_DIR in the test process for every later test."""
from __future__ import annotations

import pytest

from primus_hydra.backends.base import module_findable

needs_megatron_core = pytest.mark.skipif(not module_findable("megatron.core", []),
                                         reason="megatron-core is not installed (pip install 'primus-hydra[megatron]')")
needs_torchtitan = pytest.mark.skipif(not (module_findable("torchtitan", []) and module_findable("triton", [])),
                                      reason="torchtitan or triton is not installed (pip install 'primus-hydra[torchtitan]')")
needs_megatron_bridge = pytest.mark.skipif(
    not (module_findable("megatron.bridge", []) and module_findable("megatron.core", [])),
    reason="megatron-bridge is not installed (bash scripts/setup.sh installs megatron-bridge==0.3.1 --no-deps)")
