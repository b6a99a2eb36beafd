"""`python -m timerwheel`: the backend in use and a short side-by-side timing; `bench` for the full suite.

    python -m timerwheel                    # the backend, and a few seconds of like against like
    python -m timerwheel bench              # every competitor, operation and size (minutes)
    python -m timerwheel bench --quick      # a few seconds
    python -m timerwheel bench --sizes 1e4,1e6 --ops schedule_cancel,reset --json out.json --plot out.png
    python -m timerwheel bench --report out.json     # the tables of a saved run (or of benchmarks/' JSON)
    python -m timerwheel bench --server 1000         # and an echo server's CPU per message (~1 minute more)
    python -m timerwheel keys --store URL list       # a store's keys: list, show, pause, resume, trigger,
                                                     # remove, preview (python -m timerwheel keys --help)

Every figure is a median of several rounds with the garbage collector off, each competitor in its own
process; docs/performance.md explains the methods and the results on one machine.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys

from . import BACKEND, __version__
from ._core import REASON
from .bench import COMPETITORS, OPERATIONS, format_report, load, plot, run_bench, worker_main
from .bench.scenario import server_section

DEFAULT_SIZES = [10**3, 10**4, 10**5, 10**6, 10**7]
QUICK_SIZES = [10**3, 10**4]
DEMO_SIZE = 10**5
#: How long the demo and the bench take on a 2-core machine (measured with `time`; said before they start)
DEMO_SECONDS = 15
QUICK_SECONDS = 12
FULL_MINUTES = 16  # (the default run, every competitor, 10^3 to 10^7 timers: 16 min 20 s, 12.6 GB at most)


def _list(text: str, allowed: list[str] | tuple[str, ...], what: str) -> list[str]:
    items = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))  # no duplicates
    unknown = [x for x in items if x not in allowed]
    if unknown or not items:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {unknown or text!r}; choose from {', '.join(allowed)}"
        )
    return items


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(x)) for x in text.split(",") if x.strip()]
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"sizes must be numbers such as 1e3,1e5, not {text!r}") from None
    if not sizes or min(sizes) < 1 or max(sizes) > 10**7:
        raise argparse.ArgumentTypeError(f"sizes must be between 1 and 1e7, got {text!r}")
    return sorted(set(sizes))


def bench(argv: list[str]) -> int:
    """`python -m timerwheel bench`."""
    parser = argparse.ArgumentParser(prog="python -m timerwheel bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 1e3 and 1e4, 3 short rounds: seconds")
    parser.add_argument("--sizes", type=_sizes, help="pending timers, e.g. 1e3,1e6 (default 1e3..1e7)")
    parser.add_argument(
        "--ops",
        type=lambda t: _list(t, OPERATIONS, "operation"),
        default=list(OPERATIONS),
        help=f"operations, from {', '.join(OPERATIONS)}",
    )
    parser.add_argument(
        "--competitors",
        type=lambda t: _list(t, list(COMPETITORS), "competitor"),
        default=list(COMPETITORS),
        help=f"from {', '.join(COMPETITORS)}",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds per figure (median); default 7, quick 3"
    )
    parser.add_argument("--budget", type=float, default=None, help="seconds per round (default 0.05)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="plot the results (needs matplotlib)")
    parser.add_argument(
        "--report",
        metavar="FILE",
        help="print (and --plot) the results in FILE: a --json file, or pytest-benchmark's from benchmarks/",
    )
    parser.add_argument(
        "--baseline", help="the competitor the ratios are to (default: the wheel of the backend in use)"
    )
    parser.add_argument(
        "--server",
        type=int,
        metavar="N",
        help="also run an echo server with N connections and a load generator (127.0.0.1) for each pattern"
        " of timers, on asyncio and uvloop: the server's CPU per message (about a minute; --quick: seconds)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the process of one competitor
    args = parser.parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    rounds = args.rounds if args.rounds is not None else 3 if args.quick else 7
    budget = args.budget if args.budget is not None else 0.01 if args.quick else 0.05
    if rounds < 1 or not 0 < budget < math.inf:
        parser.error("--rounds must be >= 1 and --budget a number of seconds > 0")
    if args.server is not None and not 1 <= args.server <= 19_000:
        parser.error("--server: connections must be between 1 and 19000 (one listening port, one process)")
    if args.worker:
        return worker_main(args.worker, sizes, args.ops, rounds, budget)
    if args.report:
        try:
            saved = load(args.report)
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--report: cannot read {args.report}: {exc}")
        print(format_report(saved, args.baseline))
        if args.plot:
            plot(saved, args.plot)
            print(f"wrote {args.plot}")
        return 0
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--plot needs matplotlib: python -m pip install 'timerwheel[plot]' (or matplotlib)")
    try:  # a bad path fails now, not after the run
        out = open(args.json, "w") if args.json else None  # noqa: SIM115
    except OSError as exc:
        parser.error(f"--json: cannot write {args.json}: {exc.strerror}")
    print(
        f"{len(args.competitors)} competitors x {len(sizes)} sizes x {len(args.ops)} operations, each "
        f"competitor in its own process: --quick takes about {QUICK_SECONDS} s on 2 cores, the full run "
        f"about {FULL_MINUTES} minutes and 13 GB of memory (up to 10^7 timers); on a terminal the progress "
        "line shows the time left.",
        file=sys.stderr,
        flush=True,
    )
    try:
        report = run_bench(args.competitors, sizes, args.ops, rounds, budget)
        if args.server is not None:
            report["server"] = server_section(args.server, quick=args.quick)
        print(format_report(report, args.baseline))
        if out is not None:
            json.dump(report, out, indent=1)
            print(f"\nwrote {args.json}")
    finally:
        if out is not None:
            out.close()
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    failed = [name for name, why in report["skipped"].items() if why.startswith("its worker process failed")]
    return 1 if failed else 0


#: What `python -m timerwheel` compares: like with like, each group against its own baseline.
DEMO = [
    (
        "The timing wheel against a heap",
        ["{wheel}", "heapq"],
        ["schedule_cancel", "reset", "schedule_expire"],
    ),
    (
        "The job engine against the same engine on a heap, and asyncio's call_later",
        ["Scheduler", "HeapScheduler", "asyncio"],
        ["schedule_cancel", "reset", "schedule_expire"],
    ),
    (
        "Timeouts: AsyncScheduler.timeout against asyncio.timeout",
        ["AsyncScheduler.timeout", "asyncio.timeout"],
        ["schedule_cancel", "reset"],
    ),
]


def demo() -> int:
    """`python -m timerwheel`: the backend, and a short comparison at 10^5 pending timers, like with like."""
    print(f"timerwheel {__version__}, backend: {BACKEND} ({REASON})")
    print(f"Python {platform.python_version()} ({platform.python_implementation()}) on {platform.machine()}")
    wheel = "timerwheel" if BACKEND == "cython" else "timerwheel-py"
    print(f"A short comparison at 10^5 pending timers: about {DEMO_SECONDS} s on 2 cores.", flush=True)
    for title, names, ops in DEMO:
        names = [n.format(wheel=wheel) for n in names]
        report = run_bench(names, [DEMO_SIZE], ops, rounds=5, budget=0.02)
        table = format_report(report, names[0]).split("\n", 2)[2].split("\nTimer-wheel packages")[0]
        print(f"\n== {title} ==\n{table.strip()}")
    print("\nThe whole comparison: python -m timerwheel bench --help; docs/performance.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m timerwheel`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":
        return bench(argv[1:])
    if argv and argv[0] == "keys":
        from ._keyed.command import main as keys

        return keys(argv[1:])
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    return demo()


if __name__ == "__main__":
    sys.exit(main())
