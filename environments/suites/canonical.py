"""Alpha-renaming of a stand-alone function, so that a drill's original cannot be found by its text.

A drill's original is a function of an installed package. Drills come from packages no sandbox
holds (drills.py), but were the package readable, `grep -rn "def name"` would hand a policy the
fix, and a drill should teach the fix, not the package's text. `rename` gives the function, its
parameters and its locals (those of nested functions, lambdas and comprehensions too) fresh
ordinary names, strips docstrings and re-emits the code with `ast.unparse`, so formatting and
comments differ too; numbered, it gives functions equal up to their names one text
(drills.copy_key).
Behaviour is kept: globals, builtins, attributes, class-body names, imports and the keywords of
calls into other code keep their names, `self`/`cls` stay (methods still read as methods), and a
function that reads its frame by name (`locals()`, one-argument `eval`) is refused.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import itertools
import keyword
import random
import zlib

from environments.suites.base import parse_python

# Ordinary local names, no underscores (function names have them, so the two never meet).
WORDS = (
    "value", "values", "item", "items", "count", "total", "left", "right", "index", "result", "text",
    "data", "key", "node", "entry", "entries", "line", "lines", "part", "parts", "chunk", "chunks",
    "buffer", "target", "source", "start", "end", "offset", "size", "width", "height", "limit",
    "prefix", "suffix", "head", "tail", "first", "last", "current", "previous", "pending", "found",
    "flag", "flags", "mode", "state", "status", "kind", "label", "tag", "token", "tokens", "word",
    "words", "record", "records", "row", "rows", "column", "columns", "field", "fields", "option",
    "options", "config", "context", "handler", "callback", "factory", "message", "header", "headers",
    "body", "payload", "element", "elements", "member", "members", "group", "groups", "block",
    "blocks", "frame", "step", "level", "depth", "weight", "score", "amount", "number", "digit",
    "digits", "char", "chars", "letter", "pattern", "query", "answer", "reply", "request", "response",
    "stream", "output", "queue", "stack", "cache", "table", "mapping", "registry", "pool", "batch",
    "sample", "seed", "origin", "base", "root", "leaf", "branch", "parent", "child", "children",
    "owner", "peer", "client", "address", "port", "host", "timeout", "delay", "interval", "stamp",
    "version", "marker", "anchor", "cursor", "pointer", "position", "location", "region", "span",
    "window", "slot", "bucket", "bundle", "unit", "scale", "ratio", "factor", "delta", "margin",
    "border", "padding", "extra", "rest", "remainder", "other", "candidate", "choice", "pick",
    "spec", "template", "layout", "shape", "color", "note", "memo", "summary", "report", "detail",
    "info", "meta", "attrs", "props", "counter", "accum", "piece", "pieces", "portion", "term", "terms",
)
KEPT = {"self", "cls"}
RESERVED = set(dir(builtins)) | set(keyword.kwlist) | set(keyword.softkwlist) | KEPT


@dataclasses.dataclass(eq=False)
class _Scope:
    kind: str  # "module", "class", "function" or "comprehension" (a lambda is a function)
    parent: _Scope | None = None
    bound: set[str] = dataclasses.field(default_factory=set)
    declared_global: set[str] = dataclasses.field(default_factory=set)
    declared_nonlocal: set[str] = dataclasses.field(default_factory=set)
    imported: set[str] = dataclasses.field(default_factory=set)
    params: set[str] = dataclasses.field(default_factory=set)  # those a caller may pass by keyword
    defs: dict[str, _Scope] = dataclasses.field(default_factory=dict)  # def name -> its scope

    def lookup(self, name: str) -> _Scope | None:
        """The scope whose binding `name` means here, by Python's rules (nearest enclosing binding
        or `global`, class bodies invisible to what they enclose); None for a global or builtin."""
        scope = self
        while scope is not None:
            if name in scope.declared_global:
                return None
            if name in scope.bound:
                return scope
            scope = scope.parent
            while scope is not None and scope.kind == "class":
                scope = scope.parent
        return None

    def renames(self, name: str) -> bool:
        return self.kind in ("function", "comprehension") and name not in self.imported and name not in KEPT


def _arguments(args: ast.arguments) -> list[ast.arg]:
    return [a for a in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg) if a]


class _Binder(ast.NodeVisitor):
    """Pass 1: the scopes, and where each name is spelled (the scope it is read in, node, field)."""

    def __init__(self):
        self.scope = self.module = _Scope("module")
        self.scopes = [self.module]
        self.refs: list[tuple[_Scope, ast.AST, str]] = []
        self.calls: list[tuple[_Scope, ast.Call]] = []

    def _enter(self, kind: str) -> _Scope:
        self.scope = _Scope(kind, self.scope)
        self.scopes.append(self.scope)
        return self.scope

    def _bind(self, scope: _Scope, node: ast.AST, field: str) -> None:
        scope.bound.add(getattr(node, field))
        self.refs.append((scope, node, field))

    def _visit_all(self, nodes) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node)

    def _signature(self, args: ast.arguments) -> None:
        """Defaults and annotations are evaluated where the def or lambda is, not in its body."""
        self._visit_all([*args.defaults, *args.kw_defaults, *(a.annotation for a in _arguments(args))])

    def _parameters(self, args: ast.arguments) -> None:
        for a in _arguments(args):
            self._bind(self.scope, a, "arg")
        self.scope.params = {a.arg for a in (*args.args, *args.kwonlyargs)}

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_all(node.decorator_list)
        self._signature(node.args)
        self._visit_all([node.returns])
        outer = self.scope
        self._bind(outer, node, "name")
        outer.defs[node.name] = self._enter("function")
        self._parameters(node.args)
        self._visit_all(node.body)
        self.scope = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._signature(node.args)
        outer = self.scope
        self._enter("function")
        self._parameters(node.args)
        self.visit(node.body)
        self.scope = outer

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_all([*node.decorator_list, *node.bases, *node.keywords])
        outer = self.scope
        self._bind(outer, node, "name")
        self._enter("class")
        self._visit_all(node.body)
        self.scope = outer

    def _comprehension(self, node, *results: ast.AST) -> None:
        """The first iterable is evaluated outside; targets, conditions and results inside."""
        self.visit(node.generators[0].iter)
        outer = self.scope
        self._enter("comprehension")
        for i, generator in enumerate(node.generators):
            self._visit_all([generator.target, generator.iter if i else None, *generator.ifs])
        self._visit_all(results)
        self.scope = outer

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, node.elt)

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, node.key, node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        scope = self.scope  # := in a comprehension binds in the enclosing function
        while scope.kind == "comprehension":
            scope = scope.parent
        self._bind(scope, node.target, "id")
        self.visit(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.refs.append((self.scope, node, "id"))
        else:
            self._bind(self.scope, node, "id")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(self.scope, node, "name")
        self.generic_visit(node)

    def _capture(self, node: ast.AST, field: str) -> None:
        if getattr(node, field):
            self._bind(self.scope, node, field)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self._capture(node, "name")

    visit_MatchStar = visit_MatchAs

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self._capture(node, "rest")

    def visit_Import(self, node: ast.Import) -> None:
        names = {alias.asname or alias.name.split(".")[0] for alias in node.names}
        self.scope.bound |= names
        self.scope.imported |= names

    visit_ImportFrom = visit_Import

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.declared_global.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.declared_nonlocal.update(node.names)
        self.refs.append((self.scope, node, "names"))

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.keywords:
            self.calls.append((self.scope, node))
        self.generic_visit(node)

    def finish(self) -> None:
        for scope in self.scopes:  # a declared name is bound in another scope, not this one
            scope.bound -= scope.declared_global | scope.declared_nonlocal


def identifiers(tree: ast.AST) -> set[str]:
    """Every name the code spells, attributes and keywords included (not string contents)."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant):
            for _, value in ast.iter_fields(node):
                for text in value if isinstance(value, list) else [value]:
                    if isinstance(text, str):
                        out.update(text.split("."))
    return out


