"""The embedding part as a decider's feature source (issue 39 item 4): `probe-part` is scored by tune without a chat
engine, registered, and answers classify through the part alone. Real part engine (all-minilm-l6-v2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tiankong.deciders.registry import load_decider, save_decider
from tiankong.deciders.runtime import engine_needs
from tiankong.engine.parts import stop_parts
from tiankong.models.catalog import DECIDER_EMBEDDING_MODEL, MULTILINGUAL_EMBEDDING_MODEL
from tiankong.structured.drivers import run_sync
from tiankong.tasks.classify import decide_flow
from tiankong.tuning import load_examples, tune
from tiankong.tuning.data import check_examples

DATA = Path(__file__).parents[1] / "data" / "tickets-labelled.jsonl"  # the 36 shipped tickets, 12 per label


@pytest.fixture(scope="module", autouse=True)
def parts_stopped() -> Iterator[None]:
    yield
    stop_parts()


def no_engine(*_: object) -> object:
    raise AssertionError("a probe-part decider must not ask the chat engine")


def test_probe_part_is_tuned_without_a_chat_engine_and_answers_through_the_part() -> None:
    report = tune(load_examples(DATA), name="tickets-part", methods_wanted=["tfidf", "probe-part"], run=None)
    full = {r.method: r for r in report.best_rows()}
    assert set(full) == {"tfidf", "probe-part"} and full["probe-part"].engine_passes == 0
    assert report.decider is not None and "one-standard-error" in report.rule
    only = tune(load_examples(DATA), name="tickets-part", methods_wanted=["probe-part"], run=None)
    assert only.decider is not None and only.chosen == "probe-part"
    save_decider(only.decider)
    decider = load_decider("tickets-part")
    assert decider.method == "probe-part" and len(decider.state["linear"]["coef"][0]) == 384
    assert decider.state["part"] == DECIDER_EMBEDDING_MODEL  # recorded: classify reads with the part it was fitted on
    assert not engine_needs(decider).engine
    answer = run_sync(decide_flow(decider, "I was charged twice for one order, please refund me"), no_engine)
    assert answer.label == "billing" and set(answer.scores) == {"billing", "bug", "account"}
    assert sum(answer.scores.values()) == pytest.approx(1.0, abs=2e-6)  # each rounded to 6 decimals


ZH_BILLING = ["我的信用卡被扣了两次款，请退还多收的费用。", "发票上的金额和实际支付的不一致。",
              "取消订阅后仍然被收费了。", "请问退款什么时候能到账？", "这个月的账单比平时多了一百元。",
              "优惠券没有抵扣，付了全价。", "自动续费没有提前通知就扣款了。", "我想申请开具增值税发票。",
              "会员费为什么涨价了？", "付款成功了但订单显示未支付。"]
ZH_BUG = ["应用一打开就闪退，重装也没用。", "点击保存按钮后页面一直转圈。", "上传图片时提示未知错误。",
          "登录后首页显示空白。", "搜索功能返回的结果完全不对。", "导出表格时文件是损坏的。",
          "夜间模式下文字看不清，颜色有问题。", "通知推送重复发送了三次。",
          "视频播放到一半就卡住不动了。", "更新版本后无法连接网络。"]


def test_chinese_examples_are_read_by_the_multilingual_part_and_the_decider_keeps_it() -> None:
    """probe-part on Chinese text (the English-only MiniLM would read noise there): tune reads the examples with
    multilingual-e5-small, records it, and classify reads new text with the same part."""
    examples = check_examples([{"text": t, "label": "billing"} for t in ZH_BILLING] +
                              [{"text": t, "label": "bug"} for t in ZH_BUG])
    report = tune(examples, name="zh-tickets-part", methods_wanted=["probe-part"], run=None)
    assert report.decider is not None and report.chosen == "probe-part"
    assert report.decider.state["part"] == MULTILINGUAL_EMBEDDING_MODEL
    save_decider(report.decider)
    decider = load_decider("zh-tickets-part")
    assert len(decider.state["linear"]["coef"][0]) == 384 and not engine_needs(decider).engine
    billing = run_sync(decide_flow(decider, "为什么我的账户被重复扣费？请把钱退给我。"), no_engine)
    bug = run_sync(decide_flow(decider, "打开设置页面时程序崩溃了。"), no_engine)
    assert (billing.label, bug.label) == ("billing", "bug"), (billing.scores, bug.scores)
