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
naming the problem): at most `MAX_TOPIC_LENGTH` characters; a topic's words hold
only letters, digits, ``_`` and ``-`` (possibly none); a pattern's words are
such words, ``*`` or ``#``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from tamto_common.errors import InvalidArgument

MAX_TOPIC_LENGTH: Final = 255
MAX_PATTERN_LENGTH: Final = 255
#: Every topic and pattern word matches this (patterns also allow `*` and `#`).
WORD: Final = re.compile(r"[A-Za-z0-9_-]*")

#: Bus subjects of ephemeral traffic: ``tamto.eph.<stream>.<word>...<END>``.
BUS_PREFIX: Final = "tamto.eph"
#: The empty word on the bus (NATS tokens cannot be empty; `~` is in no word).
_EMPTY_WORD: Final = "~"
#: Closes every subject, so `>` (one or more tokens) can stand for `#` (zero or more).
_END: Final = "="


def words(topic: str) -> tuple[str, ...]:
    """The words of a topic or pattern, RabbitMQ's way: "" is no words at all."""
    return tuple(topic.split(".")) if topic else ()


def check_topic(topic: str) -> str:
    """Return `topic` if legal, else raise `InvalidArgument` naming the problem."""
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidArgument(
            f"topic is {len(topic)} characters long; at most {MAX_TOPIC_LENGTH} are allowed"
        )
    for index, word in enumerate(words(topic)):
        if not WORD.fullmatch(word):
            raise InvalidArgument(
                f"topic {topic[:80]!r}: word {index + 1} ({word[:40]!r}) may hold only "
                "letters, digits, '_' and '-' (words are separated by '.')"
            )
    return topic


def check_pattern(pattern: str) -> str:
    """Return `pattern` if legal, else raise `InvalidArgument` naming the problem."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidArgument(
            f"match pattern is {len(pattern)} characters long; at most "
            f"{MAX_PATTERN_LENGTH} are allowed"
        )
    for index, word in enumerate(words(pattern)):
        if word not in ("*", "#") and not WORD.fullmatch(word):
            raise InvalidArgument(
                f"match pattern {pattern[:80]!r}: word {index + 1} ({word[:40]!r}) must be "
                "'*', '#', or letters, digits, '_' and '-' (words are separated by '.')"
            )
    return pattern


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
        out = [BUS_PREFIX, _stream_token(stream)]
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
        [BUS_PREFIX, _stream_token(stream), *(_word_token(w) for w in words(topic)), _END]
    )


def topic_of_subject(subject: str) -> str:
    """The topic a `bus_subject` carries (its stream token is skipped)."""
    tokens = subject.split(".")[3:-1]
    return ".".join("" if t == _EMPTY_WORD else t for t in tokens)


def _stream_token(stream: str) -> str:
    # Stream names hold letters, digits, '.', '_', '-': '.' becomes '~' (in no name).
    return stream.replace(".", "~")


def _word_token(word: str) -> str:
    return word or _EMPTY_WORD


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
