#!/usr/bin/env python3
"""Compares megatron/megatron_flags.inc with the parser Megatron-LM itself builds, and prints every
difference (exit status 1 when there is one).

    /tmp/mvenv/bin/python scripts/megatron_options_check.py --megatron /tmp/megatron \\
        [--inc megatron/megatron_flags.inc]

Unlike scripts/megatron_options.py, this imports Megatron-LM, so it needs a Python with torch
(CPU-only is enough). It runs Megatron's own parse_args (the extra_args_provider being
megatron.post_training.arguments.add_modelopt_args, which pretrain_gpt.py and pretrain_hybrid.py
pass when nvidia-modelopt imports) with ArgumentParser.parse_args/parse_known_args patched to hand
back the finished parser instead of reading sys.argv; then it walks parser._actions and compares
each option string's arity, type, choices and default with the table.

Megatron-LM needs Python 3.12 (typing.override); on 3.11 the check puts typing_extensions'
override (or an identity decorator) into typing first. No package is stubbed otherwise: what
arguments.py imports runs on CPU (missing optional packages only warn).
"""

from __future__ import annotations

import argparse
import ast
import enum
import os
import re
import sys
import typing
import warnings

ROW = re.compile(r'^\s*\{("(?:[^"\\]|\\.)*"), FlagArity::(\w+), ("(?:[^"\\]|\\.)*"), '
                 r'("(?:[^"\\]|\\.)*"), ("(?:[^"\\]|\\.)*")(?:, "[^"]*")?\},?(?: \\)?$')
SWITCH_CLASSES = (argparse._StoreTrueAction, argparse._StoreFalseAction,
                  argparse._StoreConstAction, argparse._AppendConstAction, argparse._CountAction,
                  argparse._HelpAction, argparse._VersionAction, argparse.BooleanOptionalAction)


class Captured(Exception):
    """Raised from the patched parse_args: carries the parser Megatron built."""

    def __init__(self, parser):
        super().__init__("parser captured")
        self.parser = parser


def shim_python_311() -> None:
    """Megatron-LM imports typing.override (3.12+); give 3.11 the same decorator."""
    if hasattr(typing, "override"):
        return
    try:
        from typing_extensions import override
    except ImportError:
        def override(func):
            return func
    typing.override = override


def megatron_parser(root: str) -> argparse.ArgumentParser:
    sys.path.insert(0, root)
    shim_python_311()
    warnings.simplefilter("ignore")  # "Apex is not installed" and the like
    from megatron.post_training.arguments import add_modelopt_args
    from megatron.training import arguments

    def capture(self, *args, **kwargs):
        raise Captured(self)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = capture
    try:
        arguments.parse_args(extra_args_provider=add_modelopt_args)
    except Captured as done:
        return done.parser
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = saved
    raise RuntimeError("parse_args returned without parsing")


def arity(action: argparse.Action) -> str:
    if isinstance(action, SWITCH_CLASSES):
        return "kSwitch"
    if action.nargs is None:
        return "kOne"
    if action.nargs == "?":
        return "kOptional"
    return "kMany"  # '+', '*', REMAINDER or a count


def type_word(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                           argparse.BooleanOptionalAction)):
        return "bool"
    if isinstance(action, argparse._CountAction):
        return "int"
    if isinstance(action, SWITCH_CLASSES):
        return "other"
    kind = action.type
    if kind is None or kind is str:
        return "str"
    if kind in (int, float, bool):
        return kind.__name__
    if getattr(kind, "__name__", "") == "enum_type_handler":  # ArgumentGroupFactory's closure
        return "enum"
    if getattr(kind, "__name__", "") == "Path" or isinstance(kind, argparse.FileType):
        return "path"
    return "other"


# Defaults and choices are printed exactly as the generator prints them.
from megatron_options import choices_text, py_repr  # noqa: E402  (same folder)


def live_rows(parser: argparse.ArgumentParser) -> dict:
    rows = {}
    for action in parser._actions:
        data = (arity(action), type_word(action), choices_text(action.choices),
                py_repr(action.default))
        for name in action.option_strings:
            rows[name] = data
    return rows


def cpp_unescape(literal: str) -> str:
    body = literal[1:-1]
    return re.sub(r'\\([0-7]{3}|.)', lambda m: chr(int(m.group(1), 8)) if len(m.group(1)) == 3
                  else {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def table_rows(path: str) -> dict:
    rows = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            match = ROW.match(line.rstrip("\n"))
            if match:
                name, arity_, kind, choices, default = match.groups()
                rows[cpp_unescape(name)] = (arity_, cpp_unescape(kind), cpp_unescape(choices),
                                            cpp_unescape(default))
    return rows


def same_default(table: str, live: str) -> bool:
    """Equal text, or the table kept Python source (an environment-dependent default) that
    evaluates, here, to the live value."""
    if table == live:
        return True
    try:
        ast.literal_eval(table)
        return False  # a literal that differs
    except (ValueError, SyntaxError):
        pass
    try:
        return py_repr(eval(table, {"os": os})) == live  # noqa: S307 - our own table's text
    except Exception:  # noqa: BLE001
        return False


def compare(table: dict, live: dict) -> list:
    problems = []
    for name in sorted(set(table) | set(live)):
        if name not in live:
            problems.append(f"{name}: in the table, not in Megatron's parser")
            continue
        if name not in table:
            problems.append(f"{name}: in Megatron's parser {live[name]}, not in the table")
            continue
        for label, mine, theirs in zip(("arity", "type", "choices", "default"),
                                       table[name], live[name]):
            equal = same_default(mine, theirs) if label == "default" else mine == theirs
            if not equal:
                problems.append(f"{name}: {label} {mine!r} in the table, {theirs!r} in Megatron")
    return problems


def main(argv=None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--megatron", required=True, help="the Megatron-LM checkout")
    cli.add_argument("--inc", default="megatron/megatron_flags.inc")
    args = cli.parse_args(argv)
    table = table_rows(args.inc)
    live = live_rows(megatron_parser(os.path.abspath(args.megatron)))
    problems = compare(table, live)
    for line in problems:
        print(line)
    print(f"megatron_options_check: {len(table)} options in {args.inc}, {len(live)} in "
          f"Megatron's parser, {len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
