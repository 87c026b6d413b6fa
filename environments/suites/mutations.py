"""AST mutation operators that plant small, realistic bugs in Python source.

Each single mutant changes one node (or removes one statement) and is written back by replacing
only that node's text span, so formatting and comments elsewhere survive and the bug is a local
edit. A mutant is kept only if re-parsing its text gives exactly the intended tree (parentheses
are added when precedence requires them). Double mutants combine two singles on different lines.
"""
from __future__ import annotations

import ast
import dataclasses
import random
from collections.abc import Iterator

from environments.suites.base import parse_python

COMPARE_FLIPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.Gt), ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
}
BINOP_SWAPS: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub, ast.Mult), ast.Sub: (ast.Add,), ast.Mult: (ast.Add,), ast.FloorDiv: (ast.Mult,),
    ast.Div: (ast.Mult,), ast.Mod: (ast.FloorDiv,),
}
BUILTIN_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}
COMPOUND_STATEMENTS = (ast.For, ast.While, ast.If, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of the UTF-8 source with `replacement`."""

    start: int
    end: int
    replacement: bytes


@dataclasses.dataclass(frozen=True)
class Mutant:
    operator: str  # e.g. "flip_comparison"; "a+b" for a double mutant
    line: int  # 1-based line of the (first) mutated node in the original
    source: str  # the whole mutated file
    edits: tuple[Edit, ...]


def apply_edits(source: str, edits: tuple[Edit, ...]) -> str:
    raw = source.encode("utf-8")
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        raw = raw[: e.start] + e.replacement + raw[e.end:]
    return raw.decode("utf-8")


def double_mutants(source: str, singles: list[Mutant], limit: int, seed: int) -> list[Mutant]:
    """Up to `limit` two-bug mutants from pairs of single mutants on different lines."""
    pairs = [(a, b) for i, a in enumerate(singles) for b in singles[i + 1:]
             if a.line != b.line and all(x.end <= y.start or y.end <= x.start
                                         for x in a.edits for y in b.edits)]
    random.Random(seed).shuffle(pairs)
    out = []
    for a, b in pairs[:limit]:
        edits = a.edits + b.edits
        text = apply_edits(source, edits)
        try:
            parse_python(text)
        except SyntaxError:
            continue
        out.append(Mutant(f"{a.operator}+{b.operator}", min(a.line, b.line), text, edits))
    return out


def _span(lines: list[bytes], node: ast.AST) -> tuple[int, int]:
    """Byte offsets of a node in the file (ast columns are UTF-8 byte offsets)."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            ids.update(id(n) for n in ast.walk(body[0]))
    return ids


def _function_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Nodes inside function bodies, excluding docstrings: where the logic lives."""
    skip = _docstring_nodes(tree)
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in fn.body:
                for node in ast.walk(stmt):
                    if id(node) not in skip:
                        yield node


def _expression_edits(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(operator name, replacement node) for each way to mutate one expression node.
    (Conditions are negated by `_condition_edits`, which targets the test, not the block.)"""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        for new_op in COMPARE_FLIPS.get(type(node.ops[0]), ()):
            yield "flip_comparison", ast.Compare(node.left, [new_op()], node.comparators)
    elif isinstance(node, ast.BinOp) and type(node.op) in BINOP_SWAPS:
        for new_op in BINOP_SWAPS[type(node.op)]:
            yield "swap_arithmetic", ast.BinOp(node.left, new_op(), node.right)
    elif isinstance(node, ast.AugAssign) and type(node.op) in BINOP_SWAPS:
        for new_op in BINOP_SWAPS[type(node.op)]:
            yield "swap_arithmetic", ast.AugAssign(node.target, new_op(), node.value)
    elif isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Slice, ast.Constant, ast.Tuple)):
        for op in (ast.Add(), ast.Sub()):
            yield "off_by_one_index", ast.Subscript(node.value, ast.BinOp(node.slice, op, ast.Constant(1)), node.ctx)
    elif isinstance(node, ast.BoolOp):
        yield "swap_boolean", ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        yield "drop_unary", node.operand
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "flip_boolean_constant", ast.Constant(not node.value)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "off_by_one_constant", ast.Constant(node.value + 1)
        if node.value > 0:
            yield "off_by_one_constant", ast.Constant(node.value - 1)
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in BUILTIN_SWAPS:
            yield "swap_builtin", ast.Call(ast.Name(BUILTIN_SWAPS[node.func.id], ast.Load()), node.args, node.keywords)
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) == len(node.args) >= 2 and ast.dump(node.args[0]) != ast.dump(node.args[1]):
            args = [node.args[1], node.args[0], *node.args[2:]]
            yield "swap_call_arguments", ast.Call(node.func, args, node.keywords)
        if isinstance(node.func, ast.Name) and node.func.id == "range" and 1 <= len(node.args) <= 2 \
                and not isinstance(node.args[-1], ast.Constant):
            for op in (ast.Add(), ast.Sub()):
                stop = ast.BinOp(node.args[-1], op, ast.Constant(1))
                yield "off_by_one_range", ast.Call(node.func, [*node.args[:-1], stop], node.keywords)


