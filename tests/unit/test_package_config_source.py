"""The pkg:// source of a plain folder package answers as Hydra's own source does, for every file and folder of conf/."""
from __future__ import annotations

import pytest
from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError
from omegaconf import OmegaConf

from helpers.compose import CONF_DIR
from primus_hydra.config.package_config_source import FolderPackageConfigSource, package_config_source

PATH = "pkg://primus_hydra.conf"


def _sources():
    return package_config_source("primus_hydra", PATH), ImportlibResourcesConfigSource("primus_hydra", PATH)


def test_a_plain_folder_package_is_read_from_its_folder():
    ours, _ = _sources()
    assert isinstance(ours, FolderPackageConfigSource) and ours.folder == CONF_DIR
    assert (ours.path, ours.scheme(), ours.provider) == ("primus_hydra.conf", "pkg", "primus_hydra")


def test_every_config_and_group_reads_as_hydras_source_reads_it():
    ours, hydras = _sources()
    assert ours.available() and hydras.available()
    groups = [""] + sorted(str(folder.relative_to(CONF_DIR)) for folder in CONF_DIR.rglob("*") if folder.is_dir()
                           and folder.name != "__pycache__")
    configs = sorted(str(file.relative_to(CONF_DIR))[:-len(".yaml")] for file in CONF_DIR.rglob("*.yaml"))
    assert len(configs) > 40
    for group in groups + ["no_such_group", "config"]:
        assert ours.is_group(group) == hydras.is_group(group), group
        if hydras.is_group(group):
            for results_filter in (None, ObjectType.GROUP, ObjectType.CONFIG):
                assert ours.list(group, results_filter) == hydras.list(group, results_filter), group
    for name in configs + ["model/no_such_model"]:
        assert ours.is_config(name) == hydras.is_config(name), name
    for name in configs:
        mine, theirs = ours.load_config(name), hydras.load_config(name)
        assert (mine.path, mine.provider, mine.header, mine.is_schema_source) == \
               (theirs.path, theirs.provider, theirs.header, theirs.is_schema_source), name
        assert OmegaConf.to_container(mine.config) == OmegaConf.to_container(theirs.config), name


def test_a_missing_config_fails_as_in_hydras_source():
    ours, hydras = _sources()
    with pytest.raises(ConfigLoadError) as mine:
        ours.load_config("model/no_such_model")
    with pytest.raises(ConfigLoadError) as theirs:
        hydras.load_config("model/no_such_model")
    assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("path", ["pkg://no_such_package_here", "pkg://os", "pkg://primus_hydra.conf.model"])
def test_any_other_package_is_hydras_source(path):
    source = type(package_config_source("p", path))  # (Hydra's plugin scan may have loaded its module again)
    assert (source.__module__, source.__name__) == (ImportlibResourcesConfigSource.__module__, "ImportlibResourcesConfigSource")
