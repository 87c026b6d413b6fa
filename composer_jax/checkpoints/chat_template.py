"""Harness protocol tokens -> a pretrained model's chat template (ChatML for Qwen2.5)."""
from composer_jax.harness import special_tokens as st

# Qwen2.5's template: "<|im_start|>role\n content <|im_end|>\n"; tool calls in <tool_call> tags,
# tool results as a user turn wrapped in <tool_response>. EOS is what the instruct model emits
# to end its turn.
CHATML: dict[str, str] = {
    st.PAD: "<|endoftext|>",
    st.EOS: "<|im_end|>",
    st.SYSTEM: "<|im_start|>system\n",
    st.USER: "<|im_start|>user\n",
    st.ASSISTANT: "<|im_start|>assistant\n",
    st.TOOL_CALL_OPEN: "<tool_call>",
    st.TOOL_CALL_CLOSE: "</tool_call>",
    st.TOOL_RESULT: "<|im_start|>user\n<tool_response>\n",
    st.SUMMARY_OPEN: "<summary>",
    st.SUMMARY_CLOSE: "</summary>",
    st.END_OF_TURN: "<|im_end|>\n",
}

TEMPLATES = {"qwen2": CHATML}
