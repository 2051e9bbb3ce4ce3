"""bwrap_args remembers its path arithmetic across attempts (sandbox._read_only_binds,
sandbox._to_hide); what is on disk now is still looked at for every attempt."""

from __future__ import annotations

import itertools
from pathlib import Path

from sealbench.sandbox import HostLayout, Mounts, bwrap_args

SPLIT = HostLayout(system=((Path("/usr"), None), (Path("/bin"), None)))


def _hides(args: list[str], path: Path) -> str | None:
    """How args cover path: "tmpfs", "devnull", or None."""
    pairs = list(itertools.pairwise(args))
    if ("--tmpfs", str(path)) in pairs:
        return "tmpfs"
    triples = list(zip(args, args[1:], args[2:], strict=False))
    return "devnull" if ("--ro-bind", "/dev/null", str(path)) in triples else None


def test_a_hidden_path_is_covered_as_it_is_now_not_as_it_was(tmp_path: Path) -> None:
    """A hidden path that appears during a run is covered from the next attempt on, and one
    that turns from a directory into a file is covered as a file."""
    mine = tmp_path / "mine"
    mine.mkdir()
    secret = mine / "secret"
    mounts = Mounts(workspace=tmp_path / "ws", runtime=(mine,), hidden=(secret,))
    assert _hides(bwrap_args(mounts, network=False, host=SPLIT), secret) is None
    secret.mkdir()
    assert _hides(bwrap_args(mounts, network=False, host=SPLIT), secret) == "tmpfs"
    secret.rmdir()
    secret.write_text("x")
    assert _hides(bwrap_args(mounts, network=False, host=SPLIT), secret) == "devnull"


def test_each_attempts_own_mounts_give_its_own_arguments(tmp_path: Path) -> None:
    """Remembered per set of paths: another runtime or hidden set is not answered with the
    first one's options."""
    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        (d / "secret").mkdir(parents=True)
    first = bwrap_args(Mounts(workspace=tmp_path, runtime=(one,), hidden=(one / "secret",)),
                       network=False, host=SPLIT)
    second = bwrap_args(Mounts(workspace=tmp_path, runtime=(two,), hidden=(two / "secret",)),
                        network=False, host=SPLIT)
    assert _hides(first, one / "secret") == "tmpfs" and _hides(first, two / "secret") is None
    assert _hides(second, two / "secret") == "tmpfs" and _hides(second, one / "secret") is None
    assert ("--ro-bind", str(two), str(two)) in zip(second, second[1:], second[2:],
                                                    strict=False)
    assert str(one) not in second
    again = bwrap_args(Mounts(workspace=tmp_path, runtime=(one,), hidden=(one / "secret",)),
                       network=False, host=SPLIT)
    assert again == first
