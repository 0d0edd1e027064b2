"""The engine's event feed (Strata's GET /v1/events): where a run's events start, fetch them, or follow.

`next_index`/`fetch_events` are what the bench needs around a run (None without a feed). `EventWatcher`
follows `?follow=1` for the gate and notes when each event arrived, on the clients' clock
(time.perf_counter): `offset` is the smallest (arrival - event t) seen, so `to_client(t) = t + offset`
errs late by at most the feed's latency. Without a follow stream it polls `?since=N`. A server without
the endpoint leaves `available` False: evidence must then come from token arrival times.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import httpx


_FAR_AHEAD = 10**15


def next_index(url: str) -> int | None:
    """The next event index (where a run's events will start); None if the server has no event feed."""
    # Ask from far ahead: the answer is empty and its header names the next index, without shipping a
    # long-lived server's whole history; a server without the header is asked for everything and counted.
    ahead = _events(url, _FAR_AHEAD)
    if ahead is None:
        return None
    if ahead[1] is not None:
        return ahead[1]
    everything = _events(url, 0)
    return None if everything is None else len(everything[0])


def fetch_events(url: str, since: int) -> tuple[list[dict[str, Any]], int] | None:
    """Events with index >= since and the next index to ask for; None without an event feed."""
    got = _events(url, since)
    if got is None:
        return None
    events, following = got
    return events, since + len(events) if following is None else following


def _events(url: str, since: int) -> tuple[list[dict[str, Any]], int | None] | None:
    try:
        resp = httpx.get(f"{url.rstrip('/')}/v1/events", params={"since": since}, timeout=10.0)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    events = []
    for line in resp.text.splitlines():
        try:
            event = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    header = resp.headers.get("X-Strata-Next-Index", "")
    return events, (int(header) if header.isdigit() else None)


class EventWatcher:
    def __init__(self, url: str, poll_s: float = 0.05):
        self.url = url.rstrip("/")
        self.poll_s = poll_s
        self.available = True
        self.events: list[dict[str, Any]] = []  # each with "_arrived" (gate clock) added
        self._seen: set[int] = set()
        self._next = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verify-events", daemon=True)

    def start(self) -> "EventWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following, then fetch whatever the feed still holds (arrival unknown for those)."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        if self.available:
            self._poll_once(arrived=None)

    # -- queries -------------------------------------------------------------------------------
    def of(self, request_id: str | None, kind: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [
                e
                for e in self.events
                if (request_id is None or e.get("request_id") == request_id) and (kind is None or e.get("kind") == kind)
            ]

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any] | None:
        deadline = time.perf_counter() + timeout
        with self._cond:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                left = deadline - time.perf_counter()
                if left <= 0 or not self.available:
                    return None
                self._cond.wait(min(left, 0.1))

    @property
    def offset(self) -> float | None:
        with self._cond:
            gaps = [
                e["_arrived"] - e["t"]
                for e in self.events
                if e.get("_arrived") is not None and isinstance(e.get("t"), (int, float))
            ]
        return min(gaps) if gaps else None

    def to_client(self, event: dict[str, Any] | None) -> float | None:
        """An event's engine time on the gate's clock (None when unknown)."""
        offset = self.offset
        if event is None or offset is None or not isinstance(event.get("t"), (int, float)):
            return None
        return event["t"] + offset

    # -- feed ----------------------------------------------------------------------------------
    def _add(self, event: dict[str, Any], arrived: float | None) -> None:
        index = event.get("index")
        with self._cond:
            if index is not None:
                if index in self._seen:
                    return
                self._seen.add(index)
                self._next = max(self._next, index + 1)
            self.events.append({**event, "_arrived": arrived})
            self._cond.notify_all()

    def _run(self) -> None:
        # Follow with a short read timeout: a quiet feed times out, and the loop reconnects from the
        # next index, so stop() never waits long. A feed that simply ends does not follow: poll instead.
        while self.available and not self._stop.is_set():
            try:
                self._follow()
                break
            except httpx.TimeoutException:
                continue
            except httpx.HTTPError:
                break
        while self.available and not self._stop.is_set():
            self._poll_once(arrived=time.perf_counter())
            self._stop.wait(self.poll_s)

    def _follow(self) -> None:
        timeout = httpx.Timeout(10.0, read=0.5)
        with httpx.Client(timeout=timeout) as http:
            with http.stream("GET", f"{self.url}/v1/events", params={"since": self._next, "follow": 1}) as resp:
                if resp.status_code != 200:
                    self.available = resp.status_code not in (404, 405, 501)
                    resp.read()
                    return
                for line in resp.iter_lines():
                    if self._stop.is_set():
                        return
                    self._take(line, time.perf_counter())

    def _poll_once(self, arrived: float | None) -> None:
        try:
            resp = httpx.get(f"{self.url}/v1/events", params={"since": self._next}, timeout=10.0)
        except httpx.HTTPError:
            return
        if resp.status_code != 200:
            self.available = resp.status_code not in (404, 405, 501) and self.available
            return
        for line in resp.text.splitlines():
            self._take(line, arrived)

    def _take(self, line: str, arrived: float | None) -> None:
        line = line.strip()
        if not line:
            return
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return
        if isinstance(event, dict) and "kind" in event:
            self._add(event, arrived)
