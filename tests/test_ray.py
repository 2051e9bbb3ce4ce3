"""`--executor ray` on a real two-node Ray cluster started on this machine (docs/scale.md).

One cluster for the module (two raylets, two CPUs each, small object stores): the bundled
example gives the same outcomes and figures as locally; a worker killed mid-attempt is an
infrastructure error, retried, and the run publishes; Ctrl-C stops cleanly and a resume (also
one started locally) completes; the key hostile tests pass unchanged under Ray. The node-side
checks (a tampered shipped protocol, a node without bubblewrap) run without a cluster.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import ray
import test_hostile
from hostile_helpers import (
    hostile_report,
    hostile_solver,
    kill_matching,
    processes_matching,
    records,
    sealed_toy,
    wait_until_gone,
)
from ray.cluster_utils import Cluster
from test_hostile import base  # noqa: F401  (the hostile tests' fixture)
from test_resume import HANGS, SLOW, _wait_for_inflight
from toy import make_protocol, write_solver

import sealbench
from sealbench.errors import InfrastructureError
from sealbench.example import init, solver_command
from sealbench.executor import AttemptSpec, RunInputs, RunSettings, open_harness, sealed_bytes
from sealbench.harness import InfraFailure, Interrupted
from sealbench.ledger import Ledger
from sealbench.metric import MetricHung
from sealbench.ray_executor import (
    HungMetric,
    NodeFailure,
    NodeResult,
    RayExecutor,
    _build_node_run,
    _close_node_run,
    checked,
    gcs_unreachable,
    node_attempt,
    node_sandbox_problem,
    ray_failure,
    sealbench_code,
    with_driver_env,
)
from sealbench.runner import RunOptions, run, solver_file_digests
from sealbench.sandbox import Sandbox, detect
from sealbench.sealing import seal, verify
from sealbench.solver import CommandSolver

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

STORE_BYTES = 80 * 1024 * 1024


@pytest.fixture(scope="module")
def cluster(_session_cache: Path) -> Iterator[str]:
    """A head node and a second worker node, each with 2 CPUs; the driver connected. The
    workers inherit this process's environment at start: the session's environment cache."""
    saved = os.environ.get("SEALBENCH_CACHE")
    os.environ["SEALBENCH_CACHE"] = str(_session_cache)
    made = Cluster(initialize_head=True,
                   head_node_args={"num_cpus": 2, "object_store_memory": STORE_BYTES})
    try:
        made.add_node(num_cpus=2, object_store_memory=STORE_BYTES)
        made.wait_for_nodes()
        ray.init(address=made.address, log_to_driver=False, logging_level="ERROR")
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield made.address
    finally:
        ray.shutdown()
        made.shutdown()
        if saved is None:
            os.environ.pop("SEALBENCH_CACHE", None)
        else:
            os.environ["SEALBENCH_CACHE"] = saved


def _outcomes(ledger: Ledger, run_id: str) -> dict[tuple[str, str, int], str]:
    return {(r.phase, r.task_id, r.epoch): r.record["outcome"]
            for r in ledger.attempts(run_id)}


# --------------------------------------------------------------------------- acceptance 1


def test_the_example_under_ray_matches_the_local_run(cluster: str, tmp_path: Path) -> None:
    """The exact-diff bundled example (the same tasks as the test-graded one, without its
    environment build, which costs minutes on a loaded machine)."""
    proto = init(tmp_path / "coding-repair-exact", "coding-repair-exact")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger, jobs=2)
    command = solver_command("rulebook")
    local = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    remote = run(proto, command, ledger=ledger, options=RunOptions(jobs=4, executor="ray"))
    assert _outcomes(ledger, remote.run_id) == _outcomes(ledger, local.run_id)
    for key in ("n", "mean", "ci95", "ci_method", "gate", "infrastructure_errors"):
        assert remote.report.get(key) == local.report.get(key), key
    assert remote.report["n"] > 0


# --------------------------------------------------------------------------- acceptance 2


def _ray_worker_of(pid: int) -> int | None:
    """The Ray worker process above `pid` (its title starts with `ray::`), if any."""
    while pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if cmdline.startswith(b"ray::"):
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


def test_a_worker_killed_mid_attempt_is_retried_and_the_run_publishes(
        cluster: str, tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    agent = tmp_path / "agent"
    command = write_solver(agent, SLOW.replace("time.sleep(0.15)", "time.sleep(2)"))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    marker = f"{agent / 'solve.py'} toy-001"
    killed: list[int] = []

    def kill_the_worker_running_toy_001() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for pid, _ in processes_matching(marker):
                worker = _ray_worker_of(pid)
                if worker is not None:
                    os.kill(worker, signal.SIGKILL)
                    killed.append(worker)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_worker_running_toy_001)
    killer.start()
    try:
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=4, executor="ray"))
    finally:
        killer.join()
        kill_matching(marker)
    assert killed, "no Ray worker was found running toy-001"
    rows = records(ledger, result.run_id)
    # the killed try was an infrastructure error; the retry ran it to the end
    assert rows["toy-001"]["outcome"] == "pass", rows["toy-001"]["detail"]
    assert result.report["n"] == 4 and result.report["mean"] == 1.0
    assert wait_until_gone(marker, within=5.0) == []  # the sandbox died with its worker


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "sealbench.cli", *map(str, args)]


@pytest.mark.parametrize("first", ["ray", "local"])
def test_ctrl_c_under_ray_stops_cleanly_and_resume_under_ray_completes(
        cluster: str, tmp_path: Path, first: str) -> None:
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3, timeout=120)
    agent = tmp_path / "agent"
    command = write_solver(agent, HANGS)
    ledger_path = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    ray_args = ["--executor", "ray", "--ray-address", cluster]
    proc = subprocess.Popen(_cli("run", proto, "--solver", command, "--run-id", "k1",
                                 "--jobs", "2", "--ledger", ledger_path,
                                 *(ray_args if first == "ray" else [])),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marker = str(agent / "solve.py")
    try:
        _wait_for_inflight(ledger_path, "toy-", 2)  # two dataset attempts hang
        deadline = time.monotonic() + 60
        while len(processes_matching(f"{marker} toy-")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # their solvers have started
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "--resume k1" in err
        assert "Traceback" not in err and "%" not in out + err
        assert wait_until_gone(marker, within=10.0) == []  # no solver survives
        ledger = Ledger(ledger_path)
        assert ledger.run("k1").state == "interrupted"
        write_solver(agent)  # the agent stops hanging; same command, same files
        again = subprocess.run(_cli("run", proto, "--solver", command, "--resume", "k1",
                                    "--ledger", ledger_path, "--jobs", "4", *ray_args),
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert ledger.run("k1").state == "published"
        assert ledger.attempt_counts("k1") == {"null_pack": 3, "dataset": 4}
    finally:
        proc.kill()
        kill_matching(marker)


# --------------------------------------------------------------------------- acceptance 5

HOSTILE = [
    test_hostile.test_solver_cannot_read_the_oracle_fixtures_or_ledger,
    test_hostile.test_solver_cannot_write_outside_its_workspace,
    test_hostile.test_background_children_and_daemons_die_with_the_attempt,
    test_hostile.test_rewritten_git_history_does_not_hide_an_edit,
    test_hostile.test_fork_bomb_is_contained,
    test_hostile.test_a_3_gib_allocation_is_a_violation,
]


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda test: test.__name__)
def test_the_hostile_suite_passes_unchanged_under_ray(
        cluster: str, hostile: Any, base: Path, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The test bodies of tests/test_hostile.py, unchanged, with every run they start going
    through the Ray executor (their RunOptions default to `executor="ray"`)."""
    monkeypatch.setattr(test_hostile, "RunOptions", functools.partial(RunOptions,
                                                                      executor="ray"))
    tries: list[str] = []
    real_try = RayExecutor._try

    def counted(self: RayExecutor, box: Any, digest: str, spec: Any, abort: Any) -> Any:
        tries.append(spec.task_id)
        return real_try(self, box, digest, spec, abort)

    monkeypatch.setattr(RayExecutor, "_try", counted)  # counts; the real try still runs
    arguments = {"base": base, "tmp_path": tmp_path}
    names = hostile.__code__.co_varnames[:hostile.__code__.co_argcount]
    hostile(**{name: arguments[name] for name in names})
    assert "toy-001" in tries  # the hostile attempt really went through the cluster


