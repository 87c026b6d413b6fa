"""The coding harness: turn protocol, tool-call format and the tools themselves."""
from composer_jax.harness.protocol import (
    SUMMARIZE_INSTRUCTION,
    Message,
    ToolCall,
    ToolCallError,
    encode_conversation,
    encode_message,
    extract_summary,
    format_tool_call,
    parse_tool_call,
    render_conversation,
    render_message,
    summary_text,
)
from composer_jax.harness.tool_specs import TOOL_SPECS, system_prompt

__all__ = [
    "SUMMARIZE_INSTRUCTION",
    "TOOL_SPECS",
    "Message",
    "ToolCall",
    "ToolCallError",
    "encode_conversation",
    "encode_message",
    "extract_summary",
    "format_tool_call",
    "parse_tool_call",
    "render_conversation",
    "render_message",
    "summary_text",
    "system_prompt",
]
