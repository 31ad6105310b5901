"""MQTT topics and Tamto streams: the rule mapping one onto the other, and MQTT's own
topic filter matching (`+`, `#`).

The rule (`--mqtt-stream-levels`, N, default 1): the first N levels of an MQTT
topic, joined with `.`, name the stream; the levels after them are the message's
topic within the stream. On a persistent stream that topic is the message's key
(levels joined with `/`: one MQTT topic keeps its order, all of it in one
partition); on an ephemeral stream it is the ephemeral topic, levels joined with
`.` (`+` becomes `*`; `#` stays `#`, which like MQTT's also matches the parent).
A topic of exactly N levels is a message without key (persistent) or of the empty
topic (ephemeral). A filter's stream levels must be literal: a subscription
cannot span streams.

The single-stream rule (`--mqtt-stream NAME`) maps every MQTT topic, whatever its
levels (`/a`, `$x/y`, `a//b`), to one persistent stream, the whole topic being the
message's key: any filter works (`#`, `+/+`, `/#`), matched by MQTT's rules over
the whole topic, so a filter starting with a wildcard does not match a topic
starting with `$` (MQTT-4.7.2-1). A message published without a key by other
means is delivered under the stream's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from tamto_common.errors import InvalidArgument
from tamto_common.names import check_name
from tamto_gateway.topics import TopicPattern, check_topic


@dataclass(frozen=True, slots=True)
class Address:
    """Where an MQTT topic or filter points: a stream, and the levels after it."""

    #: The MQTT levels naming the stream, as written (`a/b` for stream `a.b`).
    prefix: str
    stream: str
    rest: tuple[str, ...]

    @property
    def key(self) -> bytes | None:
        """The key of a message published to this topic on a persistent stream."""
        return "/".join(self.rest).encode() if self.rest else None

    @property
    def ephemeral_topic(self) -> str:
        """The ephemeral topic of a message published to this topic."""
        topic = ".".join(self.rest)
        check_topic(topic)
        return topic

    @property
    def ephemeral_pattern(self) -> TopicPattern:
        """The ephemeral pattern of this filter."""
        return TopicPattern.parse(".".join("*" if w == "+" else w for w in self.rest))


@dataclass(frozen=True, slots=True)
class TopicRule:
    """The first `stream_levels` levels name the stream (module docstring)."""

    stream_levels: int = 1
    #: The single stream every topic maps to ("": the levels rule).
    single_stream: str = ""

    def topic(self, name: str) -> Address:
        """The address of a PUBLISH's topic name."""
        return self._address(name, "topic")

    def filter(self, topic_filter: str) -> Address:
        """The address of a SUBSCRIBE's topic filter (`InvalidArgument` if it is not one,
        or if a wildcard stands among its stream levels)."""
        check_filter(topic_filter)
        return self._address(topic_filter, "filter")

    def _address(self, text: str, what: str) -> Address:
        levels = text.split("/")
        if self.single_stream:
            return Address("", self.single_stream, tuple(levels))
        head = levels[: self.stream_levels]
        if len(levels) < self.stream_levels or {"+", "#"} & set(head):
            raise InvalidArgument(
                f"MQTT {what} {text!r} does not name a stream in its first "
                f"{self.stream_levels} level(s) (wildcards cannot span streams)"
            )
        stream = check_name("stream", ".".join(head))
        return Address("/".join(head), stream, tuple(levels[self.stream_levels :]))

    def delivered_topic(self, prefix: str, key_or_topic: str | None, separator: str) -> str:
        """The MQTT topic of a message delivered from stream levels `prefix` with this
        key (persistent, `/`) or ephemeral topic (`.`)."""
        if self.single_stream:
            return key_or_topic or self.single_stream
        if not key_or_topic:
            return prefix
        return f"{prefix}/{key_or_topic.replace(separator, '/')}"

    def topic_levels(self, key: str | None) -> tuple[str, ...]:
        """The levels filters are matched against for a persistent stream's message
        with this key (the rest of its MQTT topic; all of it with a single stream)."""
        if self.single_stream:
            return tuple((key or self.single_stream).split("/"))
        return tuple(key.split("/")) if key else ()

    def matches(self, filter_levels: tuple[str, ...], topic_levels: tuple[str, ...]) -> bool:
        """Whether a filter's levels after the stream's match a topic's (with a single
        stream they are whole, and a leading wildcard skips `$` topics)."""
        if (
            self.single_stream
            and topic_levels
            and topic_levels[0].startswith("$")
            and filter_levels[:1] in (("+",), ("#",))
        ):
            return False
        return matches(filter_levels, topic_levels)


def check_filter(topic_filter: str) -> None:
    """`InvalidArgument` unless `topic_filter` is a valid MQTT topic filter."""
    if not topic_filter:
        raise InvalidArgument("an MQTT topic filter cannot be empty")
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise InvalidArgument(f"'#' must be a whole last level, in {topic_filter!r}")
        if "+" in level and level != "+":
            raise InvalidArgument(f"'+' must be a whole level, in {topic_filter!r}")


def matches(filter_levels: tuple[str, ...], topic_levels: tuple[str, ...]) -> bool:
    """Whether an MQTT filter's levels match a topic's (`#` also matches the parent)."""
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)
