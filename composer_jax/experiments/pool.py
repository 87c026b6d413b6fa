"""Pool the records of one experiment run with several seeds: per set and policy the passes over
every episode of every seed, and McNemar over the (task, seed) pairs.

    python -m composer_jax.experiments.pool runs/a/result.json runs/b/result.json --out pooled.json

The records must come from the same config but for `seed` (and `experiment.only`); anything else
that differs is named and nothing is written. The pooled record has the schema of one record
(experiments/records.py), with `seeds` and `files` listing what was pooled, and the runner's plot
beside it (OUT.png: pass rate with Wilson bands, reward, compaction error by set). The pooled tests
treat the pairs as independent; they are the same tasks under other seeds, so each seed's own
test (in its record) is the exact one.
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib

from composer_jax.experiments import records
from composer_jax.experiments.run import first_difference


class PoolError(ValueError):
    """Records that cannot be pooled; the message names the file and what differs."""


def read(paths: list[str]) -> dict[str, dict]:
    out = {}
    for path in paths:
        try:
            rec = json.loads(pathlib.Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PoolError(f"cannot read result file {path}: {e}") from e
        if "evaluations" not in rec or "config" not in rec:
            raise PoolError(f"{path} is not an experiment record (no `evaluations`/`config`: "
                            "written by python -m composer_jax.experiments.run)")
        out[path] = rec
    return out


def _recipe(rec: dict) -> dict:
    config = copy.deepcopy(rec["config"])
    config.pop("seed", None)
    config.get("experiment", {}).pop("only", None)
    return json.loads(json.dumps(config, default=str))


def pool(recs: dict[str, dict]) -> dict:
    if len(recs) < 2:
        raise PoolError(f"pooling needs two records or more, got {len(recs)}")
    (first_path, first), *rest = recs.items()
    for path, rec in rest:
        if _recipe(rec) != _recipe(first):
            raise PoolError(f"{path} ran another recipe than {first_path}: "
                            f"{first_difference(_recipe(first), _recipe(rec))}")
    seeds = [s for rec in recs.values() for s in rec["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise PoolError(f"seeds {seeds} repeat: the same episodes would count twice")
    from composer_jax.rl.learner import wilson

    evaluations = {}
    # in order of x, then name, as the runner plays them (a record on disk has its keys sorted)
    for set_name, point in sorted(first["evaluations"].items(), key=lambda kv: (kv[1].get("x", 0.0), kv[0])):
        policies = {}
        for name in point["policies"]:
            runs = [rec["evaluations"].get(set_name, {}).get("policies", {}).get(name) for rec in recs.values()]
            if any(r is None for r in runs):
                continue
            passed = sum((r["passed"] for r in runs), [])
            rate = sum(passed) / len(passed)
            mean = lambda key: (sum(r[key] * r["n"] for r in runs) / len(passed)  # noqa: E731
                                if all(r.get(key) is not None for r in runs) else None)
            policies[name] = dict(passed=passed, passes=int(sum(passed)), n=len(passed), pass_rate=rate,
                                  ci95=list(wilson(rate, len(passed))),
                                  **{k: mean(k) for k in records.SERIES if k != "pass_rate"},
                                  per_seed=[dict(seed=s, pass_rate=r["pass_rate"], passes=r["passes"], n=r["n"])
                                            for s, r in zip(seeds, runs)])
        evaluations[set_name] = dict(point, policies=policies)
    pairs = first["config"]["experiment"].get("pairs", ())
    curves = records.series(evaluations, list(first["config"]["experiment"]["policies"]))
    return dict(experiment=first["experiment"], seeds=seeds, files=list(recs), config=first["config"],
                command=[rec["command"] for rec in recs.values()], evaluations=evaluations,
                paired=records.paired(evaluations, pairs), series=curves, **records.flat(curves))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+", help="result JSONs of experiments.run, one per seed")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        pooled = pool(read(args.records))
    except PoolError as e:
        raise SystemExit(f"error: {e}") from None
    records.write_result(args.out, pooled, quiet=True)
    if len(pooled["evaluations"]) > 1:
        records.plot(pooled["series"], pathlib.Path(args.out).with_suffix(".png"),
                     f"{pooled['experiment']}: seeds {', '.join(map(str, pooled['seeds']))} pooled")
    print(json.dumps(records.summary(pooled), indent=1))


if __name__ == "__main__":
    main()
