"""Connect to Ray and size worker pools to the cluster, with errors that say what to do."""
from __future__ import annotations

import math
import socket
import warnings

INSTALL_HINT = "pip install -e '.[ray]'"
PROBE_TIMEOUT_S = 5.0


class FleetUnavailableError(RuntimeError):
    """Ray is missing or no cluster is reachable; the message names the extra or the address."""


def require_ray():
    """The `ray` module, or one clear error naming the extra that installs it."""
    try:
        import ray
    except ImportError as e:
        raise FleetUnavailableError(f"the Ray environment fleet needs the `ray` extra: {INSTALL_HINT} "
                                    f"(or set fleet.backend='local'); import failed: {e}") from e
    return ray


def host_port(address: str) -> tuple[str, int]:
    """(host, port) of "host:port" or "ray://host:port"."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetUnavailableError(f"fleet.address={address!r}: expected '', 'auto', 'host:port' or "
                                    "'ray://host:port'")
    return host, int(port)


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when nothing listens at `address`: ray.init itself retries for minutes."""
    host, port = host_port(address)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise FleetUnavailableError(
            f"no Ray cluster reachable at fleet.address={address!r} ({e}); start one with "
            "`ray start --head` on the head node and pass its address, or use address='' for a "
            "private local Ray") from e


def connect(address: str = "", num_cpus: int = 0):
    """Join (or, with address "", start) a Ray cluster once per process; returns `ray`."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    try:
        if address == "":
            ray.init(num_cpus=num_cpus or None, include_dashboard=False, log_to_driver=False)
        else:
            if address != "auto":
                probe(address)
            ray.init(address=address, log_to_driver=False)
    except FleetUnavailableError:
        raise
    except (ConnectionError, RuntimeError, OSError) as e:
        raise FleetUnavailableError(f"could not connect to a Ray cluster at fleet.address={address!r}: {e}") from e
    return ray


def pool_size_that_fits(requested: int, cpus_per_worker: float, free_cpus: float) -> int:
    """The largest pool <= requested whose CPU reservations fit in `free_cpus`."""
    return min(requested, math.floor(free_cpus / cpus_per_worker + 1e-9))


def fit_pool_size(requested: int, cpus_per_worker: float, free_cpus: float) -> int:
    """`requested`, or with a warning the largest pool that fits; an error when none does."""
    size = pool_size_that_fits(requested, cpus_per_worker, free_cpus)
    if size < 1:
        raise FleetUnavailableError(f"the Ray cluster has {free_cpus:g} free CPUs: not enough for one env "
                                    f"worker at fleet.cpus_per_worker={cpus_per_worker:g}")
    if size < requested:
        warnings.warn(f"fleet.workers={requested} x {cpus_per_worker:g} CPUs does not fit the cluster's "
                      f"{free_cpus:g} free CPUs; starting {size} workers", stacklevel=2)
    return size
