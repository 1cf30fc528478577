"""Makes src/primus_hydra/config/kept_nodes.pickle (config/kept_nodes.py): the `hydra` node Hydra composes for each
combination of `hydra:` sections and Hydra-group entries that conf/ makes, and the nodes OmegaConf builds from each
schema dataclass of this project, for the default command line, every option of every group and each platform with
each task. A run, a dry run,
`compose()` and `--cfg job` then skip composing Hydra's own config and building the schemas.

Run it after changing a `hydra:` section, conf/hydra/, a schema, this project's Hydra plugins, or the Hydra,
OmegaConf or Python version: tests/unit/test_run_composition.py fails while the file is stale, and the commands
compose as before meanwhile (nothing is wrong, only slower). That test also checks every kept node against what Hydra
and OmegaConf make, node for node.

Usage: .venv/bin/python scripts/make_kept_nodes.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import omegaconf._utils
import omegaconf.basecontainer
import omegaconf.dictconfig
from hydra.core.plugins import Plugins

from primus_hydra.backends.schemas import register_schemas
from primus_hydra.config import fast_composition, fast_omegaconf, kept_nodes
from primus_hydra.config.paths import find_conf_dir
from primus_hydra.config.run_composition import compose_run_config
from primus_hydra.config.stored_nodes import stored_classes
from primus_hydra.util import yaml_tags

SCHEMA_BUILDERS = (omegaconf._utils, omegaconf.basecontainer, omegaconf.dictconfig)


def command_lines(conf_dir: Path) -> list[list[str]]:
    """The default command line, one per option of every group, and each platform with each task (a platform picks
    Hydra's launcher, a task its logging and output: `platform=slurm task=status`)."""
    options = kept_nodes.group_options(conf_dir)
    of_group = {group: [option for option in options if option.startswith(f"{group}=")] for group in ("platform", "task")}
    return [[]] + [[option] for option in options] + \
        [[platform, task] for platform in of_group["platform"] for task in of_group["task"]]


def main() -> None:
    kept_nodes.KEPT_NODES_FILE.unlink(missing_ok=True)  # every node is made by Hydra and OmegaConf themselves
    kept_nodes._loaded.clear()
    fast_composition.install()
    builder, schema_classes = kept_nodes.recording_schema_builds(omegaconf._utils.get_structured_config_data)
    for module in SCHEMA_BUILDERS:
        module.get_structured_config_data = builder
    register_schemas()
    Plugins.instance()  # Hydra's sources and plugins, as a run scans them
    conf_dir = Path(find_conf_dir())
    hydra_nodes: dict[str, dict] = {}
    made_from: dict[str, list[str]] = {}
    hydra_source = None
    for overrides in command_lines(conf_dir):
        try:
            key, entry, hydra_source = kept_nodes.made_by_hydra(str(conf_dir), "config", overrides)
        except Exception as error:  # noqa: BLE001 - such a command line composes with Hydra
            print(f"  {' '.join(overrides) or '(defaults)'}: not kept ({type(error).__name__}: "
                  f"{str(error).splitlines()[0] if str(error) else ''})", file=sys.stderr)
            continue
        if key not in hydra_nodes:
            hydra_nodes[key], made_from[key] = entry, overrides
    file_nodes = kept_nodes.loaded_files(conf_dir, omegaconf.OmegaConf.load.__wrapped__)  # OmegaConf's own load
    yaml_reading = [fast_omegaconf.__name__, yaml_tags.__name__]  # what a loaded node depends on besides its text
    stored = stored_classes("primus_hydra")  # every schema this project stores in Hydra's ConfigStore
    kept_nodes.write_kept_file(hydra_nodes, hydra_source, schema_classes, stored, conf_dir, file_nodes, yaml_reading)
    for key, overrides in made_from.items():  # each is used for the command line it was made for
        if compose_run_config(str(conf_dir), "config", overrides, job_name="check") is None:
            sys.exit(f"the kept `hydra` node of {overrides} is not used: see config/run_composition.py")
        print(f"kept hydra node {key[:12]}: {' '.join(overrides) or '(defaults)'}")
    print(f"{len(hydra_nodes)} hydra nodes, {len(schema_classes)} schema classes ({len(stored)} stored), "
          f"{len(file_nodes)} conf files, "
          f"{kept_nodes.KEPT_NODES_FILE.stat().st_size} bytes: {kept_nodes.KEPT_NODES_FILE}")


if __name__ == "__main__":
    main()
