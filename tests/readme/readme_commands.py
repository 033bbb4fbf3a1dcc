"""README as a test: every command a newcomer copies from README.md (its bash blocks) and from
docs/analysis.md's walk-through runs as written, in document order, in a fresh copy of the
repository whose `build/` is this build and whose `../shared` is the shared folder. The copy
is what a clone has (git's file list), so a command that only works in the developer's tree,
or from one particular folder, fails here.

What this test changes, and says it changes when it runs:
  * training is capped (`--max_duration`, QUICKSTART_STEPS, `--set max_duration` on a sweep
    given on the command line, the walk-through sweep's steps), so the whole walk fits CI; the
    commands are otherwise unchanged;
  * `~/.cache/siamese/venv/bin/python` becomes the Python this test runs under (the one
    scripts/setup.sh chose, which is that venv unless the machine's python3 had torch);
  * a few commands are skipped, each with its reason (SKIPPED below);
and it checks the output that README promises (EXPECTED below) and what it must not show
(UNEXPECTED), not only exit codes.

Usage: readme_commands.py --source REPO --build BUILD_DIR --shared SHARED_DIR [--keep]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

STEP_CAP = 10
BIG_CONFIG_CAP = 3  # configs/tiny/base.yaml: a 50k vocabulary, seconds per step on 2 cores
SWEEP_STEP_CAP = 3  # per run of README's comparison: 18 runs, about 1 min in all
VENV_PYTHON = "~/.cache/siamese/venv/bin/python"

# (substring of the command, why it does not run here). Every other command runs.
SKIPPED = [
    ("scripts/test.sh", "this test runs inside scripts/test.sh"),
    ("--nproc_per_node 8", ("8 ranks of the OLMo-1B model need 8 GPUs and its token files; "
                            "the 2-rank commcheck before it checks the launch")),
]

# (substring of the command, regex its output must match): what the text around it promises.
EXPECTED = [
    ("scripts/quickstart.sh", r"Answers to held-out problems"),
    ("siamese config configs/tiny/base.yaml", r"d_model: 256"),
    ("siamese inspect", r"(?i)param"),
    ("siamese parity ../shared/golden/hybrid_pre", r"(?i)pass|match"),
    ("siamese tokenize", r"(?i)token"),
    ("siamese generate runs/quickstart-hybrid_pre", r"47\+85="),
    ("siamese eval runs/quickstart-hybrid_pre", r"bits/byte"),
    ("AutoModelForCausalLM", r"^b'47\+85="),
    ("commcheck", r"(?i)ok|all-reduce"),
    ("siamese report", r"\| Model"),
    ("siamese sweep --config", r"run 18 of 18: "),
    ("plot_report.py runs/cmp", r"wrote .*_curves\.png"),
]

# (substring of the command, regex its output must not match).
UNEXPECTED = [
    # The exported generation config leaves the length to the caller's max_new_tokens.
    ("AutoModelForCausalLM", r"max_length"),
    ("siamese", r"(?i)traceback|segmentation fault|core dumped"),
]

# Files of the copy edited before the walk-through: the sweep's 400 steps become a few.
SWEEP_FILE = "configs/sweeps/quickstart_lr.yaml"
SWEEP_CAP = [("--max_duration=400", "--max_duration=4"),
             ("--save_interval=400", "--save_interval=4"),
             ("--eval_interval=200", "--eval_interval=2"),
             ("--scheduler.t_warmup=40", "--scheduler.t_warmup=2")]


def fenced_bash_blocks(text):
    return re.findall(r"^```(?:bash|sh)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def walk_through_blocks(text):
    """Indented code blocks of a section whose heading says Walk-through."""
    blocks = []
    for section in re.split(r"^#+ ", text, flags=re.MULTILINE):
        if section.lower().startswith("walk-through"):
            block = []
            for line in section.splitlines() + [""]:
                if line.startswith("    "):
                    block.append(line[4:])
                elif block:
                    blocks.append("\n".join(block) + "\n")
                    block = []
    return blocks


def strip_comment(line):
    """The line without a trailing `# ...` shell comment (outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(block):
    """Shell commands of a block: continuation lines joined, multi-line quotes kept whole."""
    result, current = [], ""
    for line in block.splitlines():
        if current.count('"') % 2 == 1:
            current += "\n" + line
        else:
            line = strip_comment(line)
            if not line and not current:
                continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            current += line
        if current.count('"') % 2 == 0:
            result.append(current.strip())
            current = ""
    assert not current, f"unterminated command: {current!r}"
    return result


def fresh_copy(source, build, shared, scratch):
    clone = os.path.join(scratch, "clone")
    files = subprocess.run(["git", "-C", source, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], check=True, capture_output=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(source, rel)
        if not os.path.isfile(src):
            continue  # deleted in the working tree
        dst = os.path.join(clone, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    os.symlink(os.path.abspath(build), os.path.join(clone, "build"))
    os.symlink(os.path.abspath(shared), os.path.join(scratch, "shared"))
    return clone


def adapt(command):
    """The command as this test runs it, and what was changed."""
    changes = []
    if VENV_PYTHON in command:
        command = command.replace(VENV_PYTHON, sys.executable)
        changes.append(f"python: {sys.executable}")
    if re.search(r"siamese train ", command):
        cap = BIG_CONFIG_CAP if "configs/tiny/base.yaml" in command else STEP_CAP
        command += f" --max_duration={cap}"
        changes.append(f"step cap --max_duration={cap}")
    if re.search(r"siamese sweep --config ", command):
        cap = f" --set max_duration={SWEEP_STEP_CAP} --set eval_subset_num_batches=1"
        command += cap  # the last --set of a key holds
        changes.append(f"step cap{cap}")
    if command.startswith("scripts/quickstart.sh"):
        command = f"QUICKSTART_STEPS={STEP_CAP} " + command
        changes.append(f"step cap QUICKSTART_STEPS={STEP_CAP}")
    return command, changes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--shared", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()

    walk = []
    with open(os.path.join(args.source, "README.md")) as f:
        walk += [("README.md", c) for b in fenced_bash_blocks(f.read()) for c in commands(b)]
    with open(os.path.join(args.source, "docs/analysis.md")) as f:
        walk += [("docs/analysis.md", c) for b in walk_through_blocks(f.read()) for c in commands(b)]
    assert len(walk) >= 20, f"found only {len(walk)} commands: did the README's blocks change form?"
    for pattern, _ in SKIPPED + EXPECTED + UNEXPECTED:
        assert any(pattern in c for _, c in walk), f"no README command contains {pattern!r} any more"

    scratch = tempfile.mkdtemp(prefix="siamese-readme-")
    clone = fresh_copy(args.source, args.build, args.shared, scratch)
    with open(os.path.join(clone, SWEEP_FILE)) as f:
        sweep = f.read()
    for old, new in SWEEP_CAP:
        assert old in sweep, f"{SWEEP_FILE} no longer has {old}"
        sweep = sweep.replace(old, new)
    with open(os.path.join(clone, SWEEP_FILE), "w") as f:
        f.write(sweep)
    print(f"fresh copy: {clone}; {SWEEP_FILE} capped: {SWEEP_CAP}")

    # A newcomer's environment: none of the project's variables set.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SIAMESE_") and k not in ("MODEL_TYPE", "OMP_NUM_THREADS")}
    failures = []
    for doc, command in walk:
        skip = next((why for pattern, why in SKIPPED if pattern in command), None)
        if skip:
            print(f"\n[{doc}] SKIPPED {command}\n  why: {skip}")
            continue
        run, changes = adapt(command)
        print(f"\n[{doc}] $ {command}" + (f"\n  changed: {'; '.join(changes)}" if changes else ""))
        start = time.monotonic()
        proc = subprocess.run(["bash", "-c", "set -eo pipefail\n" + run], check=False, cwd=clone, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=900)
        seconds = time.monotonic() - start
        output = proc.stdout
        print("  | " + "\n  | ".join(output.rstrip().splitlines()[-15:]))
        print(f"  exit {proc.returncode} after {seconds:.1f} s")
        if proc.returncode != 0:
            failures.append(f"[{doc}] {command}: exit {proc.returncode}")
            continue
        for pattern, regex in EXPECTED:
            if pattern in command and not re.search(regex, output, flags=re.MULTILINE):
                failures.append(f"[{doc}] {command}: output lacks /{regex}/")
        for pattern, regex in UNEXPECTED:
            if pattern in command and re.search(regex, output, flags=re.MULTILINE):
                failures.append(f"[{doc}] {command}: output has /{regex}/")

    if failures:
        print(f"\nFAILED ({len(failures)}), scratch kept in {scratch}:\n  " + "\n  ".join(failures))
        return 1
    if not args.keep:
        shutil.rmtree(scratch)
    print(f"\nall {len(walk)} commands ran as written (with the changes named above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