# --------------------------------------------------------------------------- attack (issue 13)

# What a dishonest solver can learn of, or reach in, the Ray cluster it runs on: its
# environment and open file descriptors (compared with the same probe under the local
# executor), Ray's node directory with its Unix sockets (raylet, plasma store) and spilled
# objects, the head's TCP port, the worker's processes and the node's scratch copies.
PROBE_RAY = r"""
import glob, socket, stat
fds = sorted(os.listdir("/proc/self/fd"))
seen, connected = [], []
for top in CFG["ray_dirs"]:
    for path in glob.glob(os.path.join(top, "**"), recursive=True):
        seen.append(path)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(2)
                s.connect(path)
                connected.append(path)
                s.close()
        except OSError:
            pass
host, port = CFG["gcs"].rsplit(":", 1)
try:
    socket.create_connection((host, int(port)), timeout=2).close()
    gcs = "connected"
except OSError as exc:
    gcs = type(exc).__name__
procs = []
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        procs.append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
    except OSError:
        pass
scratch = [p for top in ("/dev/shm", "/tmp", "/var/tmp")
           for p in glob.glob(top + "/sealbench-run-*") + glob.glob(top + "/sealbench-run-*/*")
           if not os.getcwd().startswith(p + "/")]  # but the way to its own workspace
report(env=sorted(os.environ), fds=fds, seen=seen[:50], connected=connected, gcs=gcs,
       ray_processes=[c for c in procs if c.startswith("ray::") or "raylet" in c
                      or "default_worker" in c or "gcs_server" in c], scratch=scratch)
"""