def _dump_with(tree: ast.AST, parent: ast.AST, old: ast.AST, new: ast.AST | None) -> str:
    """`ast.dump(tree)` with `old` replaced by `new` (None removes it), leaving `tree` intact."""
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            try:
                return ast.dump(tree)
            finally:
                setattr(parent, field, old)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i:i + 1] = [] if new is None else [new]
                    try:
                        return ast.dump(tree)
                    finally:
                        value[i:i + 0 if new is None else i + 1] = [old]
    raise LookupError("child not found")


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _dump(source: str) -> str | None:
    try:
        return ast.dump(parse_python(source))
    except SyntaxError:
        return None


def _removable_statement(node: ast.AST, parent: ast.AST, lines: list[bytes]) -> bool:
    body = next((v for _, v in ast.iter_fields(parent) if isinstance(v, list) and any(x is node for x in v)), None)
    if body is None or len(body) < 2 or not isinstance(node, ast.stmt):
        return False
    if isinstance(node, (*COMPOUND_STATEMENTS, ast.Import, ast.ImportFrom, ast.Pass)):
        return False
    before = lines[node.lineno - 1][: node.col_offset]
    after = lines[node.end_lineno - 1][node.end_col_offset:]
    return not before.strip() and (not after.strip() or after.strip().startswith(b"#"))


def mutants(source: str, real_bugs: bool = False) -> list[Mutant]:
    """Every distinct single-point mutant of the function bodies in `source`. `real_bugs` adds
    the kinds of bug real changes make beyond a wrong operator or bound: a wrong default
    argument, a dropped `return`, a missing `if` branch (RealRepos; BugFix keeps its set)."""
    tree = parse_python(source)
    lines = source.encode("utf-8").splitlines(keepends=True)
    parents = _parents(tree)
    dumps, found = {source: ast.dump(tree)}, []  # text -> its tree's dump (None: no parse)

    def keep(operator: str, node: ast.AST, edit: Edit, expected: str) -> bool:
        """Keeps the edit if its text parses to `expected`, once per text; says whether it does."""
        text = apply_edits(source, (edit,))
        if text not in dumps:
            dumps[text] = _dump(text)
            if dumps[text] == expected:
                found.append(Mutant(operator, node.lineno, text, (edit,)))
        return dumps[text] == expected

    for node in _function_nodes(tree):
        for operator, target, new in _edits_at(node):
            start, end = _span(lines, target)
            expected = _dump_with(tree, parents[id(target)], target, new)
            snippet = ast.unparse(new)
            for candidate in (snippet, f"({snippet})"):
                if keep(operator, target, Edit(start, end, candidate.encode()), expected):
                    break
        if isinstance(node, ast.stmt) and _removable_statement(node, parents[id(node)], lines):
            expected = _dump_with(tree, parents[id(node)], node, None)
            first = sum(len(x) for x in lines[: node.lineno - 1])
            last = sum(len(x) for x in lines[: node.end_lineno])
            keep("remove_statement", node, Edit(first, last, b""), expected)
    if real_bugs:
        for operator, node, edit, expected in _real_bug_edits(tree, lines, parents):
            keep(operator, node, edit, expected)
    return found


def _real_bug_edits(tree: ast.Module, lines: list[bytes], parents: dict) -> Iterator[tuple[str, ast.AST, Edit, str]]:
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
                if isinstance(default, ast.Constant) and type(default.value) in (bool, int):
                    new = ast.Constant(not default.value if type(default.value) is bool else default.value + 1)
                    start, end = _span(lines, default)
                    yield ("wrong_default", default, Edit(start, end, ast.unparse(new).encode()),
                           _dump_with(tree, parents[id(default)], default, new))
    skip = _docstring_nodes(tree)
    for node in _function_nodes(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            start, _ = _span(lines, node)
            value_start, _ = _span(lines, node.value)
            if node.lineno == node.value.lineno:
                yield ("drop_return", node, Edit(start, value_start, b""),
                       _dump_with(tree, parents[id(node)], node, ast.Expr(node.value)))
        elif isinstance(node, ast.If) and not node.orelse:
            body = getattr(parents[id(node)], "body", None)
            if isinstance(body, list) and any(x is node for x in body) and len(body) >= 2 \
                    and not lines[node.lineno - 1][: node.col_offset].strip() \
                    and not lines[node.end_lineno - 1][node.end_col_offset:].strip():
                first = sum(len(x) for x in lines[: node.lineno - 1])
                last = sum(len(x) for x in lines[: node.end_lineno])
                yield "remove_branch", node, Edit(first, last, b""), _dump_with(tree, parents[id(node)], node, None)


def _edits_at(node: ast.AST) -> Iterator[tuple[str, ast.AST, ast.AST]]:
    """(operator, node to replace, replacement) for each mutation rooted at `node`."""
    for operator, new in _expression_edits(node):
        yield operator, node, new
    # A negated comparison would duplicate flip_comparison in an unnatural spelling.
    if isinstance(node, (ast.If, ast.While)) and not isinstance(node.test, (ast.UnaryOp, ast.Compare)):
        yield "negate_condition", node.test, ast.UnaryOp(ast.Not(), node.test)
