"""Next-token logits of our import of the Qwen2.5-Coder-0.5B GGUF vs transformers' loading of the
same file (both dequantise to float32), on a few code prompts; also compares tokenizations.

  python benchmarks/qwen_parity.py --out benchmarks/results/qwen_parity.json
Needs `pip install -e .[dev,qwen]` and the setup step (composer_jax.checkpoints.qwen_setup).
"""
from __future__ import annotations

import argparse
import time

import jax.numpy as jnp
import numpy as np
import torch
import transformers

from benchmarks.common import write_result
from composer_jax.checkpoints.qwen_setup import DEFAULT_CACHE, NAME, setup
from composer_jax.checkpoints.store import load_imported

PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "import numpy as np\n\ndef softmax(x):\n",
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    ours = load_imported(setup())
    model = ours.model
    gguf_path = DEFAULT_CACHE / f"{NAME}.gguf"
    start = time.perf_counter()
    hf = transformers.AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                           dtype=torch.float32).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    hf_load_s = time.perf_counter() - start
    rows = []
    for prompt in PROMPTS:
        ids = ours.tokenizer.encode_with_specials(prompt)
        same_tokens = ids == hf_tok.encode(prompt, add_special_tokens=False)
        with torch.no_grad():
            want = hf(torch.tensor([ids])).logits.numpy()[0, -1]
        got = np.asarray(model(jnp.asarray([ids]))[0])[0, -1]
        rows.append(dict(n_tokens=len(ids), same_tokens=same_tokens,
                         max_abs_logit_diff=float(np.max(np.abs(got - want))),
                         logit_range=float(want.max() - want.min()),
                         same_argmax=bool(got.argmax() == want.argmax()),
                         next_token=ours.tokenizer.decode([int(got.argmax())])))
    write_result(args.out, dict(
        prompts=rows, max_abs_logit_diff=max(r["max_abs_logit_diff"] for r in rows),
        all_tokens_equal=all(r["same_tokens"] for r in rows), all_argmax_equal=all(r["same_argmax"] for r in rows),
        transformers_gguf_load_s=hf_load_s))


if __name__ == "__main__":
    main()
