import re

WORD = re.compile(r"[A-Za-z0-9']+")


def words(text):
    """Lower-cased words of `text`, apostrophes kept inside words."""
    return [w.lower().strip("'") for w in WORD.findall(text) if w.strip("'")]


def sentences(text):
    """Split on ., ! or ? followed by whitespace; empty pieces are dropped."""
    parts = re.split(r"(?<=[.!?])\s+", text.strip())
    return [p for p in parts if p]


def ngrams(tokens, n):
    """Consecutive n-tuples of tokens."""
    if n <= 0:
        raise ValueError("n must be positive")
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
