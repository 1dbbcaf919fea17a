#!/usr/bin/env python3
"""Bad input for routelab-cli at random: mutated config files (every preset but the 360M ones, and a small run's
resolved config: keys dropped, added or given values of another type or range, the text cut short), mutated sweep
files (experiments/sweeps/ the same way, their grids and baselines too), damaged checkpoints (cut, bytes changed,
replaced; with and without the CRC the store recorded), damaged run stores, damaged token shards (a shard or the
manifest of `prepare`'s byte-level output), corpora of random bytes, nothing, a few bytes or long lines,
SentencePiece tokenizers (a damaged model file for `tokenizer show`, `train` and `prepare`, a run store's stored
tokenizer damaged, `tokenizer train` on such corpora at sizes in and out of range), and command lines (`args`: a
subcommand with options and positionals drawn from its own --help, given values in and out of their type and range,
the benchmarks' numbers small; `bench`: the benchmarks alone). Each case runs a command on it (train, eval,
generate, resume, profile, kv, runs, show, export, compare, sweep (--dry-run, or a sweep shrunk to 2-step runs), and
for `args` every subcommand but `tokenizer train`, `bench shards`, `bench contention` and `bench dist`). A finding
is a process killed by a signal, a sanitizer report (a leak at exit included), an uncaught exception, an exception
from outside RouteLab's errors (the CLI's "unexpected error", which names no file or key) or a case past the time
limit (for `args` listed apart: a command line may ask for long work); a clear error or success is not (a clear
error that names none of the damaged files is listed apart for review). Run it against the sanitized CLI
(packaging/sanitize.sh builds it); outside CI. Exit status 1 when anything was found.

  python3 packaging/fuzz-cli.py [--cli build-sanitize/app/routelab-cli] [--cases 100] [--seed 1]
                                [--kinds config,checkpoint,store,shards,corpus,sweep,tokenizer,args,bench]
                                [--work /tmp/routelab-fuzz]
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANITIZER_REPORT = re.compile(r"(ERROR|SUMMARY): \w*Sanitizer")
VALUES = [None, True, -1, 0, 2**63, -2**63, 1e308, -1e-308, 3.5, "", "x" * 5000, "\u00e9\u0000\u00fc", [], [1, "a"],
          {}, {"a": 1}, "nan", "-7", "1e9", "../../etc/passwd", "/nonexistent/dir/file"]
# Values for a command line's options by type (`args`), in and out of range.
ARG_VALUES = {"INT": ["1", "2", "0", "-1", "3", "64", "2147483648", "9223372036854775807", "-9223372036854775809",
                      "1.5", "x", ""],
              "FLOAT": ["0", "1", "0.5", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "x", ""],
              "TEXT": ["", "x", "1", "-1", "nan", "/nonexistent/dir/file", "../../etc/passwd", "\u00e9\u4e2d" * 50,
                       "a=b", "=", "train.steps", "model.arch=nothing", "run.device=cuda:7", "x" * 5000]}
ARG_VALUES["UINT"] = ARG_VALUES["INT"]
# The benchmarks' numbers (shapes, lengths, batches, steps, fractions) drawn small or out of range only: a large one
# asks for long work, not bad input.
BENCH_ARG_VALUES = {"INT": ["0", "1", "2", "3", "-1", "1.5", "x", ""], "FLOAT": ["0", "0.1", "0.5", "1", "-1", "2",
                                                                               "nan", "inf", "x", ""]}
BENCH_ARG_VALUES["UINT"] = BENCH_ARG_VALUES["INT"]
BENCH_ARG_VALUES["TEXT"] = ARG_VALUES["TEXT"]
# Subcommands `args` leaves out: long work by design (`bench shards`' gigabytes on disk, `bench contention`'s and
# `bench dist`'s whole training runs, a tokenizer's training: the `tokenizer` kind trains on bad corpora instead).
# The other benchmarks stay, with small numbers: at their default shapes some take minutes on a CPU (listed apart
# past the time limit).
ARG_SKIPPED = {"bench", "tokenizer train"}
ARG_KEPT = {"bench step", "bench forward", "bench decode", "bench routing", "bench loss", "bench speed",
            "bench eviction", "bench train-step"}
# A small DTRNet run: the checkpoint, store and resume cases start from it.
BASE_RUN = ["--preset", "dtrnet-bilayer", "--set", "model.n_layer=3", "--set", "data.context=32", "--set",
            "train.batch_size=2", "--set", "train.eval_every=3", "--set", "train.eval_batches=1", "--quiet",
            "--threads", "1"]


class Fuzz:
    def __init__(self, args):
        self.cli, self.work, self.timeout = os.path.abspath(args.cli), args.work, args.timeout
        self.findings, self.slow, self.unnamed, self.outcomes = [], [], [], {"ok": 0, "clear error": 0}
        self.env = dict(os.environ, ROUTELAB_HOME=os.path.join(self.work, "home"),
                        ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:exitcode=86",
                        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=" +
                        os.path.join(ROOT, "packaging", "ubsan.supp"))
        self.verbose = args.verbose

    def run(self, args, label, slow_is_finding=True, named=()):
        """Runs the CLI; records a finding where it crashed, reported or hung (or, not `slow_is_finding`, lists a
        command past the time limit apart). A clear error that names none of the files in `named` (the damaged
        input, by file name) is listed apart for review: the user is told what is wrong but not where."""
        try:
            p = subprocess.run([self.cli] + args, env=self.env, capture_output=True, text=True, errors="replace",
                               timeout=self.timeout, cwd=self.work)  # relative --out paths land in the work folder
        except subprocess.TimeoutExpired:
            (self.findings if slow_is_finding else self.slow).append((label, f"no answer in {self.timeout} s", ""))
            return
        err = p.stderr
        last = (err.strip().splitlines() or [""])[-1][:200]
        if self.verbose:
            print(label, p.returncode, last, flush=True)
        # A sanitizer's report ("==PID==ERROR: AddressSanitizer: ...", "SUMMARY: UndefinedBehaviorSanitizer"), not a
        # message that names one (the sanitized build's refusal of SentencePiece).
        if (p.returncode < 0 or p.returncode == 86 or SANITIZER_REPORT.search(err) or "runtime error:" in err or
                "terminate called" in err or "routelab-cli: unexpected error:" in err):
            self.findings.append((label, f"exit {p.returncode}", err[-3000:]))
            print("FINDING", label, p.returncode, err[-1500:], sep="\n", flush=True)
        else:
            self.outcomes["ok" if p.returncode == 0 else "clear error"] += 1
            if p.returncode != 0 and named and not any(os.path.basename(n) in err for n in named):
                self.unnamed.append((label, last))

    def prepare(self):
        """The base run (6 steps, a checkpoint at 6, then marked stopped with 8 to go), its config, the presets."""
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.base_db = os.path.join(self.work, "base.sqlite")
        p = subprocess.run([self.cli, "train"] + BASE_RUN + ["--steps", "6", "--db", self.base_db], env=self.env,
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("fuzz-cli: the base run failed:\n" + p.stderr[-2000:])
        show = subprocess.run([self.cli, "show", "1", "--json", "--db", self.base_db], env=self.env,
                              capture_output=True, text=True, check=True)
        config = json.loads(show.stdout)["config"]
        self.configs = [config] + [json.load(open(path)) for path in sorted(glob.glob(f"{ROOT}/experiments/*.json"))
                                   if "360m" not in path]
        self.sweeps = [json.load(open(path)) for path in sorted(glob.glob(f"{ROOT}/experiments/sweeps/*.json"))]
        self.small_sweep = os.path.join(self.work, "small-sweep.json")  # a whole sweep of two-step runs
        open(self.small_sweep, "w").write(json.dumps(shrunk_sweep(self.sweeps[0])))
        resumable = json.loads(json.dumps(config))
        resumable["train"]["steps"] = 8
        db = sqlite3.connect(self.base_db)
        db.execute("update runs set config_json = ?, total_steps = 8, status = 'stopped'", (json.dumps(resumable),))
        db.commit()
        db.execute("pragma wal_checkpoint(truncate)")  # the cases copy the database file alone
        self.checkpoint = db.execute("select path from checkpoints order by step desc").fetchone()[0]
        db.close()
        corpus = os.path.join(self.work, "corpus.txt")  # 300 KB of the KJV text the base run stored, as byte shards
        with open(os.path.join(self.work, "home", "corpora", "kjv.txt"), "rb") as kjv:
            open(corpus, "wb").write(kjv.read(300000))
        subprocess.run([self.cli, "prepare", "--corpus", corpus, "--tokenizer", "byte", "--out",
                        os.path.join(self.work, "shards"), "--shard-tokens", "50000", "--val-fraction", "0.1",
                        "--threads", "1"], env=self.env, capture_output=True, check=True)
        # A SentencePiece model of the same text and a 2-step run that stores it (the tokenizer cases damage both).
        # A sanitized CLI cannot open SentencePiece (its message says why): the kind is then left out.
        self.sp_model = os.path.join(self.work, "sp.model")
        p = subprocess.run([self.cli, "tokenizer", "train", "--corpus", corpus, "--vocab", "400", "--out",
                            self.sp_model, "--threads", "1", "--quiet"], env=self.env, capture_output=True, text=True)
        if p.returncode != 0:
            self.sp_model = None
            self.sp_refusal = (p.stderr.strip().splitlines() or [""])[-1]
            self.read_commands()
            return
        self.sp_db = os.path.join(self.work, "sp.sqlite")
        subprocess.run([self.cli, "train"] + BASE_RUN + ["--steps", "2", "--set", "data.tokenizer=sentencepiece",
                                                         "--set", f"data.tokenizer_model={self.sp_model}", "--db",
                                                         self.sp_db], env=self.env, capture_output=True, check=True)
        db = sqlite3.connect(self.sp_db)  # resumable, as the base run: `resume` decodes its probe with the tokenizer
        sp_config = json.loads(db.execute("select config_json from runs").fetchone()[0])
        sp_config["train"]["steps"] = 4
        db.execute("update runs set config_json = ?, total_steps = 4, status = 'stopped'", (json.dumps(sp_config),))
        db.commit()
        db.execute("pragma wal_checkpoint(truncate)")
        db.close()
        self.read_commands()

    def read_commands(self):
        """Each subcommand's positionals and options from its --help: [(name, type, choices, required)], required
        for positionals and required options."""
        self.commands = {}
        top = subprocess.run([self.cli, "--help"], capture_output=True, text=True, env=self.env).stdout
        names = []
        for group in ([], ["bench"], ["tokenizer"]):
            text = top if not group else subprocess.run([self.cli] + group + ["--help"], capture_output=True,
                                                        text=True, env=self.env).stdout
            listed = text.split("Subcommands:")[-1] if "Subcommands:" in text else ""
            names += [" ".join(group + [m]) for m in re.findall(r"^  ([a-z][\w-]*)\s", listed, re.M)]
        for name in names:
            if name not in ARG_KEPT and (name in ARG_SKIPPED or name.split()[0] in ARG_SKIPPED):
                continue
            text = subprocess.run([self.cli] + name.split() + ["--help"], capture_output=True, text=True,
                                  env=self.env).stdout
            entries, section = [], ""
            for line in text.splitlines():
                if line and not line.startswith(" "):
                    section = line
                    continue
                m = re.match(r"^  (--[\w-]+|[A-Z][A-Z_]*)(?:\s+(INT|UINT|FLOAT|TEXT)(?::\{([^}]*)\})?)?", line)
                if not m or m.group(1) in ("--help", "--version"):
                    continue
                entries.append((m.group(1), m.group(2) or "FLAG", (m.group(3) or "").split(",") if m.group(3) else [],
                                section.startswith("Positionals") or "REQUIRED" in line))
            self.commands[name] = entries
        # Names the CLI lists, as choices of the options and positionals that take them (no 360M preset: --steps 2
        # of one is long work on a CPU).
        listed = {cmd: subprocess.run([self.cli, cmd], capture_output=True, text=True, env=self.env).stdout
                  for cmd in ("presets", "figures", "tables")}
        names = {cmd: [m for m in re.findall(r"^([a-z][\w.-]*)\s", text, re.M) if "360m" not in m]
                 for cmd, text in listed.items()}
        for name, entries in self.commands.items():
            self.commands[name] = [(e, kind, names["presets"] if e == "--preset" else
                                    names[name + "s"] if e == "NAME" and name + "s" in names else choices, positional)
                                   for e, kind, choices, positional in entries]

    def arg_value(self, name, kind, choices, d, bench=False):
        if name == "--set" and random.random() < 0.7:
            section = random.choice([k for k, v in self.configs[0].items() if isinstance(v, dict)])
            key = random.choice(list(self.configs[0][section].keys()))
            return f"{section}.{key}={json.dumps(random.choice(VALUES))}"
        if choices and random.random() < 0.6:
            return random.choice(choices)
        if kind == "TEXT" and random.random() < 0.3:  # the files the other kinds damage, whole
            return random.choice([os.path.join(d, "base.sqlite"), os.path.join(self.work, "corpus.txt"),
                                  os.path.join(self.work, "shards"), os.path.join(self.work, self.checkpoint), d,
                                  self.small_sweep])
        return random.choice((BENCH_ARG_VALUES if bench else ARG_VALUES)[kind])

    def args_case(self, i, d, prefix=""):
        """A subcommand (one whose name starts with `prefix`) with options drawn from its --help, against a copy of
        the base run's store."""
        name = random.choice(sorted(c for c in self.commands if c.startswith(prefix)))
        entries = self.commands[name]
        bench = name.startswith("bench ")
        db = os.path.join(d, "base.sqlite")
        shutil.copy(self.base_db, db)
        shutil.copytree(os.path.join(self.work, "checkpoints"), os.path.join(d, "checkpoints"))
        args = name.split()
        for entry, kind, choices, required in entries:  # positionals and required options
            if not required:
                continue
            if entry.startswith("--"):
                args.append(entry)
            args.append("1" if entry == "RUN" and random.random() < 0.7 else
                        self.arg_value(entry, "INT" if kind == "FLAG" else kind, choices, d, bench))
        options = [e for e in entries if not e[3] and e[0] not in ("--db", "--steps")]
        for entry, kind, choices, _ in random.sample(options, min(len(options), random.randint(1, 4))):
            args.append(entry)
            if kind != "FLAG":
                args.append(self.arg_value(entry, kind, choices, d, bench))
        if any(e[0] == "--db" for e in entries):
            args += ["--db", db]
        if any(e[0] == "--steps" for e in entries):
            args += ["--steps", "2"]
        self.run(args, f"{i} args {args}", slow_is_finding=False)

    def mutated_config(self):
        return mutated(random.choice(self.configs))

    def mutated_sweep(self):
        """A sweep file with its sections, grid and baselines mutated; shrunk to two-step runs where `runs`."""
        sweep = json.loads(json.dumps(random.choice(self.sweeps)))
        runs = random.random() < 0.3
        if runs:
            sweep = shrunk_sweep(sweep)
        r = random.random()
        if r < 0.3 and sweep.get("grid"):
            key = random.choice(list(sweep["grid"]))
            if random.random() < 0.5:
                sweep["grid"][key] = random.choice(VALUES + [[random.choice(VALUES)], [1, "a", None]])
            else:
                section = random.choice(["model", "train", "data", "run", "nothing", ""])
                sweep["grid"][section + "." + random.choice(["steps", "lr", "arch", "seed", "x", ""])] = [
                    random.choice(VALUES)]
        elif r < 0.5 and sweep.get("baselines"):
            base = random.choice(sweep["baselines"])
            field = random.choice(["preset", "name", "set", "other"])
            base[field] = (random.choice(VALUES + [{"train.steps": random.choice(VALUES)}, {"model.arch": "mod"}])
                           if random.random() < 0.8 else None)
            if base[field] is None:
                del base[field]
        elif r < 0.6:
            sweep[random.choice(["base", "table", "name"])] = random.choice(VALUES + ["smollm-dense", "summary"])
        text = mutated(sweep, top_level=True)
        return text, runs

    def tokenizer_case(self, i, d):
        """A damaged SentencePiece model file given to `tokenizer show`, `train` or `prepare`; a run store whose
        stored tokenizer document is damaged, opened by the commands that decode with it; or `tokenizer train` on a
        corpus of random bytes, a few characters or long lines, with sizes in and out of range."""
        r = random.random()
        if r < 0.4:
            model = os.path.join(d, "damaged.model")
            shutil.copy(self.sp_model, model)
            damage(model)
            command = random.choice([
                ["tokenizer", "show", model],
                ["train"] + BASE_RUN + ["--steps", "2", "--set", "data.tokenizer=sentencepiece", "--set",
                                        f"data.tokenizer_model={model}", "--db", os.path.join(d, "s.sqlite")],
                ["prepare", "--corpus", os.path.join(self.work, "corpus.txt"), "--tokenizer", model, "--out",
                 os.path.join(d, "shards"), "--threads", "1"]])
            self.run(command, f"{i} tokenizer model {' '.join(command[:2])} ({model})", named=[model])
        elif r < 0.75:
            db = os.path.join(d, "sp.sqlite")
            shutil.copy(self.sp_db, db)
            shutil.copytree(os.path.join(self.work, "checkpoints"), os.path.join(d, "checkpoints"))
            c = sqlite3.connect(db)
            document = c.execute("select document from tokenizers").fetchone()[0]
            doc = json.loads(document)
            if random.random() < 0.5 and isinstance(doc.get("model"), str):  # the model's bytes, still base64
                model = bytearray(doc["model"].encode())
                for _ in range(random.randint(1, 20)):
                    model[random.randrange(len(model))] = random.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ+/=\"\\")
                doc["model"] = model.decode()
                text = json.dumps(doc)
            else:
                text = mutated({"tokenizer": doc}, top_level=True)
                text = text[len('{"tokenizer": '):-1] if text.startswith('{"tokenizer": {') else text
            c.execute("update tokenizers set document = ?", (text,))
            c.commit()
            c.close()
            commands = [["generate", "1", "--prompt", "In the", "--max-new", "4"], ["eval", "1"],
                        ["score", "1", "--text", "In the beginning"], ["show", "1"], ["resume", "1", "--quiet"]]
            for command in random.sample(commands, 2):
                self.run(command + ["--db", db], f"{i} tokenizer stored {' '.join(command[:2])} ({db})", named=[db])
        else:
            r = random.random()
            data = (os.urandom(random.randint(0, 20000)) if r < 0.3 else b"ab" * random.randint(1, 5) if r < 0.5 else
                    ("\u00e9\u4e2d" * 3000 + "\n").encode() * 5 if r < 0.7 else
                    open(os.path.join(self.work, "corpus.txt"), "rb").read()[:random.randint(0, 300000)])
            path = os.path.join(d, "corpus.txt")
            open(path, "wb").write(data)
            command = ["tokenizer", "train", "--corpus", path, "--out", os.path.join(d, "t.model"), "--threads", "1",
                       "--quiet", "--vocab", random.choice(["8", "50", "300", "1000", "1048576", "0", "-1"]),
                       "--type", random.choice(["bpe", "unigram"])]
            if random.random() < 0.5:
                command += ["--character-coverage", random.choice(["1.0", "0.5", "0", "nan", "2"])]
            if random.random() < 0.3:
                command += ["--sample-lines", random.choice(["1", "10", "0", "-5"])]
            self.run(command, f"{i} tokenizer train {' '.join(command[4:])}")

    def case(self, i, kind):
        d = os.path.join(self.work, str(i))
        os.makedirs(d)
        if kind in ("args", "bench"):  # bench: the benchmarks' command lines alone
            self.args_case(i, d, "bench " if kind == "bench" else "")
        elif kind == "tokenizer":
            self.tokenizer_case(i, d)
        elif kind == "config":
            path = os.path.join(d, "config.json")
            open(path, "w").write(self.mutated_config())
            self.run(["train", "--config", path, "--steps", "2", "--db", os.path.join(d, "s.sqlite"), "--quiet",
                      "--threads", "1"], f"{i} config {path}", named=[path])
        elif kind == "sweep":
            path = os.path.join(d, "sweep.json")
            text, runs = self.mutated_sweep()
            open(path, "w").write(text)
            self.run(["sweep", path, "--db", os.path.join(d, "s.sqlite"), "--quiet"] + ([] if runs else ["--dry-run"]),
                     f"{i} sweep{' (runs)' if runs else ''} {path}", slow_is_finding=not runs, named=[path])
        elif kind in ("checkpoint", "store"):
            db = os.path.join(d, "base.sqlite")
            shutil.copy(self.base_db, db)
            shutil.copytree(os.path.join(self.work, "checkpoints"), os.path.join(d, "checkpoints"))
            target = os.path.join(d, self.checkpoint) if kind == "checkpoint" else db
            damage(target)
            if kind == "checkpoint" and random.random() < 0.6:  # no CRC recorded: the reader itself faces it
                c = sqlite3.connect(db)
                c.execute("update checkpoints set crc32 = NULL, bytes = ?", (os.path.getsize(target),))
                c.commit()
                c.close()
            commands = ([["eval", "1"], ["generate", "1", "--prompt", "In the", "--max-new", "4"],
                         ["resume", "1", "--quiet"], ["profile", "1"], ["kv", "1"]] if kind == "checkpoint" else
                        [["runs"], ["show", "1"], ["export", "1"], ["compare", "1"], ["eval", "1"],
                         ["resume", "1", "--quiet"]])
            for command in random.sample(commands, 2):
                self.run(command + ["--db", db], f"{i} {kind} {' '.join(command)} ({d})", named=[target, db])
        elif kind == "shards":
            shards = os.path.join(d, "shards")
            shutil.copytree(os.path.join(self.work, "shards"), shards)
            target = os.path.join(shards, random.choice(sorted(os.listdir(shards))))
            damage(target)
            self.run(["train"] + BASE_RUN + ["--steps", "2", "--set", "data.source=shards", "--set",
                                             f"data.path={shards}", "--db", os.path.join(d, "s.sqlite")],
                     f"{i} shards {target}", named=[target, shards])
        else:
            r = random.random()
            data = (os.urandom(random.randint(0, 20000)) if r < 0.4 else b"" if r < 0.5 else
                    b"a" * random.randint(1, 3) if r < 0.6 else ("\u00e9\u4e2d" * 3000 + "\n").encode() * 5)
            path = os.path.join(d, "corpus.txt")
            open(path, "wb").write(data)
            tokenizer = random.choice(["char", "byte", "word"])
            self.run(["train"] + BASE_RUN + ["--steps", "2", "--set", "data.source=file", "--set", f"data.path={path}",
                                             "--set", f"data.tokenizer={tokenizer}", "--db",
                                             os.path.join(d, "s.sqlite")], f"{i} corpus {tokenizer} {path}",
                     named=[path] if tokenizer != "word" else [])  # word: refused by data.tokenizer, not the text


