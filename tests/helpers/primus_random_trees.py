"""Random Primus experiment trees for the differential tests of task=import: `extends` chains, `${VAR:default}`
with defaults and environment values Primus and OmegaConf type differently, module presets shadowing model presets,
keys written beside a module's config/model, overrides adding keys, setting null or the text `null`, and merging
into a preset's mapping. The same seed gives the same tree."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

META = {"work_group": "${PRIMUS_TEAM:amd}", "user_name": "${PRIMUS_USER:root}", "exp_name": "gen",
        "workspace": "./output"}
# text that Primus and OmegaConf read differently, as defaults and as environment values
TEXTS = ["7", "007", "-3", "+5", "1_000", "1e-4", "2.5", ".5", "nan", "inf", "NULL", "null", "None", "~", "", '""',
         "true", "False", "yes", "abc", "a,b", "x:y", "1.0.0", "it's", "/data/c4", "a b"]
VARIABLES = ("PV0", "PV1", "PV2", "PV3")


class TreeMaker:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.environ = {var: self.rng.choice(TEXTS) for var in VARIABLES if self.rng.random() < 0.4}

    def env_reference(self) -> str:
        var = self.rng.choice(VARIABLES)
        shape = self.rng.random()
        if shape < 0.6:
            return "${%s:%s}" % (var, self.rng.choice(TEXTS))
        if shape < 0.8 and var in self.environ:
            return "${%s}" % var
        return "p-${%s:%s}-q" % (var, self.rng.choice(TEXTS))

    def scalar(self) -> Any:
        pick = self.rng.random()
        if pick < 0.25:
            return self.env_reference()
        if pick < 0.35:
            return "null"
        if pick < 0.45:
            return None
        if pick < 0.55:
            return self.rng.choice([True, False])
        if pick < 0.7:
            return self.rng.randint(-3, 4096)
        if pick < 0.8:
            return self.rng.choice([1.0e-4, 0.5, 3.0e-5])
        return self.rng.choice(TEXTS)

    def value(self, depth: int = 0) -> Any:
        pick = self.rng.random()
        if pick < 0.1 and depth < 2:
            return [self.scalar() for _ in range(self.rng.randint(0, 3))]
        if pick < 0.2 and depth < 2:
            return {f"s{i}": self.value(depth + 1) for i in range(self.rng.randint(1, 3))}
        return self.scalar()

    def mapping(self, keys: list[str]) -> dict:
        return {key: self.value() for key in keys if self.rng.random() < 0.7}

    def section(self) -> dict:
        return {key: self.scalar() for key in ("a", "b", "c") if self.rng.random() < 0.8}

    def write(self, root: Path, index: int) -> Path:
        """The tree under root (a Primus-shaped checkout); returns the experiment file."""
        modules = root / "primus" / "configs" / "modules" / "megatron"
        models = root / "primus" / "configs" / "models" / "megatron"
        module = self.mapping([f"k{i}" for i in range(8)])
        module["sec"] = self.section()
        if self.rng.random() < 0.2:
            module.update(name="a_preset_name", framework="not_megatron")
        if self.rng.random() < 0.4:
            _write(modules / f"gen{index}_base.yaml", {**self.mapping([f"k{i}" for i in range(4)] + ["b0"]),
                                                       "sec": self.section()})
            module["extends"] = [f"gen{index}_base.yaml"] if self.rng.random() < 0.5 else f"gen{index}_base.yaml"
        model = self.mapping([f"k{i}" for i in range(4)] + [f"m{i}" for i in range(4)])
        if self.rng.random() < 0.3:
            model["sec"] = self.section()
        if self.rng.random() < 0.2:
            model["model"] = {"name": "llama", "flavor": self.scalar()}
        if self.rng.random() < 0.3:
            _write(models / f"gen{index}_model_base.yaml", self.mapping(["m0", "m5", "k6"]))
            model["extends"] = [f"gen{index}_model_base.yaml"]
        _write(modules / f"gen{index}_module.yaml", module)
        _write(models / f"gen{index}_model.yaml", model)
        trainer: dict = {"framework": "megatron", "config": f"gen{index}_module.yaml", "model": f"gen{index}_model.yaml"}
        for key in ("trainer_class", "k1", "m0", "n9", "_private"):
            if self.rng.random() < 0.2:
                trainer[key] = self.value()
        if self.rng.random() < 0.85:
            overrides = self.mapping([f"k{i}" for i in range(8)] + [f"m{i}" for i in range(4)] + ["n0", "n1"])
            if self.rng.random() < 0.5:
                overrides["sec"] = self.section() if self.rng.random() < 0.8 else self.scalar()
            trainer["overrides"] = overrides if overrides or self.rng.random() < 0.5 else None
        experiment = {**META, "modules": {"pre_trainer": trainer}}
        path = root / "examples" / f"gen{index}.yaml"
        if self.rng.random() < 0.2:
            _write(root / "examples" / f"gen{index}_meta.yaml", META)
            experiment = {"extends": [f"gen{index}_meta.yaml"], "modules": experiment["modules"]}
        _write(path, experiment)
        return path


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
