from textkit.stats import frequencies, mean_word_length, top_k, type_token_ratio


def test_frequencies_count_case_insensitively():
    assert frequencies("a A b")["a"] == 2


def test_top_k_orders_by_count_then_alphabet():
    assert top_k("b a c b a b d", 3) == ["b", "a", "c"]
    assert top_k("x y", 5) == ["x", "y"]


def test_mean_word_length():
    assert mean_word_length("ab abcd") == 3.0
    assert mean_word_length("") == 0.0


def test_type_token_ratio():
    assert type_token_ratio("a a b c") == 0.75
    assert type_token_ratio("") == 0.0
