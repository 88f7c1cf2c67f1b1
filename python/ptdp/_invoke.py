"""Python arguments -> one ptdp command, run in-process by the extension module.

Every API call is a command of the ``ptdp`` program with the same flags, so the rules, the
numbers and the messages are the command line's. A model or cluster given as a Python dict is
written to a temporary file for the command (and named ``<model dict>`` in messages); a plan
object, or a command text to check, travels on the command's standard input (a here-document in
the command line shown to people, so that it runs as shown).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import _ptdp
from ._errors import InputError, PtdpError, PtdpWarning

Source = Union[str, "os.PathLike[str]", Mapping]


@dataclass(frozen=True)
class _Document:
    """A file the command reads, written from Python data when the command runs."""

    label: str  # how messages name it: "<model dict>"
    filename: str  # model.yaml, or config.json for a Hugging Face config
    text: str


Word = Union[str, _Document]


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def source(value: Source, what: str) -> Word:
    """A model or cluster argument: a preset name, a path, or a dict (a Hugging Face config.json
    dict when it has `model_type` or `architectures`)."""
    if isinstance(value, Mapping):
        hf = what == "model" and ("model_type" in value or "architectures" in value)
        return _Document(
            label=f"<{what} dict>",
            filename="config.json" if hf else f"{what}.yaml",
            # JSON is YAML: one key per line, so a message's line number points at the key.
            text=json.dumps(dict(value), indent=2, default=_word) + "\n",
        )
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise TypeError(
        f"{what}: expected a preset name, a file path or a dict, got {type(value).__name__}"
    )


def flags(options: Mapping[str, Any]) -> list[str]:
    """Keyword arguments -> flags: ``micro_batch=2`` -> ``--micro-batch 2``; True -> the switch;
    False and None -> nothing; a list repeats the flag; a dict gives KEY=VALUE words
    (``fix={"tp": 8}`` -> ``--fix tp=8``). Megatron-LM's names work as on the command line
    (``tensor_model_parallel_size=2``). A keyword that is no Python identifier
    (``**{"out=x.yaml": True}``, which would be the flag ``--out=x.yaml``) is a TypeError."""
    for key in options:
        if not isinstance(key, str) or not key.isidentifier():
            raise TypeError(
                f"{key!r} is no keyword argument: not a Python identifier (a flag's keyword is "
                "its name with _ for -, such as micro_batch)"
            )
    args: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                args += [flag, f"{k}={_word(v)}"]
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, _word(v)]
        else:
            args += [flag, _word(value)]
    return args


@dataclass(frozen=True)
class Invocation:
    """One ptdp command: its words (some of them files written from Python data) and the text
    on its standard input."""

    words: tuple[Word, ...]
    stdin: Optional[str] = None
    stdin_name: str = "EOF"  # the here-document's delimiter in command_line(): PLAN, SCRIPT
    documents: tuple[_Document, ...] = field(default=())
    plumbing: tuple[str, ...] = ()  # flags the API adds (--format json): not in command_line()

    @staticmethod
    def of(words: list[Word], stdin: Optional[str] = None, stdin_name: str = "EOF") -> "Invocation":
        docs = tuple(w for w in words if isinstance(w, _Document))
        return Invocation(tuple(words), stdin, stdin_name, docs)

    def with_flags(self, *extra: str) -> "Invocation":
        """The same command with flags of the API's own (the output format, files it reads
        back), which the command line shown to people leaves out."""
        return Invocation(
            self.words, self.stdin, self.stdin_name, self.documents, self.plumbing + extra
        )

    def command_line(self) -> str:
        """The equivalent command line, as a shell runs it: the standard input as a quoted
        here-document (``ptdp simulate --plan - <<'PLAN'`` ... ``PLAN``). Python data given as a
        dict is shown by its label (``'<model dict>'``)."""
        words = ["ptdp"] + [w.label if isinstance(w, _Document) else w for w in self.words]
        line = shlex.join(words)
        if self.stdin is not None:
            text = self.stdin if self.stdin.endswith("\n") or not self.stdin else self.stdin + "\n"
            lines = set(text.splitlines())
            end = self.stdin_name
            while end in lines:  # the delimiter must not be a line of the text
                end += "_"
            line += f" <<'{end}'\n{text}{end}"
        return line

    def run(self, ok: tuple[int, ...] = (0,)) -> tuple[int, str, str]:
        """Runs the command; raises InputError (exit 2) or PtdpError (another code not in
        `ok`) with the command's message."""
        with tempfile.TemporaryDirectory(prefix="ptdp-") as tmp:
            paths: dict[str, str] = {}
            args: list[str] = []
            for word in self.words + self.plumbing:
                if isinstance(word, _Document):
                    folder = os.path.join(tmp, str(len(paths)))
                    os.mkdir(folder)
                    path = os.path.join(folder, word.filename)
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(word.text)
                    paths[path] = word.label
                    args.append(path)
                else:
                    args.append(word)
            code, out, err = _ptdp.run(args, self.stdin)
        for path, label in paths.items():
            err = err.replace(path, label)
            out = out.replace(path, label)
        if code not in ok:
            message = _message(err) or f"ptdp exited with code {code}"
            cls = InputError if code == 2 else PtdpError
            raise cls(message, exit_code=code, command=self.command_line())
        return code, out, err


def _message(err: str) -> str:
    """The command's error message, without the `ptdp: error: ` prefix and progress lines."""
    lines = [l for l in err.replace("\r", "\n").splitlines() if l.strip()]
    errors = [re.sub(r"^ptdp: error: ", "", l) for l in lines if l.startswith("ptdp: error: ")]
    return "\n".join(errors if errors else lines)


def run_json(inv: Invocation, ok: tuple[int, ...] = (0,)) -> tuple[int, Any]:
    """Runs a command whose result is JSON; its notes and warnings become PtdpWarning."""
    code, out, err = inv.run(ok)
    for line in err.replace("\r", "\n").splitlines():
        for prefix in ("ptdp: note: ", "ptdp: warning: "):
            if line.startswith(prefix):
                warnings.warn(line[len(prefix):], PtdpWarning, stacklevel=4)
    return code, json.loads(out)
