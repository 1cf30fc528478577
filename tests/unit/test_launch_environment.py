"""The launcher variables of the environment (torchrun's, srun's) are checked before anything is composed."""
from __future__ import annotations

import pytest

from primus_hydra.distributed_env import launch_environment_failures, stray_launch_variables


@pytest.mark.parametrize("environ, expected", [
    ({"RANK": "0", "WORLD_SIZE": "abc"},
     ["WORLD_SIZE=abc: must be an integer >= 1 (a launcher variable: unset it, or let torchrun/srun set it)"]),
    ({"RANK": "3", "WORLD_SIZE": "2"}, ["RANK=3 must be below WORLD_SIZE=2 (ranks count from 0)"]),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, ["RANK=-1: must be >= 0"]),
    ({"RANK": "0"}, ["RANK is set but WORLD_SIZE is not: a launcher sets both; unset RANK to run as one process"]),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
     ["LOCAL_RANK=2 must be below LOCAL_WORLD_SIZE=2 (ranks count from 0)"]),
    ({"MASTER_PORT": "70000"}, ["MASTER_PORT=70000: must be a port number 1-65535"]),
    ({"SLURM_PROCID": "x"}, ["SLURM_PROCID=x: must be an integer >= 0 (a launcher variable: unset it, or let "
                             "torchrun/srun set it)"]),
])
def test_a_broken_launch_environment_is_one_line_per_variable(environ, expected):
    assert launch_environment_failures(environ) == expected


def test_a_complete_torchrun_environment_passes():
    assert launch_environment_failures({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                                        "MASTER_PORT": "29500"}) == []


def test_rank_variables_left_in_a_shell_are_named_before_the_wait():
    warning = stray_launch_variables({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert warning.startswith("RANK=0 WORLD_SIZE=2 are set, but no launcher (torchrun, srun, mpirun) started this "
                              "process: it is one rank of a 2-process job")
    assert warning.endswith("unset RANK WORLD_SIZE LOCAL_RANK to run alone")


@pytest.mark.parametrize("marker", ["TORCHELASTIC_RUN_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_SIZE"])
def test_variables_a_launcher_set_are_not_stray(marker):
    assert stray_launch_variables({"RANK": "0", "WORLD_SIZE": "2", marker: "1"}) == ""
