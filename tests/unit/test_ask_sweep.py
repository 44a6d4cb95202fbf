"""What a sweep of ``ask`` found (2026-12-08): ``--yes-no`` numbered its questions on from the file's count, so
its id could be one the file gave ("the id 'q2' is used twice", an id the user never wrote)."""

from __future__ import annotations

from tiankong.tasks.cli_part import yes_no_questions


def test_yes_no_ids_skip_the_ones_the_file_uses() -> None:
    given = [{"id": "q2", "type": "yes_no", "question": "Is it a greeting?"}]
    made = yes_no_questions(["Is it rude?", "Is it short?"], given)
    assert [q["id"] for q in made] == ["q2", "q1", "q3"]
    four = [{"id": f"q{i}", "type": "yes_no", "question": "?"} for i in range(1, 5)]
    assert [q["id"] for q in yes_no_questions(["x"], four)][-1] == "q5"
    assert [q["id"] for q in yes_no_questions(["a", "b"], None)] == ["q1", "q2"]
