"""A dead rank as the in-job witness tests pose it: its launcher variables and a pid no live process has."""

RANK1_ENV = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "TORCHELASTIC_RESTART_COUNT": "0",
}

DEAD_PID = 4_000_001  # above any pid_max: never a live process
