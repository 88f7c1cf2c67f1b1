"""ptdp.sweep: the command's points as a DataFrame, equal to ptdp.plan at each point; sweeps on
several Python threads run at once (the commands overlap in time), with the same answers."""

import threading

import pandas as pd
import pytest

import ptdp

SMALL = dict(model="gpt3-1.3b", clusters=["dgx-a100-80gb", "dgx-h100"], gpus=[8, 16],
             global_batch=64, tokens="10B", price={"dgx-h100": 2.5}, threads=1)


def test_a_sweep_is_a_dataframe_of_its_points():
    df = ptdp.sweep(**SMALL)
    assert isinstance(df, pd.DataFrame)
    assert len(df) == 4
    assert list(df["cluster"]) == ["dgx-a100-80gb", "dgx-a100-80gb", "dgx-h100", "dgx-h100"]
    assert list(df["gpus"]) == [8, 16, 8, 16]
    for column in ("tp", "pp", "dp", "micro_batch", "step_time_s", "tokens_per_s", "mfu",
                   "time_to_train_s", "gpu_hours", "cost_usd", "scaling_efficiency", "pareto",
                   "megatron_args"):
        assert column in df.columns, column
    # The arithmetic: 10B tokens at the point's rate; GPU-hours; USD where priced.
    h100 = df[df["cluster"] == "dgx-h100"].iloc[0]
    assert h100["time_to_train_s"] == pytest.approx(1e10 / h100["tokens_per_s"])
    assert h100["gpu_hours"] == pytest.approx(8 * h100["time_to_train_s"] / 3600)
    assert h100["cost_usd"] == pytest.approx(2.5 * h100["gpu_hours"])
    assert pd.isna(df[df["cluster"] == "dgx-a100-80gb"].iloc[0]["cost_usd"])
    assert df.attrs["model"]
    assert df.attrs["command"].startswith("ptdp sweep")


def test_each_point_is_what_plan_recommends():
    df = ptdp.sweep(**SMALL)
    for _, row in df.iterrows():
        plans = ptdp.plan(model="gpt3-1.3b", cluster=row["cluster"], gpus=int(row["gpus"]),
                          global_batch=64, top=10)
        best = plans[0]
        assert (best.tp, best.pp, best.dp) == (row["tp"], row["pp"], row["dp"])
        assert best.step_time_s == pytest.approx(row["step_time_s"], rel=1e-12)


def test_bad_input_is_an_input_error_naming_the_flag():
    with pytest.raises(ptdp.InputError, match="--gpus"):
        ptdp.sweep("gpt3-1.3b", "dgx-h100", "64:8:x2", 64)
    with pytest.raises(ptdp.InputError, match="--price"):
        ptdp.sweep("gpt3-1.3b", "dgx-h100", [8], 64, price={"dgx-h100": -1})


def test_sweeps_on_several_threads_run_at_once_with_the_same_answers():
    alone = ptdp.sweep(**SMALL)
    frames, errors = [None, None], []

    def one(i):
        try:
            frames[i] = ptdp.sweep(**SMALL)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    import time

    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    span = time.monotonic() - start
    assert not errors, errors
    for frame in frames:
        pd.testing.assert_frame_equal(
            frame.drop(columns=["search_s"]), alone.drop(columns=["search_s"]))
    # One at a time, the commands' own times could not add up to more than the span.
    inside = sum(frame.attrs["total_s"] for frame in frames)
    assert inside > 1.2 * span, f"{inside:.2f} s of commands in {span:.2f} s: they did not overlap"
