"""The test Slurm cluster itself: a 2-node batch job runs on n1 and n2 with a GPU each."""

from __future__ import annotations

import pytest

from tests.support.slurm import SlurmCluster, marked_processes, slurm_cluster

pytestmark = pytest.mark.slow  # real Slurm daemons (root, slurm-wlm): not in `make check`


def test_a_two_node_job_runs_on_both_nodes_with_its_gpus(slurm: SlurmCluster) -> None:
    out = slurm.root / "gpu-job"
    out.mkdir()
    script = slurm.root / "gpu-job.sh"
    script.write_text(
        f'#!/bin/bash\nsrun bash -c \'echo "$CUDA_VISIBLE_DEVICES" > {out}/"$SLURMD_NODENAME"\'\n'
    )
    submitted = slurm.run(
        "sbatch",
        "--parsable",
        "--job-name=gpu-check",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:2",
        f"--output={out}/batch.out",
        str(script),
    )
    job_id = submitted.stdout.strip().split(";")[0]
    assert job_id.isdigit(), submitted.stdout
    queued = slurm.run("squeue", "--noheader", "--jobs", job_id, "--format=%i %j", check=False)
    # It may already have finished (MinJobAge keeps it listed for a minute either way).
    assert f"{job_id} gpu-check" in queued.stdout, queued.stdout
    slurm.wait_gone(job_id)
    seen = {
        path.name: path.read_text().strip() for path in out.iterdir() if path.name != "batch.out"
    }
    assert seen == {"n1": "0,1", "n2": "0,1"}, (seen, (out / "batch.out").read_text())
    accounted = slurm.run(
        "sacct",
        "--completion",
        "--jobs",
        job_id,
        "--noheader",
        "--parsable2",
        "--format=JobID,JobName,State,ExitCode,NodeList",
    )
    assert accounted.stdout.splitlines() == [f"{job_id}|gpu-check|COMPLETED|0:0|n[1-2]"]


def test_a_job_asking_for_more_gpus_than_a_node_has_is_refused(slurm: SlurmCluster) -> None:
    refused = slurm.run(
        "sbatch", "--nodes=1", "--gres=gpu:3", "--output=/dev/null", "--wrap=true", check=False
    )
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr


def test_stopping_the_cluster_leaves_nothing_running() -> None:
    with slurm_cluster() as cluster:
        script = cluster.root / "sleeper.sh"
        script.write_text("#!/bin/bash\nsrun sleep 300\n")
        job_id = cluster.run(
            "sbatch", "--parsable", "--nodes=2", "--output=/dev/null", str(script)
        ).stdout.strip()
        cluster.wait_state(job_id, "RUNNING")
        assert marked_processes(cluster.root)
        root = cluster.root
    assert marked_processes(root) == []
    assert not root.exists()
