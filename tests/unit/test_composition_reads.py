"""What composing costs grows only with what is chosen (issue 30: each new group or task costs no more than its own
YAML to compose): a composition reads the primary config and the chosen option of each group, never a group's other
options, and takes every schema section and Hydra's own config from config/kept_nodes.pickle (tests/unit/
test_kept_nodes.py holds the file to the sources), so a group added to conf/ adds one file's reading."""
from __future__ import annotations

import pytest
from hydra._internal.config_repository import ConfigRepository

import primus_hydra

COMMAND_LINES = [
    [],
    ["backend=megatron", "model=llama3_8b", "task=plan"],
    ["backend=torchtitan", "logger=many", "task=projection", "hardware=mi300x"],
    ["experiment=tiny_smoke"],
]


def files_read(monkeypatch, overrides: list[str]) -> tuple[list[str], dict]:
    """The files the composition loaded (whichever source reads them: a folder, a package, Hydra's own after its
    plugin scan), and Hydra's record of the options chosen."""
    read: list[str] = []

    def recorded(self, config_path, _load=ConfigRepository.load_config):
        result = _load(self, config_path)
        if result is not None and not result.path.startswith("structured://"):
            read.append(f"{config_path}.yaml")
        return result

    monkeypatch.setattr(ConfigRepository, "load_config", recorded)
    cfg = primus_hydra.compose(overrides)
    return read, dict(cfg.hydra.runtime.choices)


@pytest.mark.parametrize("overrides", COMMAND_LINES, ids=" ".join)
def test_a_composition_reads_the_primary_config_and_each_chosen_option_once(monkeypatch, overrides):
    read, choices = files_read(monkeypatch, overrides)
    chosen = {f"{group}/{option}.yaml" for group, option in choices.items()
              if option is not None and not group.startswith(("hydra/", "schema/"))}
    assert sorted(read) == sorted({"config.yaml", *chosen}), (read, choices)
