"""LongHorizon: a diagnostic that only an agent carrying facts across context resets can solve.

The repo is a chain of notes. The first note reveals an access key found nowhere else; each
following note holds one fragment and names the next note; every note is padded with filler
text so that reading them all overflows a small context window. The final edit writes the key
and the fragments (in chain order) into `config.py`. A model that loses the key or a fragment
at a summary/reset fails; `hops` and `filler_lines` set the difficulty.

Tasks are generated from (split, hops, filler_lines, secrets, index), so they are deterministic,
need no build, and train and validation never share a task. `secrets="hex"` (default) makes the
key `K-` + 8 hex digits and each fragment 5 random letters: carrying them means copying ~20
characters exactly. `secrets="words"` draws the key and fragments from two word lists disjoint
from the filler (the key from 32 nouns, fragments from 32 colours, note names from 32 trees): one token each for a word-level
tokenizer, so the difficulty is in keeping them across resets, not in spelling them; ids of these
tasks carry a `-w` suffix (`longhorizon/h2-f1-w/train-0`).

`carry="registers"` (word secrets; ids end `-w-rR`) makes the state a summary must carry stay
bounded while the horizon grows, so long tiers need compression, not copying: each note sets one
of R registers (`Note 7 of 60: set `north` to `amber`.`), a later note may overwrite it, and
config.py wants the key and every register's last value. The notes live at two-word paths
(`docs/oak/pine.md`), so a chain can run to 500 notes (~100k tokens with a 1k BPE).

`carry="code"` (word secrets; ids end `-w-cR`) is the registers tier as a Python repository
whose fix needs code facts read early: the notes are modules (`pkg/oak_pine.py`, filler
functions around one line that matters), each defining a handler function for one of R
registers, and `app.py`'s function for each register must call the handler of the last module
that handles it, imported in that function (`def north(x): from pkg.oak_pine import
amber; return amber(x)`, one line so that the whole fix fits one turn: a wrong name then fails that register's test, not the whole module's
import). A summary must carry, per register, a function name and the module that defines it;
the hidden tests call the handlers.

`carry_facts(task, reads)` is what the env knows about the future: after the agent has followed
the chain to note j, the facts later turns still need (the key, the fragments found, or each
register's value that no later note overwrites, and the next note). A summary that drops one of
them has lost it for good: the compaction error.
"""
from __future__ import annotations

import dataclasses
import json
import random
import re

from composer_jax.grading.task import Task
from environments.suites.base import TaskSuite, check_split

WORDS = (
    "cache queue worker shard replica lease token batch index commit branch merge buffer "
    "schema route proxy socket thread signal kernel tensor vector matrix gradient optimizer "
    "sampler rollout reward policy segment summary context window budget trace metric"
).split()
# No word starts like an English contraction ('s 't 'm 'd 're 've 'll): byte-level BPE
# pre-tokenisers split those after a quote, so `'saddle'` would never be one token.
KEY_WORDS = (
    "falcon walnut harbor lantern badger glacier canyon orchard pepper quartz cactus hazel "
    "violin whistle anchor beacon compass otter ember fossil garnet hammock island jasmine "
    "kettle lagoon pebble nectar oyster parrot raven kayak"
).split()
FRAGMENT_WORDS = (
    "amber azure beige cobalt coral crimson cyan ebony emerald fuchsia gold indigo ivory jade "
    "khaki lavender lemon lilac apricot bronze cherry navy ochre olive peach plum rose ruby "
    "copper orchid pewter umber"
).split()
NOTE_WORDS = (
    "alder birch cedar elm fir hickory juniper larch maple oak pine poplar rowan spruce willow yew "
    "acacia aspen baobab cypress ginkgo hemlock laurel linden magnolia mangrove palm redwood "
    "sequoia teak banyan chestnut"
).split()
REGISTER_NAMES = ("north", "south", "east", "west")
SECRETS = ("hex", "words")
CARRY = ("fragments", "registers", "code")
ID_PATTERN = re.compile(r"^longhorizon/h(\d+)-f(\d+)(-w)?(?:-([rc])(\d))?/(train|validation)-(\d+)$")
CONFIG_FILE = "config.py"
APP_FILE = "app.py"  # carry="code": the file to fix
# config.py is graded by parsing its literal assignments, never by importing it: importing would
# run the agent's code (which could read the notes for it) in the grader's process.
READ_CONFIG = (
    "import ast\nimport pathlib\n\n\n"
    "def config_values():\n"
    "    \"\"\"config.py's literal assignments (NAME = literal), read as text and never run.\"\"\"\n"
    "    tree = ast.parse(pathlib.Path(__file__).with_name('config.py').read_text(encoding='utf-8'))\n"
    "    values = {}\n"
    "    for node in tree.body:\n"
    "        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (\n"
    "            node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None)\n"
    "        if isinstance(target, ast.Name):\n"
    "            try:\n"
    "                values[target.id] = ast.literal_eval(node.value)\n"
    "            except ValueError:\n"
    "                pass\n"
    "    return values\n"
)
REGISTERS_TEMPLATE = (
    '"""Fill in from the notes: the access key from docs/start.md, and each register\'s last value."""\n'
    'ACCESS_KEY = {key!r}\n'
)
CONFIG_TEMPLATE = (
    '"""Fill in from the notes: the access key from docs/start.md, and the fragments joined\n'
    'with "-" in the order the notes chain them."""\n'
    'ACCESS_KEY = {key!r}\nFRAGMENTS = {fragments!r}\n'
)