def _reads_frame(tree: ast.AST) -> bool:
    """locals()/vars()/dir() or eval/exec without a namespace read the caller's names as strings."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and (n.func.id in ("locals", "vars", "dir") and not n.args
                    or n.func.id in ("eval", "exec") and len(n.args) < 2)
               for n in ast.walk(tree))


def _strip_docstrings(tree: ast.AST) -> None:
    """Every leading string statement goes (a second one would be the next docstring)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            while ast.get_docstring(node, clean=False) is not None:
                node.body = node.body[1:] or [ast.Pass()]


def rename(code: str, function: str, seed: str, method: bool = False, numbered: str | None = None) -> str | None:
    """`code` (one top-level def) with its def named `function`, its locals renamed to words drawn
    deterministically from `seed`, no docstrings, as `ast.unparse` writes it; None if it reads its
    frame by name. For a `method`, a bare use of its old name means a global (the method itself is
    reached as an attribute), so only the def is renamed. `function` must be a name `code` does
    not spell. With `numbered` (a prefix no code spells), locals are `<numbered>0`, `<numbered>1`,
    ... in order of first use instead: functions equal up to their names give one text."""
    tree = parse_python(code)
    (fn,) = tree.body
    if _reads_frame(tree):
        return None
    binder = _Binder()
    binder.visit(tree)
    binder.finish()
    if method:
        binder.module.bound.clear()
    spelled = identifiers(tree) | RESERVED  # a fresh word can capture no name the code keeps
    fresh = (f"{numbered}{i}" for i in itertools.count()) if numbered else \
        (w for w in random.Random(zlib.crc32(seed.encode())).sample(WORDS, len(WORDS)) if w not in spelled)
    words: dict[str, str] = {}

    def new(scope: _Scope | None, name: str) -> str:
        """The name a binding of `name` in `scope` (None: global) gets."""
        if scope is binder.module:
            return function
        if scope is None or not scope.renames(name):
            return name
        if name not in words:
            words[name] = next(fresh)
        return words[name]

    # Keywords first: they are matched to a def of this code through the call's name, unrenamed.
    for scope, call in binder.calls:
        target = scope.lookup(call.func.id)
        callee = target.defs.get(call.func.id) if target else None
        for kw in call.keywords if callee else ():
            if kw.arg in callee.params:
                kw.arg = new(callee, kw.arg)
    for scope, node, field in binder.refs:
        value = getattr(node, field)
        setattr(node, field, [new(scope.lookup(v), v) for v in value] if isinstance(value, list)  # nonlocal
                else new(scope.lookup(value), value))
    fn.name = function
    _strip_docstrings(tree)
    return ast.unparse(tree) + "\n"
