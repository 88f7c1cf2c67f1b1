"""The Python package: every function against the command line it stands for (same figures,
same messages), the typed results against the commands' JSON, and the pictures."""

import json
import os
import pathlib
import re
import subprocess
import sys
import xml.dom.minidom

import pytest

import ptdp
from ptdp import _ptdp

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def cli(*args, stdin=None):
    """The command line itself (the same in-process runner the API uses)."""
    return _ptdp.run(list(args), stdin)


def cli_json(*args):
    code, out, err = cli(*args, "--format", "json")
    assert code in (0, 1), err
    return json.loads(out)


def run_shown(command, *flags):
    """Runs a result's `.command` as a shell would, `ptdp` being this package's command line,
    with `flags` after the command's name (`--format json`)."""
    name = " ".join(command.split(" ", 2)[:2])  # "ptdp simulate"
    assert command.startswith(name + " ")
    command = command.replace(name, " ".join([name, *flags]), 1)
    package = str(pathlib.Path(ptdp.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=package + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = f'ptdp() {{ "{sys.executable}" -m ptdp "$@"; }}\n{command}\n'
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
        timeout=120,
    )


# --- version ---------------------------------------------------------------------------------


def test_one_version_for_the_package_and_the_command():
    code, out, _ = cli("--version")
    assert code == 0
    assert out.splitlines()[0] == f"ptdp {ptdp.__version__}"
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(r"project\(ptdp VERSION ([0-9.]+)", cmake).group(1) == ptdp.__version__
    try:
        from importlib.metadata import PackageNotFoundError, version

        assert version("ptdp") == ptdp.__version__
    except PackageNotFoundError:
        pass  # run from the build tree, not installed


def test_python_m_ptdp_is_the_command_line():
    run = subprocess.run(
        [sys.executable, "-m", "ptdp", "plan", "--gpus", "0"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert run.returncode == 2
    assert "--gpus: must be positive, got 0" in run.stderr


# --- plan ------------------------------------------------------------------------------------


def test_plan_ranks_the_example_as_the_command_does():
    plans = ptdp.plan(top=5)
    expected = cli_json("plan", "--top", "5")
    assert len(plans) == 5
    assert [p.step_time_s for p in plans] == [e["step_time_s"] for e in expected["plans"]]
    assert [p.rank for p in plans] == [1, 2, 3, 4, 5]
    best = plans.best
    assert (best.tp, best.pp, best.dp) == (expected["plans"][0]["tp"], expected["plans"][0]["pp"], expected["plans"][0]["dp"])
    assert best.megatron_args.startswith("--tensor-model-parallel-size ")
    assert plans.valid == expected["valid"] and plans.evaluated == expected["evaluated"]
    assert plans.rejected["sequence-parallel-needs-tp"] > 0
    assert plans.command == "ptdp plan --top 5"
    assert "Plan #1: tp " in repr(best) and "GiB" in repr(best)
    assert best.peak_memory_gib == pytest.approx(best.peak_memory_bytes / 2**30)
    assert plans.to_dict() == expected


def test_typed_results_cover_every_key_of_the_json():
    plans = ptdp.plan(top=2, explain=True)
    for p in plans:
        assert p.extra == {}, p.extra
        assert p.breakdown.extra == {}
        for s in p.stages:
            assert s.extra == {}, s.extra
    sim = plans.best.simulate()
    assert sim.extra == {} and all(s.extra == {} for s in sim.stages)
    checked = ptdp.check((FIXTURES / "seed-example.sh").read_text())
    assert checked.extra == {}
    assert all(f.extra == {} for f in checked.findings)
    sched = ptdp.schedule("zb-h1", pp=2, microbatches=3)
    assert sched.extra == {} and all(op.extra == {} for ops in sched.stages for op in ops)


def test_plan_dataframe():
    plans = ptdp.plan("gpt3-1.3b", "dgx-h100", gpus=16, global_batch=256, top=4)
    df = plans.to_dataframe()
    assert list(df.index) == [1, 2, 3, 4]
    assert df["step_time_s"].is_monotonic_increasing
    for column in ("tp", "pp", "dp", "micro_batch", "mfu", "peak_memory_gib", "megatron_args"):
        assert column in df.columns
    assert (df["tp"] * df["pp"] * df["dp"] * df["cp"] == 16).all()


def test_each_plan_simulates_to_its_ranked_time():
    plans = ptdp.plan("gpt3-1.3b", "dgx-h100", gpus=16, global_batch=256, top=3)
    for p in plans:
        sim = p.simulate()
        assert sim.step_time_s == p.step_time_s
        assert len(sim.stages) == p.pp
        assert sim.command.startswith("ptdp simulate --plan - ")
    # A keyword overrides the plan's layout, as --micro-batch does with --plan.
    smaller = plans.best.simulate(micro_batch=1)
    assert smaller.microbatches == plans.best.microbatches * plans.best.micro_batch


def test_a_plans_simulation_command_runs_as_shown():
    best = ptdp.plan("gpt3-1.3b", "dgx-h100", gpus=16, global_batch=256, top=2)[1]
    sim = best.simulate(micro_batch=1)
    assert sim.command.startswith("ptdp simulate --plan - --micro-batch 1 <<'PLAN'\n")
    assert best.plan_file in sim.command and sim.command.endswith("\nPLAN")
    assert "<plan #" not in sim.command
    run = run_shown(sim.command, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == sim.to_dict()
    # The plan's own command is the search that ranked it.
    assert best.command == "ptdp plan --model gpt3-1.3b --cluster dgx-h100 --gpus 16 --global-batch 256 --top 2"


def test_every_result_has_its_command():
    sched = ptdp.schedule("1f1b", pp=2, microbatches=4)
    assert sched.command == "ptdp schedule --schedule 1f1b --pp 2 --microbatches 4"
    run = run_shown(sched.command, "--format", "json")
    assert run.returncode == 0 and json.loads(run.stdout) == sched.to_dict()
    checked = ptdp.check(MEGATRON_COMMAND, cluster="dgx-a100-80gb")
    assert checked.command == (
        "ptdp check --cluster dgx-a100-80gb --file - <<'SCRIPT'\n" + MEGATRON_COMMAND + "\nSCRIPT"
    )
    run = run_shown(checked.command, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == checked.to_dict()


def test_plan_saves_a_plan_file_the_command_reads(tmp_path):
    best = ptdp.plan(top=1).best
    path = tmp_path / "best.yaml"
    best.save(path)
    assert ptdp.simulate(path).step_time_s == best.step_time_s
    code, out, err = cli("simulate", "--plan", str(path), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["step_time_s"] == best.step_time_s


def test_fix_and_flags_as_keywords():
    plans = ptdp.plan(fix={"tp": 2, "pp": 4}, top=3)
    assert all((p.tp, p.pp) == (2, 4) for p in plans)
    assert plans.command == "ptdp plan --top 3 --fix tp=2 --fix pp=4"
    plans = ptdp.plan(fix={"sp": False, "tp": 2}, no_recompute=True, top=3)
    assert all(not p.sequence_parallel and p.recompute == "none" for p in plans)


def test_no_valid_plan_is_an_answer_and_best_says_why():
    plans = ptdp.plan("gpt3-175b", gpus=8, global_batch=64)
    assert len(plans) == 0 and not plans
    assert any("more GPUs" in h for h in plans.hints)
    with pytest.raises(ptdp.NoPlanError) as e:
        plans.best
    assert "more GPUs" in str(e.value)
    assert e.value.hints == plans.hints


def test_zero_bubble_plans_are_marked_and_the_megatron_best_is_runnable():
    plans = ptdp.plan("gpt3-1.3b", "dgx-h100", gpus=16, global_batch=256, top=10)
    assert plans.best_in_megatron.in_megatron
    for p in plans:
        assert p.in_megatron == (p.schedule != "zb-h1")


# --- errors: the command line's messages -----------------------------------------------------


def test_bad_input_raises_the_command_lines_message():
    code, _, err = cli("plan", "--model", "lama3-70b")
    assert code == 2
    with pytest.raises(ptdp.InputError) as e:
        ptdp.plan("lama3-70b")
    assert isinstance(e.value, ValueError)
    assert e.value.exit_code == 2
    assert "ptdp: error: " + e.value.message == err.strip()
    assert "did you mean llama3-70b?" in e.value.message
    assert e.value.command == "ptdp plan --model lama3-70b --top 10"


def test_unknown_keyword_is_pythons_type_error_with_the_closest_keyword():
    # Python's own wording, not the command line's "--max-tpp: unknown flag".
    with pytest.raises(TypeError) as e:
        ptdp.plan(max_tpp=4)
    assert str(e.value) == "plan() got an unexpected keyword argument 'max_tpp'. Did you mean 'max_tp'?"
    assert not isinstance(e.value, ptdp.PtdpError)
    with pytest.raises(TypeError) as e:
        ptdp.simulate(modle="seed-example", cluster="dgx-a100-80gb", gpus=8, global_batch=128, tp=2, pp=4)
    assert str(e.value) == "simulate() got an unexpected keyword argument 'modle'. Did you mean 'model'?"
    with pytest.raises(TypeError, match=r"check\(\) got an unexpected keyword argument 'gpu'\. Did you mean 'gpus'\?"):
        ptdp.check(MEGATRON_COMMAND, gpu=8)
    # Megatron-LM's names are keywords too, and are suggested.
    with pytest.raises(TypeError, match="Did you mean 'tensor_model_parallel_size'"):
        ptdp.simulate(**LAYOUT, tensor_model_parallel_sze=2, pp=4)
    # A plan's overrides, and nothing close: no suggestion.
    best = ptdp.plan(top=1).best
    with pytest.raises(TypeError, match="Did you mean 'micro_batch'"):
        best.simulate(micro_bach=2)
    with pytest.raises(TypeError) as e:
        best.simulate(zzzz=1)
    assert str(e.value) == "simulate() got an unexpected keyword argument 'zzzz'"
    # svg() takes its own options only, as Python does for any function.
    sim = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'svg_untill'"):
        sim.svg(svg_untill=1.0)


def test_signatures_and_help_list_the_commands_flags():
    import inspect
    import pydoc

    sim = inspect.signature(ptdp.simulate).parameters
    for name in ("tp", "pp", "micro_batch", "recompute", "schedule", "svg_until", "explain"):
        assert sim[name].kind == inspect.Parameter.KEYWORD_ONLY, name
    assert sim["tp"].default is None and sim["sequence_parallel"].default is False
    assert "options" not in sim and sim["megatron_names"].kind == inspect.Parameter.VAR_KEYWORD
    for reserved in ("format", "svg", "trace", "out"):  # the API's own
        assert reserved not in sim
    plan = inspect.signature(ptdp.plan).parameters
    assert {"max_tp", "fix", "memory_headroom", "no_recompute", "precision"} <= plan.keys()
    assert plan["top"].default == 10 and "out_dir" not in plan and "html" not in plan
    check = inspect.signature(ptdp.check).parameters
    assert list(check)[:2] == ["command", "file"]
    assert {"cluster", "gpus", "vocab_size", "script_args", "require_fit"} <= check.keys()
    assert "version" not in check and "megatron_names" not in check and "options" not in check
    # A plan's simulate() takes the overrides, not what its plan file fixes.
    overrides = inspect.signature(ptdp.Plan.simulate).parameters
    assert "micro_batch" in overrides and "recompute" in overrides
    assert not {"model", "cluster", "gpus", "global_batch", "megatron"} & overrides.keys()
    svg = inspect.signature(ptdp.Simulation.svg).parameters
    assert list(svg) == ["self", "svg_from", "svg_until"]
    # help() says what each option does, in the command's words, with its default.
    text = pydoc.render_doc(ptdp.simulate, renderer=pydoc.plaintext)
    assert "micro_batch=b: micro-batch size (default 1)" in text
    assert "tensor_model_parallel_size (for tp)" in text
    assert "precision=P: bf16 | fp16 | fp32 | fp8" in " ".join(text.split()) and "(default bf16)" in text
    assert "require_fit=True: exit 4 when" in pydoc.render_doc(ptdp.check, renderer=pydoc.plaintext)
    assert "svg_until" in pydoc.render_doc(ptdp.Simulation.svg, renderer=pydoc.plaintext)


def test_every_flag_of_the_command_is_a_keyword():
    # The signatures are read from the commands themselves: a flag the command gains is there.
    code, out, _ = cli("--completion", "bash")
    assert code == 0
    for command, func, own in (
        ("plan", ptdp.plan, {"format", "out", "out_dir", "html", "help"}),
        ("simulate", ptdp.simulate, {"format", "svg", "trace", "help"}),
        ("check", ptdp.check, {"format", "version", "help"}),
    ):
        listed = re.search(rf"^    {command}\) flags=\"([^\"]*)\"", out, re.M).group(1).split()
        names = {f[2:].replace("-", "_") for f in listed} - own
        assert names <= inspect_parameters(func), names - inspect_parameters(func)


def inspect_parameters(func):
    import inspect

    return set(inspect.signature(func).parameters)


def test_help_is_parsed_from_the_text_the_command_prints():
    from ptdp._flags import Flag, parse_help, parse_zsh_completion

    text = (
        "usage: ptdp x\n\nFlags:\n"
        "  --model M (=seed-example)  model: preset name or\n"
        "                             YAML file\n"
        "  --micro-batch b            micro-batch size (default 1)\n"
        "  --sequence-parallel        Megatron's --sequence-parallel\n"
        "  --a-very-long-flag-name N  one space only after a long flag\n"
        "  --long-switch-name-here    a switch\n"
        "  -h [ --help ]              show this help\n\n"
        "Megatron-LM's names are accepted too: --tensor-model-parallel-size for --tp,\n"
        "--micro-batch-size for --micro-batch, --bf16 for --precision bf16.\n\nExamples:\n  ptdp x\n"
    ).replace("--a-very-long-flag-name N  one", "--a-very-long-flag-name N one")
    table = parse_help(text)
    assert table.flags == (
        Flag("model", "--model", "M", "seed-example", "model: preset name or YAML file"),
        Flag("micro_batch", "--micro-batch", "b", "", "micro-batch size (default 1)"),
        Flag("sequence_parallel", "--sequence-parallel", "", "", "Megatron's --sequence-parallel"),
        Flag("a_very_long_flag_name", "--a-very-long-flag-name", "N", "", "one space only after a long flag"),
        Flag("long_switch_name_here", "--long-switch-name-here", "", "", "a switch"),
    )
    assert table.aliases == (
        ("tensor_model_parallel_size", "tp"),
        ("micro_batch_size", "micro_batch"),
        ("bf16", "precision='bf16'"),
    )
    assert parse_help("no flags here").flags == ()
    zsh = (
        "    plan)\n      _arguments -s \\\n"
        "        '--max-tp[largest size]:max-tp: ' \\\n"
        "    check)\n      _arguments -s \\\n"
        "        '--gpus[the model'\\''s GPUs\\: N [default\\: tp x pp\\]]:gpus: ' \\\n"
        "        '--require-fit[exit 4 when it does not fit]' \\\n"
        "      ;;\n"
    )
    assert parse_zsh_completion(zsh, "check") == {
        "--gpus": "the model's GPUs: N [default: tp x pp]",
        "--require-fit": "exit 4 when it does not fit",
    }


def test_arguments_the_api_sets_itself_are_refused():
    with pytest.raises(TypeError, match="'format'"):
        ptdp.plan(format="table")
    with pytest.raises(TypeError, match="'svg'"):
        ptdp.simulate(model="seed-example", svg="x.svg")


def test_missing_file_says_so():
    with pytest.raises(ptdp.InputError, match="no such file"):
        ptdp.plan(model="models/nothing-here.yaml")


# --- models and clusters from Python data ----------------------------------------------------


SEED = dict(
    name="my-gpt",
    num_layers=24,
    hidden_size=2048,
    num_attention_heads=32,
    vocab_size=50257,
    seq_length=2048,
)


def test_model_from_a_dict():
    plans = ptdp.plan(SEED, "dgx-a100-80gb", gpus=8, global_batch=128, top=1)
    reference = ptdp.plan("seed-example", "dgx-a100-80gb", gpus=8, global_batch=128, top=1)
    assert plans.best.step_time_s == pytest.approx(reference.best.step_time_s, rel=1e-12)
    assert plans.command.startswith("ptdp plan --model '<model dict>' --cluster dgx-a100-80gb")


def test_a_bad_dict_is_named_in_the_message():
    with pytest.raises(ptdp.InputError) as e:
        misspelt = {("seq_len" if k == "seq_length" else k): v for k, v in SEED.items()}
        ptdp.plan(misspelt, gpus=8, global_batch=128)
    message = e.value.message
    assert "<model dict>" in message and "seq_len" in message, message
    assert "/tmp" not in message and "ptdp-" not in message
    assert "did you mean seq_length" in message, message


def test_hugging_face_config_as_a_dict_a_file_and_a_folder():
    config = json.loads((FIXTURES / "tiny-llama" / "config.json").read_text())
    as_dict = ptdp.simulate(model=config, cluster="dgx-h100", gpus=8, global_batch=16, tp=1, pp=1)
    as_file = ptdp.simulate(
        model=FIXTURES / "tiny-llama" / "config.json", cluster="dgx-h100", gpus=8, global_batch=16, tp=1, pp=1
    )
    as_folder = ptdp.simulate(model=FIXTURES / "tiny-llama", cluster="dgx-h100", gpus=8, global_batch=16, tp=1, pp=1)
    assert as_dict.step_time_s == as_file.step_time_s == as_folder.step_time_s


def test_cluster_from_a_dict_of_a_profile():
    profile = next(p for p in ptdp.profiles() if p["name"] == "dgx-h100")
    assert profile["gpus_per_node"] == 8
    with pytest.raises(ptdp.InputError, match="<cluster dict>"):
        ptdp.plan(cluster={"name": "x", "gpu": {"peak_bf16_tflops": -1}})


# --- simulate --------------------------------------------------------------------------------

LAYOUT = dict(model="seed-example", cluster="dgx-a100-80gb", gpus=8, global_batch=128)


def test_simulate_matches_the_command():
    sim = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4)
    expected = cli_json(
        "simulate", "--model", "seed-example", "--cluster", "dgx-a100-80gb", "--gpus", "8",
        "--global-batch", "128", "--tp", "2", "--pp", "4", "--micro-batch", "4",
    )
    assert sim.to_dict() == expected
    assert len(sim.stages) == 4 and sim.stages[0].stage == 0
    assert sim.breakdown.bubble_s > 0
    assert sim.fits and 0 < sim.mfu < 1
    assert "Simulation: " in repr(sim)


MEGATRON_COMMAND = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
    "--num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --micro-batch-size 4 "
    "--global-batch-size 128 --vocab-size 50257 --bf16"
)


def test_simulate_a_megatron_command_as_written(tmp_path):
    sim = ptdp.simulate(megatron=MEGATRON_COMMAND, cluster="dgx-a100-80gb")
    checked = ptdp.check(MEGATRON_COMMAND, cluster="dgx-a100-80gb")
    assert sim.step_time_s == checked.yours["step_time_s"]
    assert len(sim.stages) == 4
    script = tmp_path / "train.sh"
    script.write_text("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + MEGATRON_COMMAND + "\n")
    assert ptdp.simulate(file=script, cluster="dgx-a100-80gb").step_time_s == sim.step_time_s
    # What Megatron-LM would refuse is bad input, named as the command line names it.
    with pytest.raises(ptdp.InputError, match="--num-microbatches"):
        ptdp.simulate(megatron=MEGATRON_COMMAND + " --num-microbatches 32", cluster="dgx-a100-80gb")


def test_megatron_names_are_accepted():
    ours = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4, sequence_parallel=True)
    megatron = ptdp.simulate(
        **LAYOUT,
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=4,
        micro_batch_size=4,
        sequence_parallel=True,
    )
    assert ours.to_dict() == megatron.to_dict()


def test_a_layout_that_does_not_fit_is_an_answer():
    sim = ptdp.simulate(model="gpt3-175b", cluster="dgx-a100-80gb", gpus=8, global_batch=64, tp=8, pp=1)
    assert not sim.fits
    assert "GB" in sim.memory_problem or "GiB" in sim.memory_problem
    assert "does not fit" in repr(sim)


def test_simulate_rule_violation_is_an_input_error():
    with pytest.raises(ptdp.InputError) as e:
        ptdp.simulate(**LAYOUT, tp=3, pp=1)
    assert "--tp" in e.value.message or "divisible" in e.value.message


def test_timeline_svg_and_trace():
    sim = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4)
    svg = sim._repr_svg_()
    document = xml.dom.minidom.parseString(svg)  # well-formed
    assert document.documentElement.tagName == "svg"
    assert "stage 0" in svg.lower() or "Stage 0" in svg
    trace = json.loads(sim.trace())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len(events) > 4 * 32


def test_svg_options():
    sim = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4)
    whole = sim.svg()
    window = sim.svg(svg_from=0.5, svg_until=1.0)
    code, out, err = cli(
        "simulate", "--model", "seed-example", "--cluster", "dgx-a100-80gb", "--gpus", "8",
        "--global-batch", "128", "--tp", "2", "--pp", "4", "--micro-batch", "4",
        "--svg", "-", "--svg-from", "0.5", "--svg-until", "1.0",
    )
    assert code == 0, err
    assert window == out and window != whole


def test_explain_fills_groups():
    sim = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4, explain=True)
    names = [g["name"] for g in sim.groups]
    assert names[:1] == ["TP"] and "PP" in names


# --- check -----------------------------------------------------------------------------------


def test_check_a_script_as_the_command_does():
    text = (FIXTURES / "seed-example.sh").read_text()
    result = ptdp.check(text)
    code, out, _ = cli("check", "--file", str(FIXTURES / "seed-example.sh"), "--format", "json")
    expected = json.loads(out)
    ours = result.to_dict()
    # The same judgement and figures; only where the text came from differs.
    assert ours.pop("source") != expected.pop("source")
    assert ours == expected
    assert result.accepted == expected["accepted"]
    assert [f.message for f in result.findings] == [f["message"] for f in expected["findings"]]
    assert result.layout["tp"] == 2 and result.layout["pp"] == 4
    assert result.yours["step_time_s"] > result.best["step_time_s"]


def test_check_refused_command_is_an_answer():
    result = ptdp.check(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
        "--num-attention-heads 30 --seq-length 2048 --max-position-embeddings 2048 "
        "--micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 3"
    )
    assert not result.accepted
    assert any("multiple of num_attention_heads" in f.message for f in result.errors)
    assert "refused by Megatron-LM" in repr(result)


def test_check_refused_for_layout_rules_says_why():
    command = MEGATRON_COMMAND.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 3")
    result = ptdp.check(command, cluster="dgx-a100-80gb")
    assert not result.accepted
    assert [f for f in result.findings if f.severity == "error"] == []  # the flags are fine
    rules = [r["rule"] for r in result.rules_broken]
    assert "heads-divisible-by-tp" in rules
    # The rules broken are its errors, each with the rule, the message and the fix.
    assert [e.rule for e in result.errors] == rules
    assert [e.message for e in result.errors] == [r["message"] for r in result.rules_broken]
    assert all(e.severity == "error" and e.fix for e in result.errors)
    shown = repr(result)
    assert "0 errors" not in shown
    assert f"refused by Megatron-LM, {len(rules)} errors, " in shown
    assert result.rules_broken[0]["message"] in shown, shown
    assert f"(and {len(rules) - 1} more error" in shown


def test_check_reads_a_file_as_the_command_does():
    path = FIXTURES / "seed-example.sh"
    result = ptdp.check(file=path)
    code, out, _ = cli("check", "--file", str(path), "--format", "json")
    assert code == 1
    assert result.to_dict() == json.loads(out)  # the source too: the file's name
    assert result.command == f"ptdp check --file {path}"
    assert [f.line for f in result.errors] == [f["line"] for f in json.loads(out)["findings"] if f["severity"] == "error"]
    with pytest.raises(TypeError, match="not both"):
        ptdp.check(path.read_text(), file=path)
    with pytest.raises(TypeError, match="missing 1 required argument: 'command'"):
        ptdp.check()
    with pytest.raises(ptdp.InputError, match="nothing-here.sh"):
        ptdp.check(file=FIXTURES / "nothing-here.sh")


def test_check_reads_sourced_files_only_where_allowed(tmp_path):
    # issue 35: a script sources files in its own folder, or in the folders allow_source names
    # (--allow-source); a script given as text has no folder; words print escaped.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.env").write_text("EXTRA=--issue35-outside-flag\n")
    project = tmp_path / "project"
    project.mkdir()
    script = project / "train.sh"
    command = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 $EXTRA\n"
    script.write_text("source ../outside/model.env\n" + command)
    refused = ptdp.check(file=script)
    assert "issue35-outside-flag" not in json.dumps(refused.to_dict())
    assert any(
        "../outside/model.env was not read: it lies outside the script's folder" in f.message
        for f in refused.findings
    ), refused.findings
    allowed = ptdp.check(file=script, allow_source=[outside])
    assert any(f.flag == "--issue35-outside-flag" for f in allowed.errors), allowed.findings
    assert allowed.command == f"ptdp check --allow-source {outside} --file {script}"
    text = f"source {outside}/model.env\n" + command
    assert not any(f.flag == "--issue35-outside-flag" for f in ptdp.check(text).errors)
    read = ptdp.check(text, allow_source=[str(outside)])
    assert any(f.flag == "--issue35-outside-flag" for f in read.errors)
    # Control characters and bytes that are not UTF-8 come back escaped, as valid text.
    (project / "nasty.sh").write_bytes(
        b"torchrun pretrain_gpt.py --num-layers 2 '--\x1b]0;TITLE\x07-\xff'\n"
    )
    nasty = ptdp.check(file=project / "nasty.sh")
    flags = [f.flag for f in nasty.errors]
    assert "--\u001b]0;TITLE\u0007-\\xff" in flags, flags
    code, out, err = cli("check", "--file", str(project / "nasty.sh"))
    assert "--\\x1b]0;TITLE\\x07-\\xff" in out and "\x1b" not in out + err


def test_check_that_cannot_judge_says_why():
    # issue 33: --yaml-cfg holds the configuration: no verdict (exit 5), not an exception.
    result = ptdp.check("torchrun --nproc_per_node 8 pretrain_gpt.py --yaml-cfg /configs/gpt.yaml")
    assert not result.accepted
    assert "/configs/gpt.yaml (--yaml-cfg)" in result.cannot_judge
    assert repr(result).startswith("<CheckResult: cannot judge: the configuration is in /configs/gpt.yaml")
    assert ptdp.check(file=FIXTURES / "seed-example.sh").cannot_judge is None


def test_findings_name_the_file_a_flag_was_written_in():
    # issue 33: a flag from a sourced file is named by that file and its line.
    result = ptdp.check(file=FIXTURES / "check_scripts" / "flags-from-a-sourced-file.sh")
    bogus = [f for f in result.errors if f.flag == "--bogus-flag"]
    assert [(f.file, f.line) for f in bogus] == [("sourced/model-arguments.sh", 5)]


def test_a_commands_notes_are_python_warnings():
    # issue 33: the sequence length chosen for a Hugging Face config reaches Python users.
    config = FIXTURES / "tiny-llama" / "config.json"
    with pytest.warns(ptdp.PtdpWarning, match="sequence length"):
        ptdp.simulate(model=config, cluster="dgx-h100", gpus=8, global_batch=16, tp=1, pp=1)


def test_check_sees_the_exported_variable():
    script = (
        "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 \\\n"
        "  --num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 \\\n"
        "  --micro-batch-size 2 --global-batch-size 128 --tensor-model-parallel-size 2 --bf16\n"
    )
    result = ptdp.check(script, vocab_size=50257)
    assert result.accepted
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in f.message for f in result.findings)
    assert not any("vocabulary" in f.message for f in result.findings)


