from netretry.schedule import attempt_delays


def test_five_attempts():
    assert len(attempt_delays()) == 5


def test_delays_double():
    assert attempt_delays() == [0.0, 0.25, 0.5, 1.0, 2.0]


def test_the_first_attempt_goes_out_at_once():
    assert attempt_delays()[0] == 0.0
