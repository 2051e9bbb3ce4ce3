"""Installing a real third-party agent from PyPI for the tests, once per version.

The agent goes into its own virtual environment — never sealbench's, so nothing of ours can
leak into it and nothing of its (litellm pins half of PyPI) into ours — made with the
interpreter running the tests and cached under `~/.cache/sealbench-tests/agents/` (or
`$SEALBENCH_TEST_AGENTS`), keyed by package, version and Python line, so reruns are instant.
A venv cannot be moved once made (its scripts name their interpreter by absolute path), so it
is built in place under a lock and marked complete last: a half-built one (killed install) is
removed and built again. pip reaches the registry as configured on the machine; when it
cannot, the install fails and so does the test — CI has the registry, and a test that skipped
there would prove nothing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

COMPLETE = ".sealbench-installed"


def agents_cache() -> Path:
    override = os.environ.get("SEALBENCH_TEST_AGENTS")
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sealbench-tests" / "agents"


def install_agent(package: str, version: str, *, timeout: float = 600) -> Path:
    """The venv holding `package==version` from the registry, installed on first use."""
    python_line = f"py{sys.version_info.major}.{sys.version_info.minor}"
    venv = agents_cache() / f"{package}-{version}-{python_line}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f".{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / COMPLETE).is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", f"{package}=={version}"],
            capture_output=True, text=True, timeout=timeout)
        if pip.returncode != 0:
            raise RuntimeError(f"pip could not install {package}=={version} from the registry "
                               f"(exit {pip.returncode}):\n{pip.stderr[-4000:]}")
        (venv / COMPLETE).write_text(f"{package}=={version}\n")
        return venv
