"""API-key identities against a real etcd: salted hashes only, one answer for every refusal."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable

import aetcd
import pytest

from tamto_auth.identities import KEYS_PREFIX, ApiKeyStore, KeyRecord
from tamto_common.apikeys import ApiKey, new_api_key
from tamto_common.errors import DataLoss, InvalidArgument, NotFound, Unauthenticated


@pytest.fixture
def etcd(etcd_client: aetcd.Client) -> aetcd.Client:
    return etcd_client


@pytest.fixture
def prefix() -> str:
    return f"/tamto/test/auth/{uuid.uuid4().hex}/"


@pytest.fixture
def store(etcd: aetcd.Client, prefix: str) -> ApiKeyStore:
    return ApiKeyStore(etcd, prefix=prefix)


async def raw(etcd: aetcd.Client, prefix: str, key: ApiKey) -> bytes:
    got = await etcd.get(f"{prefix}{key.key_id}".encode())
    assert got is not None
    value: bytes = got.value
    return value


async def refusal(store: ApiKeyStore, key: ApiKey) -> str:
    with pytest.raises(Unauthenticated) as info:
        await store.verify(key)
    return str(info.value)


async def test_ensured_key_verifies_as_its_subject(store: ApiKeyStore) -> None:
    key = new_api_key()
    await store.ensure_key(key, "alice")
    assert await store.verify(key) == "alice"


async def test_default_layout_is_tamto_auth_keys(etcd: aetcd.Client) -> None:
    key = new_api_key()
    await ApiKeyStore(etcd).ensure_key(key, "bob")
    try:
        record = KeyRecord.from_json(await raw(etcd, KEYS_PREFIX, key))
        assert record.subject == "bob"
        assert KEYS_PREFIX == "/tamto/auth/keys/"
    finally:
        await etcd.delete(f"{KEYS_PREFIX}{key.key_id}".encode())


async def test_etcd_holds_a_salted_hash_never_the_secret(
    store: ApiKeyStore, etcd: aetcd.Client, prefix: str
) -> None:
    key, other = new_api_key(), new_api_key()
    await store.ensure_key(key, "alice")
    await store.ensure_key(other, "alice")
    data = await raw(etcd, prefix, key)
    assert key.secret.encode() not in data
    assert str(key).encode() not in data
    stored = json.loads(data)
    assert set(stored) == {
        "subject",
        "salt",
        "hash",
        "created_at",
        "disabled",
        "kdf",
        "n",
        "r",
        "p",
    }
    assert stored["kdf"] == "scrypt"
    assert stored["n"] >= 2**14
    assert len(base64.b64decode(stored["hash"])) == 32
    # Per-key salts: equal subjects never give comparable records.
    other_stored = json.loads(await raw(etcd, prefix, other))
    assert stored["salt"] != other_stored["salt"]


async def test_ensure_is_idempotent(store: ApiKeyStore, etcd: aetcd.Client, prefix: str) -> None:
    key = new_api_key()
    await store.ensure_key(key, "alice")
    before = await raw(etcd, prefix, key)
    await store.ensure_key(key, "alice")
    assert await raw(etcd, prefix, key) == before


async def test_ensure_with_a_new_subject_replaces_the_record(store: ApiKeyStore) -> None:
    key = new_api_key()
    await store.ensure_key(key, "alice")
    await store.ensure_key(key, "carol")
    assert await store.verify(key) == "carol"


async def test_ensure_with_a_new_secret_replaces_the_old_one(store: ApiKeyStore) -> None:
    old = new_api_key()
    new = ApiKey(key_id=old.key_id, secret=new_api_key().secret)
    await store.ensure_key(old, "alice")
    await store.ensure_key(new, "alice")
    assert await store.verify(new) == "alice"
    assert await refusal(store, old) == "invalid API key"


async def test_unknown_disabled_and_wrong_secret_get_the_same_answer(store: ApiKeyStore) -> None:
    unknown = new_api_key()
    wrong = new_api_key()
    await store.ensure_key(wrong, "alice")
    wrong_secret = ApiKey(key_id=wrong.key_id, secret=new_api_key().secret)
    disabled = new_api_key()
    await store.ensure_key(disabled, "alice")
    await store.set_disabled(disabled.key_id, True)
    answers = {
        await refusal(store, unknown),
        await refusal(store, wrong_secret),
        await refusal(store, disabled),
    }
    assert answers == {"invalid API key"}


async def test_disable_and_enable(store: ApiKeyStore) -> None:
    key = new_api_key()
    await store.ensure_key(key, "alice")
    await store.set_disabled(key.key_id, True)
    await refusal(store, key)
    # Ensuring the same key again does not undo an operator's disable.
    await store.ensure_key(key, "alice")
    await refusal(store, key)
    await store.set_disabled(key.key_id, False)
    assert await store.verify(key) == "alice"


async def test_disabling_an_unknown_key_is_not_found(store: ApiKeyStore) -> None:
    with pytest.raises(NotFound):
        await store.set_disabled(new_api_key().key_id, True)


@pytest.mark.parametrize(
    "key_id",
    ["", "abc", "ABCDEF012345", "0123456789abc", "01234567/9ab", "../keys/0123", None],
)
async def test_a_malformed_key_id_is_invalid_argument_before_any_lookup(
    store: ApiKeyStore, etcd: aetcd.Client, prefix: str, key_id: str | None
) -> None:
    key = new_api_key()
    await store.ensure_key(key, "alice")
    # None: a whole API key pasted where its id belongs (never echoed back).
    bad = str(key) if key_id is None else key_id
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.set_disabled(bad, True),
        lambda: store.delete(bad),
        lambda: store.get(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match=r"^key_id must be 12 lowercase hex") as info:
            await call()
        assert key.secret not in str(info.value)
    assert await store.verify(key) == "alice"  # nothing was changed


async def test_corrupt_record_is_data_corruption(
    store: ApiKeyStore, etcd: aetcd.Client, prefix: str
) -> None:
    key = new_api_key()
    await etcd.put(f"{prefix}{key.key_id}".encode(), b"{not json")
    with pytest.raises(DataLoss):
        await store.verify(key)
