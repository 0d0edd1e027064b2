"""The streaming client against the synthetic server: token counting, packing, failures, stalls, cancel."""

import asyncio

from strata_bench.engines.result import StreamResult
from strata_bench.engines.stream import SSEDecoder, stream_completion
from strata_bench.engines.wire import choice_tokens
from strata_bench.engines.launcher import free_port
from strata_bench.engines.feed import fetch_events, next_index
from strata_bench.engines.probe import probe


def test_sse_decoder_handles_split_and_joined_events_and_crlf():
    d = SSEDecoder()
    assert d.feed(b'data: {"a"') == []
    assert d.feed(b": 1}\n\ndata: [DONE]\n\n") == ['{"a": 1}', "[DONE]"]
    assert d.feed(b": comment\r\ndata: x\r\n\r\n") == ["x"]


def test_choice_tokens_prefers_ids_then_logprobs_then_text():
    assert choice_tokens({"text": "ab", "token_ids": [1, 2]}) == (2, [1, 2], "ab")
    assert choice_tokens({"text": "ab", "logprobs": {"tokens": ["a", "b"]}}) == (2, None, "ab")
    assert choice_tokens({"text": "ab", "logprobs": None}) == (1, None, "ab")
    assert choice_tokens({"text": "", "finish_reason": "length"}) == (0, None, "")
    assert choice_tokens({"delta": {"content": "x"}, "logprobs": {"content": [{}, {}]}}) == (2, None, "x")


def run_request(url, body, name="r", headers=None):
    result = StreamResult(name=name, role="stream", prompt_tokens=len(body.get("prompt", [])))
    return asyncio.run(stream_completion(url, body, result, headers=headers))


def test_tokens_ids_and_usage(synthetic):
    url = synthetic("--itl-ms", "2")
    r = run_request(url, {"prompt": [1, 2, 3], "max_tokens": 7, "return_token_ids": True})
    assert r.error is None and r.ended_by == "finished" and r.finish_reason == "length"
    assert len(r.times) == 7 and len(r.token_ids) == 7 and r.events == 8  # 7 tokens + usage
    assert r.usage["completion_tokens"] == 7 and not r.warnings
    assert r.times == sorted(r.times) and r.first_token_at == r.times[0] >= r.sent_at
    again = run_request(url, {"prompt": [1, 2, 3], "max_tokens": 7, "return_token_ids": True})
    assert again.token_ids == r.token_ids  # same prompt, same tokens


def test_packed_events_give_k_tokens_one_timestamp(synthetic):
    url = synthetic("--itl-ms", "2", "--pack", "3")
    r = run_request(url, {"prompt": [5], "max_tokens": 10, "return_token_ids": True})
    assert len(r.times) == 10
    t = r.times
    assert t[0] == t[1] == t[2] and t[3] == t[4] == t[5] and t[6] == t[7] == t[8]
    assert t == sorted(t) and r.events == 5  # 3 + 3 + 3 + 1 tokens in four events, then usage
    # (not four distinct times: on a loaded machine two events can arrive in one read and share one)


def test_text_only_server_counts_one_token_per_event_and_says_when_usage_disagrees(synthetic):
    url = synthetic("--itl-ms", "2", "--pack", "2", "--token-ids", "false")
    r = run_request(url, {"prompt": "hello there", "max_tokens": 6, "return_token_ids": True})
    assert not r.ids_given and r.to_dict(0)["token_ids"] is None and len(r.times) == 3
    assert any("usage says 6" in w for w in r.warnings)


def test_http_failure_is_recorded_not_raised(synthetic):
    url = synthetic("--fail-match", "bad")
    r = run_request(url, {"prompt": [1], "max_tokens": 3}, headers={"X-Request-Id": "bad-1"})
    assert r.ended_by == "error" and r.http_status == 500 and "HTTP 500" in r.error and not r.times
    bad_body = run_request(url, {"prompt": [1], "max_tokens": -1})
    assert bad_body.http_status == 400 and "max_tokens" in bad_body.error


def test_error_event_mid_stream_keeps_the_tokens_before_it(synthetic):
    url = synthetic("--itl-ms", "2", "--fail-match", "bad", "--fail-after-tokens", "4")
    r = run_request(url, {"prompt": [1], "max_tokens": 20}, headers={"X-Request-Id": "bad-2"})
    assert r.ended_by == "error" and "after 4 tokens" in r.error and len(r.times) == 4


def test_a_stall_shows_as_one_long_gap(synthetic):
    url = synthetic("--itl-ms", "2", "--stall-after-tokens", "5", "--stall-s", "0.3")
    r = run_request(url, {"prompt": [1], "max_tokens": 10})
    gaps = [b - a for a, b in zip(r.times, r.times[1:])]
    # The server sleeps 0.3 s after token 5 was sent; its arrival may lag the send a little.
    assert gaps.index(max(gaps)) == 4 and max(gaps) > 0.2


def test_cancel_keeps_what_arrived(synthetic):
    url = synthetic("--itl-ms", "5")

    async def go():
        result = StreamResult(name="c", role="stream", prompt_tokens=1)
        task = asyncio.create_task(stream_completion(url, {"prompt": [1], "max_tokens": 100000}, result))
        while len(result.times) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return result

    r = asyncio.run(go())
    assert r.ended_by == "cancelled" and len(r.times) >= 3 and r.error is None and r.ended_at is not None


def test_unreachable_server_is_an_error_in_the_result():
    r = run_request(f"http://127.0.0.1:{free_port()}", {"prompt": [1], "max_tokens": 3})
    assert r.ended_by == "error" and "ConnectionRefused" in r.error


def test_probe_and_events(synthetic):
    url = synthetic("--mode", "pieces", "--piece-tokens", "100", "--itl-ms", "2", "--vocab-size", "321")

    info, start = probe(url), next_index(url)
    result = StreamResult(name="r", role="joiner", prompt_tokens=250)
    asyncio.run(stream_completion(url, {"prompt": list(range(250)), "max_tokens": 2}, result))
    events, nxt = fetch_events(url, start)
    assert (
        info.supports_token_ids and info.vocab_size == 321 and info.prompt_mode == "ids" and info.model == "synthetic"
    )
    assert start == 0 and [e["kind"] for e in events] == ["PIECE", "PIECE", "PIECE", "READ_DONE"] and nxt == 4
    assert [e["tokens"] for e in events[:3]] == [100, 100, 50]


def test_probe_plain_openai_server(synthetic):
    url = synthetic("--token-ids", "false")

    info, index = probe(url), next_index(url)
    assert info.prompt_mode == "text" and info.engine is None and info.ctx == 1_000_000 and index is None
    assert info.family_name == "openai"


def test_stream_task_in_a_thread_cancels_and_ends_a_silent_stream(synthetic):
    from strata_bench.engines.stream import StreamTask

    url = synthetic("--itl-ms", "5", "--stall-after-tokens", "3", "--stall-s", "5")
    silent = StreamTask(url, {"prompt": [1], "max_tokens": 10}, StreamResult("s"), timeout=1.0).run()
    assert silent.ended_by == "error" and "sent nothing for 1 s" in silent.error and len(silent.times) == 3
    task = StreamTask(url, {"prompt": [2], "max_tokens": 10}, StreamResult("c")).start()
    assert task.first_token.wait(10)
    task.cancel()
    done = task.join(10)
    assert task.finished.is_set() and done.cancelled and done.ended_by == "cancelled" and done.error is None
