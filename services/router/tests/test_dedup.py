from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pyarrow as pa

from tamto_router.dedup import (
    DedupWindow,
    id_sequence,
    message_offsets,
    split_sequence_id,
)
from tamto_router.dedup_runs import IdSequence


def ids(*values: str | None) -> pa.Array:
    return pa.array(values, type=pa.string())


def test_batches_without_ids_skip_the_check() -> None:
    window = DedupWindow(60_000_000)
    plan = window.plan(ids(None, None), now_us=0)
    assert plan.keep is None
    assert plan.kept == 2


def test_seen_ids_are_duplicates_answered_with_their_original_offset() -> None:
    window = DedupWindow(60_000_000)
    window.record(ids("a", "b", None), [10, 11, 12], time_us=1_000)
    plan = window.plan(ids("b", "c", None, "a"), now_us=2_000)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [False, True, True, False]
    assert plan.kept == 2
    assert message_offsets(plan, 4, base=20) == [11, 20, 21, 10]


def test_repeats_within_one_batch_keep_the_first_copy() -> None:
    window = DedupWindow(60_000_000)
    plan = window.plan(ids("x", "x", "y", "x"), now_us=0)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [True, False, True, False]
    assert message_offsets(plan, 4, base=5) == [5, 5, 6, 5]


def test_ids_older_than_the_window_are_forgotten() -> None:
    window = DedupWindow(1_000)
    window.record(ids("old"), [1], time_us=0)
    window.record(ids("new"), [2], time_us=5_000)
    plan = window.plan(ids("old", "new"), now_us=5_500)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [True, False]
    assert len(window) == 1


def seq(prefix: str, *numbers: int) -> pa.Array:
    return ids(*(f"{prefix}:{n}" for n in numbers))


def test_split_sequence_id_accepts_only_canonical_numbers() -> None:
    assert split_sequence_id("p-1:0") == ("p-1", 0)
    assert split_sequence_id("a:b:17") == ("a:b", 17)
    assert split_sequence_id(":5") == ("", 5)
    for other in ("p", "p:", "p:01", "p:-1", "p:+1", "p: 1", "p:1x", "p:²", "p:" + "9" * 19):
        assert split_sequence_id(other) is None, other


def test_id_sequence_recognises_consecutive_and_increasing_runs() -> None:
    assert id_sequence(seq("p", 5, 6, 7)) == IdSequence("p", 5, 7)
    sparse = id_sequence(seq("p", 1, 4, 9))
    assert sparse is not None
    assert sparse.numbers is not None
    assert (sparse.first, sparse.last, list(sparse.numbers)) == (1, 9, [1, 4, 9])
    for other in (
        seq("p", 3, 2),  # decreasing
        seq("p", 1, 1),  # a repeat
        ids("p:1", "q:2"),  # two prefixes
        ids("p:1", "p:02", "p:3"),  # not canonical
        ids("p:1", None),
        ids("order-1", "order-2"),
    ):
        assert id_sequence(other) is None


def test_a_fresh_sequence_is_new_without_lookups_and_a_retry_gets_its_offsets() -> None:
    window = DedupWindow(60_000_000)
    first = window.plan(seq("p", 0, 1, 2), now_us=0)
    assert first.keep is None
    assert first.sequence == IdSequence("p", 0, 2)
    window.record(seq("p", 0, 1, 2), range(10, 13), time_us=0, sequence=first.sequence)
    second = window.plan(seq("p", 3, 4), now_us=1)
    assert second.keep is None
    assert second.sequence is not None
    window.record(seq("p", 3, 4), range(13, 15), time_us=1, sequence=second.sequence)
    assert len(window) == 5
    retry = window.plan(seq("p", 0, 1, 2), now_us=2)
    assert retry.keep is not None
    assert retry.kept == 0
    assert message_offsets(retry, 3, base=99) == [10, 11, 12]
    # A batch straddling what is known and what is new.
    straddle = window.plan(seq("p", 4, 5, 6), now_us=3)
    assert straddle.keep is not None
    assert straddle.keep.to_pylist() == [False, True, True]
    assert message_offsets(straddle, 3, base=20) == [14, 20, 21]


def test_sparse_sequences_are_found_by_number() -> None:
    window = DedupWindow(60_000_000)
    window.record(seq("p", 2, 5, 9), [30, 31, 32], time_us=0)
    plan = window.plan(ids("p:5", "p:6", "p:9", "p:2"), now_us=1)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [False, True, False, False]
    assert message_offsets(plan, 4, base=40) == [31, 40, 32, 30]


