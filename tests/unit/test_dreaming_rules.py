"""Dreaming's pure rules: which part of a daily log is new, the input budget, the model's
answer, and the section appended to MEMORY.md."""

from __future__ import annotations

from datetime import date

import pytest

from engram.domain.dreaming import (
    NOTHING_TO_PROMOTE,
    Excerpted,
    LogExcerpt,
    LogMark,
    UnusableAnswer,
    Watermark,
    advanced_marks,
    already_dreamed,
    dream_key,
    dream_logs,
    dreamed_section,
    memory_excerpt,
    parse_prompt_template,
    promoted_text,
    render_prompt,
    take_excerpt,
    text_sha256,
)
from engram.maintenance.chat import api_base
from engram.maintenance.dreaming import load_prompt

pytestmark = pytest.mark.unit

LOG = "# Daily Log - 2026-12-01\n\n[09:00:00] chose Postgres\n[10:00:00] Ann prefers tea\n"


def parts(taken: Excerpted) -> tuple[LogExcerpt | None, LogMark | None, bool]:
    return taken.excerpt, taken.mark, taken.complete


def mark_of(content: str) -> LogMark:
    return LogMark(length=len(content), sha256=text_sha256(content))


def test_daily_logs_are_taken_oldest_day_first_and_nothing_else() -> None:
    paths = [
        "daily/2026-12-02.md",
        "MEMORY.md",
        "daily/2026-12-01-cli.md",
        "daily/2026-12-01.md",
        "daily/notes.md",
        "archive/daily/2026-01-01.md",
        "daily/2026-13-01.md",
    ]
    assert dream_logs(paths) == [
        "daily/2026-12-01.md",
        "daily/2026-12-01-cli.md",
        "daily/2026-12-02.md",
    ]


def test_a_log_never_sent_is_sent_whole_and_marked_to_its_end() -> None:
    taken = take_excerpt("daily/2026-12-01.md", LOG, None, 10_000)
    assert taken == Excerpted(LogExcerpt("daily/2026-12-01.md", 0, LOG), mark_of(LOG), True)


def test_only_the_appended_tail_is_sent_after_a_mark() -> None:
    grown = LOG + "[11:00:00] deploys on Fridays are banned\n"
    excerpt, mark, complete = parts(
        take_excerpt("daily/2026-12-01.md", grown, mark_of(LOG), 10_000)
    )
    assert excerpt is not None and complete
    assert excerpt.text == "[11:00:00] deploys on Fridays are banned\n"
    assert excerpt.start == len(LOG) and not excerpt.rewritten
    assert mark == mark_of(grown)


def test_a_log_with_nothing_new_sends_nothing_and_keeps_its_mark() -> None:
    assert take_excerpt("daily/x.md", LOG, mark_of(LOG), 10_000) == Excerpted(
        None, mark_of(LOG), complete=True
    )


def test_a_rewritten_log_is_sent_again_from_its_start() -> None:
    edited = LOG.replace("Postgres", "MySQL")
    excerpt, mark, _ = parts(take_excerpt("daily/2026-12-01.md", edited, mark_of(LOG), 10_000))
    assert excerpt is not None and excerpt.rewritten and excerpt.text == edited
    assert mark == mark_of(edited)
    shortened = LOG[:20]
    excerpt = take_excerpt("daily/2026-12-01.md", shortened, mark_of(LOG), 10_000).excerpt
    assert excerpt is not None and excerpt.rewritten and excerpt.text == shortened


def test_a_tail_over_the_budget_is_cut_at_a_line_end_and_the_rest_sent_next_time() -> None:
    budget = len("# Daily Log - 2026-12-01\n\n[09:00:00] chose Postgres\n") + 5
    first, mark, complete = parts(take_excerpt("daily/d.md", LOG, None, budget))
    assert first is not None and first.text.endswith("Postgres\n") and not complete
    second, final, complete = parts(take_excerpt("daily/d.md", LOG, mark, 10_000))
    assert second is not None and first.text + second.text == LOG, "nothing skipped or repeated"
    assert final == mark_of(LOG) and complete


def test_a_single_line_longer_than_the_budget_is_cut_at_the_budget() -> None:
    line = "x" * 100
    excerpt, mark, complete = parts(take_excerpt("daily/d.md", line, None, 30))
    assert excerpt is not None and excerpt.text == "x" * 30 and not complete
    assert mark == mark_of("x" * 30)
    assert take_excerpt("daily/d.md", line, None, 0) == Excerpted(None, None, complete=False)
    later = take_excerpt("daily/d.md", line, None, 30, split_line=False)
    assert later == Excerpted(None, None, complete=False), "waits for a whole budget"


def test_the_key_names_the_input_exactly() -> None:
    one = [LogExcerpt("daily/a.md", 0, "hello\n")]
    assert dream_key(one) == dream_key(list(one))
    assert dream_key(one) != dream_key([LogExcerpt("daily/a.md", 1, "hello\n")])
    assert dream_key(one) != dream_key([LogExcerpt("daily/b.md", 0, "hello\n")])
    assert dream_key(one) != dream_key([LogExcerpt("daily/a.md", 0, "hello!\n")])


