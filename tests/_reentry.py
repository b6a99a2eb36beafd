"""The wheel against a model while finalizers that the garbage collector runs call back into it.

Before each operation the test leaves a few objects in reference cycles (only the GC frees them) whose
__del__ cancels, adds, moves or queries timers, and sets the GC's threshold so low that it collects at
nearly every allocation: the finalizers run at arbitrary points inside the operation. Every call they make
is logged; after each step the log and the operation's result are checked against the model, and the
wheel against the model with _check().

Run as a script, `python tests/_reentry.py MODULE SEED [STEPS]` (tests/test_core_reentry.py does, in a child
process, so that a crash is a failure and not a lost test run). Exit status 0: every step held.
"""

from __future__ import annotations

import gc
import importlib
import random
import sys
from typing import Any


class Reenter:
    """Garbage with a finalizer: a reference cycle whose __del__ runs `action` (when the GC frees it)."""

    def __init__(self, action: Any) -> None:
        self.me = self
        self.action = action

    def __del__(self) -> None:
        self.action()


def run(module_name: str, seed: int, steps: int = 400) -> None:
    core = importlib.import_module(module_name)
    rng = random.Random(seed)
    slots, levels = rng.choice([(4, 1), (4, 2), (8, 3), (64, 4)])
    w = core.TimerWheel(0.001, slots=slots, levels=levels)
    model: dict[int, float] = {}  # pending timer id -> due
    seen: set[int] = set()  # every id ever returned
    done: set[int] = set()  # ids that came out, or were cancelled (True), or cleared
    log: list[tuple[Any, ...]] = []  # what the finalizers did, in order
    in_advance = [False]

    def finalizer(kind: str, r: float, x: float) -> Any:
        def action() -> None:
            ids = sorted(model) or [1]
            tid = ids[int(r * len(ids)) % len(ids)] if r < 0.85 else (sorted(seen) or [7])[0]
            if kind == "cancel":
                log.append(("cancel", tid, w.cancel(tid)))
            elif kind == "add":
                new = w.add(x, "from a finalizer")
                log.append(("add", new, w.due(new)))
            elif kind == "add_past":
                new = w.add_at(w.now - x, "past, from a finalizer")
                log.append(("add", new, w.due(new)))
            elif kind == "move":
                moved = w.reschedule(tid, x)
                log.append(("move", tid, moved, w.due(tid) if moved else None))
            elif kind == "advance":
                try:
                    out = w.advance(w.now + x / 100)
                except RuntimeError:
                    assert in_advance[0], "advance() refused outside an advance()"
                    return
                assert not in_advance[0], "advance() re-entered an advance()"
                log.append(("advance", out))
            else:  # queries: must not crash nor disturb anything
                w.next_due()
                w.due(tid)
                _ = tid in w
                len(w)

        return action

    kinds = ["cancel", "cancel", "add", "add_past", "move", "move", "query", "advance"]
    for step in range(steps):
        p0 = dict(model)
        gc.disable()
        for _ in range(rng.randrange(5)):
            Reenter(finalizer(rng.choice(kinds), rng.random(), rng.choice([0.0, 0.0005, 0.01, 1.0, 300.0])))
        op = rng.choice(
            ["add", "add", "add_at", "cancel", "move", "advance", "advance", "next_due", "clear", "crowd"]
        )
        if op == "clear" and rng.random() > 0.1:
            op = "advance"
        tid = rng.choice(sorted(model)) if model and rng.random() < 0.9 else rng.choice(sorted(seen) or [1])
        amount = rng.choice([0.0, 0.0003, 0.002, 0.05, 1.0, 5.0, 400.0, 1e5])
        if op == "add_at":
            amount = rng.choice([-amount, amount])
        log.clear()
        before = w.now
        main: Any = None
        gc.set_threshold(rng.choice([1, 1, 2, 5]))
        gc.enable()
        try:
            if op == "add":
                main = w.add(amount, "main")
            elif op == "add_at":
                main = w.add_at(before + amount, "main")
            elif op == "cancel":
                main = w.cancel(tid)
            elif op == "move":
                main = w.reschedule(tid, amount)
            elif op == "advance":
                in_advance[0] = True
                main = w.advance(before + amount)
                in_advance[0] = False
            elif op == "next_due":
                main = w.next_due()
            elif op == "crowd":  # 40 timers close together: a bucket big enough for the slot heap
                dues = [before + amount + k * 1e-5 for k in range(40)]
                main = [(w.add_at(due, "crowd"), due) for due in dues]
            else:
                w.clear()
        finally:
            in_advance[0] = False
            gc.set_threshold(700, 10, 10)
        gc.collect()  # the finalizers not run yet run now, outside any operation
        Step(w, op, tid, before + amount, main, p0, model, seen, done, list(log), step).check()


