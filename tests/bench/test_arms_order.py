import pytest

from strata_bench.engines.launcher import with_port
from strata_bench.arms import Arm, ArmError, parse_arm, parse_arms
from strata_bench.order import arm_order, run_plan


def test_parse_command_and_url_arms():
    a = parse_arm("release=strata-engine serve --batch 4")
    assert a.name == "release" and a.command == "strata-engine serve --batch 4" and not a.is_url
    u = parse_arm("remote=@http://127.0.0.1:8000/")
    assert u.is_url and u.url == "http://127.0.0.1:8000"


def test_command_gets_host_and_port_unless_it_has_a_placeholder():
    assert with_port(parse_arm("a=srv --x 1").command, 9) == "srv --x 1 --host 127.0.0.1 --port 9"
    assert with_port(parse_arm("a=srv --listen :{port}").command, 9) == "srv --listen :9"


def test_env_prefix_is_recorded():
    arm = parse_arm("p=env STRATA_PIPED_READ_PIECE=32768 FOO='a b' strata-engine serve")
    assert arm.env_assignments() == {"STRATA_PIPED_READ_PIECE": "32768", "FOO": "a b"}
    assert parse_arm("p=X=1 cmd").env_assignments() == {"X": "1"}


@pytest.mark.parametrize(
    "text, words",
    [
        ("release", "NAME=COMMAND"),
        ("=cmd", "name before '=' is empty"),
        ("bad name=cmd", "letters, digits"),
        ("a=", "command is empty"),
        ("a=@ftp://x", "not an http"),
        ("a=@", "not an http"),
        ("a=cmd 'unclosed", "cannot parse"),
    ],
)
def test_malformed_arms(text, words):
    with pytest.raises(ArmError, match=words):
        parse_arm(text)


def test_one_arm_measures_a_server_none_is_an_error_naming_both_forms():
    assert [a.name for a in parse_arms(["solo=@http://127.0.0.1:9"])] == ["solo"]
    with pytest.raises(ArmError, match="NAME=@URL"):
        parse_arms([])
    with pytest.raises(ArmError, match="NAME=@URL"):
        parse_arm("@http://127.0.0.1:9")
    with pytest.raises(ArmError, match="@ftp://x"):  # the message quotes the URL as written, with its @
        parse_arm("a=@ftp://x")


def test_arm_names_are_unique():
    with pytest.raises(ArmError, match="unique"):
        parse_arms(["a=x", "a=y"])
    assert [a.name for a in parse_arms(["a=x", "b=@http://h:1"])] == ["a", "b"]


def test_arm_round_trip():
    arm = Arm("a", command="env A=1 x")
    assert Arm.from_dict(arm.to_dict()) == arm


def test_abba_for_two_arms():
    assert [arm_order(["A", "B"], r) for r in range(4)] == [["A", "B"], ["B", "A"], ["A", "B"], ["B", "A"]]
    plan = run_plan(["A", "B"], ["s"], 4)
    assert "".join(k.arm for k in plan) == "ABBAABBA"


def test_order_reverses_every_round_for_more_arms():
    plan = run_plan(["A", "B", "C"], ["s"], 3)
    assert "".join(k.arm for k in plan) == "ABCCBAABC"


def test_plan_is_round_major_with_every_scenario_per_round():
    plan = run_plan(["A", "B"], ["x", "y"], 2)
    assert [k.id for k in plan] == [
        "r00-x-A",
        "r00-x-B",
        "r00-y-A",
        "r00-y-B",
        "r01-x-B",
        "r01-x-A",
        "r01-y-B",
        "r01-y-A",
    ]
    with pytest.raises(ValueError):
        run_plan(["A", "B"], ["x"], 0)