def test_a_solver_under_ray_learns_and_reaches_nothing_of_the_cluster(
        cluster: str, base: Path) -> None:  # noqa: F811
    """Its environment and descriptors are the local run's; Ray's node directory (here
    exposed by a careless `--expose`, as if the operator had put Ray's --temp-dir inside a
    path the solver may read) shows no socket, no spilled object; the head's port is out of
    reach; no Ray process and no scratch copy of the protocol is visible."""
    proto, ledger = sealed_toy(base)
    temp_dir = Path(ray.get_runtime_context().get_temp_dir())
    assert any(temp_dir.glob("session_*/sockets/*"))  # what there would be to find
    command = hostile_solver(base / "agent", before=PROBE_RAY, ray_dirs=[str(temp_dir)],
                             gcs=cluster)
    seen: dict[str, dict[str, Any]] = {}
    for executor in ("local", "ray"):
        result = run(proto, command, ledger=ledger,
                     options=RunOptions(jobs=2, executor=executor, expose=(temp_dir,)))
        seen[executor] = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])
    under_ray = seen["ray"]
    assert under_ray["env"] == seen["local"]["env"]
    assert not [name for name in under_ray["env"] if name.startswith("RAY")]
    assert under_ray["fds"] == seen["local"]["fds"]
    assert under_ray["connected"] == [] and under_ray["gcs"] != "connected"
    assert [p for p in under_ray["seen"] if "session_" in p] == []
    assert under_ray["ray_processes"] == [] and under_ray["scratch"] == []


# --------------------------------------------------------------------------- node side


def _inputs(tmp_path: Path) -> RunInputs:
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    sealed = verify(proto)
    settings = RunSettings(detect())
    with open_harness(sealed.protocol, sealed.lock.sealed_files(), settings,
                      abort=threading.Event()) as harness:
        shipped = sealed_bytes(harness, sealed.identity)
    return RunInputs(shipped, settings, CommandSolver(("/bin/true",)), (proto,))


