"""The ConfigStore converting a node to OmegaConf when it is first loaded, not when it is stored
(config/fast_composition.py's item 3), for speed only: what a load returns is the same.

Hydra's ConfigStore.store converts each node when it is stored: Hydra's own config (hydra.conf, at `import hydra`),
every structured config every installed plugin registers at Hydra's plugin scan, and this project's schemas
(~25-35 ms a process on a host where `import hydra` takes 0.15-0.19 s), most of which no command loads.

A schema class of this project's is converted to the node kept for it in config/kept_nodes.pickle (OmegaConf's own
`OmegaConf.structured(cls)`, made by scripts/make_kept_nodes.py) where that is what this installation makes: ~0.2 ms
against ~1-2.5 ms a class (PrimusConfig, LoggerConfig, HardwareConfig, the task's and the backend's: every composition).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

ConfigNodeConvertedWhenLoaded: Optional[type] = None  # set once ConfigStore.store converts when a node is loaded


class _Deferred:
    """A node made when it is loaded (stored_when_loaded)."""
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def stored_when_loaded(make: Callable[[], Any]) -> Any:
    """For ConfigStore.store: a node (a dataclass, say, whose module is costly to import) made by `make()` when
    composition first loads it; made now where install() has not run (Hydra's own store converts at once)."""
    return _Deferred(make) if ConfigNodeConvertedWhenLoaded is not None else make()


class _Conversion:
    """A stored node and, once asked for, its OmegaConf form; shared by the copies ConfigStore.load makes."""
    __slots__ = ("stored", "converted")

    def __init__(self, stored: Any) -> None:
        self.stored, self.converted = stored, None

    def config(self) -> Any:
        if self.converted is None:
            from omegaconf import OmegaConf

            from primus_hydra.config.kept_nodes import kept_structured_node

            stored = self._made()
            own = isinstance(stored, type) and stored.__module__.startswith("primus_hydra.")  # the kept ones
            kept = kept_structured_node(stored) if own else None
            self.converted, self.stored = kept if kept is not None else OmegaConf.structured(stored), None
        return self.converted

    def stored_class(self) -> Optional[type]:
        """The class stored (made, where it was stored to be made when loaded), or None for an instance."""
        stored = self.converted._metadata.object_type if self.converted is not None else self._made()
        return stored if isinstance(stored, type) else None

    def _made(self) -> Any:
        return self.stored.make() if isinstance(self.stored, _Deferred) else self.stored

    def __deepcopy__(self, memo: dict) -> "_Conversion":
        return self


def convert_stored_nodes_when_loaded() -> None:
    """ConfigStore.store keeps each node as it is given, converted when first loaded (idempotent). Run by
    fast_composition.install(), and by config/hydra_import.py as soon as Hydra's config_store module is made, before
    hydra.conf stores Hydra's own config."""
    global ConfigNodeConvertedWhenLoaded
    if ConfigNodeConvertedWhenLoaded is not None:
        return
    from hydra.core.config_store import ConfigNode, ConfigStore

    class ConvertedWhenLoaded(ConfigNode):  # ConfigNode's fields and constructor; `node` made when first read
        @property
        def node(self) -> Any:
            own = self.__dict__.get("_own_node")
            return own if own is not None else self.__dict__["_conversion"].config()

        @node.setter
        def node(self, value: Any) -> None:  # ConfigNode's constructor gives the conversion, load() a copy
            if isinstance(value, _Conversion):
                self.__dict__["_conversion"], self.__dict__["_own_node"] = value, None
            else:
                self.__dict__["_own_node"] = value

    def store(self: ConfigStore, name: str, node: Any, group: Optional[str] = None, package: Optional[str] = None,
              provider: Optional[str] = None) -> None:
        folder = self.repo
        for part in group.split("/") if group is not None else ():
            folder = folder.setdefault(part, {})
        name = name if name.endswith(".yaml") else f"{name}.yaml"
        folder[name] = ConvertedWhenLoaded(name=name, node=_Conversion(node), group=group, package=package,
                                           provider=provider)

    ConfigStore.store, ConfigNodeConvertedWhenLoaded = store, ConvertedWhenLoaded


def stored_classes(provider: str) -> list[type]:
    """The classes `provider` stored in Hydra's ConfigStore (scripts/make_kept_nodes.py keeps their nodes)."""
    from hydra.core.config_store import ConfigStore

    found: list[type] = []
    pending = [ConfigStore.instance().repo]
    while pending:
        for entry in pending.pop().values():
            if isinstance(entry, dict):
                pending.append(entry)
            elif entry.provider == provider and isinstance(entry.__dict__.get("_conversion"), _Conversion):
                cls = entry.__dict__["_conversion"].stored_class()
                if cls is not None and cls not in found:
                    found.append(cls)
    return found
