"""Package layout for setuptools: src/primus_hydra plus conf/ shipped as primus_hydra/conf (see pyproject.toml)."""
from setuptools import find_namespace_packages, setup

setup(
    packages=find_namespace_packages("src", include=["primus_hydra", "primus_hydra.*", "hydra_plugins.*"]) + ["primus_hydra.conf"],
    package_dir={"": "src", "primus_hydra.conf": "conf"},
    package_data={"primus_hydra.conf": ["*.yaml", "**/*.yaml"]},
    include_package_data=False,
)
