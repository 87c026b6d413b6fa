def wrap(text, width):
    """Greedy word wrap; a word longer than `width` gets a line of its own."""
    if width < 1:
        raise ValueError("width must be at least 1")
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def justify(line, width):
    """Pad the gaps between words so the line is exactly `width` long (leftmost gaps first)."""
    words = line.split()
    if len(words) == 1:
        return words[0].ljust(width)
    gaps = len(words) - 1
    spaces = width - sum(len(w) for w in words)
    base, extra = divmod(spaces, gaps)
    out = ""
    for i, word in enumerate(words[:-1]):
        out += word + " " * (base + (1 if i < extra else 0))
    return out + words[-1]


def title_case(text, minor=("a", "an", "the", "of", "and")):
    """Capitalise words except minor ones, but always the first word."""
    out = []
    for i, word in enumerate(text.split()):
        if i > 0 and word.lower() in minor:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:].lower())
    return " ".join(out)
