"""seqio interop (extra `seqio`, which pulls TensorFlow): our tokenizer as a `seqio.Vocabulary`,
the file corpus as seqio Tasks (one per corpus root) and a Mixture, and any registered seqio
task or mixture as the text source of a token store (`shard_texts`).
"""
import functools
import re
from collections.abc import Sequence

import seqio
import tensorflow as tf

from composer_jax.data.corpus import Manifest, read_text
from composer_jax.data.tokenizer import Tokenizer

MIXTURE_NAME = "composer_code"
SEQIO_SPLIT = {"train": "train", "val": "validation"}


class CodeVocabulary(seqio.Vocabulary):
    """A `Tokenizer` seen by seqio: PAD is 0 (as seqio requires), EOS is ours, no UNK (bytes)."""

    def __init__(self, tokenizer: Tokenizer):
        super().__init__(extra_ids=0)
        self.tokenizer = tokenizer

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def unk_id(self) -> None:
        return None

    @property
    def _base_vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _encode(self, s: str) -> list[int]:
        return self.tokenizer.encode(s)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor:
        ids = tf.py_function(lambda x: tf.constant(self._encode(x.numpy().decode()), tf.int32),
                             [s], tf.int32)
        return tf.ensure_shape(ids, [None])

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        text = tf.py_function(lambda x: tf.constant(self._decode(x.numpy().tolist())), [ids], tf.string)
        return tf.ensure_shape(text, [])

    def __eq__(self, other) -> bool:
        return isinstance(other, CodeVocabulary) and other.tokenizer.hash == self.tokenizer.hash


def task_name(root_label: str) -> str:
    return "composer_code_" + re.sub(r"\W", "_", root_label)


def _text_dataset(texts: list[str]) -> tf.data.Dataset:
    # An empty list has no dtype for from_tensor_slices: slice one "" and take none of it.
    return tf.data.Dataset.from_tensor_slices({"text": tf.constant(texts or [""], tf.string)}
                                              ).take(len(texts))


def register_corpus(manifest: Manifest, tokenizer: Tokenizer) -> list[str]:
    """Register one Task per corpus root and the Mixture `composer_code` over them (rates =
    bytes); re-registering replaces earlier ones. Returns the task names."""
    vocab = CodeVocabulary(tokenizer)
    by_label: dict[str, list] = {}
    for doc in manifest.documents:
        by_label.setdefault(doc.name.split("/", 1)[0], []).append(doc)
    names = []
    for label, docs in by_label.items():
        def dataset_fn(split, shuffle_files, seed=None, docs=docs):
            ours = [d for d in docs if SEQIO_SPLIT[d.split] == split]
            return _text_dataset([read_text(d) for d in ours])

        name = task_name(label)
        seqio.TaskRegistry.remove(name)
        seqio.TaskRegistry.add(
            name,
            source=seqio.FunctionDataSource(dataset_fn, splits=list(SEQIO_SPLIT.values())),
            preprocessors=[functools.partial(seqio.preprocessors.rekey, key_map={"targets": "text"}),
                           seqio.preprocessors.tokenize],
            output_features={"targets": seqio.Feature(vocab, add_eos=False, dtype=tf.int32)},
        )
        names.append(name)
    seqio.MixtureRegistry.remove(MIXTURE_NAME)
    seqio.MixtureRegistry.add(MIXTURE_NAME, [(task_name(label), sum(d.bytes for d in docs))
                                             for label, docs in by_label.items()])
    return names


def shard_texts(name: str, split: str, shard: int, num_shards: int) -> list[str]:
    """Texts of shard `shard` of a registered seqio task or mixture (every task of a mixture, once;
    our loader does the weighting): its `targets` ids, cut at EOS, decoded by its vocabulary."""
    provider = seqio.get_mixture_or_task(name)
    tasks = provider.tasks if isinstance(provider, seqio.Mixture) else [provider]
    texts = []
    for task in tasks:
        if SEQIO_SPLIT[split] not in task.splits:
            continue
        feature = "targets" if "targets" in task.output_features else next(iter(task.output_features))
        vocab = task.output_features[feature].vocabulary
        ds = task.get_dataset(sequence_length=None, split=SEQIO_SPLIT[split], shuffle=False,
                              num_epochs=1, use_cached=False)
        for example in ds.shard(num_shards, shard).as_numpy_iterator():
            ids = example[feature].tolist()
            if vocab.eos_id in ids:
                ids = ids[:ids.index(vocab.eos_id)]
            texts.append(vocab.decode(ids))
    return texts
