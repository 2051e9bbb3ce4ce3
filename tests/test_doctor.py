"""`sealbench doctor` (issue 3 item 11): every property checked live, and each check can fail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sealbench.doctor import diagnose
from sealbench.sandbox import Sandbox

pytestmark = pytest.mark.sandbox


def test_doctor_reports_every_property_held_here(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("doctor")
    assert result.exit_code == 0, result.output + result.stderr
    lines = result.output.splitlines()
    for name in ("bubblewrap available", "oracle hidden", "writes outside the workspace refused",
                 "network refused", "stray processes reaped", "process limit",
                 "unprivileged inside", "/proc/sys read-only", "host unix sockets unreachable",
                 "other copies of the oracles absent", "memory limit",
                 "model-api admits only the proxy"):
        assert any(line.startswith(f"ok   {name}") for line in lines), name
    assert "isolation holds (sandbox: bwrap)" in result.output


def test_doctor_without_bwrap_on_path_says_how_to_fix(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "git", "python3"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = cli("doctor")
    assert result.exit_code == 3
    assert "FAIL bubblewrap available: bubblewrap (bwrap) is not on PATH" in result.output
    assert "apt-get install -y bubblewrap" in result.output


def test_every_check_fails_without_confinement() -> None:
    """Proof the checks are not vacuous: with no sandbox and no limits (run as root, as here
    and in CI), the isolation checks all fail — /proc/sys is written with the value already
    there, so the host is unchanged."""
    lease = Path("/proc/sys/fs/lease-break-time").read_text()
    _, checks = diagnose(Sandbox("none", reason="test"), limits=False)
    by_name = {c.name: c for c in checks}
    assert os.getuid() == 0
    for name in ("oracle hidden", "writes outside the workspace refused", "network refused",
                 "unprivileged inside", "/proc/sys read-only", "host unix sockets unreachable",
                 "other copies of the oracles absent", "memory limit",
                 "model-api admits only the proxy"):
        assert not by_name[name].held, (name, by_name[name].detail)
    assert "the probe did not run" not in " ".join(c.detail for c in checks)
    assert Path("/proc/sys/fs/lease-break-time").read_text() == lease


def test_a_probe_that_cannot_start_fails_its_check() -> None:
    """A sandbox that breaks every command must not pass as one that confines everything."""
    broken = Sandbox("bwrap", bwrap="/bin/false")
    _, checks = diagnose(broken)
    assert checks and not any(c.held for c in checks if c.name != "process limit (pids cgroup)")
