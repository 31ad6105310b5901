"""What a fault campaign hits, how hard and for how long: its options.

Split from `tamto_cli.chaos.campaign` (which runs a campaign) so that the command
line (`tamto_cli.chaos.command`), the tests and the fault schedule
(`tamto_cli.chaos.faults`) share one definition of a campaign's options and a
planned fault without importing the runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tamto_cli.chaos.network import NETWORK_KINDS
from tamto_local.cluster import INFRA, MAX_NODES
from tamto_local.layout import SERVICES

#: Every kind of process a fault can hit.
TARGETS = (*INFRA, *SERVICES)
KINDS = ("kill", "stop")
#: How long a fault may take to be over (its process serving, every client moving again).
RECOVERY_LIMIT_S = 60.0


@dataclass(frozen=True)
class PlannedFault:
    """One fault of a fixed plan: `kind` ("kill" or "stop") on `target`; a stop lasts `pause_s`."""

    target: str
    kind: str
    pause_s: float = 2.0
    #: A delay fault's milliseconds each way.
    delay_ms: int = 0


@dataclass(frozen=True)
class ChaosOptions:
    """How long, how hard and at what a campaign hits."""

    duration_s: float = 60.0
    targets: tuple[str, ...] = TARGETS
    kinds: tuple[str, ...] = KINDS
    #: Range of a SIGSTOP's length, seconds.
    pause_s: tuple[float, float] = (0.5, 3.0)
    #: Range of the time between two random faults (which may overlap), seconds: 3 s on
    #: average, one fault every 3-4 s on a busy 2-core machine (the campaign's own event
    #: loop is busy too), 150-200 in 10 minutes. At 1-3 s the data path was down most
    #: of the time, restarts there taking 5-10 s.
    gap_s: tuple[float, float] = (2.0, 4.0)
    producers: int = 2
    #: Messages per second each producer offers (in chunks of `chunk`, each awaited).
    rate: int = 200
    chunk: int = 10
    partitions: int = 2
    seed: int | None = None
    lease_ttl_s: int = 5
    #: Fixed faults, in order, instead of random ones (then `duration_s` is a minimum).
    plan: Sequence[PlannedFault] | None = None
    #: Quiet time before the first fault, seconds.
    warmup_s: float = 2.0
    #: Storage nodes and routers (`tamto up --nodes`); a fault hits one process of a target.
    nodes: int = 1
    #: Each node in a network namespace, and network faults among `kinds` (see the module).
    network: bool = False
    #: Range of a network fault's length, seconds (some shorter than a lease, some longer).
    cut_s: tuple[float, float] = (1.0, 8.0)
    #: Range of a delay fault's milliseconds each way.
    delay_ms: tuple[int, int] = (20, 300)

    def __post_init__(self) -> None:
        unknown = set(self.targets) - set(TARGETS)
        if unknown or not self.targets:
            raise ValueError(f"targets must be some of {', '.join(TARGETS)}; got {self.targets}")
        allowed = (*KINDS, *NETWORK_KINDS) if self.network else KINDS
        if set(self.kinds) - set(allowed) or not self.kinds:
            raise ValueError(f"kinds must be some of {', '.join(allowed)}; got {self.kinds}")
        if self.network and self.nodes < 2:
            raise ValueError("network faults need a cluster: nodes must be 2 or more")
        if self.duration_s <= 0 or self.producers <= 0 or self.rate <= 0 or self.chunk <= 0:
            raise ValueError("duration, producers, rate and chunk must be positive")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes must be 1-{MAX_NODES}; got {self.nodes}")
