"""How bench and verify talk to engines, ours or not: one launcher (command or URL), one streaming client
that stamps every token, one server probe (families: Strata, llama.cpp, llama-cpp-python, vLLM, SGLang,
generic OpenAI), one event feed, one first-difference rule. See docs/ENGINES.md.
"""
