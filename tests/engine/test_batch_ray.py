"""Batch jobs on a Ray cluster: a local two-node cluster (one CPU each, loopback only, stopped by the fixture),
SmolLM2 on each node; every id exactly once, the same results as the local executor, an actor killed mid-job,
a driver killed mid-job and re-run, and the one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a loopback cluster (see batch/ray_exec.py)
ray = pytest.importorskip("ray", reason="the [ray] extra (make test installs it)")
from ray.cluster_utils import Cluster  # noqa: E402

from conftest import TIANKONG, assert_one_line_error, pid_alive, run_cli, wait_until  # noqa: E402
from tiankong.batch import make_job, run  # noqa: E402
from tiankong.batch.store import iter_lines  # noqa: E402
from tiankong.models import TEST_MODEL  # noqa: E402

TEXTS = ["refund my invoice please", "the app crashes when I log in", "I was charged twice this month",
         "error 500 on the settings page", "cancel my subscription and refund", "the export button does nothing"]
LABELS = ["billing", "bug"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                          "include_dashboard": False})
    nodes.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    nodes.wait_for_nodes()
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


def records(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            out.write(json.dumps({"id": f"r{i}", "text": f"{TEXTS[i % len(TEXTS)]} (ticket {i})"}) + "\n")
    return path


def labels_of(output: Path) -> dict[str, str]:
    lines = list(iter_lines(output))
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids)), "an id was written twice"
    return {line["id"]: line["label"] for line in lines}


def test_two_nodes_give_every_id_once_and_the_local_results(cluster: Any, tmp_path: Path) -> None:
    source = records(tmp_path / "in.jsonl", 80)
    job = dict(input=str(source), task="classify", labels=LABELS, model=TEST_MODEL, slots=2)
    report = run(make_job(output=str(tmp_path / "ray.jsonl"), ray=cluster.address, **job))
    assert report.complete and report.done == 80 and report.failed == 0
    assert report.nodes is not None and len(report.nodes) == 2
    assert all(node["processed"] > 0 for node in report.nodes)  # both nodes did work
    assert sum(node["processed"] for node in report.nodes) == 80
    local = run(make_job(output=str(tmp_path / "local.jsonl"), **job))
    assert local.complete and local.nodes is None
    ray_labels, local_labels = labels_of(tmp_path / "ray.jsonl"), labels_of(tmp_path / "local.jsonl")
    assert ray_labels.keys() == local_labels.keys() == {f"r{i}" for i in range(80)}
    agree = sum(ray_labels[k] == local_labels[k] for k in ray_labels)
    # the same model at temperature 0; engines with other slot layouts may split a near-tie the other way
    assert agree >= 78, f"only {agree} of 80 labels agree with the local executor"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])


def _engine_pids() -> set[int]:
    """SmolLM2 engines whose parent is a Ray actor (not the engines other tests run)."""
    found = subprocess.run(["pgrep", "-f", "llama-server.*135m"], capture_output=True, text=True).stdout.split()
    mine = set()
    for pid in map(int, found):
        try:
            if Path(f"/proc/{_parent(pid)}/cmdline").read_bytes().startswith(b"ray::"):
                mine.add(pid)
        except (OSError, IndexError):
            continue
    return mine


def test_an_actor_killed_mid_job_loses_nothing(cluster: Any, tmp_path: Path) -> None:
    source = records(tmp_path / "in.jsonl", 60)
    output = tmp_path / "out.jsonl"
    before = _engine_pids()
    driver = subprocess.Popen([sys.executable, "-c", (
        "import sys, json; from tiankong.batch import make_job, run; "
        f"r = run(make_job(input={str(source)!r}, output={str(output)!r}, task='classify', labels={LABELS!r}, "
        f"model={TEST_MODEL!r}, slots=2, ray={cluster.address!r})); print(json.dumps(r.model_dump(mode='json')))")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    try:
        assert wait_until(lambda: output.exists() and sum(1 for _ in output.open()) >= 15, 240), driver.stderr
        engines = _engine_pids() - before
        assert len(engines) == 2, engines
        victim = sorted(engines)[0]
        actor = _parent(victim)
        os.kill(victim, signal.SIGKILL)
        os.kill(actor, signal.SIGKILL)
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
    assert driver.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["done"] == 60 and report["failed"] == 0
    assert labels_of(output).keys() == {f"r{i}" for i in range(60)}
    assert not pid_alive(actor)


def test_a_killed_driver_resumes_on_re_run(cluster: Any, tmp_path: Path) -> None:
    source = records(tmp_path / "in.jsonl", 80)
    output = tmp_path / "out.jsonl"
    args = ["batch", "run", "--task", "classify", "--labels", ",".join(LABELS), "--input", str(source),
            "--output", str(output), "--model", TEST_MODEL, "--slots", "2", "--ray", cluster.address, "--json"]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    first = subprocess.Popen([TIANKONG, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             start_new_session=True)
    try:
        assert wait_until(lambda: output.exists() and sum(1 for _ in output.open()) >= 10, 240)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
    done_before = len(labels_of(output))
    assert 10 <= done_before < 80
    again = run_cli(*args, env=env, timeout=400)
    assert again.returncode == 0, again.stderr[-2000:]
    report = json.loads(again.stdout)
    assert report["skipped_done"] == done_before and report["done"] == 80
    assert labels_of(output).keys() == {f"r{i}" for i in range(80)}
    time.sleep(0)


def test_ray_errors_are_one_line(tmp_path: Path) -> None:
    source = records(tmp_path / "in.jsonl", 3)
    common = ["batch", "run", "--task", "classify", "--labels", "a,b", "--input", str(source),
              "--output", str(tmp_path / "o.jsonl")]
    unreachable = run_cli(*common, "--model", TEST_MODEL, "--ray", "127.0.0.1:9")
    assert_one_line_error(unreachable, "cannot reach the ray cluster", "ray start --head")
    with_url = run_cli(*common, "--url", "http://127.0.0.1:9", "--ray", "127.0.0.1:9")
    assert_one_line_error(with_url, "model")


def test_a_node_without_the_model_or_network_is_a_one_line_error(tmp_path: Path) -> None:
    """A one-machine cluster (``--ray`` without an address) whose data dir has no model and whose package index
    is unreachable: the actor cannot install the model, and the driver says so in one line."""
    source = records(tmp_path / "in.jsonl", 3)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "TIANKONG_DATA_DIR": str(tmp_path / "data"),
           "TIANKONG_CACHE_DIR": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0",
           "PIP_TIMEOUT": "2"}
    proc = run_cli("batch", "run", "--task", "classify", "--labels", "a,b", "--input", str(source), "--output",
                   str(tmp_path / "o.jsonl"), "--model", TEST_MODEL, "--ray", env=env, timeout=300)
    assert_one_line_error(proc, "could not install", f"tiankong models pull {TEST_MODEL}")


def test_node_slots_follow_the_memory_plan() -> None:
    from tiankong.batch.ray_exec import GIB, node_slots
    from tiankong.errors import ConfigError
    from tiankong.plan import PlanConfig, load_spec, plan_memory

    spec = load_spec(TEST_MODEL)
    job = make_job(input="x.jsonl", output="y.jsonl", task="classify", labels=LABELS, model=TEST_MODEL, slots=4)
    assert node_slots(64 * GIB, job, spec, 0) == 4
    two = plan_memory(spec, PlanConfig(ctx=4096, slots=2)).total_bytes
    three = plan_memory(spec, PlanConfig(ctx=6144, slots=3)).total_bytes
    assert node_slots((two + three) / 2 / 0.8, job, spec, 0) == 2  # room for two slots' plan, not three
    with pytest.raises(ConfigError, match="too little"):
        node_slots(1024 * 1024, job, spec, 0)


def test_an_incompatible_ray_is_a_one_line_error(tmp_path: Path) -> None:
    """A Ray the executor does not support (a stand-in package reporting 1.13) is named, with the one to install."""
    fake = tmp_path / "site" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "1.13.0"\n', encoding="utf-8")
    source = records(tmp_path / "in.jsonl", 2)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = run_cli("batch", "run", "--task", "classify", "--labels", "a,b", "--input", str(source), "--output",
                   str(tmp_path / "o.jsonl"), "--model", TEST_MODEL, "--ray", env=env)
    assert_one_line_error(proc, "ray 1.13.0 is not supported", "ray>=2.9")
