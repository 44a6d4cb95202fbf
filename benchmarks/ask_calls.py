"""ask: where one more question's time goes — per call, the engine's own prompt timings (issue 22).

Three ACL abstracts (as ``ask_speed.py``), the eight yes/no questions asked one after another on slot 0 with the
prompt cache on, each call timed here and by llama-server (``timings.prompt_n`` / ``prompt_ms``); once with
``top_k`` 0 (what ``choose_flow`` sends: the whole vocabulary sorted for the post-sampling probabilities) and once
with ``top_k`` 4 (only the biased tokens kept).

    .venv/bin/python benchmarks/ask_calls.py > benchmarks/results/tasks/ask-calls-DATE.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
from ask_speed import QUESTIONS, excerpt  # noqa: E402

from tiankong.engine import EngineConfig, EngineProcess  # noqa: E402
from tiankong.models import DEFAULT_MODEL, model_path  # noqa: E402
from tiankong.tasks.ask import Question, question_messages  # noqa: E402


def main() -> None:
    texts = [excerpt(d["sentences"]) for d in datasets.aclsum_documents("test", limit=3)]
    config = EngineConfig(model=model_path(DEFAULT_MODEL), ctx=4096 * 2, slots=2)
    with EngineProcess(config) as engine, httpx.Client(base_url=engine.url, timeout=60) as http:
        yes, no = (http.post("/tokenize", json={"content": w, "add_special": False}).json()["tokens"][0]
                   for w in ("yes", "no"))
        for top_k in (0, 4):
            for ti, text in enumerate(texts):
                text = f"Doc {ti}-{top_k}.\n{text}"
                for qi, q in enumerate(QUESTIONS):
                    started = time.perf_counter()
                    prompt = http.post("/apply-template", json={
                        "messages": question_messages(text, Question(str(qi), "yes_no", q))}).json()["prompt"]
                    templated = time.perf_counter()
                    answer = http.post("/completion", json={
                        "prompt": [prompt], "n_predict": 1, "n_probs": 4, "temperature": 1.0, "top_k": top_k,
                        "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": True, "seed": 42,
                        "id_slot": 0, "logit_bias": [[yes, 100.0], [no, 100.0]]}).json()
                    done = time.perf_counter()
                    t = answer.get("timings", {})
                    print(f"top_k={top_k} text {ti} q{qi}: template {1000 * (templated - started):5.1f} ms, "
                          f"completion {1000 * (done - templated):6.1f} ms, engine prompt_n {t.get('prompt_n')} "
                          f"prompt_ms {t.get('prompt_ms', 0):6.1f}", flush=True)


if __name__ == "__main__":
    main()
