"""A service's copy of the policy, and the checks every client call goes through.

One implementation for every service a client calls: the gateway, and routers
serving the direct path (docs/cluster.md section 5), so no decision is made
twice in two ways.

`PolicyCache` reads everything under `/tamto/auth/` in one etcd range read
(one consistent snapshot) and keeps it in memory. It reloads when the bus says
`tamto.events.auth.changed` (the auth service publishes it after each change,
so a change applies here within milliseconds) and every `refresh_s` in case an
event was missed. A reload is one task owned by the cache; events that arrive
while it runs coalesce into one more reload.

`Guard` is what a servicer calls: authenticate the bearer token, then check
a permission on a stream against the cached policy, auditing every refusal.
A token minted from an API key is refused once the snapshot says that key is
disabled or gone (disabled, deleted or rotated: within milliseconds of the
change, as for a disabled identity). A key the snapshot does not know may be
newer than it: the snapshot is read again once (shared by concurrent callers)
unless it was read after the token was minted. A permission the snapshot lacks is
looked up the same way before the call is refused, so a grant made before a token
was minted is in force for it even if its bus event has not arrived (as at a
cluster's start, when auth writes the development identity while routers load).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

import aetcd
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter

from tamto_common.audit import DENIED, AuditLog
from tamto_common.bus import EVENTS
from tamto_common.errors import TamtoError, Unauthenticated, Unavailable
from tamto_common.policy import (
    ALL_STREAMS,
    AUTH_CHANGED,
    AUTH_PREFIX,
    BINDINGS_PREFIX,
    IDENTITIES_PREFIX,
    KEYS_PREFIX,
    ROLES_PREFIX,
    IdentityRecord,
    Permission,
    Policy,
    Role,
    denied,
    key_disabled,
    parse_binding,
)
from tamto_common.tasks import cancel_and_wait
from tamto_common.tokens import Metadata, Principal, Verifier, bearer_token

log = structlog.get_logger(__name__)

DENIALS = Counter(
    "tamto_auth_denials",
    "Client calls refused by this service: unauthenticated (no valid token, a disabled "
    "identity or key) or permission (the token's subject lacks the permission)",
    ["reason"],
)
for _reason in ("unauthenticated", "permission"):  # every series from the start, at 0
    DENIALS.labels(_reason)


async def load_policy(etcd: aetcd.Client) -> Policy:
    """The policy as stored now, read in one range request."""
    loaded_at = time.time()
    identities: list[IdentityRecord] = []
    roles: list[Role] = []
    bindings: list[tuple[str, str]] = []
    api_keys: dict[str, bool] = {}
    for kv in await etcd.get_prefix(AUTH_PREFIX.encode()):
        key = kv.key.decode()
        if key.startswith(IDENTITIES_PREFIX):
            identities.append(IdentityRecord.from_json(kv.value))
        elif key.startswith(ROLES_PREFIX):
            roles.append(Role.from_json(kv.value))
        elif key.startswith(BINDINGS_PREFIX):
            bindings.append(parse_binding(kv.value))
        elif key.startswith(KEYS_PREFIX):
            api_keys[key.removeprefix(KEYS_PREFIX)] = key_disabled(kv.value)
    return Policy.build(identities, roles, bindings, api_keys, loaded_at)


#: How far auth's clock may run ahead of a gateway's when comparing a token's `iat`
#: with the time a policy snapshot was read.
CLOCK_SKEW_S = 2.0


class PolicyCache:
    """The current `Policy`, kept fresh from etcd on bus events and on a timer."""

    def __init__(
        self,
        etcd: aetcd.Client,
        bus: NatsClient | None,
        refresh_s: float,
    ) -> None:
        self._etcd = etcd
        self._bus = bus
        self._refresh_s = refresh_s
        self._policy = Policy()
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None
        self._signing_key_listeners: list[asyncio.Event] = []
        self._fresh_lock = asyncio.Lock()
        self.reloads = 0

    @property
    def policy(self) -> Policy:
        """The latest snapshot."""
        return self._policy

    def _keep(self, policy: Policy) -> None:
        """Use `policy` unless a snapshot read later is already in use."""
        if policy.loaded_at >= self._policy.loaded_at:
            self._policy = policy

    async def fresh(self, newer_than: float) -> Policy:
        """A snapshot read after `newer_than` (unix seconds): the current one if it
        is, else one read now (callers waiting together share one read)."""
        if self._policy.loaded_at > newer_than:
            return self._policy
        async with self._fresh_lock:
            if self._policy.loaded_at <= newer_than:
                try:
                    self._keep(await load_policy(self._etcd))
                except Exception as exc:
                    raise Unavailable(f"cannot read the security policy: {exc}") from None
        return self._policy

    def signing_key_events(self) -> asyncio.Event:
        """An event set whenever auth announces a new signing key (the caller clears it)."""
        event = asyncio.Event()
        self._signing_key_listeners.append(event)
        return event

    async def start(self) -> None:
        """Subscribe, load once (failing start if etcd cannot be read), start the reload
        task. Subscribed first: a change made after the load is announced after it too,
        and the event reloads (loaded first, a change between the load and the
        subscription would wait for the timer)."""
        if self._bus is not None:
            self._subscription = await self._bus.subscribe(
                f"{EVENTS}.{AUTH_CHANGED}", cb=self._on_event
            )
        self._policy = await load_policy(self._etcd)
        self._task = asyncio.create_task(self._run(), name="policy-reload")

    async def _on_event(self, msg: Msg) -> None:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            if json.loads(msg.data).get("kind") == "signing-key":
                for event in self._signing_key_listeners:
                    event.set()
        self._wanted.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), self._refresh_s)
            self._wanted.clear()
            try:
                self._keep(await load_policy(self._etcd))
                self.reloads += 1
            except Exception as exc:  # keep the last good policy; the next event or tick retries
                log.warning("policy reload failed", error=str(exc))

    async def stop(self) -> None:
        """Unsubscribe and stop the reload task."""
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
        await cancel_and_wait(self._task)


class Guard:
    """Authentication and authorization of one call, with denials audited."""

    def __init__(self, verifier: Verifier, cache: PolicyCache, audit: AuditLog) -> None:
        self._verifier = verifier
        self._cache = cache
        self.audit = audit

    @property
    def policy(self) -> Policy:
        """The cached policy in force."""
        return self._cache.policy

    async def catch_up(self) -> None:
        """Read the policy again now, so that a change just made is in force here
        when this returns (read-your-writes for the admin who made it). A failed
        read is logged and left to the bus event and the timer."""
        try:
            await self._cache.fresh(newer_than=time.time())
        except Unavailable as exc:
            log.warning("policy read after a change failed", error=str(exc))

    async def principal(self, metadata: Metadata | None, source: str, action: str) -> Principal:
        """The caller of a call with this metadata; `Unauthenticated` (audited) if none."""
        try:
            principal = await self._verifier.verify(bearer_token(metadata))
            if self._cache.policy.disabled(principal.subject):
                raise Unauthenticated(f"identity {principal.subject!r} is disabled")
            if principal.key_id is not None:
                await self._check_key(principal.key_id, principal.issued_at)
        except Unauthenticated as exc:
            DENIALS.labels("unauthenticated").inc()
            await self.audit.record(
                DENIED,
                actor="(unauthenticated)",
                action=action,
                target="token",
                outcome="unauthenticated",
                source=source,
                detail=str(exc),
            )
            raise
        return principal

    async def _check_key(self, key_id: str, issued_at: float) -> None:
        """Refuse a token whose API key is disabled, deleted or rotated."""
        usable = self._cache.policy.key_usable(key_id)
        if usable is None:  # deleted, or newer than the snapshot
            policy = await self._cache.fresh(newer_than=issued_at + CLOCK_SKEW_S)
            usable = policy.key_usable(key_id)
        if not usable:
            raise Unauthenticated(f"API key {key_id} of this token is disabled or deleted")

    async def _policy_for(self, principal: Principal, allowed: Callable[[Policy], bool]) -> bool:
        """Whether `allowed` holds in the cached policy, or, when that snapshot is older
        than `principal`'s token, in one read after the token was minted: a grant made
        just before (the bus event not yet here) is in force for it."""
        if allowed(self._cache.policy):
            return True
        newer_than = principal.issued_at + CLOCK_SKEW_S
        if self._cache.policy.loaded_at > newer_than:
            return False
        return allowed(await self._cache.fresh(newer_than))

    async def require(
        self, principal: Principal, permission: Permission, stream: str, source: str, action: str
    ) -> None:
        """Pass if `principal` holds `permission` on `stream`; else `PermissionDenied` (audited)."""
        if await self._policy_for(
            principal, lambda policy: policy.allows(principal.subject, permission, stream)
        ):
            return
        await self._deny(
            principal, denied(principal.subject, permission, f"stream {stream!r}"), source, action
        )

    async def require_any(
        self, principal: Principal, stream: str, source: str, action: str
    ) -> None:
        """Pass if `principal` holds any permission on `stream` (to describe it)."""
        if await self._policy_for(
            principal, lambda policy: policy.allows_any(principal.subject, stream)
        ):
            return
        error = denied(principal.subject, "publish, consume or admin", f"stream {stream!r}")
        await self._deny(principal, error, source, action)

    async def require_security_admin(self, principal: Principal, source: str, action: str) -> None:
        """Pass if `principal` holds admin on `*` (managing identities and policy)."""
        if await self._policy_for(
            principal, lambda policy: policy.is_security_admin(principal.subject)
        ):
            return
        error = denied(principal.subject, Permission.ADMIN, f"{ALL_STREAMS!r} (all streams)")
        await self._deny(principal, error, source, action)

    async def _deny(
        self, principal: Principal, error: TamtoError, source: str, action: str
    ) -> None:
        DENIALS.labels("permission").inc()
        await self.audit.record(
            DENIED,
            actor=principal.subject,
            action=action,
            target=str(error).rsplit(" on ", 1)[-1],
            outcome="denied",
            source=source,
            detail=str(error),
        )
        raise error
