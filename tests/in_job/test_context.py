"""Rank and job identity: where they come from, and why two jobs never share a trace."""

import pytest

from loadtrace.instrumentation.context import Job, job_id_from_env, rank_from_env
from loadtrace.semconv import job_trace_ids as trace_ids


def test_loadtrace_job_id_wins():
    assert job_id_from_env({"LOADTRACE_JOB_ID": "mine", "TORCHELASTIC_RUN_ID": "x", "SLURM_JOB_ID": "7"}) == (
        "mine",
        "LOADTRACE_JOB_ID",
    )


@pytest.mark.parametrize("placeholder", ["none", "None", "", "default"])
def test_torchrun_placeholder_run_ids_are_not_job_ids(placeholder):
    assert job_id_from_env({"TORCHELASTIC_RUN_ID": placeholder}) == (None, None)
    assert job_id_from_env({"TORCHELASTIC_RUN_ID": placeholder, "SLURM_JOB_ID": "42"}) == ("42", "SLURM_JOB_ID")


def test_each_slurm_step_is_its_own_launch():
    assert job_id_from_env({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3"}) == ("42.3", "SLURM_JOB_ID")


def test_trace_id_is_a_pure_function_of_the_job_id():
    assert trace_ids("job-a") == trace_ids("job-a")
    assert trace_ids("job-a")[0] != trace_ids("job-b")[0]
    trace_id, span_id = trace_ids("job-a")
    assert 0 < trace_id < 2**128 and 0 < span_id < 2**64


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"},
            ("torchrun", 3, 1, 8, 2, 1),
        ),
        (
            {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16", "SLURM_NODEID": "2"},
            ("slurm", 5, 1, 16, None, 2),
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"},
            ("mpi", 2, 0, 4, None, None),
        ),
        ({}, ("none", None, None, None, None, None)),
    ],
)
def test_rank_from_launcher_variables(env, expected):
    rank = rank_from_env(env)
    assert (
        rank.launcher,
        rank.rank,
        rank.local_rank,
        rank.world_size,
        rank.local_world_size,
        rank.node_rank,
    ) == expected


class FakeStore:
    """The two calls of torch's c10d Store that job id publishing uses."""

    def __init__(self):
        self.values = {}

    def set(self, key, value):
        self.values[key] = value.encode()

    def wait(self, keys, timeout):
        assert all(k in self.values for k in keys)

    def get(self, key):
        return self.values[key]


def test_rank_zero_publishes_a_job_id_the_others_adopt():
    store = FakeStore()
    zero, one = Job(env={"TORCHELASTIC_RUN_ID": "none"}), Job(env={"TORCHELASTIC_RUN_ID": "none"})
    assert not zero.known
    zero.adopt_from_store(store, rank=0)
    one.adopt_from_store(store, rank=1)
    assert zero.id == one.id and len(zero.id) == 32


def test_a_known_job_id_is_never_replaced():
    job = Job(env={"TORCHELASTIC_RUN_ID": "abc"})
    job.adopt_from_store(FakeStore(), rank=0)
    assert job.id == "abc"


def test_cluster_from_loadtrace_slurm_or_kubernetes():
    from loadtrace.instrumentation import context, settings

    def cluster_attributes(env):  # the cluster name is a Settings knob; the pod and namespace are read from env
        return context.cluster_attributes(settings.from_env(env).cluster, env)

    assert cluster_attributes({"LOADTRACE_CLUSTER": "east", "SLURM_CLUSTER_NAME": "x"}) == {"loadtrace.cluster": "east"}
    assert cluster_attributes({"SLURM_CLUSTER_NAME": "hpc1"}) == {"loadtrace.cluster": "hpc1"}
    k8s = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "trainer-0", "POD_NAMESPACE": "ml"}
    assert cluster_attributes(k8s) == {"k8s.pod.name": "trainer-0", "k8s.namespace.name": "ml"}
    assert cluster_attributes({}) == {}
