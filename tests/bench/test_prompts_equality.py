from strata_bench.engines.compare import common_prefix_difference, first_difference
from strata_bench.equality import check_tokens
from strata_bench.prompts import prompt_digest, prompt_seed, sized_text_prompt, text_prompt, token_prompt


def test_prompts_depend_on_round_not_arm_and_skip_eos():
    a = token_prompt(prompt_seed("n", 0, "two_joiners", "join64k"), 5000, 50, eos_token_id=7)
    assert a == token_prompt(prompt_seed("n", 0, "two_joiners", "join64k"), 5000, 50, eos_token_id=7)
    assert a != token_prompt(prompt_seed("n", 1, "two_joiners", "join64k"), 5000, 50, eos_token_id=7)
    assert len(a) == 5000 and 7 not in a and all(0 <= t < 50 for t in a)
    text = text_prompt(prompt_seed("n", 0, "x", "q"), 24)
    assert len(text.split()) == 24
    assert prompt_digest(a) != prompt_digest(a[:-1])


def test_one_first_difference_rule_and_the_common_prefix_form():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 2, 3, 4]) == 3  # a missing token is a difference
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert common_prefix_difference([1, 2, 3], [1, 2, 3, 4]) is None  # a stream the bench closed early
    assert common_prefix_difference([1, 2, 3], [1, 9, 3, 4]) == 1


def test_text_prompts_are_sized_in_the_servers_tokens():
    # a byte-level server: a prompt "of 500 tokens" must be 500 bytes, not 500 words (~5x longer)
    counted = []

    def count(text):
        counted.append(len(text))
        return len(text.encode())

    text, measured = sized_text_prompt(prompt_seed("n", 0, "x", "j"), 500, count)
    assert measured == len(text.encode()) and 490 <= measured <= 500 and len(counted) < 20
    words, unknown = sized_text_prompt(prompt_seed("n", 0, "x", "j"), 50, lambda text: None)
    assert unknown is None and len(words.split()) == 50  # the server cannot count: about one token a word


def _run(arm, rnd, ids, status="ok", name="s0"):
    return {
        "arm": arm,
        "round": rnd,
        "scenario": "sc",
        "status": status,
        "requests": [{"name": name, "token_ids": ids, "text": ""}],
    }


def test_check_tokens_names_the_first_difference():
    runs = [_run("A", 0, [1, 2, 3]), _run("B", 0, [1, 2, 3, 4]), _run("A", 1, [5, 6, 7]), _run("B", 1, [5, 6, 8])]
    check = check_tokens(runs, ["A", "B"])
    assert not check.equal and check.compared_requests == 2 and check.differing_requests == 1
    d = check.first_diff
    assert (d.round, d.request, d.arm, d.baseline, d.index, d.arm_token, d.baseline_token) == (
        1,
        "s0",
        "B",
        "A",
        2,
        8,
        7,
    )
    assert "round 1 sc request s0: B differs from A at token 2 (A=7, B=8)" in check.describe()


def test_check_tokens_equal_skips_failed_runs_and_falls_back_to_text():
    runs = [_run("A", 0, [1, 2]), _run("B", 0, [1, 2]), _run("B", 1, [9], status="failed"), _run("A", 1, [1])]
    check = check_tokens(runs, ["A", "B"])
    assert check.equal and check.compared_requests == 1 and check.compared_tokens == 2
    text_runs = [
        {
            "arm": a,
            "round": 0,
            "scenario": "sc",
            "status": "ok",
            "requests": [{"name": "q", "token_ids": None, "text": t}],
        }
        for a, t in (("A", "hello"), ("B", "help"))
    ]
    check = check_tokens(text_runs, ["A", "B"])
    assert check.without_ids == 1 and check.first_diff.index == 3


def test_arms_with_prompts_of_different_forms_are_not_compared_but_said():
    runs = [
        {**_run("A", 0, [1, 2, 3]), "prompt_mode": "ids"},
        {
            "arm": "B",
            "round": 0,
            "scenario": "sc",
            "status": "ok",
            "prompt_mode": "text",
            "requests": [{"name": "s0", "token_ids": None, "text": "the of and"}],
        },
    ]
    check = check_tokens(runs, ["A", "B"])
    assert check.equal and check.compared_requests == 0 and "DIFFER" not in check.describe()
    assert "A sent token ids, B text" in check.describe()