@dataclasses.dataclass(frozen=True)
class LongHorizonOptions:
    hops: int = 6  # notes after the start note, each a required read
    filler_lines: int = 30  # filler lines per note (file size)
    secrets: str = "hex"  # hex | words (see the module docstring)
    # The scripted expert (SFT's demonstrator) leaves the access key out of a summary with this
    # probability: an imperfect demonstrator, so RL has a summary habit to improve on.
    expert_drop_key: float = 0.0
    carry: str = "fragments"  # fragments | registers | code (see the module docstring)
    registers: int = 3  # with carry="registers" or "code": how many (1-4)
    # Chain lengths taken in turn (task i has hops_mix[i % k], the (i // k)-th task of that
    # length); () = every task has `hops`. A policy shown one length learns to stop after that
    # many notes; shown several, it learns to stop at "This is the last note."
    hops_mix: tuple[int, ...] = ()
    # Filler lengths taken in turn within each chain length (task i has filler_mix[(i // k) % m]);
    # () = every task has `filler_lines`. Shown only padded notes, a policy never sees a tool
    # result that is not followed by a summary, and fails the unpadded (1x) tier.
    filler_mix: tuple[int, ...] = ()
    train_size: int = 10_000
    validation_size: int = 200

    def __post_init__(self):
        if not isinstance(self.hops_mix, (list, tuple)) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in self.hops_mix):
            raise ValueError(f"hops_mix={self.hops_mix!r} must be a list of chain lengths (ints), e.g. [2, 4, 8]")
        object.__setattr__(self, "hops_mix", tuple(self.hops_mix))  # a config gives a list
        if not isinstance(self.filler_mix, (list, tuple)) or not all(
                isinstance(f, int) and not isinstance(f, bool) for f in self.filler_mix):
            raise ValueError(f"filler_mix={self.filler_mix!r} must be a list of filler line counts (ints), e.g. [8, 0]")
        object.__setattr__(self, "filler_mix", tuple(self.filler_mix))
        for h in (self.hops, *self.hops_mix):
            if not 1 <= h <= 500:
                raise ValueError(f"hops={h}{' (in hops_mix)' if h != self.hops else ''} must be in [1, 500]")
        if self.hops_mix:  # the shortest chain bounds what every task can hold
            LongHorizonOptions(**{**dataclasses.asdict(self), "hops": min(self.hops_mix), "hops_mix": ()})
            LongHorizonOptions(**{**dataclasses.asdict(self), "hops": max(self.hops_mix), "hops_mix": ()})
        for f in (self.filler_lines, *self.filler_mix):
            if not 0 <= f <= 5000:
                raise ValueError(f"filler_lines={f}{' (in filler_mix)' if f != self.filler_lines else ''} must be in [0, 5000]")
        if self.secrets not in SECRETS:
            raise ValueError(f"secrets={self.secrets!r} must be one of {SECRETS}")
        if self.carry not in CARRY:
            raise ValueError(f"carry={self.carry!r} must be one of {CARRY}")
        if self.carry in ("registers", "code"):
            if self.secrets != "words":
                raise ValueError(f"carry={self.carry!r} needs secrets='words'")
            if not 1 <= self.registers <= len(REGISTER_NAMES) or self.registers > self.hops:
                raise ValueError(f"registers={self.registers} must be in [1, {len(REGISTER_NAMES)}] "
                                 f"and <= hops={self.hops}")
        elif self.secrets == "words" and self.hops > len(NOTE_WORDS):
            raise ValueError(f"secrets='words' names notes from {len(NOTE_WORDS)} words: hops={self.hops} is too many")
        if not 0.0 <= self.expert_drop_key <= 1.0:
            raise ValueError(f"expert_drop_key={self.expert_drop_key} must be in [0, 1]")
        if self.train_size < 1 or self.validation_size < 1:
            raise ValueError("train_size and validation_size must be positive")


