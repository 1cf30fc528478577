"""Ending a process that is done without the interpreter's teardown of every module (seconds after torch), but
with the clean-ups that leave files behind when skipped."""
import os
import sys
import weakref
from typing import NoReturn


def exit_without_teardown(code: int) -> NoReturn:
    """`os._exit(code)` after flushing stdout/stderr and running the at-exit finalizers of `weakref.finalize`: the
    temporary directories libraries make at import (`tempfile.TemporaryDirectory`: wandb makes two) are removed as at
    a normal exit instead of piling up in /tmp. Modules' `atexit` hooks (torch's, slow) are still skipped."""
    weakref.finalize._exitfunc()  # the same call a normal exit makes, after the non-daemon threads are joined
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
