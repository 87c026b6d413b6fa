"""The harness's special tokens: reserved single ids in every tokenizer of this codebase.

The order is fixed: a trained tokenizer gives these the first ids (0..len-1) so that
`PAD_ID == 0` and configs can rely on it.
"""

PAD = "<|pad|>"
EOS = "<|eos|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL_CALL_OPEN = "<|tool_call|>"
TOOL_CALL_CLOSE = "<|/tool_call|>"
TOOL_RESULT = "<|tool_result|>"
SUMMARY_OPEN = "<|summary|>"
SUMMARY_CLOSE = "<|/summary|>"
END_OF_TURN = "<|end_of_turn|>"

SPECIAL_TOKENS: tuple[str, ...] = (
    PAD,
    EOS,
    SYSTEM,
    USER,
    ASSISTANT,
    TOOL_CALL_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_RESULT,
    SUMMARY_OPEN,
    SUMMARY_CLOSE,
    END_OF_TURN,
)