# --- schedule --------------------------------------------------------------------------------


def test_schedule_orders_and_pictures():
    s = ptdp.schedule("1f1b", pp=4, microbatches=8)
    assert len(s.stages) == 4
    assert all(len(ops) == 16 for ops in s.stages)
    assert [str(op) for op in s.stages[3][:4]] == ["F0", "B0", "F1", "B1"]
    assert "F0" in s.text()
    assert xml.dom.minidom.parseString(s._repr_svg_()).documentElement.tagName == "svg"
    interleaved = ptdp.schedule("interleaved", pp=4, microbatches=8, virtual_stages=2)
    assert {op.chunk for op in interleaved.stages[0]} == {0, 1}
    order = " ".join(map(str, interleaved.stages[0]))
    assert "stage 0   " + order in interleaved.text()  # as the command prints it
    zb = ptdp.schedule("zb-h1", pp=4, microbatches=8)
    assert {op.op for op in zb.stages[0]} == {"F", "B", "W"}
    with pytest.raises(ptdp.InputError, match="--virtual-stages"):
        ptdp.schedule("interleaved", pp=4, microbatches=8)


def test_models_list_the_presets():
    names = [m["name"] for m in ptdp.models()]
    assert "seed-example" in names and "llama3-70b" in names


# --- the README's example --------------------------------------------------------------------