def test_a_node_rebuilds_and_verifies_the_shipped_protocol(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    node = _build_node_run(inputs)
    try:
        assert node.root != tmp_path / "proto"
        assert verify(node.root).identity == inputs.sealed.identity
        assert {t for _, t in node.tasks} >= {"toy-000", "toy-001", "toy-002"}
        # the driver's copy is hidden from the solver on the node too
        assert tmp_path / "proto" in node.harness.context.hidden
        assert node.root in node.harness.context.hidden
    finally:
        _close_node_run(node)
    assert not node.root.exists()


def test_a_tampered_shipped_protocol_is_an_infrastructure_error_on_the_node(
        tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    index = next(i for i, f in enumerate(inputs.sealed.files) if f.path.startswith("oracles/"))
    data = list(inputs.sealed.data)
    data[index] = b"--- a/app.txt\n+++ b/app.txt\n"
    forged = replace(inputs, sealed=replace(inputs.sealed, data=tuple(data)))
    with pytest.raises(InfrastructureError, match="cannot be used"):
        _build_node_run(forged)
    leftovers = [p for p in Path(os.environ.get("SEALBENCH_SCRATCH", "/tmp")).glob(
        f"sealbench-run-{os.getpid()}-protocol-*")]
    assert leftovers == []


def test_a_node_without_bubblewrap_refuses_a_sandboxed_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _inputs(tmp_path)
    assert inputs.settings.sandbox.kind == "bwrap"
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # this node has no bwrap on its PATH
    problem = node_sandbox_problem(inputs)
    assert problem is not None and "bubblewrap cannot be used here" in problem
    unsandboxed = replace(inputs, settings=replace(inputs.settings, sandbox=Sandbox("none")))
    assert node_sandbox_problem(unsandboxed) is None


@pytest.mark.parametrize(("error", "said"), [
    (ray.exceptions.WorkerCrashedError(), "WorkerCrashedError"),
    (ray.exceptions.RayTaskError("node_attempt", "tb", InfrastructureError("disk full")),
     "InfrastructureError: disk full"),
])
def test_what_ray_reports_becomes_one_line(error: BaseException, said: str) -> None:
    assert said in ray_failure(error)
    assert "\n" not in ray_failure(error)


def test_the_solver_gets_the_drivers_values_not_the_nodes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEALBENCH_TEST_KEY", "driver-value")
    inputs = replace(_inputs(tmp_path),
                     solver=CommandSolver(("/bin/true",), env_names=("SEALBENCH_TEST_KEY",)))
    shipped = with_driver_env(inputs)
    assert shipped.solver.host_env is not None
    assert dict(shipped.solver.host_env)["SEALBENCH_TEST_KEY"] == "driver-value"
    assert "HOME" not in dict(shipped.solver.host_env)  # only BASE_ENV and the given names


@pytest.mark.parametrize(("address", "unreachable"), [
    (None, False), ("auto", False), ("ray://head:10001", False),
    ("127.0.0.1:1", True), ("nohost", True), (":6379", True), ("127.0.0.1:port", True),
])
def test_a_dead_cluster_address_is_told_at_once(address: str | None,
                                                unreachable: bool) -> None:
    """Ray's own connection to a dead HOST:PORT retries for minutes, logging each try."""
    assert (gcs_unreachable(address, timeout=2.0) is not None) == unreachable


def _run_at_address(tmp_path: Path, address: str, *, timeout: float,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`sealbench run --executor ray --ray-address ADDRESS` on a sealed toy protocol."""
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    ledger_path = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path), check_instrument=False)
    return subprocess.run(_cli("run", proto, "--solver", write_solver(tmp_path / "agent"),
                               "--executor", "ray", "--ray-address", address,
                               "--ledger", ledger_path),
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_a_run_at_a_dead_cluster_address_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _run_at_address(tmp_path, "127.0.0.1:1", timeout=120)
    assert done.returncode == 3, done.stderr
    assert "no Ray cluster answers there" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert Ledger(tmp_path / "l.sqlite").runs() == []


# --------------------------------------------------------------------------- attack: answers

SPEC = AttemptSpec("dataset", "toy-001", 1, "toy-001")


def test_a_node_running_another_sealbench_runs_no_attempt(tmp_path: Path) -> None:
    """The run's records name the driver's sealbench: a worker with other code (another
    version, another checkout of the same one) must not run the attempt at all."""
    other = "0.0.9 " + "0" * 16
    assert sealbench_code() != other
    answer = node_attempt([None], "digest", SPEC, other)  # the inputs are never fetched
    assert isinstance(answer, NodeFailure)
    assert "runs sealbench" in answer.detail and other in answer.detail
    with pytest.raises(InfrastructureError, match="runs sealbench"):
        checked(answer, SPEC)


def test_the_code_digest_is_stable_and_names_the_version() -> None:
    assert sealbench_code() == sealbench_code.__wrapped__()
    assert sealbench_code().startswith(sealbench.__version__ + " ")


OWN = Interrupted("toy-001")


@pytest.mark.parametrize(("answer", "error"), [
    (NodeResult(SPEC, OWN), None),
    (NodeResult(SPEC, InfraFailure("toy-001", "disk", 1)), None),
    # another attempt's answer: another epoch, another label, another task
    (NodeResult(replace(SPEC, epoch=0), OWN), "answered for toy-001 \\(epoch 0\\)"),
    (NodeResult(replace(SPEC, label="x"), OWN), "answered for"),
    (NodeResult(replace(SPEC, task_id="toy-002"), Interrupted("toy-002")), "answered for"),
    (NodeResult(SPEC, Interrupted("toy-002")), "answered for toy-002"),
    # a worker of another sealbench: a bare result, or anything else
    (OWN, "answered with Interrupted, not a result"),
    (None, "answered with NoneType"),
    (NodeFailure("node n: bubblewrap cannot be used here"), "bubblewrap"),
])
def test_the_driver_records_only_the_answer_to_the_spec_it_sent(
        answer: object, error: str | None) -> None:
    if error is None:
        assert isinstance(answer, NodeResult)
        assert checked(answer, SPEC) == answer.finished
    else:
        with pytest.raises(InfrastructureError, match=error):
            checked(answer, SPEC)


def test_a_metric_hung_on_the_node_stops_the_run_on_the_driver() -> None:
    with pytest.raises(MetricHung):
        checked(HungMetric("metric.py", "toy-001", 5.0), SPEC)


def test_without_an_address_a_run_starts_its_own_instance_beside_a_running_cluster(
        cluster: str, tmp_path: Path) -> None:
    """A careless operator: a cluster already runs on this machine (or RAY_ADDRESS is left
    set from another job). Without --ray-address the run still starts its own instance, as
    docs/scale.md says; Ray's own default would join that cluster and refuse the run."""
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    ledger_path = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path), check_instrument=False)
    done = subprocess.run(_cli("run", proto, "--solver", write_solver(tmp_path / "agent"),
                               "--executor", "ray", "--ledger", ledger_path, "--run-id", "own"),
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_ADDRESS": cluster})
    assert done.returncode == 0, done.stderr
    assert Ledger(ledger_path).run("own").state == "published"


def test_a_node_whose_solver_files_differ_from_the_drivers_runs_none_of_its_attempts(
        tmp_path: Path) -> None:
    """The run header records the sha256 of the solver's files as the driver read them; a
    node with another agent at the same path must not run it under that record."""
    agent = tmp_path / "agent.py"
    agent.write_text("print('the driver's agent')\n")
    solver = CommandSolver((sys.executable, str(agent)))
    inputs = replace(_inputs(tmp_path), solver=solver,
                     solver_files=tuple(sorted(solver_file_digests(solver.argv).items())))
    node = _build_node_run(inputs)  # the same files: the node runs it
    _close_node_run(node)
    agent.write_text("print('another agent at the same path')\n")
    with pytest.raises(InfrastructureError, match=f"solver's file {agent} is not the driver's"):
        _build_node_run(inputs)
    agent.unlink()
    with pytest.raises(InfrastructureError, match="not the driver's"):
        _build_node_run(inputs)


def test_auto_with_a_stale_ray_address_is_refused_in_one_line(tmp_path: Path) -> None:
    """A careless operator: RAY_ADDRESS left over from a cluster that is gone. `auto` means
    RAY_ADDRESS to Ray, which then retries for minutes and logs every try to stderr."""
    done = _run_at_address(tmp_path, "auto", timeout=60,
                           env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})
    assert done.returncode == 3, done.stderr
    assert "auto is 127.0.0.1:1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert Ledger(tmp_path / "l.sqlite").runs() == []
