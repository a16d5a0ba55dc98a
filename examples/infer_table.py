"""The infer quality table: for every real chat template, how many `verify` cases the bundled
hand-written template passes and how many the template `infer` derives passes.

    python examples/infer_table.py [--examples N] [--chat-templates DIR] [--markdown] [--show NAME]

Chat templates come from the repository's copies of the published ones
(tests/template_cases/chat_templates, with INDEX.json), or from --chat-templates DIR. Each row renders with the switches
the model family documents (thinking on or off, the special tokens its tokenizer passes); a row
without a bundled template shows "-" for it. For chat templates of families no one configured,
`python examples/infer_unseen.py DIR` measures infer as a new user meets it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BOS = {"bos_token": "<s>", "eos_token": "</s>"}
# (row label, chat template file, bundled template or None, chat-template variables)
ROWS = [
    ("qwen3", "qwen3.jinja", "qwen3", {}),
    ("qwen3 (enable_thinking=false)", "qwen3.jinja", "qwen3", {"enable_thinking": False}),
    ("qwen3_5", "qwen3_5.jinja", "qwen3_5", {}),
    ("qwen3_5 (enable_thinking=false)", "qwen3_5.jinja", "qwen3_5", {"enable_thinking": False}),
    ("qwen3_coder", "qwen3_coder.jinja", "qwen3_coder", {}),
    ("gpt_oss", "gpt_oss.jinja", "gpt_oss", {}),
    ("cohere_command_r7b", "cohere_command_r7b.jinja", "cohere_command_r7b", {}),
    ("gemma4 (enable_thinking=true)", "gemma4.jinja", "gemma4", {"enable_thinking": True, "bos_token": "<bos>"}),
    ("gemma4", "gemma4.jinja", "gemma4", {"bos_token": "<bos>"}),
    ("deepseek_r1", "deepseek_r1.jinja", "deepseek_r1", {"bos_token": "<｜begin▁of▁sentence｜>"}),
    ("deepseek_v3_1", "deepseek_v3_1.jinja", "deepseek_v3_1", {"bos_token": "<｜begin▁of▁sentence｜>"}),
    ("deepseek_v3_1 (thinking=true)", "deepseek_v3_1.jinja", "deepseek_v3_1", {"bos_token": "<｜begin▁of▁sentence｜>", "thinking": True}),
    ("llama3_3", "llama3_3.jinja", "llama3_json", {"bos_token": "<|begin_of_text|>"}),
    ("mistral_nemo", "mistral_nemo.jinja", "mistral_nemo", BOS),
    ("mistral_small_3_2", "mistral_small_3_2.jinja", "mistral_small_3_2", BOS),
    ("ministral3_reasoning", "ministral3_reasoning.jinja", "ministral3", BOS),
    ("kimi_k2", "kimi_k2.jinja", "kimi_k2", {}),
    ("kimi_k2_thinking", "kimi_k2_thinking.jinja", "kimi_k2", {}),
    ("glm4_6", "glm4_6.jinja", "glm4_5", {}),
    ("glm4_6 (enable_thinking=false)", "glm4_6.jinja", "glm4_5", {"enable_thinking": False}),
    ("minimax_m2", "minimax_m2.jinja", "minimax_m2", {}),
    ("smollm3", "smollm3.jinja", "smollm3", {}),
    ("smollm3 (enable_thinking=false)", "smollm3.jinja", "smollm3", {"enable_thinking": False}),
    ("hermes2_pro", "hermes2_pro.jinja", "hermes2_pro", {}),
    ("lfm2_5", "lfm2_5.jinja", "lfm2_5", {"bos_token": "<|startoftext|>"}),
    ("llama4_pythonic", "llama4_pythonic.jinja", "llama4_pythonic", {"bos_token": "<|begin_of_text|>"}),
    ("llama3_2_pythonic", "llama3_2_pythonic.jinja", "llama3_2_pythonic", {"bos_token": "<|begin_of_text|>"}),
    ("gemma3_pythonic", "gemma3_pythonic.jinja", "gemma3_pythonic", {"bos_token": "<bos>"}),
    ("phi4_mini", "phi4_mini.jinja", "phi4_mini", {}),
]


def chat_templates_dir(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    return REPO / "tests" / "template_cases" / "chat_templates"


def measure(label, file_name, bundled_name, variables, directory: Path, examples: int, parsers=("rtcompile",)) -> dict:
    from rtcompile.authoring import infer as infer_module
    from rtcompile.authoring import verify as verify_module
    from rtcompile.authoring.chat_render import ChatRenderer, load_chat_template
    from rtcompile.library import template_for, template_names

    renderer = ChatRenderer(load_chat_template(directory / file_name), variables)
    try:
        row = {"row": label, "chat_template": file_name, "variables": variables}
        if bundled_name in template_names():
            report = verify_module.verify(
                template_for(bundled_name), renderer, variables=variables, examples=examples, parsers=parsers
            )
            row["bundled"] = report.count(verify_module.PASSED)
            row["bundled_failed"] = report.count(verify_module.FAILED)
        inference = infer_module.infer(renderer)
        infer_module.validate(inference.template)
        report = verify_module.verify(
            inference.template, renderer, variables=variables, examples=examples, parsers=parsers
        )
        row["inferred"] = report.count(verify_module.PASSED)
        row["inferred_failed"] = report.count(verify_module.FAILED)
        row["not_round_trippable"] = report.count(verify_module.UNRENDERABLE)
        row["cases"] = len(report.results)
        row["template"] = inference.template
        row["report"] = report
        row["parts"] = inference.format_text()
        return row
    finally:
        renderer.close()


def rows(directory: Path, examples: int, only: str | None = None, parsers=("rtcompile",)):
    for label, file_name, bundled, variables in ROWS:
        if only and only != label:
            continue
        if (directory / file_name).is_file():
            yield measure(label, file_name, bundled, variables, directory, examples, parsers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=12, help="generated cases per row (default 12)")
    parser.add_argument("--chat-templates", help="directory of .jinja chat templates")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--show", metavar="ROW", help="print one row's inferred template, parts and report")
    parser.add_argument("--interpreter", action="store_true", help="a case passes only if transformers' interpreter parses it back too")
    args = parser.parse_args(argv)
    parsers = ("rtcompile", "interpreter") if args.interpreter else ("rtcompile",)
    directory = chat_templates_dir(args.chat_templates)
    if args.show:
        for row in rows(directory, args.examples, args.show, parsers):
            print(json.dumps(row["template"], indent=2, ensure_ascii=False))
            print(row["parts"])
            print(row["report"].format_text())
        return 0
    worse = 0
    if args.markdown:
        print("| chat template (switches) | cases | bundled passes | inferred passes | not round-trippable |")
        print("| --- | --- | --- | --- | --- |")
    for row in rows(directory, args.examples, parsers=parsers):
        bundled = row.get("bundled", "-")
        if isinstance(bundled, int) and row["inferred"] < bundled:
            worse += 1
        failed = f" ({row['inferred_failed']} failed)" if row["inferred_failed"] else ""
        if args.markdown:
            print(f"| {row['row']} | {row['cases']} | {bundled} | {row['inferred']}{failed} | {row['not_round_trippable']} |")
        else:
            print(f"{row['row']:<34} cases {row['cases']:>3}  bundled {bundled!s:>3}  inferred {row['inferred']:>3}{failed}"
                  f"  not round-trippable {row['not_round_trippable']}")
        sys.stdout.flush()
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
