"""GGUF import: a tiny Qwen2 written as GGUF (F32 + Q8_0 tensors, GPT-2 BPE tokenizer metadata)
imports to transformers' logits and tokenization; bad files fail with one clear error each."""
import hashlib

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

import tokenizers  # noqa: E402
from tokenizers import decoders, models, pre_tokenizers, trainers  # noqa: E402

from composer_jax.checkpoints.hf_import import import_gguf  # noqa: E402
from composer_jax.checkpoints.qwen_setup import assemble, main as qwen_setup_main  # noqa: E402
from composer_jax.errors import ConfigError  # noqa: E402
from composer_jax.harness import special_tokens as st  # noqa: E402
from composer_jax.harness.protocol import Message, render_conversation  # noqa: E402

Q = gguf.GGMLQuantizationType
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
VOCAB = 320
TEXT = "def add(a, b):\n    return a + b  # sum\n\nprint(add(1, 22))\n" * 4


def bpe_vocab():
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    import json
    model = json.loads(tok.to_str())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
              "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_name(hf_name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_NAMES[rest]}"


def write_tiny_gguf(path, arch="qwen2", matrix_type=Q.Q8_0, extra_tokens=0):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                                   tie_word_embeddings=False, max_position_embeddings=64, rms_norm_eps=1e-6)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    tokens, merges = bpe_vocab()
    tokens = tokens + [f"[PAD{i}]" for i in range(len(tokens), VOCAB + extra_tokens)]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(2), w.add_context_length(64), w.add_embedding_length(64)
    w.add_feed_forward_length(96), w.add_head_count(4), w.add_head_count_kv(2)
    w.add_rope_freq_base(1e6), w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens), w.add_token_types(types), w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index("<|im_end|>")), w.add_bos_token_id(tokens.index("<|endoftext|>"))
    for name, tensor in model.state_dict().items():
        arr = tensor.numpy().astype(np.float32)
        if arr.ndim == 2 and "embed" not in name:  # matrices quantised, like a real file
            w.add_tensor(gguf_name(name), gguf.quants.quantize(arr, matrix_type),
                         raw_dtype=matrix_type)
        else:
            w.add_tensor(gguf_name(name), arr)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def test_gguf_logits_and_tokenizer_match_transformers(tiny_gguf):
    imported = import_gguf(tiny_gguf)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name,
                                                           dtype=torch.float32).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    text = "def add(x, y):\n    return x+y  # ünïcode\n\tprint(add(3, 41))"
    ids = imported.tokenizer.encode(text)
    assert ids == hf_tok.encode(text, add_special_tokens=False)
    assert imported.tokenizer.decode(ids) == text
    with torch.no_grad():
        hf_logits = hf(torch.tensor([ids])).logits.numpy()
    ours, _ = imported.model(jnp.asarray([ids]))
    np.testing.assert_allclose(np.asarray(ours), hf_logits, atol=1e-4, rtol=0)


def test_harness_turns_render_in_the_chatml_template(tiny_gguf):
    tok = import_gguf(tiny_gguf).tokenizer
    text = render_conversation([Message("user", "hi")], add_generation_prompt=True)
    assert tok.decode(tok.encode_with_specials(text)) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode([tok.eos_id]) == "<|im_end|>"
    assert tok.decode([tok.token_to_id(st.TOOL_CALL_OPEN)]) == "<tool_call>"
    with pytest.raises(KeyError, match="multi-token text"):
        tok.token_to_id(st.USER)


def test_truncated_or_altered_gguf_is_a_clear_error(tiny_gguf, tmp_path):
    data = tiny_gguf.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-200])
    with pytest.raises(ConfigError, match="not a complete GGUF file .*truncated or corrupted"):
        import_gguf(tmp_path / "cut.gguf")
    (tmp_path / "bad.gguf").write_bytes(b"GGXX" + data[4:])
    with pytest.raises(ConfigError, match="not a complete GGUF file .*magic"):
        import_gguf(tmp_path / "bad.gguf")
    expected = hashlib.sha256(data).hexdigest()
    (tmp_path / "p1").write_bytes(data[:1000])
    (tmp_path / "p2").write_bytes(data[1000:-1] + b"\x00")  # one altered byte
    with pytest.raises(ConfigError, match=f"expected {len(data)} bytes with sha256 {expected}, got"):
        assemble([tmp_path / "p1", tmp_path / "p2"], tmp_path / "out.gguf", expected, len(data))
    assert not (tmp_path / "out.gguf").exists()


