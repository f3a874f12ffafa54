#!/usr/bin/env python3
"""Writes docs/test_vectors.json: idgen's published ID test vectors.

Every ID here is computed from the layouts' formulas written out below, in Python, and from
nothing of idgen's Rust code: the vectors are a second opinion the core, the client and the
database are checked against (core/tests/test_vectors.rs, client/tests/node.rs). The sonyflake
preset's IDs are computed twice, with the generic formula and with Sonyflake v1's own
(github.com/sony/sonyflake, sonyflake.go: toSonyflakeTime, Compose), and must agree.

    python3 scripts/test_vectors.py           # writes docs/test_vectors.json
    python3 scripts/test_vectors.py --check   # fails if the file differs from what it would write

Python 3 standard library only.
"""

import datetime
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "docs" / "test_vectors.json"
UTC = datetime.timezone.utc
UNIX_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
MS = datetime.timedelta(milliseconds=1)


def unix_ms(year, month, day, hour=0, minute=0, second=0, ms=0):
    at = datetime.datetime(year, month, day, hour, minute, second, ms * 1000, tzinfo=UTC)
    return (at - UNIX_EPOCH) // MS


def iso(ms):
    """ISO-8601 in UTC with milliseconds, as idgen writes times: 2025-01-01T00:00:00.000Z."""
    at = UNIX_EPOCH + datetime.timedelta(milliseconds=ms)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


# The layouts, from their definitions (issue 20 and the preset table of docs/concepts.md), not from idgen's code.
LAYOUTS = [
    {
        # Twitter's Snowflake cut, idgen's default since 0.1.0: 41 bits of ms since 2025 | 10 | 12.
        "name": "snowflake",
        "preset": "snowflake",
        "epoch_unix_ms": unix_ms(2025, 1, 1),
        "time_unit_ms": 1,
        "time_bits": 41,
        "machine_bits": 10,
        "sequence_bits": 12,
        "field_order": "time_machine_sequence",
    },
    {
        # Sonyflake v1's default: 39 bits of 10 ms since 2014-09-01 | 8-bit sequence | 16-bit machine id.
        "name": "sonyflake",
        "preset": "sonyflake",
        "epoch_unix_ms": unix_ms(2014, 9, 1),
        "time_unit_ms": 10,
        "time_bits": 39,
        "machine_bits": 16,
        "sequence_bits": 8,
        "field_order": "time_sequence_machine",
    },
    {
        # Every ID at most 2^53 - 1: 37 bits of 10 ms since 2025 | 8-bit machine id | 8-bit sequence.
        "name": "js_safe",
        "preset": "js_safe",
        "epoch_unix_ms": unix_ms(2025, 1, 1),
        "time_unit_ms": 10,
        "time_bits": 37,
        "machine_bits": 8,
        "sequence_bits": 8,
        "field_order": "time_machine_sequence",
    },
    {
        # No preset: 100 ms ticks since 2020, 12-bit machine ids below a 10-bit sequence, 58 bits.
        "name": "custom_100ms",
        "preset": "custom",
        "epoch_unix_ms": unix_ms(2020, 1, 1),
        "time_unit_ms": 100,
        "time_bits": 36,
        "machine_bits": 12,
        "sequence_bits": 10,
        "field_order": "time_sequence_machine",
    },
]


class OutsideLayout(ValueError):
    pass


def ticks_of(layout, ms):
    """Ticks since the epoch; refused before the epoch and past the time field."""
    ticks = (ms - layout["epoch_unix_ms"]) // layout["time_unit_ms"]
    if ticks < 0 or ticks >= 1 << layout["time_bits"]:
        raise OutsideLayout(ms)
    return ticks


def compose(layout, ms, machine_id, sequence):
    """The ID of (time, machine id, sequence) in `layout`: the formula of the description."""
    m, s = layout["machine_bits"], layout["sequence_bits"]
    assert 0 <= machine_id < 1 << m and 0 <= sequence < 1 << s, (machine_id, sequence)
    ticks = ticks_of(layout, ms)
    if layout["field_order"] == "time_machine_sequence":
        return ticks << (m + s) | machine_id << s | sequence
    assert layout["field_order"] == "time_sequence_machine"
    return ticks << (m + s) | sequence << m | machine_id


