from collections import Counter

from textkit.tokenize import words


def frequencies(text):
    return Counter(words(text))


def top_k(text, k):
    """The k most frequent words, ties broken alphabetically."""
    counts = frequencies(text)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [word for word, _ in ranked[:k]]


def mean_word_length(text):
    tokens = words(text)
    if not tokens:
        return 0.0
    return sum(len(t) for t in tokens) / len(tokens)


def type_token_ratio(text):
    tokens = words(text)
    if len(tokens) == 0:
        return 0.0
    return len(set(tokens)) / len(tokens)
