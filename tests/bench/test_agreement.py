"""Token ids go to a server that does not say its vocabulary only when its tokenizer is shown to be ours:
the model directory it names is here, our loader reads it, and its /tokenize of the probe equals ours."""

from __future__ import annotations

from strata_bench.engines.agreement import PROBE_TEXT, check_agreement, local_model_dir
from strata_engine.model.model_dir import MODELS_DIR

EMBEDDED = str(MODELS_DIR / "strata-tiny-moe")


def test_the_probe_text_has_multi_byte_characters():
    assert len(PROBE_TEXT.encode()) > len(PROBE_TEXT) and "\t" in PROBE_TEXT and "\n" in PROBE_TEXT


def test_agreeing_tokenizer_gives_the_vocabulary_and_eos_of_the_served_directory():
    agreement = check_agreement("vLLM", (EMBEDDED, "whatever"), lambda text: list(text.encode()))
    assert agreement.agrees and (agreement.vocab_size, agreement.eos_token_id) == (258, 257)
    assert "equals our tokenizer" in agreement.reason


def test_a_different_tokenizer_gets_text_naming_where_it_differs():
    def shifted(text):
        ids = list(text.encode())
        return ids[:5] + [ids[5] + 1] + ids[6:]

    agreement = check_agreement("vLLM", (EMBEDDED,), shifted)
    assert not agreement.agrees and agreement.vocab_size is None
    assert "differs from ours on a probe text at token 5" in agreement.reason and "text prompts" in agreement.reason


def test_no_tokenize_answer_or_no_local_directory_gets_text(tmp_path):
    silent = check_agreement("vLLM", (EMBEDDED,), lambda text: None)
    assert not silent.agrees and "did not answer POST /tokenize" in silent.reason
    remote = check_agreement("vLLM", ("meta-llama/Llama-3-8B", None), lambda text: list(text.encode()))
    assert not remote.agrees and "not a directory on this machine" in remote.reason
    assert local_model_dir("strata-tiny-moe") == MODELS_DIR / "strata-tiny-moe"  # an embedded model's name
    assert local_model_dir(str(tmp_path), None) is None  # a directory without config.json


def test_a_model_our_loader_refuses_gets_text_saying_why(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["GemmaForCausalLM"], "model_type": "gemma"}')
    agreement = check_agreement("vLLM", (str(tmp_path),), lambda text: list(text.encode()))
    assert not agreement.agrees and f"our loader cannot read {tmp_path}" in agreement.reason