# Sonyflake v1 (sonyflake.go), transcribed: times in Sonyflake time units of 1e7 ns (10 ms).
SONYFLAKE_TIME_UNIT_NS = 10**7
SONYFLAKE_BIT_LEN_TIME, SONYFLAKE_BIT_LEN_SEQUENCE = 39, 8
SONYFLAKE_BIT_LEN_MACHINE_ID = 63 - SONYFLAKE_BIT_LEN_TIME - SONYFLAKE_BIT_LEN_SEQUENCE
# Settings.StartTime zero: time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC), in Unix ns.
SONYFLAKE_START_NS = (datetime.datetime(2014, 9, 1, tzinfo=UTC) - UNIX_EPOCH) // datetime.timedelta(microseconds=1) * 1000


def to_sonyflake_time(unix_ns):
    # Go's integer division truncates toward zero; every time here is after 1970.
    assert unix_ns >= 0
    return unix_ns // SONYFLAKE_TIME_UNIT_NS


def sonyflake_v1_compose(ms, sequence, machine_id):
    """Sonyflake v1's Compose(sf, t, sequence, machineID) with the default start time."""
    elapsed = to_sonyflake_time(ms * 10**6) - to_sonyflake_time(SONYFLAKE_START_NS)
    if elapsed < 0:
        raise OutsideLayout("ErrStartTimeAhead")
    if elapsed >= 1 << SONYFLAKE_BIT_LEN_TIME:
        raise OutsideLayout("ErrOverTimeLimit")
    assert sequence < 1 << SONYFLAKE_BIT_LEN_SEQUENCE and machine_id < 1 << SONYFLAKE_BIT_LEN_MACHINE_ID
    return (
        elapsed << (SONYFLAKE_BIT_LEN_SEQUENCE + SONYFLAKE_BIT_LEN_MACHINE_ID)
        | sequence << SONYFLAKE_BIT_LEN_MACHINE_ID
        | machine_id
    )


def last_unix_ms(layout):
    """The last millisecond of the last tick the time field holds."""
    return layout["epoch_unix_ms"] + (1 << layout["time_bits"]) * layout["time_unit_ms"] - 1


