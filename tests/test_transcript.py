"""Episode transcripts show segment boundaries, authorship and the summary carried across a reset."""
import numpy as np

from composer_jax.data.tokenizer import Tokenizer
from composer_jax.harness import special_tokens as st
from composer_jax.rl import summarize
from composer_jax.rl.trajectory import Episode, Segment, Turn
from composer_jax.rl.transcript import carried_summary, format_episode, stream_blocks

TOK = Tokenizer.byte_level()
IDS = summarize.SpecialIds.from_tokenizer(TOK)


def segment(prompt: list[int], parts: list[tuple[str, str]], end: str) -> Segment:
    seg = Segment(prompt=prompt, prompt_experts=np.zeros((len(prompt), 0, 0), np.int32))
    for author, text in parts:
        ids = TOK.encode_with_specials(text)
        start = len(seg.tokens)
        seg.add(ids, np.zeros((len(ids), 0, 0), np.int32), logp=[0.0] * len(ids), policy=author != "env")
        if author != "env":
            seg.turns.append(Turn(author, start, len(seg.tokens), "tool_call"))
    seg.end_reason = end
    return seg


def test_two_segment_episode_renders_turns_and_the_carried_summary():
    base = TOK.encode_with_specials(f"{st.SYSTEM}tools{st.USER}fix the bug")
    body = TOK.encode("The key is K-1234. Next note: b.md")
    first = segment(base, [("action", 'read_file("a.md")'), ("env", f"{st.TOOL_RESULT}key K-1234"),
                           ("summary", "The key is K-1234. Next note: b.md")], "summary_reset")
    second = segment(summarize.reset_prompt(base, body, IDS), [("action", "submit()")], "submit")
    episode = Episode(index=3, task={}, task_id="t/1", segments=[first, second], reward=1.0,
                      end_reason="submit")

    assert carried_summary(first, TOK) is None
    assert carried_summary(second, TOK) == "The key is K-1234. Next note: b.md"
    assert [a for a, _ in stream_blocks(first, TOK)] == ["policy action", "env", "policy summary"]
    text = format_episode(episode, TOK)
    assert "segment 0:" in text and "segment 1:" in text and "ended by summary_reset" in text
    assert "[carried summary] The key is K-1234. Next note: b.md" in text
    assert "[policy action] submit()" in text and "reward=1.000" in text
    # Long blocks are elided in the middle, keeping both ends.
    short = format_episode(episode, TOK, max_chars=10)
    assert "chars ...]" in short and "[carried summary] The k" in short
