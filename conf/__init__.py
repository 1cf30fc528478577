"""primus-hydra's config tree as a Python package, `primus_hydra.conf` (a wheel ships conf/ under that name).

Hydra's Compose API reads it by module name: `hydra.initialize_config_module("primus_hydra.conf")`. Importing it
stores the typed schemas that config.yaml's defaults name (`primus_schema`, `schema/backend/*`, `schema/task/*`) in Hydra's
ConfigStore; Hydra imports the package when it opens the tree, so it composes without another call."""
from primus_hydra.backends.schemas import register_schemas

register_schemas()