def test_nothing_to_promote_is_recognised_literally() -> None:
    for answer in (NOTHING_TO_PROMOTE, f"  {NOTHING_TO_PROMOTE}\n", f"`{NOTHING_TO_PROMOTE}`"):
        assert promoted_text(answer, finish_reason="stop", max_chars=100) is None
    assert promoted_text("- Ann prefers tea", finish_reason="stop", max_chars=100) == (
        "- Ann prefers tea"
    )


def test_unusable_answers_are_refused() -> None:
    with pytest.raises(UnusableAnswer, match="token limit"):
        promoted_text("- half a fa", finish_reason="length", max_chars=100)
    with pytest.raises(UnusableAnswer, match="answered nothing"):
        promoted_text("  \n", finish_reason="stop", max_chars=100)
    with pytest.raises(UnusableAnswer, match="at most 10"):
        promoted_text("- " + "y" * 20, finish_reason="stop", max_chars=10)


def test_headings_in_the_answer_nest_under_the_dreamed_section() -> None:
    answer = "# People\n- Ann prefers tea\n## Systems\n- Postgres\n### Kept\n#hashtag"
    assert promoted_text(answer, finish_reason="stop", max_chars=1000) == (
        "### People\n- Ann prefers tea\n### Systems\n- Postgres\n### Kept\n#hashtag"
    )


def test_the_section_starts_on_its_own_paragraph_and_carries_its_marker() -> None:
    day = date(2026, 12, 1)
    section = dreamed_section(
        "# Memory\n- old", today=day, key="k1", version="dream-v1", facts="- new"
    )
    assert section == "\n\n## Dreamed 2026-12-01\n<!-- engram-dream dream-v1 k1 -->\n\n- new\n"
    assert dreamed_section("", today=day, key="k", version="v", facts="- a").startswith("## ")
    assert dreamed_section("x\n", today=day, key="k", version="v", facts="- a").startswith("\n## ")
    assert dreamed_section("x\n\n", today=day, key="k", version="v", facts="- a").startswith("## ")
    assert already_dreamed("# Memory\n- old" + section, "k1", "dream-v1")
    assert not already_dreamed("# Memory\n- old" + section, "k2", "dream-v1")


def test_marks_of_logs_gone_are_dropped_and_sent_ones_replaced() -> None:
    old = Watermark(
        generation=3,
        logs={
            "daily/a.md": LogMark(1, "a"),
            "daily/b.md": LogMark(2, "b"),
            "daily/c.md": LogMark(3, "c"),
        },
    )
    marks = advanced_marks(old, ["daily/a.md", "daily/b.md"], {"daily/b.md": LogMark(9, "B")})
    assert marks == {"daily/a.md": LogMark(1, "a"), "daily/b.md": LogMark(9, "B")}


def test_the_packaged_prompt_renders_memory_and_logs_and_names_the_literal() -> None:
    template = load_prompt()
    assert template.version == "dream-v1"
    system, user = render_prompt(
        template,
        memory="# Memory\n- Ann prefers tea",
        excerpts=[LogExcerpt("daily/2026-12-01.md", 40, "[11:00:00] chose Postgres\n")],
        today=date(2026, 12, 2),
        max_memory_chars=1000,
    )
    assert NOTHING_TO_PROMOTE in system and NOTHING_TO_PROMOTE in user
    assert "- Ann prefers tea" in user and "[11:00:00] chose Postgres" in user
    assert "daily/2026-12-01.md (continued at 40)" in user and "2026-12-02" in user
    assert not any(f"${name}" in system + user for name in ("memory", "logs", "today", "nothing"))


def test_a_template_without_its_parts_is_refused() -> None:
    with pytest.raises(ValueError, match="system"):
        parse_prompt_template("dream-x", "just text $memory $logs")
    with pytest.raises(ValueError, match=r"\$memory and \$logs"):
        parse_prompt_template("dream-x", "<!-- system -->\nS\n<!-- user -->\n$logs")


def test_the_chat_base_url_may_name_v1_or_not() -> None:
    assert api_base("http://127.0.0.1:11434") == "http://127.0.0.1:11434/v1"
    assert api_base("https://api.openai.com/v1/") == "https://api.openai.com/v1"
    assert api_base("http://gw/llm/") == "http://gw/llm/v1"


def test_a_long_memory_is_sent_from_its_newest_lines() -> None:
    memory = "# Memory\n" + "".join(f"- fact {i}\n" for i in range(100))
    assert memory_excerpt(memory, 10_000) == memory.strip()
    sent = memory_excerpt(memory, 40)
    assert sent.endswith("- fact 99") and "- fact 0\n" not in sent
    note, rest = sent.split("\n", 1)
    assert rest.startswith("- fact") and len(rest) <= 40
    assert note == f"(the first {len(memory.strip()) - len(rest)} characters are left out)"
    assert memory_excerpt("  \n", 10) == "(MEMORY.md is empty)"