def mutated(doc, top_level=False):
    """`doc`'s JSON with one to three of its sections' keys dropped, added or given values of another type or range
    (`top_level`: a top-level key dropped or replaced too, and none sometimes), the text cut short one time in ten."""
    c = json.loads(json.dumps(doc))
    for _ in range(random.randint(0 if top_level else 1, 3)):
        section = random.choice(list(c.keys()))
        if not isinstance(c[section], dict) or not c[section]:
            if random.random() < 0.2:
                c[section] = random.choice(VALUES)
            elif top_level and random.random() < 0.2:
                del c[section]
            continue
        key = random.choice(list(c[section].keys()))
        r = random.random()
        if r < 0.15:
            del c[section][key]
        elif r < 0.25:
            c[section]["unknown_" + key] = 1
        else:
            c[section][key] = random.choice(VALUES)
    text = json.dumps(c)
    return text[:random.randint(0, len(text))] if random.random() < 0.1 else text


def shrunk_sweep(sweep):
    """`sweep` as a whole sweep of two-step runs: one value of each grid key, one baseline, small windows, one
    thread (the runs of a sanitized CLI take seconds each)."""
    small = json.loads(json.dumps(sweep))
    small["grid"] = {k: v[:1] for k, v in small.get("grid", {}).items()}
    small["baselines"] = small.get("baselines", [])[:1]
    small["train"] = dict(small.get("train", {}), steps=2, epochs=0, warmup_steps=0, eval_every=2, eval_batches=1,
                          batch_size=2)
    small["data"] = dict(small.get("data", {}), context=32)
    small["run"] = dict(small.get("run", {}), threads=1)
    return small