def test_the_readme_example_runs_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## From Python") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```")]
    # As written from the repository root, run in a scratch folder that has the same
    # tests/fixtures, so that its best.svg lands there.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "fixtures").symlink_to(FIXTURES)
    package = str(pathlib.Path(ptdp.__file__).resolve().parents[1])  # this ptdp, built or installed
    env = dict(os.environ, PYTHONPATH=package + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
        stdin=subprocess.DEVNULL, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "<Plan #" in run.stdout and "<Simulation: " in run.stdout
    assert xml.dom.minidom.parse(str(tmp_path / "best.svg")).documentElement.tagName == "svg"
    # The output the README shows is this run's.
    shown = section[section.index("```text\n") + len("```text\n") :]
    shown = shown[: shown.index("```")]
    assert run.stdout == shown, "the README shows another output: scripts/readme-python-example"


def readme_section():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## From Python")
    return readme[start : readme.index("\n## ", start + 1)]


def test_the_readme_example_says_whether_its_simulation_fits():
    section = readme_section()
    shown = section[section.index("```text\n") + len("```text\n") :]
    shown = shown[: shown.index("```")]
    after = section[section.index("```text\n"):].split("```", 2)[2]
    simulations = [line for line in shown.splitlines() if line.startswith("<Simulation: ")]
    assert simulations
    for line in simulations:
        fits = "does not fit" not in line
        # The verdict in words of its own, not only at the end of a long repr...
        assert f"micro_batch=2 fits: {fits}" in shown.splitlines()
        # ... and the text after the output says so when it does not fit.
        if not fits:
            assert "does not fit" in after.split("\n\n")[1], "say why the example does not fit"


def test_the_readme_installs_into_a_virtual_environment_and_shows_progress():
    section = readme_section()
    install = section[section.index("```sh\n") + len("```sh\n") :]
    install = install[: install.index("```")].splitlines()
    assert install[0].startswith("python3 -m venv ") and "/bin/activate" in install[0]
    pip = next(line for line in install if "pip install" in line)
    assert "pip install -v " in pip  # the build takes minutes: CMake's progress shows with -v
    assert not any("--break-system-packages" in line for line in install)


# --- what Jupyter shows ----------------------------------------------------------------------


def test_jupyter_draws_simulations_and_schedules_as_svg():
    from IPython.core.formatters import DisplayFormatter

    formatter = DisplayFormatter()
    sim = ptdp.simulate(**LAYOUT, tp=2, pp=4, micro_batch=4)
    shown, _ = formatter.format(sim)
    assert shown["image/svg+xml"] == sim.svg()
    assert shown["text/plain"].startswith("<Simulation: ")
    shown, _ = formatter.format(ptdp.schedule("zb-h1", pp=4, microbatches=8))
    assert "image/svg+xml" in shown and shown["text/plain"].startswith("<Schedule zb-h1")
    # A plan list is a table.
    shown, _ = formatter.format(ptdp.plan(top=2))
    assert "image/svg+xml" not in shown
    assert "<table" in shown["text/html"] and "megatron_args" in shown["text/html"]
