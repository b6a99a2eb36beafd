"""Per-operation figures and ratios from a pytest-benchmark JSON file of this directory's benchmarks.

    python -m pytest benchmarks/ --benchmark-only --benchmark-json=benchmarks/.build/core.json
    python benchmarks/report.py benchmarks/.build/core.json

pytest-benchmark times rounds; each round does extra_info["ops"] operations, so ns/op = seconds / ops * 1e9.
Ratios are of medians within the one run (ratios of minimums in brackets: the machine may be noisy).
"""

from __future__ import annotations

import json
import sys

# (label, numerator, denominator, target): names without their "test_"; a target is (">=" or "<=", bound)
AC = "add_cancel_{}_1e6"
RATIOS = [
    ("asyncio / wheel, add+cancel @1e6", AC.format("asyncio"), AC.format("wheel_c"), (">=", 12)),
    ("heapq / wheel, add+cancel @1e6", AC.format("heapq"), AC.format("wheel_c"), (">=", 2)),
    ("wheel / floor, add+cancel @1e6", AC.format("wheel_c"), AC.format("floor"), ("<=", 2)),
    ("wheel_py / wheel, add+cancel @1e6", AC.format("wheel_py"), AC.format("wheel_c"), None),
    ("heapq pop / advance, expire 1e6", "expire_heapq_1e6", "expire_wheel_c_1e6", (">=", 5)),
    ("wheel 1e7 / 1e3 pending", "scaling_wheel_c[1e7]", "scaling_wheel_c[1e3]", ("<=", 1.5)),
    ("heapq 1e7 / 1e3 pending", "scaling_heapq[1e7]", "scaling_heapq[1e3]", None),
    *[
        (f"heapq / wheel @{size}", f"scaling_heapq[{size}]", f"scaling_wheel_c[{size}]", None)
        for size in ("1e3", "1e5", "1e6", "1e7")
    ],
    *[
        (
            f"HeapScheduler / Scheduler, {op} @{size}",
            f"{name}_heap_scheduler[{size}]",
            f"{name}_scheduler[{size}]",
            None,
        )
        for op, name in (
            ("schedule+cancel", "schedule_cancel"),
            ("schedule+run", "schedule_run"),
            ("reschedule", "reschedule"),
        )
        for size in ("1e3", "1e4", "1e5", "1e6")
    ],
    *[
        (
            f"asyncio / wheel {b}, reset @{size}",
            f"reset[asyncio_{a}-{size}]",
            f"reset[wheel_{b}-{size}]",
            goal,
        )
        for a, b, goal in (
            ("handle", "handle", (">=", 10)),
            ("timeout", "timeout", None),
            ("handle", "task", None),
        )
        for size in ("1e4", "1e5")
    ],
    *[
        (
            f"{name} / timerwheel, {op} @1e6",
            f"compare[{name}-{op}-1e6]",
            f"compare[timerwheel-{op}-1e6]",
            None,
        )
        for op in ("schedule_cancel", "reset", "next_due")
        for name in ("asyncio", "uvloop", "sched", "twisted", "HeapScheduler", "AsyncScheduler")
    ],
    *[
        (
            f"{name} / timerwheel, schedule_expire @1e6",
            f"compare_expire[{name}-1e6]",
            "compare_expire[timerwheel-1e6]",
            None,
        )
        for name in ("asyncio", "uvloop", "sched", "twisted", "HeapScheduler", "AsyncScheduler")
    ],
    *[
        (f"APScheduler / KeyedScheduler, {op} @{size}", f"{name}_aps[{size}]", f"{name}_keyed[{size}]", None)
        for op, name in (("upsert known", "upsert_known"), ("upsert new", "upsert_new"), ("remove", "remove"))
        for size in ("1e3", "1e4", "1e5")
    ],
]


def main(path: str) -> None:
    with open(path) as f:
        data = json.load(f)
    per_op = {}  # name -> (median, min, iqr) in ns per operation
    print("| benchmark | group | median ns/op | min ns/op | IQR ns/op | rounds x ops |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for bench in sorted(data["benchmarks"], key=lambda b: (b["group"] or "", b["stats"]["median"])):
        ops, stats = bench["extra_info"]["ops"], bench["stats"]
        median, low, iqr = (stats[key] / ops * 1e9 for key in ("median", "min", "iqr"))
        per_op[bench["name"].removeprefix("test_")] = (median, low)
        print(
            f"| {bench['name']} | {bench['group']} | {median:,.1f} | {low:,.1f} | {iqr:,.1f} "
            f"| {stats['rounds']} x {ops:,} |"
        )
    print("\n| ratio | median (min) | target | met |")
    print("| --- | ---: | --- | --- |")
    for label, num, den, target in RATIOS:
        if num not in per_op or den not in per_op:
            continue
        ratio, ratio_min = per_op[num][0] / per_op[den][0], per_op[num][1] / per_op[den][1]
        goal = met = ""
        if target:
            sense, bound = target
            goal = f"{sense} {bound}"
            met = "yes" if (ratio >= bound if sense == ">=" else ratio <= bound) else "**no**"
        print(f"| {label} | {ratio:.2f} ({ratio_min:.2f}) | {goal} | {met} |")
    info = data["machine_info"]
    print(f"\n{info['python_implementation']} {info['python_version']}, {info['cpu'].get('brand_raw', '?')}")


if __name__ == "__main__":
    main(sys.argv[1])
