"""Package layout for setuptools: src/primus_hydra plus conf/ shipped as primus_hydra/conf (see pyproject.toml)."""
from setuptools import find_namespace_packages, setup

setup(
    # "hydra_plugins" itself is listed, not only "hydra_plugins.*": Hydra finds launchers by walking
    # hydra_plugins.__path__ with pkgutil, so src/hydra_plugins must be on that path. In a PEP 660 editable
    # install (setuptools' default, lenient mode: package_dir maps conf/, so setuptools installs an import
    # finder, not a path entry) an unlisted parent becomes a namespace with no directory, its children reachable
    # only by name through the finder, and the scan never sees them. Listed, src/hydra_plugins joins __path__.
    # It is a PEP 420 namespace (no __init__.py, shared with hydra-submitit-launcher): a wheel gains no file.
    packages=find_namespace_packages("src", include=["primus_hydra", "primus_hydra.*", "hydra_plugins", "hydra_plugins.*"])
    + ["primus_hydra.conf"],
    package_dir={"": "src", "primus_hydra.conf": "conf"},
    # kept_nodes.pickle: nodes as Hydra and OmegaConf make them for this conf/ and its schemas (config/kept_nodes.py)
    package_data={"primus_hydra.conf": ["*.yaml", "**/*.yaml"], "primus_hydra.config": ["kept_nodes.pickle"]},
    include_package_data=False,
)
