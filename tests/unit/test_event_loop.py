"""The event loop Quorum runs on (``extender.adapters.event_loop``): the standard loop by default,
uvloop on request, a clear exit for anything else; and the ``event_loops`` mark really runs a test
on both."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from extender.adapters.event_loop import ENVIRONMENT_VARIABLE, chosen_loop, new_event_loop

from .test_config import _run


def test_the_standard_loop_unless_uvloop_is_asked_for() -> None:
    assert chosen_loop({}) == "asyncio"
    assert chosen_loop({ENVIRONMENT_VARIABLE: ""}) == "asyncio"
    assert chosen_loop({ENVIRONMENT_VARIABLE: "uvloop"}) == "uvloop"


def test_an_unknown_loop_is_refused_naming_the_variable_and_the_choices() -> None:
    expected = f"{ENVIRONMENT_VARIABLE} must be one of asyncio, uvloop, got 'trio'"
    with pytest.raises(ValueError, match=expected):
        chosen_loop({ENVIRONMENT_VARIABLE: "trio"})


@pytest.mark.parametrize(("kind", "loop_type"), [("uvloop", uvloop.Loop),
                                                  ("asyncio", asyncio.SelectorEventLoop)])
def test_each_choice_makes_its_own_loop(kind: str, loop_type: type) -> None:
    loop = new_event_loop(kind)
    try:
        assert type(loop) is loop_type
    finally:
        loop.close()


def test_the_process_exits_2_for_an_unknown_loop() -> None:
    result = _run(env={ENVIRONMENT_VARIABLE: "trio"})
    assert result.returncode == 2, result.stderr
    assert f"{ENVIRONMENT_VARIABLE} must be one of asyncio, uvloop" in result.stderr


@pytest.mark.event_loops
async def test_the_mark_runs_a_test_on_each_loop(request: pytest.FixtureRequest) -> None:
    expected = uvloop.Loop if "uvloop" in request.node.callspec.id else asyncio.SelectorEventLoop
    assert type(asyncio.get_running_loop()) is expected
