"""What a process that serves requests does once it has started (appliance/wsgi.py, asgi.py).

- With no broker configured it is also the beat (appliance.core.dispatch.start_embedded_beat) and the
  worker of the database queue (start_embedded_worker).
- Its start-up objects (settings, apps, models, URL conf) live as long as the process. Python's cyclic
  collector would scan them all in every full pass, and a request that allocates much (a page of the
  node API at fleet scale) triggers such passes: frozen, they are left out. Measured with
  tests/bench/bench_fleet.py at 1,000 nodes on SQLite: p95 of /api/v1/inventory/nodes/ 184 ms before,
  83-94 ms after (p50 unchanged at about 50 ms).
"""

import gc


def prepare_serving_process() -> None:
    from appliance.core.dispatch import start_embedded_beat, start_embedded_worker

    start_embedded_beat()
    start_embedded_worker()  # work queued in the database queue, by this process or one that died
    freeze_start_up_objects()


def freeze_start_up_objects() -> None:
    gc.collect()
    gc.freeze()
