"""Topics and topic patterns of ephemeral streams: the rules, the exact matcher, bus subjects.

An ephemeral message carries a topic (``a.b.c``); a consumer selects topics with
a pattern that has RabbitMQ's topic-exchange semantics exactly: words separated
by ``.``, ``*`` matches exactly one word, ``#`` matches zero or more words, at
any position and any number of times. Like RabbitMQ, the empty string is zero
words (so ``""`` matches only ``""``, and ``*`` does not match ``""``), while
``"a."`` is the two words ``a`` and the empty word.

NATS subjects cannot say all of that (``>`` is one-or-more and only last, and
tokens cannot be empty), so the bus is used only to narrow (`bus_subject`,
`bus_filter`) and `TopicPattern.matches` decides exactly, at the gateway that
delivers. This module is pure: no I/O, no protobuf.

Rules (checked by `check_topic` / `check_pattern`, which raise `InvalidArgument`
naming the problem): at most `MAX_TOPIC_BYTES` bytes of UTF-8; a topic's words
hold any characters but the separator ``.``, the wildcards ``*``, ``#`` (RabbitMQ)
and ``>`` (NATS), whitespace and control characters (possibly none); a pattern's
words are such words, ``*`` or ``#``. So a topic is a RabbitMQ routing key and
each word a NATS subject token; on the bus a word that could be read as one of
the tokens Tamto adds (``~``, the empty word; ``=``, the end) is escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from tamto_common.errors import InvalidArgument

#: The longest topic or pattern, in bytes of UTF-8 (RabbitMQ's routing key limit).
MAX_TOPIC_BYTES: Final = 255
MAX_PATTERN_BYTES: Final = 255
#: Every topic word matches this (patterns also allow `*` and `#` as whole words):
#: no separator, wildcard (RabbitMQ's `*` `#`, NATS's `>`), whitespace (`\s` is
#: Unicode's) or control character (Unicode's Cc: C0, DEL, C1).
WORD: Final = re.compile(r"[^.*#>\s\x00-\x1f\x7f-\x9f]*")
_FORBIDDEN: Final = (
    "'.' (it separates words), the wildcards '*', '#' and '>', whitespace and control characters"
)

#: Bus subjects of ephemeral traffic: ``tamto.eph.<stream>.<word>...<END>``.
BUS_PREFIX: Final = "tamto.eph"
#: The empty word on the bus (NATS tokens cannot be empty), and the escape of a
#: word that starts with it or is the end token (`_word_token`).
_EMPTY_WORD: Final = "~"
#: Closes every subject, so `>` (one or more tokens) can stand for `#` (zero or more).
_END: Final = "="


def words(topic: str) -> tuple[str, ...]:
    """The words of a topic or pattern, RabbitMQ's way: "" is no words at all."""
    return tuple(topic.split(".")) if topic else ()


def check_topic(topic: str) -> str:
    """Return `topic` if legal, else raise `InvalidArgument` naming the problem."""
    _check_length("topic", topic, MAX_TOPIC_BYTES)
    for index, word in enumerate(words(topic)):
        if not WORD.fullmatch(word):
            raise InvalidArgument(
                f"topic {topic[:80]!r}: word {index + 1} ({word[:40]!r}) holds "
                f"{_first_forbidden(word)}; a word may hold any UTF-8 but {_FORBIDDEN}"
            )
    return topic


def check_pattern(pattern: str) -> str:
    """Return `pattern` if legal, else raise `InvalidArgument` naming the problem."""
    _check_length("match pattern", pattern, MAX_PATTERN_BYTES)
    for index, word in enumerate(words(pattern)):
        if word not in ("*", "#") and not WORD.fullmatch(word):
            raise InvalidArgument(
                f"match pattern {pattern[:80]!r}: word {index + 1} ({word[:40]!r}) must be "
                f"'*', '#', or a topic word (any UTF-8 but {_FORBIDDEN}); it holds "
                f"{_first_forbidden(word)}"
            )
    return pattern


