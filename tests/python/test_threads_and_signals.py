"""A long command in Python: other threads go on while it runs (the GIL is released), Ctrl-C
stops it within a fraction of a second, and the next call works as before."""

import os
import re
import signal
import threading
import time

import pytest

import ptdp

# A search of a few seconds (2 to 5 s on 2 busy cores): DeepSeek-V3 on 512 H100s.
LONG = dict(model="deepseek-v3", cluster="dgx-h100", gpus=512, global_batch=2048, top=1)


def test_other_threads_run_while_a_command_works():
    ticks: list[float] = []
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=counter)
    thread.start()
    try:
        start = time.monotonic()
        plans = ptdp.plan(**LONG)
        end = time.monotonic()
    finally:
        stop.set()
        thread.join()
    assert len(plans) == 1
    assert end - start > 0.5, "the search should be long enough to tell"
    during = [start] + [t for t in ticks if start <= t <= end] + [end]
    longest_pause = max(b - a for a, b in zip(during, during[1:]))
    # With the GIL held for the whole call, the pause would be the whole search.
    assert longest_pause < min(0.5, (end - start) / 2), (
        f"{len(during) - 2} ticks in {end - start:.1f} s, a pause of {longest_pause:.2f} s"
    )


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals reach Python's main thread only")
def test_ctrl_c_stops_a_long_command_and_the_next_call_works():
    before = ptdp.plan(top=2)
    sent: list[float] = []

    def ctrl_c():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, ctrl_c)
    interrupted_at = finished_at = None
    try:
        start = time.monotonic()
        timer.start()
        ptdp.plan(**LONG)
        finished_at = time.monotonic()
        timer.join()  # (with the GIL held by the call, the timer could not even send it)
        time.sleep(0.2)  # a signal that came after the call: raised here, not in another test
    except KeyboardInterrupt:
        interrupted_at = time.monotonic()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert finished_at is None, (
        f"the call ended {finished_at - start:.2f} s after it began, signal or not"
    )
    assert interrupted_at is not None and sent
    # From when the signal was due (a timer that could not run sends it late).
    late = interrupted_at - (start + 0.5)
    assert late < 1.5, f"KeyboardInterrupt {late:.2f} s after the signal"

    # The next calls work as before, standard input included.
    after = ptdp.plan(top=2)
    assert after.to_dict() == before.to_dict()
    assert after.best.simulate().step_time_s == pytest.approx(after.best.step_time_s)


def test_a_keyword_that_is_no_identifier_is_refused_before_the_command_runs(tmp_path):
    target = tmp_path / "x.yaml"
    with pytest.raises(TypeError, match=re.escape(repr(f"out={target}"))):
        ptdp.plan(**{f"out={target}": True})
    html = tmp_path / "x.html"
    with pytest.raises(TypeError, match=re.escape(repr(f"html={html}"))):
        ptdp.plan(**{f"html={html}": True})
    with pytest.raises(TypeError, match="'svg x'"):
        ptdp.simulate(model="seed-example", **{"svg x": "y.svg"})
    assert not target.exists() and not html.exists()
