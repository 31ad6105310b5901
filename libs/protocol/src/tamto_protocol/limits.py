"""How long the lists in one request may be: part of the contract between clients
and servers.

A server refuses a request over a limit with INVALID_ARGUMENT naming the field
and the limit, before it does any work per element; the SDK splits what it sends
to stay within them. Each limit keeps the work of one request at its ceiling
small enough to hold no server's event loop for long (docs/validation.md lists
every field, its bound and its cost).
"""

from __future__ import annotations

from typing import Final

#: Offset ranges in one ack, nack, term or in_progress request (`ranges`).
MAX_RANGES_PER_REQUEST: Final = 10_000

#: Grants in one role (`PutRoleRequest.role.grants`): every authorization looks
#: through the grants of the caller's roles.
MAX_GRANTS_PER_ROLE: Final = 1_000

#: Disjoint acked ranges a subscription keeps above its ack floor on one partition
#: (each gap between two is a message not acked): a consumer's acks that would keep
#: more are refused with RESOURCE_EXHAUSTED until it acks the gaps.
MAX_ACKED_RANGES: Final = 100_000

#: Ranges in one stored cursor (`CommitCursorRequest.acked_above_floor`): a router's
#: `MAX_ACKED_RANGES` with room for the ranges of its own acks (dead letters,
#: retention). Storage refuses a commit with more.
MAX_CURSOR_RANGES: Final = 2 * MAX_ACKED_RANGES
