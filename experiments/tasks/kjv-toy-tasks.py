#!/usr/bin/env python3
"""Toy zero-shot task files cut from the validation end of the King James Bible corpus (the default corpus of the
presets), in the published formats `routelab-cli tasks` reads: a smoke test of the command and an example of each
format, not a benchmark (the paper's tasks are the datasets' own files).

  python3 experiments/tasks/kjv-toy-tasks.py CORPUS OUT_DIR [N]

CORPUS: the corpus file (e.g. ~/.local/share/routelab/corpora/kjv.txt, written by the first run); OUT_DIR gets
piqa.jsonl (a half line and its true second half against another line's), hellaswag.jsonl (the same, four endings),
lambada.jsonl (the last word of a line), sanity.jsonl (the true second half against itself reversed: any trained
model gets it right), wiki.txt (200 lines as one document), wikitext.jsonl (pages of 20 lines in WikiText's raw
tokenization, N / 20 of them), and arc.jsonl, mmlu.jsonl (subject astronomy) with four
endings, winogrande.jsonl (a word of a line blanked, against another line's) and boolq.jsonl (a line and another's
first half as the question, answers at random): every format of `tasks` (experiments/tasks/harness-check.py sets them
beside lm-evaluation-harness). N: examples per file (default 1000)."""
import json
import os
import random
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    corpus, out = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    text = open(corpus, encoding="utf-8").read()
    tail = text[int(len(text) * 0.9):]  # the validation and test splits are the corpus's last tenth
    lines = [re.sub(r"^\s*\d+\s+", "", line.strip()) for line in tail.split("\n")]
    lines = [line for line in lines if len(line.split()) > 8]
    if len(lines) < 3 * n:
        sys.exit(f"{corpus}: {len(lines)} usable lines, fewer than 3 x {n}")
    rng = random.Random(5)
    os.makedirs(out, exist_ok=True)

    def halves(line):
        words = line.split()
        return " ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2:])

    def write(name, docs):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            for doc in docs:
                f.write(json.dumps(doc) + "\n")

    hellaswag, piqa, sanity = [], [], []
    for i in range(n):
        first, true = halves(lines[i])
        endings = [halves(rng.choice(lines))[1] for _ in range(3)]
        label = rng.randint(0, 3)
        endings.insert(label, true)
        hellaswag.append({"activity_label": "Verse", "ctx_a": first, "ctx_b": "", "endings": endings, "label": label})
        first, true = halves(lines[n + i])
        other = halves(rng.choice(lines))[1]
        label = rng.randint(0, 1)
        sols = [true, other] if label == 0 else [other, true]
        piqa.append({"goal": first, "sol1": sols[0], "sol2": sols[1], "label": label})
        sols = [true, true[::-1]] if label == 0 else [true[::-1], true]
        sanity.append({"goal": first, "sol1": sols[0], "sol2": sols[1], "label": label})
    write("hellaswag.jsonl", hellaswag)
    write("piqa.jsonl", piqa)
    write("sanity.jsonl", sanity)
    write("lambada.jsonl", [{"text": lines[2 * n + i]} for i in range(n)])
    # The other formats, from a generator of their own (the files above stay as they were).
    rng = random.Random(6)
    arc, mmlu, winogrande, boolq = [], [], [], []
    for i in range(n):
        first, true = halves(lines[i])
        endings = [halves(rng.choice(lines))[1] for _ in range(3)]
        label = rng.randint(0, 3)
        endings.insert(label, true)
        arc.append({"id": f"kjv-{i}", "question": first, "answerKey": "ABCD"[label],
                    "choices": {"text": endings, "label": list("ABCD")}})
        mmlu.append({"question": first, "subject": "astronomy", "choices": endings, "answer": label})
        words = lines[n + i].split()
        at = rng.randrange(1, len(words) - 1)  # a blank with words on both sides
        other = rng.choice(rng.choice(lines).split())
        label = rng.randint(0, 1)
        options = [words[at], other] if label == 0 else [other, words[at]]
        winogrande.append({"sentence": " ".join(words[:at] + ["_"] + words[at + 1:]), "option1": options[0],
                           "option2": options[1], "answer": str(label + 1)})
        boolq.append({"passage": lines[2 * n + i], "question": halves(rng.choice(lines))[0].lower(),
                      "label": rng.randint(0, 1), "idx": i})
    write("arc.jsonl", arc)
    write("mmlu.jsonl", mmlu)
    write("winogrande.jsonl", winogrande)
    write("boolq.jsonl", boolq)
    with open(os.path.join(out, "wiki.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:200]))
    write("wikitext.jsonl", wikitext_pages(lines, max(1, n // 20), random.Random(7)))


def wikitext_pages(lines, pages, rng):
    """Pages as wikitext_document_level's "page" holds them (WikiText's raw tokenization): headings " = T = ",
    punctuation, brackets and quotes set apart by spaces, " 's", numbers split by " @,@ ", " @.@ ", " @-@ ", and now
    and then a no-break space or a degree sign, so that each of the harness's detokenizing steps has work."""
    def spaced(line):
        line = re.sub(r"(\w)'s\b", r"\1 's", line)
        line = re.sub(r"([,.;:!?()\"])", r" \1 ", line)
        words = line.split()
        at = rng.randrange(len(words))
        kind = rng.randrange(6)
        if kind == 0:
            words.insert(at, f"{rng.randint(1, 9)} @,@ {rng.randint(100, 999)}")
        elif kind == 1:
            words.insert(at, f"{rng.randint(1, 9)} @.@ {rng.randint(1, 9)} \u00b0 C")
        elif kind == 2:
            words.insert(at, f"{rng.randint(1, 50)} @-@ {rng.randint(51, 99)}")
        elif kind == 3 and len(words) > at + 3:
            words[at:at + 3] = ['"'] + words[at:at + 3] + ['"']
        elif kind == 4 and len(words) > at + 2:
            words[at:at + 2] = ["( " + words[at], words[at + 1] + " )"]
        else:
            words[at] += "\u00a0"
        return " ".join(words)

    docs = []
    for p in range(pages):
        body = lines[(p * 20) % len(lines):][:20]
        page = f" = Chapter {p + 1} = \n \n"
        for k in range(0, len(body), 5):
            if k:
                page += f" = = Part {k // 5 + 1} = = \n \n"
            page += " " + " ".join(spaced(line) for line in body[k:k + 5]) + " \n \n"
        docs.append({"page": page})
    return docs


if __name__ == "__main__":
    main()
