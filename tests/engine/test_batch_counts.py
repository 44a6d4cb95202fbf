"""The counts a batch shows while it runs (the Batch API's ``request_counts``) are what its output files hold:
lines still in the writer's group are not counted yet, so a kill -9 — which loses them, answered again by the next
run — never makes the counts go back. Rules-only redaction (no engine); nothing is timed."""

from __future__ import annotations

import json
from pathlib import Path

from tiankong.batch import build_job, run
from tiankong.batch.report import RunStats


def on_disk(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


class Recorder:
    """A progress sink that reads the output files at every update."""

    def __init__(self, output: Path, errors: Path) -> None:
        self.output, self.errors = output, errors
        self.seen: list[tuple[int, int, int, int, int]] = []

    def start(self, total: int, completed: int) -> None:
        pass

    def update(self, stats: RunStats, completed: int) -> None:
        done, failed = stats.durable_counts()
        self.seen.append((done, on_disk(self.output), failed, on_disk(self.errors), stats.processed))

    def stop(self) -> None:
        pass


def test_the_counts_shown_never_run_ahead_of_the_output_files(tmp_path: Path) -> None:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": i, "text": f"call 138{i:08d} now"} if i % 10 else {"id": i} for i in range(120)]  # 12 bad lines
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    job = build_job(input=str(source), output=str(out), task="redact", args={"use_model": False}, fsync_every=16)
    recorder = Recorder(out, tmp_path / "out.errors.jsonl")
    report = run(job, progress=recorder)
    assert report.processed == 108 and report.failed_this_run == 12
    assert all(done <= written and failed <= errors for done, written, failed, errors, _ in recorder.seen)
    assert any(processed > written for _, written, _, _, processed in recorder.seen)  # the groups did buffer
    assert max(done for done, *_ in recorder.seen) > 0  # and the durable counts moved while it ran
    # a second run resumes from the files: its counts start where the first run's ended
    again = Recorder(out, tmp_path / "out.errors.jsonl")
    run(job, progress=again)
    assert again.seen and again.seen[0][0] <= 108 and max(done for done, *_ in again.seen) == 108


def test_a_batch_api_batch_resumed_starts_from_its_record_counts(tmp_path: Path) -> None:
    """Each turn of a Batch API batch (and the run after a restart) counted from 0 again while it skipped its done
    lines: ``request_counts.completed`` dropped from 50 to 0 and climbed back, and the low value was saved."""
    from types import SimpleNamespace

    from tiankong.batch.batches import BatchStore
    from tiankong.gateway.batch_runner import BatchRunner, _Progress

    store = BatchStore(tmp_path / "batches")
    batch = store.create(owner="", endpoint="/v1/chat/completions", input_file_id="file-x", completion_window="24h",
                         metadata=None, total=100)
    store.update(batch["id"], request_counts={"total": 100, "completed": 50, "failed": 2})
    runner = SimpleNamespace(store=store, live={})  # what _Progress reads of its runner
    runner.counts_of = lambda batch_id: BatchRunner.counts_of(runner, batch_id)  # type: ignore[arg-type]
    progress = _Progress(runner, batch["id"], 100)  # type: ignore[arg-type]
    assert runner.counts_of(batch["id"]) == {"total": 100, "completed": 50, "failed": 2}
    progress.update(RunStats(total=100, skipped_done=3), 3)  # the resumed run has skipped 3 done lines so far
    assert runner.counts_of(batch["id"]) == {"total": 100, "completed": 50, "failed": 2}
    assert store.get(batch["id"], None)["request_counts"]["completed"] == 50  # the saved value did not drop
    progress.update(RunStats(total=100, skipped_done=50, durable_results=4), 54)
    assert runner.counts_of(batch["id"])["completed"] == 54