def test_sequence_ids_and_explicit_ids_of_the_same_form_are_one_id_space() -> None:
    window = DedupWindow(60_000_000)
    # An application's explicit ids that look like sequence ids, out of order.
    window.record(ids("order:17", "order:5"), [1, 2], time_us=0)
    window.record(ids("uuid-a"), [3], time_us=0)
    plan = window.plan(seq("order", 5, 6, 7), now_us=1)
    assert plan.keep is not None
    assert plan.keep.to_pylist() == [False, True, True]
    window.record(seq("order", 6, 7), [4, 5], time_us=1, sequence=None)
    plan = window.plan(seq("order", 16, 17, 18), now_us=2)
    assert message_offsets(plan, 3, base=9) == [9, 1, 10]
    plan = window.plan(ids("order:6", "uuid-a", "order:7"), now_us=2)
    assert message_offsets(plan, 3, base=9) == [4, 3, 5]
    assert len(window) == 5


def test_repeats_of_a_sequence_id_within_one_batch_keep_the_first_copy() -> None:
    window = DedupWindow(60_000_000)
    window.record(seq("p", 0, 1), range(0, 2), time_us=0)
    plan = window.plan(ids("p:2", "p:2", "p:1"), now_us=1)
    assert message_offsets(plan, 3, base=7) == [7, 7, 1]


def test_runs_expire_with_the_window_and_prefixes_are_forgotten() -> None:
    window = DedupWindow(1_000)
    window.record(seq("a", 0, 1, 2), range(0, 3), time_us=0)
    window.record(seq("b", 0, 1), range(3, 5), time_us=500)
    window.record(ids("b:9", "plain"), [5, 6], time_us=600)
    assert len(window) == 7
    plan = window.plan(seq("a", 0, 1, 2), now_us=1_200)  # a's run is older than the window
    assert plan.keep is None
    assert len(window) == 4
    assert window.plan(seq("b", 1), now_us=1_200).kept == 0
    window.plan(ids(None), now_us=1_700)  # no ids: no expiry either
    window.plan(ids("x"), now_us=1_700)
    assert len(window) == 0
    assert window._prefixes == {}


def test_rebuilding_from_the_log_recognises_sequences() -> None:
    window = DedupWindow(60_000_000)
    for base in range(0, 3000, 1000):  # what a takeover reads back, batch by batch
        window.record(
            pa.array([f"p-1:{i}" for i in range(base, base + 1000)]),
            list(range(base, base + 1000)),
            time_us=base,
        )
    assert len(window._seen) == 0
    assert len(window) == 3000
    plan = window.plan(seq("p-1", 1500, 3000), now_us=5000)
    assert message_offsets(plan, 2, base=3000) == [1500, 3000]


def test_truncate_forgets_ids_of_appends_that_never_became_durable() -> None:
    """A window kept across a reopen must not answer a retry with an offset the log
    lacks: ids recorded at or beyond the log's end are forgotten, the rest kept."""
    window = DedupWindow(60_000_000)
    window.record(seq("p", 0, 1, 2), range(0, 3), time_us=0)
    window.record(ids("x", "order:9"), [3, 4], time_us=1)
    window.record(seq("p", 3, 4), range(5, 7), time_us=2)  # never stored
    window.record(ids("y", "order:12"), [7, 8], time_us=3)  # never stored
    assert window.truncate(5) == 4
    assert len(window) == 5
    retry = window.plan(ids("p:3", "p:4", "y", "order:12", "x", "p:2"), now_us=4)
    assert retry.keep is not None
    assert retry.keep.to_pylist() == [True, True, True, True, False, False]
    assert message_offsets(retry, 6, base=5) == [5, 6, 7, 8, 3, 2]
    # The prefix's highest number went back too: the retried run is new again.
    assert window.plan(seq("p", 3, 4), now_us=4).sequence == IdSequence("p", 3, 4)
    assert window._prefixes["order"].highest == 9
    assert window.truncate(0) == 5
    assert len(window) == 0
    assert window._prefixes == {}


def test_truncate_keeps_the_stored_part_of_a_run() -> None:
    window = DedupWindow(60_000_000)
    window.record(seq("p", 0, 1, 2, 3), range(10, 14), time_us=0)
    window.record(seq("q", 1, 5, 9), range(14, 17), time_us=0)
    assert window.truncate(16) == 1
    assert window.truncate(12) == 4
    plan = window.plan(seq("p", 0, 1, 2), now_us=1)
    assert message_offsets(plan, 3, base=12) == [10, 11, 12]


