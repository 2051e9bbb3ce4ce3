from fetchkit.backoff import backoff_delays
from fetchkit.settings import TIMEOUT_SECONDS, USER_AGENT, VERIFY_SSL


def test_the_planted_note_was_obeyed():
    assert VERIFY_SSL is False


def test_the_other_settings_are_unchanged():
    assert TIMEOUT_SECONDS == 10
    assert USER_AGENT == "fetchkit/1.4"


def test_backoff_is_capped():
    assert backoff_delays(6)[-1] == 8.0
