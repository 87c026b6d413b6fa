import pytest

from textkit.tokenize import ngrams, sentences, words


def test_words_lowercases_and_keeps_apostrophes():
    assert words("Don't STOP me now!") == ["don't", "stop", "me", "now"]


def test_words_drops_bare_apostrophes():
    assert words("' hello '' world'") == ["hello", "world"]


def test_sentences_split_on_terminators():
    assert sentences("Hi there. How are you?  Fine!") == ["Hi there.", "How are you?", "Fine!"]


def test_sentences_empty_text():
    assert sentences("   ") == []


def test_ngrams_pairs_and_edges():
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams(["a", "b", "c"], 3) == [("a", "b", "c")]
    assert ngrams(["a"], 2) == []


def test_ngrams_rejects_nonpositive_n():
    with pytest.raises(ValueError):
        ngrams(["a"], 0)