def damage(path):
    data = bytearray(open(path, "rb").read())
    r = random.random()
    if r < 0.3:
        data = data[:random.randint(0, len(data))]
    elif r < 0.9:
        for _ in range(random.randint(1, 20)):
            data[random.randrange(len(data))] = random.randrange(256)
    else:
        data = bytearray(os.urandom(random.randint(0, 4096)))
    open(path, "wb").write(bytes(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_cli = next((c for c in (f"{ROOT}/build-sanitize/app/routelab-cli", f"{ROOT}/build/app/routelab-cli")
                        if os.path.exists(c)), "routelab-cli")
    parser.add_argument("--cli", default=default_cli)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kinds", default="config,config,checkpoint,store,shards,corpus,sweep,tokenizer,args,args",
                        help="comma-separated kinds to draw from (repeat one to draw it more often)")
    parser.add_argument("--work", default="/tmp/routelab-fuzz")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a command may take")
    parser.add_argument("--verbose", action="store_true", help="each command's exit status and last line")
    args = parser.parse_args()
    random.seed(args.seed)
    fuzz = Fuzz(args)
    fuzz.prepare()
    kinds = args.kinds.split(",")
    if "tokenizer" in kinds and fuzz.sp_model is None:
        print(f"fuzz-cli: the tokenizer kind is left out: {fuzz.sp_refusal}")
        kinds = [k for k in kinds if k != "tokenizer"] or sys.exit("fuzz-cli: no kind left to draw")
    for i in range(args.cases):
        fuzz.case(i, random.choice(kinds))
    print(f"fuzz-cli: {args.cases} cases with {fuzz.cli} (seed {args.seed}): {fuzz.outcomes['ok']} commands "
          f"succeeded, {fuzz.outcomes['clear error']} stopped with an error, {len(fuzz.findings)} findings")
    for label, what, _ in fuzz.findings:
        print(f"  {label}: {what}")
    if fuzz.unnamed:
        print(f"{len(fuzz.unnamed)} errors named none of the damaged files (listed for review, not findings):")
        for label, last in fuzz.unnamed:
            print(f"  {label}: {last}")
    if fuzz.slow:
        print(f"{len(fuzz.slow)} command lines ran past the limit (listed, not findings):")
        for label, what, _ in fuzz.slow:
            print(f"  {label}: {what}")
    sys.exit(1 if fuzz.findings else 0)


if __name__ == "__main__":
    main()