def test_qwen_setup_from_a_gguf_file_checks_it_first(tiny_gguf, tmp_path, capsys):
    """`--gguf FILE` (a machine without the wheels): a missing file or any other GGUF than the
    pinned Qwen one is refused with a clear error, and nothing is left in the cache."""
    cache = tmp_path / "cache"
    assert qwen_setup_main(["--cache", str(cache), "--gguf", str(tmp_path / "nope.gguf")]) == 2
    assert "nope.gguf: no such file" in capsys.readouterr().err
    assert qwen_setup_main(["--cache", str(cache), "--gguf", str(tiny_gguf)]) == 2
    assert "assembled GGUF does not match" in capsys.readouterr().err
    assert not any(cache.rglob("*.gguf*")) and not any(cache.rglob("model.json"))


def test_unsupported_architecture_quantisation_and_tokenizer_size(tmp_path):
    write_tiny_gguf(tmp_path / "llama.gguf", arch="llama")
    with pytest.raises(ConfigError, match="architecture 'llama' is not supported.*qwen2"):
        import_gguf(tmp_path / "llama.gguf")
    write_tiny_gguf(tmp_path / "q4.gguf", matrix_type=Q.Q4_0)
    with pytest.raises(ConfigError, match="quantisation type Q4_0; supported: F32"):
        import_gguf(tmp_path / "q4.gguf")
    write_tiny_gguf(tmp_path / "vocab.gguf", extra_tokens=5)
    with pytest.raises(ConfigError, match=f"tokenizer has {VOCAB + 5} tokens .* expected at most {VOCAB}"):
        import_gguf(tmp_path / "vocab.gguf")


def test_imported_model_drives_the_agent_loop(tiny_gguf, tmp_path):
    """rl.init_from and rl.tokenizer pointing at an imported checkpoint: the run starts from its
    weights, and the harness speaks its chat template, so the expert's tool calls (teacher-forced
    through the model) reach the environment and solve the task."""
    import dataclasses

    import jax
    import ml_collections
    from flax import nnx

    from composer_jax.checkpoints.store import save_imported
    from composer_jax.config_loading import load_config
    from composer_jax.rl.train import build, demo_policy, task_ids

    imported = import_gguf(tiny_gguf)
    save_imported(tmp_path / "ckpt", imported)
    c = load_config("configs/tiny.py:test")
    c.model = ml_collections.ConfigDict(dict(dataclasses.asdict(imported.cfg), max_seq_len=2048))
    c.rl.update(tokenizer=str(tmp_path / "ckpt" / "tokenizer.json"), env_id="composer/BugFix-v0",
                system_prompt="Tools: read_file, edit_file, submit.")  # few merges: keep the prompt short
    c.rl.suite_options = dict(max_bugs=1, hint_line=True)
    c.rollout.update(window=2048, turn_budget=512, summary_budget=64, slots=8, prefill_buckets=(256, 1024))
    run = build(c, c.rl.optim, init_from=str(tmp_path / "ckpt"), make_policy=demo_policy(c.rl))
    assert run.tokenizer.special_text["<|assistant|>"] == "<|im_start|>assistant\n"
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 nnx.to_pure_dict(run.engine.params), nnx.to_pure_dict(imported.state))
    (ep,) = run.loop.run([{"options": {"task_id": task_ids(c.rl, "validation")[0]}}])
    run.loop.close()
    assert ep.reward == 1.0 and ep.end_reason == "submit", (ep.flags, ep.info)
    text = run.tokenizer.decode(ep.segments[0].all_tokens)
    assert text.startswith("<|im_start|>system\n") and "<|im_start|>assistant\n<tool_call>" in text
    with pytest.raises(ConfigError, match="different model than config.model"):
        c.model.d_model = 32
        build(c, c.rl.optim, init_from=str(tmp_path / "ckpt"))


