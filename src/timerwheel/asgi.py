"""Schedulers inside an ASGI application (Starlette, FastAPI): started with the app, closed with it.

    from fastapi import FastAPI, Request
    from timerwheel.asgi import lifespan

    app = FastAPI(lifespan=lifespan(make_keyed))   # make_keyed(sched) -> a KeyedScheduler, or leave it out

    @app.get("/report")
    async def report(request: Request):
        async with request.app.state.scheduler.timeout(2.0):   # a deadline on the app's wheel
            return await build_report()

The lifespan makes an AsyncScheduler on the app's event loop at startup (`app.state.scheduler`), and the
KeyedScheduler that `make(scheduler)` returns, started (`app.state.keyed`); at shutdown it closes the
KeyedScheduler (awaiting a shared store's last writes) and then the AsyncScheduler. Nothing of
Starlette is imported: any ASGI framework whose lifespan is an async context manager of the app works.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from ._drivers.asyncio import AsyncScheduler
from ._keyed import KeyedScheduler

__all__ = ["lifespan"]


def lifespan(
    make: Callable[[AsyncScheduler], Any] | None = None, **options: Any
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """An ASGI lifespan (Starlette's and FastAPI's `lifespan=`): at startup an AsyncScheduler(**options)
    on the app's loop, in `app.state.scheduler`, and `make(scheduler)`'s KeyedScheduler, started, in
    `app.state.keyed` (None without `make`); both closed at shutdown, the KeyedScheduler first. `make`
    may be a coroutine function. If `make` or a start raises (TypeError: make gave something else than a
    KeyedScheduler or None), what was started is closed and the app does not start."""
    if make is not None and not callable(make):
        raise TypeError(f"make must be a callable taking the AsyncScheduler, not {type(make).__name__}")

    @contextlib.asynccontextmanager
    async def run(app: Any) -> AsyncIterator[None]:
        sched = AsyncScheduler(**options)
        sched.start()
        keyed: KeyedScheduler | None = None
        try:
            made = None if make is None else make(sched)
            keyed = await made if inspect.isawaitable(made) else made  # (an async def make, too)
            if keyed is not None and not isinstance(keyed, KeyedScheduler):
                raise TypeError(
                    f"make(scheduler) gave a {type(keyed).__name__}, not a KeyedScheduler or None"
                )
            if keyed is not None:
                keyed.start()
            app.state.scheduler, app.state.keyed = sched, keyed
            yield
        finally:
            try:
                if keyed is not None:
                    await keyed.aclose()
            finally:
                await sched.aclose()

    return run
