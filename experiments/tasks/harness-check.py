#!/usr/bin/env python3
"""Scores a stored RouteLab run through lm-evaluation-harness's own pipeline and sets its figures beside
`routelab-cli tasks` on the same files.

The harness reads each task file with its own task definition (prompts, choices, targets, delimiters, metrics,
aggregation); the only thing it asks of the model is the log-likelihood of each (context, continuation) pair and
whether the continuation is the model's greedy choice, or a document's log-likelihood (WikiText). Those are answered
by RouteLab: the pairs written as a `generic` task file, one pair an example, the documents as a `text` one, scored by
`routelab-cli tasks --samples` (the same scoring code, given the harness's text). What this checks is everything
around the scores: each format's prompts and choices, the whitespace moved from a context to its continuation, acc,
acc_norm, LAMBADA's greedy accuracy and perplexity, WikiText's detokenized pages, its words and bytes and the three
perplexities, the rolling windows' shape (each document's windows against the harness's get_rolling_token_windows:
how many, and how many tokens each feeds and scores), and the means.

  python3 experiments/tasks/harness-check.py --cli build/app/routelab-cli --db runs.sqlite --run 1 \
      --task piqa=toy/piqa.jsonl --task hellaswag=toy/hellaswag.jsonl --task lambada_openai=toy/lambada.jsonl \
      --task arc_easy=toy/arc.jsonl --task winogrande=toy/winogrande.jsonl --task boolq=toy/boolq.jsonl \
      --task mmlu_astronomy=toy/mmlu.jsonl --task wikitext=toy/wikitext.jsonl

NAME is a harness task (piqa, hellaswag, arc_easy, arc_challenge, winogrande, boolq, lambada_openai, mmlu_SUBJECT,
wikitext);
the file is given to the harness as its evaluation split (JSON Lines in the published dataset's fields) and to
`tasks` under the same name, its format read from its keys (`--task-name H=NAME:FORMAT` where that would differ).
`--fewshot K` builds K-shot prompts on both sides (the harness's own sampler and seed 1234; `--fewshot-from
HARNESS_TASK=FILE` for a task's few-shot split, else its file itself). Every request's text as the harness built it is
compared with the one `tasks` scored (its `--samples`). Exits 1 when a figure differs by more than 1e-6 (relative above
1), a request's text differs or a document's windows do. Needs lm_eval 0.4 importable (not a RouteLab
dependency: `pip install lm_eval==0.4.13` in a venv of its own); nothing is downloaded.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lm_eval import evaluator  # noqa: E402
from lm_eval.api.model import LM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402


class RouteLabLM(LM):
    """The harness's model: each batch of log-likelihood requests scored by one `routelab-cli tasks` call."""

    def __init__(self, cli, db, run, max_length, batch_size):
        super().__init__()
        self.cli, self.db, self.run = cli, db, run
        self.options = ["--batch-size", str(batch_size)] + (["--max-length", str(max_length)] if max_length else [])
        self.requests = 0
        self.windows = self.windows_differ = 0  # documents' windows against the harness's; documents whose differ
        self.texts = {}  # (task, example, request) -> (context, continuation) as the harness built them

    def loglikelihood(self, requests, disable_tqdm=False):
        pairs = [r.args for r in requests]
        self.requests += len(pairs)
        for r in requests:
            self.texts[(r.task_name, r.doc_id, r.idx)] = tuple(r.args)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "requests.jsonl")
            with open(path, "w", encoding="utf-8") as out:
                for context, continuation in pairs:
                    out.write(json.dumps({"context": context, "choices": [continuation], "label": 0}) + "\n")
            samples = os.path.join(tmp, "samples.jsonl")
            command = [self.cli, "tasks", str(self.run), "--db", self.db, "--task", f"requests={path}:generic",
                       "--samples", samples, "--json"] + self.options
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            with open(samples, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
        assert len(rows) == len(pairs), (len(rows), len(pairs))
        return [(r["requests"][0]["loglikelihood"], bool(r["requests"][0]["greedy"])) for r in rows]

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        """Each document's log-likelihood over RouteLab's rolling windows (one `tasks` call on a text file of the
        documents), whose shape is checked against the harness's own get_rolling_token_windows: the same number of
        windows, each feeding and scoring as many tokens as the harness's would."""
        docs = [r.args[0] for r in requests]
        self.requests += len(docs)
        for r in requests:
            self.texts[(r.task_name, r.doc_id, 0)] = (r.args[0],)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "documents.jsonl")
            with open(path, "w", encoding="utf-8") as out:
                for doc in docs:
                    out.write(json.dumps({"text": doc}) + "\n")
            samples = os.path.join(tmp, "samples.jsonl")
            command = [self.cli, "tasks", str(self.run), "--db", self.db, "--task", f"documents={path}:text",
                       "--samples", samples, "--json"] + self.options
            report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            with open(samples, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
        assert len(rows) == len(docs), (len(rows), len(docs))
        length = report["max_length"]
        for row in rows:
            ids = sum(w["tokens"] for w in row["requests"]) + 1  # the prefix token or the first token, then the rest
            theirs = [(min(len(a + b), length + 1) - 1, len(b)) for a, b in map(
                make_disjoint_window, get_rolling_token_windows(list(range(1, ids)), 0, length, 1))]
            self.windows += len(theirs)
            if theirs != [(w["fed"], w["tokens"]) for w in row["requests"]]:
                self.windows_differ += 1
        return [row["loglikelihood"] for row in rows]

    def generate_until(self, requests, disable_tqdm=False):
        raise NotImplementedError("generation tasks are not scored")


def harness_config(manager, name, path, fewshot=0, fewshot_path=None):
    """The harness's own definition of task `name`, reading `path` as its evaluation split. With few-shot examples,
    `fewshot_path` is its few-shot split; without one the examples come from `path` itself, read as the test split,
    where the harness leaves an example's own answer out of its prompt (as `tasks --fewshot` does)."""
    entry = manager.task_index[name]
    config = load_yaml(entry.yaml_path, resolve_func=True)
    split = "validation" if config.get("validation_split") and not (fewshot and not fewshot_path) else "test"
    files = {split: os.path.abspath(path)}
    if fewshot_path:
        files["fewshot"] = os.path.abspath(fewshot_path)
    config.update({"dataset_path": "json", "dataset_name": None,
                   "dataset_kwargs": {"data_files": files},
                   "training_split": None,
                   "fewshot_split": ("fewshot" if fewshot_path else split) if fewshot else None,
                   "validation_split": split if split == "validation" else None,
                   "test_split": split if split == "test" else None})
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", default="build/app/routelab-cli")
    parser.add_argument("--db", required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--task", action="append", required=True, help="HARNESS_TASK=FILE (repeatable)")
    parser.add_argument("--task-name", action="append", default=[],
                        help="HARNESS_TASK=ROUTELAB_NAME[:FORMAT] where RouteLab's name or format differs")
    parser.add_argument("--limit", type=int, default=0, help="examples per task (0: all)")
    parser.add_argument("--max-length", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1,
                        help="requests per forward on both sides (1: each alone, the same arithmetic for both, so "
                             "that near-ties fall alike; other sizes batch the two sides' requests differently)")
    parser.add_argument("--fewshot", type=int, default=0, help="solved examples before each prompt (--num_fewshot)")
    parser.add_argument("--fewshot-from", action="append", default=[],
                        help="HARNESS_TASK=FILE: that task's few-shot split (else its own file)")
    args = parser.parse_args()

    renames = dict(item.split("=", 1) for item in args.task_name)
    tasks = [item.split("=", 1) for item in args.task]
    fewshot_files = dict(item.split("=", 1) for item in args.fewshot_from)
    manager = TaskManager()
    lm = RouteLabLM(args.cli, args.db, args.run, args.max_length, args.batch_size)
    configs = [harness_config(manager, name, path, args.fewshot, fewshot_files.get(name)) for name, path in tasks]
    results = evaluator.simple_evaluate(model=lm, tasks=configs, task_manager=manager, limit=args.limit or None,
                                        num_fewshot=args.fewshot or None, fewshot_random_seed=1234,
                                        log_samples=False, bootstrap_iters=0)["results"]

    command = [args.cli, "tasks", str(args.run), "--db", args.db, "--json"]
    for name, path in tasks:
        spec = renames.get(name, name)
        routelab_name, _, routelab_format = spec.partition(":")
        command += ["--task", f"{routelab_name}={path}" + (f":{routelab_format}" if routelab_format else "")]
    if args.limit:
        command += ["--limit", str(args.limit)]
    command += lm.options
    if args.fewshot:
        command += ["--fewshot", str(args.fewshot)]
        for name, path in fewshot_files.items():
            command += ["--fewshot-from", f"{renames.get(name, name).partition(':')[0]}={path}"]
    suffix = f"_{args.fewshot}shot" if args.fewshot else ""
    with tempfile.TemporaryDirectory() as tmp:
        samples = os.path.join(tmp, "samples.jsonl")
        report = subprocess.run(command + ["--samples", samples], check=True, capture_output=True, text=True).stdout
        with open(samples, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    own = {t["name"].removesuffix(suffix): t for t in json.loads(report)["tasks"]}
    # Every prompt and continuation as RouteLab built it against the harness's own (few-shot examples included).
    harness_task = {renames.get(name, name).partition(":")[0]: name for name, _ in tasks}
    texts_differ = 0
    for row in rows:
        name = harness_task[row["task"].removesuffix(suffix)]
        built = [(row["text"],)] if "text" in row else [(r["context"], r["continuation"]) for r in row["requests"]]
        for k, mine in enumerate(built):  # a document, or each request of an example
            theirs = lm.texts.get((name, row["example"], k))
            if theirs != mine:
                texts_differ += 1
                if texts_differ <= 3:
                    print(f"{name} example {row['example']} request {k}: the harness built {theirs!r}, "
                          f"RouteLab {mine!r}")
    compared = sum(1 if "text" in row else len(row["requests"]) for row in rows)

    shots = f", {args.fewshot}-shot" if args.fewshot else ""
    print(f"run {args.run}: {lm.requests} requests scored for the harness (lm_eval, its task definitions{shots}) "
          f"beside `routelab-cli tasks` on the same files")
    print("| task | measure | harness | RouteLab | difference |")
    print("|---|---|---:|---:|---:|")
    worst = 0.0
    for name, _ in tasks:
        mine = own[renames.get(name, name).partition(":")[0]]
        theirs = results[name]
        for measure, key in (("acc", "acc"), ("acc_norm", "acc_norm"), ("perplexity", "ppl"),
                             ("word_perplexity", "word_perplexity"), ("byte_perplexity", "byte_perplexity"),
                             ("bits_per_byte", "bits_per_byte")):
            value = theirs.get(f"{measure},none")
            if value is None or mine.get(key) is None:
                continue
            difference = abs(value - mine[key])
            worst = max(worst, difference / max(1.0, abs(value)))
            print(f"| {name} | {measure} | {value:.6f} | {mine[key]:.6f} | {difference:.2e} |")
    print(f"largest difference (relative where above 1): {worst:.2e}; requests whose text differs: {texts_differ} of "
          f"{compared}")
    if lm.windows:
        print(f"documents whose rolling windows differ from the harness's: {lm.windows_differ} "
              f"({lm.windows} windows)")
    return 0 if worst < 1e-6 and texts_differ == 0 and lm.windows_differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