def test_stop_token_probe_scores_every_trained_token_with_the_model(tiny_gguf, tmp_path):
    """benchmarks/stop_token_probe: each trained token of the demonstrations counted once, under its
    control id or 'other', with the probability the imported model's own forward gives it."""
    import dataclasses

    import jax
    import ml_collections

    from benchmarks.stop_token_probe import demo_sequences, probe
    from composer_jax.checkpoints.store import save_imported
    from composer_jax.config_loading import load_config

    imported = import_gguf(tiny_gguf)
    save_imported(tmp_path / "ckpt", imported)
    c = load_config("configs/tiny.py:test")
    c.model = ml_collections.ConfigDict(dict(dataclasses.asdict(imported.cfg), max_seq_len=2048))
    c.rl.update(tokenizer=str(tmp_path / "ckpt" / "tokenizer.json"), env_id="composer/BugFix-v0",
                system_prompt="Tools: read_file, edit_file, submit.")
    c.rl.suite_options = dict(max_bugs=1, hint_line=True)
    c.rollout.update(window=2048, turn_budget=512, summary_budget=64, slots=8, prefill_buckets=(256, 1024))
    seqs, tok = demo_sequences(c, 2)
    control = {"tool_call_open": tok.token_to_id(st.TOOL_CALL_OPEN),
               "tool_call_close": tok.token_to_id(st.TOOL_CALL_CLOSE)}
    out = probe(c, str(tmp_path / "ckpt"), seqs, control)
    expected: dict[str, list[float]] = {"tool_call_open": [], "tool_call_close": [], "other": []}
    for s in seqs:
        tokens = np.asarray(s.tokens)
        logp = np.asarray(jax.nn.log_softmax(imported.model(jnp.asarray(tokens[None]))[0][0], axis=-1))
        for i in np.flatnonzero(np.asarray(s.loss_mask)[1:] > 0) + 1:
            name = next((k for k, v in control.items() if v == tokens[i]), "other")
            expected[name].append(float(np.exp(logp[i - 1, tokens[i]])))
    assert len(expected["tool_call_open"]) >= 2 and len(expected["tool_call_close"]) >= 2  # one per turn
    for name, probs in expected.items():
        assert out[name]["tokens"] == len(probs)
        np.testing.assert_allclose(out[name]["mean_p"], np.mean(probs), rtol=1e-4)


@pytest.mark.slow
def test_experiment_runs_sft_and_rl_from_an_imported_base(tiny_gguf, tmp_path):
    """The GPU recipe for a pretrained base (`experiments.run --config configs/qwen_coder_0p5b.py:bugfix`)
    end to end at toy size: SFT from the imported weights on expert demonstrations in the model's
    template, RL, and the paired evaluation of base, SFT and RL policies, all through the imported
    tokenizer."""
    import dataclasses
    import json

    import ml_collections

    from composer_jax.checkpoints.store import save_imported
    from composer_jax.config_loading import load_config
    from composer_jax.experiments.run import run_experiment

    imported = import_gguf(tiny_gguf)
    save_imported(tmp_path / "ckpt", imported)
    c = load_config("configs/qwen_coder_0p5b.py:bugfix")  # the recipe, at toy size below
    c.model = ml_collections.ConfigDict(dict(dataclasses.asdict(imported.cfg), max_seq_len=2048))
    c.rl.update(tokenizer=str(tmp_path / "ckpt" / "tokenizer.json"), init_from=str(tmp_path / "ckpt"),
                system_prompt="Tools: read_file, edit_file, submit.", steps=1, groups_per_step=1, group_size=8,
                max_sampling_rounds=1, row_len=2048, minibatch_rows=8, eval_tasks=2, env_max_turns=4)
    c.rl.optim.steps = 1
    c.sft.update(demos=4, batch_rows=2, init_from=str(tmp_path / "ckpt"))
    c.sft.optim.update(steps=2, warmup_steps=1)
    c.rollout.update(window=2048, turn_budget=256, summary_budget=16, max_segments=1, summarize_at=1.0,
                     slots=8, max_turns=4, prefill_buckets=(256, 1024))
    c.experiment.policies.base.checkpoint = str(tmp_path / "ckpt")
    c.experiment.evaluations.validation.tasks = 2
    out = tmp_path / "result.json"
    record = run_experiment(c, tmp_path / "work", str(out), ["test"])
    assert json.loads(out.read_text())["paired"] == record["paired"]
    assert record["training"]["sft"]["init_from"] == str(tmp_path / "ckpt")
    assert record["training"]["sft"]["demo_pass_rate"] == 1.0 and record["training"]["sft"]["sequences"] == 4
    assert record["training"]["rl"]["steps"] == 1
    policies = record["evaluations"]["validation"]["policies"]
    assert set(policies) == {"base", "sft", "rl"} and all(len(p["passed"]) == 2 for p in policies.values())
    assert set(record["paired"]["validation"]) == {"rl_vs_sft", "sft_vs_base"}
    assert not (tmp_path / "work" / "tokenizer.json").exists()  # the imported tokenizer, not a new one