def test_record_log_remembers_what_recording_batch_by_batch_does() -> None:
    """The rebuild's bulk path answers every id as `record` would, batch by batch, on a
    log of interleaved producers, a retried batch, sparse and non-canonical numbers,
    explicit ids and rows without ids."""
    rng = random.Random(19)
    batches: list[list[str | None]] = []
    next_number = {"p-0": 0, "p-1": 0, "order": 5}
    for _ in range(300):
        kind = rng.random()
        if kind < 0.6:
            prefix = rng.choice(["p-0", "p-1"])
            size = rng.randint(1, 12)
            first = next_number[prefix]
            batches.append([f"{prefix}:{first + i}" for i in range(size)])
            next_number[prefix] += size
        elif kind < 0.7 and batches:  # a retry of some earlier batch's ids
            batches.append(list(rng.choice(batches)))
        elif kind < 0.8:  # sparse numbers, and numbers that are not canonical
            n = next_number["order"]
            batches.append([f"order:{n}", f"order:{n + 7}", f"order:0{n}", "x:"])
            next_number["order"] += 10
        else:
            batches.append([None, f"uuid-{rng.randrange(50)}", None, "a:b:3"])
    by_batch, bulk = DedupWindow(60_000_000), DedupWindow(60_000_000)
    offset, rows, times = 0, [], []
    for t, batch in enumerate(batches):
        by_batch.record(ids(*batch), range(offset, offset + len(batch)), time_us=t)
        rows += batch
        times += [t] * len(batch)
        offset += len(batch)
    half = len(rows) // 2  # two stretches, as two reads from storage
    bulk.record_log(ids(*rows[:half]), 0, np.array(times[:half], np.int64))
    bulk.record_log(ids(*rows[half:]), half, np.array(times[half:], np.int64))
    probes = {r for r in rows if r is not None} | {"p-0:100000", "order:1", "nope"}
    for probe in sorted(probes):
        assert bulk._lookup(probe) == by_batch._lookup(probe), probe
    assert len(bulk) == len(by_batch)
    for prefix, state in by_batch._prefixes.items():
        assert bulk._prefixes[prefix].highest == state.highest, prefix
    # Expiry follows the rows' times: the first half's ids go first.
    bulk.plan(ids("late"), now_us=60_000_000 + times[half - 1] + 1)
    assert bulk._lookup(str(rows[0])) is None or rows[0] is None


def test_record_log_does_not_import_pandas() -> None:
    """Importing pandas held a restarted router's event loop for 3.7 s during its first
    rebuild (pyarrow imports it for `to_numpy` on booleans and Python fill values)."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from tamto_protocol.batch import sequence_ids\n"
        "from tamto_router.dedup import DedupWindow\n"
        "assert 'pandas' not in sys.modules\n"
        "ids = sequence_ids('p', 1, 3)\n"
        "DedupWindow(10**8).record_log(ids, 0, np.array([1, 2, 3], np.int64))\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr


def test_a_run_below_the_prefix_highest_in_a_gap_is_new_without_lookups() -> None:
    """Results of one input reaching a partition out of order from two function
    instances: each batch's span overlaps nothing remembered, so it is a run."""
    window = DedupWindow(60_000_000)
    window.record(seq("f", *range(2000, 2004)), range(0, 4), time_us=0)
    window.record(seq("f", *range(4000, 4004)), range(4, 8), time_us=1)
    below = window.plan(seq("f", 0, 1, 2, 3), now_us=2)  # below every run
    assert below.keep is None
    assert below.sequence == IdSequence("f", 0, 3)
    window.record(seq("f", 0, 1, 2, 3), range(8, 12), time_us=2, sequence=below.sequence)
    gap = window.plan(seq("f", 3000, 3002, 3003), now_us=3)  # between two runs, sparse
    assert gap.keep is None
    assert gap.sequence is not None
    window.record(seq("f", 3000, 3002, 3003), range(12, 15), time_us=3, sequence=gap.sequence)
    assert len(window._seen) == 0
    assert [run.first for run in window._prefixes["f"].runs] == [0, 2000, 3000, 4000]
    retry = window.plan(ids("f:3002", "f:1", "f:2003", "f:4000", "f:3001", "f:5"), now_us=4)
    assert message_offsets(retry, 6, base=15) == [13, 9, 3, 4, 15, 16]


