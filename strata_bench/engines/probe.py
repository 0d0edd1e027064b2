"""What a server is and says about itself: its family, model, vocabulary, context per request and slots.

Detection, in order: Strata answers GET /v1/engine; llama.cpp's llama-server answers GET /props with
`total_slots` (and lists models `owned_by: llamacpp` with `meta.n_ctx`); vLLM and SGLang name themselves in
`owned_by`; llama-cpp-python's models are `owned_by: me`; anything else is a generic OpenAI server (text
prompts, no ids). vLLM says its context (`max_model_len`) but not its vocabulary: it gets token ids when its
/tokenize is shown to agree with our tokenizer of the model directory it serves (`agreement.py`), which
then gives the vocabulary. `count_tokens` measures a text's real length through the family's tokenize
endpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx

from .agreement import check_agreement
from .families import LLAMA_CPP, LLAMA_CPP_PYTHON, OPENAI, SGLANG, STRATA, VLLM, Family, family


@dataclass(frozen=True)
class ServerInfo:
    family_name: str
    model: str | None
    vocab_size: int | None
    eos_token_id: int | None
    ctx: int | None  # tokens one request may hold (prompt + answer)
    slots: int | None  # requests it runs at once, when it says
    engine: dict[str, Any] | None  # GET /v1/engine (Strata) or GET /props (llama.cpp) as served
    ids_in: bool = True  # the server says it takes token-id prompts (Strata's own flag; else the family's)
    tokenizer: str | None = None  # how we know its ids mean ours (or why text is sent), where it was checked

    @property
    def family(self) -> Family:
        return family(self.family_name)

    @property
    def supports_token_ids(self) -> bool:
        """Prompts go as token ids: the family takes them and we know the vocabulary to draw them from."""
        return self.ids_in and self.family.ids_in and bool(self.vocab_size)

    @property
    def prompt_mode(self) -> str:
        return "ids" if self.supports_token_ids else "text"

    @property
    def batch(self) -> int | None:
        return self.slots

    def describe(self) -> str:
        parts = [self.family.label]
        if self.model:
            parts.append(f"model {self.model}")
        if self.ctx:
            parts.append(f"context {self.ctx} per request")
        if self.slots:
            parts.append(f"{self.slots} slot{'s' if self.slots != 1 else ''}")
        parts.append(f"{self.prompt_mode} prompts")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(family=self.family_name, prompt_mode=self.prompt_mode, supports_token_ids=self.supports_token_ids)
        return out


def probe(url: str, timeout: float = 10.0) -> ServerInfo:
    url = url.rstrip("/")
    with httpx.Client(timeout=timeout) as client:
        engine = _get_json(client, f"{url}/v1/engine")
        models = _get_json(client, f"{url}/v1/models")
        first = {}
        if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
            first = models["data"][0] or {}
        model = first.get("id")
        if isinstance(engine, dict) and engine.get("supports_token_ids") is not None:
            return ServerInfo(
                STRATA.name,
                model or engine.get("model"),
                _int(engine.get("vocab_size")),
                _int(engine.get("eos_token_id")),
                _int(engine.get("ctx")) or _int(first.get("max_model_len")),
                _int(engine.get("batch")),
                engine,
                bool(engine.get("supports_token_ids")),
            )
        props = _get_json(client, f"{url}/props")
        if first.get("owned_by") == "llamacpp" or (isinstance(props, dict) and "total_slots" in props):
            return _llama_cpp(client, url, model, first, props if isinstance(props, dict) else {})
        owner = str(first.get("owned_by") or "").lower()
        found = {"vllm": VLLM, "sglang": SGLANG, "me": LLAMA_CPP_PYTHON}.get(owner, OPENAI)
        if found is OPENAI and _get_json(client, f"{url}/get_model_info") is not None:
            found = SGLANG
        ctx = _int(first.get("max_model_len")) or _int(first.get("context_length"))
        if found is VLLM:
            return _vllm(client, url, model, first, ctx)
        return ServerInfo(found.name, model, None, None, ctx, None, None)


def _vllm(client: httpx.Client, url: str, model: str | None, first: dict[str, Any], ctx: int | None) -> ServerInfo:
    """vLLM: ids when its tokenizer is shown to be ours; vocabulary and eos then from the model directory."""
    agreement = check_agreement(
        VLLM.label, (first.get("root"), model), lambda text: _tokenize(client, url, VLLM, text, model=model)
    )
    return ServerInfo(
        VLLM.name, model, agreement.vocab_size, agreement.eos_token_id, ctx, None, None, tokenizer=agreement.reason
    )


def _llama_cpp(
    client: httpx.Client, url: str, model: str | None, first: dict[str, Any], props: dict[str, Any]
) -> ServerInfo:
    meta = first.get("meta") or {}
    settings = props.get("default_generation_settings") or {}
    ctx = _int(settings.get("n_ctx")) or _int(meta.get("n_ctx"))
    eos = None
    if props.get("eos_token"):
        ids = _tokenize(client, url, LLAMA_CPP, props["eos_token"], parse_special=True)
        eos = ids[0] if ids and len(ids) == 1 else None
    return ServerInfo(
        LLAMA_CPP.name,
        model,
        _int(meta.get("n_vocab")),
        eos,
        ctx,
        _int(props.get("total_slots")),
        {k: v for k, v in props.items() if k not in ("chat_template", "chat_template_tool_use")} or None,
    )


def count_tokens(url: str, info: ServerInfo, text: str) -> int | None:
    """The text's length in the server's own tokens (no special tokens added), or None if it cannot say."""
    with httpx.Client(timeout=60.0) as client:
        ids = _tokenize(client, url.rstrip("/"), info.family, text, model=info.model)
    return None if ids is None else len(ids)


def _tokenize(
    client: httpx.Client, url: str, fam: Family, text: str, *, parse_special: bool = False, model: str | None = None
) -> list[int] | None:
    if fam.tokenize is None:
        return None
    if fam is LLAMA_CPP:
        body: dict[str, Any] = {"content": text, "add_special": False, "parse_special": parse_special}
    elif fam is LLAMA_CPP_PYTHON:
        body = {"input": text}
    else:
        body = {"prompt": text, "add_special_tokens": False, **({"model": model} if model else {})}
    try:
        resp = client.post(f"{url}{fam.tokenize}", json=body)
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
        return tokens
    return None


def _get_json(client: httpx.Client, url: str) -> Any:
    try:
        resp = client.get(url)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
