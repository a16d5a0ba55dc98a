"""Hostile chat templates: every render bound ends the render with one clear line, in bounded time,
without hanging or crashing this process, and nothing a template tries to run ever runs.

Each attack is a chat template of our own. The renderer tests assert the exception and its message;
the command-line tests assert exit status 2 and a one-line error for `infer` and `verify`. Times are
only checked against a generous upper bound on "it ended" (the machine may be busy)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rtcompile.__main__ import main
from rtcompile.authoring.chat_render import (
    ChatRenderer,
    ChatTemplate,
    RenderAborted,
    RenderError,
    RenderLimitExceeded,
    RenderTimeout,
)

ENDED_WITHIN = 60.0  # seconds: "it ended", not a benchmark
QUESTION = [{"role": "user", "content": "hi"}]
MEMORY_LIMIT = 256 << 20  # a smaller bound than the default keeps the memory tests light


def render(source: str, **bounds) -> str:
    with ChatRenderer(ChatTemplate(source, "hostile.jinja"), **{"timeout": 20, **bounds}) as renderer:
        return renderer.render(QUESTION, add_generation_prompt=True)


def ended_in_time(start: float) -> bool:
    return time.monotonic() - start < ENDED_WITHIN


# ---- resource bounds ----------------------------------------------------------------------------

RESOURCE_ATTACKS = {
    # name: (chat template, exception, message)
    "string multiplication": ("{{ 'x' * (2 ** 34) }}", RenderLimitExceeded, "exhausted its memory bound (256 MiB)"),
    "a doubling string": (
        "{% set ns = namespace(text='x') %}{% for i in range(40) %}{% set ns.text = ns.text ~ ns.text %}{% endfor %}"
        "{{ ns.text | length }}",
        RenderLimitExceeded,
        "exhausted its memory bound",
    ),
    "a huge list": ("{% set items = [0] * (10 ** 10) %}{{ items | length }}", RenderLimitExceeded, "memory bound"),
    "gigabytes of output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'output' }}{% endfor %}{% endfor %}",
        RenderLimitExceeded,
        "output passed its bound of 1000000 characters",
    ),
    "endless recursion": (
        "{% macro again(n) %}{{ again(n + 1) }}{% endmacro %}{{ again(0) }}",
        RenderLimitExceeded,
        "exceeded the recursion limit",
    ),
    "markup nested too deep": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", RenderLimitExceeded, "recursion limit"),
    "a range of 10**12": ("{% for i in range(10 ** 12) %}{{ i }}{% endfor %}", RenderError, "Range too big"),
    "a loop that never ends": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        RenderTimeout,
        "render timed out after 2 s",
    ),
}


@pytest.mark.parametrize("attack", sorted(RESOURCE_ATTACKS))
def test_a_render_that_exhausts_a_bound_ends_with_one_clear_line(attack):
    source, exception, message = RESOURCE_ATTACKS[attack]
    start = time.monotonic()
    with pytest.raises(exception) as raised:
        render(source, timeout=2, memory_limit=MEMORY_LIMIT, max_output=1_000_000)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert ended_in_time(start)


def test_after_a_bound_trips_the_worker_is_replaced():
    bomb = "{% if messages[0].content == 'boom' %}{{ 'x' * (2 ** 34) }}{% endif %}{{ messages[0].content }}"
    with ChatRenderer(ChatTemplate(bomb, "bomb.jinja"), memory_limit=MEMORY_LIMIT) as renderer:
        with pytest.raises(RenderLimitExceeded):
            renderer.render([{"role": "user", "content": "boom"}], add_generation_prompt=False)
        assert renderer.render([{"role": "user", "content": "calm"}], add_generation_prompt=False) == "calm"


def test_a_worker_that_dies_is_reported_as_one_line():
    """However the worker dies (the kernel's OOM killer, a crash in C code), the render reports it
    with the worker's exit status instead of waiting out the time bound."""
    looping = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    renderer = ChatRenderer(ChatTemplate(looping, "dies.jinja"), timeout=ENDED_WITHIN)
    outcome: list[BaseException] = []

    def run():
        try:
            renderer.render(QUESTION, add_generation_prompt=False)
        except BaseException as e:  # noqa: BLE001  (handed to the test thread)
            outcome.append(e)

    start = time.monotonic()
    thread = threading.Thread(target=run)
    with renderer:
        thread.start()
        while renderer._process is None or renderer._process.pid is None:
            time.sleep(0.01)
        time.sleep(0.5)  # the render is under way
        os.kill(renderer._process.pid, signal.SIGKILL)
        thread.join(ENDED_WITHIN)
    assert not thread.is_alive() and ended_in_time(start)
    assert isinstance(outcome[0], RenderLimitExceeded)
    assert str(outcome[0]) == "the render worker died (signal 9): the template crashed it"


# ---- escapes from the sandbox ---------------------------------------------------------------------

ESCAPES = {
    "__class__ and __subclasses__": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler internals": "{{ cycler.__init__.__globals__.os.system('touch SENTINEL') }}",
    "joiner internals": "{{ joiner.__init__.__globals__.os.system('touch SENTINEL') }}",
    "namespace internals": "{{ namespace.__init__.__globals__.os.system('touch SENTINEL') }}",
    "lipsum's globals": "{{ lipsum.__globals__.os.system('touch SENTINEL') }}",
    "a helper's globals": "{{ raise_exception.__globals__.os.system('touch SENTINEL') }}",
    "str.format": "{{ '{0.__class__.__mro__}'.format(messages) }}{{ ''.__class__.__base__ }}",
    "the attr filter": "{{ (messages | attr('__class__')).__base__.__subclasses__() }}",
    "a message's class": "{{ messages[0].__class__.__init__.__globals__ }}",
}


@pytest.mark.parametrize("attack", sorted(ESCAPES))
def test_an_escape_attempt_is_refused_and_runs_nothing(attack, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # where `touch SENTINEL` would leave its file
    (tmp_path / "escape.jinja").write_text(ESCAPES[attack], encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(RenderError, match="SecurityError|unsafe|undefined"):
        render(ESCAPES[attack])
    assert main(["infer", str(tmp_path / "escape.jinja"), "--examples", "0"]) == 2
    assert main(["verify", "qwen3", "--chat-template", str(tmp_path / "escape.jinja"), "--examples", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and err.count("cannot render a conversation of one user message") == 2
    assert ended_in_time(start)
    assert not (tmp_path / "SENTINEL").exists()


# ---- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ 'x' * (2 ** 34) }}", "the render exhausted its memory bound (1024 MiB)"),
        ("{% macro again(n) %}{{ again(n + 1) }}{% endmacro %}{{ again(0) }}", "exceeded the recursion limit"),
        ("{% for i in range(10) %}{{ 'x' * 1000000 }}{% endfor %}", "output passed its bound of 4194304 characters"),
    ],
    ids=["memory", "recursion", "output"],
)
def test_infer_and_verify_report_a_tripped_bound_as_one_line_with_status_2(tmp_path, capsys, source, message):
    (tmp_path / "hostile.jinja").write_text(source, encoding="utf-8")
    start = time.monotonic()
    assert main(["infer", str(tmp_path / "hostile.jinja")]) == 2
    assert main(["verify", "qwen3", "--chat-template", str(tmp_path / "hostile.jinja")]) == 2
    err = capsys.readouterr().err
    assert err.count(message) == 2 and err.count("\n") == 2
    assert ended_in_time(start)


def test_render_aborted_is_not_a_render_error():
    """Callers that tolerate a template refusing one conversation must not swallow a tripped bound."""
    assert issubclass(RenderTimeout, RenderAborted) and issubclass(RenderLimitExceeded, RenderAborted)
    assert not issubclass(RenderAborted, RenderError)
