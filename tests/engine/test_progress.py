"""Progress lines for the engine build, model downloads and engine start-up (tiankong.progress)."""

from __future__ import annotations

import time
from pathlib import Path

from tiankong.progress import eta, run_with_percent, watching_bytes


def test_eta_says_share_elapsed_and_time_left() -> None:
    assert eta(50, 100, 60) == "50% · 1m00s elapsed · about 1m00s left"
    assert eta(0, 100, 5) == "0% · 5s elapsed"  # no estimate before anything is done
    assert eta(3, 0, 5) == "5s elapsed"


def test_a_build_logs_its_percentages_and_keeps_its_output() -> None:
    lines: list[str] = []
    script = "for p in 10 40 100; do echo \"[ $p%] Building CXX object x$p.o\"; done; echo linked; exit 3"
    done = run_with_percent(["bash", "-c", script], "building", lines.append, every_s=0)
    assert [line.split(":")[1].split("·")[0].strip() for line in lines] == ["10%", "40%", "100%"]
    assert "left" in lines[0] and done.returncode == 3 and "linked" in done.stdout


def test_a_download_logs_the_bytes_that_arrived(tmp_path: Path) -> None:
    lines: list[str] = []
    with watching_bytes(tmp_path, "downloading x", lines.append, total=4_000_000, every_s=0.05):
        (tmp_path / "part").write_bytes(b"\0" * 2_000_000)
        time.sleep(0.3)
    assert lines and "2 MB of 4 MB" in lines[-1] and "50%" in lines[-1]