@pytest.mark.slow
def test_horizon_recipe_runs_on_an_imported_base(tiny_gguf, tmp_path):
    """The long-horizon curve's GPU recipe for a pretrained base (`experiments.run --config
    configs/rl_horizon.py:qwen`) end to end at toy size: SFT with self-summaries in the model's
    template, the trained arm, then the trained, SFT, no-summary and harness-compaction policies on
    the same held-out tiers, recorded in the horizon schema, all through the imported tokenizer."""
    import dataclasses
    import json

    import ml_collections

    from composer_jax.checkpoints.store import save_imported
    from composer_jax.config_loading import load_config
    from composer_jax.experiments.run import run_experiment

    imported = import_gguf(tiny_gguf)
    save_imported(tmp_path / "ckpt", imported)
    c = load_config("configs/rl_horizon.py:qwen")  # the recipe, at toy size below
    assert (c.rollout.window, c.rl.init_from, c.sft.init_from) == (4096, c.rl.tokenizer.rsplit("/", 1)[0],
                                                                   c.rl.tokenizer.rsplit("/", 1)[0])
    assert sorted(c.experiment.policies) == ["harness", "none", "sft", "trained"]
    assert c.experiment.policies.harness.rollout.compaction == "harness"
    c.model = ml_collections.ConfigDict(dict(dataclasses.asdict(imported.cfg), max_seq_len=2048))
    ckpt = str(tmp_path / "ckpt")
    c.rl.update(tokenizer=ckpt + "/tokenizer.json", init_from=ckpt, steps=1, groups_per_step=1, group_size=4,
                row_len=2048, minibatch_rows=4)
    c.rl.optim.steps = 1
    c.rl.suite_options.update(filler_lines=1, filler_mix=(1, 0))  # the toy BPE spends a token per byte or two
    c.sft.update(demos=4, batch_rows=2, init_from=ckpt)
    c.sft.optim.update(steps=2, warmup_steps=1)
    c.rollout.update(window=2048, turn_budget=160, slots=8, prefill_buckets=(256, 1024))
    sets = c.experiment.evaluations
    del sets["10x"]
    for ev in sets.values():  # 3 turns: the untrained toy policy never submits, so every episode runs to its cap
        ev.update(tasks=2, suite_options=dict(ev.suite_options, filler_lines=1), rl=dict(env_max_turns=3),
                  rollout=dict(max_turns=3, max_segments=3))
    out = tmp_path / "result.json"
    record = run_experiment(c, tmp_path / "work", str(out), ["test"])
    assert json.loads(out.read_text())["pass_rate"] == record["pass_rate"]
    sft = record["training"]["sft"]
    assert sft["init_from"] == ckpt and sft["demo_pass_rate"] == 1.0 and sft["sequences"] >= 4
    assert record["training"]["trained"]["steps"] == 1
    assert record["horizons"] == [1, 3]
    assert set(record["pass_rate"]) == {"trained", "sft", "none", "harness"}
    assert all(len(v) == 2 for v in record["pass_rate"].values())
    assert set(record["paired"]["3x"]) == {"trained_vs_sft", "trained_vs_none", "trained_vs_harness",
                                           "sft_vs_harness"}
    assert not (tmp_path / "work" / "tokenizer.json").exists()  # the imported tokenizer, not a new one