def _filler(rng: random.Random, lines: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "."
            for _ in range(lines)]


def _pad(rng: random.Random, filler_lines: int, key_lines: list[str], filler=None) -> str:
    """Key lines inserted at random positions among filler lines (prose, or `filler`'s)."""
    lines = (filler or _filler)(rng, filler_lines)
    for line in key_lines:
        lines.insert(rng.randint(0, len(lines)), line)
    return "\n".join(lines) + "\n"


def task_id(split: str, hops: int, filler_lines: int, index: int, secrets: str = "hex", registers: int = 0,
            code: bool = False) -> str:
    """`registers` > 0: a carry="registers" task with that many registers (carry="code" if `code`)."""
    carry = f"-{'c' if code else 'r'}{registers}" if registers else ""
    tier = f"h{hops}-f{filler_lines}{'-w' if secrets == 'words' else ''}{carry}"
    return f"longhorizon/{tier}/{split}-{index}"


def make_task(split: str, hops: int, filler_lines: int, index: int, secrets: str = "hex", registers: int = 0,
              code: bool = False) -> Task:
    if registers and code:
        return make_code_task(split, hops, filler_lines, index, registers)
    if registers:
        return make_registers_task(split, hops, filler_lines, index, registers)
    if secrets == "hex":
        rng = random.Random(f"longhorizon/{split}/{hops}/{filler_lines}/{index}")
        key = "K-" + "".join(rng.choice("0123456789abcdef") for _ in range(8))
        fragments = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5)) for _ in range(hops)]
        names = rng.sample(range(1000, 10000), hops)
    else:
        rng = random.Random(f"longhorizon/{split}/{hops}/{filler_lines}/{secrets}/{index}")
        key, fragments = rng.choice(KEY_WORDS), [rng.choice(FRAGMENT_WORDS) for _ in range(hops)]
        names = rng.sample(NOTE_WORDS, hops)
    chain = [f"docs/note_{n}.md" for n in names]
    files = {"docs/start.md": _pad(rng, filler_lines, [
        f"The access key is `{key}`. It is written nowhere else.", f"Next note: {chain[0]}"])}
    for i, path in enumerate(chain):
        pointer = f"Next note: {chain[i + 1]}" if i + 1 < hops else "This is the last note."
        files[path] = _pad(rng, filler_lines, [f"Fragment {i + 1} of {hops}: `{fragments[i]}`", pointer])
    files[CONFIG_FILE] = CONFIG_TEMPLATE.format(key="", fragments="")
    files["test_config.py"] = READ_CONFIG + (
        "\n\ndef test_config_is_filled_with_strings():\n"
        "    values = config_values()\n"
        "    assert isinstance(values.get('ACCESS_KEY'), str) and values['ACCESS_KEY']\n"
        "    assert isinstance(values.get('FRAGMENTS'), str) and values['FRAGMENTS']\n"
    )
    answer = "-".join(fragments)
    # One test per fact carried (key, each fragment in place) besides the exact answer, so a
    # "fraction" reward counts how much of the chain survived the resets.
    hidden = READ_CONFIG + "\n\n" + "\n\n".join([
        f"def test_access_key():\n    assert config_values().get('ACCESS_KEY') == {key!r}\n",
        f"def test_fragments():\n    assert config_values().get('FRAGMENTS') == {answer!r}\n",
        *(f"def test_fragment_{i + 1}():\n"
          f"    assert str(config_values().get('FRAGMENTS')).split('-')[{i}:{i + 1}] == [{f!r}]\n"
          for i, f in enumerate(fragments))])
    return Task(
        task_id=task_id(split, hops, filler_lines, index, secrets),
        suite="LongHorizon",
        prompt=(f"Complete {CONFIG_FILE}. Start by reading docs/start.md and follow the chain of "
                f"notes to the last one ({hops} notes after the start). Set ACCESS_KEY to the key "
                "from the start note and FRAGMENTS to all fragments joined with '-' in chain order. "
                "Hidden tests check both values."),
        files=files,
        hidden_tests={"test_hidden.py": hidden},
        graded_tests=("test_hidden.py::test_access_key", "test_hidden.py::test_fragments",
                      *(f"test_hidden.py::test_fragment_{i + 1}" for i in range(hops))),
        observed_files=(CONFIG_FILE,),
        metadata={
            "source_id": f"longhorizon-{split}-{index}",
            "read_order": json.dumps(["docs/start.md", *chain]),
            # characters the required reads put into context; pick filler_lines so this
            # exceeds the model's window and summaries become necessary
            "read_chars": str(sum(len(files[p]) for p in ["docs/start.md", *chain])),
            "reference_files": json.dumps({CONFIG_FILE: CONFIG_TEMPLATE.format(key=key, fragments=answer)}),
            # after the chain is followed to note j (0 = start): the facts later turns still need
            "carry_facts": json.dumps([[[key], *([f] for f in fragments[:j]), [_next(chain, j)]]
                                       for j in range(hops + 1)]),
        },
    )


