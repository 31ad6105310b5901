"""The fault campaign's checker: what counts as lost, stored twice, a stall, a recovery."""

from __future__ import annotations

from collections import Counter

from tamto_cli.chaos.checker import (
    Fault,
    check,
    fault_stalls,
    recovery_time,
    render,
    served_during,
    stall_beyond_downtime,
)


def test_a_gap_during_a_fault_counts_less_the_downtime() -> None:
    fault = Fault("gateway", "kill", at=10.0, back=12.0)
    # Progress at 9.9, then nothing until 12.4: 0.5 s beyond the 2 s downtime.
    assert abs(stall_beyond_downtime([9.8, 9.9, 12.4, 12.5], [fault]) - 0.5) < 1e-9


def test_a_gap_no_fault_explains_counts_whole() -> None:
    assert abs(stall_beyond_downtime([1.0, 1.1, 3.1], []) - 2.0) < 1e-9
    fault_before = Fault("router", "stop", at=0.0, back=0.5)
    assert abs(stall_beyond_downtime([1.0, 1.1, 3.1], [fault_before]) - 2.0) < 1e-9


def test_overlapping_faults_count_once_and_the_time_between_faults_counts() -> None:
    overlapping = [Fault("etcd", "kill", 10.0, 11.5), Fault("storage", "kill", 11.0, 13.0)]
    assert abs(stall_beyond_downtime([9.9, 13.2], overlapping) - 0.3) < 1e-9
    apart = [Fault("etcd", "kill", 10.0, 10.5), Fault("storage", "kill", 11.5, 13.0)]
    # Down 2 s of the 3.3 s gap: between the faults the client could have moved on.
    assert abs(stall_beyond_downtime([9.9, 13.2], apart) - 1.3) < 1e-9


def test_recovery_counts_from_when_overlapping_faults_are_all_over() -> None:
    first, second = Fault("router", "kill", 10.0, 12.0), Fault("storage", "kill", 11.0, 15.0)
    progress = {"p": [9.0, 15.2]}
    assert abs((recovery_time(first, progress, [first, second]) or 0) - 0.2) < 1e-9


def test_recovery_is_the_slowest_clients_first_progress_after_the_fault() -> None:
    fault = Fault("storage", "kill", 10.0, 12.0)
    progress = {"p": [9.0, 12.1, 12.2], "c": [9.5, 12.7]}
    assert abs((recovery_time(fault, progress) or 0) - 0.7) < 1e-9
    assert recovery_time(fault, {"p": [9.0]}) is None


def test_lost_and_stored_twice_come_from_the_final_read() -> None:
    report = check(
        duration_s=60,
        faults=[Fault("router", "kill", 10.0, 11.0)],
        progress={"p": [9.0, 11.2], "c": [9.0, 11.3]},
        acked={"a", "b", "c"},
        delivered=Counter({"a": 1, "b": 2}),
        read_back=Counter({"a": 1, "b": 2}),
    )
    assert report.lost == ["c"]
    assert report.stored_twice == ["b"]
    assert report.delivered_twice == 1
    assert not report.passed
    text = render(report)
    assert "**FAIL**" in text
    assert "| acknowledged but lost | 1 |" in text


def test_a_clean_campaign_passes() -> None:
    report = check(
        duration_s=60,
        faults=[Fault("nats", "stop", 10.0, 12.0)],
        progress={"p": [9.4, 9.5, 12.3], "c": [9.8, 12.4]},
        acked={"a"},
        delivered=Counter({"a": 1}),
        read_back=Counter({"a": 1}),
    )
    assert report.passed
    assert abs(report.longest_stall_s - 0.8) < 1e-9


def test_served_during_is_how_long_into_the_fault_each_client_still_progressed() -> None:
    fault = Fault("etcd", "stop", at=10.0, back=20.0)
    served = served_during(fault, {"p": [9.0, 11.0, 13.5, 20.2], "c": [9.5, 20.3]})
    assert served == {"p": 3.5, "c": 0.0}


def test_each_stall_is_attributed_to_the_faults_its_gap_overlaps() -> None:
    router = Fault("router", "kill", at=10.0, back=12.0)
    etcd = Fault("etcd", "stop", at=20.0, back=21.0)
    storage = Fault("storage", "kill", at=30.0, back=31.0)
    progress = {
        # 0.5 s beyond the router's downtime; 0.08 s beyond etcd's (too short to count).
        "p": [9.9, 12.4, 19.97, 21.05],
        # 0.8 s beyond storage's downtime.
        "c": [29.9, 31.7],
    }
    stalls = fault_stalls(progress, [router, etcd, storage])
    assert [round(s, 6) for s in stalls] == [0.5, 0.0, 0.8]
    report = check(
        duration_s=40,
        faults=[router, etcd, storage],
        progress=progress,
        acked=[],
        delivered=Counter(),
        read_back=Counter(),
    )
    assert [round(o.stall_s, 6) for o in report.faults] == [0.5, 0.0, 0.8]
    rows = [r for r in render(report).splitlines() if r.startswith("| kill storage |")]
    assert rows[0].endswith("| 0.80 s |"), rows
