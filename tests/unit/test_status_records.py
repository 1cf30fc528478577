"""task=status reads submission records a user (or a crash) may have damaged: each bad one is a row saying why,
and the other runs are still listed."""
from __future__ import annotations

import json
import os

from primus_hydra.launch.slurm.submission import SUBMISSION_RECORD
from primus_hydra.tasks.status import StatusTask


def test_damaged_records_are_rows_not_tracebacks(compose_config, tmp_path, capsys):
    records = {"corrupt": b"{bad", "list": b"[1, 2]", "no_job_id": b'{"label": "x"}', "binary": b"\xff\xfe"}
    for name, content in records.items():
        (tmp_path / name / SUBMISSION_RECORD).parent.mkdir(parents=True)
        (tmp_path / name / SUBMISSION_RECORD).write_bytes(content)
    (tmp_path / "no_job_id" / "metrics.jsonl").write_text('[1]\n{"step": 3, "loss": 2.5}\n"tail"\n')
    statuses = StatusTask(compose_config("task=status", f"task.runs={tmp_path}")).run()
    states = {status.run_dir.name: status.state for status in statuses}
    assert states == {
        "binary": f"UNREADABLE ({SUBMISSION_RECORD} is not JSON (UnicodeDecodeError))",
        "corrupt": f"UNREADABLE ({SUBMISSION_RECORD} is not JSON (JSONDecodeError))",
        "list": f"UNREADABLE ({SUBMISSION_RECORD} holds a list, not an object)",
        "no_job_id": f"UNREADABLE ({SUBMISSION_RECORD} has no job_id)",
    }
    assert {s.run_dir.name: (s.step, s.loss) for s in statuses}["no_job_id"] == (3, 2.5)
    assert "UNREADABLE" in capsys.readouterr().out


def test_a_good_record_is_read(tmp_path, compose_config, monkeypatch):
    # an sacct that answers "no such job", so that the record is read the same with or without a cluster up
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "run" / SUBMISSION_RECORD).parent.mkdir(parents=True)
    (tmp_path / "run" / SUBMISSION_RECORD).write_text(json.dumps({"job_id": "424242", "label": "p"}))
    (status,) = StatusTask(compose_config("task=status", f"task.runs={tmp_path}")).run()
    assert (status.job_id, status.label) == ("424242", "p") and not status.state.startswith("UNREADABLE")
