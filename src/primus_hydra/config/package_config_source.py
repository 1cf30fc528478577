"""Hydra's `pkg://` config source for the compositions this project makes itself (config/job_composition.py).

Hydra's own (ImportlibResourcesConfigSource) reads a package's files through importlib.resources, which imports
zipfile and tempfile with it: ~5 ms of `primus_hydra.compose()`, whose configs are `pkg://primus_hydra.conf`. A
package that is one plain folder (a checkout, an installed wheel) is read here from that folder with the same
answers: the same source path and scheme recorded (`hydra.runtime.config_sources`), the same file header rules,
the same errors for a config that is not there. Any other package (in a zip, spread over several folders, not
importable) is Hydra's source.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import List, Optional

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from omegaconf import OmegaConf

HEADER_CHARS = 512  # what Hydra's source reads for a file's `# @package` header


def package_config_source(provider: str, path: str) -> ConfigSource:
    """The source Hydra's config repository makes for `path` (`pkg://<package>`)."""
    folder = _plain_folder(_package_name(path)) if path.startswith("pkg://") else None
    if folder is None:
        from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource

        return ImportlibResourcesConfigSource(provider, path)
    return FolderPackageConfigSource(provider, path, folder)


def _package_name(path: str) -> str:
    return path[len("pkg://"):].replace("/", ".").rstrip(".")  # as Hydra's source normalizes it


def _plain_folder(package: str) -> Optional[Path]:
    try:
        module = importlib.import_module(package)
    except Exception:  # noqa: BLE001 - Hydra's source answers for a package that does not import
        return None
    locations = list(getattr(module, "__path__", None) or ())
    if len(locations) != 1 or not os.path.isfile(os.path.join(locations[0], "__init__.py")):
        return None
    return Path(locations[0])


class FolderPackageConfigSource(ConfigSource):
    def __init__(self, provider: str, path: str, folder: Path) -> None:
        super().__init__(provider=provider, path=path)
        self.path = _package_name(path)
        self.folder = folder

    @staticmethod
    def scheme() -> str:
        return "pkg"

    def load_config(self, config_path: str) -> ConfigResult:
        normalized_config_path = self._normalize_file_name(config_path)
        file = self.folder.joinpath(normalized_config_path)
        if not file.exists():
            raise ConfigLoadError(f"Config not found : {normalized_config_path}")
        with open(file, encoding="utf-8") as stream:
            header = ConfigSource._get_header_dict(stream.read(HEADER_CHARS))
            stream.seek(0)
            config = OmegaConf.load(stream)
        return ConfigResult(config=config, path=f"{self.scheme()}://{self.path}", provider=self.provider, header=header)

    def available(self) -> bool:
        return self.folder.joinpath("__init__.py").is_file()

    def is_group(self, config_path: str) -> bool:
        return self.folder.joinpath(config_path).is_dir()

    def is_config(self, config_path: str) -> bool:
        return self.folder.joinpath(self._normalize_file_name(config_path)).is_file()

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        files: List[str] = []
        for entry in self.folder.joinpath(config_path).iterdir():
            self._list_add_result(files=files, file_path=os.path.join(config_path, entry.name), file_name=entry.name,
                                  results_filter=results_filter)
        return sorted(set(files))

