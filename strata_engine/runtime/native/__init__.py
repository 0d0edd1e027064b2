"""The native ops, installed on the model by the runtime: `build.py` (the one loader: g++ through torch's
extension cache, the verdicts' file), one module an op (`chunk_attention.py`, `routed_experts.py`,
`decode_attention.py`, `quant_decode_attention.py`, `kv_codec.py`: its switch, its C++ from strata_engine/native/, its
accessor and, for the model's ops, the hook the model calls), and `choice.py` (`install` sets the model's
hooks; `choose` races each op against its ATen path at start and keeps the faster). The model itself imports
none of it."""