def _next(chain: list[str], j: int) -> str:
    """What the note at chain position j (0 = start) points to."""
    return chain[j] if j < len(chain) else "This is the last note."


def make_registers_task(split: str, hops: int, filler_lines: int, index: int, registers: int) -> Task:
    rng = random.Random(f"longhorizon/{split}/{hops}/{filler_lines}/registers{registers}/{index}")
    key, names = rng.choice(KEY_WORDS), list(REGISTER_NAMES[:registers])
    # every register is set at least once (in the first notes), then any register any time
    sets = [*rng.sample(names, registers), *(rng.choice(names) for _ in range(hops - registers))]
    values = [rng.choice(FRAGMENT_WORDS) for _ in range(hops)]
    pairs = rng.sample([(a, b) for a in NOTE_WORDS for b in NOTE_WORDS], hops)
    chain = [f"docs/{a}/{b}.md" for a, b in pairs]
    files = {"docs/start.md": _pad(rng, filler_lines, [
        f"The access key is `{key}`. It is written nowhere else.", f"Next note: {chain[0]}"])}
    for i, path in enumerate(chain):
        pointer = f"Next note: {chain[i + 1]}" if i + 1 < hops else "This is the last note."
        files[path] = _pad(rng, filler_lines, [f"Note {i + 1} of {hops}: set `{sets[i]}` to `{values[i]}`.", pointer])
    final = {r: values[max(i for i in range(hops) if sets[i] == r)] for r in names}
    template = REGISTERS_TEMPLATE + "".join(f"{r.upper()} = {{{r}!r}}\n" for r in names)
    files[CONFIG_FILE] = template.format(key="", **{r: "" for r in names})
    files["test_config.py"] = READ_CONFIG + (
        "\n\ndef test_config_is_filled_with_strings():\n"
        "    values = config_values()\n"
        f"    for name in {['ACCESS_KEY', *(r.upper() for r in names)]!r}:\n"
        "        assert isinstance(values.get(name), str) and values[name]\n")
    hidden = READ_CONFIG + "\n\n" + "\n\n".join([
        f"def test_access_key():\n    assert config_values().get('ACCESS_KEY') == {key!r}\n",
        *(f"def test_register_{r}():\n    assert config_values().get({r.upper()!r}) == {final[r]!r}\n" for r in names)])
    last_set = {r: max(i for i in range(hops) if sets[i] == r) for r in names}

    def needed(j: int) -> list[list[str]]:  # j notes followed: each register's value that stays final
        live = [[r, values[last_set[r]]] for r in names if last_set[r] < j]
        return [[key], *live, [_next(chain, j)]]

    names_list = ", ".join(r.upper() for r in names)
    return Task(
        task_id=task_id(split, hops, filler_lines, index, "words", registers),
        suite="LongHorizon",
        prompt=(f"Complete {CONFIG_FILE}. Start by reading docs/start.md and follow the chain of "
                f"notes to the last one ({hops} notes after the start). Set ACCESS_KEY to the key "
                f"from the start note and each register ({names_list}) to the value the last note "
                "that sets it gives. Hidden tests check every value."),
        files=files,
        hidden_tests={"test_hidden.py": hidden},
        graded_tests=("test_hidden.py::test_access_key", *(f"test_hidden.py::test_register_{r}" for r in names)),
        observed_files=(CONFIG_FILE,),
        metadata={
            "source_id": f"longhorizon-{split}-{index}",
            "read_order": json.dumps(["docs/start.md", *chain]),
            "read_chars": str(sum(len(files[p]) for p in ["docs/start.md", *chain])),
            "reference_files": json.dumps({CONFIG_FILE: template.format(key=key, **final)}),
            "carry_facts": json.dumps([needed(j) for j in range(hops + 1)]),
        },
    )


