"""A byte-exact picture of a directory tree, for tests that assert a call changed nothing."""
import os


def tree(root):
    """Every entry under `root` (names as bytes): mode and content or link target."""
    out, broot = {}, os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(broot):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            body = os.readlink(path) if os.path.islink(path) else None
            if os.path.isfile(path) and body is None:
                with open(path, "rb") as f:
                    body = f.read()
            out[os.path.relpath(path, broot)] = (os.lstat(path).st_mode, body)
    return out
