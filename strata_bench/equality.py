"""Token equality across arms: greedy decoding must give every arm the same tokens for the same request.

Within a round all arms send the same prompts, so each request is compared with the first arm's run of
that round and scenario, over the tokens both received (a stream the bench closed after its tail has
fewer). The first difference names the round, scenario, request, index and both tokens. Runs whose
prompts went in different forms (token ids to one server, text to another) are different prompts: they
are not compared, and the check says so instead of flagging a difference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from .engines.compare import common_prefix_difference


@dataclass(frozen=True)
class TokenDiff:
    round: int
    scenario: str
    request: str
    arm: str
    baseline: str
    index: int
    arm_token: Any
    baseline_token: Any

    def describe(self) -> str:
        return (
            f"round {self.round} {self.scenario} request {self.request}: {self.arm} differs from {self.baseline} "
            f"at token {self.index} ({self.baseline}={self.baseline_token!r}, {self.arm}={self.arm_token!r})"
        )


@dataclass(frozen=True)
class TokenCheck:
    compared_requests: int
    compared_tokens: int
    differing_requests: int
    without_ids: int  # requests compared by text because a side had no token ids
    first_diff: TokenDiff | None
    other_prompts: list[str] = field(default_factory=list)  # "round 0 sc: A sent token ids, B text"

    @property
    def equal(self) -> bool:
        return self.first_diff is None

    def describe(self) -> str:
        skipped = ""
        if self.other_prompts:
            skipped = (
                f" Not compared, because the prompts went in different forms: {self.other_prompts[0]}"
                + (f" (and {len(self.other_prompts) - 1} more)" if len(self.other_prompts) > 1 else "")
                + "."
            )
        if self.compared_requests == 0:
            return "Greedy tokens: nothing to compare (no pair of arms has tokens for the same request)." + skipped
        return self._compared() + skipped

    def _compared(self) -> str:
        basis = f"{self.compared_requests} request pairs, {self.compared_tokens} tokens"
        if self.without_ids:
            basis += f"; {self.without_ids} compared by text (no token ids)"
        if self.first_diff is None:
            return f"Greedy tokens: every arm gave the same tokens for the same requests ({basis})."
        return (
            f"Greedy tokens DIFFER in {self.differing_requests} of {basis.split(',')[0]}; first: "
            f"{self.first_diff.describe()}."
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["equal"] = self.equal
        out["summary"] = self.describe()
        return out


def check_tokens(runs: list[dict[str, Any]], arm_order: list[str]) -> TokenCheck:
    by_group: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for run in runs:
        if run.get("status") != "failed":
            by_group.setdefault((run["round"], run["scenario"]), {})[run["arm"]] = run
    requests = tokens = differing = by_text = 0
    first: TokenDiff | None = None
    other_prompts: list[str] = []
    for (round_index, scenario), arms in sorted(by_group.items()):
        names = [a for a in arm_order if a in arms]
        if len(names) < 2:
            continue
        base_name = names[0]
        base = {r["name"]: r for r in arms[base_name].get("requests", [])}
        for arm in names[1:]:
            mine, theirs = arms[arm].get("prompt_mode"), arms[base_name].get("prompt_mode")
            if mine and theirs and mine != theirs:
                forms = {"ids": "token ids", "text": "text"}
                other_prompts.append(
                    f"round {round_index} {scenario}: {base_name} sent {forms.get(theirs, theirs)}, "
                    f"{arm} {forms.get(mine, mine)}"
                )
                continue
            for req in arms[arm].get("requests", []):
                other = base.get(req["name"])
                if other is None:
                    continue
                a, b, textual = _sequences(req, other)
                if not a or not b:
                    continue
                requests += 1
                by_text += textual
                tokens += min(len(a), len(b))
                index = common_prefix_difference(a, b)
                if index is not None:
                    differing += 1
                    if first is None:
                        first = TokenDiff(round_index, scenario, req["name"], arm, base_name, index, a[index], b[index])
    return TokenCheck(requests, tokens, differing, by_text, first, other_prompts)


def _sequences(req: dict[str, Any], other: dict[str, Any]) -> tuple[Sequence[Any], Sequence[Any], bool]:
    if req.get("token_ids") is not None and other.get("token_ids") is not None:
        return req["token_ids"], other["token_ids"], False
    return req.get("text") or "", other.get("text") or "", True