def _check_length(what: str, text: str, limit: int) -> None:
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise InvalidArgument(f"{what} is {size} bytes long (UTF-8); at most {limit} are allowed")


def _first_forbidden(word: str) -> str:
    for char in word:
        if not WORD.fullmatch(char):
            return f"{char!r} (U+{ord(char):04X})"
    return "nothing forbidden"


@dataclass(frozen=True)
class TopicPattern:
    """A checked pattern, matching topics exactly as RabbitMQ's topic exchange does."""

    text: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> TopicPattern:
        """Check `text` (`InvalidArgument` if illegal) and compile it."""
        return _parse(check_pattern(text))

    def matches(self, topic: str) -> bool:
        """Whether `topic` (a legal topic) is selected by this pattern."""
        return _matches(self.parts, words(topic))

    def bus_filter(self, stream: str) -> str:
        """The narrowest NATS subscription subject that sees every topic this pattern
        matches: the words before the first `#` (`*` is NATS's `*` too), then `>` if
        there is a `#`, else the end token."""
        out = [BUS_PREFIX, stream_token(stream)]
        for part in self.parts:
            if part == "#":
                out.append(">")
                return ".".join(out)
            out.append("*" if part == "*" else _word_token(part))
        out.append(_END)
        return ".".join(out)


def bus_subject(stream: str, topic: str) -> str:
    """The NATS subject a message of `topic` on `stream` travels on."""
    return ".".join(
        [BUS_PREFIX, stream_token(stream), *(_word_token(w) for w in words(topic)), _END]
    )


def topic_of_subject(subject: str) -> str:
    """The topic a `bus_subject` carries (its stream token is skipped)."""
    tokens = subject.split(".")[3:-1]
    return ".".join(_word_of_token(t) for t in tokens)


def stream_token(stream: str) -> str:
    """`stream` as one bus subject token."""
    # Stream names hold letters, digits, '.', '_', '-': '.' becomes '~' (in no name).
    return stream.replace(".", "~")


def _word_token(word: str) -> str:
    """A word as a bus token: the empty word is `~`; a word that starts with `~` or is
    `=` (the end token) gets a `~` in front; any other is itself."""
    if not word:
        return _EMPTY_WORD
    if word[0] == _EMPTY_WORD or word == _END:
        return _EMPTY_WORD + word
    return word


def _word_of_token(token: str) -> str:
    return token[1:] if token[0] == _EMPTY_WORD else token


@lru_cache(maxsize=4096)
def _parse(text: str) -> TopicPattern:
    parts: list[str] = []
    for part in words(text):
        if part == "#" and parts and parts[-1] == "#":
            continue  # `#.#` is `#`
        parts.append(part)
    return TopicPattern(text, tuple(parts))


def _matches(parts: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    """Pattern words against topic words; `#` zero or more words, `*` exactly one.

    Dynamic programming over (pattern position, topic position), each row one
    integer used as a bit set (bit j: the pattern's first parts can consume
    exactly the first j words): O(pattern words) integer operations after one pass
    over the topic, not a Python step per (part, word) pair, which cost a gateway
    milliseconds per subscription for patterns and topics at their length limits.
    """
    n = len(topic)
    everything = (1 << (n + 1)) - 1
    at: dict[str, int] = {}  # word -> bits j + 1 where topic word j is that word
    for j, word in enumerate(topic):
        at[word] = at.get(word, 0) | 1 << (j + 1)
    reachable = 1
    for part in parts:
        if part == "#":  # from the lowest reachable position on, everything
            reachable = everything & ~((reachable & -reachable) - 1) if reachable else 0
        else:
            reachable = (reachable << 1) & (everything - 1 if part == "*" else at.get(part, 0))
        if not reachable:
            return False
    return bool(reachable >> n & 1)
