import pytest

from textkit.format import justify, title_case, wrap


def test_wrap_greedy():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_exact_width_fits():
    assert wrap("abc def", 7) == ["abc def"]


def test_wrap_long_word_alone():
    assert wrap("a verylongword b", 4) == ["a", "verylongword", "b"]


def test_wrap_rejects_zero_width():
    with pytest.raises(ValueError):
        wrap("a", 0)


def test_justify_spreads_extra_spaces_left_first():
    assert justify("a b c", 8) == "a   b  c"
    assert len(justify("one two three", 20)) == 20


def test_justify_single_word_pads_right():
    assert justify("word", 6) == "word  "


def test_title_case_keeps_minor_words_lower():
    assert title_case("the lord OF the rings") == "The Lord of the Rings"
    assert title_case("a tale") == "A Tale"
