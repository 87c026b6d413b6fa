"""Reading the grading plugin's records back out of the sandbox's stderr.

A record is `NONCE SEQ KIND NODEID_HEX MAC` on its own line (see plugin/cj_grader.py). Only the
plugin holds the key, so a line carrying the nonce with a bad MAC, a repeated or skipped
sequence number, or a test recorded twice is evidence that something on the channel was forged
or replayed; the grade then turns to zero.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac

# What the plugin records per test; only "pass" counts. "foreign-code": the function pytest
# was about to call was not the one in the test file. "not-current": our hook was called for a
# test other than the one pytest is running.
KINDS = ("pass", "fail", "foreign-code", "not-current")


@dataclasses.dataclass(frozen=True)
class Report:
    outcomes: dict[str, str]  # node id -> kind
    problems: tuple[str, ...]  # evidence of tampering with the channel
    finished: bool  # pytest returned normally (no os._exit, kill or crash)


def record_mac(key: bytes, body: str) -> str:
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def parse(stream: str, key: bytes, nonce: str) -> Report:
    outcomes: dict[str, str] = {}
    problems: list[str] = []
    finished, seq = False, 0
    for line in stream.splitlines():
        at = line.find(nonce)
        if at < 0:
            continue
        fields = line[at:].split(" ")
        if len(fields) != 5 or not hmac.compare_digest(record_mac(key, " ".join(fields[1:4])), fields[4]):
            problems.append(f"forged or corrupted record: {line[at:][:120]!r}")
            continue
        _, seq_s, kind, node_hex, _ = fields
        if seq_s != str(seq):
            problems.append(f"record out of sequence (got {seq_s}, expected {seq})")
        seq = int(seq_s) + 1
        if kind == "end":
            finished = True
            continue
        node = bytes.fromhex(node_hex).decode("utf-8", "surrogateescape")
        if node in outcomes:
            problems.append(f"test recorded twice: {node}")
        outcomes[node] = kind
    return Report(outcomes, tuple(problems), finished)
