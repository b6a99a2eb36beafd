"""timerwheel in a Django project: add "timerwheel.django" to INSTALLED_APPS, name a factory of your
KeyedScheduler in settings.TIMERWHEEL_KEYED ("myapp.jobs.make_keyed": a callable of no argument that
returns a KeyedScheduler, not started), and run it as a worker process:

    python manage.py timerwheel_worker            # until SIGINT or SIGTERM; --seconds N for a bounded run

The worker starts the KeyedScheduler (on the ThreadedScheduler your factory gave it) and closes it on a
signal (a run going on ends first with wait_running_on_close; a second signal stops it at once). Failed
runs are logged by the library's logger, "timerwheel", as everywhere: give it a handler in LOGGING.
Web processes keep the keys (upsert, pause, trigger) through the same store: a SQLiteStore has one
owner, so with several processes use PostgresStore.
"""