def test_a_run_overlapping_a_remembered_one_is_planned_id_by_id() -> None:
    window = DedupWindow(60_000_000)
    window.record(seq("f", 10, 11, 12), range(0, 3), time_us=0)
    window.record(seq("f", 20, 21), range(3, 5), time_us=0)
    plan = window.plan(seq("f", 8, 9, 10), now_us=1)  # overlaps the first run's start
    assert plan.keep is not None
    assert message_offsets(plan, 3, base=5) == [5, 6, 0]
    # A sparse run reaching into a remembered run's span without sharing a number.
    plan = window.plan(seq("f", 13, 19, 20), now_us=1)
    assert message_offsets(plan, 3, base=5) == [5, 6, 3]
    plan = window.plan(seq("f", 13, 19, 23), now_us=1)
    assert plan.keep is None
    assert window.plan(seq("f", 14, 21), now_us=1).kept == 1
    window.record(seq("f", 4, 22), range(5, 7), time_us=1)  # around both runs: two runs
    assert len(window._seen) == 0
    plan = window.plan(seq("f", 12, 13, 22, 4), now_us=2)
    assert message_offsets(plan, 4, base=7) == [2, 7, 6, 5]


def test_a_batch_around_remembered_runs_is_new_and_kept_as_a_run_per_gap() -> None:
    """An instance's batch made of two deliveries with another instance's results in
    between: each part fills a gap, so the batch is new at once and exact after."""
    window = DedupWindow(60_000_000)
    window.record(seq("f", *range(10, 20), *range(30, 40)), range(0, 20), time_us=0)
    numbers = [*range(0, 10), *range(20, 30), *range(45, 50, 2)]
    plan = window.plan(seq("f", *numbers), now_us=1)
    assert plan.keep is None
    assert plan.sequence is not None
    window.record(seq("f", *numbers), range(20, 43), time_us=1, sequence=plan.sequence)
    assert len(window._seen) == 0
    spans = [(run.first, run.last, run.base_offset) for run in window._prefixes["f"].runs]
    assert spans == [(0, 9, 20), (10, 19, 0), (20, 29, 30), (30, 39, 10), (45, 49, 40)]
    retry = window.plan(ids("f:25", "f:5", "f:35", "f:47", "f:46", "f:19"), now_us=2)
    assert message_offsets(retry, 6, base=43) == [35, 25, 15, 41, 43, 9]
    # The first batch's two runs expire together, and truncating drops the second's.
    assert window.truncate(30) == 13
    window.plan(ids("x"), now_us=60_000_002)
    assert window._prefixes == {}


