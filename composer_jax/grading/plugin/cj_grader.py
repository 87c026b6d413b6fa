"""Grading entry point inside the sandbox: `python -I -B /grader/cj_grader.py PYTEST_ARGS`.

Stdlib and pytest only: composer_jax is not importable in the sandbox.

It runs before any code of the repository under test, so it arms itself while the process is
still clean:
- key, nonce and test-file list come from stdin, which is then closed: the key is in no file,
  environment variable or open fd the tested code could read;
- records go to a private close-on-exec dup of stderr;
- the pristine code objects of every test file are compiled exactly as pytest's assertion
  rewriter compiles them, to check later that the function we call is still the test;
- os.write and a keyed C-level HMAC object (the key cannot be read back out of it) are bound
  now, so monkeypatching os, hmac, json or pytest later changes nothing we use;
- an audit hook, which cannot be removed, refuses what a solution would need to neuter tests
  or reach into the reporter: settrace/setprofile, gc object walks, ctypes, building functions
  from foreign globals, assigning __code__, opening /proc/<pid>/mem or procfs directories; and
  PR_SET_DUMPABLE=0 keeps other processes from ptrace or /proc/<pid>/fd access to us.

An outcome is recorded by our own tryfirst pytest_pyfunc_call, which calls the test function
itself: "pass" means that call returned. Pytest's reports (which a solution can patch) are never
consulted. Each record is written the moment its test ends, with a sequence number and a MAC,
so os._exit mid-run loses only the tests not yet run, and anything else on the channel is
detected by the host as forgery.
"""
import _hashlib
import ast
import ctypes
import json
import os
import stat
import sys
import types

BLOCKED_EVENTS = frozenset({
    "sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "function.__new__",
})


def _read_config():
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return json.loads(b"".join(chunks))


def _snapshot(paths):
    """(file, qualname, first line) -> code object, for every function in the test files."""
    from _pytest.assertion.rewrite import rewrite_asserts

    out = {}
    for path in paths:
        with open(path, "rb") as f:
            source = f.read()
        tree = ast.parse(source, filename=path)
        rewrite_asserts(tree, source, path, None)
        stack = [compile(tree, path, "exec", dont_inherit=True)]
        while stack:
            co = stack.pop()
            out[(os.path.realpath(co.co_filename), co.co_qualname, co.co_firstlineno)] = co
            stack += [c for c in co.co_consts if isinstance(c, types.CodeType)]
    return out


def _set_undumpable():
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _install_audit_hook(trusted_prefixes):
    stat_ = os.stat
    fspath = os.fspath
    listdir = os.listdir
    proc_dev = stat_("/proc").st_dev
    is_dir = stat.S_ISDIR

    def mem_inodes():
        tids = listdir("/proc/self/task")
        return {stat_(p).st_ino for p in ["/proc/self/mem"] + [f"/proc/self/task/{t}/mem" for t in tids]}

    def refuse(event):
        raise PermissionError(f"{event} is not allowed while grading")

    def hook(event, args):
        if event in BLOCKED_EVENTS or event.startswith("ctypes."):
            refuse(event)
        if event == "object.__setattr__" and args[1] == "__code__":
            refuse("assigning __code__")
        if event == "open" and not isinstance(args[0], int):
            path = fspath(args[0])
            path = path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path
            if path.startswith(trusted_prefixes):
                return
            try:
                st = stat_(path)
            except OSError:
                return  # does not exist yet: cannot be a procfs file
            if st.st_dev == proc_dev and (is_dir(st.st_mode) or st.st_ino in mem_inodes()):
                refuse(f"opening {path}")

    sys.addaudithook(hook)


def _make_plugin(mac_proto, nonce, test_files, report_fd):
    import pytest

    write, realpath = os.write, os.path.realpath
    pristine = _snapshot(test_files)
    function_type = types.FunctionType
    state = {"seq": 0, "current": None}

    def emit(kind, nodeid):
        body = f"{state['seq']} {kind} {nodeid.encode('utf-8', 'surrogateescape').hex()}"
        mac = mac_proto.copy()
        mac.update(body.encode())
        write(report_fd, f"\n{nonce} {body} {mac.hexdigest()}\n".encode())
        state["seq"] += 1

    def is_pristine(item, obj):
        """obj is the unmodified function that the test file defines under the item's name."""
        func = getattr(obj, "__func__", obj)
        if type(func) is not function_type:
            return False
        code = func.__code__
        filename = realpath(code.co_filename)
        expected = pristine.get((filename, code.co_qualname, code.co_firstlineno))
        return (expected is not None and code == expected and code.co_name == item.originalname
                and filename == realpath(str(item.path)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(item, nextitem):
        state["current"] = item

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(pyfuncitem):
        nodeid = pyfuncitem.nodeid
        if pyfuncitem is not state["current"]:
            emit("not-current", nodeid)
            return True
        testfunction = pyfuncitem.obj
        if not is_pristine(pyfuncitem, testfunction):
            emit("foreign-code", nodeid)
            raise AssertionError("grader: the test function is not the one in the test file")
        funcargs = pyfuncitem.funcargs
        try:
            result = testfunction(**{a: funcargs[a] for a in pyfuncitem._fixtureinfo.argnames})
        except BaseException:
            emit("fail", nodeid)
            raise
        if result is not None:  # a coroutine or generator did not run its body
            emit("fail", nodeid)
            raise AssertionError(f"grader: test returned {type(result).__name__}, not None")
        emit("pass", nodeid)
        return True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(session, exitstatus):
        emit("end", "")

    return types.SimpleNamespace(pytest_runtest_protocol=pytest_runtest_protocol,
                                 pytest_pyfunc_call=pytest_pyfunc_call,
                                 pytest_sessionfinish=pytest_sessionfinish)


def main():
    cfg = _read_config()
    # Only the keyed HMAC object outlives this line; the key itself is dropped.
    mac_proto = _hashlib.hmac_new(bytes.fromhex(cfg.pop("key")), digestmod="sha256")
    report_fd = os.dup(2)  # close-on-exec, unlike fd 2 which pytest redirects during tests
    plugin = _make_plugin(mac_proto, cfg["nonce"], cfg["test_files"], report_fd)
    del mac_proto
    if cfg["harden"]:
        _set_undumpable()
        prefixes = tuple(p.rstrip("/") + "/" for p in (sys.base_prefix, sys.prefix, "/usr", "/etc"))
        _install_audit_hook(prefixes)
    sys.path.append(cfg["rootdir"])  # after site-packages: the repo cannot shadow what we import
    import pytest

    sys.exit(int(pytest.main(sys.argv[1:], plugins=[plugin])))


if __name__ == "__main__":
    main()
