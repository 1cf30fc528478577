"""Secrets: which names hold one, configs written without them, log lines and printed text without their values,
owner-only files, and the warning for a secret typed on the command line (config/secrets.py)."""
from __future__ import annotations

import io
import logging
import stat

import pytest
import yaml
from omegaconf import OmegaConf

from helpers import recording_backend
from primus_hydra.config.secrets import (
    REDACTED,
    config_for_file,
    is_secret_name,
    literal_secret_overrides,
    redact_text,
    secret_values,
    warn_about_literal_secrets,
)
from primus_hydra.launch.job_config import load_job_config, write_job_config
from primus_hydra.orchestrator.prepare import prepare
from primus_hydra.runtime.logging_setup import RedactSecrets
from primus_hydra.runtime.train_runtime import PrimusRuntime
from primus_hydra.util.private_files import write_private_text

TOKEN = "hf_unit_test_token_0123456789"
RECORDING = ["backend._target_=helpers.recording_backend.RecordingAdapter", "backend.name=recording"]


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
                                  "PGPASSWORD", "hfToken", "client_secret", "GOOGLE_APPLICATION_CREDENTIALS",
                                  "API_KEY_2", "db-passwd"])
def test_a_name_ending_in_a_secret_word_holds_a_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "token_dtype", "eos_token_id", "SSH_KEY_PATH",
                                  "AWS_ACCESS_KEY_ID", "num_tokens", "NCCL_DEBUG"])
def test_a_name_that_only_contains_a_secret_word_does_not(name):
    assert not is_secret_name(name)


def test_task_json_keys_is_an_option_not_a_secret_yet_other_keys_names_still_are():
    assert not is_secret_name("json_keys") and literal_secret_overrides(["task.json_keys=[text,title]"]) == []
    assert is_secret_name("api_keys") and is_secret_name("ssh_json_keys") and is_secret_name("JSON_KEYS_SECRET")


def test_a_written_config_keeps_values_from_the_environment_as_typed(monkeypatch):
    monkeypatch.setenv("PRIMUS_TEST_ROOT", "/data/root")
    cfg = OmegaConf.create({"root": "${oc.env:PRIMUS_TEST_ROOT}", "copy": "${root}", "nested": {"up": "${..root}"},
                            "peak": "${oc.decode:${oc.env:PRIMUS_TEST_PEAK,null}}", "steps": 4, "twice": "${steps}"})
    assert config_for_file(cfg) == {"root": "${oc.env:PRIMUS_TEST_ROOT}", "copy": "${root}",
                                    "nested": {"up": "${..root}"},
                                    "peak": "${oc.decode:${oc.env:PRIMUS_TEST_PEAK,null}}", "steps": 4, "twice": 4}


def test_a_written_config_redacts_literal_secrets_and_every_leaf_under_a_secret_named_key():
    cfg = OmegaConf.create({"env": {"WANDB_API_KEY": "k-literal-1234", "TOKENIZERS_PARALLELISM": "false"},
                            "credentials": {"user": "me", "port": 22}, "token_dtype": "uint16"})
    assert config_for_file(cfg) == {"env": {"WANDB_API_KEY": REDACTED, "TOKENIZERS_PARALLELISM": "false"},
                                    "credentials": {"user": REDACTED, "port": REDACTED}, "token_dtype": "uint16"}


