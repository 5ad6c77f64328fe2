"""aer_trl.hardware: how many cores a run is told to use."""

import pytest

from aer_trl.hardware import env_count


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