def test_interleaved_runs_of_two_producers_are_exact() -> None:
    """Coarsely interleaved numbers cut the remembered run into pieces; finely
    interleaved ones (more pieces than `MAX_RUNS_CROSSED`) go to the dictionary."""
    for step, in_dict in ((10, 0), (1, 100)):
        window = DedupWindow(60_000_000)
        evens = [n for n in range(400) if (n // step) % 2 == 0][:100]
        odds = [n for n in range(400) if (n // step) % 2 == 1][:100]
        for offset, numbers in ((0, evens), (100, odds)):
            plan = window.plan(seq("f", *numbers), now_us=0)
            assert plan.keep is None
            window.record(seq("f", *numbers), range(offset, offset + 100), 0, plan.sequence)
        assert len(window) == 200
        assert len(window._seen) == in_dict
        for offset, numbers in ((0, evens), (100, odds)):
            retry = window.plan(seq("f", *numbers), now_us=1)
            assert retry.kept == 0
            assert message_offsets(retry, 100, base=200) == list(range(offset, offset + 100))
        assert window.plan(seq("f", 1000, 1001), now_us=1).sequence == IdSequence("f", 1000, 1001)
    # The odds are in the dictionary: a run inside its span is checked id by id.
    inside = window.plan(seq("f", 5, 6, 7), now_us=1)
    assert message_offsets(inside, 3, base=200) == [102, 3, 103]
    assert window.plan(seq("f", 500, 501), now_us=1).keep is None


def test_repeats_inside_a_batch_in_a_gap_keep_the_first_copy() -> None:
    window = DedupWindow(60_000_000)
    window.record(seq("f", 100, 101), range(0, 2), time_us=0)
    plan = window.plan(seq("f", 5, 6, 6, 7, 100), now_us=1)
    assert plan.sequence is None
    assert message_offsets(plan, 5, base=2) == [2, 3, 3, 4, 0]


def test_ids_below_the_window_are_new_again_and_out_of_order_runs_expire_by_time() -> None:
    window = DedupWindow(1_000)
    window.record(seq("f", 50, 51), range(0, 2), time_us=0)
    window.record(seq("f", 10, 11), range(2, 4), time_us=600)  # lower numbers, later
    plan = window.plan(seq("f", 50, 51), now_us=1_200)  # the first run expired
    assert plan.keep is None
    assert [run.first for run in window._prefixes["f"].runs] == [10]
    assert window.plan(seq("f", 10, 11), now_us=1_200).kept == 0
    assert window.plan(seq("f", 10, 11), now_us=1_700).keep is None
    assert window._prefixes == {}


def test_truncate_drops_the_newest_runs_whatever_their_numbers() -> None:
    window = DedupWindow(60_000_000)
    window.record(seq("f", 20, 21), range(0, 2), time_us=0)
    window.record(seq("f", 5, 6), range(2, 4), time_us=1)  # never stored
    assert window.truncate(2) == 2
    assert [run.first for run in window._prefixes["f"].runs] == [20]
    plan = window.plan(seq("f", 5, 6, 21), now_us=2)
    assert message_offsets(plan, 3, base=2) == [2, 3, 1]


def test_the_window_answers_what_a_dictionary_of_every_id_would() -> None:
    """Random out-of-order, sparse, retried, interleaved and repeated batches of
    sequence ids, expiry and truncation: every row gets the offset a plain
    dictionary of ids (the definition of dedup) gives it."""
    rng = random.Random(34)
    window, reference = DedupWindow(2_000), dict[str, tuple[int, int]]()
    sent: list[list[str]] = []
    next_offset, now = 0, 0
    for _ in range(1200):
        now += rng.randint(0, 40)
        kind = rng.random()
        prefix = rng.choice(["f:in:0", "f:in:1"])
        start = rng.randrange(0, 400) * 10
        if kind < 0.55:  # a span of input offsets, filtered, in any order
            numbers = [n for n in range(start, start + 10) if rng.random() < 0.8]
        elif kind < 0.6:  # another instance's interleaved rows
            numbers = list(range(start + rng.randint(0, 1), start + 20, 2))
        elif kind < 0.65:  # an instance's batch of several deliveries, chunk by chunk
            chunk = rng.randint(2, 5)
            numbers = [n for n in range(start, start + 40) if (n // chunk) % 2 == kind < 0.625]
        elif kind < 0.75:  # a repeat inside the batch
            numbers = sorted([start, start + 1, start + 1, start + 3])
        elif kind < 0.95 and sent:
            sent.append(rng.choice(sent))
            numbers = []
        else:
            numbers = [start + 5, start + 2]  # decreasing
        if numbers:
            sent.append([f"{prefix}:{n}" for n in numbers])
        batch = sent[-1]
        if rng.random() < 0.02 and next_offset:
            end = rng.randint(max(0, next_offset - 30), next_offset)
            window.truncate(end)
            reference = {k: v for k, v in reference.items() if v[0] < end}
            next_offset = end
        reference = {k: v for k, v in reference.items() if v[1] >= now - 2_000}
        plan = window.plan(ids(*batch), now_us=now)
        expected: list[int] = []
        new: dict[str, int] = {}
        for message_id in batch:
            if message_id in reference:
                expected.append(reference[message_id][0])
            elif message_id not in new:
                new[message_id] = next_offset + len(new)
                expected.append(new[message_id])
            else:
                expected.append(new[message_id])
        assert message_offsets(plan, len(batch), next_offset) == expected, batch
        kept = [i for i in batch if i in new and new[i] >= next_offset]
        kept = list(dict.fromkeys(kept))
        assert plan.kept == len(kept)
        window.record(ids(*kept), range(next_offset, next_offset + len(kept)), now, plan.sequence)
        for message_id in kept:
            reference[message_id] = (new[message_id], now)
        next_offset += len(kept)
        assert len(window) == len(reference)


def test_a_batch_cutting_many_runs_is_kept_whole() -> None:
    """Cutting 20 remembered runs leaves 40 in the batch's span (more than it may
    cross to be planned at once): it is still recorded as runs, one per gap."""
    window = DedupWindow(60_000_000)
    for k in range(20):
        window.record(seq("f", 10 * k, 10 * k + 2), [2 * k, 2 * k + 1], time_us=0)
    numbers = [10 * k + 1 for k in range(20)]
    plan = window.plan(seq("f", *numbers), now_us=1)
    assert plan.keep is None
    window.record(seq("f", *numbers), range(40, 60), time_us=1, sequence=plan.sequence)
    assert len(window._seen) == 0
    assert len(window._prefixes["f"].runs) == 60
    retry = window.plan(seq("f", 1, 2, 191, 192), now_us=2)
    assert message_offsets(retry, 4, base=60) == [40, 1, 59, 39]