def test_the_job_config_holds_no_secret_yet_its_workers_read_every_value(compose_config, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("PRIMUS_SECRET_PLATFORM_ENV_WANDB_API_KEY", "")  # restored (removed) after the test
    cfg = compose_config(*RECORDING, "+platform.env.HUGGING_FACE_HUB_TOKEN=${oc.env:HF_TOKEN}",
                         "+platform.env.WANDB_API_KEY=k-literal-1234")
    path = write_job_config(prepare(cfg, run_dir=tmp_path), tmp_path)
    assert TOKEN not in path.read_text() and "k-literal-1234" not in path.read_text()
    assert mode(path) == 0o600
    env = load_job_config(path).cfg.platform  # a worker: inherits this process's environment
    assert env.env.HUGGING_FACE_HUB_TOKEN == TOKEN and env.env.WANDB_API_KEY == "k-literal-1234"
    assert env.peak_tflops_per_device is None  # ${oc.decode:${oc.env:PRIMUS_PEAK_TFLOPS,null}}, unset


def test_the_runtime_writes_no_secret_into_the_resolved_config_or_its_log(compose_config, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    cfg = compose_config(*RECORDING, "+platform.env.HUGGING_FACE_HUB_TOKEN=${oc.env:HF_TOKEN}")
    PrimusRuntime(prepare(cfg, run_dir=tmp_path), tmp_path).run()
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN")  # set by the env block
    resolved = tmp_path / "config_resolved.yaml"
    assert yaml.safe_load(resolved.read_text())["platform"]["env"]["HUGGING_FACE_HUB_TOKEN"] == "${oc.env:HF_TOKEN}"
    assert mode(resolved) == 0o600
    rank_log = (tmp_path / "logs" / "rank_0.log").read_text()
    assert f"HUGGING_FACE_HUB_TOKEN={REDACTED}" in rank_log and TOKEN not in rank_log
    recording_backend.EVENTS.clear()


def test_log_records_blank_out_secret_values_in_message_arguments_and_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactSecrets({TOKEN}))
    logger = logging.getLogger("primus_hydra.test_secrets")
    logger.addHandler(handler)
    try:
        logger.warning("token is %s", TOKEN)
        try:
            raise ValueError(f"bad token {TOKEN}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert TOKEN not in stream.getvalue()
    assert f"token is {REDACTED}" in stream.getvalue() and f"ValueError: bad token {REDACTED}" in stream.getvalue()


def test_short_and_boolean_values_of_secret_names_are_not_blanked_out_of_text():
    environ = {"HF_TOKEN": TOKEN, "USE_KEY": "true", "PIN_KEY": "12", "TOKENIZERS_PARALLELISM": "false-ish"}
    assert secret_values(None, environ) == {TOKEN}
    assert redact_text(f"a {TOKEN} b true 12", {TOKEN}) == f"a {REDACTED} b true 12"


def test_a_secret_typed_on_the_command_line_gets_one_warning_without_its_value(capsys):
    warn_about_literal_secrets(["+platform.env.WANDB_API_KEY=k-literal-1234", "module.lr=1e-3", "--multirun"])
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: platform.env.WANDB_API_KEY is a secret typed on the command line")
    assert "'+platform.env.WANDB_API_KEY=${oc.env:WANDB_API_KEY}'" in line and "k-literal-1234" not in line


def test_a_secret_read_from_the_environment_or_a_plain_key_gets_no_warning():
    assert literal_secret_overrides(["+platform.env.HF_TOKEN=${oc.env:HF_TOKEN}", "module.data.token_dtype=uint32",
                                     "+platform.env.TOKENIZERS_PARALLELISM=true", "+model.stale_key=1",
                                     "--cfg", "job"]) == []


def test_a_private_file_is_created_owner_only_and_made_so_when_it_existed(tmp_path):
    existing = tmp_path / "existing.yaml"
    existing.write_text("old")
    existing.chmod(0o644)
    for path in (tmp_path / "sub" / "new.yaml", existing):
        write_private_text(path, "secret: <redacted>\n")
        assert mode(path) == 0o600 and path.read_text() == "secret: <redacted>\n"


def test_a_secret_is_found_in_any_key_or_leaf_of_plain_arguments():
    from primus_hydra.config.secrets import holds_any

    secret = "hf_abcdefghijklmnop"
    folded = {"args": ["--note", " ".join(["word"] * 30) + f" {secret} " + " ".join(["word"] * 30)]}
    assert holds_any(folded, {secret})  # inside a long text YAML would fold across lines
    assert holds_any({"env": {secret: 1}}, {secret})  # a key
    assert holds_any({"ids": [[1, 12345678]]}, {"12345678"})  # a number, as text
    assert not holds_any({"token_dtype": "uint16", "lr": 0.1}, {secret})
    assert not holds_any({"a": "x"}, set()) and not holds_any({"a": "x"}, {""})
