"""The commands' flags as Python keyword arguments, in each function's signature and help.

The options of plan(), simulate() and check() are their commands' flags (``micro_batch=2`` is
``--micro-batch 2``). Their list is read from the command's own ``--help`` (and each flag's
help text, unwrapped, from ``ptdp --completion zsh``) when the package is imported, in-process
in a few milliseconds, so `inspect.signature` and `help()` show the flags of the very command
that runs, defaults and all, and cannot drift from it. A keyword that is no flag raises
Python's TypeError, with the closest valid keyword.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from . import _ptdp


@dataclass(frozen=True)
class Flag:
    """One flag of a command, as its --help lists it."""

    keyword: str  # micro_batch
    flag: str  # --micro-batch
    value: str  # what it takes ("b", "FILE"); "" for a switch
    default: str  # the command's default as --help shows it ("bf16"); "" when it shows none
    help: str


@dataclass(frozen=True)
class FlagTable:
    flags: tuple[Flag, ...]
    # Megatron-LM's names the command accepts too: (keyword, what it stands for), e.g.
    # ("tensor_model_parallel_size", "tp"), ("bf16", "precision='bf16'").
    aliases: tuple[tuple[str, str], ...]


def keyword(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


# "  --precision P (=bf16)   bf16 | fp16 ...": the flag, what it takes (an upper-case word, or one
# lower-case letter such as "b"), the default, the help. A long flag leaves one space only.
_FLAG_LINE = re.compile(
    r"^  (--[a-z0-9][a-z0-9-]*)(?: ([A-Z][A-Z0-9_=]*|[a-z])(?=\s|$))?(?: \(=([^)]*)\))?\s*(.*)$"
)
_ALIAS = re.compile(r"(--[a-z0-9][a-z0-9-]*)\s+for\s+(--[a-z0-9][a-z0-9-]*)(?:\s+([a-z0-9]+)\b)?")


def parse_help(text: str) -> FlagTable:
    """The flags of a command's --help text: the "Flags:" list (a help text continues on lines
    indented further) and the paragraph of Megatron-LM's names."""
    flags: list[Flag] = []
    lines = text.splitlines()
    if "Flags:" not in lines:
        return FlagTable((), ())
    i = lines.index("Flags:") + 1
    while i < len(lines) and lines[i].strip():
        m = _FLAG_LINE.match(lines[i])
        if m:
            flag, value, default, help_text = m.groups()
            flags.append(Flag(keyword(flag), flag, value or "", default or "", help_text.strip()))
        elif lines[i].startswith("   ") and flags:  # the help text goes on
            last = flags[-1]
            flags[-1] = Flag(
                last.keyword, last.flag, last.value, last.default,
                f"{last.help} {lines[i].strip()}".strip(),
            )
        i += 1
    aliases: list[tuple[str, str]] = []
    start = text.find("Megatron-LM's names are accepted too:")
    if start >= 0:
        paragraph = text[start:].split("\n\n")[0]
        for megatron, ours, value in _ALIAS.findall(paragraph):
            meaning = keyword(ours) + (f"={value!r}" if value else "")
            aliases.append((keyword(megatron), meaning))
    return FlagTable(tuple(flags), tuple(aliases))


# '--seq-length[override the model'\''s training sequence length]:seq-length: ' in zsh's
# completion: a flag's help text on one line (--help wraps it, sometimes inside a word).
_ZSH_FLAG = re.compile(r"'(--[a-z0-9][a-z0-9-]*)\[((?:[^\]\\]|\\.)*)\]")


def parse_zsh_completion(text: str, command: str) -> dict[str, str]:
    """The help text of each flag of `command` in `ptdp --completion zsh`."""
    start = text.find(f"\n    {command})\n")
    if start < 0:
        return {}
    block = text[start : text.find(";;", start)].replace("'\\''", "'")
    return {flag: re.sub(r"\\(.)", r"\1", desc) for flag, desc in _ZSH_FLAG.findall(block)}