CODE_TEMPLATE = (
    '"""Set ACCESS_KEY to the access key in pkg/start.py, and make each register call its handler: the\n'
    'function defined by the last note (module) that handles it."""\n')


def wire(register: str, module: str, handler: str) -> str:
    """app.py's function for a register: the handler imported where it is called, so a wrong name
    fails that register alone (a module-level import error would fail every hidden test)."""
    return f"def {register}(x): from {module[:-3].replace('/', '.')} import {handler}; return {handler}(x)\n"


def _code_filler(rng: random.Random, lines: int) -> list[str]:
    """One-line functions with filler names: code to read past, as in a real module."""
    return [f"def {rng.choice(WORDS)}_{rng.choice(WORDS)}(x): return x {rng.choice('+-*')} {rng.randint(2, 97)}"
            for _ in range(lines)]


def make_code_task(split: str, hops: int, filler_lines: int, index: int, registers: int) -> Task:
    """carry="code" (module docstring): module i defines `def <colour>(x): return x * m + c` and
    says which register it handles; app.py's function per register calls its last handler."""
    rng = random.Random(f"longhorizon/{split}/{hops}/{filler_lines}/code{registers}/{index}")
    key, names = rng.choice(KEY_WORDS), list(REGISTER_NAMES[:registers])
    sets = [*rng.sample(names, registers), *(rng.choice(names) for _ in range(hops - registers))]
    handlers = [rng.choice(FRAGMENT_WORDS) for _ in range(hops)]
    coefficients = rng.sample([(m, c) for m in range(2, 30) for c in range(1, 30)], hops)  # each module computes its own
    chain = [f"pkg/{a}_{b}.py" for a, b in rng.sample([(a, b) for a in NOTE_WORDS for b in NOTE_WORDS], hops)]

    def module(lines: list[str]) -> str:
        return _pad(rng, filler_lines, lines, _code_filler)

    pointer = ["# This is the last note." if i == hops else f"# Next note: {chain[i]}" for i in range(hops + 1)]
    files = {"pkg/__init__.py": "", "pkg/start.py": module(
        [f"# The access key is `{key}`. It is written nowhere else.", pointer[0]])}
    for i, path in enumerate(chain):
        m, c = coefficients[i]
        files[path] = module([f"def {handlers[i]}(x): return x * {m} + {c}  # Note {i + 1} of {hops}: handles `{sets[i]}`.",
                              pointer[i + 1]])
    last = {r: max(i for i in range(hops) if sets[i] == r) for r in names}
    files[APP_FILE] = CODE_TEMPLATE + "ACCESS_KEY = ''\n" + "".join(
        f"\n\ndef {r}(x):\n    raise NotImplementedError('import the handler of `{r}`')\n" for r in names)
    reference = CODE_TEMPLATE + f"ACCESS_KEY = {key!r}\n" + "".join(
        wire(r, chain[last[r]], handlers[last[r]]) for r in names)
    files["test_app.py"] = ("import app\n\n\ndef test_app_is_wired():\n"
                            "    assert isinstance(app.ACCESS_KEY, str) and app.ACCESS_KEY\n"
                            f"    for name in {names!r}:\n        assert callable(getattr(app, name))\n")
    hidden = "import app\n\n\n" + "\n\n".join([
        f"def test_access_key():\n    assert app.ACCESS_KEY == {key!r}\n",
        *(f"def test_register_{r}():\n    assert [app.{r}(3), app.{r}(10)] == "
          f"{[3 * coefficients[last[r]][0] + coefficients[last[r]][1], 10 * coefficients[last[r]][0] + coefficients[last[r]][1]]!r}\n"
          for r in names)])

    def needed(j: int) -> list[list[str]]:  # j notes followed: each register's handler that stays final
        live = [[r, handlers[last[r]], chain[last[r]]] for r in names if last[r] < j]
        return [[key], *live, [_next(chain, j)]]

    return Task(
        task_id=task_id(split, hops, filler_lines, index, "words", registers, code=True),
        suite="LongHorizon",
        prompt=(f"Fix {APP_FILE}. Start by reading pkg/start.py and follow the notes to the last one "
                f"({hops} after the start). Set ACCESS_KEY to the key, and make each register "
                f"({', '.join(names)}) call the handler of the last note that handles it."),
        files=files,
        hidden_tests={"test_hidden.py": hidden},
        graded_tests=("test_hidden.py::test_access_key", *(f"test_hidden.py::test_register_{r}" for r in names)),
        observed_files=(APP_FILE,),
        metadata={
            "source_id": f"longhorizon-{split}-{index}",
            "read_order": json.dumps(["pkg/start.py", *chain]),
            "read_chars": str(sum(len(files[p]) for p in ["pkg/start.py", *chain])),
            "reference_files": json.dumps({APP_FILE: reference}),
            "carry_facts": json.dumps([needed(j) for j in range(hops + 1)]),
        },
    )


