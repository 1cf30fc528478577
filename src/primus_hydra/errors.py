"""User-facing errors: each one is a single line saying what was wrong, what is allowed and how to fix it."""
from __future__ import annotations


class PrimusError(Exception):
    """An error the user can fix; the CLI prints it as `error: <line>` and exits with code 2."""

    exit_code = 2


class ConfigValidationError(PrimusError):
    """One or more cross-field rules failed; each failure is one line."""

    def __init__(self, failures: list[str]):
        self.failures = list(failures)
        super().__init__("\n".join(self.failures))


class BackendUnavailableError(PrimusError):
    """The selected backend's library cannot be imported."""


class DataError(PrimusError):
    """A data path is missing, empty or corrupt."""


class CheckpointError(PrimusError):
    """A checkpoint to resume or load is missing or corrupt, or saving would overwrite one."""


class PatchError(PrimusError):
    """A patch failed to register or to run, and it was not declared optional."""


class TrainingDivergedError(PrimusError):
    """The loss became NaN/inf (or passed the configured bound)."""

    exit_code = 3


class StoppedBySignalError(PrimusError):
    """Raised after the on_signal checkpoint: the process exits right away with 128 + the signal number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


def user_error_type_names() -> set[str]:
    """Names of PrimusError and every subclass defined so far: a worker's error of one of these types is the
    user's to fix, and the orchestrator shows its text instead of a traceback."""
    names, pending = set(), [PrimusError]
    while pending:
        kind = pending.pop()
        names.add(kind.__name__)
        pending.extend(kind.__subclasses__())
    return names


class SweepPointsFailed(PrimusError):
    """The end of a sweep some of whose points failed (each told why in its own line): one line, exit code 1."""

    exit_code = 1


class SweepPointFailed(Exception):
    """A sweep point stopped on a user error that was already printed as its one `error:` line.

    Raised (not SystemExit) from inside a multirun job, so that Hydra records a failed JobReturn that every launcher
    (basic, joblib, submitit_local, primus_local) carries back and every sweeper (basic, Optuna and its
    max_failure_rate) sees, while the other points run. The CLI exits with `exit_code` without printing it again."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message, exit_code)  # both in args: it crosses process boundaries pickled (joblib, submitit)
        self.message, self.exit_code = message, exit_code

    def __str__(self) -> str:
        return self.message
