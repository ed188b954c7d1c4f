"""Where the plan of a long chat's prompt starts, so that it needs only the chat's newest turns (issue 46). No Qt.

context_plan.plan_prompt leaves old turns out in blocks counted from the first turn it is given, so that the
prompt's start stays put while the chat grows. Counting from the chat's very first message would need every turn
of a 150,000-message chat, read and counted, for every reply and every keystroke of the meter. The open chat
(OpenChat.plan) gives it the chat from an anchor instead: the last multiple of ANCHOR_STRIDE turns at or before the
newest turns that fill the window. Everything before the anchor is left out whatever happens (it does not fit);
the anchor depends only on the newest turns, so a chat opened with only its end held plans exactly as with every
message held; and it moves once every ANCHOR_STRIDE turns, so the prompt's start still moves in blocks, not at
every turn. A chat whose turns fit the window has its anchor at 0: its first message, as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable

from .context_plan import MESSAGE_OVERHEAD, PromptPlan

ANCHOR_STRIDE = 256  # turns between two places the plan of a long chat may start counting its blocks from


def first_planned(newest_first: Iterable[str], turns: int, count: Callable[[str], int], window: int,
                  earlier: int = 0, stride: int = ANCHOR_STRIDE) -> int | None:
    """The index, counted from the chat's first message, of the turn the plan is given first (its anchor).

    `newest_first`: the texts of the chat's `turns` held turns before the question, newest first; `earlier`: how
    many turns come before them, not held; `count`: the model's token counter; `window`: its context window. The
    anchor is the last multiple of `stride` at or before the newest turn that no longer fits the window behind the
    question (each turn counted with its MESSAGE_OVERHEAD), or 0 when the whole chat fits. None when the held turns
    do not reach back to it: more must be read first. Walks only the turns that fill the window."""
    behind = 0
    for back, text in enumerate(newest_first):
        behind += count(text) + MESSAGE_OVERHEAD
        if behind > window:
            anchor = (earlier + turns - 1 - back) // stride * stride
            return anchor if anchor >= earlier else None
    return 0 if earlier == 0 else None


def shifted(plan: PromptPlan, before: int) -> PromptPlan:
    """The plan of a chat's turns from its anchor, as the plan of the whole chat: the `before` turns before the
    anchor are counted among those left out (the meter's warning and the reply's note say so)."""
    if not before:
        return plan
    return replace(plan, left_out=plan.left_out + before,
                   meter=replace(plan.meter, left_out_messages=plan.meter.left_out_messages + before))