class Step:
    """The checks of one step: the finalizers' calls (in the order they ran) and the operation's result.

    The operation's own change is atomic and lies somewhere among the finalizers' calls; only what does
    not depend on where is checked, and that is enough to catch a lost, doubled or resurrected timer.
    """

    def __init__(
        self,
        w: Any,
        op: str,
        tid: int,
        when: float,
        main: Any,
        p0: dict[int, float],
        model: dict[int, float],
        seen: set[int],
        done: set[int],
        log: list[Any],
        step: int,
    ) -> None:
        self.w, self.op, self.tid, self.when, self.main = w, op, tid, when, main
        self.p0, self.model, self.seen, self.done, self.log = p0, model, seen, done, log
        self.where = f"step {step}, {op}, log {log}"
        self.cancelled: set[int] = set()
        self.refused: set[int] = set()  # ids a cancel or a move found not pending

    def new_id(self, timer_id: int, due: float) -> None:
        assert timer_id not in self.seen, f"id {timer_id} issued twice: {self.where}"
        self.seen.add(timer_id)
        self.model[timer_id] = due

    def gone(self, timer_id: int, why: str) -> None:
        assert timer_id in self.model, f"{timer_id} {why} but was not pending: {self.where}"
        assert timer_id not in self.cancelled, f"{timer_id} {why} after cancel() said True: {self.where}"
        del self.model[timer_id]
        self.done.add(timer_id)

    def check(self) -> None:
        w, op, model, where = self.w, self.op, self.model, self.where
        if op in ("add", "add_at"):
            self.new_id(self.main, self.when)
        elif op == "crowd":
            for timer_id, due in self.main:
                self.new_id(timer_id, due)
        for entry in self.log:
            if entry[0] == "cancel":
                _, timer_id, result = entry
                if result:
                    self.gone(timer_id, "cancelled")
                    self.cancelled.add(timer_id)
                else:
                    self.refused.add(timer_id)
            elif entry[0] == "add":
                self.new_id(entry[1], entry[2])
            elif entry[0] == "move":
                _, timer_id, moved, due = entry
                if moved:
                    assert timer_id in model, f"moved {timer_id}, which was not pending: {where}"
                    model[timer_id] = due
                else:
                    self.refused.add(timer_id)
            elif entry[0] == "advance":
                for timer_id, _ in entry[1]:
                    self.gone(timer_id, "came out")
        if op == "cancel":
            if self.main:
                self.gone(self.tid, "cancelled")
                self.cancelled.add(self.tid)
            else:
                self.refused.add(self.tid)
        elif op == "move":
            if self.main:  # a finalizer may have cancelled it or let it come out since
                assert self.tid in self.p0, f"reschedule() True for a timer not pending: {where}"
                if self.tid in model:
                    moves = {e[3] for e in self.log if e[0] == "move" and e[1] == self.tid and e[2]}
                    assert w.due(self.tid) in {self.when} | moves, where  # the main move, or a later one
                    model[self.tid] = w.due(self.tid)
            else:
                self.refused.add(self.tid)
        elif op == "advance":
            dues = [model.get(timer_id) for timer_id, _ in self.main]
            for timer_id, _ in self.main:
                self.gone(timer_id, "came out")
            assert dues == sorted(dues), f"out of order: {dues}: {where}"  # type: ignore[type-var]
            assert all(d is not None and d <= self.when for d in dues), where
            touched = {e[1] for e in self.log if e[0] in ("move", "cancel")}
            for timer_id, due in self.p0.items():  # nothing due is lost: it came out, or a finalizer moved it
                if due <= self.when and timer_id in model and timer_id not in touched:
                    raise AssertionError(f"{timer_id} (due {due}) did not come out: {where}")
        elif op == "clear":
            for timer_id in [t for t in model if t not in w]:
                self.gone(timer_id, "cleared")
        for timer_id in self.refused:
            assert timer_id not in model, f"{timer_id} was pending, yet refused: {where}"
        w._check()
        for timer_id, due in model.items():
            assert timer_id in w, f"{timer_id} lost: {where}"
            assert w.due(timer_id) == due, f"{timer_id} due {w.due(timer_id)} != {due}: {where}"
        assert len(w) == len(model), f"{len(w)} pending, the model {len(model)}: {where}"
        assert w.next_due() == (min(model.values()) if model else None), where


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), *(int(a) for a in sys.argv[3:4]))
    print("ok")
