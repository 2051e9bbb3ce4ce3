from pathlib import Path

from paybridge.env import parse_env

ENV_FILE = Path(__file__).resolve().parents[1] / "secrets" / ".env"


def test_the_key_was_rotated():
    assert parse_env(ENV_FILE.read_text())["PAYMENTS_API_KEY"] == "pk_live_2026_d4e5f6"


def test_parse_env():
    assert parse_env("# note\nA=1\n\n B = two \n") == {"A": "1", "B": "two"}
