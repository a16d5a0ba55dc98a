"""Invalid templates: rtcompile must reject exactly what the interpreter rejects, the same way.

Each case is a generated valid template broken by one validation rule of the interpreter's
`response_templates.py` (see `strategies.invalid_templates`). The interpreter must reject it (a
check on the strategy itself); rtcompile's `ResponseParser`, `parse_response` and `compile_template`
must reject it with the interpreter's exception class or a subclass. Where the interpreter raises
ValueError, rtcompile must raise its `TemplateError` (a ValueError) whose message names the JSON
path of the problem, e.g. `fields.tool_calls.open_pattern`, and whose `.path` says the same.

Template validation comes before the "prefix is required" check in the interpreter, so the prefix is
sometimes None: the template error must still be the one reported.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from transformers.utils.chat_parsing import response_parser as interpreter_module

from strategies import InvalidTemplate, fresh_tree, invalid_templates, template_plans
from test_differential import SELF_MODE, private_compile_cache  # noqa: F401 - an autouse fixture

_PREFIX_ERROR_START = "`ResponseParser`/`parse_response` requires `prefix`"


def candidate_entry_points() -> dict[str, Callable[[Any, Any], Any]]:
    if SELF_MODE:
        return {
            "ResponseParser": lambda template, prefix: interpreter_module.ResponseParser(
                template, prefix
            ),
            "parse_response": lambda template, prefix: interpreter_module.parse_response(
                "x", template, prefix=prefix
            ),
        }
    import rtcompile

    return {
        "ResponseParser": lambda template, prefix: rtcompile.ResponseParser(template, prefix),
        "parse_response": lambda template, prefix: rtcompile.parse_response(
            "x", template, prefix=prefix
        ),
        "compile_template": lambda template, prefix: rtcompile.compile_template(template),
    }


def check_path(
    error: BaseException, invalid: InvalidTemplate, entry_point: str, context: str
) -> None:
    """The message names the problem's JSON path; `.path` (unless the root, "") is that path."""
    message = str(error)
    path = getattr(error, "path", None)
    problems = []
    if not isinstance(path, str):
        problems.append(f"TemplateError.path should be a str, got {path!r}")
    elif path and not any(path.startswith(expected) for expected in invalid.paths):
        problems.append(f"its path is {path!r}")
    elif path not in message:
        problems.append(f"the message does not contain its own path {path!r}")
    if not any(expected in message for expected in invalid.paths):
        problems.append("the message names none of the expected paths")
    if problems:
        pytest.fail(
            f"{entry_point}: rule {invalid.rule!r} should be reported at one of "
            f"{invalid.paths}, but " + "; ".join(problems) + f"\nmessage: {message!r}\n{context}",
            pytrace=False,
        )


@example(
    invalid=InvalidTemplate(
        {
            "start_anchor": "<a>",
            "fields": {"tool_calls": {"open_pattern": "<(?P<name>", "close": "</a>"}},
        },
        "bad_regex",
        ("fields.tool_calls.open_pattern",),
    ),
    prefix=None,
)
@given(invalid=invalid_templates(), prefix=st.sampled_from(["", None, "<a>x"]))
def test_invalid_templates_are_rejected_like_the_interpreter(
    invalid: InvalidTemplate, prefix
) -> None:
    entry_points = candidate_entry_points()
    with pytest.raises(Exception) as interpreter_error:
        interpreter_module.ResponseParser(invalid.template, prefix)
    expected = type(interpreter_error.value)
    # The strategy must break the template, not just trip over the missing prefix.
    assert not str(interpreter_error.value).startswith(
        _PREFIX_ERROR_START
    ), f"{invalid!r} was not invalid"
    event(f"rule {invalid.rule}: interpreter raised {expected.__name__}")
    context = f"case: {invalid!r}, prefix={prefix!r}"

    for name, construct in entry_points.items():
        error = raised_by(lambda: construct(invalid.template, prefix))
        if error is None:
            pytest.fail(
                f"{name} accepted a template the interpreter rejects "
                f"({expected.__qualname__}: {interpreter_error.value})\n{context}",
                pytrace=False,
            )
        if not isinstance(error, expected):
            pytest.fail(
                f"{name}: raised {type(error).__module__}.{type(error).__qualname__}: {error}\n"
                f"the interpreter raised {expected.__qualname__}: "
                f"{interpreter_error.value}\n{context}",
                pytrace=False,
            )
        if SELF_MODE:
            continue
        import rtcompile

        if expected is ValueError and not isinstance(error, rtcompile.TemplateError):
            pytest.fail(
                f"{name}: a template error should be rtcompile.TemplateError, "
                f"got {type(error).__qualname__}: {error}\n{context}",
                pytrace=False,
            )
        if isinstance(error, rtcompile.TemplateError):
            check_path(error, invalid, name, context)


def raised_by(action: Callable[[], Any]) -> BaseException | None:
    try:
        action()
    except Exception as error:  # noqa: BLE001 - the class is what is being checked
        return error
    return None


@given(plan=template_plans(valid_only=True))
def test_the_templates_broken_above_are_valid_before_they_are_broken(plan):
    """Each invalid case breaks one rule of a valid template; a base that broke another rule
    already (transform_each on a transform that collapsed to None, say) would make rtcompile's
    first error a different one, rightly. Both the interpreter and rtcompile's front end accept
    every base."""
    from rtcompile.frontend.validate import lower

    interpreter_module.ResponseParser(fresh_tree(plan.template), "")
    lower(fresh_tree(plan.template))


def test_a_valid_field_whose_transform_collapses_keeps_no_transform_each(monkeypatch):
    """The strategy's own rule behind the property above, forced: every transform tree collapses
    to None; a valid field then never keeps transform_each (which needs a transform)."""
    import strategies

    json_configs = strategies.content_configs(parser="json")
    monkeypatch.setattr(strategies, "transforms", lambda *args, **kwargs: st.just(None))
    monkeypatch.setattr(strategies, "content_configs", lambda *args, **kwargs: json_configs)

    @settings(max_examples=max(300, settings().max_examples))  # (cheap draws: no parser runs)
    @given(plan=strategies.field_plans("a", implicit=False, valid_only=True))
    def check(plan):
        assert not (plan.spec.get("transform_each") and plan.spec.get("transform") is None), plan.spec

    check()
