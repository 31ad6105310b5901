from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuthRequest(_message.Message):
    __slots__ = ("api_key",)
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    api_key: str
    def __init__(self, api_key: _Optional[str] = ...) -> None: ...

class AuthResponse(_message.Message):
    __slots__ = ("token", "expires_at_unix", "subject")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    token: str
    expires_at_unix: int
    subject: str
    def __init__(self, token: _Optional[str] = ..., expires_at_unix: _Optional[int] = ..., subject: _Optional[str] = ...) -> None: ...

class GetJwksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetJwksResponse(_message.Message):
    __slots__ = ("jwks_json",)
    JWKS_JSON_FIELD_NUMBER: _ClassVar[int]
    jwks_json: str
    def __init__(self, jwks_json: _Optional[str] = ...) -> None: ...

class ApiKeyInfo(_message.Message):
    __slots__ = ("key_id", "identity", "disabled", "created_at_unix")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    identity: str
    disabled: bool
    created_at_unix: int
    def __init__(self, key_id: _Optional[str] = ..., identity: _Optional[str] = ..., disabled: _Optional[bool] = ..., created_at_unix: _Optional[int] = ...) -> None: ...

class Identity(_message.Message):
    __slots__ = ("name", "kind", "disabled", "created_at_unix", "keys", "roles")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    disabled: bool
    created_at_unix: int
    keys: _containers.RepeatedCompositeFieldContainer[ApiKeyInfo]
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., disabled: _Optional[bool] = ..., created_at_unix: _Optional[int] = ..., keys: _Optional[_Iterable[_Union[ApiKeyInfo, _Mapping]]] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateIdentityRequest(_message.Message):
    __slots__ = ("name", "kind")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class ListIdentitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListIdentitiesResponse(_message.Message):
    __slots__ = ("identities",)
    IDENTITIES_FIELD_NUMBER: _ClassVar[int]
    identities: _containers.RepeatedCompositeFieldContainer[Identity]
    def __init__(self, identities: _Optional[_Iterable[_Union[Identity, _Mapping]]] = ...) -> None: ...

class SetIdentityDisabledRequest(_message.Message):
    __slots__ = ("name", "disabled")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    name: str
    disabled: bool
    def __init__(self, name: _Optional[str] = ..., disabled: _Optional[bool] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("identity",)
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    identity: str
    def __init__(self, identity: _Optional[str] = ...) -> None: ...

class ApiKeyCreated(_message.Message):
    __slots__ = ("info", "api_key")
    INFO_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    info: ApiKeyInfo
    api_key: str
    def __init__(self, info: _Optional[_Union[ApiKeyInfo, _Mapping]] = ..., api_key: _Optional[str] = ...) -> None: ...

class SetApiKeyDisabledRequest(_message.Message):
    __slots__ = ("key_id", "disabled")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    disabled: bool
    def __init__(self, key_id: _Optional[str] = ..., disabled: _Optional[bool] = ...) -> None: ...

class RotateApiKeyRequest(_message.Message):
    __slots__ = ("key_id",)
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    def __init__(self, key_id: _Optional[str] = ...) -> None: ...

class DeleteApiKeyRequest(_message.Message):
    __slots__ = ("key_id",)
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    def __init__(self, key_id: _Optional[str] = ...) -> None: ...

class DeleteApiKeyResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ApiKeyInfo
    def __init__(self, info: _Optional[_Union[ApiKeyInfo, _Mapping]] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("permission", "pattern")
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    permission: str
    pattern: str
    def __init__(self, permission: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class Role(_message.Message):
    __slots__ = ("name", "grants")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, name: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class PutRoleRequest(_message.Message):
    __slots__ = ("role",)
    ROLE_FIELD_NUMBER: _ClassVar[int]
    role: Role
    def __init__(self, role: _Optional[_Union[Role, _Mapping]] = ...) -> None: ...

class DeleteRoleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteRoleResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListRolesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRolesResponse(_message.Message):
    __slots__ = ("roles",)
    ROLES_FIELD_NUMBER: _ClassVar[int]
    roles: _containers.RepeatedCompositeFieldContainer[Role]
    def __init__(self, roles: _Optional[_Iterable[_Union[Role, _Mapping]]] = ...) -> None: ...

class BindRoleRequest(_message.Message):
    __slots__ = ("subject", "role")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    role: str
    def __init__(self, subject: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class BindRoleResponse(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    def __init__(self, changed: _Optional[bool] = ...) -> None: ...

class ListBindingsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Binding(_message.Message):
    __slots__ = ("subject", "roles")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    subject: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subject: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class ListBindingsResponse(_message.Message):
    __slots__ = ("bindings",)
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    bindings: _containers.RepeatedCompositeFieldContainer[Binding]
    def __init__(self, bindings: _Optional[_Iterable[_Union[Binding, _Mapping]]] = ...) -> None: ...

class RotateSigningKeyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RotateSigningKeyResponse(_message.Message):
    __slots__ = ("current_kid", "kids")
    CURRENT_KID_FIELD_NUMBER: _ClassVar[int]
    KIDS_FIELD_NUMBER: _ClassVar[int]
    current_kid: str
    kids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, current_kid: _Optional[str] = ..., kids: _Optional[_Iterable[str]] = ...) -> None: ...
