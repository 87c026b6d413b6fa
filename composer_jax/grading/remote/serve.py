"""The submission's side of grading, run in the sandbox: `python -I -B /grader/serve.py`.

It holds no test, no expected value and no verdict. It answers the judge's requests one line at
a time (import a module of the repository, get an attribute, call, index, iterate, ...) and
sends back what happened: a value in the data-only codec, a handle to an object that stays here,
or the exception raised. Everything in this process is the submission's to change, this file
included, so nothing it sends is trusted: the judge decides from data alone.

Requests: {"op": OP, "h": handle, ...}; replies: {"v": value} | {"raise": {"cls", "args",
"str"}}, plus "wb" (mutable arguments changed by a call: index or keyword -> new value) and the
codec's node table. A callback of the test (a handle tagged "j") is called by sending
{"cb": handle, "a", "kw"} and serving the judge's requests until its {"op": "ret"} arrives.
"""
import importlib
import itertools
import json
import os
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import codec  # noqa: E402 - after the path entry that finds it

sys.path.remove(_HERE)
ITER_LIMIT = 1_000_000  # items one `iter` request may materialise
TEXT_LIMIT = 1 << 20  # characters of str()/repr() sent back
MUTABLE = (list, dict, set, bytearray)


class Callback:
    """A callable of the test: calling it runs it in the judge, on data."""

    __slots__ = ("_peer", "_k")

    def __init__(self, peer, k: int):
        self._peer, self._k = peer, k

    def __call__(self, *args, **kwargs):
        peer = self._peer
        peer.send({"cb": self._k, "a": [peer.session.encode(a) for a in args],
                   "kw": peer.session.encode(dict(kwargs))})
        ret = peer.loop(waiting=True)
        if "raise" in ret:  # the builtin base of what the test's callable raised, and its token
            raised = ret["raise"] if type(ret["raise"]) is dict else {}
            cls = codec.builtin_exception(str(raised.get("x")))
            e = (cls if cls is not None and issubclass(cls, Exception) else Exception)()
            e.__cj_cbx__ = raised.get("cbx")
            raise e
        return peer.session.decode(ret.get("v"))


class Handles:
    """Objects the judge refers to by number; kept alive for the whole run."""

    def __init__(self, peer=None):
        self.objects, self.index, self.peer, self.callbacks = [], {}, peer, {}

    def tag(self, obj, bases: bool = True) -> dict:
        if type(obj) is Callback:
            return {"h": obj._k, "j": 1}
        hid = self.index.get(id(obj))
        if hid is None:
            hid = len(self.objects)
            self.objects.append(obj)
            self.index[id(obj)] = hid
        out = {"h": hid, "k": _kind(obj), "q": _name(obj)}
        if bases and isinstance(obj, type) and issubclass(obj, BaseException):
            # The judge rebuilds exception classes from their exception bases, nearest first.
            out["mro"] = [{"x": c.__name__} if codec.builtin_exception(c.__name__) is c else self.tag(c, bases=False)
                          for c in obj.__mro__[1:] if issubclass(c, BaseException)]
        return out

    def get(self, tag):
        hid = tag.get("h")
        if "j" in tag and type(hid) is int:
            if hid not in self.callbacks:
                self.callbacks[hid] = Callback(self.peer, hid)
            return self.callbacks[hid]
        if type(hid) is not int or not 0 <= hid < len(self.objects):
            raise codec.DecodeError(f"unknown handle {hid!r}")
        return self.objects[hid]


def _kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, type):
        return "class"
    return "callable" if callable(obj) else "object"


def _name(obj) -> str:
    try:
        name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        return str(name)[:200]
    except Exception:  # noqa: BLE001 - a hostile __getattr__ is the submission's business
        return "?"


def _text(value) -> str:
    if type(value) is not str:
        raise TypeError(f"__str__/__repr__ returned {type(value).__name__}")
    return value[:TEXT_LIMIT]


def _public_names(module) -> list:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if type(n) is str]


def _materialise(obj) -> list:
    items = list(itertools.islice(iter(obj), ITER_LIMIT + 1))
    if len(items) > ITER_LIMIT:
        raise OverflowError(f"iteration yields more than {ITER_LIMIT} items")
    return items


