"""aer_trl.hardware: how many cores a run is told to use."""

import pytest

from aer_trl.hardware import cpu_threads, env_count


@pytest.mark.parametrize(
    ("cores", "load", "processes", "threads", "warned"),
    [
        (2, None, 1, 2, False),  # no load average: the share of the cores
        (2, 0.1, 1, 2, False),  # idle
        (2, 1.0, 1, 1, True),  # one core taken by another job: one thread
        (2, 2.3, 1, 1, True),  # all taken: still one
        (8, 2.0, 2, 3, True),  # 6 free cores for 2 processes
        (8, 0.4, 2, 4, False),
        (2, 1.0, 2, 1, False),  # one thread each already: nothing to take away
    ],
)
def test_a_cpu_run_takes_the_cores_the_load_leaves_free(cores, load, processes, threads, warned):
    got, note = cpu_threads(cores, load, processes)
    assert got == threads and (note is not None) == warned
    if warned:
        assert "AER_CPU_THREADS" in note and f"({load:.1f} of {cores} cores in use by other work)" in note


@pytest.mark.parametrize(("value", "count"), [(None, None), ("", None), ("0", None), ("3", 3), (" 2 ", 2)])
def test_a_count_from_the_environment(monkeypatch, value, count):
    if value is None:
        monkeypatch.delenv("AER_TEST_COUNT", raising=False)
    else:
        monkeypatch.setenv("AER_TEST_COUNT", value)
    assert env_count("AER_TEST_COUNT") == count


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", "two"])
def test_a_count_that_is_not_one_is_refused_with_the_variables_name(monkeypatch, value):
    """AER_VERIFY_WORKERS=-1 made a pool with no workers, whose first check waited forever."""
    from aer_trl.app.verifier import VerifierPool

    monkeypatch.setenv("AER_VERIFY_WORKERS", value)
    with pytest.raises(ValueError, match=f"AER_VERIFY_WORKERS must be a whole number .* got '{value}'"):
        env_count("AER_VERIFY_WORKERS")
    with pytest.raises(ValueError, match="AER_VERIFY_WORKERS"):
        VerifierPool()
