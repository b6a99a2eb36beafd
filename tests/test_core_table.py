"""TaskTable, the engine's tasks by id, against a dict (both backends: the Cython one is a window list plus
a dict, whose moves (the front passing holes, compaction, eviction, a fresh window) only these tests see)."""

from __future__ import annotations

import gc
import random
import sys
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
    assert sorted(t.key for t in table.values()) == sorted(model)
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
def test_the_table_behaves_as_a_dict_through_every_move_of_its_window(core: ModuleType, seed: int) -> None:
    churn(core.TaskTable(), seed, 20_000)


@given(st.lists(st.tuples(st.sampled_from(["put", "pop", "get"]), st.integers(-5, 3000))))
def test_any_sequence_of_operations_matches_a_dict(ops: list[tuple[str, int]]) -> None:
    from .conftest import BACKENDS

    for module in filter(None, BACKENDS.values()):
        table, model = module.TaskTable(), {}
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


def test_pinned_tasks_survive_a_window_that_starts_afresh(core: ModuleType) -> None:
    """Ten long-lived tasks pin the window's front while 100,000 others come and go: they move to the
    dict once the window is mostly holes, and every one is still found and popped."""
    table = core.TaskTable()
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


def test_missing_keys_and_defaults(core: ModuleType) -> None:
    table = core.TaskTable()
    table[1] = task = Task(1)
    assert table.get(2) is None and table.get(2, "x") == "x"
    assert table.pop(2, "x") == "x"
    assert table.get(2**70) is None and table.pop(-(2**70), None) is None
    with pytest.raises(KeyError):
        table[2]
    with pytest.raises(KeyError):
        del table[2]
    assert table[1] is task


def test_the_table_holds_its_tasks_and_lets_them_go(core: ModuleType) -> None:
    """No reference is leaked or lost: popped and cleared tasks are freed, evicted ones kept."""
    table = core.TaskTable()
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
