"""TaskTable, the engine's tasks by id: the compiled core's, a window list plus a dict, against a dict (the
model). Its moves (the front passing holes, compaction, eviction, a fresh window) only these tests see.

The Python twin's TaskTable is dict itself: held against a dict model it would pass whatever it did, so
these tests take the compiled table wherever it is built (the `compiled_core` fixture) and skip, saying so,
where it is not; one test pins that the twin's table is a plain dict.
"""

from __future__ import annotations

import gc
import random
import subprocess
import sys
import textwrap
import weakref
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st


class Task:
    """A stand-in for the engine's _Task: anything but None."""

    def __init__(self, key: int) -> None:
        self.key = key


def check(table: Any, model: dict[int, Task], probes: range) -> None:
    assert len(table) == len(model)
    assert table.values() == [model[key] for key in sorted(model)]  # the same tasks, in id order
    for key in probes:
        assert table.get(key) is model.get(key), key
        assert (key in table) == (key in model), key


def churn(table: Any, seed: int, ops: int) -> None:
    """Random work shaped like the engine's: ids handed out in order, most short-lived, some pinned for
    long, some given back, a few far-away keys; every result compared with a dict's."""
    rng = random.Random(seed)
    model: dict[int, Task] = {}
    next_id = 1
    for _ in range(ops):
        r = rng.random()
        if r < 0.45:
            if rng.random() < 0.01:
                next_id += rng.choice([1, 2, 5000])  # ids burnt by failed calls; a far jump
            task = Task(next_id)
            table[next_id] = task
            model[next_id] = task
            next_id += 1
        elif r < 0.9 and model:
            key = rng.choice(list(model)) if rng.random() < 0.3 else max(model)
            if rng.random() < 0.5:
                assert table.pop(key, None) is model.pop(key)
            else:
                del table[key]
                del model[key]
        elif r < 0.95:
            key = rng.randrange(-3, next_id + 3)
            assert table.pop(key, "none") == (model.pop(key) if key in model else "none")
        else:
            key = rng.randrange(1, next_id + 1)  # an old id set again (a late insert below the window)
            task = Task(key)
            table[key] = task
            model[key] = task
    check(table, model, range(-3, next_id + 3))


@pytest.mark.parametrize("seed", range(6))
def test_the_table_behaves_as_a_dict_through_every_move_of_its_window(
    compiled_core: ModuleType, seed: int
) -> None:
    churn(compiled_core.TaskTable(), seed, 20_000)


@given(ops=st.lists(st.tuples(st.sampled_from(["put", "pop", "get"]), st.integers(-5, 3000))))
def test_any_sequence_of_operations_matches_a_dict(
    compiled_core: ModuleType, ops: list[tuple[str, int]]
) -> None:
    table: Any = compiled_core.TaskTable()
    model: dict[int, Task] = {}
    for op, key in ops:
        if op == "put":
            task = Task(key)
            table[key] = task
            model[key] = task
        elif op == "pop":
            assert table.pop(key, None) is model.pop(key, None)
        else:
            assert table.get(key) is model.get(key)
    check(table, model, range(-5, 3001))


def test_the_python_twins_table_is_a_dict() -> None:
    """The pure-Python engine keeps its tasks in a plain dict: nothing of its own to test here. Should the
    twin get a table class of its own, run the tests of this module on it too."""
    from timerwheel._core import wheel as _core_py

    assert _core_py.TaskTable is dict


def test_pinned_tasks_survive_a_window_that_starts_afresh(compiled_core: ModuleType) -> None:
    """Ten long-lived tasks pin the window's front while 100,000 others come and go: they move to the
    dict once the window is mostly holes, and every one is still found and popped."""
    table = compiled_core.TaskTable()
    pinned = {key: Task(key) for key in range(1, 11)}
    for key, task in pinned.items():
        table[key] = task
    for key in range(11, 100_011):
        table[key] = Task(key)
        assert table.pop(key) is not None
    assert len(table) == 10
    assert [t.key for t in table.values()] == list(range(1, 11))
    for key, task in pinned.items():
        assert table[key] is task
        assert table.pop(key) is task
    assert len(table) == 0 and list(table.values()) == []


