"""How well `infer` does on chat templates nobody configured: infer a response template from each
chat template in a directory, as a new user would (`python -m rtcompile infer FILE`, no switches),
then render probe conversations with the chat template itself and parse each rendered assistant
turn back, one-shot and streamed, with transformers' interpreter and with rtcompile.

    python examples/infer_unseen.py DIR [--markdown] [--show NAME] [--timeout SECONDS]

DIR holds chat templates (`*.jinja` files, or tokenizer directories). The probes: an answer,
reasoning then an answer, one call, parallel calls, content beside a call, reasoning beside a
call, an answer after a tool result, unicode in content, unicode in arguments. A probe is
checkable when the chat template round-trips it (verify's rule: the rendered turn is what the
finished conversation adds, and it shows every part of the message); it round-trips when both
parsers, whole and streamed, give the message back. Per family the table shows the checkable
probes, how many round-tripped, whether the chat template renders calls at all, whether the
inferred template has a `tool_calls` field ("-" when there are no calls to read), and whether its
start anchor is found where the turn starts in every realistic prompt (verify's check: the last
message saying nothing, one word or several lines, in the generation prompt and in the
conversation as it goes on), which no probe can hide by being unchecked; `--show NAME` prints one
family's template, what infer derived and tried, and each probe's outcome.

The exit status is 0 only when at least 95 % of the checkable probes round-trip, every family
whose chat template renders calls got a `tool_calls` field, and no start anchor is missing.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

TARGET = 0.95
PROBE_IDS = ("answer", "reasoning_answer", "one_call", "parallel_calls", "content_call", "reasoning_call",
             "answer_after_tool_result")


def probes():
    """verify's fixed cases that the probes name, plus unicode in content and in arguments."""
    from rtcompile.authoring import verify as v

    cases = [case for case in v.fixed_cases() if case.id in PROBE_IDS]
    question = v._user("Où est le café le plus proche ?")
    answer = {"role": "assistant", "content": "Le café « Ünïcødé » est à 200 m — 東京 🚀 naïve."}
    cases.append(v.Case("unicode_content", "unicode in content", [question], answer))
    call = v.function_call("get_weather", {"city": "São Paulo — 東京 🚀", "unit": "celsius"})
    calling = {"role": "assistant", "tool_calls": [copy.deepcopy(call)]}
    cases.append(v.Case("unicode_arguments", "unicode in arguments", [question], calling))
    return cases


def chat_templates(directory: Path) -> list[Path]:
    """The `*.jinja` files and tokenizer directories of `directory`, by name."""
    return sorted(p for p in directory.iterdir() if p.suffix == ".jinja" or (p.is_dir() and not p.name.startswith("_")))


def measure(path: Path, timeout: float) -> dict:
    """One family: the inferred template, what infer said, and every probe's outcome."""
    from rtcompile.authoring import infer as infer_module
    from rtcompile.authoring import verify as v
    from rtcompile.authoring.chat_render import ChatRenderer, RenderAborted, RenderError, load_chat_template

    row: dict = {"family": path.stem, "probes": [], "template": None, "parts": "", "error": None, "anchor": None}
    renderer = ChatRenderer(load_chat_template(path), timeout=timeout)
    try:
        try:
            inference = infer_module.infer(renderer)
            infer_module.validate(inference.template)
            row["template"] = inference.template
            row["parts"] = inference.format_text()
        except (RenderError, RenderAborted, ValueError) as e:
            row["error"] = f"infer: {type(e).__name__}: {e}"
        conventions, notes = v.discover_conventions(renderer)
        row["renders_calls"] = not any("renders no tool calls" in note for note in notes)
        row["anchor"] = v.check_start_anchor(row["template"], renderer, conventions) if row["template"] else None
        for case in probes():
            tools = v.tools_for(case.history + [case.message])
            try:
                rendered = v.render_turn(renderer, case, conventions, tools)
            except RenderAborted as e:
                rendered = v.RenderedTurn(unrenderable=str(e))
            if rendered.unrenderable:
                row["probes"].append({"id": case.id, "status": "not checkable", "detail": rendered.unrenderable})
            elif row["template"] is None:
                row["probes"].append({"id": case.id, "status": v.FAILED, "detail": "no template inferred"})
            else:
                status, detail = v.check_case(row["template"], rendered, tools, parsers=v.PARSERS)
                row["probes"].append({"id": case.id, "status": status, "detail": detail,
                                      "generation": rendered.generation})
    finally:
        renderer.close()
    row["checkable"] = sum(1 for p in row["probes"] if p["status"] != "not checkable")
    row["round_tripped"] = sum(1 for p in row["probes"] if p["status"] == v.PASSED)
    row["tool_calls_field"] = bool(row["template"] and "tool_calls" in row["template"].get("fields", {}))
    return row