def inputs(layout):
    """(unix_ms, machine_id, sequence) of the vectors: each field at 0 and at its limit, a time inside
    a tick, realistic times, and the last millisecond the layout can stamp."""
    epoch, unit = layout["epoch_unix_ms"], layout["time_unit_ms"]
    max_machine, max_sequence = (1 << layout["machine_bits"]) - 1, (1 << layout["sequence_bits"]) - 1
    last = last_unix_ms(layout)
    rows = [
        (epoch, 0, 0),
        (epoch, max_machine, max_sequence),
        (epoch + unit - 1, 1, 1),
        (epoch + unit, 0, 0),
        (epoch + unit, max_machine, 0),
        (epoch + unit, 0, max_sequence),
    ]
    if layout["name"] == "snowflake":
        # The vectors published for the default layout before 0.7.0, unchanged.
        rows += [
            (1735689600001, 0, 0),
            (1764403200000, 0, 0),
            (1764403200123, 37, 0),
            (1764403200123, 37, 1),
            (1764403202142, 0, 0),
            (1764403202142, 0, 1),
            (1764403202142, 512, 4095),
            (1798761600000, 1023, 0),
        ]
    else:
        rows += [
            (1764403200123, 37, 0),
            (1764403200123, 37, 1),
            (1764403202149, max_machine // 3, max_sequence // 5),
            (unix_ms(2026, 12, 2, 2, 55, 5, 678), max_machine, max_sequence),
        ]
    if layout["name"] == "sonyflake":
        # A 16-bit machine id, as Sonyflake derives it from the IP's lower 16 bits (10.0.171.205).
        rows.append((unix_ms(2026, 12, 2, 2, 55, 5, 678), 0xABCD, 0x12))
    rows += [(last, 0, 0), (last, max_machine, max_sequence)]
    return rows


def vectors(layout):
    out = []
    for ms, machine_id, sequence in inputs(layout):
        id_ = compose(layout, ms, machine_id, sequence)
        if layout["name"] == "sonyflake":
            own = sonyflake_v1_compose(ms, sequence, machine_id)
            assert own == id_, f"Sonyflake v1 gives {own}, the formula {id_}, for {(ms, machine_id, sequence)}"
        assert 0 <= id_ < 1 << 63
        ticks = ticks_of(layout, ms)
        tick_ms = layout["epoch_unix_ms"] + ticks * layout["time_unit_ms"]
        out.append(
            {
                "unix_ms": ms,
                "iso": iso(ms),
                "ticks": ticks,
                "tick_unix_ms": tick_ms,
                "tick_iso": iso(tick_ms),
                "machine_id": machine_id,
                "sequence": sequence,
                "id": id_,
                "id_text": str(id_),
            }
        )
    return out


def invalid(layout):
    last = last_unix_ms(layout)
    out = []
    for ms, why in [
        (layout["epoch_unix_ms"] - 1, "before the epoch"),
        (last + 1, f"past the layout's last millisecond ({iso(last)})"),
    ]:
        try:
            ticks_of(layout, ms)
        except OutsideLayout:
            pass
        else:
            raise AssertionError(f"{ms} is inside {layout['name']}")
        if layout["name"] == "sonyflake":
            try:
                sonyflake_v1_compose(ms, 0, 0)
            except OutsideLayout:
                pass
            else:
                raise AssertionError(f"Sonyflake v1 composes an ID at {ms}")
        out.append({"unix_ms": ms, "iso": iso(ms), "why": why})
    return out


def layout_entry(layout):
    m, s, t = layout["machine_bits"], layout["sequence_bits"], layout["time_bits"]
    max_id = (1 << (t + m + s)) - 1
    last = last_unix_ms(layout)
    assert compose(layout, last, (1 << m) - 1, (1 << s) - 1) == max_id
    if layout["name"] == "js_safe":
        # The preset's promise: its last tick's largest ID is JavaScript's Number.MAX_SAFE_INTEGER.
        assert max_id == 2**53 - 1, max_id
    return {
        "name": layout["name"],
        "preset": layout["preset"],
        "layout": {
            "epoch_unix_ms": layout["epoch_unix_ms"],
            "epoch": iso(layout["epoch_unix_ms"]),
            "time_unit_ms": layout["time_unit_ms"],
            "time_bits": t,
            "machine_bits": m,
            "sequence_bits": s,
            "field_order": layout["field_order"],
        },
        "machine_ids": 1 << m,
        "ids_per_second": (1 << s) * 1000 // layout["time_unit_ms"],
        "last_unix_ms": last,
        "last_iso": iso(last),
        "max_id": max_id,
        "max_id_text": str(max_id),
        "vectors": vectors(layout),
        "invalid": invalid(layout),
    }


DESCRIPTION = " ".join(
    """
idgen ID test vectors, format 2 (idgen 0.7.0; format 1, before it, had one top-level layout, vectors
and invalid for the default layout, which are now the snowflake entry's). For every preset
(snowflake, sonyflake, js_safe) and one custom layout, `layouts` gives the layout and vectors
(time, machine id, sequence) -> ID. A layout: epoch_unix_ms (epoch is the same instant, ISO-8601
UTC), time_unit_ms, time_bits, machine_bits, sequence_bits, field_order. With
ticks = floor((unix_ms - epoch_unix_ms) / time_unit_ms): field_order time_machine_sequence gives
id = ticks << (machine_bits + sequence_bits) | machine_id << sequence_bits | sequence;
time_sequence_machine gives id = ticks << (machine_bits + sequence_bits) | sequence << machine_bits
| machine_id. Every bit above the three fields, the sign bit included, is 0. A vector's unix_ms
may lie inside its tick: ticks and tick_unix_ms (tick_iso) say which tick, and tick_unix_ms is the
time the ID decodes to. id_text and max_id_text repeat the number as a decimal string, for
languages whose JSON numbers are doubles. Per layout: machine_ids (2^machine_bits), ids_per_second
(one holder's most), last_unix_ms (the last millisecond it can stamp), max_id (every field at its
largest; 2^53 - 1 for js_safe), and invalid: times outside the layout, which a generator refuses
(never wraps). Written by scripts/test_vectors.py from these formulas, independently of idgen's
code; the sonyflake entry is also computed with Sonyflake v1's own formula (github.com/sony/sonyflake,
sonyflake.go) and agrees with it.
""".split()
)


def document():
    return {
        "description": DESCRIPTION,
        "format": 2,
        "layouts": [layout_entry(layout) for layout in LAYOUTS],
    }


def main(argv):
    text = json.dumps(document(), indent=2) + "\n"
    if argv[1:] == ["--check"]:
        if OUT.read_text() != text:
            sys.exit(f"{OUT} is not what scripts/test_vectors.py writes: run it and review the diff")
        return
    if argv[1:]:
        sys.exit(__doc__)
    OUT.write_text(text)


if __name__ == "__main__":
    main(sys.argv)