def test_missing_keys_and_defaults(compiled_core: ModuleType) -> None:
    table = compiled_core.TaskTable()
    table[1] = task = Task(1)
    assert table.get(2) is None and table.get(2, "x") == "x"
    assert table.pop(2, "x") == "x"
    assert table.get(2**70) is None and table.pop(-(2**70), None) is None
    with pytest.raises(KeyError):
        table[2]
    with pytest.raises(KeyError):
        del table[2]
    assert table[1] is task


def test_the_table_holds_its_tasks_and_lets_them_go(compiled_core: ModuleType) -> None:
    """No reference is leaked or lost: popped and cleared tasks are freed, evicted ones kept."""
    table = compiled_core.TaskTable()
    tasks = [Task(key) for key in range(1, 3001)]
    for task in tasks:
        table[task.key] = task
    refs = [weakref.ref(task) for task in tasks]
    before = sys.getrefcount(tasks[0])
    for key in range(2, 3001, 2):
        table.pop(key)
    for key in range(3001, 8001):  # the window fills with holes, moves its tasks to the dict
        table[key] = Task(key)
        table.pop(key)
    after = sys.getrefcount(tasks[0])  # (outside the assert: pytest's rewrite holds a reference)
    assert after == before
    del tasks, task
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 1500  # the odd ones, still in the table
    table.clear()
    assert len(table) == 0 and table.get(1) is None
    assert all(ref() is None for ref in refs)
    table[8001] = Task(8001)  # a cleared table takes new ids
    assert len(table) == 1 and table[8001].key == 8001


def test_keys_near_2_63_then_small_ones(compiled_core: ModuleType) -> None:
    """A key near 2**63, then a small one (after pop() or clear()): the compiled table crashed the
    interpreter (base + index overflowed). In a child process, as a crash is the failure."""
    code = textwrap.dedent(f"""
        from {compiled_core.__name__} import TaskTable
        class T:
            pass
        table = TaskTable()
        table[2**63 - 1] = T()
        table.pop(2**63 - 1)
        table[5] = five = T()
        assert table.get(5) is five and len(table) == 1, "a key near 2**63, then a small one"
        table = TaskTable()
        table[2**62 + 3] = T()
        table.clear()
        table[5] = five
        assert table.get(5) is five and len(table) == 1, "a key near 2**62, clear(), then a small one"
        """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"


def test_pending_while_a_finalizer_discards_every_task() -> None:
    """Scheduler.pending() (the table's values(), sorted) raised KeyError when a finalizer that the sort
    ran cleared the table (Scheduler.discard()). The collector is made to run at each allocation point in
    turn."""
    from timerwheel import Scheduler
    from timerwheel.testing import ManualClock

    class Discarding:
        """A cycle whose finalizer discards every task of the scheduler."""

        def __init__(self, sched: Scheduler) -> None:
            self.sched = sched
            self.me = self

        def __del__(self) -> None:
            self.sched.discard()

    raised = []
    for threshold in range(1, 12):
        sched = Scheduler(ManualClock())
        ids = [sched.schedule(1.0 + i, print) for i in range(3)]
        for i in range(2000, 2060):  # some tasks in the table's dict: far ahead of the window
            sched._tasks[10_000 + i] = sched._tasks[ids[0]]
        Discarding(sched)
        gc.collect(0)
        Discarding(sched)
        old = gc.get_threshold()
        gc.set_threshold(threshold)
        try:
            sched.pending()
        except KeyError as exc:
            raised.append((threshold, exc))
        finally:
            gc.set_threshold(*old)
            gc.collect()
    assert not raised, "(collector threshold, KeyError)"


def test_tasks_that_come_and_go_in_order_keep_the_window_small() -> None:
    """The window's front moves past its holes (ids start at 1; it stopped at the first): tasks that come
    and go in order, a FIFO of 500, neither grow the window nor move the pending ones to the dict."""
    from timerwheel import Scheduler
    from timerwheel.testing import ManualClock

    sched = Scheduler(ManualClock())
    layout = getattr(sched._tasks, "_layout", None)
    if layout is None:
        pytest.skip("the engine's table is a dict here (the pure-Python build): it has no window")
    ids = [sched.schedule(1.0, print) for _ in range(500)]
    for _ in range(20_000):  # the oldest goes, a new one comes: a FIFO of 500
        sched.cancel(ids.pop(0))
        ids.append(sched.schedule(1.0, print))
    _base, front, window, live, old = layout()
    assert old == 0 and live == 500, f"FIFO tasks moved to the dict: {layout()}"
    assert window - front <= 500 + 1024, f"the window kept its holes: {layout()}"
