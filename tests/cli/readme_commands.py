#!/usr/bin/env python3
"""Runs every complete `scripts/ptdp ...` command the README shows, as written, and fails on any
that does not exit 0 (or the code the README says it exits with).

Usage: readme_commands.py README.md PTDP_BINARY WORK_DIR

Commands come from the README's code spans and shell blocks (a trailing backslash continues a
line). A command with a placeholder (ARGS, FILE, ..., [optional parts]) is not complete and is
skipped; the list of what ran and what was skipped is printed. Each runs with bash in WORK_DIR,
which has the repository's data folders (results/, tests/, models/, hwprofiles/) linked in and
`scripts/ptdp` (and `ptdp` on the PATH) standing for the built binary (scripts/ptdp's set-up and build steps are what
scripts/test has just done).

Every `ptdp plan` search among them (one command, no output files) runs twice more, with
`--format json` on 1 and on 3 threads: the answers must be the same, byte for byte.
"""

import os
import re
import shutil
import subprocess
import sys
import time

# Commands the README shows failing on purpose: substring -> the exit code it documents.
EXPECTED_CODES = {}
# Commands that cannot run here as written, and why (each says so in the output).
NOT_HERE = {
    "ptdp execute --plan plan.yaml --launch": "trains on a cluster: mpirun/srun with the plan's "
    "GPU count (tests/executor runs the executor)",
}


def search_only(command: str) -> bool:
    """A plain search: `scripts/ptdp plan` alone on its line, printing only to standard output
    (shell operators inside quotes do not count)."""
    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "''", command)
    return bare.startswith("scripts/ptdp plan") and not re.search(
        r"\||&&|;|>|--format|--out|--html|--help", bare)


PLACEHOLDER = re.compile(r"\bARGS\b|\bFILE\b|\.\.\.|\[|<|\bNAME\b|\bCMD\b")


def commands(readme: str) -> list[str]:
    found = []
    for language, block in re.findall(r"```(\w*)\n(.*?)```", readme, re.S):
        if language not in ("", "sh", "bash"):
            continue
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("scripts/ptdp "):
                found.append(line)
    prose = re.sub(r"```.*?```", "", readme, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        # `ptdp NAME --flag ...` in prose is a command too (bare `ptdp NAME` names the command).
        if span.startswith("ptdp ") and " -" in span:
            span = "scripts/" + span
        if span.startswith("scripts/ptdp ") and span not in found:
            found.append(span)
    return found


def main() -> int:
    readme_path, binary, work = sys.argv[1:4]
    root = os.path.dirname(os.path.abspath(readme_path))
    readme = open(readme_path, encoding="utf-8").read()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "scripts"))
    for folder in ("results", "tests", "models", "hwprofiles"):
        os.symlink(os.path.join(root, folder), os.path.join(work, folder))
    wrapper = os.path.join(work, "scripts", "ptdp")
    with open(wrapper, "w") as f:
        f.write(f'#!/usr/bin/env bash\nexec "{os.path.abspath(binary)}" "$@"\n')
    os.chmod(wrapper, 0o755)

    failed, ran, skipped, threads_checked = [], 0, [], 0
    for command in commands(readme):
        if PLACEHOLDER.search(command):
            skipped.append((command, "placeholders"))
            continue
        why = next((w for s, w in NOT_HERE.items() if s in command), None)
        if why:
            skipped.append((command, why))
            continue
        expected = next((c for s, c in EXPECTED_CODES.items() if s in command), 0)
        start = time.monotonic()
        run = subprocess.run(
            ["bash", "-c", command], cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
            text=True, timeout=600,
            env=dict(os.environ, PTDP_PROGRESS="0",
                     PATH=os.path.join(work, "scripts") + os.pathsep + os.environ["PATH"]),
        )
        ran += 1
        seconds = time.monotonic() - start
        status = "ok" if run.returncode == expected else f"FAILED (exit {run.returncode})"
        print(f"{status:>18}  {seconds:6.1f} s  {command}")
        if run.returncode != expected:
            failed.append(command)
            print((run.stderr or run.stdout)[-2000:])
        elif search_only(command):
            answers = [
                subprocess.run(["bash", "-c", f"{command} --format json --threads {n}"], cwd=work,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=600, env=dict(os.environ, PTDP_PROGRESS="0",
                                                     PATH=os.path.join(work, "scripts")
                                                     + os.pathsep + os.environ["PATH"]))
                for n in (1, 3)
            ]
            same = answers[0].stdout == answers[1].stdout and answers[0].stdout and (
                answers[0].returncode == answers[1].returncode)
            threads_checked += 1
            print(f"{'same' if same else 'DIFFERENT':>18}            on 1 and 3 threads")
            if not same:
                failed.append(command + " (--threads 1 and 3 differ)")
    for command, why in skipped:
        print(f"{'skipped':>18}            {command}  ({why})")
    print(f"{ran} README commands run, {len(failed)} failed, {len(skipped)} skipped; "
          f"{threads_checked} searches the same on 1 and 3 threads")
    if ran == 0:
        print("no command found: has the README's format changed?")
        return 1
    if not failed:
        print("PASS: readme commands")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
