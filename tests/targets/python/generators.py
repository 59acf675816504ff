"""A generator and an asyncio coroutine, each burning CPU in its own thread."""

import asyncio
import threading

from _common import native_id, ready, running

tids = {}
started = threading.Barrier(3)


def produce():
    n = 0
    while running():  # produce-loop
        n += 1  # produce-loop
        if n % 1000 == 0:  # produce-loop
            yield n  # produce-loop


def consume():
    tids["generator"] = native_id()
    started.wait()
    for _ in produce():  # consume-loop
        pass


async def crunch():
    n = 0
    while running():  # crunch-loop
        n += 1  # crunch-loop
        if n % 100_000 == 0:  # crunch-loop
            await asyncio.sleep(0)  # crunch-loop


async def serve():
    await crunch()  # await-crunch


def loop_thread():
    tids["coroutine"] = native_id()
    started.wait()
    asyncio.run(serve())


workers = [threading.Thread(target=consume), threading.Thread(target=loop_thread)]
for w in workers:
    w.start()
started.wait()
ready(threads=tids)
for w in workers:
    w.join()
