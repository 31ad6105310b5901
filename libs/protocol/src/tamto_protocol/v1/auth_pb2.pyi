from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

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
