"""Human-readable episode transcripts: segment boundaries, who wrote what, and the summaries.

    print(format_episode(episode, tokenizer))

Each segment starts with a header (its index, prompt and stream lengths, why it ended). The
prompt of a later segment is the reset context, so its summary is shown as the carried memory;
in the stream, policy turns are fenced as `[policy action]` / `[policy summary]` and everything
else (tool results, harness tokens) is the environment's.
"""
from __future__ import annotations

from composer_jax.harness import special_tokens as st
from composer_jax.rl.trajectory import Episode, Segment


def _clip(text: str, max_chars: int) -> str:
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]} [... {len(text) - max_chars} chars ...] {text[-half:]}"


def carried_summary(segment: Segment, tokenizer) -> str | None:
    """The summary a reset put into this segment's prompt (None for the first segment)."""
    prompt = tokenizer.decode_harness(segment.prompt)
    if st.SUMMARY_OPEN not in prompt:
        return None
    body = prompt.rsplit(st.SUMMARY_OPEN, 1)[1]
    return body.split(st.SUMMARY_CLOSE, 1)[0].strip()


def stream_blocks(segment: Segment, tokenizer) -> list[tuple[str, str]]:
    """(author, text) blocks of a segment's stream in order: author is "env" or "policy <kind>"."""
    blocks, cursor = [], 0
    for turn in segment.turns:
        if turn.start > cursor:
            blocks.append(("env", tokenizer.decode_harness(segment.tokens[cursor:turn.start])))
        blocks.append((f"policy {turn.kind}", tokenizer.decode_harness(segment.tokens[turn.start:turn.end])))
        cursor = turn.end
    if cursor < len(segment.tokens):
        blocks.append(("env", tokenizer.decode_harness(segment.tokens[cursor:])))
    return blocks


def format_episode(episode: Episode, tokenizer, max_chars: int = 600) -> str:
    """The whole episode as text; blocks longer than max_chars are elided in the middle (0 = never)."""
    lines = [f"episode {episode.index} task={episode.task_id} reward={episode.reward:.3f} "
             f"end={episode.end_reason} segments={len(episode.segments)} "
             f"transcript_tokens={episode.transcript_tokens} flags={episode.flags or '-'}"]
    for i, seg in enumerate(episode.segments):
        lines.append(f"\n===== segment {i}: prompt {len(seg.prompt)} tokens, stream {len(seg.tokens)} "
                     f"tokens, {seg.policy_turns} policy turns, ended by {seg.end_reason} =====")
        summary = carried_summary(seg, tokenizer)
        if summary is None:
            lines.append("[prompt] " + _clip(tokenizer.decode_harness(seg.prompt), max_chars))
        else:
            lines.append("[carried summary] " + _clip(summary, max_chars))
        for author, text in stream_blocks(seg, tokenizer):
            lines.append(f"[{author}] " + _clip(text, max_chars))
    return "\n".join(lines)
