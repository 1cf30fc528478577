"""What composing costs grows only with what is chosen (issue 30: each new group or task costs no more than its own
YAML to compose): a composition reads the primary config and the chosen option of each group, never a group's other
options, and takes every schema section and Hydra's own config from config/kept_nodes.pickle (tests/unit/
test_kept_nodes.py holds the file to the sources), so a group added to conf/ adds one file's reading."""
from __future__ import annotations

import pytest
from hydra._internal.core_plugins.file_config_source import FileConfigSource

import primus_hydra
from primus_hydra.config.package_config_source import FolderPackageConfigSource

COMMAND_LINES = [
    [],
    ["backend=megatron", "model=llama3_8b", "task=plan"],
    ["backend=torchtitan", "logger=many", "task=projection", "hardware=mi300x"],
    ["experiment=tiny_smoke"],
]


def files_read(monkeypatch, overrides: list[str]) -> tuple[list[str], dict]:
    read: list[str] = []
    for source in (FileConfigSource, FolderPackageConfigSource):
        def recorded(self, config_path, _load=source.load_config):
            read.append(self._normalize_file_name(config_path))
            return _load(self, config_path)

        monkeypatch.setattr(source, "load_config", recorded)
    cfg = primus_hydra.compose(overrides)
    return read, dict(cfg.hydra.runtime.choices)


@pytest.mark.parametrize("overrides", COMMAND_LINES, ids=" ".join)
def test_a_composition_reads_the_primary_config_and_each_chosen_option_once(monkeypatch, overrides):
    read, choices = files_read(monkeypatch, overrides)
    chosen = {f"{group}/{option}.yaml" for group, option in choices.items()
              if option is not None and not group.startswith(("hydra/", "schema/"))}
    assert sorted(read) == sorted({"config.yaml", *chosen}), (read, choices)
