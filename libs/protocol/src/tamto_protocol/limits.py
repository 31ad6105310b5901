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
