"""What `tamto status` says about each partition's ledgers: which are unavailable (no
quorum of replicas reachable), under-replicated (a replica down or not answering) or
healing (a replica being caught up or re-replicated by the owner), each with its cause.

A replica is *down* when its storage node is not registered in etcd, *not answering*
when it is registered but fails its health check (hung, e.g. SIGSTOP, or its lease not
expired yet after a crash), *healing* when the router that owns the partition reports it
(`tamto_router_healing_replicas`), and *up* otherwise. The current ledger (the last,
open one: the one appends go to) needs its ack quorum of replicas up or healing; an
earlier, closed ledger is readable while one of its replicas is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tamto_common.ledgers import Ledger, LedgerList

UP = "up"
DOWN = "down"
HUNG = "not answering"
HEALING = "healing"

UNAVAILABLE = "unavailable"
UNDER_REPLICATED = "under-replicated"

#: (stream, partition) -> replica -> why the owner is healing it.
Healing = Mapping[tuple[str, int], Mapping[str, str]]


@dataclass(frozen=True)
class Problem:
    """One ledger's trouble: `state` is unavailable, under-replicated or healing."""

    stream: str
    partition: int
    epoch: int
    state: str
    cause: str
    #: The replicas it is about (down, not answering, or healing).
    nodes: tuple[str, ...]

    def line(self) -> str:
        return f"{self.stream}/{self.partition} epoch {self.epoch}: {self.state}: {self.cause}"


def replica_states(
    ledger: Ledger, storage: Mapping[str, str], healing: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Each replica of `ledger`: (state, why), from the registered storage nodes' health
    (`storage`: instance id -> SERVING, NOT_SERVING or UNREACHABLE) and what the owner
    heals (`healing`: only for the current ledger)."""
    states: dict[str, tuple[str, str]] = {}
    for node in ledger.ensemble:
        health = storage.get(node)
        if health is None:
            states[node] = (DOWN, f"{node} down (not registered)")
        elif health != "SERVING":
            states[node] = (HUNG, f"{node} not answering ({health}: hung, or just died)")
        elif node in healing:
            states[node] = (HEALING, f"{node} {healing[node]}")
        else:
            states[node] = (UP, "")
    return states


def ledger_problems(
    ledgers: LedgerList, storage: Mapping[str, str], healing: Healing
) -> list[Problem]:
    """The problems of one partition's ledgers, oldest ledger first."""
    found: list[Problem] = []
    key = (ledgers.stream, ledgers.partition)
    for i, ledger in enumerate(ledgers.ledgers):
        current = i == len(ledgers.ledgers) - 1
        states = replica_states(ledger, storage, healing.get(key, {}) if current else {})
        for state, cause, kinds in _problems_of(ledger, states, current):
            nodes = tuple(n for n, (s, _) in states.items() if s in kinds)
            found.append(Problem(*key, ledger.epoch, state, cause, nodes))
    return found


def _problems_of(
    ledger: Ledger, states: Mapping[str, tuple[str, str]], current: bool
) -> list[tuple[str, str, tuple[str, ...]]]:
    """(problem, cause, replica states it is about) for one ledger."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    out = [why for state, why in states.values() if state in (DOWN, HUNG)]
    reachable = sum(1 for state, _ in states.values() if state in (UP, HEALING))
    appended = current and ledger.is_open  # appends need its quorum; a closed one, a reader
    needed = ledger.ack_quorum if appended else 1
    if reachable < needed:
        cause = (
            f"no quorum: {reachable} of {len(ledger.ensemble)} replicas reachable, {needed} needed"
            if appended
            else "no replica reachable to read it from"
        )
        found.append((UNAVAILABLE, f"{cause} ({'; '.join(out)})", (DOWN, HUNG)))
    elif out:
        found.append((UNDER_REPLICATED, "; ".join(out), (DOWN, HUNG)))
    healed = [why for state, why in states.values() if state == HEALING]
    if healed:
        found.append((HEALING, "; ".join(healed), (HEALING,)))
    return found


def all_problems(
    lists: list[LedgerList], storage: Mapping[str, str], healing: Healing
) -> list[Problem]:
    return [p for ledgers in lists for p in ledger_problems(ledgers, storage, healing)]


def ledgers_json(
    lists: list[LedgerList],
    storage: Mapping[str, str],
    healing: Healing,
    owners: Mapping[tuple[str, int], str],
) -> list[dict[str, object]]:
    """`tamto status --json`'s partitions: owner, ledgers with each replica's state, and
    the problems with their causes."""
    out: list[dict[str, object]] = []
    for ledgers in lists:
        key = (ledgers.stream, ledgers.partition)
        entries = []
        for i, ledger in enumerate(ledgers.ledgers):
            current = i == len(ledgers.ledgers) - 1
            states = replica_states(ledger, storage, healing.get(key, {}) if current else {})
            entries.append(
                {
                    "epoch": ledger.epoch,
                    "first_offset": ledger.first_offset,
                    "last_offset": ledger.last_offset,
                    "state": ledger.state,
                    "ack_quorum": ledger.ack_quorum,
                    "replicas": [
                        {"node": node, "state": state, "cause": why}
                        for node, (state, why) in states.items()
                    ],
                }
            )
        problems = ledger_problems(ledgers, storage, healing)
        out.append(
            {
                "stream": ledgers.stream,
                "partition": ledgers.partition,
                "owner": owners.get(key),
                "ledgers": entries,
                "problems": [
                    {k: v for k, v in asdict(p).items() if k not in ("stream", "partition")}
                    for p in problems
                ],
            }
        )
    return out
