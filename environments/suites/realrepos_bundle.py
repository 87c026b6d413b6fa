"""A built RealRepos suite as one archive, to run it on another machine (an accelerator host, a
fresh clone) without its ~45-minute build: each package's cached build and its pinned sdist.

    python -m environments.suites.realrepos --export realrepos.tar.gz   # here, after a build
    python -m environments.suites.realrepos --import realrepos.tar.gz   # there, then train

The archive is untrusted on import: only the files its manifest names, regular files under
`suites/` and `realrepos/sdists/`; an sdist must match its pin's sha256 and a build must carry the
key this checkout's generator code gives the package (a build made by other code is skipped: the
suite would rebuild that package). Every file lands by rename, so a cut-off import leaves nothing
half-written.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile

from environments.suites import cache
from environments.suites import realrepos_pins as pins
from environments.suites import realrepos_sources as sources
from environments.suites.realrepos_build import _package_key

MANIFEST = "manifest.json"


def _build_name(package: sources.Package) -> str:
    return f"suites/realrepos-{package.label}-{_package_key(package)}.json"


def _sdist_name(cache_dir: str | None, package: sources.Package) -> str:
    path = sources.fetch(package, cache_dir, pip_args=("--no-index",))  # the cached copy, never a download
    return "realrepos/sdists/" + os.path.basename(path)


def export_bundle(out: str, packages=pins.PACKAGES, cache_dir: str | None = None) -> dict:
    """Write the built `packages` and their sdists to the tar.gz `out` (atomically); returns its
    manifest. Raises naming every package that is not built here."""
    root = cache_dir or cache.default_cache_dir()
    entries, missing = {}, []
    for package in packages:
        build = _build_name(package)
        try:
            sdist = _sdist_name(cache_dir, package)
        except sources.SourceError:
            sdist = None
        if sdist is None or not os.path.exists(os.path.join(root, build)):
            missing.append(package.label)
            continue
        entries[package.label] = dict(build=build, sdist=sdist, sha256=package.sha256)
    if missing:
        raise FileNotFoundError(f"not built in {root}: {', '.join(missing)}; run "
                                "`python -m environments.suites.realrepos` first")
    manifest = dict(packages=entries)
    directory = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".partial")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            data = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for entry in entries.values():
                for name in (entry["build"], entry["sdist"]):
                    tar.add(os.path.join(root, name), arcname=name, recursive=False)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return manifest


def import_bundle(path: str, packages=pins.PACKAGES, cache_dir: str | None = None) -> dict:
    """Unpack the bundle at `path` into the cache; returns {"imported": [labels], "skipped":
    {label: why}}. Raises on an archive that names files outside its manifest's places."""
    root = cache_dir or cache.default_cache_dir()
    pinned = {p.label: p for p in packages}
    imported, skipped = [], {}
    with tarfile.open(path, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        if MANIFEST not in members:
            raise ValueError(f"{path}: not a RealRepos bundle (no {MANIFEST})")
        manifest = json.loads(tar.extractfile(members[MANIFEST]).read())
        for label, entry in manifest.get("packages", {}).items():
            package = pinned.get(label)
            if package is None:
                skipped[label] = "not pinned in this checkout"
                continue
            if entry["build"] != _build_name(package):
                skipped[label] = ("built by other generator code or pin (key differs): the suite "
                                  "rebuilds it")
                continue
            sdist = entry["sdist"]
            if not (sdist.startswith("realrepos/sdists/") and "/" not in sdist[len("realrepos/sdists/"):]
                    and os.path.basename(sdist).lower().startswith(sources._sdist_prefix(package))):
                raise ValueError(f"{path}: {label}'s sdist path {sdist!r} is not a pinned sdist's")
            files = {}
            for name in (entry["build"], sdist):
                member = members.get(name)
                if member is None or not member.isfile():
                    raise ValueError(f"{path}: {name!r} is missing or not a regular file")
                files[name] = tar.extractfile(member).read()
            if hashlib.sha256(files[sdist]).hexdigest() != package.sha256:
                skipped[label] = "sdist checksum mismatch"
                continue
            json.loads(files[entry["build"]])  # a corrupt build is refused before anything lands
            for name, data in files.items():
                target = os.path.join(root, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), suffix=".tmp")
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            imported.append(label)
    for label, why in skipped.items():
        print(f"RealRepos bundle: skipped {label}: {why}", file=sys.stderr)
    return dict(imported=imported, skipped=skipped)