def carry_facts(task: Task, reads) -> list[list[str]]:
    """The facts later turns need once the agent has read `reads` (paths, any order): the chain
    counts as followed up to its longest prefix read. Each fact is a list of words that a
    summary line must hold together (a register's name and its value)."""
    order, read = json.loads(task.metadata["read_order"]), set(reads)
    j = next((i for i, path in enumerate(order) if path not in read), len(order))
    return json.loads(task.metadata["carry_facts"])[max(j - 1, 0)] if j else []


class LongHorizonSuite(TaskSuite):
    name = "LongHorizon"

    def __init__(self, options: LongHorizonOptions = LongHorizonOptions()):
        self.options = options

    def _size(self, split: str) -> int:
        return self.options.train_size if split == "train" else self.options.validation_size

    def task_ids(self, split: str) -> list[str]:
        check_split(split)
        o = self.options
        registers = o.registers if o.carry in ("registers", "code") else 0
        mix, fillers = o.hops_mix or (o.hops,), o.filler_mix or (o.filler_lines,)
        return [task_id(split, mix[i % len(mix)], fillers[i // len(mix) % len(fillers)], i // len(mix), o.secrets,
                        registers, o.carry == "code") for i in range(self._size(split))]

    def sample_ids(self, split: str, n: int) -> list[str]:
        """The first n: generated tasks are independent draws, in no grouped order."""
        ids = self.task_ids(split)
        return ids[:n] if n else ids

    def carry_facts(self, task: Task, reads) -> list[list[str]]:
        return carry_facts(task, reads)

    def scripted_policy(self, env):
        from environments.scripted import NoteChainPolicy
        return NoteChainPolicy(env, drop_key=self.options.expert_drop_key)

    def tokenizer_texts(self, env, tasks: int) -> list[str]:
        """The transcripts, and with word secrets every secret word as it appears (in backticks,
        in quotes; a note's path four times) 64 times, so a tokenizer trained on enough of this text
        makes each word one token: the policy's job is then to carry it, not to spell it."""
        texts = super().tokenizer_texts(env, tasks)
        if self.options.secrets == "words":
            texts += ["\n".join([f"`{w}` '{w}'" for w in KEY_WORDS + FRAGMENT_WORDS]
                                + [f"docs/note_{w}.md" for w in NOTE_WORDS for _ in range(4)])] * 64
        if self.options.carry == "registers":  # two-word paths and the register names
            texts += ["\n".join([f"docs/{w}/{v}.md" for w in NOTE_WORDS for v in NOTE_WORDS]
                                + [f"set `{r}` to {r.upper()} = '{r}'" for r in REGISTER_NAMES] * 8)] * 16
        if self.options.carry == "code":  # module paths, as files and as imports, the register names and
            # each handler after a space, as a module defines it, app.py imports it and a summary names it
            texts += ["\n".join([f"pkg/{w}_{v}.py from pkg.{w}_{v} import" for w in NOTE_WORDS for v in NOTE_WORDS]
                                + [f"handles `{r}` as {r}\ndef {r}(x):" for r in REGISTER_NAMES] * 8
                                + [f"def {w}(x): import {w}; return {w}(x)" for w in FRAGMENT_WORDS] * 8)] * 16
        return texts

    def summary_rubric(self, task: Task) -> list:
        """Did a summary keep what the run needs to continue: the key and the fragments found?"""
        from composer_jax.rl.judge import RubricItem

        reference = json.loads(task.metadata["reference_files"])
        if CONFIG_FILE not in reference or "FRAGMENTS = " not in reference[CONFIG_FILE]:
            # registers (code): the key and each register's final value (handler and its module)
            ([key], *registers, _) = json.loads(task.metadata["carry_facts"])[-1]
            return [RubricItem(f"Does the text state the access key {key}?", "essential"),
                    *(RubricItem(f"Does the text state that register {r} is {v[0]}"
                                 f"{f' (defined in {v[1]})' if len(v) > 1 else ''}?", "important")
                      for r, *v in registers),
                    RubricItem("Does the text invent an access key other than " + key + "?", "pitfall")]
        reference = reference[CONFIG_FILE]
        key = reference.split("ACCESS_KEY = ")[1].split("\n")[0].strip("'\"")
        fragments = reference.split("FRAGMENTS = ")[1].split("\n")[0].strip("'\"").split("-")
        items = [RubricItem(f"Does the text state the access key {key}?", "essential")]
        items += [RubricItem(f"Does the text mention the fragment `{f}`?", "important") for f in fragments]
        items.append(RubricItem("Does the text invent an access key other than " + key + "?", "pitfall"))
        return items

    def get(self, task_id: str) -> Task:
        """Any well-formed id is valid, so one suite can serve tasks of other difficulties."""
        match = ID_PATTERN.match(task_id)
        if not match:
            raise self.unknown(task_id)
        hops, filler, split, index = int(match[1]), int(match[2]), match[6], int(match[7])
        secrets, carry, registers = ("words" if match[3] else "hex", {"r": "registers", "c": "code"}.get(match[4], "fragments"),
                                     int(match[5] or 0))
        LongHorizonOptions(hops=hops, filler_lines=filler, secrets=secrets,  # validates the ranges
                           carry=carry, registers=registers or 3)
        return make_task(split, hops, filler, index, secrets, registers, carry == "code")
