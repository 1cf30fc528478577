"""The user's code a Slurm job imports by path, frozen with the project's at submission: packages named by a
`_target_`, backend.trainer or patches.modules that live outside site-packages, and the backend.path tree; what is
installed is not copied; the job's processes put the frozen packages before their working directory."""
from __future__ import annotations

import sys

from omegaconf import OmegaConf

from primus_hydra.launch.frozen_user_path import FROZEN_USER_ENV, put_frozen_user_code_first
from primus_hydra.launch.slurm import frozen_code


def user_tree(root):
    package = root / "code" / "acme_trainer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "adapter.py").write_text("SCALE = 1.0\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "adapter.cpython-311.pyc").write_bytes(b"\0")
    (root / "code" / "acme_patches.py").write_text("PATCHED = True\n")
    backend = root / "Megatron-LM"
    (backend / "megatron").mkdir(parents=True)
    (backend / "megatron" / "training.py").write_text("def pretrain(): pass\n")
    return OmegaConf.create({
        "backend": {"_target_": "acme_trainer.adapter.AcmeAdapter", "path": str(backend), "trainer": None},
        "patches": {"modules": ["acme_patches"]},
        "logger": {"sink": {"_target_": "omegaconf.OmegaConf"}},  # installed: never copied
        "task": {"_target_": "primus_hydra.tasks.train.TrainTask"},  # the project's own: frozen as src/
    })


def test_user_packages_and_the_backend_tree_are_frozen_and_edits_after_submission_do_not_reach_them(
        tmp_path, monkeypatch):
    cfg = user_tree(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    frozen = frozen_code.freeze_project_code(tmp_path / "runs", [cfg])
    assert (frozen.path / "user" / "acme_trainer" / "adapter.py").read_text() == "SCALE = 1.0\n"
    assert (frozen.path / "user" / "acme_patches.py").is_file()
    assert not (frozen.path / "user" / "acme_trainer" / "__pycache__").exists()
    assert (frozen.path / "backend" / "Megatron-LM" / "megatron" / "training.py").is_file()
    assert not list((frozen.path / "user").glob("omegaconf*")) and not (frozen.path / "user" / "primus_hydra").exists()
    assert frozen.record()["user_packages"] == {"acme_patches": str(tmp_path / "code" / "acme_patches.py"),
                                               "acme_trainer": str(tmp_path / "code" / "acme_trainer")}
    assert frozen.record()["backend_path"] == str(tmp_path / "Megatron-LM")
    assert f'export {FROZEN_USER_ENV}="{frozen.path / "user"}"' in frozen.setup_lines
    assert f'export PRIMUS_FROZEN_BACKEND_PATH="{frozen.path / "backend" / "Megatron-LM"}"' in frozen.setup_lines

    (tmp_path / "code" / "acme_trainer" / "adapter.py").write_text("SCALE = 2.0\n")  # edited while the job waits
    assert (frozen.path / "user" / "acme_trainer" / "adapter.py").read_text() == "SCALE = 1.0\n"
    edited = frozen_code.freeze_project_code(tmp_path / "runs", [cfg])
    assert edited.digest != frozen.digest and edited.path != frozen.path


def test_without_user_code_the_copy_is_the_projects_alone(tmp_path):
    cfg = OmegaConf.create({"backend": {"_target_": "primus_hydra.backends.torch.adapter.TorchAdapter", "path": None}})
    frozen = frozen_code.freeze_project_code(tmp_path, [cfg])
    assert not (frozen.path / "user").exists() and not (frozen.path / "backend").exists()
    assert len(frozen.setup_lines) == 1 and "user_packages" not in frozen.record()


def test_the_job_puts_the_frozen_packages_before_its_working_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", ["", str(tmp_path / "elsewhere"), str(tmp_path / "user")])
    monkeypatch.setenv(FROZEN_USER_ENV, str(tmp_path / "user"))
    put_frozen_user_code_first()
    assert sys.path == [str(tmp_path / "user"), "", str(tmp_path / "elsewhere")]


def test_a_local_run_records_the_user_code_it_runs_in_place(tmp_path, monkeypatch):
    import json

    from primus_hydra.launch.provenance import PROVENANCE_FILE, record_provenance

    cfg = user_tree(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    cfg.module = {"data": {"source": "mock", "path": None}}
    record_provenance(tmp_path / "run", cfg, launcher="this_process")
    user = json.loads((tmp_path / "run" / PROVENANCE_FILE).read_text())["user_code"]
    assert set(user["user_packages"]) == {"acme_patches", "acme_trainer"}
    assert user["backend_path"] == str(tmp_path / "Megatron-LM") and user["digest"].startswith("sha256:")
