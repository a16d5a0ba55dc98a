"""Where a whole-message parse spends its time: content parsers, argument casts, the reader.

    python -m bench.whole_breakdown [TEMPLATE] [SIZE]     # default qwen3_5 1K

On one benchmark workload (bench/workloads.py), best of 7 timings of process CPU time each:
- the whole `parse_response` with the workload's tools, and without them (no casts);
- the finish functions alone (content parser and transform of each region), on the region texts
  the parse gave them (recorded through the streaming machine's pass, which calls the same
  functions the one-shot reader has inlined);
- the hand-written parser, where one exists.
The reader's share (the searches, commits and the message's bookkeeping: the streaming machine's,
for a template that keeps it) is the parse without tools minus the finish functions; the casts'
share is the difference the tools make.
"""

from __future__ import annotations

import sys
import time
import timeit

from . import workloads
from .impls import handwritten_adapter


def _best(action, number: int = 2000) -> float:
    return min(timeit.repeat(action, number=number, repeat=7, timer=time.process_time)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    name = args[0] if args else "qwen3_5"
    size = args[1] if len(args) > 1 else "1K"
    import rtcompile

    workload = workloads.build_workload(name, size)
    template, _ = workloads.load_template(name)
    module = rtcompile.load(template)
    parser_class = module.ResponseParser
    regions: list[tuple] = []
    finish = parser_class.FINISH

    def recording(function):
        def finish_region(body, captures):
            regions.append((function, body, captures))
            return function(body, captures)

        return finish_region

    parser_class.FINISH = tuple(recording(function) for function in finish)
    try:
        module.parse_whole(parser_class, workload.text, workload.prefix, None)
    finally:
        parser_class.FINISH = finish
    text, prefix, tools = workload.text, workload.prefix, workload.tools
    with_tools = _best(lambda: module.parse_response(text, prefix=prefix, tools=tools))
    without_tools = _best(lambda: module.parse_response(text, prefix=prefix, tools=None))
    finishing = _best(lambda: [function(body, captures) for function, body, captures in regions])
    hand = handwritten_adapter(name, template)
    reader = "the one-shot reader" if module.ONE_SHOT else "the machine's pass"
    print(f"{name} {size}: {len(text)} characters, {len(regions)} regions, read by {reader}")
    print(f"  parse_response with tools      {with_tools:8.1f} us")
    print(f"  casts to the tools' types       {with_tools - without_tools:8.1f} us")
    print(f"  content parsers and transforms  {finishing:8.1f} us")
    print(f"  {reader:31} {without_tools - finishing:8.1f} us")
    if hand is not None:
        print(f"  hand-written parser             {_best(lambda: hand.parse(text, prefix, tools)):8.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