def answer(op, obj, req, decode):
    """The value a request other than "call" asks for."""
    if op == "import":
        return importlib.import_module(_str(req, "name"))
    if op == "getattr":
        return getattr(obj, _str(req, "name"))
    if op == "setattr":
        return setattr(obj, _str(req, "name"), decode(req.get("v")))
    if op == "getitem":
        return obj[decode(req.get("key"))]
    if op == "setitem":
        obj[decode(req.get("key"))] = decode(req.get("v"))
        return None
    if op == "delitem":
        del obj[decode(req.get("key"))]
        return None
    if op == "len":
        return len(obj)
    if op == "bool":
        return bool(obj)
    if op == "str":
        return _text(str(obj))
    if op == "repr":
        return _text(repr(obj))
    if op == "iter":
        return _materialise(obj)
    if op == "next":
        return next(obj)
    if op == "isinstance":
        return isinstance(decode(req.get("v")), obj)
    if op == "dir":
        return _public_names(obj)
    raise codec.DecodeError(f"unknown op {op!r}")


def _str(req, key) -> str:
    value = req.get(key)
    if type(value) is not str:
        raise codec.DecodeError(f"{key!r} must be a string")
    return value


def _call(session, obj, req) -> dict:
    args, kwargs = session.decode(req.get("a")), session.decode(req.get("kw"))
    if type(args) is not list or type(kwargs) is not dict or any(type(k) is not str for k in kwargs):
        raise codec.DecodeError("a call needs a list of arguments and a dict of keywords")
    value = obj(*args, **kwargs)
    reply = {"v": session.encode(value)}
    # Mutable arguments whose encoding changed, so the judge's copies follow (in-place APIs).
    changed = {}
    received = {**dict(enumerate(req["a"])), **dict(req["kw"]["d"])}  # shapes checked by decode
    for key, arg in [*enumerate(args), *kwargs.items()]:
        after = session.encode(arg)  # also puts the nodes it reaches in the node table
        if type(arg) in MUTABLE and json.dumps(after) != json.dumps(received.get(key)):
            changed[str(key)] = after
    if changed:
        reply["wb"] = changed
    return reply


def _raised(session, e: BaseException) -> dict:
    try:
        message = str(e)[:TEXT_LIMIT]
    except BaseException:  # noqa: BLE001 - __str__ of the submission's exception may raise
        message = "<unprintable>"
    try:
        args = session.encode(tuple(e.args))
    except BaseException:  # noqa: BLE001 - arguments that are not data cross as their message
        args = None
    name = getattr(e, "name", None) if isinstance(e, ImportError) else None
    try:
        token = e.__dict__.get("__cj_cbx__")  # a callback's exception, propagated
    except BaseException:  # noqa: BLE001
        token = None
    return {"raise": {"cls": session.encode(type(e)), "args": args, "str": message,
                      "name": name if type(name) is str else None, "cbx": token if type(token) is int else None}}


class Peer:
    """This end of the channel: answers the judge's requests, and calls its callbacks."""

    def __init__(self, rfile, wfd):
        self.rfile, self.wfd = rfile, wfd
        self.handles = Handles(self)
        self.session = codec.Session("s", self.handles.tag, self.handles.get)

    def send(self, fields: dict) -> None:
        os.write(self.wfd, self.session.message(fields))

    def loop(self, waiting: bool = False) -> dict:
        """Answer requests until the judge closes the channel, or (`waiting`) until the result
        of the callback this process is calling arrives."""
        while line := self.rfile.readline(codec.MAX_MESSAGE_BYTES + 1):
            try:
                req = self.session.read(line)
                if req.get("op") == "ret":
                    if waiting:
                        return req
                    continue
                obj = self.handles.get(req) if "h" in req else None
                if req.get("op") == "call":
                    reply = _call(self.session, obj, req)
                else:
                    reply = {"v": self.session.encode(answer(req.get("op"), obj, req, self.session.decode))}
            except BaseException as e:  # noqa: BLE001 - SystemExit and all: it is an answer too
                reply = _raised(self.session, e)
            try:
                out = self.session.message(reply)
            except BaseException as e:  # noqa: BLE001 - the value cannot cross: say so
                out = self.session.message({"raise": {"cls": {"x": "TypeError"}, "args": None, "unencodable": True,
                                                      "str": f"the value cannot be sent to the grader: {e}"[:500]}})
            os.write(self.wfd, out)
        if waiting:
            raise EOFError("the grader closed the channel during a callback")
        return {}


def main() -> None:
    rfd, wfd = os.dup(0), os.dup(1)
    # The submission's own prints must not land on the channel: stdout goes to stderr.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "/workspace")  # the repository
    Peer(os.fdopen(rfd, "rb"), wfd).loop()


if __name__ == "__main__":
    main()
