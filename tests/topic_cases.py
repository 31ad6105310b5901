"""The topic-matching conformance table: RabbitMQ's own topic-exchange test matrix
(every binding against every routing key of its `topic_matching` test), plus
empty-word cases. Each row is (pattern, topic, matches).

One table, run twice: against the pure matcher (`tests/test_topics.py`) and
against the real system, consumers on one gateway and a producer on another
(`tests/e2e/test_ephemeral.py`).
"""

from __future__ import annotations

from typing import Final

#: name -> pattern, as bound in RabbitMQ's test.
BINDINGS: Final[dict[str, str]] = {
    "t1": "a.b.c",
    "t2": "a.*.c",
    "t3": "a.#.b",
    "t4": "a.b.b.c",
    "t5": "#",
    "t6": "#.#",
    "t7": "#.b",
    "t8": "*.*",
    "t9": "a.*",
    "t10": "*.b.c",
    "t11": "a.#",
    "t12": "a.#.#",
    "t13": "b.b.c",
    "t14": "a.b.b",
    "t15": "a.b",
    "t16": "b.c",
    "t17": "",
    "t18": "*.*.*",
    "t19": "vodka.martini",
    "t21": "*.#",
    "t22": "#.*.#",
    "t23": "*.#.#",
    "t24": "#.#.#",
    "t25": "*",
    "t26": "#.b.#",
    "t27": "args-test",
    # Empty words (RabbitMQ splits "a..b" into three words, the middle one empty).
    "e1": "a.*.b",
    "e2": "*.*",
    "e3": "a.",
    "e4": "#.",
    "e5": ".#",
}

#: topic -> the bindings that select it (RabbitMQ's expectations, plus the e* rows).
EXPECTED: Final[dict[str, set[str]]] = {
    "a.b.c": {
        "t1",
        "t2",
        "t5",
        "t6",
        "t10",
        "t11",
        "t12",
        "t18",
        "t21",
        "t22",
        "t23",
        "t24",
        "t26",
    },
    "a.b": {
        "t3",
        "t5",
        "t6",
        "t7",
        "t8",
        "t9",
        "t11",
        "t12",
        "t15",
        "t21",
        "t22",
        "t23",
        "t24",
        "t26",
        "e2",
    },
    "a.b.b": {
        "t3",
        "t5",
        "t6",
        "t7",
        "t11",
        "t12",
        "t14",
        "t18",
        "t21",
        "t22",
        "t23",
        "t24",
        "t26",
        "e1",
    },
    "": {"t5", "t6", "t17", "t24"},
    "b.c.c": {"t5", "t6", "t18", "t21", "t22", "t23", "t24", "t26"},
    "a.a.a.a.a": {"t5", "t6", "t11", "t12", "t21", "t22", "t23", "t24"},
    "vodka.gin": {"t5", "t6", "t8", "t21", "t22", "t23", "t24", "e2"},
    "vodka.martini": {"t5", "t6", "t8", "t19", "t21", "t22", "t23", "t24", "e2"},
    "b.b.c": {"t5", "t6", "t10", "t13", "t18", "t21", "t22", "t23", "t24", "t26"},
    "nothing.here.at.all": {"t5", "t6", "t21", "t22", "t23", "t24"},
    "oneword": {"t5", "t6", "t21", "t22", "t23", "t24", "t25"},
    "args-test": {"t5", "t6", "t21", "t22", "t23", "t24", "t25", "t27"},
    "a..b": {"t3", "t5", "t6", "t7", "t11", "t12", "t18", "t21", "t22", "t23", "t24", "t26", "e1"},
    "a.": {"t5", "t6", "t8", "t9", "t11", "t12", "t21", "t22", "t23", "t24", "e2", "e3", "e4"},
    ".": {"t5", "t6", "t8", "t21", "t22", "t23", "t24", "e2", "e4", "e5"},
}

#: (pattern, topic, matches) for every binding and topic.
CASES: Final[list[tuple[str, str, bool]]] = [
    (pattern, topic, name in selected)
    for topic, selected in EXPECTED.items()
    for name, pattern in BINDINGS.items()
]

#: Topic words beside RabbitMQ's rule (a routing key is any UTF-8 of at most 255
#: bytes; only `.` separates words, and `*`/`#` are wildcards as whole binding words)
#: and NATS's (a subject token is any characters but `.` and whitespace, `*` and `>`
#: are wildcards as whole tokens, and the docs advise against control characters).
#: Each row: (word, legal in Tamto). Tamto takes every word both take, minus any
#: holding a wildcard character and minus control characters.
WORDS: Final[list[tuple[str, bool]]] = [
    ("orders", True),
    ("user@example", True),
    ("a:b", True),
    ("é", True),
    ("日本", True),
    ("🎉", True),
    ("a-b_c", True),
    ("~", True),  # Tamto's empty word on the bus: escaped there
    ("~x", True),
    ("=", True),  # Tamto's end token on the bus: escaped there
    ("a=b", True),
    ("$SYS", True),
    ("quote'\"", True),
    ("a/b\\c", True),
    ("", True),  # the empty word (RabbitMQ takes it; NATS's token cannot be: escaped)
    ("a b", False),  # whitespace: NATS refuses
    ("a\tb", False),
    ("\u00a0", False),  # no-break space: whitespace
    ("\u2003", False),  # em space
    ("a\x00", False),  # control characters
    ("\x1b[0m", False),
    ("\x7f", False),
    ("\x85", False),  # NEL: C1 control
    ("*", False),  # wildcards, whole or inside a word
    ("#", False),
    (">", False),
    ("a*", False),
    ("a#b", False),
    ("a>", False),
]