def show(row: dict) -> None:
    print(json.dumps(row["template"], indent=2, ensure_ascii=False))
    print(row["parts"] or row["error"])
    if row["anchor"]:
        print(f"  start anchor {row['anchor'].anchor}: missing from {len(row['anchor'].missing)} of "
              f"{row['anchor'].checked} realistic prompts")
        for missing in row["anchor"].missing:
            print(f"    {missing}")
    for probe in row["probes"]:
        print(f"  {probe['status']:<20} {probe['id']:<26} {probe.get('detail') or ''}")
        if probe["status"] == "failed":
            print(f"  {'':<20} generation: {probe.get('generation')!r}")


def anchor_cell(row: dict) -> str:
    """"found" when the start anchor is where the turn starts in every realistic prompt."""
    check = row["anchor"]
    if check is None:
        return "-"
    return f"missing {len(check.missing)}/{check.checked}" if check.missing else "found"


def line(row: dict, markdown: bool) -> str:
    renders = "yes" if row["renders_calls"] else "no"
    calls = "yes" if row["tool_calls_field"] else ("no" if row["renders_calls"] else "-")
    anchor = anchor_cell(row)
    cells = [row["family"], len(row["probes"]), row["checkable"], row["round_tripped"], renders, calls, anchor]
    if markdown:
        return "| " + " | ".join(str(cell) for cell in cells) + " |"
    failed = [p["id"] for p in row["probes"] if p["status"] == "failed"]
    return (
        f"{row['family']:<24} checkable {row['checkable']:>2}/{len(row['probes'])}  round-tripped "
        f"{row['round_tripped']:>2}  renders calls {renders:<3}  tool_calls field {calls:<3}  start anchor {anchor}"
        + (f"  failed: {', '.join(failed)}" if failed else "")
        + (f"  [{row['error']}]" if row["error"] else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="a directory of chat templates (*.jinja or tokenizer directories)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--show", metavar="NAME", help="print one family's inferred template, parts and probes")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per render (default 10)")
    args = parser.parse_args(argv)
    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"{directory}: not a directory", file=sys.stderr)
        return 2
    paths = [p for p in chat_templates(directory) if not args.show or p.stem == args.show]
    if args.show:
        for path in paths:
            show(measure(path, args.timeout))
        return 0
    if args.markdown:
        print("| family | probes | checkable | round-tripped | renders calls | tool_calls field | start anchor |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
    probes_seen = checkable = round_tripped = 0
    missing_calls, missing_anchors = [], []
    for path in paths:
        row = measure(path, args.timeout)
        probes_seen += len(row["probes"])
        checkable += row["checkable"]
        round_tripped += row["round_tripped"]
        if row["renders_calls"] and not row["tool_calls_field"]:
            missing_calls.append(row["family"])
        if row["anchor"] is not None and row["anchor"].missing:
            missing_anchors.append(row["family"])
        print(line(row, args.markdown))
        sys.stdout.flush()
    share = round_tripped / checkable if checkable else 0.0
    print(f"\n{len(paths)} families, {probes_seen} probes: {checkable} checkable, {round_tripped} round-tripped "
          f"({share:.0%}); families that render calls but got no tool_calls field: "
          f"{', '.join(missing_calls) or 'none'}; families whose start anchor is missing from a realistic prompt: "
          f"{', '.join(missing_anchors) or 'none'}")
    return 0 if share >= TARGET and not missing_calls and not missing_anchors else 1


if __name__ == "__main__":
    sys.exit(main())