@functools.lru_cache(maxsize=None)
def _zsh_completion() -> str:
    code, out, _ = _ptdp.run(["--completion", "zsh"], None)
    return out if code == 0 else ""


@functools.lru_cache(maxsize=None)
def flag_table(command: str) -> FlagTable:
    code, out, _ = _ptdp.run([command, "--help"], None)
    if code != 0:
        return FlagTable((), ())
    table = parse_help(out)
    unwrapped = parse_zsh_completion(_zsh_completion(), command)
    flags = tuple(
        Flag(f.keyword, f.flag, f.value, f.default, unwrapped.get(f.flag, f.help))
        for f in table.flags
    )
    return FlagTable(flags, table.aliases)


def document(func: Callable, command: str, *, skip: Iterable[str] = ()) -> None:
    """Gives `func` (whose options arrive in **options) the signature and help of its command:
    every flag not in `skip` as a keyword-only parameter (switches default to False, the rest to
    None: the command's default), and, where the command takes Megatron-LM's names too, a
    ``**megatron_names`` for them."""
    table = flag_table(command)
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.kind != p.VAR_KEYWORD]
    taken = {p.name for p in params} | set(skip) | {"help"}
    listed = [f for f in table.flags if f.keyword in {p.name for p in params}]
    for f in table.flags:
        if f.keyword in taken:
            continue
        taken.add(f.keyword)
        default = None if f.value else False
        params.append(inspect.Parameter(f.keyword, inspect.Parameter.KEYWORD_ONLY, default=default))
        listed.append(f)
    if table.aliases:
        params.append(inspect.Parameter("megatron_names", inspect.Parameter.VAR_KEYWORD))
    func.__signature__ = sig.replace(parameters=params)
    func._ptdp_command = command
    doc = inspect.cleandoc(func.__doc__ or "")
    func.__doc__ = doc + "\n\n" + _options_doc(command, listed, table)


def _options_doc(command: str, listed: list[Flag], table: FlagTable) -> str:
    def para(text: str, indent: str = "") -> str:
        return textwrap.fill(
            text, 96, initial_indent=indent, subsequent_indent=indent + "    ",
            break_long_words=False, break_on_hyphens=False,
        )

    lines = [
        para(
            f"Options: the flags of `ptdp {command}` (`ptdp {command} --help`), `_` for `-`; a "
            "switch is True or False, None leaves a flag out (the command's default)."
        )
    ]
    for f in listed:
        what = f"{f.keyword}={f.value or 'True'}"
        default = f" (default {f.default})" if f.default else ""
        lines.append(para(f"{what}: {f.help}{default}", "    "))
    if table.aliases:
        names = ", ".join(f"{a} (for {b})" for a, b in table.aliases)
        lines.append(para(f"Megatron-LM's names work too (**megatron_names): {names}."))
    return "\n".join(lines)


def keywords(func: Callable) -> list[str]:
    """The keywords `func` takes, with the Megatron-LM names of its command."""
    names = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    command = getattr(func, "_ptdp_command", "")
    return names + [a for a, _ in flag_table(command).aliases] if command else names


def unexpected_keyword(function: str, name: str, valid: Iterable[str]) -> TypeError:
    """Python's own error for a keyword a function does not take, with the closest valid one
    (``simulate() got an unexpected keyword argument 'modle'. Did you mean 'model'?``)."""
    message = f"{function}() got an unexpected keyword argument {name!r}"
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    if close:
        message += f". Did you mean {close[0]!r}?"
    return TypeError(message)


_UNKNOWN_FLAG = re.compile(r"^(--[A-Za-z0-9][A-Za-z0-9_-]*): unknown flag\b")


def unknown_keyword(message: str, options: Iterable[str]) -> Optional[str]:
    """The keyword among `options` that the command refused as an unknown flag, if that is what
    its `message` says."""
    m = _UNKNOWN_FLAG.match(message)
    if not m:
        return None
    for name in options:
        if "--" + name.replace("_", "-") == m.group(1):
            return name
    return None
